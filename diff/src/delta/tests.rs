#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::fs::File;
use std::path::Path;

use arrow_array::Array as _;
use arrow_array::cast::AsArray as _;
use arrow_array::types::{Date32Type, Int32Type, Int64Type};
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use parquet::arrow::ArrowWriter;

use super::*;

/// A Parquet file of `ids` (and `x = id / 2`) at `relative` under `root`; its size.
fn data_file(root: &Path, relative: &str, ids: &[i64]) -> u64 {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef),
        (
            "x",
            Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|&i| i as f64 / 2.0),
            )),
        ),
    ])
    .unwrap();
    let mut writer =
        ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    std::fs::metadata(&path).unwrap().len()
}

/// An `add` action (Delta protocol, "Add File and Remove File") of a file already written.
fn add(root: &Path, relative: &str, ids: &[i64], dt: &str, hr: Option<&str>) -> String {
    let size = data_file(root, relative, ids);
    let values = serde_json::json!({ "dt": dt, "hr": hr });
    serde_json::json!({ "add": {
        "path": relative, "partitionValues": values, "size": size,
        "modificationTime": 1_700_000_000_000_i64, "dataChange": true,
    }})
    .to_string()
}

fn remove(relative: &str) -> String {
    serde_json::json!({ "remove": {
        "path": relative, "deletionTimestamp": 1_700_000_001_000_i64, "dataChange": true,
    }})
    .to_string()
}

fn commit(root: &Path, version: u64, actions: &[String]) {
    let log = root.join("_delta_log");
    std::fs::create_dir_all(&log).unwrap();
    std::fs::write(
        log.join(format!("{version:020}.json")),
        actions.join("\n") + "\n",
    )
    .unwrap();
}

/// A table written as the protocol defines its log, by hand, as a compaction leaves it:
/// version 0 adds `part-a` (ids 1-3, hour 7); version 1 replaces it with `part-b` (the same
/// rows) and adds `part-c` (ids 4-5) with a null hour. Beside them on disk, files the table
/// does not hold: `part-a` (removed, not vacuumed), an orphan, `late/` and `_featurelog/`.
fn compacted_table(root: &Path) {
    let schema = serde_json::json!({ "type": "struct", "fields": [
        { "name": "id", "type": "long", "nullable": true, "metadata": {} },
        { "name": "x", "type": "double", "nullable": true, "metadata": {} },
        { "name": "dt", "type": "date", "nullable": true, "metadata": {} },
        { "name": "hr", "type": "integer", "nullable": true, "metadata": {} },
    ]});
    let protocol =
        serde_json::json!({ "protocol": { "minReaderVersion": 1, "minWriterVersion": 2 } });
    let metadata = serde_json::json!({ "metaData": {
        "id": "5b0d7a4e-3c55-4bd6-9c3c-9f1f1e0e2a11",
        "format": { "provider": "parquet", "options": {} },
        "schemaString": schema.to_string(),
        "partitionColumns": ["dt", "hr"],
        "configuration": {},
        "createdTime": 1_700_000_000_000_i64,
    }});
    let a = "dt=2025-11-29/hr=07/part-a.parquet";
    commit(
        root,
        0,
        &[
            protocol.to_string(),
            metadata.to_string(),
            add(root, a, &[1, 2, 3], "2025-11-29", Some("7")),
        ],
    );
    commit(
        root,
        1,
        &[
            remove(a),
            add(
                root,
                "dt=2025-11-29/hr=07/part-b.parquet",
                &[1, 2, 3],
                "2025-11-29",
                Some("7"),
            ),
            add(
                root,
                "dt=2025-11-29/hr=__HIVE_DEFAULT_PARTITION__/part-c.parquet",
                &[4, 5],
                "2025-11-29",
                None,
            ),
        ],
    );
    data_file(root, "dt=2025-11-29/hr=07/part-orphan.parquet", &[9]);
    data_file(root, "late/dt=2025-11-29/hr=07/part-late.parquet", &[10]);
    data_file(root, "_featurelog/part-state.parquet", &[11]);
}

/// Every row of `input` as (id, dt as days, hr), sorted.
fn rows(input: &Input) -> Vec<(i64, i32, Option<i32>)> {
    let columns = ["id".to_owned(), "dt".to_owned(), "hr".to_owned()];
    let mut out = Vec::new();
    for unit in input.units() {
        input
            .read(unit, &columns, &[], |batch| {
                let ids = batch.column(0).as_primitive::<Int64Type>();
                let dts = batch.column(1).as_primitive::<Date32Type>();
                let hrs = batch.column(2).as_primitive::<Int32Type>();
                for i in 0..batch.num_rows() {
                    let hr = hrs.is_valid(i).then(|| hrs.value(i));
                    out.push((ids.value(i), dts.value(i), hr));
                }
                Ok(())
            })
            .unwrap();
    }
    out.sort();
    out
}

fn open_table(root: &Path, version: Option<u64>, complete_only: bool) -> Input {
    let table = local(root, version).unwrap();
    open(root, table, "t", &["id".to_owned()], complete_only).unwrap()
}

/// 2025-11-29 as days since 1970-01-01.
const DAY: i32 = 20_421;

#[test]
fn the_newest_version_reads_exactly_its_live_files() {
    let dir = tempfile::tempdir().unwrap();
    compacted_table(dir.path());
    assert!(is_local_table(dir.path()));
    let input = open_table(dir.path(), None, false);
    assert_eq!(input.table_version, Some(1));
    assert_eq!(input.file_count(), 2);
    // Partition values have the table's types: a date and an integer (null from the log).
    assert_eq!(
        rows(&input),
        vec![
            (1, DAY, Some(7)),
            (2, DAY, Some(7)),
            (3, DAY, Some(7)),
            (4, DAY, None),
            (5, DAY, None),
        ]
    );
    assert_eq!(input.partition_columns, ["dt", "hr"]);
    // What a listing of the same directory would have read: the removed file and the orphan
    // too (the walk skips `_featurelog/`, not `late/`).
    let listed = Input::open(dir.path(), &["id".to_owned()], false).unwrap();
    assert_eq!(listed.file_count(), 5);
}

#[test]
fn an_older_version_reads_the_files_it_held() {
    let dir = tempfile::tempdir().unwrap();
    compacted_table(dir.path());
    let input = open_table(dir.path(), Some(0), false);
    assert_eq!(input.table_version, Some(0));
    assert_eq!(input.file_count(), 1);
    assert_eq!(
        rows(&input),
        vec![(1, DAY, Some(7)), (2, DAY, Some(7)), (3, DAY, Some(7))]
    );
}

#[test]
fn a_version_past_the_newest_is_an_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    compacted_table(dir.path());
    let err = local(dir.path(), Some(5)).unwrap_err();
    assert!(
        matches!(
            err,
            DiffError::NoSuchVersion {
                version: 5,
                newest: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&dir.path().display().to_string()) && message.contains("newest is 1"),
        "{message}"
    );
}

#[test]
fn complete_only_reads_the_table_files_under_a_success_marker() {
    let dir = tempfile::tempdir().unwrap();
    compacted_table(dir.path());
    std::fs::write(dir.path().join("dt=2025-11-29/hr=07/_SUCCESS"), b"").unwrap();
    let input = open_table(dir.path(), None, true);
    assert_eq!(input.file_count(), 1);
    assert_eq!(input.incomplete_skipped, 1);
    assert_eq!(rows(&input).len(), 3);
}

#[test]
fn a_broken_log_is_an_error_naming_the_table() {
    let dir = tempfile::tempdir().unwrap();
    compacted_table(dir.path());
    std::fs::write(
        dir.path().join("_delta_log/00000000000000000001.json"),
        "not json\n",
    )
    .unwrap();
    let err = local(dir.path(), None).unwrap_err();
    assert!(matches!(err, DiffError::Delta { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("Delta table {}", dir.path().display())),
        "{err}"
    );
}
