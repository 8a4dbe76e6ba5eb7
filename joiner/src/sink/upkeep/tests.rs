//! Tests of the Delta table's upkeep: a complete hour's small files replaced by few files
//! holding the same rows, in a commit that changes no row and says how far the dataset is
//! complete; hours not complete left alone; two processes compacting one hour; VACUUM only
//! after the retention and never of a file the table holds.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use arrow_array::{Array, StringArray};

use super::*;
use crate::sink::SinkOptions;
use crate::sink::delta::DeltaTable;
use crate::sink::fixtures::{committed, rows_of};

const HOUR: i64 = 3_600_000_000;

fn delta_dataset(dir: &Path) -> Dataset {
    Dataset::open(dir, SinkOptions::default())
        .unwrap()
        .with_delta(DeltaTable::local(dir).unwrap())
}

/// Commits `epochs` checkpoints of task `t-0`, each with rows of a request of its own in
/// hours 0 and 1 (a file per hour per epoch), the last with `watermark_us`.
fn commit_epochs(ds: &Dataset, epochs: u64, watermark_us: i64) {
    for epoch in 1..=epochs {
        let staged = ds
            .stage("t-0", epoch, &rows_of(&format!("r{epoch}"), 0), i64::MIN)
            .unwrap();
        let mut cp = committed("t-0", epoch, &staged);
        cp.watermark_us = if epoch == epochs { watermark_us } else { 5 };
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
    }
}

/// The table's newest version's files, per hour directory.
fn live_by_hour(ds: &Dataset) -> BTreeMap<String, Vec<LiveFile>> {
    let mut hours: BTreeMap<String, Vec<LiveFile>> = BTreeMap::new();
    for file in ds.delta.as_ref().unwrap().live_files().unwrap().unwrap() {
        hours
            .entry(dir_of(&file.path).to_owned())
            .or_default()
            .push(file);
    }
    hours
}

/// The request ids of every row of the table's newest version, per hour directory, sorted.
fn rows_by_hour(dir: &Path, ds: &Dataset) -> BTreeMap<String, Vec<String>> {
    live_by_hour(ds)
        .into_iter()
        .map(|(hour, files)| {
            let mut ids = Vec::new();
            for file in files {
                let f = std::fs::File::open(dir.join(&file.path)).unwrap();
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                        .unwrap()
                        .build()
                        .unwrap();
                for batch in reader {
                    let batch = batch.unwrap();
                    let column = batch.column_by_name("request_id").unwrap();
                    let column = column.as_any().downcast_ref::<StringArray>().unwrap();
                    ids.extend((0..column.len()).map(|i| column.value(i).to_owned()));
                }
            }
            ids.sort();
            (hour, ids)
        })
        .collect()
}

/// Every action of every commit in the log, in version order, with its version.
fn log_actions(dir: &Path) -> Vec<(u64, serde_json::Value)> {
    let mut commits: Vec<_> = std::fs::read_dir(dir.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    commits
        .iter()
        .flat_map(|p| {
            let version: u64 = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            let text = std::fs::read_to_string(p).unwrap();
            text.lines()
                .map(|l| (version, serde_json::from_str(l).unwrap()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn data_files_on_disk(dir: &Path, hour: &str) -> usize {
    std::fs::read_dir(dir.join(hour))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".parquet")
        })
        .count()
}

fn keep_files() -> TableUpkeep {
    TableUpkeep {
        target_file_bytes: Some(1 << 30),
        vacuum_retention: None,
        ..TableUpkeep::default()
    }
}

#[test]
fn a_complete_hour_s_small_files_become_few_files_with_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let tasks = vec!["t-0".to_string()];
    // Hour 0 completes, hour 1 does not: the watermark is in hour 1.
    commit_epochs(&ds, 6, HOUR + HOUR / 2);
    let before = rows_by_hour(dir.path(), &ds);
    let files_before = live_by_hour(&ds);
    assert_eq!(files_before["dt=1970-01-01/hr=00"].len(), 6);
    let small_bytes: u64 = files_before["dt=1970-01-01/hr=00"]
        .iter()
        .map(|f| f.size)
        .sum();
    ds.mark_complete(&tasks, 0).unwrap();
    // A target of a third of the hour's bytes: the rewritten files are cut at about it.
    let target = small_bytes / 3;
    let upkeep = TableUpkeep {
        target_file_bytes: Some(target),
        vacuum_retention: Some(Duration::from_secs(3600)),
        ..TableUpkeep::default()
    };
    assert_eq!(ds.upkeep(&upkeep).unwrap(), ["dt=1970-01-01/hr=00"]);

    let after = live_by_hour(&ds);
    let hour0 = &after["dt=1970-01-01/hr=00"];
    let bytes: u64 = hour0.iter().map(|f| f.size).sum();
    assert!(
        hour0.len() as u64 <= bytes.div_ceil(target) + 1 && hour0.len() < 6,
        "{} files of {bytes} bytes for a target of {target}: {hour0:?}",
        hour0.len()
    );
    assert_eq!(
        after["dt=1970-01-01/hr=01"].len(),
        6,
        "an hour not complete keeps its files"
    );
    assert_eq!(
        rows_by_hour(dir.path(), &ds),
        before,
        "the same rows, once each"
    );
    // The removed files stay for readers of older versions until the retention is over.
    assert_eq!(
        data_files_on_disk(dir.path(), "dt=1970-01-01/hr=00"),
        6 + hour0.len()
    );

    // The compaction's commit changes no row: its removes and adds say so, and its
    // commitInfo says how far the dataset is complete.
    let actions = log_actions(dir.path());
    let last = actions.last().unwrap().0;
    let commit: Vec<_> = actions
        .iter()
        .filter(|(v, _)| *v == last)
        .map(|(_, a)| a)
        .collect();
    let removes: Vec<_> = commit.iter().filter_map(|a| a.get("remove")).collect();
    let adds: Vec<_> = commit.iter().filter_map(|a| a.get("add")).collect();
    assert_eq!(removes.len(), 6);
    assert_eq!(adds.len(), hour0.len());
    assert!(
        removes
            .iter()
            .chain(&adds)
            .all(|a| a["dataChange"] == false)
    );
    let info = commit.iter().find_map(|a| a.get("commitInfo")).unwrap();
    assert_eq!(info["operation"], "OPTIMIZE");
    assert_eq!(
        info["operationParameters"]["featurelog.completeThrough"], "1970-01-01T01:00:00Z",
        "{info}"
    );
    // The completeness was recorded before, in a commit of its own.
    let recorded: Vec<_> = actions
        .iter()
        .filter_map(|(_, a)| a.get("commitInfo"))
        .filter(|i| i["operation"] == "FEATURELOG COMPLETENESS")
        .collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");

    // Another pass: nothing more to do, no commit.
    let versions = log_actions(dir.path()).last().unwrap().0;
    assert!(ds.upkeep(&upkeep).unwrap().is_empty());
    assert_eq!(log_actions(dir.path()).last().unwrap().0, versions);
}

#[test]
fn vacuum_deletes_removed_files_only_after_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let tasks = vec!["t-0".to_string()];
    commit_epochs(&ds, 4, 3 * HOUR);
    ds.mark_complete(&tasks, 0).unwrap();
    let compact = TableUpkeep {
        target_file_bytes: Some(1 << 30),
        vacuum_retention: Some(Duration::from_secs(3600)),
        ..TableUpkeep::default()
    };
    assert_eq!(ds.upkeep(&compact).unwrap().len(), 2);
    let rows = rows_by_hour(dir.path(), &ds);
    assert_eq!(data_files_on_disk(dir.path(), "dt=1970-01-01/hr=00"), 5);

    // Another process, with a retention the compaction is already past: the removed files
    // go, the table's stay, and every row is still read once.
    let other = delta_dataset(dir.path());
    other.mark_complete(&tasks, 0).unwrap();
    let vacuum_now = TableUpkeep {
        target_file_bytes: Some(1 << 30),
        vacuum_retention: Some(Duration::ZERO),
        ..TableUpkeep::default()
    };
    other.upkeep(&vacuum_now).unwrap();
    for hour in ["dt=1970-01-01/hr=00", "dt=1970-01-01/hr=01"] {
        assert_eq!(data_files_on_disk(dir.path(), hour), 1, "{hour}");
        assert!(dir.path().join(hour).join(crate::sink::SUCCESS).exists());
    }
    assert_eq!(rows_by_hour(dir.path(), &other), rows);
}

#[test]
fn a_compaction_that_died_before_its_commit_leaves_only_files_the_vacuum_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let tasks = vec!["t-0".to_string()];
    commit_epochs(&ds, 4, 3 * HOUR);
    let rows = rows_by_hour(dir.path(), &ds);
    // The files of a compaction whose process died before it committed them.
    let hour = "dt=1970-01-01/hr=00";
    let live = live_by_hour(&ds);
    let small: Vec<&LiveFile> = live[hour].iter().collect();
    let orphans = ds.rewrite(hour, &small, 1 << 30).unwrap();
    assert_eq!(orphans.len(), 1);
    assert_eq!(rows_by_hour(dir.path(), &ds), rows, "no version holds them");
    // A restart compacts the hour again; the orphan is vacuumed with the files it replaced.
    let restarted = delta_dataset(dir.path());
    restarted.mark_complete(&tasks, 0).unwrap();
    restarted.upkeep(&keep_files()).unwrap();
    assert_eq!(rows_by_hour(dir.path(), &restarted), rows);
    assert_eq!(data_files_on_disk(dir.path(), hour), 4 + 1 + 1);
    let vacuum = delta_dataset(dir.path());
    vacuum.mark_complete(&tasks, 0).unwrap();
    vacuum
        .upkeep(&TableUpkeep {
            vacuum_retention: Some(Duration::ZERO),
            ..keep_files()
        })
        .unwrap();
    assert_eq!(data_files_on_disk(dir.path(), hour), 1);
    assert!(!dir.path().join(&orphans[0]).exists());
    assert_eq!(rows_by_hour(dir.path(), &vacuum), rows);
}

#[test]
fn a_process_with_a_long_retention_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let tasks = vec!["t-0".to_string()];
    commit_epochs(&ds, 3, 3 * HOUR);
    ds.mark_complete(&tasks, 0).unwrap();
    ds.upkeep(&TableUpkeep::default()).unwrap();
    assert_eq!(data_files_on_disk(dir.path(), "dt=1970-01-01/hr=00"), 4);
    let other = delta_dataset(dir.path());
    other.mark_complete(&tasks, 0).unwrap();
    other.upkeep(&TableUpkeep::default()).unwrap();
    assert_eq!(data_files_on_disk(dir.path(), "dt=1970-01-01/hr=00"), 4);
}

#[test]
fn two_processes_compacting_the_same_hours_leave_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let tasks = vec!["t-0".to_string()];
    commit_epochs(&ds, 8, 3 * HOUR);
    let rows = rows_by_hour(dir.path(), &ds);
    let handles: Vec<Dataset> = (0..2).map(|_| delta_dataset(dir.path())).collect();
    std::thread::scope(|s| {
        for handle in &handles {
            let tasks = tasks.clone();
            s.spawn(move || {
                handle.mark_complete(&tasks, 0).unwrap();
                handle.upkeep(&keep_files()).unwrap();
            });
        }
    });
    let reader = delta_dataset(dir.path());
    assert_eq!(rows_by_hour(dir.path(), &reader), rows);
    for files in live_by_hour(&reader).values() {
        assert_eq!(files.len(), 1, "{files:?}");
    }
}

#[test]
fn without_a_table_or_a_completeness_pass_the_upkeep_does_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    assert!(plain.upkeep(&TableUpkeep::default()).unwrap().is_empty());
    let ds = delta_dataset(dir.path());
    commit_epochs(&ds, 2, 3 * HOUR);
    // No completeness pass yet: nothing is known complete.
    assert!(ds.upkeep(&TableUpkeep::default()).unwrap().is_empty());
    assert_eq!(live_by_hour(&ds)["dt=1970-01-01/hr=00"].len(), 2);
}

#[test]
fn the_log_is_checkpointed_every_interval_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let ds = delta_dataset(dir.path());
    let tasks = vec!["t-0".to_string()];
    commit_epochs(&ds, 12, 3 * HOUR);
    let rows = rows_by_hour(dir.path(), &ds);
    ds.mark_complete(&tasks, 0).unwrap();
    let upkeep = TableUpkeep {
        target_file_bytes: None,
        vacuum_retention: None,
        checkpoint_interval: 5,
    };
    ds.upkeep(&upkeep).unwrap();
    let log = dir.path().join("_delta_log");
    let last: serde_json::Value =
        serde_json::from_slice(&std::fs::read(log.join("_last_checkpoint")).unwrap()).unwrap();
    // Versions 0-11 are the flushes, 12 the completeness record.
    assert_eq!(last["version"], 12, "{last}");
    assert!(log.join(format!("{:020}.checkpoint.parquet", 12)).exists());
    // Not due again until 5 more versions.
    ds.upkeep(&upkeep).unwrap();
    assert_eq!(
        std::fs::read_dir(&log)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("checkpoint.parquet"))
            .count(),
        1
    );
    // Another process reads the table from the checkpoint: the same rows.
    let other = delta_dataset(dir.path());
    assert_eq!(rows_by_hour(dir.path(), &other), rows);
    commit_more(&other, 13, 2);
    let live = live_by_hour(&other);
    assert_eq!(live["dt=1970-01-01/hr=00"].len(), 12);
    assert_eq!(
        live["dt=1970-01-01/hr=05"].len(),
        2,
        "commits after the checkpoint are read on top of it"
    );
}

/// Commits `count` more epochs of task `t-0` from `first` on, with rows in hours 5 and 6
/// (hours 0 and 1 are complete: rows for them go to `late/`).
fn commit_more(ds: &Dataset, first: u64, count: u64) {
    for epoch in first..first + count {
        let staged = ds
            .stage("t-0", epoch, &rows_of(&format!("r{epoch}"), 5), i64::MIN)
            .unwrap();
        let cp = committed("t-0", epoch, &staged);
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
    }
}

#[test]
fn hours_are_read_from_their_directories() {
    assert_eq!(hour_of_dir("dt=1970-01-01/hr=01"), Some(HOUR));
    assert_eq!(hour_of_dir("model=m/dt=1970-01-02/hr=00"), Some(24 * HOUR));
    assert_eq!(hour_of_dir("late/x"), None);
    assert_eq!(
        dir_of("dt=1970-01-01/hr=01/part.parquet"),
        "dt=1970-01-01/hr=01"
    );
    assert_eq!(
        completeness_parameters(90 * 60 * 1_000_000, HOUR)[0].1,
        "1970-01-01T01:00:00Z"
    );
}

#[test]
fn a_table_partitioned_by_model_names_each_model_and_compacts_its_hours() {
    use crate::sink::fixtures::model_rows;
    let dir = tempfile::tempdir().unwrap();
    let options = SinkOptions {
        partition_by_model: true,
        ..SinkOptions::default()
    };
    let ds = Dataset::open(dir.path(), options)
        .unwrap()
        .with_delta(DeltaTable::local(dir.path()).unwrap());
    let tasks = vec!["t-0".to_string()];
    for epoch in 1..=3u64 {
        let mut rows = model_rows("ranker b/2", &format!("r{epoch}"), 0);
        rows.extend(model_rows("plain", &format!("p{epoch}"), 0));
        let staged = ds.stage("t-0", epoch, &rows, i64::MIN).unwrap();
        let mut cp = committed("t-0", epoch, &staged);
        cp.watermark_us = 3 * HOUR;
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
    }
    let before = rows_by_hour(dir.path(), &ds);
    let escaped = "model=ranker%20b%2F2/dt=1970-01-01/hr=00";
    assert_eq!(before[escaped].len(), 3, "{before:?}");
    // The log names the model as readers decode its directory, and the file by its URL path.
    let adds: Vec<serde_json::Value> = log_actions(dir.path())
        .into_iter()
        .filter_map(|(_, a)| a.get("add").cloned())
        .collect();
    let add = adds
        .iter()
        .find(|a| a["partitionValues"]["model"] == "ranker b/2")
        .unwrap();
    assert!(
        add["path"]
            .as_str()
            .unwrap()
            .starts_with("model=ranker%2520b%252F2/dt=1970-01-01/hr=00/"),
        "{add}"
    );
    let metadata = log_actions(dir.path())
        .into_iter()
        .find_map(|(_, a)| a.get("metaData").cloned())
        .unwrap();
    assert_eq!(
        metadata["partitionColumns"],
        serde_json::json!(["model", "dt", "hr"])
    );
    ds.mark_complete(&tasks, 0).unwrap();
    let compacted = ds.upkeep(&keep_files()).unwrap();
    assert_eq!(compacted.len(), 4, "two models, two hours: {compacted:?}");
    assert_eq!(rows_by_hour(dir.path(), &ds), before);
    assert!(live_by_hour(&ds).values().all(|files| files.len() == 1));
}
