//! The fast path's wire work: an input tensor's header and contents read in place from the
//! request, and the record's fields (keys, lengths, packed values) written straight into the
//! output buffer.

use bytes::BufMut;
use featurelog_schemas::featurelog::v1::DataType;
use featurelog_schemas::wire::{self, WireType, feature, infer_input_tensor, values};
use prost::encoding::encode_varint;

use crate::extract::fields::{NotField, fields};

/// An input tensor's header, borrowed from the request.
pub(super) struct Head<'a> {
    pub(super) name: &'a [u8],
    pub(super) datatype: &'a [u8],
    pub(super) shape: Vec<i64>,
}

/// Reads name, datatype and shape of an encoded `InferInputTensor`; `None` if it carries typed
/// contents or anything unexpected.
pub(super) fn head(buf: &[u8]) -> Option<Head<'_>> {
    let mut parameters = false;
    let mut head = Head {
        name: &[],
        datatype: &[],
        shape: Vec::new(),
    };
    for f in fields(buf) {
        let f = match f {
            Ok(f) => f,
            // Parameters as a group are stepped over, as prost steps over them (and then
            // refused below, as the general path refuses them).
            Err(NotField::Group(infer_input_tensor::PARAMETERS)) => {
                parameters = true;
                continue;
            }
            Err(_) => return None,
        };
        match (f.number, f.wire) {
            (infer_input_tensor::NAME, WireType::LengthDelimited) => head.name = f.bytes(buf),
            (infer_input_tensor::DATATYPE, WireType::LengthDelimited) => {
                head.datatype = f.bytes(buf);
            }
            // A repeated field may come in several runs, packed or not, in any mix: they
            // concatenate, as in prost's decode (and the model server's).
            (infer_input_tensor::SHAPE, WireType::LengthDelimited) => {
                for dim in wire::packed_varints(f.bytes(buf)) {
                    head.shape.push(dim.ok()? as i64);
                }
            }
            (infer_input_tensor::SHAPE, WireType::Varint) => head.shape.push(f.value as i64),
            // Parameters of a tensor are not logged.
            (infer_input_tensor::PARAMETERS, _) => parameters = true,
            _ => return None,
        }
    }
    // But the general path decodes them, and refuses a tensor whose parameters prost cannot
    // read: so must this, which is to log only what the general path logs. Read when planning
    // only (the plan is kept for these very header bytes), for the tensors a rule logs.
    if parameters {
        use featurelog_schemas::inference::model_infer_request::InferInputTensor;
        <InferInputTensor as prost::Message>::decode(buf).ok()?;
    }
    Some(head)
}

/// The `name` of an encoded tensor (the last occurrence, as a full decode keeps).
pub(super) fn name(buf: &[u8]) -> Option<&[u8]> {
    let mut name: &[u8] = &[];
    for f in fields(buf) {
        match f {
            Ok(f)
                if (f.number, f.wire) == (infer_input_tensor::NAME, WireType::LengthDelimited) =>
            {
                name = f.bytes(buf);
            }
            Ok(_) | Err(NotField::Group(_)) => {}
            Err(NotField::Malformed) => return None,
        }
    }
    Some(name)
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
        b"FP32" => (
            DataType::Fp32,
            Kind::Fixed {
                field: values::FP32_VALUES,
                size: 4,
            },
        ),
        b"FP64" => (
            DataType::Fp64,
            Kind::Fixed {
                field: values::FP64_VALUES,
                size: 8,
            },
        ),
        b"INT32" => (
            DataType::Int32,
            Kind::Signed {
                field: values::INT32_VALUES,
                size: 4,
            },
        ),
        b"INT64" => (
            DataType::Int64,
            Kind::Signed {
                field: values::INT64_VALUES,
                size: 8,
            },
        ),
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
    prost::encoding::encode_key(field, wire_type.into(), buf);
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
        let len = bytes_field_len(feature::NAME, name.len())
            + 1
            + varint_len(datatype as u64)
            + bytes_field_len(feature::ROW_SHAPE, shape)
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
        bytes_field(buf, feature::NAME, self.name);
        key(buf, feature::DATATYPE, WireType::Varint);
        encode_varint(self.datatype as u64, buf);
        if self.shape > 0 {
            key(buf, feature::ROW_SHAPE, WireType::LengthDelimited);
            encode_varint(self.shape as u64, buf);
            for &d in self.row_shape {
                encode_varint(d as u64, buf);
            }
        }
        let packed = self.packed;
        key(buf, feature::VALUES, WireType::LengthDelimited);
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
            key(buf, feature::PER_REQUEST, WireType::Varint);
            buf.put_u8(1);
        }
    }
}

pub(super) fn count(shape: &[i64]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}
