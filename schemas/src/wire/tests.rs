//! The field numbers against the descriptors protoc makes of the protos, and the walker
//! against prost: unit cases, then differential properties on random and mutated encodings.
//!
//! Cases are bounded so that the set runs in a second or two in a debug build;
//! `PROPTEST_CASES=100000 cargo test -p featurelog-schemas wire` runs longer, and
//! `PROPTEST_RNG_SEED=<n>` explores other cases than the fixed default seed.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::Index;

use prost::Message;
use prost::encoding::{
    DecodeContext, WireType as ProstWire, decode_key, decode_varint, skip_field,
};
use prost_types::{DescriptorProto, FileDescriptorSet};

use super::*;
use crate::featurelog::v1::{Feature, FeatureLog, Values};
use crate::inference::model_infer_request::InferInputTensor;
use crate::inference::{ModelInferRequest, ModelStreamInferResponse};

// ---------------------------------------------------------------------------------------------
// The field numbers.

/// Every message of the descriptor set, nested ones included, by full name (no leading dot).
fn descriptors() -> HashMap<String, DescriptorProto> {
    fn add(prefix: &str, messages: &[DescriptorProto], out: &mut HashMap<String, DescriptorProto>) {
        for m in messages {
            let name = format!("{prefix}.{}", m.name());
            add(&name, &m.nested_type, out);
            out.insert(name, m.clone());
        }
    }
    let set = FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).unwrap();
    let mut out = HashMap::new();
    for file in &set.file {
        add(file.package(), &file.message_type, &mut out);
    }
    out
}

/// `ModelInferRequest` -> `model_infer_request`.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[test]
fn every_field_number_is_the_one_of_the_descriptors() {
    let all = descriptors();
    let mut checked = 0;
    for &(module, messages, numbers) in TABLES {
        for &message in messages {
            let Some(descriptor) = all.get(message) else {
                panic!("wire::{module}: no message {message} in the descriptors");
            };
            if let [only] = messages {
                let short = only.rsplit('.').next().unwrap_or(only);
                assert_eq!(module, snake_case(short), "the module of {message}");
            }
            for &(name, number) in numbers {
                let field_name = name.to_ascii_lowercase();
                let Some(field) = descriptor.field.iter().find(|f| f.name() == field_name) else {
                    panic!("wire::{module}::{name}: {message} has no field {field_name}");
                };
                assert_eq!(
                    i64::from(field.number()),
                    i64::from(number),
                    "wire::{module}::{name}: {message}.{field_name}",
                );
                checked += 1;
            }
            // And every field of the message has its constant: a field added to a .proto is
            // named here before a walker reads it by its number.
            for field in &descriptor.field {
                assert!(
                    numbers
                        .iter()
                        .any(|(name, _)| name.to_ascii_lowercase() == field.name()),
                    "{message}.{} has no constant in wire::{module}",
                    field.name(),
                );
            }
        }
    }
    // The table is the macro's, so this only guards against it being emptied.
    assert!(checked > 80, "{checked} constants checked");
}

#[test]
fn the_descriptors_hold_the_compiled_protos_and_their_imports() {
    let set = FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).unwrap();
    let names: Vec<_> = set.file.iter().map(|f| f.name()).collect();
    for file in [
        "inference/grpc_service.proto",
        "featurelog/v1/feature_log.proto",
        "featurelog/v1/impression.proto",
        "google/protobuf/timestamp.proto",
    ] {
        assert!(names.contains(&file), "{file} in {names:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Unit cases.

#[test]
fn errors_read_as_the_joiner_words_them() {
    let cases = [
        (WireError::TruncatedVarint, "truncated varint"),
        (WireError::LongVarint, "varint longer than 64 bits"),
        (WireError::FieldZero, "field number 0"),
        (WireError::LongKey, "key past 32 bits"),
        (WireError::LengthOverflows, "length overflows"),
        (
            WireError::WireType { number: 7, wire: 3 },
            "field 7: wire type 3",
        ),
        (WireError::Truncated { number: 9 }, "field 9: truncated"),
        (WireError::NotUtf8, "a string is not UTF-8"),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
    // Small: the walk returns it by value at every step.
    assert!(std::mem::size_of::<WireError>() <= 12);
    assert_eq!(WireType::LengthDelimited.to_string(), "2");
}

#[test]
fn varints_at_their_bounds() {
    let read = |bytes: &[u8]| {
        let mut at = 0;
        varint(bytes, &mut at).map(|v| (v, at))
    };
    assert_eq!(read(&[0x7f]), Ok((127, 1)));
    assert_eq!(read(&[0x80, 0x01]), Ok((128, 2)));
    // Longer than needed, as prost accepts.
    assert_eq!(read(&[0x80, 0x80, 0x00]), Ok((0, 3)));
    let mut max = vec![0xff; 9];
    max.push(0x01);
    assert_eq!(read(&max), Ok((u64::MAX, 10)));
    max[9] = 0x02;
    assert_eq!(read(&max), Err(WireError::LongVarint));
    let mut eleven = vec![0x80; 10];
    eleven.push(0);
    assert_eq!(read(&eleven), Err(WireError::LongVarint));
    assert_eq!(read(&[0x80]), Err(WireError::TruncatedVarint));
    assert_eq!(read(&[]), Err(WireError::TruncatedVarint));
}

#[test]
fn keys_at_their_bounds() {
    let top = (1u32 << 29) - 1;
    assert_eq!(
        split_key(key(top, WireType::ThirtyTwoBit)),
        Ok((top, WireType::ThirtyTwoBit))
    );
    assert_eq!(split_key(u64::from(top + 1) << 3), Err(WireError::LongKey));
    for wire in 0..8 {
        assert_eq!(split_key(wire), Err(WireError::FieldZero));
    }
    for wire in [3, 4, 6, 7] {
        assert_eq!(
            split_key(8 | u64::from(wire)),
            Err(WireError::WireType { number: 1, wire })
        );
    }
    assert_eq!(
        key(model_infer_request::MODEL_NAME, WireType::LengthDelimited),
        0x0a
    );
    assert_eq!(
        key(
            model_infer_request::MODEL_VERSION,
            WireType::LengthDelimited
        ),
        0x12
    );
    for wire in [
        WireType::Varint,
        WireType::SixtyFourBit,
        WireType::LengthDelimited,
        WireType::ThirtyTwoBit,
    ] {
        let mut encoded = Vec::new();
        prost::encoding::encode_key(300, wire.into(), &mut encoded);
        assert_eq!(read_key(&mut encoded.as_slice()), Ok((300, wire)));
    }
}

#[test]
fn a_request_reads_by_its_named_fields() {
    let request = ModelInferRequest {
        model_name: "ranker".into(),
        id: "r-1".into(),
        inputs: vec![InferInputTensor {
            name: "user".into(),
            datatype: "FP32".into(),
            shape: vec![2, 3],
            ..InferInputTensor::default()
        }],
        raw_input_contents: vec![vec![0; 24].into()],
        ..ModelInferRequest::default()
    };
    let buf = request.encode_to_vec();
    let (mut name, mut id, mut inputs, mut raw) = ("", "", Vec::new(), 0);
    for field in fields(&buf) {
        let field = field.unwrap();
        match (field.number, field.wire) {
            (model_infer_request::MODEL_NAME, WireType::LengthDelimited) => {
                name = field.str(&buf).unwrap();
            }
            (model_infer_request::ID, WireType::LengthDelimited) => id = field.str(&buf).unwrap(),
            (model_infer_request::INPUTS, WireType::LengthDelimited) => inputs.push(field),
            (model_infer_request::RAW_INPUT_CONTENTS, WireType::LengthDelimited) => {
                raw += field.bytes(&buf).len();
            }
            _ => panic!("{field:?}"),
        }
    }
    assert_eq!((name, id, raw), ("ranker", "r-1", 24));
    let [input] = inputs[..] else {
        panic!("{inputs:?}")
    };
    // The tensor walked in place: offsets stay those of the request.
    let (from, to) = input.payload;
    let mut shape = Vec::new();
    for field in fields_in(&buf, from, to) {
        let field = field.unwrap();
        assert!(field.start >= from && field.end() <= to);
        match (field.number, field.wire) {
            (infer_input_tensor::NAME, _) => assert_eq!(field.str(&buf), Ok("user")),
            (infer_input_tensor::DATATYPE, _) => assert_eq!(field.str(&buf), Ok("FP32")),
            (infer_input_tensor::SHAPE, WireType::LengthDelimited) => {
                shape = packed_varints(field.bytes(&buf))
                    .collect::<Result<_, _>>()
                    .unwrap();
            }
            _ => panic!("{field:?}"),
        }
    }
    assert_eq!(shape, [2, 3]);
    assert_eq!(
        InferInputTensor::decode(input.bytes(&buf)).unwrap(),
        request.inputs[0]
    );
    // A field copied over as it is decodes as itself.
    let copied = ModelInferRequest::decode(input.encoded(&buf)).unwrap();
    assert_eq!(copied.inputs, request.inputs);
}

#[test]
fn a_record_reads_its_packed_values_in_place() {
    let log = FeatureLog {
        request_id: "r".into(),
        features: vec![Feature::column(
            "score",
            crate::featurelog::v1::DataType::Fp32,
            Vec::new(),
            Values {
                fp32_values: vec![1.0, 2.5],
                ..Values::default()
            },
        )],
        candidate_int_ids: vec![-1, 7],
        ..FeatureLog::default()
    };
    let raw = log.encode_to_vec();
    let mut packed = None;
    let mut ids = Vec::new();
    for field in fields(&raw) {
        let field = field.unwrap();
        match (field.number, field.wire) {
            (feature_log::FEATURES, WireType::LengthDelimited) => {
                let (s, e) = field.payload;
                for f in fields_in(&raw, s, e) {
                    let f = f.unwrap();
                    if f.number == feature::VALUES {
                        let (vs, ve) = f.payload;
                        let mut inner = fields_in(&raw, vs, ve);
                        let v = inner.next().unwrap().unwrap();
                        assert_eq!(inner.next(), None);
                        assert_eq!(inner.offset(), ve);
                        assert_eq!(v.number, values::FP32_VALUES);
                        packed = Some(v.payload);
                    }
                }
            }
            (feature_log::CANDIDATE_INT_IDS, WireType::LengthDelimited) => {
                for v in packed_varints(field.bytes(&raw)) {
                    let v = v.unwrap();
                    ids.push((v >> 1) as i64 ^ -((v & 1) as i64));
                }
            }
            (feature_log::REQUEST_ID, _) => assert_eq!(field.str(&raw), Ok("r")),
            _ => panic!("{field:?}"),
        }
    }
    let (s, e) = packed.unwrap();
    let floats: Vec<f32> = raw[s..e]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(floats, [1.0, 2.5]);
    assert_eq!(ids, [-1, 7]);
}

#[test]
fn the_cursor_helpers_read_a_stream_response() {
    let response = ModelStreamInferResponse {
        error_message: "no such model".into(),
        infer_response: None,
    };
    let buf = response.encode_to_vec();
    let mut rest = buf.as_slice();
    let (number, wire) = read_key(&mut rest).unwrap();
    assert_eq!(
        (number, wire),
        (
            model_stream_infer_response::ERROR_MESSAGE,
            WireType::LengthDelimited
        )
    );
    assert_eq!(length_delimited(&mut rest), Ok(&b"no such model"[..]));
    assert!(rest.is_empty());
    // Cut short: the length runs past the end.
    let mut cut = &buf[1..5];
    assert_eq!(length_delimited(&mut cut), Err(WireError::LengthOverflows));
    let mut cut = &buf[1..5];
    assert_eq!(
        skip(&mut cut, 1, WireType::LengthDelimited),
        Err(WireError::Truncated { number: 1 })
    );
    // An error ends the walk, and the walk's errors are the fields'.
    let mut walk = fields(&[0x12, 0x7f, 1]);
    assert_eq!(walk.next(), Some(Err(WireError::Truncated { number: 2 })));
    assert_eq!(walk.next(), None);
    assert_eq!(
        fields(&[0x1a, 2, 0xff, 0xfe])
            .next()
            .unwrap()
            .unwrap()
            .str(&[0x1a, 2, 0xff, 0xfe]),
        Err(WireError::NotUtf8)
    );
}

// ---------------------------------------------------------------------------------------------
// Properties: the walker against prost.

fn config(cases: u32) -> ProptestConfig {
    crate::testing::config(cases, 0x5eed_f00d_31fe_0001)
}

/// A field as both walks see it: wire type as its number, offsets into the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    number: u32,
    wire: u8,
    start: usize,
    payload: (usize, usize),
    value: u64,
}

impl From<Field> for Seen {
    fn from(f: Field) -> Self {
        Self {
            number: f.number,
            wire: f.wire as u8,
            start: f.start,
            payload: f.payload,
            value: f.value,
        }
    }
}

/// How prost's walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Done,
    Refused,
    /// At a group's key, which prost would step over and the walker refuses.
    Group,
}

/// The fields of `buf` as prost's `decode_key` and `skip_field` step over them.
fn prost_walk(buf: &[u8]) -> (Vec<Seen>, End) {
    let at = |rest: &[u8]| buf.len() - rest.len();
    let mut rest = buf;
    let mut seen = Vec::new();
    while !rest.is_empty() {
        let start = at(rest);
        let Ok((number, wire)) = decode_key(&mut rest) else {
            return (seen, End::Refused);
        };
        if matches!(wire, ProstWire::StartGroup | ProstWire::EndGroup) {
            return (seen, End::Group);
        }
        let mut probe = rest;
        let (payload_start, value) = match wire {
            ProstWire::Varint => (at(rest), decode_varint(&mut probe).unwrap_or(0)),
            // A length prost cannot read fails skip_field below as well.
            ProstWire::LengthDelimited => {
                (decode_varint(&mut probe).map_or(at(rest), |_| at(probe)), 0)
            }
            _ => (at(rest), 0),
        };
        if skip_field(wire, number, &mut rest, DecodeContext::default()).is_err() {
            return (seen, End::Refused);
        }
        seen.push(Seen {
            number,
            wire: wire as u8,
            start,
            payload: (payload_start, at(rest)),
            value,
        });
    }
    (seen, End::Done)
}

/// The fields [`fields`] yields until its first error, and that error.
fn walk(iter: Fields<'_>) -> (Vec<Seen>, Option<WireError>) {
    let mut seen = Vec::new();
    for field in iter {
        match field {
            Ok(f) => seen.push(f.into()),
            Err(e) => return (seen, Some(e)),
        }
    }
    (seen, None)
}

/// The fields of `buf` read with the cursor helpers: each payload by its own helper, or every
/// one with [`skip`].
fn cursor_walk(buf: &[u8], skip_all: bool) -> (Vec<Seen>, Option<WireError>) {
    let at = |rest: &[u8]| buf.len() - rest.len();
    let mut rest = buf;
    let mut seen = Vec::new();
    let step = |rest: &mut &[u8]| -> Result<Seen, WireError> {
        let start = at(rest);
        let (number, wire) = read_key(rest)?;
        let payload_start = at(rest);
        let (payload_start, value) = match wire {
            _ if skip_all => {
                let mut probe = *rest;
                let value = if wire == WireType::Varint {
                    read_varint(&mut probe).unwrap_or(0)
                } else {
                    0
                };
                let payload_start = if wire == WireType::LengthDelimited {
                    read_varint(&mut probe).map_or(payload_start, |_| at(probe))
                } else {
                    payload_start
                };
                skip(rest, number, wire)?;
                (payload_start, value)
            }
            WireType::Varint => (payload_start, read_varint(rest)?),
            WireType::LengthDelimited => {
                let payload = length_delimited(rest)?;
                (at(rest) - payload.len(), 0)
            }
            _ => {
                skip(rest, number, wire)?;
                (payload_start, 0)
            }
        };
        Ok(Seen {
            number,
            wire: wire as u8,
            start,
            payload: (payload_start, at(rest)),
            value,
        })
    };
    while !rest.is_empty() {
        match step(&mut rest) {
            Ok(s) => seen.push(s),
            Err(e) => return (seen, Some(e)),
        }
    }
    (seen, None)
}

/// A varint of `value`, made `pad` bytes longer than needed (past ten bytes: invalid).
fn put_varint(out: &mut Vec<u8>, mut value: u64, pad: usize) {
    loop {
        let b = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            if pad == 0 {
                out.push(b);
            } else {
                out.push(b | 0x80);
                out.extend(std::iter::repeat_n(0x80, pad - 1));
                out.push(0);
            }
            return;
        }
        out.push(b | 0x80);
    }
}

/// One field, as the generator writes it.
#[derive(Debug, Clone)]
struct Spec {
    key: u64,
    key_pad: usize,
    payload: Payload,
}

#[derive(Debug, Clone)]
enum Payload {
    Varint(u64, usize),
    /// Ten bytes whose last is this (above 1: too long for prost).
    TenBytes(u8),
    Fixed(Vec<u8>),
    /// A length `delta` off the bytes' (a short length moves fields; a long one truncates).
    Delimited(Vec<u8>, i8),
    /// A length no buffer has.
    HugeLength(u64),
    Nothing,
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 1u64..20,
        1 => Just(0u64),
        1 => Just((1u64 << 29) - 1),
        1 => Just(1u64 << 29),
        1 => any::<u32>().prop_map(u64::from),
        1 => any::<u64>().prop_map(|n| n >> 3),
    ]
}

/// A payload of the kind the wire type calls for, mostly; any kind at times.
fn payload(wire: u64) -> BoxedStrategy<Payload> {
    let varint = prop_oneof![
        4 => (any::<u64>(), prop_oneof![4 => Just(0usize), 1 => 0usize..11])
            .prop_map(|(v, pad)| Payload::Varint(v, pad)),
        // The tenth byte's bounds: 1 is the last valid, 2 the first refused.
        1 => prop_oneof![0u8..4, Just(0x7f), Just(0x80), Just(0x81), any::<u8>()]
            .prop_map(Payload::TenBytes),
    ];
    let fixed = |width: usize| {
        prop_oneof![
            4 => prop::collection::vec(any::<u8>(), width),
            1 => prop::collection::vec(any::<u8>(), 0..10),
        ]
        .prop_map(Payload::Fixed)
    };
    let delimited = prop_oneof![
        6 => (prop::collection::vec(any::<u8>(), 0..12), prop_oneof![6 => Just(0i8), 1 => -3i8..4])
            .prop_map(|(b, d)| Payload::Delimited(b, d)),
        1 => prop_oneof![Just(u64::MAX), Just(1u64 << 62), Just(u64::from(u32::MAX)), any::<u64>()]
            .prop_map(Payload::HugeLength),
    ];
    let any_kind = prop_oneof![
        varint.clone(),
        fixed(8),
        delimited.clone(),
        Just(Payload::Nothing)
    ];
    match wire {
        0 => prop_oneof![8 => varint, 1 => any_kind].boxed(),
        1 => prop_oneof![8 => fixed(8), 1 => any_kind].boxed(),
        5 => prop_oneof![8 => fixed(4), 1 => any_kind].boxed(),
        2 => prop_oneof![8 => delimited, 1 => any_kind].boxed(),
        _ => any_kind.boxed(),
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        number(),
        prop_oneof![8 => Just(2u64), 4 => Just(0u64), 2 => Just(1u64), 2 => Just(5u64), 1 => 0u64..8],
        prop_oneof![8 => Just(0usize), 1 => 1usize..4],
    )
        .prop_flat_map(|(number, wire, key_pad)| {
            payload(wire).prop_map(move |payload| Spec {
                key: number.wrapping_shl(3) | wire,
                key_pad,
                payload,
            })
        })
}

fn encode(specs: &[Spec]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in specs {
        put_varint(&mut out, s.key, s.key_pad);
        match &s.payload {
            Payload::Varint(v, pad) => put_varint(&mut out, *v, *pad),
            Payload::TenBytes(last) => {
                out.extend([0xff; 9]);
                out.push(*last);
            }
            Payload::Fixed(bytes) => out.extend(bytes),
            Payload::Delimited(bytes, delta) => {
                let len = (bytes.len() as i64 + i64::from(*delta)).max(0);
                put_varint(&mut out, len as u64, 0);
                out.extend(bytes);
            }
            Payload::HugeLength(len) => put_varint(&mut out, *len, 0),
            Payload::Nothing => {}
        }
    }
    out
}

/// One change to an encoding, at an index into it.
#[derive(Debug, Clone)]
enum Mutation {
    Set(Index, u8),
    Flip(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let one = prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<Index>().prop_map(Mutation::Remove),
        any::<Index>().prop_map(Mutation::Truncate),
    ];
    prop::collection::vec(one, 0..4)
}

fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        if bytes.is_empty() {
            return;
        }
        let len = bytes.len();
        match m {
            Mutation::Set(i, b) => bytes[i.index(len)] = *b,
            Mutation::Flip(i, bit) => bytes[i.index(len)] ^= 1 << bit,
            Mutation::Insert(i, b) => bytes.insert(i.index(len + 1), *b),
            Mutation::Remove(i) => {
                bytes.remove(i.index(len));
            }
            Mutation::Truncate(i) => bytes.truncate(i.index(len)),
        }
    }
}

/// Encodings: fields made to be mostly valid and then changed, or plain random bytes.
fn encodings() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (prop::collection::vec(spec(), 0..6), mutations()).prop_map(|(specs, m)| {
            let mut bytes = encode(&specs);
            mutate(&mut bytes, &m);
            bytes
        }),
        1 => prop::collection::vec(any::<u8>(), 0..24),
    ]
}

/// The walker's result against prost's: the same fields, then the same end.
fn agrees(buf: &[u8], (seen, error): (Vec<Seen>, Option<WireError>)) -> Result<(), TestCaseError> {
    let (want, end) = prost_walk(buf);
    prop_assert_eq!(&seen, &want, "fields of {:02x?}", buf);
    match (end, error) {
        (End::Done, None) => {}
        (End::Group, Some(WireError::WireType { wire: 3 | 4, .. })) => {}
        (End::Refused, Some(e)) if !matches!(e, WireError::WireType { wire: 3 | 4, .. }) => {}
        (end, error) => prop_assert!(false, "prost {:?}, walker {:?} on {:02x?}", end, error, buf),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(4096))]

    /// `fields` yields what prost's walk steps over, and refuses what it refuses (and groups).
    #[test]
    fn fields_walk_as_prost_does(buf in encodings()) {
        agrees(&buf, walk(fields(&buf)))?;
    }

    /// Read with the cursor helpers, the same.
    #[test]
    fn the_cursor_helpers_walk_as_prost_does(buf in encodings(), skip_all in any::<bool>()) {
        let (seen, error) = cursor_walk(&buf, skip_all);
        // Which error may differ (a length past the end is LengthOverflows for
        // `length_delimited`), not whether there is one.
        let (want, want_error) = walk(fields(&buf));
        prop_assert_eq!(&seen, &want);
        prop_assert_eq!(error.is_some(), want_error.is_some());
        agrees(&buf, (seen, want_error))?;
    }

    /// A range of a buffer walks as the buffer cut to it, with offsets into the whole.
    #[test]
    fn a_range_walks_as_its_bytes(buf in encodings(), a in any::<Index>(), b in any::<Index>()) {
        let (a, b) = (a.index(buf.len() + 1), b.index(buf.len() + 1));
        let (from, to) = (a.min(b), a.max(b));
        let (seen, error) = walk(fields_in(&buf, from, to));
        let (mut want, want_error) = walk(fields(&buf[from..to]));
        for s in &mut want {
            s.start += from;
            s.payload = (s.payload.0 + from, s.payload.1 + from);
        }
        prop_assert_eq!(seen, want);
        prop_assert_eq!(error, want_error);
    }

    /// Packed varints read as prost's `decode_varint` reads them one after another.
    #[test]
    fn packed_varints_read_as_prost_does(buf in encodings()) {
        let mut rest = buf.as_slice();
        let mut want = Vec::new();
        let mut refused = false;
        while !rest.is_empty() {
            match decode_varint(&mut rest) {
                Ok(v) => want.push(v),
                Err(_) => {
                    refused = true;
                    break;
                }
            }
        }
        let got: Vec<_> = packed_varints(&buf).collect();
        let ok: Vec<u64> = got.iter().map_while(|v| v.ok()).collect();
        prop_assert_eq!(ok, want);
        prop_assert_eq!(got.last().is_some_and(Result::is_err), refused);
    }

    /// Valid messages walk to the end, each field where prost wrote it.
    #[test]
    fn prost_encodings_walk_to_the_end(
        name in ".{0,8}",
        shape in prop::collection::vec(any::<i64>(), 0..4),
        ids in prop::collection::vec(any::<i64>(), 0..4),
        values in prop::collection::vec(any::<f64>(), 0..4),
    ) {
        let log = FeatureLog {
            request_id: name.clone(),
            row_count: 3,
            features: vec![Feature::column(
                name.clone(),
                crate::featurelog::v1::DataType::Fp64,
                shape,
                Values { fp64_values: values, ..Values::default() },
            )],
            candidate_int_ids: ids,
            ..FeatureLog::default()
        };
        let raw = log.encode_to_vec();
        let (seen, error) = walk(fields(&raw));
        prop_assert_eq!(error, None);
        prop_assert_eq!(seen.last().map_or(0, |s| s.payload.1), raw.len());
        agrees(&raw, (seen, None))?;
    }
}
