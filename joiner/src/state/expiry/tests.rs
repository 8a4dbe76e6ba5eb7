//! Unit tests of the watermark and what leaves the state: windows, waits, negatives, the
//! memory bound, idle inputs and events partitions read unevenly.

use super::negative_sampled;
use crate::event::EventKind;
use crate::state::table::{CANDIDATE_BYTES, ENTRY_BYTES, pending_bytes};
use crate::state::test_support::{Feed, MIN, config, event, file, keys, log, no_topic};
use crate::state::{JoinState, Labels, Row};

#[test]
fn expiries_are_counted_by_outcome_and_negatives_sampled() {
    let mut c = config(None);
    c.negatives_rate = 1.0;
    let mut s = JoinState::new(c);
    s.add_features(log("r1", 0, &["a", "b", "c"]));
    s.feed(event("r1", "a", 1, EventKind::Impression));
    s.feed(event("lost", "q", 1, EventKind::Impression));
    s.feed(event("r1", "zzz", 1, EventKind::Impression));
    // Both inputs reach minute 40: r1's features (30 min) and the lost impression (5 min)
    // have expired.
    s.add_features(log("late-req", 40, &["k"]));
    let rows = s.feed(event("late-req", "k", 40, EventKind::Impression));
    let negatives: Vec<_> = rows
        .iter()
        .filter(|r| r.impression_time_us.is_none())
        .map(|r| r.item_id.as_str())
        .collect();
    let mut negatives = negatives;
    negatives.sort();
    assert_eq!(negatives, ["b", "c"]);
    assert_eq!(s.counts.scored_not_impressed, 2);
    assert_eq!(s.counts.negatives, 2);
    assert_eq!(s.counts.impression_without_features, 1);
    assert_eq!(s.counts.unknown_item, 1);
    assert_eq!(s.counts.joined, 2);
}

#[test]
fn an_impression_waits_the_impressions_wait_of_watermark_for_its_features() {
    // features-wait 30 min, impressions-wait 5 min. An impression at minute 10 whose
    // request was served at 9, but whose features are read only once the inputs have
    // reached minute 10 + `later` (the features stream lagging). `features_side`: whether
    // the features input moved too, or only the events' (the watermark is the lower).
    let run = |later: i64, features_side: bool| {
        let mut s = JoinState::new(config(None));
        assert!(
            s.feed(event("r1", "a", 10, EventKind::Impression))
                .is_empty()
        );
        if features_side {
            assert!(s.add_features(log("tick", 10 + later, &["z"])).is_empty());
        }
        assert!(s.source_progress(0, (10 + later) * MIN).is_empty());
        let rows = s.add_features(log("r1", 9, &["a", "b"]));
        (keys(&rows), rows, s)
    };
    let (joined, rows, s) = run(4, true);
    assert_eq!(
        joined,
        [("r1".into(), "a".into())],
        "4 min < 5 min: it joins"
    );
    assert_eq!(rows[0].impression_time_us, Some(10 * MIN));
    assert_eq!(s.counts.impression_without_features, 0);

    let (joined, _, mut s) = run(6, true);
    assert!(
        joined.is_empty(),
        "6 min > 5 min: the impression gave up, though features wait 30"
    );
    assert_eq!(s.counts.impression_without_features, 1);
    assert_eq!(s.counts.joined, 0);
    // The features that came too late see no impression of `a`: at their expiry (9 + 30)
    // both candidates are scored but not impressed.
    s.add_features(log("tick2", 40, &["z"]));
    s.source_progress(0, 40 * MIN);
    assert_eq!(s.counts.scored_not_impressed, 2);

    let (joined, _, s) = run(6, false);
    assert_eq!(
        joined,
        [("r1".into(), "a".into())],
        "the events alone at 16 do not close the wait: the features input has not passed 15"
    );
    assert_eq!(s.counts.impression_without_features, 0);
}

#[test]
fn features_wait_the_features_wait_from_served_at_whatever_the_inputs_interleave() {
    // r1 served at 0 (features-wait 30 min): its impression at 29 joins, its impression at
    // 31 never does, however the two inputs were interleaved when it was read.
    #[derive(Debug, Clone, Copy)]
    enum Order {
        /// Both inputs pass 30 (r1's features expire) before the impression at 31.
        WatermarkFirst,
        /// The features input is still at 0 when the impression at 31 is read.
        FeaturesBehind,
        /// Both impressions are read before r1's features.
        EventsFirst,
    }
    let run = |order: Order| {
        let mut s = JoinState::new(config(None));
        let mut rows = Vec::new();
        if !matches!(order, Order::EventsFirst) {
            rows.extend(s.add_features(log("r1", 0, &["a", "b"])));
        }
        rows.extend(s.feed(event("r1", "a", 29, EventKind::Impression)));
        match order {
            Order::WatermarkFirst => {
                rows.extend(s.add_features(log("tick", 30, &["z"])));
                rows.extend(s.source_progress(0, 30 * MIN));
                assert_eq!(s.watermark_us(), 30 * MIN);
                assert_eq!(s.requests(), 1, "r1's features expired at 0 + 30");
            }
            Order::FeaturesBehind => assert_eq!(s.watermark_us(), 0),
            Order::EventsFirst => {}
        }
        rows.extend(s.feed(event("r1", "b", 31, EventKind::Impression)));
        if matches!(order, Order::EventsFirst) {
            assert_eq!(s.watermark_us(), i64::MIN, "no features read yet");
            rows.extend(s.add_features(log("r1", 0, &["a", "b"])));
        }
        // Both inputs pass the impression's own wait (31 + 5).
        rows.extend(s.add_features(log("tick2", 40, &["z"])));
        rows.extend(s.source_progress(0, 40 * MIN));
        let out: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.request_id.clone(),
                    r.item_id.clone(),
                    r.impression_time_us,
                )
            })
            .collect();
        (out, s.counts)
    };
    let (rows, counts) = run(Order::WatermarkFirst);
    assert_eq!(rows, [("r1".into(), "a".into(), Some(29 * MIN))]);
    assert_eq!(counts.joined, 1);
    assert_eq!(
        counts.impression_without_features, 1,
        "the impression at 31"
    );
    assert_eq!(counts.scored_not_impressed, 1, "b, at r1's expiry");
    for order in [Order::FeaturesBehind, Order::EventsFirst] {
        assert_eq!(run(order), (rows.clone(), counts.clone()), "{order:?}");
    }
}

#[test]
fn half_of_the_candidates_become_negatives_chosen_by_fnv_1a_of_request_and_item() {
    let mut c = config(None);
    c.negatives_rate = 0.5;
    let items: Vec<String> = (0..10).map(|j| format!("item-{j}")).collect();
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    // 200 requests of 10 candidates, `item-0` impressed in each; then both inputs pass
    // every expiry. `reversed`: the same inputs in the opposite order.
    let run = |reversed: bool| {
        let mut s = JoinState::new(c.clone());
        let mut requests: Vec<String> = (0..200).map(|i| format!("req-{i}")).collect();
        if reversed {
            requests.reverse();
        }
        let mut rows = Vec::new();
        for r in &requests {
            rows.extend(s.add_features(log(r, 0, &items)));
            rows.extend(s.feed(event(r, "item-0", 1, EventKind::Impression)));
        }
        rows.extend(s.add_features(log("tick", 40, &["z"])));
        rows.extend(s.source_progress(0, 40 * MIN));
        (rows, s.counts)
    };
    let (rows, counts) = run(false);
    let negatives: Vec<&Row> = rows.iter().filter(|r| r.item_id != "item-0").collect();
    assert_eq!(counts.scored_not_impressed, 200 * 9);
    assert_eq!(counts.negatives, negatives.len() as u64);
    let fraction = negatives.len() as f64 / 1800.0;
    assert!((0.45..=0.55).contains(&fraction), "{fraction}");
    // Computed apart from this code (Python, FNV-1a 64 of "req-N/item-M", whose value
    // mod 10^6 is below 500000): 890 negatives; req-0 and req-1 keep these.
    assert_eq!(negatives.len(), 890);
    let of = |request: &str| {
        let mut kept: Vec<&str> = negatives
            .iter()
            .filter(|r| r.request_id == request)
            .map(|r| r.item_id.as_str())
            .collect();
        kept.sort_unstable();
        kept
    };
    assert_eq!(
        of("req-0"),
        ["item-1", "item-3", "item-5", "item-6", "item-8", "item-9"]
    );
    assert_eq!(
        of("req-1"),
        ["item-1", "item-2", "item-4", "item-7", "item-9"]
    );
    // Next to the threshold: "req-9/item-4" hashes to 499960, "req-65/item-8" to 500398.
    assert!(of("req-9").contains(&"item-4"));
    assert!(!of("req-65").contains(&"item-8"));
    // A lower rate keeps a subset: "req-0/item-6" (374023) is out at 0.25, in at 0.375.
    assert!(!negative_sampled("req-0", "item-6", 0.25));
    assert!(negative_sampled("req-0", "item-6", 0.375));

    for r in &negatives {
        assert_eq!(r.impression_time_us, None, "{}/{}", r.request_id, r.item_id);
        assert_eq!(r.labels, Labels::default());
        assert_eq!(
            r.features.candidate_id(r.row).map(|c| c.to_string()),
            Some(r.item_id.clone()),
            "a negative's row is its candidate's"
        );
    }
    let negative_rows: Vec<Row> = negatives.iter().map(|r| (*r).clone()).collect();
    let batch =
        crate::rows::to_record_batch(&negative_rows, &crate::rows::InMemoryColumns::default())
            .unwrap();
    use arrow_array::cast::AsArray;
    let impressed = batch.column_by_name("impressed").unwrap().as_boolean();
    assert_eq!(
        impressed.true_count(),
        0,
        "negatives are written impressed = false"
    );
    assert_eq!(batch.num_rows(), 890);

    // The same inputs in another order (and other hash seeds) give the same negatives.
    let chosen = |rows: &[Row]| {
        let mut out: Vec<(String, String)> = rows
            .iter()
            .filter(|r| r.impression_time_us.is_none())
            .map(|r| (r.request_id.clone(), r.item_id.clone()))
            .collect();
        out.sort();
        out
    };
    let (again, again_counts) = run(true);
    assert_eq!(chosen(&again), chosen(&rows));
    assert_eq!(again_counts, counts);
}

#[test]
fn the_watermark_never_moves_back() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 20, &["a"]));
    s.feed(event("r1", "a", 20, EventKind::Impression));
    let wm = s.watermark_us();
    assert_eq!(wm, 20 * MIN);
    s.add_features(log("r2", 3, &["a"]));
    s.feed(event("r2", "a", 3, EventKind::Impression));
    assert_eq!(s.watermark_us(), wm);
}

#[test]
fn the_memory_bound_evicts_the_oldest_features_first() {
    let mut c = config(None);
    let one = prost::Message::encoded_len(&log("r0", 0, &["a"])) + ENTRY_BYTES + CANDIDATE_BYTES;
    c.max_bytes = one * 2 + one / 2;
    let mut s = JoinState::new(c);
    for (i, r) in ["r0", "r1", "r2", "r3"].iter().enumerate() {
        s.add_features(log(r, i as i64, &["a"]));
    }
    assert_eq!(s.counts.evicted, 2);
    assert_eq!(s.requests(), 2);
    assert!(s.bytes() <= s.config.max_bytes);
    let mut held: Vec<&str> = s.features.keys().map(String::as_str).collect();
    held.sort_unstable();
    assert_eq!(
        held,
        ["r2", "r3"],
        "the two served first are the ones evicted"
    );
    // The newest survived and still joins.
    assert_eq!(s.feed(event("r3", "a", 3, EventKind::Impression)).len(), 1);
}

#[test]
fn the_memory_bound_evicts_by_event_time_across_logs_and_waiting_impressions() {
    // A log served at minute 0 expires at 30; an impression at 20 waiting for features is
    // due at 25. By event time the log is the older, so it goes first, though the
    // impression would leave the state sooner.
    let mut c = config(None);
    let one = prost::Message::encoded_len(&log("r0", 0, &["a"])) + ENTRY_BYTES + CANDIDATE_BYTES;
    let waiting = pending_bytes(&("r2".to_owned(), "b".to_owned()));
    c.max_bytes = one + waiting + waiting / 2;
    let mut s = JoinState::new(c);
    s.add_features(log("r0", 0, &["a"]));
    s.feed(event("r2", "b", 20, EventKind::Impression));
    assert_eq!(s.counts.evicted, 0, "both fit");
    s.feed(event("r3", "c", 21, EventKind::Impression));
    assert_eq!(s.counts.evicted, 1);
    assert!(
        !s.features.contains_key("r0"),
        "the log served at 0 is the oldest"
    );
    let mut waiting: Vec<&str> = s.pending.keys().map(|(r, _)| r.as_str()).collect();
    waiting.sort_unstable();
    assert_eq!(waiting, ["r2", "r3"]);
    // The impression at 20 still joins when its features come.
    assert_eq!(s.add_features(log("r2", 20, &["b"])).len(), 1);
}

#[test]
fn impressions_whose_features_never_come_cannot_fill_the_memory_bound() {
    let mut c = config(None);
    let one = prost::Message::encoded_len(&log("r0", 0, &["a"])) + ENTRY_BYTES + CANDIDATE_BYTES;
    c.max_bytes = one * 3;
    let mut s = JoinState::new(c);
    // Long ids from an app: they count against the bound.
    let long = "x".repeat(4096);
    for i in 0..20 {
        s.feed(event(&format!("{long}-{i}"), "a", 1, EventKind::Impression));
    }
    assert!(s.bytes() <= s.config.max_bytes, "{} bytes", s.bytes());
    assert!(s.counts.evicted > 0);
    // A feature log and its impression still join: the bound is not spent on entries
    // that will never join.
    // Each of those entries alone is over the bound: every one was evicted on arrival.
    assert_eq!(s.counts.evicted, 20);
    s.add_features(log("r1", 2, &["a"]));
    assert_eq!(s.feed(event("r1", "a", 2, EventKind::Impression)).len(), 1);
    assert_eq!(
        s.counts.evicted, 20,
        "the log and its row fit without evicting"
    );
}

#[test]
fn an_idle_advance_closes_windows_when_traffic_stops() {
    let mut s = JoinState::new(config(Some(10 * MIN)));
    s.add_features(log("r1", 0, &["a"]));
    assert!(
        s.feed(event("r1", "a", 1, EventKind::Impression))
            .is_empty()
    );
    assert!(
        s.advance().is_empty(),
        "no new events: the window stays open"
    );
    assert!(
        s.features_idle(12 * MIN).is_empty(),
        "the events partition has not said it is quiet"
    );
    let rows = s.source_progress(0, 12 * MIN);
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    assert!(s.features_idle(5 * MIN).is_empty());
    assert!(s.source_progress(0, 5 * MIN).is_empty());
    assert_eq!(s.watermark_us(), 12 * MIN, "never back");
}

#[test]
fn an_events_topic_that_gains_a_partition_holds_the_watermark_until_it_reports() {
    let mut s = JoinState::new(config(Some(2 * MIN)));
    s.add_features(log("r1", 0, &["a"]));
    s.add_features(log("r2", 20, &["b"]));
    assert!(s.source_progress(0, MIN).is_empty());
    assert_eq!(s.watermark_us(), MIN);
    // A second partition appears; the first one's progress alone no longer moves it.
    s.set_event_sources(2);
    assert!(s.source_progress(0, 10 * MIN).is_empty());
    assert_eq!(s.watermark_us(), MIN, "partition 1 has not reported");
    // An impression in the new partition, older than partition 0's progress: not late.
    assert!(
        s.add_event(event("r1", "a", 2, EventKind::Impression))
            .is_empty()
    );
    let rows = s.source_progress(1, 10 * MIN);
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    assert_eq!(s.watermark_us(), 10 * MIN);
    // Never fewer.
    s.set_event_sources(1);
    assert!(s.source_progress(0, 12 * MIN).is_empty());
    assert_eq!(s.watermark_us(), 10 * MIN, "partition 1 still counts");
}

#[test]
fn one_events_partition_read_ahead_of_another_does_not_close_windows() {
    let mut c = config(Some(2 * MIN));
    c.event_sources = 2;
    let mut s = JoinState::new(c.clone());
    s.add_features(log("r1", 0, &["a"]));
    s.add_features(log("r2", 30, &["b"]));
    // Partition 0 is routed far ahead (a backlog read first, say); partition 1 has not
    // reported at all yet.
    assert!(
        s.add_event(event("r1", "a", 1, EventKind::Impression))
            .is_empty()
    );
    assert!(s.source_progress(0, 30 * MIN).is_empty());
    assert_eq!(s.watermark_us(), i64::MIN, "partition 1 has not reported");
    // Partition 1's click for r1 comes later in wall time, but within the label window.
    assert!(
        s.add_event(event("r1", "a", 2, EventKind::Click))
            .is_empty()
    );
    let rows = s.source_progress(1, 2 * MIN);
    assert!(rows.is_empty(), "the window closes at minute 3");
    let rows = s.source_progress(1, 4 * MIN);
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    assert_eq!(
        rows[0].labels.clicks, 1,
        "the slower partition's click is in the row"
    );
    assert_eq!(s.watermark_us(), 4 * MIN);
    // The progress survives a snapshot.
    let mut r = JoinState::restore(
        c,
        &s.snapshot(1, &file(1)).bytes,
        |_: &str| unreachable!(),
        no_topic,
    )
    .unwrap();
    assert_eq!(r.watermark_us(), 4 * MIN);
    r.add_event(event("r2", "b", 31, EventKind::Impression));
    assert!(
        r.source_progress(1, 40 * MIN).is_empty(),
        "partition 0 is at 30"
    );
    assert_eq!(r.watermark_us(), 30 * MIN);
}

#[test]
fn quiet_features_let_the_events_side_move_the_watermark() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 0, &["a"]));
    // Events keep coming but no features do: without the idle signal the features' side
    // holds the watermark at their newest served time.
    s.feed(event("x", "q", 50, EventKind::Click));
    assert_eq!(s.watermark_us(), 0);
    s.features_idle(45 * MIN);
    assert_eq!(s.watermark_us(), 45 * MIN);
    assert_eq!(
        s.counts.scored_not_impressed, 1,
        "r1's features expired at 30"
    );
}
