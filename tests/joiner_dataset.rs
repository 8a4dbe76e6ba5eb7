//! The joiner's output as a training job sees it: rows joined in event time, committed with the
//! checkpoint protocol, then read back by pyarrow (an independent reader) with hive partitions:
//! exactly the expected rows, each feature with its real type and bit-exact values.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::BTreeMap;

use featurelog_joiner::event::{Event, EventKind};
use featurelog_joiner::sink::{Checkpoint, Dataset, SinkOptions};
use featurelog_joiner::state::{JoinConfig, JoinState};
use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};

const HOUR_US: i64 = 3_600_000_000;
const T0: i64 = 1_764_439_200_000_000; // 2025-11-29T18:00:00Z

fn log(request: &str, served_us: i64, items: &[&str], locale: &str) -> FeatureLog {
    let n = items.len();
    FeatureLog {
        request_id: request.into(),
        model_name: "ranker".into(),
        model_version: "3".into(),
        served_at: Some(prost_types::Timestamp {
            seconds: served_us / 1_000_000,
            nanos: 0,
        }),
        row_count: n as u32,
        candidate_ids: items.iter().map(|s| s.to_string()).collect(),
        parameters: [("surface".to_string(), format!("home-{locale}"))].into(),
        features: vec![
            Feature {
                name: "user_locale".into(),
                datatype: DataType::Bytes as i32,
                row_shape: vec![],
                values: Some(Values {
                    bytes_values: vec![locale.to_owned().into()],
                    ..Default::default()
                }),
                per_request: true,
            },
            Feature {
                name: "item_price".into(),
                datatype: DataType::Fp32 as i32,
                row_shape: vec![],
                values: Some(Values {
                    fp32_values: (0..n)
                        .map(|i| if i == 0 { -0.0 } else { i as f32 + 0.5 })
                        .collect(),
                    ..Default::default()
                }),
                per_request: false,
            },
            Feature {
                name: "item_embedding".into(),
                datatype: DataType::Fp32 as i32,
                row_shape: vec![2],
                values: Some(Values {
                    fp32_values: (0..n * 2).map(|i| i as f32 / 4.0).collect(),
                    ..Default::default()
                }),
                per_request: false,
            },
        ],
        ..Default::default()
    }
}

/// The dataset as pyarrow reads it, every file's schema unified (tests/clients/read_dataset.py).
fn read_with_pyarrow(dir: &std::path::Path) -> serde_json::Value {
    featurelog_testkit::python_json("read_dataset.py", &[dir], &[])
}

/// Stages and commits `rows` as `task`'s `epoch` (what a joiner's flush does).
fn commit(dataset: &Dataset, task: &str, epoch: u64, rows: &[featurelog_joiner::state::Row]) {
    let staged = dataset.stage(task, epoch, rows, i64::MIN).unwrap();
    let checkpoint = Checkpoint {
        task: task.into(),
        epoch,
        offsets: [("features".to_string(), 1), ("events".to_string(), 1)].into(),
        watermark_us: i64::MIN,
        files: staged.files,
        state: None,
        staging: staged.staging,
    };
    dataset.commit(&checkpoint).unwrap();
    dataset.roll_forward(&checkpoint).unwrap();
}

fn event(request: &str, item: &str, time_us: i64, kind: EventKind) -> Event {
    Event {
        request_id: request.into(),
        item_id: item.into(),
        time_us,
        kind,
        labels: BTreeMap::new(),
        event_id: None,
    }
}

#[test]
fn pyarrow_reads_exactly_the_joined_rows_with_their_types() {
    let mut state = JoinState::new(JoinConfig {
        features_wait_us: HOUR_US,
        impressions_wait_us: HOUR_US / 12,
        label_window_us: Some(HOUR_US / 6),
        max_out_of_orderness_us: 0,
        negatives_rate: 0.0,
        max_bytes: usize::MAX,
        event_sources: 1,
    });
    let mut rows = Vec::new();
    rows.extend(state.add_features(log("r1", T0, &["a", "b", "c"], "en-US")));
    rows.extend(state.add_event(event("r1", "b", T0 + 1_000_000, EventKind::Impression)));
    rows.extend(state.add_event(event("r1", "b", T0 + 60_000_000, EventKind::Click)));
    rows.extend(state.add_event(event("r1", "c", T0 + 2_000_000, EventKind::Impression)));
    // The second request is impressed in the next hour (another partition directory).
    rows.extend(state.add_features(log("r2", T0 + HOUR_US - 10_000_000, &["x"], "jp_JA")));
    rows.extend(state.add_event(event(
        "r2",
        "x",
        T0 + HOUR_US + 5_000_000,
        EventKind::Impression,
    )));
    // Time passes on both inputs so the label windows close.
    rows.extend(state.add_features(log("r3", T0 + 2 * HOUR_US, &["z"], "fr")));
    rows.extend(state.add_event(event("r3", "q", T0 + 2 * HOUR_US, EventKind::Click)));
    // The router's progress: the one events partition is routed up to there.
    rows.extend(state.source_progress(0, T0 + 2 * HOUR_US));
    assert_eq!(rows.len(), 3, "b and c of r1, x of r2");

    let dir = tempfile::tempdir().unwrap();
    let dataset = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let staged = dataset.stage("feature-log-0", 1, &rows, i64::MIN).unwrap();
    let files = staged.files;
    let checkpoint = Checkpoint {
        task: "feature-log-0".into(),
        epoch: 1,
        offsets: [("features".to_string(), 3), ("events".to_string(), 5)].into(),
        watermark_us: state.watermark_us(),
        files,
        state: None,
        staging: staged.staging,
    };
    dataset.commit(&checkpoint).unwrap();
    dataset.roll_forward(&checkpoint).unwrap();

    let read = read_with_pyarrow(dir.path());
    let schema = &read["schema"];
    assert_eq!(schema["item_price"], "float");
    assert_eq!(schema["user_locale"], "string");
    assert_eq!(
        schema["item_embedding"],
        "fixed_size_list<item: float not null>[2]"
    );
    assert_eq!(schema["impression_time"], "timestamp[us, tz=UTC]");
    assert_eq!(schema["hr"], "int32", "hive partition column: {schema}");

    let rows = read["rows"].as_array().unwrap();
    let got: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r["request_id"].as_str().unwrap().to_owned(),
                r["item_id"].as_str().unwrap().to_owned(),
                r["clicks"].as_u64().unwrap(),
                r["user_locale"].as_str().unwrap().to_owned(),
                r["hr"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("r1".into(), "b".into(), 1, "en-US".into(), 18),
            ("r1".into(), "c".into(), 0, "en-US".into(), 18),
            ("r2".into(), "x".into(), 0, "jp_JA".into(), 19),
        ]
    );
    assert!(
        schema["parameters"]
            .as_str()
            .unwrap()
            .starts_with("map<string, string"),
        "{schema}"
    );
    assert_eq!(
        rows[0]["parameters"],
        serde_json::json!([["surface", "home-en-US"]]),
        "the request parameters the allow list logs"
    );
    assert_eq!(rows[0]["item_price"], 1.5);
    assert_eq!(rows[0]["item_embedding"], serde_json::json!([0.5, 0.75]));
    assert_eq!(
        rows[2]["item_price"], "-0.0",
        "bit-exact: the sign of zero survives"
    );
}

/// A continuous feature outgrows the dictionary a column chunk may hold (4,096 FP32 values),
/// so the chunk's first pages are dictionary codes and its later ones plain values: pyarrow
/// reads every value back, bit for bit.
#[test]
fn pyarrow_reads_every_value_of_a_column_past_its_dictionary_bound() {
    let n = 6_000;
    let items: Vec<String> = (0..n).map(|i| format!("i{i:05}")).collect();
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    let prices: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin()).collect();
    let mut log = log("r1", T0, &items, "en-US");
    log.features[1].values = Some(Values {
        fp32_values: prices.clone(),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let dataset = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    commit(&dataset, "feature-log-0", 1, &impressed(log, &items));

    let read = read_with_pyarrow(dir.path());
    // The rows come sorted by item id, which is the candidates' order.
    let got: Vec<u32> = read["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["item_price"].as_f64().unwrap() as f32).to_bits())
        .collect();
    let want: Vec<u32> = prices.iter().map(|p| p.to_bits()).collect();
    assert_eq!(got, want);
}

/// Two models log `item_price` with different types (or one model changes its type), into one
/// dataset, from two joiner processes: each file keeps the type the dataset first gave the
/// name, the other type gets a column of its own, and a reader that unifies the files' schemas
/// (as Spark's mergeSchema and Polars do) reads them all. Before, the second file wrote
/// `item_price` as float beside the first's double, and unifying them failed.
#[test]
fn a_feature_that_changes_type_never_gives_one_name_two_types_across_files() {
    let config = JoinConfig {
        features_wait_us: HOUR_US,
        impressions_wait_us: HOUR_US,
        label_window_us: None,
        max_out_of_orderness_us: 0,
        negatives_rate: 0.0,
        max_bytes: usize::MAX,
        event_sources: 1,
    };
    let joined = |log: FeatureLog, item: &str| {
        let mut state = JoinState::new(config.clone());
        let request = log.request_id.clone();
        let mut rows = state.add_features(log);
        rows.extend(state.add_event(event(&request, item, T0 + 1_000_000, EventKind::Impression)));
        assert_eq!(rows.len(), 1);
        rows
    };
    let mut v1 = log("r1", T0, &["a", "b"], "en-US");
    v1.model_name = "ranker-v1".into();
    v1.features[1].datatype = DataType::Fp64 as i32;
    v1.features[1].values = Some(Values {
        fp64_values: vec![2.25, 3.5],
        ..Default::default()
    });
    let v2 = log("r2", T0, &["a", "b"], "jp_JA");

    let dir = tempfile::tempdir().unwrap();
    // Two processes: each its own handle on the dataset, and its own task.
    let first = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let second = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    commit(&first, "feature-log-0", 1, &joined(v1, "b"));
    commit(&second, "feature-log-1", 1, &joined(v2, "b"));

    let read = read_with_pyarrow(dir.path());
    let schema = &read["schema"];
    assert_eq!(schema["item_price"], "double", "{schema}");
    assert_eq!(schema["item_price__FP32"], "float", "{schema}");
    let rows = read["rows"].as_array().unwrap();
    let prices: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r["request_id"].clone(),
                r["item_price"].clone(),
                r["item_price__FP32"].clone(),
            )
        })
        .collect();
    assert_eq!(
        prices,
        [
            (
                serde_json::json!("r1"),
                serde_json::json!(3.5),
                serde_json::Value::Null
            ),
            (
                serde_json::json!("r2"),
                serde_json::Value::Null,
                serde_json::json!(1.5)
            ),
        ]
    );

    // The diff tool takes the variant as part of its feature: against an offline table that
    // has one `item_price`, every row is compared, none missing, no skew.
    let elsewhere = tempfile::tempdir().unwrap();
    let offline = elsewhere.path().join("offline.csv");
    std::fs::write(
        &offline,
        "request_id,item_id,item_price,user_locale\nr1,b,3.5,en-US\nr2,b,1.5,jp_JA\n",
    )
    .unwrap();
    let mut options = featurelog_diff::DiffOptions::new(
        dir.path(),
        &offline,
        vec!["request_id".into(), "item_id".into()],
    );
    options.ignore = vec!["item_embedding".into()];
    let report = featurelog_diff::run(&options).unwrap();
    assert!(
        report.schema.missing_in_offline.is_empty(),
        "{:?}",
        report.schema
    );
    assert_eq!(report.schema.merged.len(), 1, "{:?}", report.schema);
    assert_eq!(report.schema.merged[0].served, "item_price__FP32");
    let price = report
        .features
        .iter()
        .find(|f| f.name == "item_price")
        .unwrap();
    assert_eq!(
        (price.compared, price.mismatches, price.null_served_only),
        (2, 0, 0)
    );
    assert_eq!(
        report.verdict,
        featurelog_diff::Verdict::Pass,
        "{:?}",
        report.violations
    );
}

/// The joined rows of one request, impressed on every one of `items` a second after serving.
fn impressed(log: FeatureLog, items: &[&str]) -> Vec<featurelog_joiner::state::Row> {
    let mut state = JoinState::new(JoinConfig {
        features_wait_us: HOUR_US,
        impressions_wait_us: HOUR_US,
        label_window_us: None,
        max_out_of_orderness_us: 0,
        negatives_rate: 0.0,
        max_bytes: usize::MAX,
        event_sources: 1,
    });
    let request = log.request_id.clone();
    let served_us = log.served_at.as_ref().unwrap().seconds * 1_000_000;
    let mut rows = state.add_features(log);
    for item in items {
        rows.extend(state.add_event(event(
            &request,
            item,
            served_us + 1_000_000,
            EventKind::Impression,
        )));
    }
    assert_eq!(rows.len(), items.len());
    rows
}

/// `log` with the feature the allow list gained mid-run: `user_segment`, per request.
fn with_segment(mut log: FeatureLog, segment: i64) -> FeatureLog {
    log.features.push(Feature {
        name: "user_segment".into(),
        datatype: DataType::Int64 as i32,
        row_shape: vec![],
        values: Some(Values {
            int64_values: vec![segment],
            ..Default::default()
        }),
        per_request: true,
    });
    log
}

/// Stages and commits `rows` as `task`'s `epoch` with the task's watermark at `watermark_us`;
/// the visible names of its files.
fn commit_at(
    dataset: &Dataset,
    task: &str,
    epoch: u64,
    rows: &[featurelog_joiner::state::Row],
    watermark_us: i64,
) -> Vec<String> {
    let staged = dataset.stage(task, epoch, rows, i64::MIN).unwrap();
    let checkpoint = Checkpoint {
        task: task.into(),
        epoch,
        offsets: [("features".to_string(), 1), ("events".to_string(), 1)].into(),
        watermark_us,
        files: staged.files.clone(),
        state: None,
        staging: staged.staging,
    };
    dataset.commit(&checkpoint).unwrap();
    dataset.roll_forward(&checkpoint).unwrap();
    staged.files
}

/// The README's call for each reader (DuckDB, Polars, pyarrow, pandas, Spark), run as written
/// (tests/clients/readme_snippets.py) on a dataset whose allow list gained `user_segment`
/// mid-run: each reads every row exactly once, the new column with nulls in the rows of older
/// files and its values in the others, without late/ and, with its second snippet, with it.
/// Beside the rows lie what a real dataset holds: `_SUCCESS`, late rows, `_featurelog/` with
/// checkpoints, column types and a flush staged but not committed (whose rows no reader and no
/// `**/*.parquet` glob may see). The files are listed in an order that trips a reader that
/// takes one file's columns for all: an older file first in the dataset (DuckDB without
/// `union_by_name` drops the column) and a newer one first in hour 19 (it fails there).
#[test]
fn every_reader_s_readme_call_reads_a_grown_schema_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let tasks = ["feature-log-0".to_string(), "feature-log-1".to_string()];
    let before = |request: &str, served_us: i64, items: &[&str]| {
        impressed(log(request, served_us, items, "en-US"), items)
    };
    let after = |request: &str, served_us: i64, items: &[&str], segment: i64| {
        impressed(
            with_segment(log(request, served_us, items, "fr"), segment),
            items,
        )
    };
    let mut visible = Vec::new();
    // Hour 18, then 19, from two tasks on the allow list before the change.
    visible.extend(commit_at(
        &dataset,
        &tasks[0],
        1,
        &before("r1", T0, &["a", "b", "c"]),
        T0 + HOUR_US,
    ));
    visible.extend(commit_at(
        &dataset,
        &tasks[1],
        1,
        &before("r2", T0 + HOUR_US, &["a", "b"]),
        T0 + HOUR_US,
    ));
    assert_eq!(
        dataset.mark_complete(&tasks, 0).unwrap(),
        ["dt=2025-11-29/hr=18"]
    );
    // The allow list gains `user_segment`: rows of hour 19, and one of hour 18, which is late.
    let mut grown = after("r3", T0 + HOUR_US + 60_000_000, &["a", "b"], 7);
    grown.extend(after("r4", T0 + 60_000_000, &["z"], 9));
    visible.extend(commit_at(&dataset, &tasks[0], 2, &grown, T0 + HOUR_US));
    // A flush staged and never committed (its writer died, or lost its task).
    let uncommitted = dataset
        .stage(
            &tasks[1],
            2,
            &after("r5", T0 + HOUR_US, &["q"], 3),
            i64::MIN,
        )
        .unwrap();
    let staged_file = dir.path().join(format!(
        "{}/{}.staged",
        &uncommitted.staging, uncommitted.files[0]
    ));
    assert!(staged_file.exists(), "{staged_file:?}");
    assert!(
        visible.iter().any(|f| f.starts_with("late/")),
        "{visible:?}"
    );

    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let read = featurelog_testkit::python_json(
        "readme_snippets.py",
        &[
            readme.as_os_str(),
            dir.path().as_os_str(),
            std::ffi::OsStr::new("user_segment"),
        ],
        &[],
    );

    // `**/*.parquet` is exactly the committed files, late ones included.
    visible.sort();
    assert_eq!(read["glob"], serde_json::json!(visible), "{read}");
    let segments = |rows: &[(&str, &str, Option<i64>)]| {
        serde_json::json!(
            rows.iter()
                .map(|(r, i, v)| serde_json::json!([r, i, v]))
                .collect::<Vec<_>>()
        )
    };
    let on_time = [
        ("r1", "a", None),
        ("r1", "b", None),
        ("r1", "c", None),
        ("r2", "a", None),
        ("r2", "b", None),
        ("r3", "a", Some(7)),
        ("r3", "b", Some(7)),
    ];
    let mut everything = on_time.to_vec();
    everything.push(("r4", "z", Some(9)));
    assert_eq!(
        (&read["dataset_rows"], &read["late_rows"]),
        (&7.into(), &1.into()),
        "{read}"
    );
    for reader in ["duckdb", "polars", "pyarrow", "pandas", "spark"] {
        let got = &read[reader];
        assert_eq!(got["rows"], 7, "{reader}: {got}");
        assert_eq!(got["hour"], read["hour_rows"], "{reader}: {got}");
        assert_eq!(got["everything"], 8, "{reader}: {got}");
        assert_eq!(got["values"], segments(&on_time), "{reader}");
        assert_eq!(got["everything_values"], segments(&everything), "{reader}");
        let columns = got["columns"].as_array().unwrap();
        for column in ["request_id", "item_embedding", "user_segment", "dt", "hr"] {
            assert!(
                columns.iter().any(|c| c == column),
                "{reader}: no {column}: {got}"
            );
        }
    }
    // The types a training job gets: integers stay integers, with their nulls.
    assert_eq!(read["duckdb"]["types"]["user_segment"], "BIGINT");
    assert_eq!(read["duckdb"]["types"]["clicks"], "UINTEGER");
    assert_eq!(read["pandas"]["types"]["user_segment"], "int64[pyarrow]");
    assert_eq!(read["pandas"]["types"]["clicks"], "uint32[pyarrow]");
    assert_eq!(read["spark"]["types"]["user_segment"], "bigint");
    // What the README says of Polars given the directory: it reads into _featurelog/.
    let polars = read["polars_root_error"].as_str().unwrap_or_default();
    assert!(
        polars.contains("different file extensions") && polars.contains("/_featurelog/"),
        "{read}"
    );
}

/// Writers on an S3-compatible store that add columns at the same moment, each its own
/// process (its own dataset handle): `_common_metadata` keeps every one of their columns,
/// because the store refuses a PUT whose `If-Match` ETag is stale.
#[test]
fn on_s3_common_metadata_keeps_the_columns_of_writers_adding_them_at_once() {
    let Some(s3) = featurelog_testkit::s3(
        "on_s3_common_metadata_keeps_the_columns_of_writers_adding_them_at_once",
    ) else {
        return;
    };
    let prefix = s3.unique_prefix("common-metadata");
    let url = format!("s3://{}", s3.bucket);
    let open =
        || Dataset::open_object_store(s3.store(), &url, &prefix, SinkOptions::default()).unwrap();
    const WRITERS: usize = 8;
    let handles: Vec<Dataset> = (0..WRITERS).map(|_| open()).collect();
    let barrier = std::sync::Barrier::new(WRITERS);
    std::thread::scope(|scope| {
        for (i, dataset) in handles.iter().enumerate() {
            let barrier = &barrier;
            scope.spawn(move || {
                let mut log = log(&format!("r{i}"), T0, &["a"], "en-US");
                log.features[0].name = format!("user_locale_{i}");
                let rows = impressed(log, &["a"]);
                barrier.wait();
                commit(dataset, &format!("feature-log-{i}"), 1, &rows);
            });
        }
    });
    let schema = open().common_metadata("").unwrap().unwrap();
    for i in 0..WRITERS {
        assert!(
            schema.field_with_name(&format!("user_locale_{i}")).is_ok(),
            "{schema:?}"
        );
    }
}
