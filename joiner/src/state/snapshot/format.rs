//! The layout of a state file, as `schemas/proto/featurelog/state/v1/join_state.proto` states
//! it: a length-delimited [`SnapshotHeader`], then feature logs as their records' bytes, each
//! length-delimited.

pub(super) use featurelog_schemas::featurelog::state::v1::{
    EarlyLabel as SnapEarly, Emitted as SnapEmitted, StateHeader as SnapshotHeader,
    early_label::Kind as EarlyKind,
};

use crate::event::EventKind;
use crate::log::{Layouts, ServedLog};
use crate::state::table::EarlyLabel;

/// The state file format this joiner writes and reads (`StateHeader.format`). Bumped with any
/// change to the messages that an older joiner would misread; a file of another format is
/// refused at restore.
pub(super) const FORMAT: u32 = 4;

/// Reads one length-delimited feature log of a state file, keeping its bytes.
pub(super) fn read_log(buf: &mut &[u8], layouts: &mut Layouts) -> Result<ServedLog, String> {
    let len = prost::decode_length_delimiter(&mut *buf).map_err(|e| e.to_string())?;
    let bytes = buf.get(..len).ok_or("truncated feature log")?;
    *buf = &buf[len..];
    ServedLog::decode(bytes.to_vec(), layouts).map_err(|e| e.to_string())
}

/// A label event held for its impression, as a state file keeps it.
pub(super) fn early_of(e: &EarlyLabel) -> SnapEarly {
    let (kind, name) = match &e.kind {
        EventKind::Click => (EarlyKind::Click, String::new()),
        EventKind::Conversion => (EarlyKind::Conversion, String::new()),
        // An impression is never held as an early label; kept as a named event if it were.
        EventKind::Impression => (EarlyKind::Other, "impression".to_owned()),
        EventKind::Other(name) => (EarlyKind::Other, name.clone()),
    };
    SnapEarly {
        time_us: e.time_us,
        kind: kind as i32,
        name,
        values: e.values.clone(),
    }
}

/// The label event a state file kept.
pub(super) fn early_restore(e: SnapEarly) -> Result<EarlyLabel, String> {
    let kind = match EarlyKind::try_from(e.kind) {
        Ok(EarlyKind::Click) => EventKind::Click,
        Ok(EarlyKind::Conversion) => EventKind::Conversion,
        Ok(EarlyKind::Other) => EventKind::Other(e.name),
        _ => return Err(format!("unknown kind {} of an early label event", e.kind)),
    };
    Ok(EarlyLabel {
        time_us: e.time_us,
        kind,
        values: e.values,
    })
}
