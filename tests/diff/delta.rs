//! Delta Lake tables as a side: a table written and compacted by delta-rs (the Python
//! `deltalake` package), whose directory still holds the files the table removed, is read
//! through its log, at its newest version or the one asked for, on either side.

use super::reports::diff_json_with_env;
use super::*;

const TABLE_ROWS: usize = 2000;

/// Row i of the table as tests/clients/write_delta.py writes it, without its partitions.
fn offline_rows(rows: std::ops::Range<usize>) -> RecordBatch {
    batch(vec![
        (
            "request_id",
            Arc::new(StringArray::from_iter_values(
                rows.clone().map(|i| format!("r{}", i / 10)),
            )) as ArrayRef,
        ),
        (
            "item_id",
            Arc::new(Int64Array::from_iter_values(
                rows.clone().map(|i| 1000 + (i % 10) as i64),
            )),
        ),
        (
            "price",
            Arc::new(Float64Array::from_iter_values(rows.map(|i| i as f64 / 4.0))),
        ),
    ])
}

/// The served rows, files and Delta version of a report.
fn served_side(report: &Value) -> (u64, u64, Option<u64>) {
    let side = &report["served"];
    (
        side["rows"].as_u64().unwrap(),
        side["files"].as_u64().unwrap(),
        side["delta_version"].as_u64(),
    )
}

/// The table of tests/clients/write_delta.py in `dir` (its JSON), and the offline side of
/// every row as `offline.parquet`.
fn table_and_offline(dir: &Path) -> (PathBuf, PathBuf, Value) {
    let table = dir.join("table");
    let written = featurelog_testkit::python_json(
        "write_delta.py",
        &[table.display().to_string(), TABLE_ROWS.to_string()],
        &[],
    );
    let offline = dir.join("offline.parquet");
    write_parquet(&offline, &offline_rows(0..TABLE_ROWS));
    (table, offline, written)
}

/// Each version gives the rows and files delta-rs reads at that version, not the rows the
/// directory holds (the compaction's and the overwrite's removed files are still there); the
/// values agree with the offline table where the keys meet; a version the table does not have
/// is an error naming the table and its newest version.
#[test]
fn delta_tables_are_read_at_a_version_through_their_log() {
    let dir = tempfile::tempdir().unwrap();
    let (table, offline, written) = table_and_offline(dir.path());
    let newest = written["version"].as_u64().unwrap();
    let rows: Vec<u64> = serde_json::from_value(written["rows"].clone()).unwrap();
    let files: Vec<u64> = serde_json::from_value(written["files"].clone()).unwrap();
    assert_eq!(newest, 3, "{written}");
    // The premise: a listing of the directory would count more rows than any version holds.
    let on_disk = written["rows_on_disk"].as_u64().unwrap();
    assert!(rows.iter().all(|&r| r < on_disk), "{written}");

    let key = "request_id,item_id";

    // The newest version by default: hour 19 overwritten with half its rows.
    let (code, r, err) = diff_json(&table, &offline, key, &[]);
    assert_eq!(code, 1, "{err}\n{r}");
    assert!(
        !err.contains("delta_kernel"),
        "the kernel's info logs show:\n{err}"
    );
    assert_eq!(served_side(&r), (rows[3], files[3], Some(3)), "{r}");
    assert_eq!(r["coverage"]["served_duplicate_keys"], 0);
    assert_eq!(r["coverage"]["both"], rows[3]);
    assert_eq!(r["coverage"]["offline_only"], TABLE_ROWS as u64 - rows[3]);
    assert_eq!(feature(&r, "price")["mismatches"], 0);
    // The partitions are columns of the table's types, not compared (the offline side has none).
    assert!(
        r["schema"]["ignored"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "hr"),
        "{r}"
    );

    // Every version, as delta-rs reads it.
    for version in 0..=newest {
        let v = version.to_string();
        let (code, r, err) = diff_json(&table, &offline, key, &["--version", &v]);
        assert!(code == 0 || code == 1, "version {v}: {err}");
        let i = version as usize;
        assert_eq!(served_side(&r), (rows[i], files[i], Some(version)), "{r}");
        assert_eq!(r["coverage"]["served_duplicate_keys"], 0, "version {v}");
    }
    // Compacted, the whole table: every key on both sides, nothing else, a pass.
    let (code, r, err) = diff_json(&table, &offline, key, &["--version", "2"]);
    assert_eq!(code, 0, "{err}\n{r}");
    assert_eq!(r["coverage"]["both"], TABLE_ROWS as u64);

    // The offline side may be a table too, at a version of its own.
    let (code, r, err) = diff_json(
        &table,
        &table,
        key,
        &["--version", "1", "--offline-version", "0"],
    );
    assert_eq!(code, 1, "{err}\n{r}");
    assert_eq!(r["offline"]["rows"], rows[0]);
    assert_eq!(r["offline"]["delta_version"], 0);
    assert_eq!(r["coverage"]["both"], rows[0]);
    assert_eq!(r["coverage"]["served_only"], rows[1] - rows[0]);

    // A version past the newest: exit 2, naming the table and its newest version.
    let (code, _, err) = diff_json(&table, &offline, key, &["--version", "9"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&table.display().to_string()) && err.contains("no version 9; its newest is 3"),
        "{err}"
    );
    // A version of a side that is not a table.
    let (code, _, err) = diff_json(&table, &offline, key, &["--offline-version", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("offline.parquet is not one"), "{err}");

    // The terminal report says which version it read.
    let out = diff_cli(&table, &offline, key, &["--version", "2"]);
    assert!(
        stdout(&out).contains("(Delta version 2, 2000 rows"),
        "{}",
        stdout(&out)
    );
}

/// The table on S3 gives the report of the same table read locally, at the newest version and
/// at an older one: only the files the log holds at that version are read, not the removed
/// ones under the prefix.
#[test]
fn delta_tables_on_s3_are_read_through_their_log() {
    let Some(s3) = featurelog_testkit::s3("delta_tables_on_s3_are_read_through_their_log") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (table, offline, _) = table_and_offline(dir.path());
    let prefix = s3.unique_prefix("diff-delta");
    super::reports::upload_dir(&s3, &table, &format!("{prefix}/table"));
    let url = s3.url(&format!("{prefix}/table"));
    let env = s3.aws_env();
    let offline_path = offline.to_str().unwrap();
    for extra in [&[][..], &["--version", "0"][..]] {
        let (local_code, local, err) = diff_json(&table, &offline, "request_id,item_id", extra);
        assert_eq!(local_code, 1, "{err}");
        let (code, remote, err) = diff_json_with_env(&url, offline_path, &env, extra);
        assert_eq!(code, local_code, "{extra:?}: {err}");
        assert_eq!(remote["served"]["path"], url.as_str());
        for count in ["files", "rows", "columns", "delta_version"] {
            assert_eq!(
                remote["served"][count], local["served"][count],
                "{extra:?} {count}"
            );
        }
        assert_eq!(remote["coverage"], local["coverage"], "{extra:?}");
    }
    let (code, _, err) = diff_json_with_env(&url, offline_path, &env, &["--version", "9"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&url) && err.contains("its newest is 3"),
        "{err}"
    );
}
