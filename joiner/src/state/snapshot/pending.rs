//! The state file's pending entries (`StateHeader.pending`), encoded straight from the join
//! table: the header's largest part while impressions wait in numbers (a backlog read ahead of
//! its feature logs), and one a snapshot would otherwise build as messages of cloned strings
//! and maps at every commit, only to encode and drop them.

use prost::encoding;

use super::format::early_of;
use super::reuse::copy_or_encode;
use crate::state::table::Pending;
#[cfg(test)]
use featurelog_schemas::featurelog::state::v1::Pending as Reference;

/// `StateHeader.pending`'s field number.
const PENDING: u32 = 3;

/// Appends the entries of `pending` to `out` as `StateHeader.pending` fields, each byte for
/// byte what prost writes for the `featurelog.state.v1.Pending` message of the entry. An entry
/// unchanged since the last snapshot is copied from that snapshot's entries, `last`; every
/// entry is left pointing at its bytes in `out`, for the next snapshot.
pub(super) fn encode_pending<'a>(
    pending: impl Iterator<Item = (&'a (String, String), &'a mut Pending)>,
    last: &[u8],
    out: &mut Vec<u8>,
) {
    let mut scratch = Vec::new();
    for ((request, item), p) in pending {
        p.encoded = copy_or_encode(p.encoded, last, out, &mut scratch, PENDING, |buf| {
            encode_entry(request, item, p, buf)
        });
    }
}

/// The body of one `Pending` message, its fields in prost's order (by field number), scalar
/// fields left out at their default as proto3 does, optional ones written when present.
pub(super) fn encode_entry(request: &String, item: &String, p: &Pending, buf: &mut Vec<u8>) {
    if !request.is_empty() {
        encoding::string::encode(1, request, buf);
    }
    if !item.is_empty() {
        encoding::string::encode(2, item, buf);
    }
    if let Some(us) = &p.impression_us {
        encoding::int64::encode(3, us, buf);
    }
    if p.first_us != 0 {
        encoding::int64::encode(4, &p.first_us, buf);
    }
    if p.labels.clicks != 0 {
        encoding::uint32::encode(5, &p.labels.clicks, buf);
    }
    if p.labels.conversions != 0 {
        encoding::uint32::encode(6, &p.labels.conversions, buf);
    }
    encoding::btree_map::encode(
        encoding::string::encode,
        encoding::string::encoded_len,
        encoding::uint32::encode,
        encoding::uint32::encoded_len,
        7,
        &p.labels.other,
        buf,
    );
    encoding::btree_map::encode(
        encoding::string::encode,
        encoding::string::encoded_len,
        encoding::double::encode,
        encoding::double::encoded_len,
        8,
        &p.labels.values,
        buf,
    );
    if let Some((_, row)) = &p.matched {
        encoding::uint64::encode(9, &(*row as u64), buf);
    }
    encoding::string::encode_repeated(10, &p.event_ids, buf);
    for early in &p.early {
        encoding::message::encode(11, &early_of(early), buf);
    }
}

/// The message the entry stands for, built field by field from clones: what prost would
/// encode.
#[cfg(test)]
pub(super) fn reference(request: &str, item: &str, p: &Pending) -> Reference {
    Reference {
        request_id: request.to_owned(),
        item_id: item.to_owned(),
        impression_us: p.impression_us,
        first_us: p.first_us,
        clicks: p.labels.clicks,
        conversions: p.labels.conversions,
        other: p.labels.other.clone(),
        values: p.labels.values.clone(),
        matched_row: p.matched.as_ref().map(|(_, row)| *row as u64),
        event_ids: p.event_ids.clone(),
        early: p.early.iter().map(early_of).collect(),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::event::EventKind;
    use crate::state::JoinState;
    use crate::state::snapshot::tests::property::snapshot_entries;
    use crate::state::test_support::{Feed, MIN, config, event, log};

    /// A state whose entries use every field: matched impressions with labels, label events
    /// waiting for their impression, impressions waiting for their features, event ids.
    fn state() -> JoinState {
        let mut s = JoinState::new(config(Some(10 * MIN)));
        s.add_features(log("r1", 0, &["a", "b", "c"]));
        let mut click = event("r1", "a", 2, EventKind::Click);
        click.labels.insert("dwell".into(), 3.5);
        click.event_id = Some("e-1".into());
        s.feed(click);
        s.feed(event("r1", "a", 3, EventKind::Other("share".into())));
        s.feed(event("r1", "b", 1, EventKind::Impression));
        s.feed(event("r1", "b", 2, EventKind::Conversion));
        s.feed(event("r1", "c", 1, EventKind::Impression));
        s.feed(event("r2", "x", 1, EventKind::Impression));
        let mut early = event("r3", "y", 1, EventKind::Click);
        early.labels.insert("v".into(), -0.0);
        s.feed(early);
        s
    }

    #[test]
    fn each_entry_is_byte_for_byte_what_prost_writes() {
        let s = state();
        assert!(s.pending.len() >= 4, "{}", s.pending.len());
        let mut matched = false;
        for ((request, item), p) in &s.pending {
            matched |= p.matched.is_some();
            let mut mine = Vec::new();
            encode_entry(request, item, p, &mut mine);
            assert_eq!(
                mine,
                reference(request, item, p).encode_to_vec(),
                "{request} {item}"
            );
        }
        assert!(matched, "no entry was matched");
    }

    #[test]
    fn a_snapshot_header_decodes_to_every_entry() {
        let mut s = state();
        let (pending, _) = snapshot_entries(&mut s, 1);
        assert_eq!(pending.got, pending.want);
    }
}
