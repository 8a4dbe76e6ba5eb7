//! The fast path's wire work: an input tensor's header and contents read in place from the
//! request, and the record's fields (keys, lengths, packed values) written straight into the
//! output buffer.

use bytes::{Buf, BufMut};
use featurelog_schemas::featurelog::v1::DataType;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, encode_varint};

/// An input tensor's header, borrowed from the request.
pub(super) struct Head<'a> {
    pub(super) name: &'a [u8],
    pub(super) datatype: &'a [u8],
    pub(super) shape: Vec<i64>,
}

/// Reads name, datatype and shape of an encoded `InferInputTensor`; `None` if it carries typed
/// contents or anything unexpected.
pub(super) fn head(mut buf: &[u8]) -> Option<Head<'_>> {
    let whole = buf;
    let mut parameters = false;
    let mut head = Head {
        name: &[],
        datatype: &[],
        shape: Vec::new(),
    };
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        match (tag, wire_type) {
            (1, WireType::LengthDelimited) => head.name = slice(&mut buf)?,
            (2, WireType::LengthDelimited) => head.datatype = slice(&mut buf)?,
            // A repeated field may come in several runs, packed or not, in any mix: they
            // concatenate, as in prost's decode (and the model server's).
            (3, WireType::LengthDelimited) => {
                let mut packed = slice(&mut buf)?;
                while packed.has_remaining() {
                    head.shape.push(decode_varint(&mut packed).ok()? as i64);
                }
            }
            (3, WireType::Varint) => head.shape.push(decode_varint(&mut buf).ok()? as i64),
            // Parameters of a tensor are not logged.
            (4, _) => {
                prost::encoding::skip_field(wire_type, tag, &mut buf, DecodeContext::default())
                    .ok()?;
                parameters = true;
            }
            _ => return None,
        }
    }
    // But the general path decodes them, and refuses a tensor whose parameters prost cannot
    // read: so must this, which is to log only what the general path logs. Read when planning
    // only (the plan is kept for these very header bytes), for the tensors a rule logs.
    if parameters {
        use featurelog_schemas::inference::model_infer_request::InferInputTensor;
        <InferInputTensor as prost::Message>::decode(whole).ok()?;
    }
    Some(head)
}

/// The `name` of an encoded tensor (the last occurrence, as a full decode keeps).
pub(super) fn name(mut buf: &[u8]) -> Option<&[u8]> {
    let mut name: &[u8] = &[];
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        if (tag, wire_type) == (1, WireType::LengthDelimited) {
            name = slice(&mut buf)?;
        } else {
            prost::encoding::skip_field(wire_type, tag, &mut buf, DecodeContext::default()).ok()?;
        }
    }
    Some(name)
}

fn slice<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(decode_varint(buf).ok()?).ok()?;
    if len > buf.len() {
        return None;
    }
    let (field, rest) = buf.split_at(len);
    *buf = rest;
    Some(field)
}

/// How a datatype's raw little-endian elements become the record's values.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// Copied as they are into a packed fixed-width field.
    Fixed { field: u32, size: usize },
    /// Zigzag varints (`sint32`/`sint64`) from `size`-byte signed integers.
    Signed { field: u32, size: usize },
}

pub(super) fn kind(datatype: &[u8]) -> Option<(DataType, Kind)> {
    Some(match datatype {
        b"FP32" => (DataType::Fp32, Kind::Fixed { field: 6, size: 4 }),
        b"FP64" => (DataType::Fp64, Kind::Fixed { field: 7, size: 8 }),
        b"INT32" => (DataType::Int32, Kind::Signed { field: 2, size: 4 }),
        b"INT64" => (DataType::Int64, Kind::Signed { field: 3, size: 8 }),
        _ => return None,
    })
}

pub(super) fn signed(raw: &[u8], size: usize) -> impl Iterator<Item = i64> + '_ {
    raw.chunks_exact(size).map(move |c| {
        if size == 4 {
            i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        } else {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            i64::from_le_bytes(b)
        }
    })
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn varint_len(v: u64) -> usize {
    prost::encoding::encoded_len_varint(v)
}

pub(super) fn key(buf: &mut Vec<u8>, field: u32, wire_type: WireType) {
    prost::encoding::encode_key(field, wire_type, buf);
}

pub(super) fn bytes_field(buf: &mut Vec<u8>, field: u32, value: &[u8]) {
    if !value.is_empty() {
        key(buf, field, WireType::LengthDelimited);
        encode_varint(value.len() as u64, buf);
        buf.put_slice(value);
    }
}

pub(super) fn bytes_field_len(field: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        prost::encoding::key_len(field) + varint_len(len as u64) + len
    }
}

/// One logged feature, ready to encode, with its lengths worked out once (protobuf prefixes
/// each message with its length, and the record's capacity is their sum).
pub(super) struct Column<'a> {
    pub(super) name: &'a [u8],
    pub(super) datatype: DataType,
    pub(super) kind: Kind,
    pub(super) row_shape: &'a [i64],
    pub(super) per_request: bool,
    pub(super) raw: &'a [u8],
    /// Bytes of the packed values, of the `Values` message, of the packed row shape, and of
    /// the whole `Feature` message.
    pub(super) packed: usize,
    pub(super) values: usize,
    pub(super) shape: usize,
    pub(super) len: usize,
}

impl<'a> Column<'a> {
    pub(super) fn new(
        name: &'a [u8],
        (datatype, kind): (DataType, Kind),
        row_shape: &'a [i64],
        per_request: bool,
        raw: &'a [u8],
    ) -> Self {
        let (field, packed) = match kind {
            Kind::Fixed { field, .. } => (field, raw.len()),
            Kind::Signed { field, size } => (
                field,
                signed(raw, size).map(|v| varint_len(zigzag(v))).sum(),
            ),
        };
        let values = bytes_field_len(field, packed);
        let shape = row_shape.iter().map(|&d| varint_len(d as u64)).sum();
        let len = bytes_field_len(1, name.len())
            + 1
            + varint_len(datatype as u64)
            + bytes_field_len(3, shape)
            // `values` is always present, even when empty.
            + 1
            + varint_len(values as u64)
            + values
            + if per_request { 2 } else { 0 };
        Self {
            name,
            datatype,
            kind,
            row_shape,
            per_request,
            raw,
            packed,
            values,
            shape,
            len,
        }
    }

    pub(super) fn encode(&self, buf: &mut Vec<u8>) {
        bytes_field(buf, 1, self.name);
        key(buf, 2, WireType::Varint);
        encode_varint(self.datatype as u64, buf);
        if self.shape > 0 {
            key(buf, 3, WireType::LengthDelimited);
            encode_varint(self.shape as u64, buf);
            for &d in self.row_shape {
                encode_varint(d as u64, buf);
            }
        }
        let packed = self.packed;
        key(buf, 4, WireType::LengthDelimited);
        encode_varint(self.values as u64, buf);
        if packed > 0 {
            match self.kind {
                Kind::Fixed { field, .. } => {
                    key(buf, field, WireType::LengthDelimited);
                    encode_varint(packed as u64, buf);
                    buf.put_slice(self.raw);
                }
                Kind::Signed { field, size } => {
                    key(buf, field, WireType::LengthDelimited);
                    encode_varint(packed as u64, buf);
                    for v in signed(self.raw, size) {
                        encode_varint(zigzag(v), buf);
                    }
                }
            }
        }
        if self.per_request {
            key(buf, 5, WireType::Varint);
            buf.put_u8(1);
        }
    }
}

pub(super) fn count(shape: &[i64]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}
