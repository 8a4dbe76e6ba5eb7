//! FeatureLog records.

use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
use proptest::prelude::*;
use prost::Message;
use prost::bytes::Bytes;

use super::config;
use super::generators::{mutate, mutation, text};
use super::reencode::reencode_log;
use crate::log::{CandidateId, Layouts, ServedLog};

fn f32s(max: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(any::<u32>().prop_map(f32::from_bits), 0..max)
}

fn f64s(max: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(any::<u64>().prop_map(f64::from_bits), 0..max)
}

/// Values of one kind, as the sidecar writes them for `datatype`, or any mix (another writer).
fn values(datatype: i32) -> BoxedStrategy<Values> {
    use prop::collection::vec;
    let one_kind = match DataType::try_from(datatype) {
        Ok(DataType::Fp32) => f32s(9)
            .prop_map(|v| Values {
                fp32_values: v,
                ..Values::default()
            })
            .boxed(),
        Ok(DataType::Fp64) => f64s(6)
            .prop_map(|v| Values {
                fp64_values: v,
                ..Values::default()
            })
            .boxed(),
        Ok(DataType::Int64) => vec(any::<i64>(), 0..6)
            .prop_map(|v| Values {
                int64_values: v,
                ..Values::default()
            })
            .boxed(),
        Ok(DataType::Bytes) => vec(vec(any::<u8>(), 0..4).prop_map(Bytes::from), 0..4)
            .prop_map(|v| Values {
                bytes_values: v,
                ..Values::default()
            })
            .boxed(),
        _ => vec(any::<i32>(), 0..6)
            .prop_map(|v| Values {
                int32_values: v,
                ..Values::default()
            })
            .boxed(),
    };
    let mixed = (
        (
            vec(any::<bool>(), 0..3),
            vec(any::<i32>(), 0..3),
            vec(any::<i64>(), 0..3),
            vec(any::<u32>(), 0..3),
            vec(any::<u64>(), 0..3),
        ),
        (
            f32s(4),
            f64s(3),
            vec(vec(any::<u8>(), 0..3).prop_map(Bytes::from), 0..3),
            vec(any::<u32>(), 0..3),
        ),
    )
        .prop_map(
            |((b, i32s, i64s, u32s, u64s), (f32s, f64s, bytes, half))| Values {
                bool_values: b,
                int32_values: i32s,
                int64_values: i64s,
                uint32_values: u32s,
                uint64_values: u64s,
                fp32_values: f32s,
                fp64_values: f64s,
                bytes_values: bytes,
                half_bits: half,
            },
        );
    prop_oneof![4 => one_kind, 1 => mixed].boxed()
}

fn datatype() -> impl Strategy<Value = i32> {
    prop_oneof![
        6 => Just(DataType::Fp32 as i32),
        3 => Just(DataType::Fp64 as i32),
        2 => Just(DataType::Int64 as i32),
        4 => 0i32..16,
        1 => any::<i32>(),
    ]
}

fn feature() -> impl Strategy<Value = Feature> {
    (
        text(),
        datatype(),
        prop::collection::vec(prop_oneof![3 => 0i64..5, 1 => any::<i64>()], 0..3),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(|(name, datatype, row_shape, per_request, has_values)| {
            let values = if has_values {
                values(datatype).prop_map(Some).boxed()
            } else {
                Just(None).boxed()
            };
            values.prop_map(move |values| Feature {
                name: name.clone(),
                datatype,
                row_shape: row_shape.clone(),
                values,
                per_request,
            })
        })
}

fn feature_log() -> impl Strategy<Value = FeatureLog> {
    use prop::collection::{hash_map, vec};
    (
        (text(), text(), text(), text(), text()),
        prop::option::of((any::<i64>(), any::<i32>())),
        any::<u32>(),
        prop_oneof![
            // Text ids, integer ids, neither, or both (which `rows::validate` refuses).
            (vec(text(), 0..6), Just(Vec::new())),
            (Just(Vec::new()), vec(any::<i64>(), 0..6)),
            (vec(text(), 0..2), vec(any::<i64>(), 0..2)),
        ],
        vec(feature(), 0..4),
        vec(feature(), 0..2),
        hash_map(text(), text(), 0..3),
    )
        .prop_map(
            |(
                (request_id, model_name, model_version, sidecar_instance, allow_list_version),
                served_at,
                row_count,
                (candidate_ids, candidate_int_ids),
                features,
                outputs,
                parameters,
            )| FeatureLog {
                request_id,
                model_name,
                model_version,
                served_at: served_at
                    .map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
                sidecar_instance,
                allow_list_version,
                row_count,
                candidate_ids,
                features,
                outputs,
                parameters,
                candidate_int_ids,
            },
        )
}

/// The largest `n` for which `read(0, n)` succeeds, when `read(0, 0)` does.
fn readable(read: impl Fn(usize) -> bool, bound: usize) -> Option<usize> {
    if !read(0) {
        return None;
    }
    let (mut lo, mut hi) = (0, bound);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if read(mid) { lo = mid } else { hi = mid - 1 }
    }
    Some(lo)
}

/// What a decoded log holds, through its public readers only, as a prost `FeatureLog`: its
/// scalar fields, ids, and each column with the values it can read (decoded, or the packed
/// FP32/FP64 run kept in the bytes).
fn as_feature_log(served: &ServedLog) -> FeatureLog {
    let raw_len = served.raw().len();
    let mut columns = served.layout().columns().iter().enumerate().map(|(i, c)| {
        let values = match served.values(i) {
            Some(v) => Some(v.clone()),
            None => {
                let fp32 = |n| served.fp32(i, 0, n, &mut Vec::new());
                let fp64 = |n| served.fp64(i, 0, n, &mut Vec::new());
                if let Some(n) = readable(fp32, raw_len / 4) {
                    let mut out = Vec::new();
                    served.fp32(i, 0, n, &mut out);
                    Some(Values {
                        fp32_values: out,
                        ..Values::default()
                    })
                } else if let Some(n) = readable(fp64, raw_len / 8) {
                    let mut out = Vec::new();
                    served.fp64(i, 0, n, &mut out);
                    Some(Values {
                        fp64_values: out,
                        ..Values::default()
                    })
                } else {
                    None
                }
            }
        };
        (
            c.side,
            Feature {
                name: c.name.clone(),
                datatype: c.datatype,
                row_shape: c.row_shape.clone(),
                values,
                per_request: c.per_request,
            },
        )
    });
    let (mut features, mut outputs) = (Vec::new(), Vec::new());
    for (side, f) in columns.by_ref() {
        match side {
            crate::log::Side::Feature => features.push(f),
            crate::log::Side::Output => outputs.push(f),
        }
    }
    let (mut candidate_ids, mut candidate_int_ids) = (Vec::new(), Vec::new());
    for id in served.candidate_ids() {
        match id {
            CandidateId::Text(t) => candidate_ids.push(t.to_owned()),
            CandidateId::Int(n) => candidate_int_ids.push(n),
        }
    }
    FeatureLog {
        candidate_ids,
        candidate_int_ids,
        features,
        outputs,
        ..(**served).clone()
    }
}

/// What [`check_log`] found.
#[derive(Debug, PartialEq)]
enum Agreed {
    /// Both read the record, alike.
    Read,
    /// Both refused it.
    Refused,
    /// Prost skips a group in it (proto2's, deprecated), the joiner refuses it: a proto3
    /// writer (every FeatureLog writer) cannot send one, and a refused record is dead-lettered,
    /// never read wrong, so the joiner's walk does not carry the code to step over them.
    Group,
}

/// Decodes `raw` both ways and checks they agree: both refuse it, or both read it and every
/// reader of the decoded log says what prost's decode says.
fn check_log(raw: &[u8]) -> Result<Agreed, TestCaseError> {
    let mut layouts = Layouts::default();
    let lazy = ServedLog::decode(raw.to_vec(), &mut layouts);
    let eager = FeatureLog::decode(raw);
    let (lazy, mut eager) = match (lazy, eager) {
        (Ok(l), Ok(e)) => (l, e),
        (Err(_), Err(_)) => return Ok(Agreed::Refused),
        (Err(l), Ok(_)) if l.to_string().ends_with("wire type 3") => return Ok(Agreed::Group),
        (l, e) => {
            return Err(TestCaseError::fail(format!(
                "the joiner {} a record prost {}: {raw:?}\njoiner: {l:?}\nprost: {e:?}",
                if l.is_ok() { "read" } else { "refused" },
                if e.is_ok() { "reads" } else { "refuses" },
            )));
        }
    };
    prop_assert_eq!(lazy.raw(), raw, "the bytes are kept as they came");
    // Decoding again through the same layouts shares the layout (the interned path).
    let again = ServedLog::decode(raw.to_vec(), &mut layouts).map_err(|e| {
        TestCaseError::fail(format!(
            "a record read once is refused the second time: {e}"
        ))
    })?;
    prop_assert!(std::sync::Arc::ptr_eq(lazy.layout(), again.layout()));
    let mut got = as_feature_log(&lazy);
    // Integer ids win when a record carries both kinds (which `rows::validate` refuses): the
    // text ids are then not readable.
    if lazy.has_both_kinds_of_ids() {
        prop_assert!(!eager.candidate_ids.is_empty() && !eager.candidate_int_ids.is_empty());
        eager.candidate_ids.clear();
    }
    // Maps: compared as maps (their encodings' order is a HashMap's).
    prop_assert_eq!(
        std::mem::take(&mut got.parameters),
        std::mem::take(&mut eager.parameters)
    );
    // NaN != NaN: the floats are compared by their encodings (bit for bit).
    prop_assert_eq!(
        got.encode_to_vec(),
        eager.encode_to_vec(),
        "joiner {:?}\nprost  {:?}",
        got,
        eager
    );
    prop_assert_eq!(
        lazy.candidate_count(),
        got.candidate_ids.len().max(got.candidate_int_ids.len())
    );
    Ok(Agreed::Read)
}

proptest! {
    #![proptest_config(config(1536))]

    /// Records as prost writes them, and as other writers may (see `reencode_log`): read as
    /// prost reads them.
    #[test]
    fn feature_logs_read_as_prost_reads_them(log in feature_log(), seed in any::<u64>()) {
        let plain = log.encode_to_vec();
        prop_assert_eq!(check_log(&plain)?, Agreed::Read, "prost's own encoding must decode");
        let other = reencode_log(&plain, seed);
        let agreed = check_log(&other)?;
        prop_assert!(agreed != Agreed::Refused, "a valid re-encoding must decode: {:?}", other);
    }

    /// The same records changed at random: refused exactly when prost refuses them, read as
    /// prost reads them otherwise, never a panic.
    #[test]
    fn mutated_feature_logs_are_refused_or_read_as_prost_reads_them(
        log in feature_log(),
        seed in any::<u64>(),
        reencode in any::<bool>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut raw = log.encode_to_vec();
        if reencode {
            raw = reencode_log(&raw, seed);
        }
        mutate(&mut raw, &mutations);
        check_log(&raw)?;
    }

    /// Short random bytes, most of them no record at all.
    #[test]
    fn random_bytes_are_refused_or_read_as_prost_reads_them(
        raw in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        check_log(&raw)?;
    }
}

// ---------------------------------------------------------------------------------------------
// What the properties found, kept as the exact inputs.

/// A varint's tenth byte holds only the 64th bit: the joiner read `[0x80 x 9, 0x02]` as 0
/// (dropping the bit past 64) where prost refuses it, in candidate ids, shapes and lengths.
#[test]
fn a_varint_past_64_bits_is_refused_as_prost_refuses_it() {
    let long = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02];
    let unpacked_id = [&[12 << 3][..], &long].concat();
    let packed_ids = [&[12 << 3 | 2, 10][..], &long].concat();
    let shape = [&[9 << 3 | 2, 11, 3 << 3][..], &long].concat();
    let mut long_length = vec![8 << 3 | 2];
    long_length.extend(long);
    // The largest one still reads, in both.
    let max = [&[12 << 3][..], &[0xff; 9], &[0x01]].concat();
    for raw in [unpacked_id, packed_ids, shape, long_length] {
        assert!(FeatureLog::decode(&raw[..]).is_err(), "{raw:?}");
        let refused = ServedLog::decode(raw.clone(), &mut Layouts::default());
        assert!(refused.is_err(), "{raw:?}: {refused:?}");
        assert_eq!(check_log(&raw).ok(), Some(Agreed::Refused));
    }
    assert_eq!(check_log(&max).ok(), Some(Agreed::Read));
    let read = ServedLog::decode(max, &mut Layouts::default()).unwrap();
    assert_eq!(read.candidate_id(0), Some(CandidateId::Int(i64::MIN)));
}

/// A key past 32 bits (field number 2^29, unknown) in a feature: skipped by the joiner, refused
/// by prost.
#[test]
fn a_key_past_32_bits_is_refused_as_prost_refuses_it() {
    let feature = [0x80, 0x80, 0x80, 0x80, 0x10, 0x01];
    let raw = [&[9 << 3 | 2, feature.len() as u8][..], &feature].concat();
    assert!(FeatureLog::decode(&raw[..]).is_err());
    let refused = ServedLog::decode(raw.clone(), &mut Layouts::default());
    assert!(refused.is_err(), "{refused:?}");
    // The largest key (field 2^29 - 1, wire type 5) is an unknown field, skipped by both.
    let feature = [0xfd, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3, 4];
    let raw = [&[9 << 3 | 2, feature.len() as u8][..], &feature].concat();
    assert_eq!(check_log(&raw).ok(), Some(Agreed::Read));
}
