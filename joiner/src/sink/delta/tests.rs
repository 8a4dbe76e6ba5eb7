//! Tests of the Delta table's commits: created on first use, each checkpoint's files added
//! once whoever rolls it forward and however often, recovery after a crash between the
//! checkpoint and the Delta commit, new columns, signed types, and a table on an object store.

use std::path::Path;
use std::sync::Arc;

use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};

use super::*;
use crate::sink::fixtures::{committed, rows};
use crate::sink::{Checkpoint, Dataset, SinkOptions, Staged};
use crate::state::{Labels, Row};

fn delta_dataset(dir: &Path) -> Dataset {
    Dataset::open(dir, SinkOptions::default())
        .unwrap()
        .with_delta(DeltaTable::local(dir).unwrap())
}

/// A flush of `task` up to its checkpoint `epoch` (rows of `hour`), not yet rolled forward.
fn checkpointed(ds: &Dataset, task: &str, epoch: u64, hour: i64) -> (Staged, Checkpoint) {
    let staged = ds.stage(task, epoch, &rows(hour), i64::MIN).unwrap();
    let cp = committed(task, epoch, &staged);
    ds.commit(&cp).unwrap();
    (staged, cp)
}

/// Every action of every commit in the log, in version order.
fn log_actions(dir: &Path) -> Vec<serde_json::Value> {
    let mut commits: Vec<_> = std::fs::read_dir(dir.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    commits
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn added_paths(dir: &Path) -> Vec<String> {
    let mut paths: Vec<String> = log_actions(dir)
        .iter()
        .filter_map(|a| a.get("add")?.get("path")?.as_str().map(str::to_owned))
        .collect();
    paths.sort();
    paths
}

fn versions(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("_delta_log"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count()
}

/// The schema of the table's newest `metaData` action, as (name, type, nullable).
fn table_columns(dir: &Path) -> Vec<(String, serde_json::Value, bool)> {
    let meta = log_actions(dir)
        .into_iter()
        .rev()
        .find_map(|a| a.get("metaData").cloned())
        .unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(meta["schemaString"].as_str().unwrap()).unwrap();
    schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_owned(),
                f["type"].clone(),
                f["nullable"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn sorted(mut files: Vec<String>) -> Vec<String> {
    files.sort();
    files
}

#[test]
fn each_roll_forward_adds_its_files_once_with_the_task_s_txn() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let (staged, cp) = checkpointed(&ds, "t-0", 1, 1);
    ds.roll_forward(&cp).unwrap();
    assert_eq!(added_paths(dir.path()), sorted(staged.files.clone()));
    let table = ds.delta.as_ref().unwrap();
    assert_eq!(table.committed_epoch("t-0").unwrap(), Some(1));
    assert_eq!(table.committed_epoch("t-1").unwrap(), None);
    let adds: Vec<_> = log_actions(dir.path())
        .into_iter()
        .filter_map(|a| a.get("add").cloned())
        .collect();
    assert_eq!(adds[0]["partitionValues"]["dt"], "1970-01-01");
    assert_eq!(adds[0]["partitionValues"]["hr"], "1");
    assert_eq!(adds[0]["dataChange"], true);
    let stats: serde_json::Value =
        serde_json::from_str(adds[0]["stats"].as_str().unwrap()).unwrap();
    assert_eq!(stats["numRecords"], 1, "{stats}");
    let txn = log_actions(dir.path())
        .into_iter()
        .find_map(|a| a.get("txn").cloned())
        .unwrap();
    assert_eq!(txn["appId"], "featurelog:t-0");
    assert_eq!(txn["version"], 1);

    // Again (a recovery, another process's completeness pass): nothing is added.
    ds.roll_forward(&cp).unwrap();
    assert_eq!(ds.recover("t-0").unwrap(), Some(cp));
    assert_eq!(versions(dir.path()), 1);
    assert_eq!(added_paths(dir.path()), sorted(staged.files.clone()));

    // The next epoch, and another task, each in a commit of their own.
    let (next, cp2) = checkpointed(&ds, "t-0", 2, 3);
    ds.roll_forward(&cp2).unwrap();
    let (other, cp_other) = checkpointed(&ds, "t-1", 1, 1);
    ds.roll_forward(&cp_other).unwrap();
    assert_eq!(versions(dir.path()), 3);
    let all = [staged.files, next.files, other.files].concat();
    assert_eq!(added_paths(dir.path()), sorted(all));
    assert_eq!(table.committed_epoch("t-0").unwrap(), Some(2));
    assert_eq!(table.committed_epoch("t-1").unwrap(), Some(1));
}

#[test]
fn a_crash_between_the_checkpoint_and_the_delta_commit_is_finished_by_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let (first, cp1) = checkpointed(&ds, "t-0", 1, 1);
    ds.roll_forward(&cp1).unwrap();
    // Checkpoint 2 created, then `kill -9`: no rename, no Delta commit.
    let (second, cp2) = checkpointed(&ds, "t-0", 2, 2);
    drop(ds);

    // A new process, which knows nothing of the table yet.
    let restarted = delta_dataset(dir.path());
    assert_eq!(restarted.recover("t-0").unwrap(), Some(cp2));
    let all = [first.files, second.files].concat();
    assert_eq!(added_paths(dir.path()), sorted(all.clone()));
    assert_eq!(
        restarted
            .delta
            .as_ref()
            .unwrap()
            .committed_epoch("t-0")
            .unwrap(),
        Some(2)
    );
    // A second restart adds nothing.
    delta_dataset(dir.path()).recover("t-0").unwrap();
    assert_eq!(added_paths(dir.path()), sorted(all));
}

#[test]
fn two_processes_rolling_one_checkpoint_forward_add_it_once() {
    let dir = tempfile::tempdir().unwrap();
    // The table exists, so both race on an append.
    let ds = delta_dataset(dir.path());
    let (first, cp) = checkpointed(&ds, "t-1", 1, 1);
    ds.roll_forward(&cp).unwrap();
    let (staged, cp) = checkpointed(&ds, "t-0", 1, 1);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (root, cp) = (dir.path().to_owned(), cp.clone());
            std::thread::spawn(move || delta_dataset(&root).roll_forward(&cp))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let all = [first.files, staged.files].concat();
    assert_eq!(added_paths(dir.path()), sorted(all));
}

#[test]
fn a_handle_whose_table_moved_on_finds_the_epoch_another_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, other) = (delta_dataset(dir.path()), delta_dataset(dir.path()));
    let (first, cp) = checkpointed(&ds, "t-0", 1, 1);
    ds.roll_forward(&cp).unwrap();
    // Another process (a zombie of the task, or a completeness pass) rolls epoch 2 forward:
    // this handle's table is a version behind, and its `txn` of the task says epoch 1.
    let (second, cp) = checkpointed(&ds, "t-0", 2, 2);
    other.roll_forward(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    assert_eq!(
        added_paths(dir.path()),
        sorted([first.files, second.files].concat())
    );
    assert_eq!(versions(dir.path()), 2);
    // And its commits go on after the other's.
    let (_, cp) = checkpointed(&ds, "t-0", 3, 3);
    ds.roll_forward(&cp).unwrap();
    assert_eq!(versions(dir.path()), 3);
}

#[test]
fn tasks_committing_at_once_retry_their_conflicts_and_each_file_is_added_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    let mut checkpoints = Vec::new();
    {
        let ds = delta_dataset(dir.path());
        for t in 0..4 {
            let task = format!("t-{t}");
            for epoch in 1..=2 {
                let staged = ds
                    .stage(&task, epoch, &rows(epoch as i64), i64::MIN)
                    .unwrap();
                expected.extend(staged.files.clone());
                checkpoints.push(committed(&task, epoch, &staged));
            }
        }
    }
    // A table nobody has created yet: the tasks race on its creation too.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let root = dir.path().to_owned();
            let mine: Vec<_> = checkpoints
                .iter()
                .filter(|c| c.task == format!("t-{t}"))
                .cloned()
                .collect();
            std::thread::spawn(move || {
                let ds = delta_dataset(&root);
                for cp in mine {
                    ds.commit(&cp).unwrap();
                    ds.roll_forward(&cp).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(added_paths(dir.path()), sorted(expected));
    assert_eq!(versions(dir.path()), 8);
}

/// Two rows with one feature of `name`: unsigned 64-bit.
fn rows_with(name: &str) -> Vec<Row> {
    let log = Arc::new(crate::log::ServedLog::from(FeatureLog {
        request_id: "r9".into(),
        model_name: "m".into(),
        served_at: Some(prost_types::Timestamp {
            seconds: 0,
            nanos: 0,
        }),
        row_count: 2,
        candidate_ids: vec!["a".into(), "b".into()],
        features: vec![Feature {
            name: name.into(),
            datatype: DataType::Uint64 as i32,
            row_shape: vec![],
            values: Some(Values {
                uint64_values: vec![u64::MAX, 1],
                ..Default::default()
            }),
            per_request: false,
        }],
        ..Default::default()
    }));
    (0..2)
        .map(|i| Row {
            request_id: "r9".into(),
            item_id: log
                .candidate_id(i)
                .map(|c| c.to_string())
                .unwrap_or_default(),
            features: log.clone(),
            row: i,
            impression_time_us: Some(3_600_000_000),
            labels: Labels::default(),
        })
        .collect()
}

#[test]
fn a_new_feature_becomes_a_nullable_column_and_unsigned_columns_are_signed() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let (_, cp) = checkpointed(&ds, "t-0", 1, 1);
    ds.roll_forward(&cp).unwrap();
    let columns = table_columns(dir.path());
    let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
    assert!(names.contains(&"x"), "{names:?}");
    assert!(!names.contains(&"big"));
    assert_eq!(&names[names.len() - 2..], ["dt", "hr"]);
    let clicks = columns.iter().find(|c| c.0 == "clicks").unwrap();
    assert_eq!(clicks.1, "long", "UInt32 clicks are written as Int64");

    let second = ds.stage("t-0", 2, &rows_with("big"), i64::MIN).unwrap();
    let cp = committed("t-0", 2, &second);
    ds.commit(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    let columns = table_columns(dir.path());
    let big = columns.iter().find(|c| c.0 == "big").unwrap();
    assert_eq!(big.1, "decimal(20,0)");
    assert!(big.2, "a column older files lack is nullable");
    assert_eq!(versions(dir.path()), 2);
}

#[test]
fn late_rows_stay_out_of_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    // Hour 1 is finished for this task: its rows go under late/.
    let staged = ds.stage("t-0", 1, &rows(1), 10 * 3_600_000_000).unwrap();
    assert!(staged.files.iter().all(|f| f.starts_with("late/")));
    let cp = committed("t-0", 1, &staged);
    ds.commit(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    assert!(!dir.path().join("_delta_log").exists());
    let (on_time, cp) = checkpointed(&ds, "t-0", 2, 20);
    ds.roll_forward(&cp).unwrap();
    assert_eq!(added_paths(dir.path()), sorted(on_time.files));
}

#[test]
fn a_table_on_an_object_store_is_under_the_dataset_s_prefix() {
    let store = Arc::new(object_store::memory::InMemory::new());
    let ds = Dataset::open_object_store(store.clone(), "memory://b", "ds/", SinkOptions::default())
        .unwrap()
        .with_delta(DeltaTable::with_store(
            store.clone(),
            url::Url::parse("memory://b/ds").unwrap(),
        ));
    let (_, cp) = checkpointed(&ds, "t-0", 1, 1);
    ds.roll_forward(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    let keys = crate::sink::fixtures::keys(&store);
    let log: Vec<_> = keys.iter().filter(|k| k.contains("_delta_log")).collect();
    assert_eq!(log, ["ds/_delta_log/00000000000000000000.json"]);
    assert_eq!(
        ds.delta.as_ref().unwrap().committed_epoch("t-0").unwrap(),
        Some(1)
    );
}
