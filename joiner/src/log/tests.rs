//! Unit tests of feature logs: decoding as prost does, packed and decoded values, shared
//! layouts, and malformed records refused without panics.

use super::*;
use featurelog_schemas::featurelog::v1::Feature;
use featurelog_schemas::wire::feature_log;

fn feature(name: &str, dt: DataType, values: Values) -> Feature {
    Feature::column(name, dt, vec![], values)
}

fn sample() -> FeatureLog {
    FeatureLog {
        request_id: "r1".into(),
        model_name: "m".into(),
        row_count: 3,
        candidate_ids: vec!["a".into(), "b".into(), "ccc".into()],
        features: vec![
            feature(
                "score",
                DataType::Fp32,
                Values {
                    fp32_values: vec![1.5, -0.0, f32::from_bits(0x7fc0_0001)],
                    ..Default::default()
                },
            ),
            Feature {
                row_shape: vec![1],
                ..feature(
                    "age",
                    DataType::Int64,
                    Values {
                        int64_values: vec![1, -2, 3],
                        ..Default::default()
                    },
                )
            },
        ],
        outputs: vec![feature(
            "p",
            DataType::Fp64,
            Values {
                fp64_values: vec![0.25, 0.5, 1e300],
                ..Default::default()
            },
        )],
        ..Default::default()
    }
}

fn decode(raw: Vec<u8>) -> Result<ServedLog, MalformedLog> {
    ServedLog::decode(raw, &mut Layouts::default())
}

#[test]
fn integer_ids_read_packed_or_not_and_match_only_canonical_text() {
    let ints = FeatureLog {
        candidate_ids: Vec::new(),
        candidate_int_ids: vec![42, -7, 0, i64::MIN, 42],
        row_count: 5,
        ..sample()
    };
    let packed = ints.encode_to_vec();
    // The same ids unpacked (field 12 as varints), as another writer may send them.
    let mut unpacked = FeatureLog {
        candidate_int_ids: Vec::new(),
        ..ints.clone()
    }
    .encode_to_vec();
    for n in &ints.candidate_int_ids {
        prost::encoding::sint64::encode(feature_log::CANDIDATE_INT_IDS, n, &mut unpacked);
    }
    for raw in [packed, unpacked] {
        let served = decode(raw).unwrap();
        assert_eq!(served.candidate_count(), 5);
        assert_eq!(served.candidate_id(1), Some(CandidateId::Int(-7)));
        let index = served.candidate_index();
        for (item, row) in [
            ("42", Some(0)),
            ("-7", Some(1)),
            ("0", Some(2)),
            ("-9223372036854775808", Some(3)),
            ("042", None),
            ("+42", None),
            ("-0", None),
            ("", None),
            ("-", None),
            ("4 2", None),
            ("99999999999999999999", None),
        ] {
            assert_eq!(served.find_candidate(item), row, "{item:?}");
            assert_eq!(index.get(item), row, "{item:?}");
        }
        let mut buf = String::new();
        let texts: Vec<String> = served
            .candidate_ids()
            .map(|c| c.text(&mut buf).to_owned())
            .collect();
        assert_eq!(texts, ["42", "-7", "0", "-9223372036854775808", "42"]);
    }
    let both = FeatureLog {
        candidate_ids: vec!["a".into()],
        ..ints
    };
    let both = decode(both.encode_to_vec()).unwrap();
    assert!(both.has_both_kinds_of_ids());
    assert!(crate::rows::validate(&both).is_err());
}

#[test]
fn packed_floats_and_ids_stay_in_the_bytes_and_read_back_bit_exact() {
    let log = sample();
    let served = decode(log.encode_to_vec()).unwrap();
    assert_eq!(served.raw(), log.encode_to_vec().as_slice());
    assert_eq!(served.request_id, "r1");
    assert_eq!(
        served.candidate_ids().collect::<Vec<_>>(),
        ["a", "b", "ccc"].map(CandidateId::Text)
    );
    assert_eq!(served.find_candidate("ccc"), Some(2));
    assert_eq!(served.find_candidate("cc"), None);
    let columns = served.layout().columns();
    assert_eq!(columns.len(), 3);
    assert_eq!(
        (columns[1].name.as_str(), columns[1].side),
        ("age", Side::Feature)
    );
    assert_eq!(columns[1].row_shape, [1]);
    assert_eq!(
        (columns[2].name.as_str(), columns[2].side),
        ("p", Side::Output)
    );
    // The float columns kept no decoded copy; the INT64 one was decoded.
    assert!(served.values(0).is_none());
    assert_eq!(served.values(1).unwrap().int64_values, [1, -2, 3]);
    assert_eq!(served.values_len(0), 3);
    assert_eq!(served.values_len(2), 3);
    let mut out = Vec::new();
    assert!(served.fp32(0, 1, 3, &mut out));
    let bits: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
    assert_eq!(bits, vec![(-0.0f32).to_bits(), 0x7fc0_0001]);
    let mut out = Vec::new();
    assert!(served.fp64(2, 2, 3, &mut out));
    assert_eq!(out, vec![1e300]);
    assert!(!served.fp32(0, 2, 4, &mut Vec::new()));
    assert!(
        !served.fp64(0, 0, 1, &mut Vec::new()),
        "an FP32 run is not FP64"
    );
    // NaN != NaN: compare encodings.
    assert_eq!(
        FeatureLog::decode(served.raw()).unwrap().encode_to_vec(),
        log.encode_to_vec()
    );
    assert_eq!(ServedLog::from(log.clone()), served);
}

#[test]
fn unusual_encodings_are_decoded_and_read_the_same() {
    // Unpacked floats (wire type 5, as proto2 writers send them), then a second packed run
    // of the same column, in a second `values` field: valid protobuf for three values.
    let mut values = Vec::new();
    for x in [1.0f32, 2.0] {
        values.push(6 << 3 | 5);
        values.extend_from_slice(&x.to_le_bytes());
    }
    let more = [&[6 << 3 | 2, 4][..], &3.0f32.to_le_bytes()].concat();
    let mut feature = vec![0x0a, 1, b'x', 0x10, DataType::Fp32 as u8];
    feature.extend_from_slice(&[4 << 3 | 2, values.len() as u8]);
    feature.extend_from_slice(&values);
    feature.extend_from_slice(&[4 << 3 | 2, more.len() as u8]);
    feature.extend_from_slice(&more);
    // Unpacked shape entries and an unknown field are accepted too.
    feature.extend_from_slice(&[3 << 3, 3, 15 << 3, 1]);
    let mut raw = vec![0x0a, 2, b'r', b'2', 0x38, 3];
    raw.extend_from_slice(&[9 << 3 | 2, feature.len() as u8]);
    raw.extend_from_slice(&feature);
    let served = decode(raw.clone()).unwrap();
    let mut out = Vec::new();
    assert!(served.fp32(0, 0, 3, &mut out));
    assert_eq!(out, vec![1.0, 2.0, 3.0]);
    assert_eq!(served.layout().columns()[0].row_shape, [3]);
    let eager = FeatureLog::decode(raw.as_slice()).unwrap();
    assert_eq!(eager.features[0].values.as_ref().unwrap().fp32_values, out);
    assert_eq!(eager.features[0].row_shape, [3]);
}

#[test]
fn logs_with_the_same_columns_share_one_layout_and_unused_ones_are_dropped() {
    let mut layouts = Layouts::default();
    let a = ServedLog::decode(sample().encode_to_vec(), &mut layouts).unwrap();
    let other = FeatureLog {
        request_id: "other".into(),
        ..sample()
    };
    let b = ServedLog::decode(other.encode_to_vec(), &mut layouts).unwrap();
    assert!(Arc::ptr_eq(a.layout(), b.layout()));
    let mut renamed = sample();
    renamed.features[1].name = "age2".into();
    let c = ServedLog::decode(renamed.encode_to_vec(), &mut layouts).unwrap();
    assert!(!Arc::ptr_eq(a.layout(), c.layout()));
    assert_eq!(layouts.len(), 2);
    drop(c);
    for i in 0..100 {
        let mut log = sample();
        log.features[0].name = format!("f{i}");
        let _ = ServedLog::decode(log.encode_to_vec(), &mut layouts).unwrap();
    }
    assert!(layouts.len() < 100, "{} layouts held", layouts.len());
    let d = ServedLog::decode(sample().encode_to_vec(), &mut layouts).unwrap();
    assert!(Arc::ptr_eq(a.layout(), d.layout()));
}

/// Candidate ids, and per column its metadata, float bits and INT64 values.
type Content = (Vec<String>, Vec<(Column, Vec<u32>, Vec<i64>)>);

/// What a decoded log says, read through the lazy accessors, in prost's terms.
fn as_prost(served: &ServedLog) -> Content {
    let ids = served.candidate_ids().map(|c| c.to_string()).collect();
    let columns = served
        .layout()
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let n = served.values_len(i);
            let mut bits: Vec<u32> = Vec::new();
            if c.data_type() == DataType::Fp32 {
                let mut out = Vec::new();
                served.fp32(i, 0, n, &mut out);
                bits.extend(out.iter().map(|x| x.to_bits()));
            } else if c.data_type() == DataType::Fp64 {
                let mut out = Vec::new();
                served.fp64(i, 0, n, &mut out);
                bits.extend(out.iter().map(|x| x.to_bits() as u32));
            }
            let ints = served
                .values(i)
                .map(|v| v.int64_values.clone())
                .unwrap_or_default();
            (c.clone(), bits, ints)
        })
        .collect();
    (ids, columns)
}

fn expected(log: &FeatureLog) -> Content {
    let columns = log
        .features
        .iter()
        .map(|f| (Side::Feature, f))
        .chain(log.outputs.iter().map(|f| (Side::Output, f)))
        .map(|(side, f)| {
            let column = Column {
                side,
                name: f.name.clone(),
                datatype: f.datatype,
                row_shape: f.row_shape.clone(),
                per_request: f.per_request,
            };
            let v = f.values.clone().unwrap_or_default();
            let bits: Vec<u32> = match column.data_type() {
                DataType::Fp32 => v.fp32_values.iter().map(|x| x.to_bits()).collect(),
                DataType::Fp64 => v.fp64_values.iter().map(|x| x.to_bits() as u32).collect(),
                _ => Vec::new(),
            };
            (column, bits, v.int64_values)
        })
        .collect();
    // Integer ids win when a record carries both (which `validate` then refuses).
    let ids = if log.candidate_int_ids.is_empty() {
        log.candidate_ids.clone()
    } else {
        log.candidate_int_ids.iter().map(i64::to_string).collect()
    };
    (ids, columns)
}

#[test]
fn mutated_records_never_panic_and_read_exactly_as_prost_reads_them() {
    let text_ids = sample().encode_to_vec();
    let int_ids = FeatureLog {
        candidate_ids: Vec::new(),
        candidate_int_ids: vec![300, -2, 70_000],
        ..sample()
    }
    .encode_to_vec();
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
    let mut next = || rng.u64(..);
    let mut both_ok = 0;
    for i in 0..10_000 {
        let mut raw = if i % 2 == 0 { &text_ids } else { &int_ids }.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % raw.len() as u64) as usize;
            raw[at] = next() as u8;
        }
        let lazy = decode(raw.clone());
        let eager = FeatureLog::decode(raw.as_slice());
        // Refused exactly when prost refuses it: nothing dead-lettered that is valid.
        assert_eq!(lazy.is_ok(), eager.is_ok(), "{raw:?}: {lazy:?}");
        let (Ok(lazy), Ok(eager)) = (lazy, eager) else {
            continue;
        };
        // Where both accept a record, they must read the same thing from it.
        assert_eq!(as_prost(&lazy), expected(&eager), "{raw:?}");
        both_ok += 1;
    }
    assert!(both_ok > 200, "only {both_ok} mutations decoded");
}

#[test]
fn malformed_records_are_errors_not_panics() {
    let good = sample().encode_to_vec();
    for cut in 1..good.len() {
        // Every truncation either fails or decodes as prost decodes it: never a panic.
        let lazy = decode(good[..cut].to_vec());
        let eager = FeatureLog::decode(&good[..cut]);
        assert_eq!(lazy.is_ok(), eager.is_ok(), "cut at {cut}");
    }
    // A packed float run whose length is not a multiple of 4.
    let raw = vec![9 << 3 | 2, 5, 4 << 3 | 2, 3, 6 << 3 | 2, 1, 0];
    assert!(decode(raw.clone()).is_err());
    assert!(FeatureLog::decode(raw.as_slice()).is_err());
    // A candidate id that is not UTF-8.
    let raw = vec![8 << 3 | 2, 1, 0xff];
    assert!(decode(raw.clone()).is_err());
    assert!(FeatureLog::decode(raw.as_slice()).is_err());
    assert!(decode(vec![0xff; 12]).is_err());
}

#[test]
fn refusals_say_what_is_wrong_with_the_record() {
    let refused = |raw: Vec<u8>| decode(raw).unwrap_err().to_string();
    // A known field of the wrong wire type: the name of a feature as a varint.
    assert_eq!(
        refused(vec![9 << 3 | 2, 2, 1 << 3, 1]),
        "malformed FeatureLog: Feature field 1: wire type 0"
    );
    assert_eq!(
        refused(vec![8 << 3, 1]),
        "malformed FeatureLog: FeatureLog field 8: wire type 0"
    );
    // A group (proto2's), which no FeatureLog writer sends.
    assert_eq!(
        refused(vec![9 << 3 | 2, 1, 15 << 3 | 3]),
        "malformed FeatureLog: field 15: wire type 3"
    );
    // A feature that ends inside a varint, with more of the record after it: the varint is
    // cut where the feature ends (the walker never reads past an embedded message).
    let raw = vec![9 << 3 | 2, 2, 2 << 3, 0x80, 0x0a, 1, b'r'];
    assert!(FeatureLog::decode(raw.as_slice()).is_err());
    assert_eq!(refused(raw), "malformed FeatureLog: truncated varint");
    // A payload past the end of its message.
    assert_eq!(
        refused(vec![8 << 3 | 2, 3, b'a']),
        "malformed FeatureLog: field 8: truncated"
    );
    assert_eq!(
        refused(vec![8 << 3 | 2, 1, 0xff]),
        "malformed FeatureLog: a string is not UTF-8"
    );
}
