//! What only state files of formats before 4 need, kept apart so that their support can be
//! dropped as one unit once no checkpoint of an older joiner is left to restore: format 1 holds
//! every log in its own file, and formats 2 and 3 name no segment files (a segment is the state
//! file that its epoch alone named).

use std::sync::Arc;

use super::format::{SnapshotHeader, read_log};
use crate::log::{Layouts, ServedLog};
use crate::state::HashMap;

/// The file of segment `seg` in a snapshot of format 2 or 3, which names none: the state file
/// of that epoch as joiners named it then (`legacy_name`).
pub(super) fn segment_file(legacy_name: &impl Fn(u64) -> String, seg: u64) -> String {
    legacy_name(seg)
}

/// The logs of a snapshot of format 1, which holds them all after its header: those of
/// `features`, then those of `matched_only`, in that order.
pub(super) fn read_inline_logs(
    header: &SnapshotHeader,
    mut buf: &[u8],
    layouts: &mut Layouts,
) -> Result<HashMap<String, Arc<ServedLog>>, String> {
    let mut logs: HashMap<String, Arc<ServedLog>> = HashMap::default();
    for f in &header.features {
        let log =
            read_log(&mut buf, layouts).map_err(|e| format!("log of {:?}: {e}", f.request_id))?;
        logs.insert(f.request_id.clone(), Arc::new(log));
    }
    for r in &header.matched_only {
        let log = read_log(&mut buf, layouts).map_err(|e| format!("log of {r:?}: {e}"))?;
        logs.insert(r.clone(), Arc::new(log));
    }
    Ok(logs)
}

#[cfg(test)]
mod tests {
    use crate::state::snapshot::format::SnapshotHeader;
    use crate::state::test_support::{config, file, legacy, log, no_topic, read};
    use crate::state::{HashMap, JoinState};

    #[test]
    fn snapshots_of_earlier_formats_restore_from_segments_named_by_epoch() {
        use prost::Message;
        // A state file as joiners before format 4 wrote it: no segment names.
        let old = |bytes: &[u8], format: u32| -> Vec<u8> {
            let mut rest = bytes;
            let mut header = SnapshotHeader::decode_length_delimited(&mut rest).unwrap();
            assert_eq!(header.format, 4);
            header.format = format;
            header.segment_files.clear();
            let mut out = header.encode_length_delimited_to_vec();
            out.extend_from_slice(rest);
            out
        };
        let mut s = JoinState::new(config(None));
        s.add_features(log("r1", 0, &["a"]));
        let first = s.snapshot(1, &file(1));
        s.add_features(log("r2", 0, &["b"]));
        let second = s.snapshot(2, &file(2));
        for format in [2, 3] {
            let mut files: HashMap<String, Vec<u8>> = HashMap::default();
            files.insert(legacy(1), old(&first.bytes, format));
            files.insert(legacy(2), old(&second.bytes, format));
            let mut r = JoinState::restore(
                config(None),
                &files[&legacy(2)],
                legacy,
                read(&files),
                no_topic,
            )
            .unwrap();
            assert_eq!(r.requests(), 2);
            assert_eq!(r.segment_files(), [legacy(1), legacy(2)]);
            // The next snapshot names the old files it still refers to.
            r.add_features(log("r3", 1, &["c"]));
            let next = r.snapshot(3, &file(3));
            assert_eq!(next.files, [legacy(1), legacy(2), file(3)]);
            files.insert(file(3), next.bytes.clone());
            let again = JoinState::restore(
                config(None),
                &next.bytes,
                |e| format!("by-epoch/{e}"),
                read(&files),
                no_topic,
            )
            .unwrap();
            assert_eq!(again.requests(), 3);
        }
    }
}
