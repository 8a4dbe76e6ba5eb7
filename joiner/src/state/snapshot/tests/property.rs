//! The snapshot property: whatever the order of feature logs, app events, progress and
//! snapshots, with a label window or without, every state file's header holds the join table
//! as it is, the entries it copies from the previous file included.

use proptest::prelude::*;
use prost::Message as _;

use featurelog_schemas::featurelog::state::v1::{HeldFeatures, Pending as Reference, StateHeader};

use crate::event::EventKind;
use crate::state::JoinState;
use crate::state::snapshot::{held, pending};
use crate::state::test_support::{MIN, config, event, log};

/// One repeated field of a snapshot's header: the entries it holds, and those the table holds
/// after the snapshot, both in one order.
pub(in crate::state::snapshot) struct Entries<T> {
    pub got: Vec<T>,
    pub want: Vec<T>,
}

/// Snapshots `s` as `epoch`: its header's pending entries and held logs against the table's.
pub(in crate::state::snapshot) fn snapshot_entries(
    s: &mut JoinState,
    epoch: u64,
) -> (Entries<Reference>, Entries<HeldFeatures>) {
    let bytes = s.snapshot(epoch, &format!("state-{epoch}")).bytes;
    let header = StateHeader::decode_length_delimited(bytes.as_slice()).unwrap();
    assert_eq!(header.epoch, epoch, "the other fields are read too");
    let key = |p: &Reference| (p.request_id.clone(), p.item_id.clone());
    let mut pending = Entries {
        got: header.pending,
        want: s
            .pending
            .iter()
            .map(|((r, i), p)| pending::reference(r, i, p))
            .collect(),
    };
    pending.got.sort_by_key(key);
    pending.want.sort_by_key(key);
    let held = Entries {
        got: sorted(header.features),
        want: sorted(
            s.features
                .iter()
                .map(|(r, f)| {
                    // A log the topic keeps is in no segment.
                    let segment = match f.log.offset() {
                        Some(_) => 0,
                        None => s.written.get(r).map_or(epoch, |&(segment, _)| segment),
                    };
                    held::reference(r, f, segment)
                })
                .collect(),
        ),
    };
    (pending, held)
}

/// Held logs' entries in one order, their impressed items too.
fn sorted(mut held: Vec<HeldFeatures>) -> Vec<HeldFeatures> {
    for h in &mut held {
        h.impressed.sort();
    }
    held.sort_by(|a, b| a.request_id.cmp(&b.request_id));
    held
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
                    let (pending, held) = snapshot_entries(&mut s, epoch);
                    prop_assert_eq!(pending.got, pending.want);
                    prop_assert_eq!(held.got, held.want);
                }
            }
        }
    }
}
