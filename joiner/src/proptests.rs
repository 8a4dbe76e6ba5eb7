//! Differential property tests of the joiner's hand-written decoders on the untrusted path:
//! each reads the same bytes as its reference (prost for protobuf, serde_json for JSON) and must
//! agree with it, and never panic.
//!
//! - [`crate::log::ServedLog::decode`] against prost's `FeatureLog::decode`: records prost
//!   writes, the same records re-encoded as other writers may (unpacked or split repeated
//!   fields, split `values` messages, unknown fields, fields interleaved), and all of those
//!   changed at random.
//! - [`crate::event::from_protobuf`] against prost's `Impression::decode`, plain or in the
//!   Schema Registry's framing.
//! - [`crate::event::from_json`] (a streaming pick of the configured fields) against a parse of
//!   the whole event into a `serde_json::Value`.
//!
//! Cases are bounded (see [`config`]) so that the whole set runs in seconds in a debug build;
//! `PROPTEST_CASES=100000 cargo test -p featurelog-joiner --lib proptests` runs longer, and
//! `PROPTEST_RNG_SEED=<n>` explores other cases than the fixed default seed.

use std::collections::BTreeMap;

use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Impression, Values};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use prost::Message;
use prost::bytes::Bytes;
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

use crate::event::{JsonFields, TimeUnit, from_impression, from_json, from_protobuf};
use crate::log::{CandidateId, Layouts, ServedLog};

/// `cases` cases (or `PROPTEST_CASES`), from a fixed seed unless `PROPTEST_RNG_SEED` is set:
/// CI runs the same cases every time, and a longer local run can explore others. No
/// regression files: a case found is kept as a unit test next to the decoder it broke.
fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if let Some(n) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        config.cases = n;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x5eed_f00d_1e55_0001);
    }
    config
}

// ---------------------------------------------------------------------------------------------
// Bytes changed at random.

/// One change to an encoding: mostly small ones to lengths, tags and counts, which move fields.
#[derive(Debug, Clone)]
enum Mutation {
    Set(Index, u8),
    Add(Index, u8),
    Flip(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 1u8..4).prop_map(|(i, d)| Mutation::Add(i, d)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<Index>().prop_map(Mutation::Remove),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        if bytes.is_empty() {
            return;
        }
        let at = |i: &Index| i.index(bytes.len());
        match m {
            Mutation::Set(i, b) => {
                let at = at(i);
                bytes[at] = *b;
            }
            Mutation::Add(i, d) => {
                let at = at(i);
                bytes[at] = bytes[at].wrapping_add(*d);
            }
            Mutation::Flip(i, bit) => {
                let at = at(i);
                bytes[at] ^= 1 << bit;
            }
            Mutation::Insert(i, b) => {
                let at = at(i);
                bytes.insert(at, *b);
            }
            Mutation::Remove(i) => {
                let at = at(i);
                bytes.remove(at);
            }
            Mutation::Truncate(i) => {
                let at = at(i);
                bytes.truncate(at);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Valid encodings other than prost's, built on prost's own tokenizer.

/// One field of a message as prost reads it: its number, wire type and payload (the bytes
/// after the key; a length-delimited field's without its length).
struct Field {
    number: u32,
    wire: WireType,
    payload: Vec<u8>,
}

/// The top-level fields of a valid message, in order.
fn fields(mut buf: &[u8]) -> Vec<Field> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let Ok((number, wire)) = decode_key(&mut buf) else {
            unreachable!("prost's own encoding")
        };
        let len = match wire {
            WireType::Varint => {
                let before = buf;
                let _ = decode_varint(&mut buf);
                let payload = before[..before.len() - buf.len()].to_vec();
                out.push(Field {
                    number,
                    wire,
                    payload,
                });
                continue;
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => decode_varint(&mut buf).unwrap_or(0) as usize,
            WireType::StartGroup | WireType::EndGroup => unreachable!("no groups in proto3"),
        };
        out.push(Field {
            number,
            wire,
            payload: buf[..len].to_vec(),
        });
        buf = &buf[len..];
    }
    out
}

/// A field's encoding: key, length if length-delimited, payload.
fn put(number: u32, wire: WireType, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(number, wire, &mut out);
    if wire == WireType::LengthDelimited {
        encode_varint(payload.len() as u64, &mut out);
    }
    out.extend_from_slice(payload);
    out
}

/// The varints of a packed run, each as its bytes.
fn varints(mut run: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !run.is_empty() {
        let before = run;
        let _ = decode_varint(&mut run);
        out.push(before[..before.len() - run.len()].to_vec());
    }
    out
}

/// A packed run of `elements` (each its encoded bytes) as a writer may send it: packed, one
/// field per element (`unpacked` wire type), split into two packed runs, an empty run first, or
/// a mix. Protobuf concatenates them all: the same repeated field.
fn repacked(
    number: u32,
    elements: &[Vec<u8>],
    unpacked: WireType,
    rng: &mut fastrand::Rng,
) -> Vec<Vec<u8>> {
    let packed = |elements: &[Vec<u8>]| put(number, WireType::LengthDelimited, &elements.concat());
    match rng.u8(..5) {
        0 => vec![packed(elements)],
        1 => elements.iter().map(|e| put(number, unpacked, e)).collect(),
        2 => {
            let at = rng.usize(..=elements.len());
            vec![packed(&elements[..at]), packed(&elements[at..])]
        }
        3 => vec![packed(&[]), packed(elements)],
        _ => elements
            .iter()
            .map(|e| {
                if rng.bool() {
                    put(number, unpacked, e)
                } else {
                    packed(std::slice::from_ref(e))
                }
            })
            .collect(),
    }
}

/// An unknown field (numbers past every message's here) of any wire type.
fn unknown(rng: &mut fastrand::Rng) -> Vec<u8> {
    let number = match rng.u8(..4) {
        0 => 536_870_911, // the largest field number
        _ => rng.u32(13..40),
    };
    match rng.u8(..40) {
        0..=9 => {
            let mut v = Vec::new();
            encode_varint(rng.u64(..), &mut v);
            put(number, WireType::Varint, &v)
        }
        10..=19 => put(number, WireType::SixtyFourBit, &rng.u64(..).to_le_bytes()),
        20..=29 => put(number, WireType::ThirtyTwoBit, &rng.u32(..).to_le_bytes()),
        30..=38 => put(
            number,
            WireType::LengthDelimited,
            &(0..rng.usize(..6)).map(|_| rng.u8(..)).collect::<Vec<_>>(),
        ),
        // Rarely, a group (proto2's, deprecated): prost skips it as an unknown field, the
        // joiner refuses the record (see `check_log`).
        _ => {
            let mut group = Vec::new();
            encode_key(number, WireType::StartGroup, &mut group);
            for _ in 0..rng.usize(..3) {
                group.extend(put(rng.u32(1..20), WireType::ThirtyTwoBit, &[1, 2, 3, 4]));
            }
            encode_key(number, WireType::EndGroup, &mut group);
            group
        }
    }
}

/// Encoded fields in another order that keeps each field number's occurrences in theirs (a
/// scalar's last occurrence wins, a repeated field's elements are in order, messages merge in
/// order): the message prost reads is the same.
fn interleaved(fields: Vec<(u32, Vec<u8>)>, rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut by_number: BTreeMap<u32, std::collections::VecDeque<Vec<u8>>> = BTreeMap::new();
    for (n, f) in fields {
        by_number.entry(n).or_default().push_back(f);
    }
    let mut out = Vec::new();
    while !by_number.is_empty() {
        let pick = rng.usize(..by_number.len());
        let Some((&n, queue)) = by_number.iter_mut().nth(pick) else {
            break;
        };
        if let Some(f) = queue.pop_front() {
            out.extend(f);
        }
        if queue.is_empty() {
            by_number.remove(&n);
        }
    }
    out
}

/// `Values` re-encoded: its repeated fields packed or not, split, in another order, with
/// unknown fields.
fn reencode_values(buf: &[u8], rng: &mut fastrand::Rng) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for f in fields(buf) {
        let elements = match (f.number, f.wire) {
            (1..=5 | 9, WireType::LengthDelimited) => Some((varints(&f.payload), WireType::Varint)),
            (6, WireType::LengthDelimited) => Some((
                f.payload.chunks(4).map(<[u8]>::to_vec).collect(),
                WireType::ThirtyTwoBit,
            )),
            (7, WireType::LengthDelimited) => Some((
                f.payload.chunks(8).map(<[u8]>::to_vec).collect(),
                WireType::SixtyFourBit,
            )),
            _ => None,
        };
        match elements {
            Some((elements, wire)) => out.extend(
                repacked(f.number, &elements, wire, rng)
                    .into_iter()
                    .map(|e| (f.number, e)),
            ),
            None => out.push((f.number, put(f.number, f.wire, &f.payload))),
        }
        if rng.u8(..8) == 0 {
            out.push((100, unknown(rng)));
        }
    }
    out
}

/// A `Feature` re-encoded: its shape packed or not, its `values` in one or two messages
/// (which merge), in another order, with unknown fields.
fn reencode_feature(buf: &[u8], rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields(buf) {
        match (f.number, f.wire) {
            (3, WireType::LengthDelimited) => out.extend(
                repacked(3, &varints(&f.payload), WireType::Varint, rng)
                    .into_iter()
                    .map(|e| (3, e)),
            ),
            (4, WireType::LengthDelimited) => {
                let values = reencode_values(&f.payload, rng);
                let values: Vec<Vec<u8>> = values.into_iter().map(|(_, e)| e).collect();
                if rng.bool() || values.is_empty() {
                    // Kept in prost's order, as the sidecar writes it (its fast path's case).
                    out.push((4, put(4, WireType::LengthDelimited, &f.payload)));
                } else {
                    let at = rng.usize(..=values.len());
                    for part in [&values[..at], &values[at..]] {
                        out.push((4, put(4, WireType::LengthDelimited, &part.concat())));
                    }
                }
            }
            _ => out.push((f.number, put(f.number, f.wire, &f.payload))),
        }
        if rng.u8(..8) == 0 {
            out.push((100, unknown(rng)));
        }
    }
    interleaved(out, rng)
}

/// A `FeatureLog` (prost's encoding) re-encoded as another valid writer may write it.
fn reencode_log(buf: &[u8], seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = Vec::new();
    for f in fields(buf) {
        match (f.number, f.wire) {
            (12, WireType::LengthDelimited) => out.extend(
                repacked(12, &varints(&f.payload), WireType::Varint, &mut rng)
                    .into_iter()
                    .map(|e| (12, e)),
            ),
            (9 | 10, WireType::LengthDelimited) => {
                let feature = reencode_feature(&f.payload, &mut rng);
                out.push((f.number, put(f.number, WireType::LengthDelimited, &feature)));
            }
            _ => out.push((f.number, put(f.number, f.wire, &f.payload))),
        }
        if rng.u8(..8) == 0 {
            out.push((100, unknown(&mut rng)));
        }
    }
    interleaved(out, &mut rng)
}

// ---------------------------------------------------------------------------------------------
// FeatureLog records.

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9_-]{0,6}",
        1 => "\\PC{0,4}",
    ]
}

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
// Protobuf events.

fn impression() -> impl Strategy<Value = Impression> {
    (
        (text(), text(), text(), text()),
        prop::option::of((
            prop_oneof![
                3 => crate::event::MIN_EVENT_TIME_S..crate::event::END_EVENT_TIME_S,
                1 => any::<i64>(),
            ],
            prop_oneof![3 => 0i32..1_000_000_000, 1 => any::<i32>()],
        )),
        prop_oneof![4 => 0i32..5, 1 => any::<i32>()],
        prop::collection::hash_map(text(), any::<f64>(), 0..3),
    )
        .prop_map(
            |((request_id, item_id, event_name, event_id), time, event_type, labels)| Impression {
                request_id,
                item_id,
                event_time: time.map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
                event_type,
                event_name,
                labels,
                event_id,
            },
        )
}

/// Events compared as values, errors by their reason (their texts name fields).
fn same_event(
    got: Result<crate::event::Event, crate::event::EventError>,
    want: Result<crate::event::Event, crate::event::EventError>,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            // Labels may be NaN: compared by their bits.
            let bits = |e: &crate::event::Event| -> Vec<(String, u64)> {
                e.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_bits()))
                    .collect()
            };
            prop_assert_eq!(bits(&g), bits(&w));
            prop_assert_eq!(
                (g.request_id, g.item_id, g.time_us, g.kind, g.event_id),
                (w.request_id, w.item_id, w.time_us, w.kind, w.event_id)
            );
        }
        (Err(g), Err(w)) => prop_assert_eq!(g.reason(), w.reason(), "{} / {}", g, w),
        (g, w) => prop_assert!(false, "got {:?}, want {:?}", g, w),
    }
    Ok(())
}

/// The Schema Registry's protobuf framing: magic byte, schema id, message indexes (a zigzag
/// count, then each index; a count of 0 is the first message, [0]).
fn registry_framed(message: &[u8], schema_id: u32, indexes: &[u32], shorthand: bool) -> Vec<u8> {
    let mut out = vec![0];
    out.extend(schema_id.to_be_bytes());
    if shorthand {
        out.push(0);
    } else {
        let zigzag = |n: i64| ((n << 1) ^ (n >> 63)) as u64;
        encode_varint(zigzag(indexes.len() as i64), &mut out);
        for &i in indexes {
            encode_varint(zigzag(i64::from(i)), &mut out);
        }
    }
    out.extend_from_slice(message);
    out
}

proptest! {
    #![proptest_config(config(2048))]

    /// An Impression reads as prost decodes it, plain or framed by the Schema Registry.
    #[test]
    fn protobuf_events_read_as_prost_decodes_them(
        m in impression(),
        schema_id in any::<u32>(),
        indexes in prop::collection::vec(0u32..1000, 0..4),
        shorthand in any::<bool>(),
    ) {
        let plain = m.encode_to_vec();
        // What prost reads back (not `m` itself: prost leaves out a map's -0.0, as a default).
        let decoded = Impression::decode(&plain[..]).map_err(|e| e.to_string());
        prop_assert_eq!(decoded.as_ref(), Ok(&m));
        let decoded = decoded.unwrap_or_default();
        same_event(from_protobuf(&plain), from_impression(decoded.clone()))?;
        let framed = registry_framed(&plain, schema_id, &indexes, shorthand);
        same_event(from_protobuf(&framed), from_impression(decoded))?;
    }

    /// Changed at random: refused exactly when prost refuses the message, read as it reads it
    /// otherwise. A payload that starts with 0 is the Registry's framing (no protobuf message
    /// starts with field number 0), whose header is skipped first.
    #[test]
    fn mutated_protobuf_events_read_as_prost_decodes_them(
        m in impression(),
        framed in any::<bool>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut raw = m.encode_to_vec();
        if framed {
            raw = registry_framed(&raw, 7, &[], true);
        }
        mutate(&mut raw, &mutations);
        let got = from_protobuf(&raw);
        let message = match raw.first() {
            Some(0) if raw.len() >= 6 && raw[5] == 0 => Some(&raw[6..]),
            Some(0) => None, // a header the property above covers; here only: no panic
            _ => Some(&raw[..]),
        };
        if let Some(message) = message {
            let want = match Impression::decode(message) {
                Ok(m) => from_impression(m),
                Err(e) => Err(crate::event::EventError::Protobuf(e.to_string())),
            };
            same_event(got, want)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// JSON events.

/// Top-level keys and configured names drawn from a few that overlap: dotted names that are
/// also keys, keys that are prefixes of configured paths, array positions.
const KEYS: &[&str] = &["a", "a.b", "b", "rid", "x", "t", "ty", "a.b.c", "x.1"];
const NAMES: &[&str] = &[
    "a", "a.b", "a.b.c", "b", "rid", "x.1", "x.0", "t", "ty", "b.c",
];

fn json_scalar() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![
            "r1",
            "i-7",
            "",
            "click",
            "IMPRESSION",
            "view",
            "1764439200123",
            "2025-11-29T18:00:00.25+01:00",
            "1764439200.5",
            "x\"y\\z",
            "é"
        ])
        .prop_map(|s| json!(s)),
        prop_oneof![
            Just(1_764_439_200_123i64),
            Just(1_764_439_200i64),
            any::<i64>(),
            -3i64..3,
        ]
        .prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(1.764_439_200_123_5e12),
            Just(2.5),
            any::<f64>().prop_filter("finite", |f| f.is_finite())
        ]
        .prop_map(|f| json!(f)),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    json_scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..4).prop_map(
                |members| serde_json::Value::Object(
                    members
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect()
                )
            ),
        ]
    })
}

/// A key as JSON text: plain, or with a letter escaped (`\u0061`), as serde reads it the same.
fn key_text(key: &str, escape: bool) -> String {
    if escape && key.starts_with('a') {
        format!("\"\\u0061{}\"", &key[1..])
    } else {
        serde_json::to_string(key).unwrap_or_default()
    }
}

/// An event's JSON text with `members` in order (repeated keys kept, which a `Value` cannot
/// hold), spaced or not.
fn event_text(members: &[(String, serde_json::Value, bool)], spaced: bool) -> Vec<u8> {
    let sep = if spaced { " , " } else { "," };
    let body: Vec<String> = members
        .iter()
        .map(|(k, v, escape)| {
            let value = if spaced {
                serde_json::to_string_pretty(v)
            } else {
                serde_json::to_string(v)
            }
            .unwrap_or_default();
            format!(
                "{}{}{}",
                key_text(k, *escape),
                if spaced { " : " } else { ":" },
                value
            )
        })
        .collect();
    format!("{{{}}}", body.join(sep)).into_bytes()
}

fn json_fields() -> impl Strategy<Value = JsonFields> {
    let name = || prop::sample::select(NAMES.to_vec()).prop_map(str::to_owned);
    (
        prop_oneof![Just("rid".to_owned()), name()],
        prop_oneof![Just("a.b".to_owned()), name()],
        prop_oneof![Just("t".to_owned()), name()],
        prop_oneof![Just("ty".to_owned()), name()],
        prop::collection::vec(name(), 0..3),
        prop::option::of(name()),
        prop::sample::select(vec![
            TimeUnit::Seconds,
            TimeUnit::Milliseconds,
            TimeUnit::Microseconds,
            TimeUnit::Nanoseconds,
        ]),
    )
        .prop_map(
            |(request_id, item_id, event_time, event_type, labels, event_id, unit)| JsonFields {
                request_id,
                item_id,
                event_time,
                event_time_unit: unit,
                event_type,
                labels,
                event_id,
                ..JsonFields::default()
            },
        )
}

/// An event: mostly the configured fields with plausible values, and other members, in any
/// order, some keys repeated.
fn json_event() -> impl Strategy<Value = Vec<(String, serde_json::Value, bool)>> {
    use serde_json::json;
    let plausible = prop_oneof![
        Just(("rid".to_owned(), json!("r1"))),
        Just(("t".to_owned(), json!(1_764_439_200_123i64))),
        Just(("t".to_owned(), json!("2025-11-29T18:00:00Z"))),
        Just(("ty".to_owned(), json!("click"))),
        Just(("ty".to_owned(), json!("impression"))),
        Just(("a".to_owned(), json!({"b": "item-1", "b.c": 5}))),
        Just(("a.b".to_owned(), json!(42))),
        Just(("x".to_owned(), json!([1.5, true, null]))),
    ];
    let other = (
        prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
        json_value(),
    );
    prop::collection::vec(
        (prop_oneof![3 => plausible, 2 => other], any::<bool>())
            .prop_map(|((k, v), escape)| (k, v, escape)),
        0..9,
    )
}

/// The value a configured `name` names in a parsed event, as documented on `JsonFields`: a
/// top-level key that is the name itself, else the longest top-level key that is a dotted
/// prefix of it, followed into its value by the rest of the path (object keys, or array
/// positions). A repeated key is its last occurrence, as in any parse into a map.
fn reference_pick<'v>(
    event: &'v serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<&'v serde_json::Value> {
    let (key, rest) = event
        .keys()
        .filter_map(|k| {
            if k == name {
                Some((k, ""))
            } else {
                name.strip_prefix(k.as_str())
                    .and_then(|r| r.strip_prefix('.'))
                    .map(|r| (k, r))
            }
        })
        .max_by_key(|(k, _)| k.len())?;
    let mut value = &event[key];
    if rest.is_empty() {
        return Some(value);
    }
    for segment in rest.split('.') {
        value = match value {
            serde_json::Value::Object(m) => m.get(segment)?,
            serde_json::Value::Array(a) => a.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// `payload` with what serde_json checks only in the values it builds made valid: bytes that are
/// not UTF-8 read as U+FFFD, numbers past an f64's range as 0; `None` when nothing needed to be.
/// serde_json skips the members `from_json` does not read without those checks, so the joiner
/// reads an event whose other members hold them; where they are in a member it reads, it
/// refuses the event as JSON, as the parse of the whole text does.
fn sanitized(payload: &[u8]) -> Option<Vec<u8>> {
    // A Schema Registry header (see `reference_json`) is kept as it is.
    let (header, payload) = match payload {
        [0, _, _, _, _, ..] => payload.split_at(5),
        _ => (&[][..], payload),
    };
    let text = String::from_utf8_lossy(payload);
    let mut changed = std::str::from_utf8(payload).is_err();
    let b = text.as_bytes();
    let (mut out, mut at) = (header.to_vec(), 0);
    while at < b.len() {
        match b[at] {
            b'"' => {
                let start = at;
                at += 1;
                while at < b.len() && b[at] != b'"' {
                    at += if b[at] == b'\\' { 2 } else { 1 };
                }
                at = (at + 1).min(b.len());
                out.extend_from_slice(&b[start..at]);
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while at < b.len()
                    && matches!(b[at], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    at += 1;
                }
                let token = &b[start..at];
                let infinite = std::str::from_utf8(token)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .is_some_and(f64::is_infinite);
                if infinite {
                    out.push(b'0');
                    changed = true;
                } else {
                    out.extend_from_slice(token);
                }
            }
            c => {
                out.push(c);
                at += 1;
            }
        }
    }
    changed.then_some(out)
}

/// What `from_json` must make of `payload`: its configured fields picked from a whole parse
/// (`reference_pick`), put in a flat event under plain names of their own, read by `from_json`
/// (whose picking is then trivial), labels named back. Errors come out by their reason.
fn reference_json(
    payload: &[u8],
    fields: &JsonFields,
) -> Result<crate::event::Event, crate::event::EventError> {
    let json_error = |e: String| crate::event::EventError::Json(e);
    // The Schema Registry's framing, recognised by its first byte.
    let payload = match payload {
        [0, _, _, _, _, rest @ ..] => rest,
        [0, ..] => return Err(json_error("cut header".into())),
        _ => payload,
    };
    let parsed: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| json_error(e.to_string()))?;
    let serde_json::Value::Object(event) = parsed else {
        return Err(json_error("not an object".into()));
    };
    let mut flat = serde_json::Map::new();
    let flat_fields = JsonFields {
        request_id: "f_request_id".into(),
        item_id: "f_item_id".into(),
        event_time: "f_event_time".into(),
        event_type: "f_event_type".into(),
        event_id: fields.event_id.as_ref().map(|_| "f_event_id".into()),
        labels: (0..fields.labels.len())
            .map(|i| format!("f_label_{i}"))
            .collect(),
        ..fields.clone()
    };
    let mut configured = vec![
        (fields.request_id.as_str(), flat_fields.request_id.clone()),
        (fields.item_id.as_str(), flat_fields.item_id.clone()),
        (fields.event_time.as_str(), flat_fields.event_time.clone()),
        (fields.event_type.as_str(), flat_fields.event_type.clone()),
    ];
    if let (Some(name), Some(flat_name)) = (&fields.event_id, &flat_fields.event_id) {
        configured.push((name.as_str(), flat_name.clone()));
    }
    for (name, flat_name) in fields.labels.iter().zip(&flat_fields.labels) {
        configured.push((name.as_str(), flat_name.clone()));
    }
    for (name, flat_name) in configured {
        if let Some(v) = reference_pick(&event, name) {
            flat.insert(flat_name, v.clone());
        }
    }
    let text = serde_json::to_vec(&serde_json::Value::Object(flat))
        .map_err(|e| json_error(e.to_string()))?;
    let mut read = from_json(&text, &flat_fields)?;
    read.labels = std::mem::take(&mut read.labels)
        .into_iter()
        .map(|(flat_name, v)| {
            let i = flat_fields
                .labels
                .iter()
                .position(|l| *l == flat_name)
                .unwrap_or(0);
            (fields.labels[i].clone(), v)
        })
        .collect();
    Ok(read)
}

proptest! {
    #![proptest_config(config(3072))]

    /// The fields picked from the event's text as it streams by are the ones a whole parse
    /// names, whatever else the event holds, in any order, with keys repeated or escaped.
    #[test]
    fn json_events_read_as_a_whole_parse_reads_them(
        fields in json_fields(),
        members in json_event(),
        spaced in any::<bool>(),
    ) {
        let payload = event_text(&members, spaced);
        same_event(from_json(&payload, &fields), reference_json(&payload, &fields))?;
    }

    /// The same changed at random: refused when serde_json refuses the text, read as the whole
    /// parse reads it otherwise.
    #[test]
    fn mutated_json_events_read_as_a_whole_parse_reads_them(
        fields in json_fields(),
        members in json_event(),
        mutations in prop::collection::vec(mutation(), 1..3),
    ) {
        let mut payload = event_text(&members, false);
        mutate(&mut payload, &mutations);
        let got = from_json(&payload, &fields);
        match sanitized(&payload) {
            None => same_event(got, reference_json(&payload, &fields))?,
            // Refused for what serde_json checks in what it builds (see `sanitized`).
            Some(_) if got.as_ref().is_err_and(|e| e.reason() == "bad_json") => {}
            // Else read as the whole text is once made valid where the joiner does not read.
            Some(valid) => same_event(got, reference_json(&valid, &fields))?,
        }
    }
}

#[test]
fn the_reference_pick_is_what_the_docs_say() {
    let event = serde_json::json!({"a.b": 1, "a": {"b": 2, "c": [3, 4]}, "x": [5]});
    let serde_json::Value::Object(event) = event else {
        unreachable!()
    };
    let pick = |name| reference_pick(&event, name).cloned();
    assert_eq!(pick("a.b"), Some(serde_json::json!(1)));
    assert_eq!(pick("a.c.1"), Some(serde_json::json!(4)));
    assert_eq!(pick("x.0"), Some(serde_json::json!(5)));
    assert_eq!(pick("a.d"), None);
    assert_eq!(pick("b"), None);
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

/// A configured dotted name is the top-level key of that very name, whatever comes after it
/// (the key `a` used to replace the value of `a.b` when it came later), and the last of a
/// repeated key (an earlier `a` that held `b` used to survive a later one that does not).
#[test]
fn a_dotted_name_is_read_from_its_nearest_key_in_any_order() {
    let fields = JsonFields {
        request_id: "rid".into(),
        item_id: "a.b".into(),
        event_time: "t".into(),
        event_type: "ty".into(),
        ..JsonFields::default()
    };
    let item = |members: &str| {
        let payload = format!(r#"{{"rid":"r","t":1764439200123,"ty":"click",{members}}}"#);
        let got = from_json(payload.as_bytes(), &fields).map(|e| e.item_id);
        let want = reference_json(payload.as_bytes(), &fields).map(|e| e.item_id);
        let reason = |e: crate::event::EventError| e.reason();
        assert_eq!(
            got.clone().map_err(reason),
            want.map_err(reason),
            "{payload}"
        );
        got.map_err(|e| e.to_string())
    };
    let exact = Ok("42".to_owned());
    assert_eq!(item(r#""a.b":42,"a":{"b":"item-1"}"#), exact);
    assert_eq!(item(r#""a":{"b":"item-1"},"a.b":42"#), exact);
    assert_eq!(
        item(r#""a":{"b":"item-1"},"a.b":42,"a":{"b":"item-2"}"#),
        exact
    );
    assert_eq!(
        item(r#""a":{"b":"item-1"},"a":{"c":1}"#),
        Err("field \"a.b\": missing".into())
    );
    assert_eq!(
        item(r#""a":{"c":1},"a":{"b":"item-2"}"#),
        Ok("item-2".into())
    );
    // The same for labels.
    let labels = JsonFields {
        item_id: "rid".into(),
        labels: vec!["a.b".into()],
        ..fields.clone()
    };
    let payload =
        br#"{"rid":"r","a.b":1.5,"t":1764439200123,"ty":"click","a":{"b":2.5},"a.b":{"c":1}}"#;
    let e = from_json(payload, &labels).unwrap();
    assert!(
        e.labels.is_empty(),
        "the last `a.b` is no number: {:?}",
        e.labels
    );
}
