//! The state file's held feature logs (`StateHeader.features`), encoded straight from the join
//! table: a request id, expiry and impressed items per held log, which a backlog read ahead
//! holds by the thousand at every commit, and which a snapshot would otherwise build as
//! messages of cloned ids and sets only to encode and drop them.

use prost::encoding;

use super::reuse::copy_or_encode;
use crate::state::table::FeatureEntry;
#[cfg(test)]
use featurelog_schemas::featurelog::state::v1::HeldFeatures;

/// `StateHeader.features`'s field number.
const FEATURES: u32 = 1;

/// Appends the entries of `features` to `out` as `StateHeader.features` fields, each byte for
/// byte what prost writes for the `featurelog.state.v1.HeldFeatures` message of the entry,
/// with its log in segment `segment_of(request, offset)`. An entry unchanged since the last
/// snapshot, its log still in the same segment, is copied from that snapshot's entries, `last`.
pub(super) fn encode_features<'a>(
    features: impl Iterator<Item = (&'a String, &'a mut FeatureEntry)>,
    last: &[u8],
    segment_of: impl Fn(&str, Option<i64>) -> u64,
    out: &mut Vec<u8>,
) {
    let mut scratch = Vec::new();
    for (request, f) in features {
        let segment = segment_of(request, f.log.offset());
        // A snapshot that compacts moves every log it writes again into its own segment.
        let (encoded, _) = f.encoded.filter(|&(_, s)| s == segment).unzip();
        let encoded = copy_or_encode(encoded, last, out, &mut scratch, FEATURES, |buf| {
            encode_entry(request, f, segment, buf)
        });
        f.encoded = encoded.map(|at| (at, segment));
    }
}

/// The body of one `HeldFeatures` message, its fields in prost's order (by field number),
/// scalar fields left out at their default as proto3 does, the optional offset written when
/// present.
pub(super) fn encode_entry(request: &String, f: &FeatureEntry, segment: u64, buf: &mut Vec<u8>) {
    if !request.is_empty() {
        encoding::string::encode(1, request, buf);
    }
    if f.expires_at != 0 {
        encoding::int64::encode(2, &f.expires_at, buf);
    }
    for item in f.item_ids(&f.impressed) {
        encoding::string::encode(3, &item, buf);
    }
    if segment != 0 {
        encoding::uint64::encode(4, &segment, buf);
    }
    if let Some(offset) = f.log.offset() {
        encoding::int64::encode(5, &offset, buf);
    }
}

/// The message the entry stands for with its log in `segment`, built field by field from
/// clones: what prost would encode.
#[cfg(test)]
pub(super) fn reference(request: &str, f: &FeatureEntry, segment: u64) -> HeldFeatures {
    HeldFeatures {
        request_id: request.to_owned(),
        expires_at: f.expires_at,
        impressed: f.item_ids(&f.impressed).collect(),
        segment,
        offset: f.log.offset(),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::event::EventKind;
    use crate::state::JoinState;
    use crate::state::test_support::{Feed, MIN, config, event, log};

    #[test]
    fn each_entry_is_byte_for_byte_what_prost_writes() {
        let mut s = JoinState::new(config(Some(10 * MIN)));
        s.add_features(log("r1", 0, &["a", "b", "c"]));
        s.add_features(log("r2", 0, &["a"]));
        s.feed(event("r1", "a", 1, EventKind::Impression));
        s.feed(event("r1", "c", 1, EventKind::Impression));
        assert_eq!(s.features.len(), 2);
        for (r, f) in &s.features {
            for segment in [0, 7] {
                let mut mine = Vec::new();
                encode_entry(r, f, segment, &mut mine);
                assert_eq!(
                    mine,
                    reference(r, f, segment).encode_to_vec(),
                    "{r} in segment {segment}"
                );
            }
        }
    }
}
