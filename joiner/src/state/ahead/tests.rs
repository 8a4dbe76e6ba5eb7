//! Unit tests of holding events ahead of the feature logs: what is held and when it joins, and
//! that a held event is joined as it would have been on arrival.

use proptest::prelude::*;

use super::Ahead;
use crate::event::EventKind;
use crate::state::JoinState;
use crate::state::test_support::{MIN, config, event, keys, log};

#[test]
fn an_event_ahead_of_the_logs_joins_when_its_log_comes_without_waiting_in_the_pending_table() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r0", 0, &["a"]));
    assert!(
        s.take_event(event("r1", "b", 2, EventKind::Impression))
            .is_empty()
    );
    assert_eq!(s.held_events(), 1);
    assert!(s.pending.is_empty(), "a held event is not pending");
    // Alignment sees it read.
    assert_eq!(s.input_times().events_read, Some(2 * MIN));

    let rows = s.add_features(log("r1", 1, &["a", "b"]));
    assert!(
        rows.is_empty(),
        "the log at minute 1 does not reach minute 2"
    );
    assert_eq!(s.held_events(), 1);

    let rows = s.add_features(log("r2", 2, &["c"]));
    assert_eq!(keys(&rows), [("r1".into(), "b".into())]);
    assert_eq!(rows[0].impression_time_us, Some(2 * MIN));
    assert_eq!((s.held_events(), s.pending.len()), (0, 0));
    assert_eq!(s.counts.joined, 1);
}

#[test]
fn an_event_the_logs_have_reached_is_joined_at_once() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 3, &["a"]));
    let rows = s.take_event(event("r1", "a", 3, EventKind::Impression));
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    assert_eq!(s.held_events(), 0);
}

#[test]
fn release_held_joins_everything_held_for_a_commit() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 0, &["a"]));
    s.take_event(event("r1", "a", 1, EventKind::Impression));
    s.take_event(event("r2", "x", 2, EventKind::Impression));
    assert_eq!(s.held_events(), 2);

    let rows = s.release_held();
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    // The other waits for its log in the state, where the state file keeps it.
    assert_eq!((s.held_events(), s.pending.len()), (0, 1));
    let rows = s.add_features(log("r2", 1, &["x"]));
    assert_eq!(keys(&rows), [("r2".into(), "x".into())]);
}

#[test]
fn a_quiet_feature_input_releases_the_events_its_declared_time_covers() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 0, &["a"]));
    s.take_event(event("r1", "a", 4, EventKind::Impression));
    s.take_event(event("r1", "b", 9, EventKind::Impression));
    s.features_idle(5 * MIN);
    assert_eq!(s.held_events(), 1);
    assert_eq!(s.counts.joined, 1);
}

#[test]
fn held_events_join_before_a_jump_of_the_logs_moves_the_watermark_past_their_features() {
    // The features wait 30 minutes. The next log is served an hour later: its watermark
    // expires r1's features, but the impression held at minute 1 was read before it and
    // joins, as it would have on arrival.
    let run = |hold: bool| {
        let mut s = JoinState::new(config(None));
        s.source_progress(0, 10_000 * MIN);
        s.add_features(log("r1", 0, &["a"]));
        let e = event("r1", "a", 1, EventKind::Impression);
        let mut rows = if hold {
            s.take_event(e)
        } else {
            s.add_event(e)
        };
        rows.extend(s.add_features(log("r2", 60, &["b"])));
        (keys(&rows), s.counts.joined, s.held_events())
    };
    let held = run(true);
    assert_eq!(held, run(false));
    assert_eq!(held, (vec![("r1".into(), "a".into())], 1, 0));
}

#[test]
fn a_click_read_before_its_held_impression_is_in_the_row() {
    // No label window: a row is written when its impression joins, with the clicks taken
    // before. Clicks are never held.
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 0, &["a"]));
    s.take_event(event("r1", "a", 3, EventKind::Click));
    assert_eq!(s.held_events(), 0);
    s.take_event(event("r1", "a", 2, EventKind::Impression));
    assert_eq!(s.held_events(), 1);
    let rows = s.add_features(log("r2", 3, &["b"]));
    assert_eq!(s.held_events(), 0);
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    assert_eq!(rows[0].labels.clicks, 1);
    assert_eq!(rows[0].impression_time_us, Some(2 * MIN));
}

#[test]
fn the_held_come_out_earliest_first_and_in_read_order_among_equal_times() {
    let mut ahead = Ahead::default();
    let read = [
        (5, "a"),
        (3, "b"),
        (5, "c"),
        (1, "d"),
        (7, "e"),
        (3, "f"),
        (8, "g"),
    ];
    for (at, item) in read {
        ahead.push(event("r", item, at, EventKind::Impression));
    }
    assert_eq!(ahead.len(), 7);
    let due: Vec<String> = std::iter::from_fn(|| ahead.pop_until(5 * MIN))
        .map(|e| e.item_id)
        .collect();
    assert_eq!(due, ["d", "b", "f", "a", "c"]);
    ahead.push(event("r", "h", 6, EventKind::Impression));
    let rest: Vec<String> = std::iter::from_fn(|| ahead.pop())
        .map(|e| e.item_id)
        .collect();
    assert_eq!(rest, ["h", "e", "g"]);
    assert_eq!(ahead.len(), 0);
}

proptest! {
    /// Any interleaving of holds and releases gives the events back as a stable sort by time
    /// would: earliest first, in the order read among equal times, none before its time.
    #[test]
    fn releases_as_a_stable_sort_by_time_would(
        ops in proptest::collection::vec((any::<bool>(), 0i64..8), 0..200),
    ) {
        let (mut ahead, mut reference) = (Ahead::default(), Vec::<(i64, usize)>::new());
        for (read, (hold, minute)) in ops.into_iter().enumerate() {
            if hold {
                ahead.push(event("r", &read.to_string(), minute, EventKind::Impression));
                reference.push((minute, read));
            } else {
                let due = reference
                    .iter()
                    .enumerate()
                    .filter(|(_, held)| held.0 <= minute)
                    .min_by_key(|(_, held)| **held)
                    .map(|(at, _)| at);
                let expected = due.map(|at| reference.remove(at).1.to_string());
                let got = ahead.pop_until(minute * MIN).map(|e| e.item_id);
                prop_assert_eq!(got, expected);
            }
            prop_assert_eq!(ahead.len(), reference.len());
        }
        reference.sort();
        let rest: Vec<String> = std::iter::from_fn(|| ahead.pop()).map(|e| e.item_id).collect();
        let expected: Vec<String> = reference.iter().map(|(_, read)| read.to_string()).collect();
        prop_assert_eq!(rest, expected);
    }
}
