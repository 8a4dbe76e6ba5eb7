//! The state file's pending entries (`StateHeader.pending`), encoded straight from the join
//! table: the header's largest part while impressions wait in numbers (a backlog read ahead of
//! its feature logs), and one a snapshot would otherwise build as messages of cloned strings
//! and maps at every commit, only to encode and drop them.

use prost::encoding;

use super::format::early_of;
use super::reuse::copy_or_encode;
use crate::state::table::Pending;

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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use prost::Message as _;

    use featurelog_schemas::featurelog::state::v1::{
        HeldFeatures, Pending as Reference, StateHeader,
    };

    use super::*;
    use crate::event::EventKind;
    use crate::state::JoinState;
    use crate::state::test_support::{Feed, MIN, config, event, log};

    /// The message the entry stands for, built field by field from clones: what prost would
    /// encode.
    fn reference(request: &str, item: &str, p: &Pending) -> Reference {
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

    /// The pending entries of a snapshot's header, and those the table holds, both sorted.
    fn header_and_table(s: &mut JoinState, epoch: u64) -> (Vec<Reference>, Vec<Reference>) {
        let (header, _) = snapshot_header(s, epoch);
        pending_of(s, header)
    }

    /// The pending entries of `header`, and those the table holds, both sorted.
    fn pending_of(s: &JoinState, header: StateHeader) -> (Vec<Reference>, Vec<Reference>) {
        let mut got: Vec<Reference> = header.pending;
        let mut want: Vec<Reference> = s
            .pending
            .iter()
            .map(|((r, i), p)| reference(r, i, p))
            .collect();
        let key = |p: &Reference| (p.request_id.clone(), p.item_id.clone());
        got.sort_by_key(key);
        want.sort_by_key(key);
        (got, want)
    }

    /// A snapshot's header, and the held logs' entries of the table as it stands after it.
    fn snapshot_header(s: &mut JoinState, epoch: u64) -> (StateHeader, Vec<HeldFeatures>) {
        let bytes = s.snapshot(epoch, &format!("state-{epoch}")).bytes;
        let header = StateHeader::decode_length_delimited(bytes.as_slice()).unwrap();
        assert_eq!(header.epoch, epoch, "the other fields are read too");
        let held = s
            .features
            .iter()
            .map(|(r, f)| HeldFeatures {
                request_id: r.clone(),
                expires_at: f.expires_at,
                impressed: f.impressed.iter().cloned().collect(),
                // A log the topic keeps is in no segment.
                segment: match f.log.offset() {
                    Some(_) => 0,
                    None => s.written.get(r).map_or(epoch, |&(segment, _)| segment),
                },
                offset: f.log.offset(),
            })
            .collect();
        (header, held)
    }

    /// Held logs' entries in one order, their impressed items too.
    fn sorted(mut held: Vec<HeldFeatures>) -> Vec<HeldFeatures> {
        for h in &mut held {
            h.impressed.sort();
        }
        held.sort_by(|a, b| a.request_id.cmp(&b.request_id));
        held
    }

    #[test]
    fn a_snapshot_header_decodes_to_every_entry() {
        let mut s = state();
        let (got, want) = header_and_table(&mut s, 1);
        assert_eq!(got, want);
    }

    /// What the property feeds a state: a request's feature log, an app event, the events'
    /// progress, or a snapshot.
    #[derive(Debug, Clone)]
    enum Step {
        /// Request `r{request}`'s feature log, served at `minute`.
        Features {
            request: usize,
            minute: i64,
        },
        /// Request `r{request}`, item `a`, `b` or `z` (never scored), a kind by number, a time
        /// in tenths of a minute, an event id and a label value, both optional.
        Event {
            request: usize,
            item: usize,
            kind: u8,
            tenths: i64,
            id: Option<u8>,
            label: Option<u8>,
        },
        Progress(i64),
        /// The feature logs' partition idle up to this time, in tenths of a minute: with the
        /// events' progress, it expires logs.
        FeaturesIdle(i64),
        Snapshot,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            1 => (0..8usize, 0..9i64).prop_map(|(request, minute)| Step::Features { request, minute }),
            4 => (0..8usize, 0..3usize, 0..4u8, 0..90i64, prop::option::of(0..6u8), prop::option::of(0..3u8))
                .prop_map(|(request, item, kind, tenths, id, label)| Step::Event {
                    request,
                    item,
                    kind,
                    tenths,
                    id,
                    label,
                }),
            1 => (0..450i64).prop_map(Step::Progress),
            1 => (0..450i64).prop_map(Step::FeaturesIdle),
            2 => Just(Step::Snapshot),
        ];
        prop::collection::vec(step, 1..60)
    }

    proptest! {
        #![proptest_config(crate::proptests::config(256))]

        /// Entries copied from the previous snapshot are the entries as they are now: every
        /// change to a kept field (a new event, an impression meeting its features, an item
        /// impressed, a log moved to another segment) is written, whatever the order of
        /// events, features, progress and snapshots, with a label window or without.
        #[test]
        fn every_snapshot_holds_the_table_as_it_is(
            window in prop_oneof![Just(None), Just(Some(10 * MIN))],
            steps in steps(),
        ) {
            let mut s = JoinState::new(config(window));
            let mut epoch = 0;
            for step in steps {
                match step {
                    Step::Features { request, minute } => {
                        s.add_features(log(&format!("r{request}"), minute, &["a", "b"]));
                    }
                    Step::Event { request, item, kind, tenths, id, label } => {
                        let kind = match kind {
                            0 => EventKind::Impression,
                            1 => EventKind::Click,
                            2 => EventKind::Conversion,
                            _ => EventKind::Other("share".into()),
                        };
                        let mut e = event(&format!("r{request}"), ["a", "b", "z"][item], 0, kind);
                        e.time_us = tenths * MIN / 10;
                        e.event_id = id.map(|id| format!("e{id}"));
                        if let Some(v) = label {
                            e.labels.insert(format!("l{v}"), f64::from(v) + 0.5);
                        }
                        s.add_event(e);
                    }
                    Step::Progress(t) => {
                        s.source_progress(0, t * MIN / 10);
                    }
                    Step::FeaturesIdle(t) => {
                        s.features_idle(t * MIN / 10);
                    }
                    Step::Snapshot => {
                        epoch += 1;
                        let (mut header, held) = snapshot_header(&mut s, epoch);
                        prop_assert_eq!(sorted(std::mem::take(&mut header.features)), sorted(held));
                        let (got, want) = pending_of(&s, header);
                        prop_assert_eq!(got, want);
                    }
                }
            }
        }
    }
}
