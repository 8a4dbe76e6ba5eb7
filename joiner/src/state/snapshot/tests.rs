//! Unit tests of snapshots and restores: a restored state goes on as the original would, logs
//! are written once into segments or named by their offset in the feature-log topic, and
//! mostly dead segments are compacted.

use std::collections::{BTreeMap, BTreeSet};

use featurelog_schemas::featurelog::v1::FeatureLog;

use crate::event::EventKind;
use crate::log::ServedLog;
use crate::state::test_support::{
    Feed, MIN, config, event, file, file_of, keys, log, no_topic, read,
    restored_from_one_checkpoint,
};
use crate::state::{HashMap, JoinState};

pub(super) mod property;

/// A feature-log partition: the records at their offsets.
type Partition = BTreeMap<i64, Vec<u8>>;

/// Takes `log` as the runtime does when the topic keeps the logs: with its offset.
fn add_at(s: &mut JoinState, topic: &mut Partition, offset: i64, log: FeatureLog) {
    use prost::Message;
    topic.insert(offset, log.encode_to_vec());
    s.add_features(ServedLog::from(log).with_offset(offset));
}

/// Serves the records a restore asks for that `topic` has.
fn read_from(
    topic: &Partition,
) -> impl FnOnce(&BTreeSet<i64>) -> Result<std::collections::HashMap<i64, Vec<u8>>, String> + '_ {
    move |offsets| {
        Ok(offsets
            .iter()
            .filter_map(|o| topic.get(o).map(|b| (*o, b.clone())))
            .collect())
    }
}

/// The requests whose logs a state file holds.
fn logs_in(file: &[u8]) -> Vec<String> {
    use prost::Message;
    let mut b = file;
    let len = prost::decode_length_delimiter(&mut b).unwrap();
    b = &b[len..];
    let mut out = Vec::new();
    while !b.is_empty() {
        out.push(
            FeatureLog::decode_length_delimited(&mut b)
                .unwrap()
                .request_id,
        );
    }
    out.sort();
    out
}

#[test]
fn label_events_waiting_for_their_impression_survive_a_restore() {
    let mut s = JoinState::new(config(Some(10 * MIN)));
    s.add_features(log("r1", 0, &["a"]));
    let mut click = event("r1", "a", 2, EventKind::Click);
    click.labels.insert("dwell".into(), 3.0);
    s.feed(click);
    s.feed(event("r1", "a", 30, EventKind::Other("share".into())));
    let bytes_before = s.bytes;
    let mut r = restored_from_one_checkpoint(&mut s, config(Some(10 * MIN)));
    assert_eq!(
        r.bytes, bytes_before,
        "the early events are accounted as before"
    );
    assert!(
        r.feed(event("r1", "a", 1, EventKind::Impression))
            .is_empty()
    );
    let rows = r.add_features(log("r8", 14, &["y"]));
    assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
    assert_eq!(rows[0].labels.clicks, 1);
    assert_eq!(rows[0].labels.values.get("dwell"), Some(&3.0));
    assert!(rows[0].labels.other.is_empty());
    assert_eq!(
        r.counts.labels_outside_window, 1,
        "the share at 30 is past 1 + 10"
    );
}

#[test]
fn a_restored_state_continues_exactly_like_the_original() {
    let run = |restore_midway: bool| {
        let mut s = JoinState::new(config(Some(10 * MIN)));
        let mut rows = Vec::new();
        rows.extend(s.add_features(log("r1", 0, &["a", "b", "c"])));
        rows.extend(s.feed(event("r1", "a", 1, EventKind::Impression)));
        rows.extend(s.feed(event("r1", "b", 2, EventKind::Click)));
        rows.extend(s.feed(event("r2", "x", 2, EventKind::Impression)));
        if restore_midway {
            s = JoinState::restore(
                config(Some(10 * MIN)),
                &s.snapshot(1, &file(1)).bytes,
                |_: &str| unreachable!("everything is in the one file"),
                no_topic,
            )
            .unwrap();
        }
        s.assert_index();
        rows.extend(s.feed(event("r1", "a", 3, EventKind::Click)));
        rows.extend(s.feed(event("r1", "b", 3, EventKind::Impression)));
        rows.extend(s.add_features(log("r2", 4, &["x"])));
        rows.extend(s.add_features(log("r9", 40, &["z"])));
        rows.extend(s.feed(event("r9", "z", 40, EventKind::Click)));
        s.assert_index();
        let mut out: Vec<_> = rows
            .into_iter()
            .map(|r| {
                (
                    r.request_id,
                    r.item_id,
                    r.row,
                    r.impression_time_us,
                    r.labels,
                )
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    };
    let straight = run(false);
    assert_eq!(straight.len(), 3);
    assert_eq!(run(true), straight);
}

#[test]
fn snapshots_write_each_log_once_and_restore_from_their_segments() {
    let mut files: HashMap<String, Vec<u8>> = HashMap::default();
    let mut s = JoinState::new(config(Some(10 * MIN)));
    for r in ["r1", "r2", "r3", "r4", "r5"] {
        s.add_features(log(r, 0, &["a", "b"]));
    }
    s.add_features(log("r6", 20, &["a", "b"]));
    let first = s.snapshot(1, &file(1));
    assert_eq!(first.segments, [1]);
    assert_eq!(first.files, [file(1)]);
    files.insert(file(1), first.bytes.clone());

    s.add_features(log("r7", 21, &["c"]));
    s.feed(event("r6", "a", 22, EventKind::Impression));
    let second = s.snapshot(2, &file(2));
    assert_eq!(
        second.segments,
        [1, 2],
        "r7's log is new, the others are in 1"
    );
    assert_eq!(logs_in(&first.bytes).len(), 6);
    assert_eq!(
        logs_in(&second.bytes),
        ["r7"],
        "only the new log is written"
    );
    assert_eq!(second.files, [file(1), file(2)]);
    files.insert(file(2), second.bytes.clone());
    let mut restored = JoinState::restore(
        config(Some(10 * MIN)),
        &second.bytes,
        read(&files),
        no_topic,
    )
    .unwrap();
    assert_eq!(restored.segment_files(), [file(1), file(2)]);

    // Both go on the same way: r1..r5 expire, r6's impression is emitted.
    let later = |s: &mut JoinState| {
        let mut rows = s.feed(event("r7", "c", 35, EventKind::Impression));
        rows.extend(s.add_features(log("r8", 60, &["d"])));
        rows.extend(s.feed(event("x", "y", 60, EventKind::Click)));
        keys(&rows)
    };
    let rows = later(&mut s);
    assert_eq!(rows, [("r6".into(), "a".into()), ("r7".into(), "c".into())]);
    assert_eq!(later(&mut restored), rows);
    assert_eq!(
        restored.counts.scored_not_impressed,
        s.counts.scored_not_impressed
    );

    // Now segment 1 and 2 hold only dead logs and r8 is new: nothing old is referenced.
    let third = s.snapshot(3, &file(3));
    assert_eq!(third.segments, [3]);
    files.clear();
    files.insert(file(3), third.bytes.clone());
    let r =
        JoinState::restore(config(Some(10 * MIN)), &third.bytes, read(&files), no_topic).unwrap();
    assert_eq!(r.requests(), 1);
}

#[test]
fn logs_the_topic_keeps_are_named_by_offset_and_read_back_on_restore() {
    let mut topic = Partition::new();
    let mut s = JoinState::new(config(Some(10 * MIN)));
    add_at(&mut s, &mut topic, 100, log("r1", 0, &["a", "b"]));
    add_at(&mut s, &mut topic, 101, log("r2", 0, &["a", "b"]));
    // A log with no offset (the topic might not keep it) is copied as before.
    s.add_features(log("r3", 1, &["c"]));
    // r1's impression matched and waits for its label window.
    s.feed(event("r1", "a", 1, EventKind::Impression));
    let first = s.snapshot(1, &file(1));
    assert_eq!(logs_in(&first.bytes), ["r3"], "only r3's bytes are copied");
    assert_eq!(first.segments, [1]);

    let mut asked = BTreeSet::new();
    let mut restored = JoinState::restore(
        config(Some(10 * MIN)),
        &first.bytes,
        |f: &str| Err(format!("segment {f} should not be read")),
        |offsets: &BTreeSet<i64>| {
            asked = offsets.clone();
            read_from(&topic)(offsets)
        },
    )
    .unwrap();
    assert_eq!(asked, BTreeSet::from([100, 101]));
    assert_eq!(restored.counts.lost_on_restore, 0);

    let later = |s: &mut JoinState| {
        let mut rows = s.feed(event("r1", "a", 3, EventKind::Click));
        rows.extend(s.feed(event("r2", "b", 3, EventKind::Impression)));
        rows.extend(s.feed(event("r3", "c", 4, EventKind::Impression)));
        rows.extend(s.add_features(log("r9", 40, &["z"])));
        rows.extend(s.feed(event("r9", "z", 40, EventKind::Click)));
        rows.into_iter()
            .map(|r| (r.request_id, r.item_id, r.row, r.labels.clicks))
            .collect::<Vec<_>>()
    };
    let rows = later(&mut s);
    assert_eq!(rows.len(), 3);
    assert_eq!(later(&mut restored), rows);
    assert_eq!(restored.counts.joined, s.counts.joined);
    // The restored logs keep their offsets: the next snapshot copies none of them, only
    // r9's, which came with none.
    add_at(&mut restored, &mut topic, 102, log("r4", 41, &["d"]));
    assert_eq!(logs_in(&restored.snapshot(2, &file(2)).bytes), ["r9"]);
}

#[test]
fn a_log_the_topic_no_longer_has_is_counted_lost_and_its_impressions_find_no_features() {
    let mut topic = Partition::new();
    let mut s = JoinState::new(config(Some(10 * MIN)));
    add_at(&mut s, &mut topic, 5, log("r1", 0, &["a"]));
    add_at(&mut s, &mut topic, 6, log("r2", 0, &["a"]));
    s.feed(event("r1", "a", 1, EventKind::Impression));
    let snapshot = s.snapshot(1, &file(1));
    // Retention deleted offset 5 before the restore.
    topic.remove(&5);
    let mut r = JoinState::restore(
        config(Some(10 * MIN)),
        &snapshot.bytes,
        |_: &str| unreachable!(),
        read_from(&topic),
    )
    .unwrap();
    assert_eq!(r.counts.lost_on_restore, 1);
    assert_eq!(r.requests(), 1);
    let mut rows = r.feed(event("r2", "a", 2, EventKind::Impression));
    rows.extend(r.add_features(log("r9", 40, &["z"])));
    rows.extend(r.feed(event("r9", "z", 40, EventKind::Click)));
    assert_eq!(keys(&rows), [("r2".into(), "a".into())]);
    assert_eq!(r.counts.impression_without_features, 1, "r1's impression");
}

#[test]
fn a_restore_refuses_a_topic_whose_offsets_hold_other_requests() {
    let mut topic = Partition::new();
    let mut s = JoinState::new(config(None));
    add_at(&mut s, &mut topic, 0, log("r1", 0, &["a"]));
    let snapshot = s.snapshot(1, &file(1));
    // The topic was deleted and created again: offset 0 is someone else's record now.
    let mut other = Partition::new();
    add_at(
        &mut JoinState::new(config(None)),
        &mut other,
        0,
        log("q", 0, &["a"]),
    );
    let err = JoinState::restore(
        config(None),
        &snapshot.bytes,
        |_: &str| unreachable!(),
        read_from(&other),
    )
    .err()
    .unwrap();
    assert!(err.contains("created again"), "{err}");
}

#[test]
fn a_snapshot_compacts_segments_that_are_mostly_dead() {
    let mut files: HashMap<String, Vec<u8>> = HashMap::default();
    let mut s = JoinState::new(config(None));
    for r in ["r1", "r2", "r3", "r4", "r5"] {
        s.add_features(log(r, 0, &["a", "b", "c", "d"]));
    }
    s.add_features(log("r6", 20, &["a"]));
    files.insert(file(1), s.snapshot(1, &file(1)).bytes);
    s.add_features(log("r7", 21, &["a"]));
    files.insert(file(2), s.snapshot(2, &file(2)).bytes);
    // r1..r5 expire at 30; r6 lives on, alone in segment 1.
    s.feed(event("x", "y", 31, EventKind::Click));
    s.features_idle(31 * MIN);
    assert_eq!(s.requests(), 2);
    let third = s.snapshot(3, &file(3));
    assert_eq!(
        third.segments,
        [3],
        "the live logs were written again into 3"
    );
    assert_eq!(logs_in(&third.bytes), ["r6", "r7"]);
    let r = JoinState::restore(
        config(None),
        &third.bytes,
        |f: &str| Err(format!("segment {f} should not be read")),
        no_topic,
    )
    .unwrap();
    assert_eq!(r.requests(), 2);
    let rows = {
        let mut r = r;
        r.feed(event("r6", "a", 32, EventKind::Impression))
    };
    assert_eq!(keys(&rows), [("r6".into(), "a".into())]);
}

#[test]
fn a_restore_reads_each_segment_from_the_file_the_snapshot_names() {
    let mut files: HashMap<String, Vec<u8>> = HashMap::default();
    // The owner (writer b) committed epoch 1.
    let mut owner = JoinState::new(config(None));
    owner.add_features(log("r0", 0, &["a"]));
    let first = owner.snapshot(1, &file_of("b", 1));
    files.insert(file_of("b", 1), first.bytes.clone());
    // A zombie (writer a) holds the same state; both read different logs for epoch 2.
    let mut zombie =
        JoinState::restore(config(None), &first.bytes, read(&files), no_topic).unwrap();
    owner.add_features(log("owner", 1, &["o"]));
    zombie.add_features(log("zombie", 1, &["z"]));
    let second = owner.snapshot(2, &file_of("b", 2));
    files.insert(file_of("b", 2), second.bytes.clone());
    // The owner committed epoch 2; the zombie writes its own file of epoch 2 late.
    let late = zombie.snapshot(2, &file_of("a", 2));
    assert_eq!(logs_in(&late.bytes), ["zombie"]);
    files.insert(file_of("a", 2), late.bytes);
    // The owner's next snapshot refers to its own file of epoch 2, by name.
    owner.add_features(log("r3", 2, &["c"]));
    let third = owner.snapshot(3, &file_of("b", 3));
    assert_eq!(
        third.files,
        [file_of("b", 1), file_of("b", 2), file_of("b", 3)]
    );
    files.insert(file_of("b", 3), third.bytes.clone());
    let mut r = JoinState::restore(config(None), &third.bytes, read(&files), no_topic).unwrap();
    assert_eq!(r.requests(), 3);
    assert_eq!(
        keys(&r.feed(event("owner", "o", 3, EventKind::Impression))),
        [("owner".to_string(), "o".to_string())]
    );
    assert!(
        r.feed(event("zombie", "z", 3, EventKind::Impression))
            .is_empty(),
        "the zombie's log is not in the owner's state"
    );
}

#[test]
fn a_state_file_of_another_format_is_refused_with_both_formats_named() {
    use super::format::{FORMAT, SnapshotHeader};
    use prost::Message;
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 0, &["a"]));
    let snap = s.snapshot(1, &file(1));
    let mut rest = snap.bytes.as_slice();
    let mut header = SnapshotHeader::decode_length_delimited(&mut rest).unwrap();
    header.format = FORMAT - 1;
    let mut older = header.encode_length_delimited_to_vec();
    older.extend_from_slice(rest);
    let mut files: HashMap<String, Vec<u8>> = HashMap::default();
    files.insert(file(1), older.clone());
    let Err(e) = JoinState::restore(config(None), &older, read(&files), no_topic) else {
        panic!("a state file of format {} was restored", FORMAT - 1);
    };
    assert_eq!(
        e,
        format!(
            "state file format {} (this joiner reads format {FORMAT})",
            FORMAT - 1
        )
    );
}

#[test]
fn a_drained_backlog_gives_back_its_table_slots_at_the_next_snapshot() {
    let mut s = JoinState::new(config(None));
    // Impressions whose feature logs never come, then one whose log does.
    for r in 0..2000 {
        s.feed(event(&format!("r{r}"), "a", 0, EventKind::Impression));
    }
    s.feed(event("late", "a", 10, EventKind::Impression));
    s.features_idle(10 * MIN);
    assert_eq!(s.pending.len(), 1, "the backlog expired");
    let grown = s.table_capacity();
    assert!(grown >= 4000, "{grown}");
    s.snapshot(1, "state-1");
    let shrunk = s.table_capacity();
    assert!(shrunk < 64, "{grown} slots became {shrunk}");
    let rows = s.add_features(log("late", 9, &["a", "b"]));
    assert_eq!(keys(&rows), [("late".into(), "a".into())]);
}

#[test]
fn rows_written_after_their_features_expired_leave_nothing_in_the_state() {
    use featurelog_schemas::featurelog::state::v1::StateHeader;
    use prost::Message;
    // A label window longer than the features' wait: each row is written after its request's
    // features expired. Nothing of those requests may stay, or a long run's memory and state
    // files would grow with every request it ever joined.
    let mut s = JoinState::new(config(Some(60 * MIN)));
    let mut rows = Vec::new();
    for r in 0..100 {
        let request = format!("r{r}");
        rows.extend(s.add_features(log(&request, r, &["a", "b"])));
        rows.extend(s.feed(event(&request, "a", r, EventKind::Impression)));
    }
    rows.extend(s.add_features(log("end", 300, &["z"])));
    rows.extend(s.source_progress(0, 300 * MIN));
    assert_eq!(
        rows.len(),
        100,
        "every impression's row, once its window closed"
    );
    assert_eq!(s.requests(), 1, "only the last request's features are held");
    let snapshot = s.snapshot(1, &file(1));
    let mut bytes = snapshot.bytes.as_slice();
    let header = StateHeader::decode_length_delimited(&mut bytes).unwrap();
    assert!(
        header.emitted.is_empty(),
        "{} requests remembered",
        header.emitted.len()
    );
    // Still late, not a second row: a written row's impression read again.
    assert!(
        s.feed(event("r99", "a", 99, EventKind::Impression))
            .is_empty()
    );
    assert_eq!(s.counts.joined, 100);
}

#[test]
fn a_restore_keeps_which_candidates_were_impressed_and_written() {
    let mut s = JoinState::new(config(None));
    s.add_features(log("r1", 0, &["a", "b", "c", "b"]));
    assert_eq!(s.feed(event("r1", "b", 1, EventKind::Impression)).len(), 1);
    let mut restored = restored_from_one_checkpoint(&mut s, config(None));
    // The row of b was written before the restore: its impression read again is late.
    assert!(
        restored
            .feed(event("r1", "b", 2, EventKind::Impression))
            .is_empty()
    );
    assert_eq!(restored.counts.late, 1);
    // At the expiry, a and c were scored and not impressed; b at both its rows was.
    restored.add_features(log("end", 100, &["z"]));
    restored.source_progress(0, 100 * MIN);
    assert_eq!(restored.counts.scored_not_impressed, 2);
}
