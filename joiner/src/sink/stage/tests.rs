//! Tests of staged files: their hours, their Parquet types and compression, new columns, and
//! rows of finished hours going aside.

use super::*;
use crate::sink::SinkOptions;
use crate::sink::fixtures::*;
use crate::state::Labels;
use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::fs::File;
use std::sync::Arc;

#[test]
fn committed_rows_become_visible_parquet_by_hour() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let staged = ds.stage("t-0", 1, &rows(18), i64::MIN).unwrap();
    let files = staged.files.clone();
    assert_eq!(files.len(), 2, "two impression hours, two files");
    assert!(
        visible_files(dir.path()).is_empty(),
        "nothing visible before the commit"
    );
    let cp = committed("t-0", 1, &staged);
    ds.commit(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    assert_eq!(visible_files(dir.path()), files);
    assert!(
        !dir.path().join(staged.staging).exists(),
        "nothing is left of the staging"
    );
    assert!(files[0].starts_with("dt=1970-01-01/hr=18/"));
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(File::open(dir.path().join(&files[1])).unwrap())
            .unwrap()
            .build()
            .unwrap();
    let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    assert_eq!(batches[0].num_rows(), 1);
    assert!(batches[0].schema().field_with_name("x").is_ok());
}

fn feature(name: &str, datatype: DataType, row_shape: Vec<i64>, values: Values) -> Feature {
    Feature {
        name: name.into(),
        datatype: datatype as i32,
        row_shape,
        values: Some(values),
        per_request: false,
    }
}

/// `n` impressed rows of `request`, whose log holds `features`, all in hour `hour`.
fn rows_with(request: &str, hour: i64, n: usize, features: Vec<Feature>) -> Vec<Row> {
    let ids: Vec<String> = (0..n).map(|i| format!("{request}-{i}")).collect();
    let log = Arc::new(crate::log::ServedLog::from(FeatureLog {
        request_id: request.into(),
        model_name: "m".into(),
        served_at: Some(prost_types::Timestamp {
            seconds: hour * 3600,
            nanos: 0,
        }),
        row_count: n as u32,
        candidate_ids: ids.clone(),
        features,
        ..Default::default()
    }));
    ids.into_iter()
        .enumerate()
        .map(|(i, item_id)| Row {
            request_id: request.into(),
            item_id,
            features: log.clone(),
            row: i,
            impression_time_us: Some(hour * HOUR_US + i as i64 * 1_000_000),
            labels: Labels::default(),
        })
        .collect()
}

/// Stages `rows` as `task`'s `epoch`, commits and rolls them forward: the visible files.
fn write_epoch(ds: &Dataset, task: &str, epoch: u64, rows: &[Row]) -> Vec<String> {
    let staged = ds.stage(task, epoch, rows, i64::MIN).unwrap();
    let cp = committed(task, epoch, &staged);
    ds.commit(&cp).unwrap();
    ds.roll_forward(&cp).unwrap();
    staged.files
}

#[test]
fn written_files_are_zstd_in_bounded_row_groups_and_hold_each_feature_s_real_type() {
    use arrow_schema::DataType as ArrowType;
    let dir = tempfile::tempdir().unwrap();
    let options = SinkOptions {
        row_group_rows: 4,
        ..SinkOptions::default()
    };
    let ds = Dataset::open(dir.path(), options).unwrap();
    let n = 10;
    let features = vec![
        feature(
            "count",
            DataType::Int64,
            vec![],
            Values {
                int64_values: (0..n as i64).map(|i| i * 100).collect(),
                ..Default::default()
            },
        ),
        feature(
            "score",
            DataType::Fp32,
            vec![],
            Values {
                fp32_values: (0..n).map(|i| i as f32 / 4.0).collect(),
                ..Default::default()
            },
        ),
        feature(
            "locale",
            DataType::Bytes,
            vec![],
            Values {
                bytes_values: (0..n)
                    .map(|i| format!("l{i}").into_bytes().into())
                    .collect(),
                ..Default::default()
            },
        ),
        feature(
            "blob",
            DataType::Bytes,
            vec![],
            Values {
                bytes_values: (0..n).map(|i| vec![0xff, i as u8].into()).collect(),
                ..Default::default()
            },
        ),
        feature(
            "emb",
            DataType::Fp32,
            vec![2],
            Values {
                fp32_values: (0..2 * n).map(|i| i as f32).collect(),
                ..Default::default()
            },
        ),
    ];
    let files = write_epoch(&ds, "t-0", 1, &rows_with("r1", 5, n, features));
    assert_eq!(files.len(), 1, "one hour, one file");
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(File::open(dir.path().join(&files[0])).unwrap())
            .unwrap();
    let metadata = builder.metadata().clone();
    let groups: Vec<i64> = metadata.row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(groups, [4, 4, 2], "row groups of at most row-group-rows");
    for group in metadata.row_groups() {
        for chunk in group.columns() {
            assert!(
                matches!(chunk.compression(), Compression::ZSTD(_)),
                "{:?}: {:?}",
                chunk.column_path(),
                chunk.compression()
            );
        }
    }
    // The types a reader takes from the file: Arrow readers use the schema the writer
    // embeds in it...
    let schema = builder.schema().clone();
    let ty = |schema: &arrow_schema::Schema, name: &str| {
        schema.field_with_name(name).unwrap().data_type().clone()
    };
    assert_eq!(ty(&schema, "count"), ArrowType::Int64);
    assert_eq!(ty(&schema, "score"), ArrowType::Float32);
    assert_eq!(ty(&schema, "locale"), ArrowType::Utf8);
    assert_eq!(ty(&schema, "blob"), ArrowType::Binary);
    assert!(
        matches!(ty(&schema, "emb"), ArrowType::FixedSizeList(item, 2) if item.data_type() == &ArrowType::Float32),
        "{:?}",
        ty(&schema, "emb")
    );
    // ...and others (Spark, engines that ignore that hint) the Parquet types alone.
    let plain =
        parquet::arrow::parquet_to_arrow_schema(metadata.file_metadata().schema_descr(), None)
            .unwrap();
    assert_eq!(ty(&plain, "count"), ArrowType::Int64);
    assert_eq!(ty(&plain, "score"), ArrowType::Float32);
    assert_eq!(ty(&plain, "locale"), ArrowType::Utf8);
    assert_eq!(ty(&plain, "blob"), ArrowType::Binary);
    assert!(
        matches!(ty(&plain, "emb"), ArrowType::List(item) if item.data_type() == &ArrowType::Float32),
        "{:?}",
        ty(&plain, "emb")
    );
    // Every row is there, in order, across the row groups.
    use arrow_array::cast::AsArray;
    let batches: Vec<_> = builder.build().unwrap().collect::<Result<_, _>>().unwrap();
    let counts: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name("count").unwrap();
            c.as_primitive::<arrow_array::types::Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(counts, (0..n as i64).map(|i| i * 100).collect::<Vec<_>>());
}

#[test]
fn a_continuous_feature_falls_back_to_plain_pages_a_categorical_one_keeps_its_dictionary() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Float32Type;
    use parquet::basic::Encoding;
    use parquet::column::page::Page;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    // One row group of 20,000 rows: as many distinct scores (80 KB of them), and 8 categories.
    let n = 20_000;
    let scores: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin()).collect();
    let fp32 = |name: &str, values: Vec<f32>| {
        feature(
            name,
            DataType::Fp32,
            vec![],
            Values {
                fp32_values: values,
                ..Default::default()
            },
        )
    };
    let features = vec![
        fp32("score", scores.clone()),
        fp32("category", (0..n).map(|i| (i % 8) as f32).collect()),
    ];
    let mut rows = rows_with("r1", 5, n, features);
    for row in &mut rows {
        // A microsecond apart, rather than a second: all in one hour, one file.
        row.impression_time_us = Some(5 * HOUR_US + row.row as i64);
    }
    let files = write_epoch(&ds, "t-0", 1, &rows);
    assert_eq!(files.len(), 1);
    let path = dir.path().join(&files[0]);
    let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
    let group = reader.get_row_group(0).unwrap();
    let columns = group.metadata().columns().to_vec();
    // The encodings of a column's data pages, and whether it has a dictionary page.
    let pages = |name: &str| {
        let i = columns
            .iter()
            .position(|c| c.column_path().string() == name)
            .unwrap();
        let mut dictionary = false;
        let mut encodings = std::collections::BTreeSet::new();
        for page in group.get_column_page_reader(i).unwrap() {
            match page.unwrap() {
                Page::DictionaryPage { .. } => dictionary = true,
                Page::DataPage { encoding, .. } | Page::DataPageV2 { encoding, .. } => {
                    encodings.insert(encoding);
                }
            }
        }
        (dictionary, encodings)
    };
    let dictionary_only = std::collections::BTreeSet::from([Encoding::RLE_DICTIONARY]);
    let (_, score) = pages("score");
    assert!(
        score.contains(&Encoding::PLAIN),
        "past its dictionary's bound, the scores are written as they are: {score:?}"
    );
    assert_eq!(
        pages("category"),
        (true, dictionary_only),
        "every page of the categories is codes into their dictionary"
    );
    // A reader gets every score back, whichever way each page holds them.
    let batches: Vec<_> = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
        .unwrap()
        .build()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let read: Vec<f32> = batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name("score").unwrap();
            c.as_primitive::<Float32Type>().values().to_vec()
        })
        .collect();
    assert_eq!(read, scores);
}

#[test]
fn a_feature_added_to_the_allow_list_is_a_new_column_that_older_files_read_as_null() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, RecordBatch};
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
    let int64 = |name: &str, values: Vec<i64>| {
        feature(
            name,
            DataType::Int64,
            vec![],
            Values {
                int64_values: values,
                ..Default::default()
            },
        )
    };
    let fp32 = |values: Vec<f32>| {
        feature(
            "b",
            DataType::Fp32,
            vec![],
            Values {
                fp32_values: values,
                ..Default::default()
            },
        )
    };
    // The allow list logs a and b, then (from epoch 2 on) c too; rows of the same hour.
    let before = rows_with(
        "r1",
        5,
        2,
        vec![int64("a", vec![1, 2]), fp32(vec![0.5, 1.5])],
    );
    let after = rows_with(
        "r2",
        5,
        3,
        vec![
            int64("a", vec![3, 4, 5]),
            fp32(vec![2.5, 3.5, 4.5]),
            int64("c", vec![70, 80, 90]),
        ],
    );
    let old = write_epoch(&ds, "t-0", 1, &before);
    let new = write_epoch(&ds, "t-0", 2, &after);
    assert_eq!((old.len(), new.len()), (1, 1));
    assert_ne!(old, new);
    let read = |file: &str| {
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(File::open(dir.path().join(file)).unwrap())
                .unwrap();
        let schema = builder.schema().clone();
        let batches: Vec<RecordBatch> = builder.build().unwrap().collect::<Result<_, _>>().unwrap();
        (schema, batches)
    };
    let (old_schema, old_batches) = read(&old[0]);
    let (new_schema, new_batches) = read(&new[0]);
    assert!(old_schema.field_with_name("c").is_err(), "{old_schema:?}");
    assert_eq!(
        new_schema.field_with_name("c").unwrap().data_type(),
        &arrow_schema::DataType::Int64
    );
    // A reader that unifies the files' schemas (pyarrow's datasets, Spark's mergeSchema):
    // this fails if a name has two types; a column a file lacks is null in its rows.
    let unified = Arc::new(
        arrow_schema::Schema::try_merge([old_schema.as_ref().clone(), new_schema.as_ref().clone()])
            .unwrap(),
    );
    let conform = |batch: &RecordBatch| {
        let columns = unified
            .fields()
            .iter()
            .map(|f| {
                batch
                    .column_by_name(f.name())
                    .cloned()
                    .unwrap_or_else(|| arrow_array::new_null_array(f.data_type(), batch.num_rows()))
            })
            .collect();
        RecordBatch::try_new(unified.clone(), columns).unwrap()
    };
    let mut read_back = Vec::new();
    for batch in old_batches.iter().chain(&new_batches).map(conform) {
        let item = batch.column_by_name("item_id").unwrap().as_string::<i32>();
        let a = batch
            .column_by_name("a")
            .unwrap()
            .as_primitive::<Int64Type>();
        let c = batch
            .column_by_name("c")
            .unwrap()
            .as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            read_back.push((
                item.value(i).to_owned(),
                a.value(i),
                c.is_valid(i).then(|| c.value(i)),
            ));
        }
    }
    assert_eq!(
        read_back,
        [
            ("r1-0".to_owned(), 1, None),
            ("r1-1".to_owned(), 2, None),
            ("r2-0".to_owned(), 3, Some(70)),
            ("r2-1".to_owned(), 4, Some(80)),
            ("r2-2".to_owned(), 5, Some(90)),
        ]
    );
}

#[test]
fn rows_for_hours_the_task_declared_complete_go_aside_before_any_marker_exists() {
    let ds = on_memory(&memory(), SinkOptions::default());
    // The task's committed watermark minus the lag is 02:00: hours 00 and 01 are over for
    // it, though no marker writer has looked yet. Hour 02 is still open.
    let staged = ds
        .stage("t-0", 2, &[rows(0), rows(2)].concat(), 2 * HOUR_US)
        .unwrap();
    assert_eq!(staged.late_rows, 2);
    let mut files = staged.files.clone();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(files[0].starts_with("dt=1970-01-01/hr=02/"), "{files:?}");
    assert!(files[1].starts_with("dt=1970-01-01/hr=03/"), "{files:?}");
    assert!(
        files[2].starts_with("late/dt=1970-01-01/hr=00/"),
        "{files:?}"
    );
    assert!(
        files[3].starts_with("late/dt=1970-01-01/hr=01/"),
        "{files:?}"
    );
}
