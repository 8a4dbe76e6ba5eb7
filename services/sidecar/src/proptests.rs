//! Differential property tests of the sidecar's hand-written decoders on the untrusted path:
//! each reads the same bytes as a reference (prost for protobuf, serde_json for JSON, flate2's
//! plain readers for gzip) and must agree with it, and never panic. Where a decoder reads less
//! than the reference on purpose (only the fields it needs, leaving the rest to the model
//! server, which refuses a call it cannot decode: such a call is never logged), the property
//! says so where it allows it.
//!
//! - `publisher::unframe` and `publisher::inflate_http` against the body they were made from,
//!   and against flate2's single- and multi-member gzip readers on bytes changed at random.
//! - `lazy::scan` / `Scanned::decode_for_rule` against `ModelInferRequest::decode`.
//! - `direct::encode` (and its plan cache) against the general path and against the raw
//!   contents prost decodes.
//! - The request id the caller is given (`proxy::captured_request_id`, `proxy::id_in_chunks`,
//!   `proxy::head_id`) against prost's decode of the message's head and against the id the
//!   publisher logs the call under; `publisher::request_model` against prost's name and
//!   version.
//! - `rest_json::request` / `response` / `peek_id` against a parse of the whole body into a
//!   `serde_json::Value`.
//! - `stream::messages` (the cutter of streamed gRPC messages) against cutting the whole body.
//!
//! Cases are bounded (see [`config`]) so that the set runs in seconds in a debug build;
//! `PROPTEST_CASES=100000 cargo test -p featurelog-sidecar --lib proptests` runs longer, and
//! `PROPTEST_RNG_SEED=<n>` explores other cases than the fixed default seed.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{Read, Write};

use bytes::{Bytes, BytesMut};
use featurelog_schemas::featurelog::v1::FeatureLog;
use featurelog_schemas::inference::infer_parameter::ParameterChoice;
use featurelog_schemas::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use featurelog_schemas::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use prost::Message as _;
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

use crate::allowlist::{AllowList, ModelRule};
use crate::extract::CallContext;
use crate::lazy::LazyError;
use crate::publisher::{Unframe, inflate_http, request_model, unframe};

/// `cases` cases (or `PROPTEST_CASES`), from a fixed seed unless `PROPTEST_RNG_SEED` is set:
/// CI runs the same cases every time, and a longer local run can explore others. No
/// regression files: a case found is kept as a unit test (at the end of this file).
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
        config.rng_seed = RngSeed::Fixed(0x5eed_f00d_51de_ca75);
    }
    config
}

// ---------------------------------------------------------------------------------------------
// Bytes changed at random, bodies cut into chunks.

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

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..4)
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

/// `body` cut at `cuts` (as HTTP/2 data frames may cut it), with an empty chunk at some cuts.
fn chunked(body: &[u8], cuts: &[Index]) -> Vec<Bytes> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for (n, cut) in at.into_iter().enumerate() {
        out.push(Bytes::copy_from_slice(&body[from..cut]));
        if n % 3 == 2 {
            out.push(Bytes::new());
        }
        from = cut;
    }
    out.push(Bytes::copy_from_slice(&body[from..]));
    out
}

fn cuts() -> impl Strategy<Value = Vec<Index>> {
    prop::collection::vec(any::<Index>(), 0..4)
}

/// A gRPC message: compressed flag, big-endian length, bytes.
fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend((message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

fn gzip(data: &[u8], level: u32) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    let _ = gz.write_all(data);
    gz.finish().unwrap_or_default()
}

fn zlib(data: &[u8], level: u32) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
    let _ = z.write_all(data);
    z.finish().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Gzip and deflate: `unframe` and `inflate_http`.

/// What flate2's plain readers make of compressed bytes: the first member (or zlib stream)
/// and whether bytes follow it, and every member read on (gzip only; `None` for deflate).
struct Inflated {
    first: Option<Vec<u8>>,
    trailing: bool,
    all_members: Option<Vec<u8>>,
}

fn reference_gunzip(body: &[u8]) -> Inflated {
    let mut first = Vec::new();
    let mut reader = flate2::bufread::GzDecoder::new(body);
    let ok = reader.read_to_end(&mut first).is_ok();
    let trailing = !reader.into_inner().is_empty();
    let mut all = Vec::new();
    let all_ok = flate2::read::MultiGzDecoder::new(body)
        .read_to_end(&mut all)
        .is_ok();
    Inflated {
        first: ok.then_some(first),
        trailing,
        all_members: all_ok.then_some(all),
    }
}

fn reference_inflate(body: &[u8]) -> Inflated {
    let mut first = Vec::new();
    let mut reader = flate2::bufread::ZlibDecoder::new(body);
    let ok = reader.read_to_end(&mut first).is_ok();
    Inflated {
        first: ok.then_some(first),
        trailing: !reader.into_inner().is_empty(),
        all_members: None,
    }
}

/// The rule for a compressed body, given what the reference reads of it: one whole stream and
/// nothing after it, inflated to at most `limit` bytes, is read as the reference reads it;
/// past `limit` (as far as the decoder must read to know) it is too large; anything else is
/// malformed. Bytes after the first gzip member are refused even when they are more members
/// (which some servers read on, as `MultiGzDecoder` does, and some refuse): what the model
/// read is not known, so nothing is logged.
fn check_inflated(
    got: Result<Bytes, Unframe>,
    reference: &Inflated,
    limit: usize,
) -> Result<(), TestCaseError> {
    match (&reference.first, reference.trailing) {
        (Some(first), _) if first.len() > limit => {
            prop_assert!(matches!(got, Err(Unframe::TooLarge)), "{:?}", got)
        }
        (Some(first), false) => {
            prop_assert_eq!(got.as_deref().ok(), Some(&first[..]));
            if let Some(all) = &reference.all_members {
                prop_assert_eq!(all, first);
            }
        }
        // Bytes after the stream, or a stream that does not inflate: refused; too large when
        // what inflated before the error already passed the limit.
        _ => prop_assert!(
            matches!(got, Err(Unframe::Malformed | Unframe::TooLarge)),
            "{:?}",
            got
        ),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1024))]

    /// A gRPC body: its one message, inflated when flagged and gzip, whatever the chunks.
    #[test]
    fn unframing_reads_the_message_it_was_made_of(
        message in prop::collection::vec(any::<u8>(), 0..600),
        compressed in any::<bool>(),
        level in 0u32..10,
        encoding in prop::sample::select(vec![None, Some("gzip"), Some("snappy"), Some("deflate")]),
        limit in 0usize..800,
        cuts in cuts(),
    ) {
        let payload = if compressed { gzip(&message, level) } else { message.clone() };
        let body = framed(u8::from(compressed), &payload);
        let got = unframe(chunked(&body, &cuts), encoding, limit, &mut BytesMut::new());
        match (compressed, encoding) {
            // The tap bounds an uncompressed body; unframing does not again.
            (false, _) => prop_assert_eq!(got.as_deref().ok(), Some(&message[..])),
            (true, Some("gzip")) => check_inflated(got, &reference_gunzip(&payload), limit)?,
            (true, _) => prop_assert!(matches!(got, Err(Unframe::Compression)), "{:?}", got),
        }
    }

    /// The same bodies changed at random (a length that disagrees, a flag of 2, a corrupt or
    /// extended gzip stream): never a panic, and never a message but the one the reference
    /// reads from exactly the bytes the prefix says.
    #[test]
    fn mutated_grpc_bodies_are_refused_or_read_as_the_reference_reads_them(
        message in prop::collection::vec(any::<u8>(), 0..300),
        level in 0u32..10,
        compressed in any::<bool>(),
        second_member in prop::option::of(prop::collection::vec(any::<u8>(), 0..20)),
        limit in 0usize..400,
        mutations in mutations(),
        mutated in any::<bool>(),
        cuts in cuts(),
    ) {
        let mut payload = if compressed { gzip(&message, level) } else { message.clone() };
        if let Some(second) = &second_member {
            payload.extend(gzip(second, level));
        }
        let mut body = framed(u8::from(compressed), &payload);
        if mutated {
            mutate(&mut body, &mutations);
        }
        let got = unframe(chunked(&body, &cuts), Some("gzip"), limit, &mut BytesMut::new());
        let (flag, len) = match body.as_slice() {
            [flag, a, b, c, d, ..] => (*flag, u32::from_be_bytes([*a, *b, *c, *d]) as usize),
            _ => return {
                prop_assert!(matches!(got, Err(Unframe::Malformed)), "{:?}", got);
                Ok(())
            },
        };
        let rest = &body[5..];
        if rest.len() != len {
            prop_assert!(matches!(got, Err(Unframe::Malformed)), "{:?}", got);
        } else if flag == 0 {
            prop_assert_eq!(got.as_deref().ok(), Some(rest));
        } else if flag == 1 {
            check_inflated(got, &reference_gunzip(rest), limit)?;
        } else {
            prop_assert!(matches!(got, Err(Unframe::Compression)), "{:?}", got);
        }
    }

    /// An HTTP body: as it is without a Content-Encoding (or identity), inflated for gzip and
    /// deflate (in any case, spaces around), refused for any other.
    #[test]
    fn http_bodies_inflate_as_the_reference_reads_them(
        data in prop::collection::vec(any::<u8>(), 0..600),
        level in 0u32..10,
        encoding in prop::sample::select(vec![
            None, Some(""), Some("identity"), Some("gzip"), Some(" GZip "), Some("deflate"),
            Some("Deflate"), Some("br"), Some("x-gzip"),
        ]),
        limit in 0usize..800,
        extra in prop::option::of(prop::collection::vec(any::<u8>(), 0..20)),
        mutations in mutations(),
        mutated in any::<bool>(),
        cuts in cuts(),
    ) {
        let kind = encoding.map(|e| e.trim().to_ascii_lowercase());
        let mut body = match kind.as_deref() {
            Some("gzip") => gzip(&data, level),
            Some("deflate") => zlib(&data, level),
            _ => data.clone(),
        };
        // A second gzip member, or bytes after the stream.
        match (&extra, kind.as_deref()) {
            (Some(extra), Some("gzip")) => body.extend(gzip(extra, level)),
            (Some(extra), _) => body.extend_from_slice(extra),
            (None, _) => {}
        }
        if mutated {
            mutate(&mut body, &mutations);
        }
        let got = inflate_http(chunked(&body, &cuts), encoding, limit, &mut BytesMut::new());
        match kind.as_deref() {
            None | Some("" | "identity") => prop_assert_eq!(got.as_deref().ok(), Some(&body[..])),
            Some("gzip") => check_inflated(got, &reference_gunzip(&body), limit)?,
            Some("deflate") => check_inflated(got, &reference_inflate(&body), limit)?,
            Some(_) => prop_assert!(matches!(got, Err(Unframe::Compression)), "{:?}", got),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ModelInferRequest: valid encodings other than prost's, built on prost's own tokenizer.

/// One field of a message as prost reads it: its number, wire type, where its key ends and its
/// payload (the bytes after the key; a length-delimited field's without its length).
#[derive(Debug)]
struct Field {
    number: u32,
    wire: WireType,
    key_len: usize,
    start: usize,
    payload: Vec<u8>,
}

/// The top-level fields of a message, in order; `None` if prost cannot step over them.
fn fields(buf: &[u8]) -> Option<Vec<Field>> {
    let mut rest = buf;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let start = buf.len() - rest.len();
        let (number, wire) = decode_key(&mut rest).ok()?;
        let key_len = buf.len() - rest.len() - start;
        let len = match wire {
            WireType::Varint => {
                let before = rest;
                decode_varint(&mut rest).ok()?;
                let payload = before[..before.len() - rest.len()].to_vec();
                out.push(Field {
                    number,
                    wire,
                    key_len,
                    start,
                    payload,
                });
                continue;
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => usize::try_from(decode_varint(&mut rest).ok()?).ok()?,
            WireType::StartGroup | WireType::EndGroup => return None,
        };
        out.push(Field {
            number,
            wire,
            key_len,
            start,
            payload: rest.get(..len)?.to_vec(),
        });
        rest = &rest[len..];
    }
    Some(out)
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

/// An unknown field (numbers past every message's here) of any wire type but groups.
fn unknown(rng: &mut fastrand::Rng) -> Vec<u8> {
    let number = rng.u32(20..40);
    match rng.u8(..4) {
        0 => {
            let mut v = Vec::new();
            encode_varint(rng.u64(..), &mut v);
            put(number, WireType::Varint, &v)
        }
        1 => put(number, WireType::SixtyFourBit, &rng.u64(..).to_le_bytes()),
        2 => put(number, WireType::ThirtyTwoBit, &rng.u32(..).to_le_bytes()),
        _ => put(
            number,
            WireType::LengthDelimited,
            &(0..rng.usize(..6)).map(|_| rng.u8(..)).collect::<Vec<_>>(),
        ),
    }
}

/// Encoded fields in another order that keeps each field number's occurrences in theirs: the
/// message prost reads is the same.
fn interleaved(fields: Vec<(u32, Vec<u8>)>, rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut by_number: BTreeMap<u32, VecDeque<Vec<u8>>> = BTreeMap::new();
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

/// A tensor re-encoded: its shape packed, unpacked or in several runs, unknown fields, fields
/// in another order.
fn reencode_tensor(buf: &[u8], rng: &mut fastrand::Rng) -> Vec<u8> {
    let Some(tensor) = fields(buf) else {
        return buf.to_vec();
    };
    let mut out = Vec::new();
    for f in tensor {
        match (f.number, f.wire) {
            (3, WireType::LengthDelimited) => {
                let mut run = &f.payload[..];
                let mut dims = Vec::new();
                while !run.is_empty() {
                    let before = run;
                    let _ = decode_varint(&mut run);
                    dims.push(before[..before.len() - run.len()].to_vec());
                }
                let at = rng.usize(..=dims.len());
                match rng.u8(..3) {
                    0 => out.push((3, put(3, WireType::LengthDelimited, &f.payload))),
                    1 => out.extend(dims.iter().map(|d| (3, put(3, WireType::Varint, d)))),
                    _ => {
                        out.push((3, put(3, WireType::LengthDelimited, &dims[..at].concat())));
                        out.extend(dims[at..].iter().map(|d| (3, put(3, WireType::Varint, d))));
                    }
                }
            }
            _ => out.push((f.number, put(f.number, f.wire, &f.payload))),
        }
        if rng.u8(..6) == 0 {
            out.push((100, unknown(rng)));
        }
    }
    interleaved(out, rng)
}

/// A request (prost's encoding) re-encoded as another valid writer may write it.
fn reencode_request(buf: &[u8], seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let Some(request) = fields(buf) else {
        return buf.to_vec();
    };
    let mut out = Vec::new();
    for f in request {
        match (f.number, f.wire) {
            (5, WireType::LengthDelimited) => {
                let tensor = reencode_tensor(&f.payload, &mut rng);
                out.push((5, put(5, WireType::LengthDelimited, &tensor)));
            }
            _ => out.push((f.number, put(f.number, f.wire, &f.payload))),
        }
        if rng.u8(..6) == 0 {
            out.push((100, unknown(&mut rng)));
        }
    }
    interleaved(out, &mut rng)
}

// ---------------------------------------------------------------------------------------------
// ModelInferRequest generators.

const INPUT_NAMES: &[&str] = &["a", "ids", "b", "c", "price", "é"];
const PARAMETER_KEYS: &[&str] = &["surface", "user", "k"];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-z0-9_-]{0,6}", 1 => "\\PC{0,4}"]
}

fn parameter() -> impl Strategy<Value = InferParameter> {
    prop_oneof![
        any::<bool>().prop_map(ParameterChoice::BoolParam),
        any::<i64>().prop_map(ParameterChoice::Int64Param),
        text().prop_map(ParameterChoice::StringParam),
        (-1e6f64..1e6).prop_map(ParameterChoice::DoubleParam),
        any::<u64>().prop_map(ParameterChoice::Uint64Param),
    ]
    .prop_map(|choice| InferParameter {
        parameter_choice: Some(choice),
    })
}

fn parameters() -> impl Strategy<Value = HashMap<String, InferParameter>> {
    prop::collection::hash_map(
        prop::sample::select(PARAMETER_KEYS.to_vec()).prop_map(str::to_owned),
        parameter(),
        0..3,
    )
}

/// Element sizes of the datatypes the fast path copies or re-encodes, 0 for the others.
fn element_size(datatype: &str) -> usize {
    match datatype {
        "FP32" | "INT32" => 4,
        "FP64" | "INT64" => 8,
        _ => 0,
    }
}

/// An input: mostly a numeric tensor of `rows` rows whose raw contents fit its shape (the fast
/// path's case), else anything: other datatypes, shapes, typed contents, parameters.
fn input(rows: i64) -> impl Strategy<Value = (InferInputTensor, Vec<u8>)> {
    let datatype = prop_oneof![
        4 => prop::sample::select(vec!["FP32", "FP64", "INT32", "INT64"]).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["BYTES", "BOOL", "FP16", ""]).prop_map(str::to_owned),
        1 => text(),
    ];
    let shape = prop_oneof![
        3 => Just(vec![rows]),
        2 => (1i64..4).prop_map(move |k| vec![rows, k]),
        1 => (0i64..4).prop_map(|k| vec![1, k]),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(prop_oneof![0i64..5, any::<i64>()], 0..3),
    ];
    (
        prop::sample::select(INPUT_NAMES.to_vec()),
        datatype,
        shape,
        prop::option::weighted(0.15, parameters()),
        prop::option::weighted(0.1, prop::collection::vec(-1e3f32..1e3, 0..4)),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(name, datatype, shape, parameters, contents, fits, seed)| {
                let mut rng = fastrand::Rng::with_seed(seed);
                let count = shape
                    .iter()
                    .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
                    .filter(|&n| n < 64);
                let len = match (fits, count) {
                    (true, Some(n)) if element_size(&datatype) > 0 => n * element_size(&datatype),
                    _ => rng.usize(..24),
                };
                let raw = (0..len).map(|_| rng.u8(..)).collect();
                let tensor = InferInputTensor {
                    name: name.to_owned(),
                    datatype,
                    shape,
                    parameters: parameters.unwrap_or_default(),
                    contents: contents.map(|fp32_contents| InferTensorContents {
                        fp32_contents,
                        ..InferTensorContents::default()
                    }),
                };
                (tensor, raw)
            },
        )
}

/// A request: raw contents for every input (Triton's clients), for none, or for some.
fn request() -> impl Strategy<Value = ModelInferRequest> {
    (0i64..5)
        .prop_flat_map(|rows| {
            (
                (text(), text(), text()),
                parameters(),
                prop::collection::vec(input(rows), 0..6),
                prop::collection::vec(
                    (text(), parameters()).prop_map(|(name, parameters)| {
                        InferRequestedOutputTensor { name, parameters }
                    }),
                    0..2,
                ),
                prop_oneof![6 => Just(0usize), 1 => Just(1), 1 => Just(2)],
            )
        })
        .prop_map(
            |((model_name, model_version, id), parameters, inputs, outputs, raw)| {
                let (inputs, contents): (Vec<_>, Vec<_>) = inputs.into_iter().unzip();
                let raw_input_contents = match raw {
                    0 => contents.into_iter().map(Bytes::from).collect(),
                    1 => Vec::new(),
                    _ => contents.into_iter().skip(1).map(Bytes::from).collect(),
                };
                ModelInferRequest {
                    model_name,
                    model_version,
                    id,
                    parameters,
                    inputs,
                    outputs,
                    raw_input_contents,
                }
            },
        )
}

fn rule() -> impl Strategy<Value = ModelRule> {
    let name = || prop::sample::select(INPUT_NAMES.to_vec()).prop_map(str::to_owned);
    (
        prop::collection::vec(prop_oneof![name(), Just("missing".to_owned())], 0..4),
        prop::option::of(name()),
        prop_oneof![
            3 => Just(Vec::new()),
            1 => prop::collection::vec(
                prop::sample::select(PARAMETER_KEYS.to_vec()).prop_map(str::to_owned),
                1..2,
            ),
        ],
    )
        .prop_map(
            |(mut features, candidate_ids_input, parameters)| ModelRule {
                name: "ranker".into(),
                version: None,
                // The allow list refuses a feature listed twice.
                features: {
                    let mut seen = HashSet::new();
                    features.retain(|f| seen.insert(f.clone()));
                    features
                },
                outputs: vec![],
                candidate_ids_input,
                candidate_ids_parameter: None,
                parameters,
                headers: vec![],
                sample_rate: 1.0,
                top_k: None,
            },
        )
}

/// What the rule's decode must hold, from prost's decode of the whole request: the head, the
/// inputs the rule names (every one with that name, in order) with their raw contents at the
/// same positions, and the parameters when the rule reads any.
fn expected_for_rule(
    full: &ModelInferRequest,
    rule: &ModelRule,
) -> Result<ModelInferRequest, LazyError> {
    if !full.raw_input_contents.is_empty() && full.raw_input_contents.len() != full.inputs.len() {
        return Err(LazyError::RawCount(
            featurelog_schemas::tensor::TensorError::RawCountMismatch {
                inputs: full.inputs.len(),
                raw: full.raw_input_contents.len(),
            },
        ));
    }
    let wanted: HashSet<&str> = rule
        .features
        .iter()
        .chain(&rule.candidate_ids_input)
        .map(String::as_str)
        .collect();
    let mut out = ModelInferRequest {
        model_name: full.model_name.clone(),
        model_version: full.model_version.clone(),
        id: full.id.clone(),
        ..ModelInferRequest::default()
    };
    for (i, input) in full.inputs.iter().enumerate() {
        if wanted.contains(input.name.as_str()) {
            out.inputs.push(input.clone());
            if let Some(raw) = full.raw_input_contents.get(i) {
                out.raw_input_contents.push(raw.clone());
            }
        }
    }
    if !rule.parameters.is_empty() || rule.candidate_ids_parameter.is_some() {
        out.parameters = full.parameters.clone();
    }
    Ok(out)
}

/// `lazy::decode_for_rule` on `raw` against prost's decode of it: where prost reads the
/// request, the lazy decode reads the same; where prost refuses it, the lazy decode may still
/// read it (it steps over what the rule does not need without decoding it: the model server
/// refuses such a call, and a failed call is never logged), but never panics.
fn check_lazy(raw: &[u8], rule: &ModelRule) -> Result<bool, TestCaseError> {
    let got = crate::lazy::decode_for_rule(Bytes::copy_from_slice(raw), rule);
    let Ok(full) = ModelInferRequest::decode(raw) else {
        return Ok(false);
    };
    let want = expected_for_rule(&full, rule);
    prop_assert_eq!(&got, &want, "{:?}", raw);
    let scanned = crate::lazy::scan(Bytes::copy_from_slice(raw));
    let scanned = scanned.map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    prop_assert_eq!(
        (&scanned.model_name, &scanned.model_version, &scanned.id),
        (&full.model_name, &full.model_version, &full.id)
    );
    prop_assert_eq!(scanned.input_count(), full.inputs.len());
    prop_assert_eq!(scanned.raw_count(), full.raw_input_contents.len());
    for (i, raw) in full.raw_input_contents.iter().enumerate() {
        prop_assert_eq!(scanned.raw(i), &raw[..]);
    }
    for (i, input) in full.inputs.iter().enumerate() {
        let read = InferInputTensor::decode(scanned.input(i));
        prop_assert_eq!(read.as_ref().ok(), Some(input));
    }
    Ok(true)
}

proptest! {
    #![proptest_config(config(1024))]

    /// Requests as prost writes them and as other writers may: the rule's decode holds what
    /// prost's full decode holds.
    #[test]
    fn lazy_decodes_read_as_prost_reads_them(r in request(), rule in rule(), seed in any::<u64>()) {
        let plain = r.encode_to_vec();
        prop_assert!(check_lazy(&plain, &rule)?);
        let other = reencode_request(&plain, seed);
        prop_assert!(check_lazy(&other, &rule)?, "a valid re-encoding: {:?}", other);
    }

    /// The same changed at random.
    #[test]
    fn mutated_requests_lazily_decode_as_prost_or_not_at_all(
        r in request(),
        rule in rule(),
        seed in any::<u64>(),
        reencode in any::<bool>(),
        mutations in mutations(),
    ) {
        let mut raw = r.encode_to_vec();
        if reencode {
            raw = reencode_request(&raw, seed);
        }
        mutate(&mut raw, &mutations);
        check_lazy(&raw, &rule)?;
    }
}

// ---------------------------------------------------------------------------------------------
// The fast path.

fn ctx() -> CallContext<'static> {
    CallContext {
        request_id: "req-1",
        served_at: std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::new(1_790_000_000, 123_456_789),
        instance: "sidecar-a",
        allow_list_version: "v7",
        headers: &[],
    }
}

/// What the model server reads of a logged feature: its raw contents, little-endian.
fn raw_of(values: &featurelog_schemas::featurelog::v1::Values, datatype: i32) -> Vec<u8> {
    use featurelog_schemas::featurelog::v1::DataType;
    match DataType::try_from(datatype) {
        Ok(DataType::Fp32) => values
            .fp32_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        Ok(DataType::Fp64) => values
            .fp64_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        Ok(DataType::Int32) => values
            .int32_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        Ok(DataType::Int64) => values
            .int64_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        _ => Vec::new(),
    }
}

/// The fast path on `raw` against the general path and prost: when it logs a call, the
/// general path logs the same record (byte for byte), the plan cache gives the same, and each
/// logged feature holds the bytes prost decodes as that input's raw contents.
fn check_direct(
    raw: &[u8],
    list: &std::sync::Arc<AllowList>,
    cache: &mut crate::direct::PlanCache,
) -> Result<bool, TestCaseError> {
    let rule = &list.models[0];
    let bytes = Bytes::copy_from_slice(raw);
    let Ok(scanned) = crate::lazy::scan(bytes.clone()) else {
        return Ok(false);
    };
    let fast = crate::direct::encode(rule, &scanned, ctx());
    let cached = cache.plan(list, rule, &scanned).and_then(|plan| {
        let mut out = Vec::new();
        crate::direct::encode_planned(plan, rule, &scanned, ctx(), &mut out).map(|rows| (out, rows))
    });
    prop_assert_eq!(&cached, &fast, "the plan cache's record is the plan's");
    let general = crate::lazy::decode_for_rule(bytes, rule)
        .ok()
        .and_then(|d| crate::extract::extract(rule, &d, None, ctx()).ok());
    let Some((fast, rows)) = fast else {
        return Ok(false);
    };
    let record = FeatureLog::decode(&fast[..]).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(record.row_count, rows);
    let Some(general) = general else {
        return Err(TestCaseError::fail(format!(
            "the fast path logged what the general path does not: {raw:?}"
        )));
    };
    // NaN != NaN: the two records are compared by their encodings.
    prop_assert_eq!(&fast, &general.encode_to_vec(), "{:?}", raw);
    if let Ok(server) = ModelInferRequest::decode(raw) {
        for feature in &record.features {
            let at = server.inputs.iter().position(|i| i.name == feature.name);
            let at = at.ok_or_else(|| TestCaseError::fail("a logged feature is an input"))?;
            let values = feature.values.clone().unwrap_or_default();
            prop_assert_eq!(
                raw_of(&values, feature.datatype),
                server.raw_input_contents[at].to_vec(),
                "{}",
                &feature.name
            );
        }
        if let Some(ids) = &rule.candidate_ids_input {
            let at = server.inputs.iter().position(|i| &i.name == ids);
            if let Some(at) = at.filter(|_| !record.candidate_int_ids.is_empty()) {
                let size = element_size(&server.inputs[at].datatype);
                let want: Vec<i64> = server.raw_input_contents[at]
                    .chunks_exact(size)
                    .map(|c| {
                        if size == 4 {
                            i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        } else {
                            i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                        }
                    })
                    .collect();
                prop_assert_eq!(&record.candidate_int_ids, &want);
            }
        }
    }
    Ok(true)
}

proptest! {
    #![proptest_config(config(1024))]

    /// Raw numeric tensors, as prost writes them and as other writers may, and changed at
    /// random: the fast path logs exactly what the general path logs, or leaves the call to it.
    #[test]
    fn the_fast_path_logs_what_the_general_path_and_prost_read(
        r in request(),
        rule in rule(),
        seed in any::<u64>(),
        how in 0u8..3,
        mutations in mutations(),
    ) {
        let mut raw = r.encode_to_vec();
        if how >= 1 {
            raw = reencode_request(&raw, seed);
        }
        if how == 2 {
            mutate(&mut raw, &mutations);
        }
        let list = std::sync::Arc::new(AllowList {
            version: "v7".into(),
            models: vec![rule],
        });
        let mut cache = crate::direct::PlanCache::default();
        check_direct(&raw, &list, &mut cache)?;
        // Again through the same cache (a hit).
        check_direct(&raw, &list, &mut cache)?;
    }
}

// ---------------------------------------------------------------------------------------------
// The request id the caller is given, and the model a request names.

/// The head of a ModelInferRequest as prost decodes it (what the model server reads of it):
/// the reference for every id and name read on the call's path.
#[derive(Clone, PartialEq, prost::Message)]
struct Head {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
}

fn head_of(message: &[u8]) -> Option<Head> {
    Head::decode(message).ok()
}

fn captured(chunks: Vec<Bytes>) -> crate::proxy::Captured {
    crate::proxy::Captured {
        len: chunks.iter().map(Bytes::len).sum(),
        chunks,
        overflow: false,
        head: Vec::new(),
        complete: true,
        trailers: None,
    }
}

/// A request as prost writes it, re-encoded (`how` 1), or changed at random (`how` 2).
fn message_of(r: &ModelInferRequest, how: u8, seed: u64, mutations: &[Mutation]) -> Vec<u8> {
    let mut raw = r.encode_to_vec();
    if how >= 1 {
        raw = reencode_request(&raw, seed);
    }
    if how == 2 {
        mutate(&mut raw, mutations);
    }
    raw
}

proptest! {
    #![proptest_config(config(1536))]

    /// The id a call's response names (`x-request-id` when the call carries none) is the one
    /// prost decodes from the request, in any chunks, compressed or not; and whenever the
    /// publisher logs the call, it is the id the record carries.
    #[test]
    fn the_id_given_back_is_the_one_prost_reads_and_the_record_carries(
        r in request(),
        how in 0u8..3,
        seed in any::<u64>(),
        mutations in mutations(),
        compressed in any::<bool>(),
        trailing in prop::collection::vec(any::<u8>(), 0..3),
        cuts in cuts(),
    ) {
        let message = message_of(&r, how, seed, &mutations);
        let want = head_of(&message).map(|h| h.id);
        if let Ok(full) = ModelInferRequest::decode(&message[..]) {
            prop_assert_eq!(want.as_deref(), Some(full.id.as_str()));
        }
        let (encoding, body) = if compressed {
            (Some("gzip"), framed(1, &gzip(&message, 1)))
        } else {
            (None, framed(0, &message))
        };
        let chunks = chunked(&body, &cuts);
        let got = crate::proxy::captured_request_id(&captured(chunks.clone()), encoding, 1 << 20);
        prop_assert_eq!(&got, &want, "{:?}", message);
        // The record's id: the publisher unframes the body and scans the message.
        let unframed = unframe(chunks.clone(), encoding, 1 << 20, &mut BytesMut::new());
        if let Ok(Ok(scanned)) = unframed.map(crate::lazy::scan) {
            prop_assert_eq!(got.as_deref(), Some(scanned.id.as_str()), "{:?}", message);
        }
        if !compressed {
            // A streamed request's id, read in place from its message's chunks.
            let in_chunks = crate::proxy::id_in_chunks(&chunks, 5);
            prop_assert_eq!(&in_chunks, &want);
            // Bytes after the message (the publisher refuses such a body): the id is still
            // the message's, as its prefix bounds it.
            let mut longer = body.clone();
            longer.extend_from_slice(&trailing);
            let got = crate::proxy::captured_request_id(
                &captured(chunked(&longer, &cuts)), None, 1 << 20);
            prop_assert_eq!(&got, &want);
        }
    }

    /// A request past the size limit keeps only its first bytes: the id read from them is
    /// prost's, or none when they end before the first field past `id` (fields come in
    /// field-number order from every encoder).
    #[test]
    fn the_id_of_a_head_is_the_whole_messages_or_none(
        r in request(),
        cut in any::<Index>(),
        mutations in mutations(),
        mutated in any::<bool>(),
    ) {
        let message = r.encode_to_vec();
        let body = framed(0, &message);
        let head = &body[..cut.index(body.len() + 1)];
        let got = crate::proxy::head_id(head);
        let fields = fields(&message).unwrap_or_default();
        let past_id = fields.iter().find(|f| f.number >= 4).map(|f| 5 + f.start + f.key_len);
        let want = past_id.filter(|&end| head.len() >= end).map(|_| r.id.clone());
        prop_assert_eq!(got, want);
        if mutated {
            // Bytes changed at random: no panic, and an id only where prost reads one.
            let mut head = head.to_vec();
            mutate(&mut head, &mutations);
            if let Some(id) = crate::proxy::head_id(&head) {
                // It stops at the first field numbered past `id`, unread; prost reads on, so
                // a later `id` (no encoder writes one) or a malformed field there makes them
                // differ. Up to that field they agree.
                let stop = fields_until_past_id(&head[5..]);
                let prefix = stop.and_then(|s| head_of(&head[5..5 + s]));
                prop_assert_eq!(Some(id), prefix.map(|h| h.id), "{:?}", head);
            }
        }
    }

    /// The model a request names, read from the fields its first chunk starts with: prost's
    /// name and version, or no answer (the publisher's full decode then decides).
    #[test]
    fn the_model_read_early_is_prosts_or_none(
        r in request(),
        how in 0u8..3,
        seed in any::<u64>(),
        mutations in mutations(),
        cuts in cuts(),
    ) {
        let message = message_of(&r, how, seed, &mutations);
        let body = framed(0, &message);
        let chunks = chunked(&body, &cuts);
        let got = request_model(&chunks);
        let head = head_of(&message);
        if how == 0 {
            // Prost's order: name, version, then the rest.
            let first = chunks.iter().find(|c| !c.is_empty()).map_or(0, Bytes::len);
            let fields = fields(&message).unwrap_or_default();
            let leading = fields.iter().take_while(|f| f.number <= 2).count();
            let after = fields.get(leading).map_or(message.len(), |f| f.start);
            // Known when the first chunk holds the whole message or the first byte after the
            // name and version.
            let known = first >= body.len() || (first > 5 + after && first >= 5);
            let want = (known && !r.model_name.is_empty())
                .then_some((r.model_name.as_str(), r.model_version.as_str()));
            prop_assert_eq!(got, want, "first chunk {} of {}", first, body.len());
        } else if let (Some((name, version)), Some(head), Some(fields)) = (got, head, fields(&message)) {
            // Any answer is prost's when the name and version fields are all in the leading
            // run (as every encoder writes them): a later one would win in prost.
            let leading = fields
                .iter()
                .take_while(|f| f.number <= 2 && f.wire == WireType::LengthDelimited && f.key_len == 1)
                .count();
            if fields[leading..].iter().all(|f| f.number > 2) {
                prop_assert_eq!((name, version), (head.model_name.as_str(), head.model_version.as_str()));
            }
        }
    }
}

/// Where the first field numbered past `id` (4 or more, whatever its wire type) starts in
/// `message`, the fields before it stepped over as prost would; `None` when there is none or
/// a field before it is not well formed.
fn fields_until_past_id(message: &[u8]) -> Option<usize> {
    let mut rest = message;
    loop {
        let start = message.len() - rest.len();
        let key = decode_varint(&mut rest).ok()?;
        if key >> 3 >= 4 {
            return Some(start);
        }
        let wire = WireType::try_from(key & 7).ok()?;
        let number = u32::try_from(key >> 3).ok()?;
        let context = prost::encoding::DecodeContext::default();
        prost::encoding::skip_field(wire, number, &mut rest, context).ok()?;
    }
}

// ---------------------------------------------------------------------------------------------
// Streamed messages.

/// A body that yields `chunks`, then ends.
struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|c| Ok(http_body::Frame::data(c))))
    }
}

/// The messages of a whole body, cut from it in one piece: each whole one's bytes (prefix
/// included), `None` for one past `limit`; a message the body ends inside is not one.
fn reference_messages(body: &[u8], limit: usize) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(&[_, a, b, c, d]) = body.get(at..at + 5) {
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        if len > limit {
            out.push(None);
        } else if let Some(message) = body.get(at..at + 5 + len) {
            out.push(Some(message.to_vec()));
        } else {
            break;
        }
        at += 5 + len;
    }
    out
}

proptest! {
    #![proptest_config(config(1536))]

    /// A stream's body cut into its messages as its chunks pass, whatever the chunks: the
    /// messages a cut of the whole body gives, each whole one in its bytes.
    #[test]
    fn streamed_messages_are_cut_as_the_whole_body_cuts(
        messages in prop::collection::vec((any::<bool>(), prop::collection::vec(any::<u8>(), 0..40)), 0..6),
        limit in 0usize..48,
        tail in prop::collection::vec(any::<u8>(), 0..8),
        cuts in prop::collection::vec(any::<Index>(), 0..8),
    ) {
        let mut body: Vec<u8> = messages
            .iter()
            .flat_map(|(compressed, m)| framed(u8::from(*compressed), m))
            .collect();
        body.extend_from_slice(&tail);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut cut = crate::stream::messages(
            Chunks(chunked(&body, &cuts).into()),
            limit,
            {
                let seen = seen.clone();
                move |m| {
                    let m = match m {
                        crate::stream::Message::Whole(parts) => Some(parts.concat()),
                        crate::stream::Message::TooLarge => None,
                    };
                    if let Ok(mut seen) = seen.lock() {
                        seen.push(m);
                    }
                }
            },
            {
                let ended = ended.clone();
                move |_| ended.store(true, std::sync::atomic::Ordering::SeqCst)
            },
        );
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut passed = Vec::new();
        while let std::task::Poll::Ready(Some(frame)) =
            http_body::Body::poll_frame(std::pin::Pin::new(&mut cut), &mut cx)
        {
            let frame = frame.map_err(|e| TestCaseError::fail(e.to_string()))?;
            if let Some(data) = frame.data_ref() {
                passed.extend_from_slice(data);
            }
        }
        drop(cut);
        prop_assert_eq!(&passed, &body, "the body passes unchanged");
        prop_assert!(ended.load(std::sync::atomic::Ordering::SeqCst));
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        prop_assert_eq!(seen, reference_messages(&body, limit));
    }
}

// ---------------------------------------------------------------------------------------------
// REST bodies: the protocol's JSON and the binary tensor data extension.

type Json = serde_json::Value;
type Members = serde_json::Map<String, Json>;

const REST_NAMES: &[&str] = &["a", "ids", "b", "x]y{", "q\"uo\\te", "data", "é"];
const DATATYPES: &[&str] = &[
    "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP16",
    "BF16", "FP32", "FP64", "BYTES", "COMPLEX",
];

/// A JSON value of any kind, with the characters the outline steps over in its strings.
fn json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        any::<u64>().prop_map(Json::from),
        (-1e9f64..1e9).prop_map(Json::from),
        prop::sample::select(vec!["", "a]b[", "q\"", "\\", "}{", "data", "é\u{1F600}"])
            .prop_map(Json::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec((prop::sample::select(vec!["data", "k", "id"]), inner), 0..3)
                .prop_map(|m| Json::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
        ]
    })
}

/// Elements a datatype's JSON `data` may hold, mostly of that type (sometimes out of range).
fn element(datatype: &'static str) -> BoxedStrategy<Json> {
    let ints = |lo: i64, hi: i64| {
        prop_oneof![4 => (lo..=hi).prop_map(Json::from), 1 => any::<i64>().prop_map(Json::from)]
            .boxed()
    };
    match datatype {
        "BOOL" => any::<bool>().prop_map(Json::Bool).boxed(),
        "INT8" => ints(-128, 127),
        "INT16" => ints(-32768, 32767),
        "INT32" => ints(i64::from(i32::MIN), i64::from(i32::MAX)),
        "INT64" => any::<i64>().prop_map(Json::from).boxed(),
        "UINT8" => ints(0, 255),
        "UINT16" => ints(0, 65535),
        "UINT32" => ints(0, i64::from(u32::MAX)),
        "UINT64" => any::<u64>().prop_map(Json::from).boxed(),
        "BYTES" => prop_oneof![
            "\\PC{0,5}".prop_map(Json::from),
            prop::sample::select(vec!["a]b[", "q\"uo\\te\"", "}{"]).prop_map(Json::from),
        ]
        .boxed(),
        _ => prop_oneof![
            any::<i64>().prop_map(Json::from),
            any::<u64>().prop_map(Json::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Json::from),
            (-10f64..10.0).prop_map(Json::from),
        ]
        .boxed(),
    }
}

/// A tensor's JSON data: a flat list, rows of it, or one scalar; or anything at all.
fn tensor_data(datatype: &'static str) -> impl Strategy<Value = Json> {
    prop_oneof![
        4 => (prop::collection::vec(element(datatype), 0..6), 0usize..3).prop_map(|(flat, rows)| {
            if rows == 0 || flat.is_empty() {
                Json::Array(flat)
            } else {
                Json::Array(flat.chunks(rows).map(|r| Json::Array(r.to_vec())).collect())
            }
        }),
        1 => element(datatype),
        1 => json_value(),
    ]
}

/// One tensor of a REST body: its members (in an order of their own), and its binary data.
#[derive(Debug, Clone)]
struct RestTensor {
    members: Vec<(String, Json)>,
    binary: Vec<u8>,
}

fn rest_tensor() -> impl Strategy<Value = RestTensor> {
    (
        prop::sample::select(REST_NAMES.to_vec()),
        prop::sample::select(DATATYPES.to_vec()),
        prop_oneof![
            5 => prop::collection::vec(0i64..4, 0..3).prop_map(Json::from),
            1 => json_value(),
        ],
        0u8..8,
        prop::option::of(prop::collection::vec(
            (
                prop::sample::select(vec!["data", "k", "shape", "binary_data"]),
                json_value(),
            ),
            0..3,
        )),
        prop::collection::vec(any::<u8>(), 0..12),
        any::<u64>(),
    )
        .prop_flat_map(|(name, datatype, shape, how, parameters, binary, seed)| {
            tensor_data(datatype).prop_map(move |data| {
                let mut rng = fastrand::Rng::with_seed(seed);
                let mut parameters: Option<Members> = parameters
                    .clone()
                    .map(|p| p.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
                let mut binary_size = |value: Json| {
                    parameters
                        .get_or_insert_with(Members::new)
                        .insert("binary_data_size".into(), value);
                };
                let (data, binary) = match how {
                    // JSON data (the common case), binary data (tritonclient's default).
                    0..=3 => (Some(data), Vec::new()),
                    4 | 5 => {
                        binary_size(Json::from(binary.len()));
                        (None, binary.clone())
                    }
                    // Both, neither, or a size that is no size.
                    6 => {
                        binary_size(Json::from(binary.len()));
                        (Some(data), binary.clone())
                    }
                    _ => match rng.u8(..4) {
                        0 => (None, Vec::new()),
                        1 => {
                            binary_size(Json::from(-1));
                            (None, Vec::new())
                        }
                        2 => {
                            binary_size(Json::from(binary.len() as f64 + 0.5));
                            (None, binary.clone())
                        }
                        _ => {
                            binary_size(Json::Null);
                            (Some(data), Vec::new())
                        }
                    },
                };
                let mut members = vec![
                    ("name".to_owned(), Json::from(name)),
                    ("shape".to_owned(), shape.clone()),
                    ("datatype".to_owned(), Json::from(datatype)),
                ];
                if let Some(p) = parameters {
                    members.push(("parameters".into(), Json::Object(p)));
                } else if rng.u8(..4) == 0 {
                    members.push(("parameters".into(), Json::Null));
                }
                if let Some(d) = data {
                    members.push(("data".into(), d));
                }
                rng.shuffle(&mut members);
                RestTensor { members, binary }
            })
        })
}

/// A request body: members in any order, keys escaped or not, spaced or not, with the binary
/// part after the JSON when some tensor has binary data (or when `extension`).
#[derive(Debug, Clone)]
struct RestBody {
    json: Vec<u8>,
    binary: Vec<u8>,
    extension: bool,
}

impl RestBody {
    fn bytes(&self) -> Bytes {
        Bytes::from([&self.json[..], &self.binary].concat())
    }

    fn header_length(&self) -> Option<usize> {
        self.extension.then_some(self.json.len())
    }
}

/// An object's JSON text from members in order (repeated names kept), keys escaped (a letter
/// as `\u00XX`, as serde reads it the same) where `escape`.
fn object_text(members: &[(String, String)], escape: bool, spaced: bool) -> String {
    let key = |k: &str| {
        let plain = serde_json::to_string(k).unwrap_or_default();
        match k.char_indices().find(|(_, c)| c.is_ascii_lowercase()) {
            Some((at, c)) if escape => {
                format!(
                    "\"{}\\u{:04x}{}\"",
                    &plain[1..at + 1],
                    c as u32,
                    &plain[at + 2..]
                )
            }
            _ => plain,
        }
    };
    let (colon, comma) = if spaced { (" : ", ",\n  ") } else { (":", ",") };
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{}{colon}{v}", key(k)))
        .collect();
    format!("{{{}}}", body.join(comma))
}

fn value_text(v: &Json, spaced: bool) -> String {
    if spaced {
        serde_json::to_string_pretty(v)
    } else {
        serde_json::to_string(v)
    }
    .unwrap_or_default()
}

/// A body; with `decoys`, a requested output may have a `data` member (which is no member of
/// it), and a request parameter or an unknown top-level member may hold objects with one: the
/// outline steps over every `data` value at that depth unparsed, as an unread tensor's.
fn rest_body(decoys: bool) -> impl Strategy<Value = RestBody> {
    (
        prop_oneof![
            3 => "[a-z0-9\\-\\[\\]\"\\\\{}]{0,6}".prop_map(|s| Some(Json::from(s))),
            1 => Just(None),
            1 => Just(Some(Json::Null)),
            1 => any::<i64>().prop_map(|n| Some(Json::from(n))),
        ],
        prop::option::of(prop::collection::vec(
            (prop::sample::select(PARAMETER_KEYS.to_vec()), json_value()),
            0..3,
        )),
        prop::collection::vec(rest_tensor(), 0..5),
        prop::option::of(prop::collection::vec(
            (
                prop::sample::select(REST_NAMES.to_vec()),
                prop::option::of(json_value()),
            ),
            0..2,
        )),
        prop::option::of(json_value()),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<u64>()),
    )
        .prop_map(
            move |(id, parameters, tensors, outputs, decoy, (escape, spaced, extension, seed))| {
                let mut rng = fastrand::Rng::with_seed(seed);
                let text = |v: &Json| value_text(v, spaced);
                let mut members: Vec<(String, String)> = Vec::new();
                if let Some(id) = id {
                    members.push(("id".into(), text(&id)));
                }
                if let Some(p) = parameters {
                    // Without decoys, scalars only: an object value's `data` member is stepped
                    // over unparsed too (depth 3, as a tensor's), and dropped (no scalar).
                    let scalar = |v: Json| match v {
                        Json::Array(_) | Json::Object(_) if !decoys => Json::Null,
                        v => v,
                    };
                    let p: Members = p
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), scalar(v)))
                        .collect();
                    members.push(("parameters".into(), text(&Json::Object(p))));
                }
                let mut binary = Vec::new();
                let inputs: Vec<String> = tensors
                    .iter()
                    .map(|t| {
                        binary.extend_from_slice(&t.binary);
                        let m: Vec<(String, String)> = t
                            .members
                            .iter()
                            .map(|(k, v)| (k.clone(), text(v)))
                            .collect();
                        object_text(&m, escape && rng.bool(), spaced)
                    })
                    .collect();
                members.push(("inputs".into(), format!("[{}]", inputs.join(","))));
                if let Some(outputs) = outputs {
                    let outputs: Vec<String> = outputs
                        .iter()
                        .map(|(name, decoy)| {
                            let mut m = vec![("name".to_owned(), text(&Json::from(*name)))];
                            if let Some(d) = decoy.as_ref().filter(|_| decoys) {
                                m.push(("data".into(), text(d)));
                            }
                            object_text(&m, false, spaced)
                        })
                        .collect();
                    members.push(("outputs".into(), format!("[{}]", outputs.join(","))));
                }
                if let Some(d) = decoy {
                    let d = match d {
                        // Objects in it would have their `data` stepped over as tensors' are.
                        Json::Array(_) | Json::Object(_) if !decoys => Json::Null,
                        d => d,
                    };
                    members.push(("data".into(), text(&d)));
                }
                rng.shuffle(&mut members);
                let json = object_text(&members, escape, spaced).into_bytes();
                RestBody {
                    json,
                    extension: extension || !binary.is_empty(),
                    binary,
                }
            },
        )
}

/// Whether some object in the JSON text names a member twice: a parse into a map keeps the
/// last, the readers refuse a known member named twice (which one a model server reads is not
/// known), so the references do not model such text.
fn duplicate_keys(json: &[u8]) -> bool {
    struct Duplicates(bool);
    impl<'de> serde::Deserialize<'de> for Duplicates {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(Duplicates(false))
        }
    }
    impl<'de> serde::de::Visitor<'de> for Duplicates {
        type Value = Duplicates;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
            Ok(self)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
            Ok(self)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
            Ok(self)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
            Ok(self)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self, E> {
            Ok(self)
        }
        fn visit_unit<E>(self) -> Result<Self, E> {
            Ok(self)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
            let mut any = false;
            while let Some(Duplicates(d)) = seq.next_element()? {
                any |= d;
            }
            Ok(Duplicates(any))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
            let (mut any, mut seen) = (false, HashSet::new());
            while let Some(key) = map.next_key::<String>()? {
                any |= !seen.insert(key);
                any |= map.next_value::<Duplicates>()?.0;
            }
            Ok(Duplicates(any))
        }
    }
    serde_json::from_slice::<Duplicates>(json).is_ok_and(|d| d.0)
}

/// A reason as `RestBodyError::reason` gives it.
const MALFORMED: &str = "malformed_json";
const BAD_DATA: &str = "bad_json_data";

/// A tensor's raw contents from its JSON `data`, read from the parsed value.
fn reference_encode(datatype: &str, data: &Json) -> Result<Vec<u8>, &'static str> {
    fn flat<'a>(v: &'a Json, out: &mut Vec<&'a Json>) {
        match v {
            Json::Array(items) => items.iter().for_each(|i| flat(i, out)),
            other => out.push(other),
        }
    }
    if !DATATYPES[..14].contains(&datatype) {
        return Err(BAD_DATA);
    }
    let mut leaves = Vec::new();
    flat(data, &mut leaves);
    let mut out = Vec::new();
    for leaf in leaves {
        let float = |x: f64, out: &mut Vec<u8>| match datatype {
            "FP32" => out.extend((x as f32).to_le_bytes()),
            "FP64" => out.extend(x.to_le_bytes()),
            "FP16" => out.extend(half::f16::from_f64(x).to_le_bytes()),
            _ => out.extend(half::bf16::from_f64(x).to_le_bytes()),
        };
        let is_float = matches!(datatype, "FP16" | "BF16" | "FP32" | "FP64");
        match leaf {
            Json::Bool(b) if datatype == "BOOL" => out.push(u8::from(*b)),
            Json::String(s) if datatype == "BYTES" => {
                out.extend(u32::try_from(s.len()).map_err(|_| BAD_DATA)?.to_le_bytes());
                out.extend(s.as_bytes());
            }
            Json::Number(n) if n.is_i64() || n.is_u64() => {
                let v: i128 = n
                    .as_i64()
                    .map(i128::from)
                    .or(n.as_u64().map(i128::from))
                    .unwrap_or(0);
                macro_rules! put {
                    ($t:ty) => {
                        out.extend(<$t>::try_from(v).map_err(|_| BAD_DATA)?.to_le_bytes())
                    };
                }
                match datatype {
                    "INT8" => put!(i8),
                    "INT16" => put!(i16),
                    "INT32" => put!(i32),
                    "INT64" => put!(i64),
                    "UINT8" => put!(u8),
                    "UINT16" => put!(u16),
                    "UINT32" => put!(u32),
                    "UINT64" => put!(u64),
                    _ if is_float => float(v as f64, &mut out),
                    _ => return Err(BAD_DATA),
                }
            }
            Json::Number(n) if is_float => float(n.as_f64().ok_or(BAD_DATA)?, &mut out),
            _ => return Err(BAD_DATA),
        }
    }
    Ok(out)
}

/// Request, response and tensor parameters: the protocol's scalar kinds.
fn reference_parameters(members: &Members) -> HashMap<String, InferParameter> {
    members
        .iter()
        .filter_map(|(k, v)| {
            let choice = match v {
                Json::Bool(b) => ParameterChoice::BoolParam(*b),
                Json::String(s) => ParameterChoice::StringParam(s.clone()),
                Json::Number(n) => match (n.as_i64(), n.as_u64()) {
                    (Some(i), _) => ParameterChoice::Int64Param(i),
                    (None, Some(u)) => ParameterChoice::Uint64Param(u),
                    _ => ParameterChoice::DoubleParam(n.as_f64()?),
                },
                _ => return None,
            };
            Some((
                k.clone(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            ))
        })
        .collect()
}

/// An optional member that may also be `null`.
fn optional<'a>(object: &'a Members, key: &str) -> Option<&'a Json> {
    object.get(key).filter(|v| !v.is_null())
}

fn optional_string(object: &Members, key: &str) -> Result<String, &'static str> {
    match optional(object, key) {
        None => Ok(String::new()),
        Some(Json::String(s)) => Ok(s.clone()),
        Some(_) => Err(MALFORMED),
    }
}

fn optional_members(object: &Members, key: &str) -> Result<Members, &'static str> {
    match optional(object, key) {
        None => Ok(Members::new()),
        Some(Json::Object(m)) => Ok(m.clone()),
        Some(_) => Err(MALFORMED),
    }
}

/// Described tensor: name, datatype, shape, parameters (without `binary_data_size`).
type Described = (String, String, Vec<i64>, HashMap<String, InferParameter>);

/// The tensors `wanted` names, from the parsed tensor list, and their raw contents; the binary
/// part used up exactly.
fn reference_tensors(
    all: &[Json],
    mut binary: &[u8],
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<(Described, Bytes)>, &'static str> {
    // Every tensor's structure first (serde reads the whole list before any is used).
    let mut tensors = Vec::new();
    for t in all {
        let Json::Object(t) = t else {
            return Err(MALFORMED);
        };
        let Some(Json::String(name)) = t.get("name") else {
            return Err(MALFORMED);
        };
        let Some(Json::String(datatype)) = t.get("datatype") else {
            return Err(MALFORMED);
        };
        let Some(Json::Array(shape)) = t.get("shape") else {
            return Err(MALFORMED);
        };
        let shape: Vec<i64> = shape
            .iter()
            .map(Json::as_i64)
            .collect::<Option<_>>()
            .ok_or(MALFORMED)?;
        tensors.push((name, datatype, shape, t.get("parameters"), t.get("data")));
    }
    let mut out = Vec::new();
    for (name, datatype, shape, parameters, data) in tensors {
        // `binary_data_size`, read from the parameters as a struct (an object, or the list of
        // its one field's value).
        let size = match parameters {
            None | Some(Json::Null) => None,
            Some(Json::Object(p)) => optional(p, "binary_data_size"),
            Some(Json::Array(a)) if a.len() <= 1 => a.first().filter(|v| !v.is_null()),
            Some(_) => return Err(MALFORMED),
        };
        let contents = match (size, data) {
            (Some(size), None) => {
                let len = size
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or(MALFORMED)?;
                if len > binary.len() {
                    return Err(MALFORMED);
                }
                let (taken, rest) = binary.split_at(len);
                binary = rest;
                Bytes::copy_from_slice(taken)
            }
            (None, Some(_)) if !wanted(name) => Bytes::new(),
            (None, Some(data)) => Bytes::from(reference_encode(datatype, data)?),
            (Some(_), Some(_)) | (None, None) => return Err(MALFORMED),
        };
        if !wanted(name) {
            continue;
        }
        let mut members = match parameters {
            None | Some(Json::Null) => Members::new(),
            Some(Json::Object(p)) => p.clone(),
            Some(_) => return Err(MALFORMED),
        };
        members.remove("binary_data_size");
        out.push((
            (
                name.clone(),
                datatype.clone(),
                shape,
                reference_parameters(&members),
            ),
            contents,
        ));
    }
    if !binary.is_empty() {
        return Err(MALFORMED);
    }
    Ok(out)
}

/// The JSON part and the binary part of a body.
fn rest_parts(body: &[u8], header_length: Option<usize>) -> Result<(&[u8], &[u8]), &'static str> {
    match header_length {
        None => Ok((body, &[])),
        Some(n) if n <= body.len() => Ok(body.split_at(n)),
        Some(_) => Err(MALFORMED),
    }
}

/// What `rest_json::request` must read from a body, read from a parse of its whole JSON.
fn reference_request(
    body: &[u8],
    header_length: Option<usize>,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<ModelInferRequest, &'static str> {
    let (json, binary) = rest_parts(body, header_length)?;
    let Json::Object(top) = serde_json::from_slice::<Json>(json).map_err(|_| MALFORMED)? else {
        return Err(MALFORMED);
    };
    let id = optional_string(&top, "id")?;
    let parameters = optional_members(&top, "parameters")?;
    let Some(Json::Array(inputs)) = top.get("inputs") else {
        return Err(MALFORMED);
    };
    let outputs = match optional(&top, "outputs") {
        None => Vec::new(),
        Some(Json::Array(outputs)) => outputs
            .iter()
            .map(|o| {
                let Json::Object(o) = o else {
                    return Err(MALFORMED);
                };
                let Some(Json::String(name)) = o.get("name") else {
                    return Err(MALFORMED);
                };
                Ok(InferRequestedOutputTensor {
                    name: name.clone(),
                    parameters: reference_parameters(&optional_members(o, "parameters")?),
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(MALFORMED),
    };
    let tensors = reference_tensors(inputs, binary, wanted)?;
    let (inputs, raw) = tensors
        .into_iter()
        .map(|((name, datatype, shape, parameters), raw)| {
            let t = InferInputTensor {
                name,
                datatype,
                shape,
                parameters,
                contents: None,
            };
            (t, raw)
        })
        .unzip();
    Ok(ModelInferRequest {
        model_name: "m".into(),
        model_version: "1".into(),
        id,
        parameters: reference_parameters(&parameters),
        inputs,
        outputs,
        raw_input_contents: raw,
    })
}

/// What `rest_json::response` must read from a body (the request's tensors serve as outputs).
fn reference_response(
    body: &[u8],
    header_length: Option<usize>,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<featurelog_schemas::inference::ModelInferResponse, &'static str> {
    use featurelog_schemas::inference::model_infer_response::InferOutputTensor;
    let (json, binary) = rest_parts(body, header_length)?;
    let Json::Object(top) = serde_json::from_slice::<Json>(json).map_err(|_| MALFORMED)? else {
        return Err(MALFORMED);
    };
    let outputs = match optional(&top, "outputs") {
        None => Vec::new(),
        Some(Json::Array(outputs)) => outputs.clone(),
        Some(_) => return Err(MALFORMED),
    };
    let model_name = optional_string(&top, "model_name")?;
    let model_version = optional_string(&top, "model_version")?;
    let id = optional_string(&top, "id")?;
    let parameters = optional_members(&top, "parameters")?;
    let tensors = reference_tensors(&outputs, binary, wanted)?;
    let (outputs, raw) = tensors
        .into_iter()
        .map(|((name, datatype, shape, parameters), raw)| {
            let t = InferOutputTensor {
                name,
                datatype,
                shape,
                parameters,
                contents: None,
            };
            (t, raw)
        })
        .unzip();
    Ok(featurelog_schemas::inference::ModelInferResponse {
        model_name,
        model_version,
        id,
        parameters: reference_parameters(&parameters),
        outputs,
        raw_output_contents: raw,
    })
}

/// `rest_json`'s readers on `body` against the references: the same request and response, or
/// the same reason to refuse it; the id peeked for the caller is the request's; a kept header
/// reads as reading it again.
fn check_rest(
    body: &Bytes,
    header_length: Option<usize>,
    wanted: &dyn Fn(&str) -> bool,
    cache: &mut crate::rest_json::HeaderCache,
) -> Result<(), TestCaseError> {
    let got = crate::rest_json::request(body, header_length, "m", "1", wanted, None);
    let want = reference_request(body, header_length, wanted);
    let text = String::from_utf8_lossy(body);
    prop_assert_eq!(
        got.as_ref().map_err(|e| e.reason()),
        want.as_ref().map_err(|e| *e),
        "{}",
        text
    );
    let kept = crate::rest_json::request(body, header_length, "m", "1", wanted, Some(&mut *cache));
    prop_assert_eq!(&kept, &got, "a kept header reads as reading it: {}", text);
    if let Ok(r) = &got {
        let peeked = crate::rest_json::peek_id(body, header_length).unwrap_or_default();
        prop_assert_eq!(
            &peeked,
            &r.id,
            "the id given back is the record's: {}",
            text
        );
    }
    // The same text as a response: `inputs` is then an unknown member, its tensors read only
    // from `outputs` (there are none here unless `outputs` holds tensors).
    let got = crate::rest_json::response(body, header_length, wanted);
    let want = reference_response(body, header_length, wanted);
    prop_assert_eq!(
        got.as_ref().map_err(|e| e.reason()),
        want.as_ref().map_err(|e| *e),
        "{}",
        text
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(1536))]

    /// Bodies as clients write them (JSON data, binary data, both, in any order and spacing,
    /// keys escaped): read as the whole parse reads them.
    #[test]
    fn rest_bodies_read_as_a_whole_parse_reads_them(
        body in rest_body(true),
        wanted in prop::collection::hash_set(prop::sample::select(REST_NAMES.to_vec()), 0..4),
    ) {
        let bytes = body.bytes();
        let wanted = |n: &str| wanted.contains(n);
        let mut cache = crate::rest_json::HeaderCache::default();
        check_rest(&bytes, body.header_length(), &wanted, &mut cache)?;
        // Again, through the header it kept.
        check_rest(&bytes, body.header_length(), &wanted, &mut cache)?;
        // Its tensors as a response's outputs.
        let json = String::from_utf8_lossy(&body.json).replacen("\"inputs\"", "\"outputs\"", 1);
        let as_response = Bytes::from([json.as_bytes(), &body.binary].concat());
        let header_length = body.header_length().map(|_| json.len());
        if !duplicate_keys(json.as_bytes()) {
            let got = crate::rest_json::response(&as_response, header_length, &wanted);
            let want = reference_response(&as_response, header_length, &wanted);
            prop_assert_eq!(got.as_ref().map_err(|e| e.reason()), want.as_ref().map_err(|e| *e), "{}", json);
        }
    }

    /// The same changed at random. Where the whole text parses, read as above. Where it does
    /// not, a body is read only if the damage is inside the `data` of tensors the rule does
    /// not read (stepped over unparsed, as the gRPC path steps over unread tensors; the model
    /// server refuses such a call, and a failed call is never logged). Requested outputs and
    /// parameters have no `data` here (see `rest_body`): damage there would be stepped over
    /// the same way, unseen by this check.
    #[test]
    fn mutated_rest_bodies_read_as_a_whole_parse_or_not_at_all(
        body in rest_body(false),
        wanted in prop::collection::hash_set(prop::sample::select(REST_NAMES.to_vec()), 0..4),
        mutations in mutations(),
    ) {
        let mut bytes = body.bytes().to_vec();
        mutate(&mut bytes, &mutations);
        let bytes = Bytes::from(bytes);
        let header_length = body.header_length().map(|n| n.min(bytes.len()));
        let wanted = |n: &str| wanted.contains(n);
        let json = rest_parts(&bytes, header_length).map(|(json, _)| json).unwrap_or_default();
        if duplicate_keys(json) {
            // Not modelled (see `duplicate_keys`): read without a panic, that is all.
            let _ = crate::rest_json::request(&bytes, header_length, "m", "1", &wanted, None);
        } else if serde_json::from_slice::<Json>(json).is_ok() {
            check_rest(&bytes, header_length, &wanted, &mut crate::rest_json::HeaderCache::default())?;
        } else if let Ok(r) = crate::rest_json::request(&bytes, header_length, "m", "1", &wanted, None) {
            // serde_json checks that strings are UTF-8 only where it builds them, not in the
            // members it skips: such a body is read as the reference reads its text taken
            // lossily (where the bytes are in what the reader builds, it refuses the body).
            let lossy = String::from_utf8_lossy(json).into_owned();
            let binary = &bytes[json.len()..];
            let lossy_body = Bytes::from([lossy.as_bytes(), binary].concat());
            let lossy_length = header_length.map(|_| lossy.len());
            if serde_json::from_slice::<Json>(lossy.as_bytes()).is_ok() && !duplicate_keys(lossy.as_bytes()) {
                let want = reference_request(&lossy_body, lossy_length, &wanted);
                prop_assert_eq!(Ok(&r), want.as_ref(), "{}", lossy);
            } else {
                let all = crate::rest_json::request(&bytes, header_length, "m", "1", &|_| true, None);
                prop_assert!(
                    all.is_err(),
                    "read a body that is not JSON, and not only for the tensors it skips: {:?}\n{:?}",
                    String::from_utf8_lossy(&bytes),
                    r
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the properties found, kept as the exact inputs.

/// Bytes after the compressed stream of an HTTP body (a second gzip member, or anything after
/// a zlib stream) were ignored, the first member read as the body; servers differ on them, so
/// the body is refused as a gRPC message with a second member is.
#[test]
fn an_http_body_with_bytes_after_its_compressed_stream_is_refused() {
    let body = br#"{"inputs":[]}"#;
    let read = |bytes: Vec<u8>, encoding| {
        inflate_http(
            vec![Bytes::from(bytes)],
            Some(encoding),
            1 << 20,
            &mut BytesMut::new(),
        )
    };
    assert_eq!(read(gzip(body, 6), "gzip").ok().as_deref(), Some(&body[..]));
    assert_eq!(
        read(zlib(body, 6), "deflate").ok().as_deref(),
        Some(&body[..])
    );
    let two_members = [gzip(body, 6), gzip(b"", 6)].concat();
    assert!(matches!(read(two_members, "gzip"), Err(Unframe::Malformed)));
    let after_zlib = [zlib(body, 6), b"x".to_vec()].concat();
    assert!(matches!(
        read(after_zlib, "deflate"),
        Err(Unframe::Malformed)
    ));
    // Too large is still said first.
    let two_members = [gzip(body, 6), gzip(b"", 6)].concat();
    let small = inflate_http(
        vec![Bytes::from(two_members)],
        Some("gzip"),
        4,
        &mut BytesMut::new(),
    );
    assert!(matches!(small, Err(Unframe::TooLarge)));
}

/// A first chunk that ends right after the model's name, its version in the next chunk: the
/// version was read as none (so a call of a versioned rule was skipped as not allow-listed,
/// or its response dropped for another rule's). And bytes past the message are not its own.
#[test]
fn the_model_read_early_waits_for_a_version_in_the_next_chunk() {
    let message = ModelInferRequest {
        model_name: "m".into(),
        model_version: "2".into(),
        id: "x".into(),
        ..ModelInferRequest::default()
    }
    .encode_to_vec();
    let body = framed(0, &message);
    let (a, b) = body.split_at(5 + 3);
    let split = [Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)];
    assert_eq!(request_model(&split), None);
    assert_eq!(
        request_model(&[Bytes::from(body.clone())]),
        Some(("m", "2"))
    );
    let (a, b) = body.split_at(5 + 7);
    let past = [Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)];
    assert_eq!(request_model(&past), Some(("m", "2")));
    // A message of the name alone, followed in its chunk by bytes that are not its own.
    let mut short = framed(0, &message[..3]);
    short.extend_from_slice(&message[3..]);
    assert_eq!(request_model(&[Bytes::from(short)]), Some(("m", "")));
}

/// An `id` followed by a field 3 of another wire type: prost (and the proxy, which gives the
/// caller the id) refuse the message, but the publisher's scan read the id `a`: a record
/// logged under another id than the caller was given.
#[test]
fn a_head_field_of_another_wire_type_is_refused_as_prost_refuses_it() {
    for message in [
        &[0x1a, 1, b'a', 0x18, 5][..],
        &[0x0a, 1, b'm', 0x0d, 1, 2, 3, 4],
        &[0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1a, 1, b'a'],
    ] {
        assert_eq!(head_of(message), None, "{message:?}");
        let scanned = crate::lazy::scan(Bytes::copy_from_slice(message));
        assert!(matches!(scanned, Err(LazyError::Malformed)), "{message:?}");
        let id = crate::proxy::captured_request_id(
            &captured(vec![Bytes::from(framed(0, message))]),
            None,
            1 << 20,
        );
        assert_eq!(id, None);
    }
}

/// A logged tensor whose parameters prost cannot read (a map entry cut short, or the map
/// field as a varint): the general path refuses the call, the fast path logged it.
#[test]
fn the_fast_path_refuses_a_tensor_the_general_path_refuses() {
    let tensor = InferInputTensor {
        name: "price".into(),
        datatype: "FP32".into(),
        shape: vec![2],
        ..InferInputTensor::default()
    }
    .encode_to_vec();
    let rule = ModelRule {
        name: "ranker".into(),
        version: None,
        features: vec!["price".into()],
        outputs: vec![],
        candidate_ids_input: None,
        candidate_ids_parameter: None,
        parameters: vec![],
        headers: vec![],
        sample_rate: 1.0,
        top_k: None,
    };
    let cut_entry = put(4, WireType::LengthDelimited, &[0x0a, 5, b'x']);
    let as_varint = put(4, WireType::Varint, &[1]);
    let good_entry = put(4, WireType::LengthDelimited, &[0x0a, 1, b'x']);
    for (parameters, valid) in [(cut_entry, false), (as_varint, false), (good_entry, true)] {
        let mut request = put(1, WireType::LengthDelimited, b"ranker");
        request.extend(put(
            5,
            WireType::LengthDelimited,
            &[&tensor[..], &parameters].concat(),
        ));
        request.extend(put(7, WireType::LengthDelimited, &[0; 8]));
        assert_eq!(ModelInferRequest::decode(&request[..]).is_ok(), valid);
        let scanned = crate::lazy::scan(Bytes::from(request.clone())).unwrap();
        let fast = crate::direct::encode(&rule, &scanned, ctx());
        assert_eq!(fast.is_some(), valid, "{request:?}");
        let general = crate::lazy::decode_for_rule(Bytes::from(request), &rule);
        assert_eq!(general.is_ok(), valid);
    }
}

/// A tensor's `data` that is no JSON value (`1x`, nothing, `:1`) was cut out of the body,
/// which then read as JSON where it is not, and `1x` as the number 1.
#[test]
fn data_that_is_no_json_value_is_refused() {
    let all = |_: &str| true;
    let none = |_: &str| false;
    for data in ["1x", "", ":1", "tru", "nul", "1.", "-"] {
        let body =
            format!(r#"{{"inputs":[{{"name":"a","shape":[1],"datatype":"FP32","data":{data}}}]}}"#);
        assert!(serde_json::from_str::<Json>(&body).is_err());
        for wanted in [&all as &dyn Fn(&str) -> bool, &none] {
            let read =
                crate::rest_json::request(&Bytes::from(body.clone()), None, "m", "", wanted, None);
            assert_eq!(read.map_err(|e| e.reason()), Err(MALFORMED), "{body}");
        }
        let with_id = format!(r#"{{"id":{data},"inputs":[]}}"#);
        assert_eq!(crate::rest_json::peek_id(&Bytes::from(with_id), None), None);
    }
    for data in ["1", "-0.5e3", "true", "null", "[1]"] {
        let body =
            format!(r#"{{"inputs":[{{"name":"a","shape":[1],"datatype":"FP32","data":{data}}}]}}"#);
        let read =
            crate::rest_json::request(&Bytes::from(body.clone()), None, "m", "", &none, None);
        assert!(read.is_ok(), "{body}: {read:?}");
    }
}
