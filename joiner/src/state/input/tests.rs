//! Unit tests of taking inputs: either side first, label windows, integer candidate ids, and
//! repeated or retried events.

use featurelog_schemas::featurelog::v1::FeatureLog;

use super::served_at_us;
use crate::event::{Event, EventKind};
use crate::state::JoinState;
use crate::state::test_support::{
    Feed, MIN, config, event, keys, log, restored_from_one_checkpoint,
};

#[test]
fn either_side_may_come_first() {
    let mut s = JoinState::new(config(None));
    assert!(s.add_features(log("r1", 0, &["a", "b"])).is_empty());
    let rows = s.feed(event("r1", "b", 1, EventKind::Impression));
    assert_eq!(keys(&rows), [("r1".into(), "b".into())]);
    assert_eq!(rows[0].row, 1);

    assert!(
        s.feed(event("r2", "x", 2, EventKind::Impression))
            .is_empty()
    );
    let rows = s.add_features(log("r2", 2, &["x"]));
    assert_eq!(keys(&rows), [("r2".into(), "x".into())]);
    assert_eq!(s.counts.joined, 2);
}

#[test]
fn clicks_in_the_label_window_fold_in_and_the_row_waits_for_the_window() {
    let mut s = JoinState::new(config(Some(10 * MIN)));
    s.add_features(log("r1", 0, &["a", "b"]));
    assert!(
        s.feed(event("r1", "a", 1, EventKind::Impression))
            .is_empty()
    );
    assert!(s.feed(event("r1", "a", 3, EventKind::Click)).is_empty());
    let mut conv = event("r1", "a", 4, EventKind::Conversion);
    conv.labels.insert("revenue".into(), 12.5);
    assert!(s.feed(conv).is_empty());
    // Time moves on both inputs: the window (1 + 10 min) closes at 11.
    s.add_features(log("r9", 10, &["z"]));
    assert!(s.feed(event("r9", "z", 10, EventKind::Click)).is_empty());
    s.add_features(log("r8", 12, &["y"]));
    let rows = s.feed(event("r8", "y", 12, EventKind::Click));
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    assert_eq!(rows[0].labels.clicks, 1);
    assert_eq!(rows[0].labels.conversions, 1);
    assert_eq!(rows[0].labels.values.get("revenue"), Some(&12.5));
    assert_eq!(rows[0].impression_time_us, Some(MIN));
    // A click after the row was emitted is late, not a second row.
    assert!(s.feed(event("r1", "a", 12, EventKind::Click)).is_empty());
    assert_eq!(s.counts.late, 1);
}

#[test]
fn label_events_past_the_window_are_not_folded_whichever_side_is_read_first() {
    // Window 10 min; impression at minute 1, so the window closes at 11. A click at 3 and a
    // conversion at 11 count; a click at 12 does not, even when it is read before the
    // watermark has passed 11 or before the impression itself.
    let labels = || {
        let mut late_conv = event("r1", "a", 12, EventKind::Conversion);
        late_conv.labels.insert("revenue".into(), 99.0);
        let mut conv = event("r1", "a", 11, EventKind::Conversion);
        conv.labels.insert("revenue".into(), 12.5);
        vec![
            event("r1", "a", 3, EventKind::Click),
            event("r1", "a", 12, EventKind::Click),
            conv,
            late_conv,
            event("r1", "a", 13, EventKind::Other("share".into())),
        ]
    };
    let run = |impression_first: bool| {
        let mut s = JoinState::new(config(Some(10 * MIN)));
        s.add_features(log("r1", 0, &["a", "b"]));
        if impression_first {
            assert!(
                s.feed(event("r1", "a", 1, EventKind::Impression))
                    .is_empty()
            );
        }
        for e in labels() {
            assert!(s.feed(e).is_empty());
        }
        if !impression_first {
            assert!(
                s.feed(event("r1", "a", 1, EventKind::Impression))
                    .is_empty()
            );
        }
        // The features pass minute 11 too (the events already have): the window closes.
        let rows = s.add_features(log("r8", 14, &["y"]));
        assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
        let row = &rows[0];
        assert_eq!(
            s.counts.labels_outside_window, 3,
            "impression first: {impression_first}"
        );
        assert_eq!(s.counts.late, 0);
        (row.labels.clone(), row.impression_time_us)
    };
    let (labels_after, at) = run(true);
    assert_eq!(labels_after.clicks, 1);
    assert_eq!(labels_after.conversions, 1);
    assert!(labels_after.other.is_empty(), "{:?}", labels_after.other);
    assert_eq!(labels_after.values.get("revenue"), Some(&12.5));
    assert_eq!(at, Some(MIN));
    assert_eq!(
        run(false),
        (labels_after, at),
        "the row must not depend on which topic was read first"
    );
}

#[test]
fn integer_candidate_ids_join_by_their_decimal_text_only() {
    let mut c = config(None);
    c.negatives_rate = 1.0;
    let mut s = JoinState::new(c);
    // Over 128 candidates: lookups go through the index rather than a scan.
    let ids: Vec<i64> = (0..200).map(|i| i * 1_000_003 - 7).collect();
    s.add_features(FeatureLog {
        candidate_int_ids: ids.clone(),
        ..log("r1", 0, &[])
    });
    s.add_features(FeatureLog {
        row_count: 3,
        candidate_int_ids: vec![-7, 0, 42],
        ..log("r2", 0, &[])
    });
    let mut joined = Vec::new();
    for (request, item) in [("r1", "-7"), ("r1", "1999999"), ("r2", "42"), ("r2", "0")] {
        joined.extend(s.feed(event(request, item, 1, EventKind::Impression)));
    }
    // Not canonical decimal: no candidate.
    for item in ["042", "+42", "-0", "42.0", " 42"] {
        assert!(
            s.feed(event("r2", item, 1, EventKind::Impression))
                .is_empty()
        );
    }
    let found: Vec<(&str, &str, usize)> = joined
        .iter()
        .map(|r| (r.request_id.as_str(), r.item_id.as_str(), r.row))
        .collect();
    assert_eq!(
        found,
        [
            ("r1", "-7", 0),
            ("r1", "1999999", 2),
            ("r2", "42", 2),
            ("r2", "0", 1)
        ]
    );
    assert_eq!(s.counts.unknown_item, 5);
    s.add_features(log("late-req", 40, &["k"]));
    let rows = s.feed(event("late-req", "k", 40, EventKind::Impression));
    let mut negatives: Vec<&str> = rows
        .iter()
        .filter(|r| r.request_id == "r2" && r.impression_time_us.is_none())
        .map(|r| r.item_id.as_str())
        .collect();
    negatives.sort();
    assert_eq!(negatives, ["-7"]);
    assert_eq!(s.counts.scored_not_impressed, 198 + 1);

    // Without negatives, the same count and no rows; an id listed twice is two candidates,
    // and an impression of it covers both.
    let mut s = JoinState::new(config(None));
    s.add_features(FeatureLog {
        row_count: 3,
        candidate_int_ids: vec![-7, 0, 42],
        ..log("r2", 0, &[])
    });
    s.add_features(FeatureLog {
        row_count: 4,
        candidate_int_ids: vec![5, 6, 5, 7],
        ..log("r3", 0, &[])
    });
    s.feed(event("r2", "42", 1, EventKind::Impression));
    s.feed(event("r3", "5", 1, EventKind::Impression));
    s.feed(event("r3", "5", 2, EventKind::Impression));
    s.add_features(log("late-req", 40, &["k"]));
    let rows = s.feed(event("late-req", "k", 40, EventKind::Impression));
    assert!(rows.iter().all(|r| r.impression_time_us.is_some()));
    assert_eq!(s.counts.scored_not_impressed, 2 + 2);
    assert_eq!(s.counts.negatives, 0);
}

#[test]
fn a_repeated_impression_gives_one_row() {
    let mut s = JoinState::new(config(Some(MIN)));
    s.add_features(log("r1", 0, &["a"]));
    s.feed(event("r1", "a", 1, EventKind::Impression));
    s.feed(event("r1", "a", 1, EventKind::Impression));
    s.add_features(log("r2", 5, &["b"]));
    let rows = s.feed(event("r2", "b", 5, EventKind::Click));
    assert_eq!(rows.len(), 1);
    assert_eq!(s.counts.joined, 1);
}

#[test]
fn retried_events_count_once_per_event_id_even_across_a_restore() {
    let with_id = |mut e: Event, id: &str| {
        e.event_id = Some(id.into());
        e
    };
    let mut s = JoinState::new(config(Some(10 * MIN)));
    s.add_features(log("r1", 0, &["a", "b"]));
    let bytes = s.bytes();
    let mut impression = with_id(event("r1", "a", 1, EventKind::Impression), "imp-1");
    impression.labels.insert("dwell".into(), 4.0);
    s.feed(impression.clone());
    s.feed(with_id(event("r1", "a", 2, EventKind::Click), "click-1"));
    // The app's collector retries both.
    s.feed(impression);
    s.feed(with_id(event("r1", "a", 2, EventKind::Click), "click-1"));
    assert!(s.bytes() > bytes, "the ids count against the bound");
    let mut restored = restored_from_one_checkpoint(&mut s, config(Some(10 * MIN)));
    let later = |s: &mut JoinState| {
        // A retry read after a restart, a second real click, a click whose app gives no
        // ids (counted, as every event without one), and the close of the window.
        let mut rows = s.feed(with_id(event("r1", "a", 3, EventKind::Click), "click-1"));
        rows.extend(s.feed(with_id(event("r1", "a", 4, EventKind::Click), "click-2")));
        rows.extend(s.feed(event("r1", "a", 5, EventKind::Click)));
        rows.extend(s.add_features(log("r9", 12, &["z"])));
        rows.extend(s.feed(event("x", "y", 12, EventKind::Click)));
        rows
    };
    // Counts are this process's (for its metrics): the restored state counts from 0.
    for (s, duplicates) in [(&mut s, 3), (&mut restored, 1)] {
        let rows = later(s);
        assert_eq!(keys(&rows), [("r1".to_string(), "a".to_string())]);
        assert_eq!(
            rows[0].labels.clicks, 3,
            "click-1, click-2 and the one without id"
        );
        assert_eq!(
            rows[0].labels.values["dwell"], 4.0,
            "the retried impression adds nothing"
        );
        assert_eq!(rows[0].impression_time_us, Some(MIN));
        assert_eq!(s.counts.duplicate_events, duplicates);
    }
    // What the ids held is given back with the entry.
    s.feed(event("r1", "b", 13, EventKind::Impression));
    s.features_idle(i64::MAX / 2);
    s.source_progress(0, i64::MAX / 2);
    assert_eq!(s.bytes(), 0);
}

#[test]
fn without_a_label_window_an_impression_after_its_features_is_the_row_at_once() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 0, &["a", "b", "c"]));
    let bytes = s.bytes();
    // A click first: it waits, and the impression after it carries it into the row.
    assert!(s.feed(event("r1", "c", 1, EventKind::Click)).is_empty());
    let mut impression = event("r1", "a", 2, EventKind::Impression);
    impression.labels.insert("price".into(), 2.5);
    let rows = s.feed(impression);
    assert_eq!(keys(&rows), [("r1".to_string(), "a".to_string())]);
    assert_eq!(rows[0].row, 0);
    assert_eq!(rows[0].impression_time_us, Some(2 * MIN));
    assert_eq!(rows[0].labels.values["price"], 2.5);
    assert_eq!(rows[0].labels.clicks, 0);
    let rows = s.feed(event("r1", "c", 3, EventKind::Impression));
    assert_eq!(
        (rows[0].row, rows[0].labels.clicks),
        (2, 1),
        "the earlier click folds in"
    );
    // Once written, the same impression again and a later click are late, not rows.
    assert!(
        s.feed(event("r1", "a", 4, EventKind::Impression))
            .is_empty()
    );
    assert!(s.feed(event("r1", "a", 4, EventKind::Click)).is_empty());
    assert_eq!((s.counts.joined, s.counts.late), (2, 2));
    assert_eq!(s.bytes(), bytes, "nothing left pending");
    // What was impressed is not counted as scored-but-not-impressed at expiry.
    s.features_idle(i64::MAX / 2);
    s.source_progress(0, i64::MAX / 2);
    assert_eq!(s.requests(), 0);
    assert_eq!(s.counts.scored_not_impressed, 1);
}

#[test]
fn served_at_at_the_ends_of_the_timestamp_range_saturates() {
    let at = |seconds, nanos| {
        served_at_us(&FeatureLog {
            served_at: Some(prost_types::Timestamp { seconds, nanos }),
            ..FeatureLog::default()
        })
    };
    assert_eq!(at(i64::MAX, 999_999_999), i64::MAX);
    assert_eq!(at(i64::MIN, -999_999_999), i64::MIN);
    assert_eq!(at(1_764_439_200, 123_456_789), 1_764_439_200_123_456);
}
