//! Unit tests of training rows: every datatype's Arrow type and values, missing features as
//! nulls, and columns renamed when a name is claimed for another kind.

use super::columns::{bf16_to_f32, f16_to_f32};
use super::*;
use arrow_array::types::{Float32Type, Float64Type, Int8Type, UInt32Type};
use featurelog_schemas::featurelog::v1::{Feature, FeatureLog, Values};
use prost::Message;

/// A log as the joiner reads it from Kafka: packed float values left in the bytes.
fn served(log: FeatureLog) -> ServedLog {
    ServedLog::decode(log.encode_to_vec(), &mut crate::log::Layouts::default()).unwrap()
}
use crate::log::FloatCells;
use crate::state::Labels;
use arrow_array::cast::AsArray;

fn log() -> FeatureLog {
    let feature =
        |name: &str, dt: DataType, shape: Vec<i64>, per_request: bool, v: Values| Feature {
            name: name.into(),
            datatype: dt as i32,
            row_shape: shape,
            values: Some(v),
            per_request,
        };
    FeatureLog {
        request_id: "r1".into(),
        model_name: "ranker".into(),
        model_version: "3".into(),
        served_at: Some(prost_types::Timestamp {
            seconds: 3600,
            nanos: 0,
        }),
        row_count: 2,
        candidate_ids: vec!["a".into(), "b".into()],
        parameters: [("surface", "home"), ("experiment", "b7")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        features: vec![
            feature(
                "age",
                DataType::Int8,
                vec![],
                true,
                Values {
                    int32_values: vec![33],
                    ..Default::default()
                },
            ),
            feature(
                "price",
                DataType::Fp32,
                vec![],
                false,
                Values {
                    fp32_values: vec![1.5, -0.0],
                    ..Default::default()
                },
            ),
            feature(
                "emb",
                DataType::Fp32,
                vec![2],
                false,
                Values {
                    fp32_values: vec![0.1, 0.2, 1.1, 1.2],
                    ..Default::default()
                },
            ),
            feature(
                "locale",
                DataType::Bytes,
                vec![],
                false,
                Values {
                    bytes_values: vec!["en-US".into(), "jp_JA".into()],
                    ..Default::default()
                },
            ),
            feature(
                "half",
                DataType::Fp16,
                vec![],
                false,
                Values {
                    half_bits: vec![0x3c00, 0xc000],
                    ..Default::default()
                },
            ),
        ],
        outputs: vec![feature(
            "score",
            DataType::Fp32,
            vec![],
            false,
            Values {
                fp32_values: vec![0.9, 0.1],
                ..Default::default()
            },
        )],
        ..Default::default()
    }
}

fn rows() -> Vec<Row> {
    let features = Arc::new(served(log()));
    vec![
        Row {
            request_id: "r1".into(),
            item_id: "b".into(),
            features: features.clone(),
            row: 1,
            impression_time_us: Some(3_700_000_000),
            labels: Labels {
                clicks: 1,
                ..Labels::default()
            },
        },
        Row {
            request_id: "r1".into(),
            item_id: "a".into(),
            features,
            row: 0,
            impression_time_us: None,
            labels: Labels::default(),
        },
    ]
}

#[test]
fn every_column_gets_its_real_type_and_the_rows_values() {
    assert_eq!(validate(&served(log())), Ok(()));
    let batch = to_record_batch(&rows(), &InMemoryColumns::default()).unwrap();
    let schema = batch.schema();
    let ty = |n: &str| schema.field_with_name(n).unwrap().data_type().clone();
    assert_eq!(ty("age"), ArrowType::Int8);
    assert_eq!(ty("price"), ArrowType::Float32);
    assert!(matches!(ty("emb"), ArrowType::FixedSizeList(_, 2)));
    assert_eq!(ty("locale"), ArrowType::Utf8);
    assert_eq!(ty("half"), ArrowType::Float32);
    assert_eq!(ty("output_score"), ArrowType::Float32);

    let col = |n: &str| batch.column_by_name(n).unwrap().clone();
    assert_eq!(
        col("age").as_primitive::<Int8Type>().values().to_vec(),
        [33, 33],
        "broadcast"
    );
    let price = col("price");
    let price = price.as_primitive::<Float32Type>();
    assert_eq!(price.value(0), -0.0);
    assert!(
        price.value(0).is_sign_negative(),
        "the row of item b, bit-exact"
    );
    assert_eq!(price.value(1), 1.5);
    let emb = col("emb");
    let emb = emb.as_fixed_size_list();
    assert_eq!(
        emb.value(0).as_primitive::<Float32Type>().values().to_vec(),
        [1.1, 1.2]
    );
    assert_eq!(col("locale").as_string::<i32>().value(0), "jp_JA");
    assert_eq!(
        col("half").as_primitive::<Float32Type>().values().to_vec(),
        [-2.0, 1.0]
    );
    assert!(
        !col("impressed").as_boolean().value(1),
        "a negative is not impressed"
    );
    assert_eq!(col("clicks").as_primitive::<UInt32Type>().value(0), 1);
    assert!(col("impression_time").is_null(1));
    // The logged request parameters, per row, in name order.
    let parameters = col("parameters");
    let entries = parameters.as_map().value(1);
    let (keys, values) = (entries.column(0), entries.column(1));
    let pairs: Vec<(&str, &str)> = (0..entries.len())
        .map(|i| {
            (
                keys.as_string::<i32>().value(i),
                values.as_string::<i32>().value(i),
            )
        })
        .collect();
    assert_eq!(pairs, [("experiment", "b7"), ("surface", "home")]);
}

#[test]
fn a_feature_missing_from_some_records_is_null_there_and_type_changes_get_their_own_column() {
    let mut other = log();
    other.request_id = "r2".into();
    other.features.retain(|f| f.name != "locale");
    other.features[1].datatype = DataType::Fp64 as i32;
    other.features[1].values = Some(Values {
        fp64_values: vec![7.0, 8.0],
        ..Default::default()
    });
    let mut rows = rows();
    rows.push(Row {
        request_id: "r2".into(),
        item_id: "a".into(),
        features: Arc::new(served(other)),
        row: 0,
        impression_time_us: Some(1),
        labels: Labels::default(),
    });
    let batch = to_record_batch(&rows, &InMemoryColumns::default()).unwrap();
    assert!(batch.column_by_name("locale").unwrap().is_null(2));
    let price64 = batch.column_by_name("price__FP64").unwrap();
    assert_eq!(price64.as_primitive::<Float64Type>().value(2), 7.0);
    assert!(price64.is_null(0));
}

#[test]
fn a_name_keeps_the_kind_its_first_file_gave_it_in_every_later_file() {
    let registry = InMemoryColumns::default();
    let row = |log: FeatureLog| Row {
        request_id: log.request_id.clone(),
        item_id: "a".into(),
        features: Arc::new(served(log)),
        row: 0,
        impression_time_us: Some(1),
        labels: Labels::default(),
    };
    let type_of = |batch: &RecordBatch, n: &str| {
        batch
            .schema()
            .field_with_name(n)
            .map(|f| f.data_type().clone())
            .ok()
    };
    // The first file: `price` as FP64 (another model's, say) and `locale` as UTF-8.
    let mut first = log();
    first.features[1].datatype = DataType::Fp64 as i32;
    first.features[1].values = Some(Values {
        fp64_values: vec![7.0, 8.0],
        ..Default::default()
    });
    let batch = to_record_batch(&[row(first)], &registry).unwrap();
    assert_eq!(type_of(&batch, "price"), Some(ArrowType::Float64));
    assert_eq!(type_of(&batch, "locale"), Some(ArrowType::Utf8));
    // A later file of FP32 prices and a locale that is not UTF-8: each gets a column of
    // its own instead of a second type under the first file's names.
    let mut later = log();
    later.features[3].values = Some(Values {
        bytes_values: vec![vec![0xff, 0xfe].into(), "en".into()],
        ..Default::default()
    });
    let batch = to_record_batch(&[row(later)], &registry).unwrap();
    assert_eq!(type_of(&batch, "price"), None);
    assert_eq!(type_of(&batch, "price__FP32"), Some(ArrowType::Float32));
    assert_eq!(type_of(&batch, "locale"), None);
    assert_eq!(
        type_of(&batch, "locale__BYTES_binary"),
        Some(ArrowType::Binary)
    );
    let locale = batch.column_by_name("locale__BYTES_binary").unwrap();
    assert_eq!(locale.as_binary::<i32>().value(0), [0xff, 0xfe]);
    // And UTF-8 bytes under a name claimed for Binary are written as Binary.
    let binary = InMemoryColumns::default();
    binary.claim("locale", "BYTES:binary").unwrap();
    let batch = to_record_batch(&rows(), &binary).unwrap();
    assert_eq!(type_of(&batch, "locale"), Some(ArrowType::Binary));
    assert_eq!(
        batch
            .column_by_name("locale")
            .unwrap()
            .as_binary::<i32>()
            .value(0),
        b"jp_JA"
    );
}

#[test]
fn malformed_records_are_refused_before_they_reach_a_file() {
    let mut bad = log();
    bad.features[1].values = Some(Values {
        fp32_values: vec![1.0],
        ..Default::default()
    });
    assert_eq!(validate(&served(bad.clone())).unwrap_err().column, "price");
    let mut bad = log();
    bad.candidate_ids.pop();
    assert_eq!(
        validate(&served(bad.clone())).unwrap_err().column,
        "candidate_ids"
    );
}

#[test]
fn rows_whose_logs_have_equal_but_unshared_layouts_give_the_same_batch() {
    // `ServedLog::from` gives each log a layout of its own: the columns are then matched
    // by comparing them, not by the shared pointer.
    let decoded: Vec<Row> = rows()
        .into_iter()
        .map(|mut r| {
            r.features = Arc::new(ServedLog::from(log()));
            r
        })
        .collect();
    assert_eq!(
        to_record_batch(&decoded, &InMemoryColumns::default()).unwrap(),
        to_record_batch(&rows(), &InMemoryColumns::default()).unwrap()
    );
}

#[test]
fn half_floats_convert_exactly() {
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
    assert!(f16_to_f32(0x7e00).is_nan());
    assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
    assert_eq!(bf16_to_f32(0x3f80), 1.0);
}

/// A log of `n` candidates whose scalar `price` is `base + row` and whose `emb` of two is
/// `(base + row, -row)`; `price` unpacked (wire type 5, as proto2 writers send floats) when
/// `unpacked`, and neither feature when `bare`.
fn priced(base: f32, n: usize, unpacked: bool, bare: bool) -> ServedLog {
    let fp32 = |name: &str, shape: Vec<i64>, values: Vec<f32>| Feature {
        name: name.into(),
        datatype: DataType::Fp32 as i32,
        row_shape: shape,
        values: Some(Values {
            fp32_values: values,
            ..Default::default()
        }),
        per_request: false,
    };
    let mut log = FeatureLog {
        request_id: format!("r{base}"),
        row_count: n as u32,
        candidate_ids: (0..n).map(|i| format!("c{i}")).collect(),
        ..Default::default()
    };
    if !bare {
        let emb = (0..n)
            .flat_map(|i| [base + i as f32, -(i as f32)])
            .collect();
        log.features.push(fp32("emb", vec![2], emb));
    }
    if !bare && !unpacked {
        log.features.push(fp32(
            "price",
            vec![],
            (0..n).map(|i| base + i as f32).collect(),
        ));
    }
    let mut raw = log.encode_to_vec();
    if !bare && unpacked {
        let mut values = Vec::new();
        for i in 0..n {
            values.push(6 << 3 | 5);
            values.extend_from_slice(&(base + i as f32).to_le_bytes());
        }
        let mut feature = vec![0x0a, 5];
        feature.extend_from_slice(b"price");
        feature.extend_from_slice(&[0x10, DataType::Fp32 as u8]);
        prost::encoding::bytes::encode(4, &values, &mut feature);
        prost::encoding::bytes::encode(9, &feature, &mut raw);
    }
    ServedLog::decode(raw, &mut crate::log::Layouts::default()).unwrap()
}

#[test]
fn fp32_columns_read_every_row_of_many_blocks_whatever_its_log_holds() {
    // More rows than one block of the gather, from logs that hold the values packed, unpacked
    // or not at all, in an order that changes layout from row to row.
    let logs: Vec<Arc<ServedLog>> = (0..7)
        .map(|j| Arc::new(priced(1000.0 * j as f32, 40, j % 3 == 1, j % 3 == 2)))
        .collect();
    let packed = |log: &ServedLog| {
        let i = log
            .layout()
            .columns()
            .iter()
            .position(|c| c.name == "price");
        matches!(
            log.fp32_cells(i.unwrap(), 0, 1),
            Some(FloatCells::Packed(_))
        )
    };
    assert!(packed(&logs[0]) && !packed(&logs[1]));
    let rows: Vec<Row> = (0..301)
        .map(|i| {
            let features = logs[i * 5 % logs.len()].clone();
            Row {
                request_id: features.request_id.clone(),
                item_id: format!("c{}", i % 40),
                features,
                row: i % 40,
                impression_time_us: None,
                labels: Labels::default(),
            }
        })
        .collect();
    let batch = to_record_batch(&rows, &InMemoryColumns::default()).unwrap();
    let price = batch
        .column_by_name("price")
        .unwrap()
        .as_primitive::<Float32Type>();
    let emb = batch.column_by_name("emb").unwrap().as_fixed_size_list();
    for (i, row) in rows.iter().enumerate() {
        let j = logs
            .iter()
            .position(|l| Arc::ptr_eq(l, &row.features))
            .unwrap();
        let base = 1000.0 * j as f32 + row.row as f32;
        if j % 3 == 2 {
            assert!(price.is_null(i) && emb.is_null(i), "row {i}");
            continue;
        }
        assert_eq!(price.value(i), base, "row {i}");
        assert_eq!(
            emb.value(i).as_primitive::<Float32Type>().values(),
            &[base, -(row.row as f32)],
            "row {i}"
        );
    }
}
