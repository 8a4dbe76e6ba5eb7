//! Valid encodings other than prost's, built on prost's own tokenizer: not on
//! `featurelog_schemas::wire`, the walker the decoder under test uses, so that a fault of that
//! walker cannot shape the inputs that are to find it. The field numbers are the wire module's
//! names (checked against the protos by its tests).

use featurelog_schemas::testing::interleaved;
use featurelog_schemas::wire::{feature, feature_log, values};
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

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

/// `Values` re-encoded: its repeated fields packed or not, split, in another order, with
/// unknown fields.
fn reencode_values(buf: &[u8], rng: &mut fastrand::Rng) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for f in fields(buf) {
        let elements = match (f.number, f.wire) {
            (
                values::BOOL_VALUES..=values::UINT64_VALUES | values::HALF_BITS,
                WireType::LengthDelimited,
            ) => Some((varints(&f.payload), WireType::Varint)),
            (values::FP32_VALUES, WireType::LengthDelimited) => Some((
                f.payload.chunks(4).map(<[u8]>::to_vec).collect(),
                WireType::ThirtyTwoBit,
            )),
            (values::FP64_VALUES, WireType::LengthDelimited) => Some((
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
            (feature::ROW_SHAPE, WireType::LengthDelimited) => out.extend(
                repacked(
                    feature::ROW_SHAPE,
                    &varints(&f.payload),
                    WireType::Varint,
                    rng,
                )
                .into_iter()
                .map(|e| (feature::ROW_SHAPE, e)),
            ),
            (feature::VALUES, WireType::LengthDelimited) => {
                let values = reencode_values(&f.payload, rng);
                let values: Vec<Vec<u8>> = values.into_iter().map(|(_, e)| e).collect();
                if rng.bool() || values.is_empty() {
                    // Kept in prost's order, as the sidecar writes it (its fast path's case).
                    out.push((
                        feature::VALUES,
                        put(feature::VALUES, WireType::LengthDelimited, &f.payload),
                    ));
                } else {
                    let at = rng.usize(..=values.len());
                    for part in [&values[..at], &values[at..]] {
                        out.push((
                            feature::VALUES,
                            put(feature::VALUES, WireType::LengthDelimited, &part.concat()),
                        ));
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
pub(super) fn reencode_log(buf: &[u8], seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = Vec::new();
    for f in fields(buf) {
        match (f.number, f.wire) {
            (feature_log::CANDIDATE_INT_IDS, WireType::LengthDelimited) => out.extend(
                repacked(
                    feature_log::CANDIDATE_INT_IDS,
                    &varints(&f.payload),
                    WireType::Varint,
                    &mut rng,
                )
                .into_iter()
                .map(|e| (feature_log::CANDIDATE_INT_IDS, e)),
            ),
            (feature_log::FEATURES | feature_log::OUTPUTS, WireType::LengthDelimited) => {
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
