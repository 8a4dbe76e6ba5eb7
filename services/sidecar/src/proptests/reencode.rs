//! ModelInferRequest: valid encodings other than prost's, built on prost's own tokenizer.

use featurelog_schemas::testing::interleaved;

use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

/// One field of a message as prost reads it: its number, wire type, where its key ends and its
/// payload (the bytes after the key; a length-delimited field's without its length).
#[derive(Debug)]
pub(super) struct Field {
    pub(super) number: u32,
    pub(super) wire: WireType,
    pub(super) key_len: usize,
    pub(super) start: usize,
    payload: Vec<u8>,
}

/// The top-level fields of a message, in order; `None` if prost cannot step over them.
pub(super) fn fields(buf: &[u8]) -> Option<Vec<Field>> {
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
pub(super) fn put(number: u32, wire: WireType, payload: &[u8]) -> Vec<u8> {
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
pub(super) fn reencode_request(buf: &[u8], seed: u64) -> Vec<u8> {
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
