//! Decoding and encoding the data of Open Inference Protocol tensors, typed (`contents`) or raw
//! (`raw_input_contents`), into one typed representation, [`TensorValues`].
//!
//! Everything here handles untrusted input: a shape that does not match the data, an unknown
//! datatype or malformed BYTES is an error naming the tensor, never a panic, and a shape that
//! claims more elements than the data holds is refused before anything is allocated.

use bytes::{Buf, Bytes};

use crate::featurelog::v1::{DataType, Values};
use crate::inference::InferTensorContents;

/// Why a tensor could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    /// The datatype is not one of the protocol's.
    #[error("tensor {tensor:?}: unknown datatype {datatype:?}")]
    UnknownDatatype {
        /// The tensor.
        tensor: String,
        /// Its datatype string.
        datatype: String,
    },
    /// A dimension is negative, or their product overflows.
    #[error("tensor {tensor:?}: invalid shape {shape:?}")]
    InvalidShape {
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<i64>,
    },
    /// The data holds another number of elements than the shape says.
    #[error(
        "tensor {tensor:?}: shape {shape:?} needs {expected} elements, the data holds {actual}"
    )]
    ShapeMismatch {
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<i64>,
        /// Elements the shape needs.
        expected: usize,
        /// Elements (or, for raw fixed-size data, bytes / element size) present.
        actual: usize,
    },
    /// Raw data whose length is not a multiple of the element size.
    #[error("tensor {tensor:?}: {len} raw bytes is not a whole number of {datatype} elements")]
    RawLength {
        /// The tensor.
        tensor: String,
        /// Its datatype name.
        datatype: &'static str,
        /// The raw length.
        len: usize,
    },
    /// Raw BYTES whose length prefixes run past the end of the data.
    #[error("tensor {tensor:?}: malformed raw BYTES at byte {offset}")]
    BadBytes {
        /// The tensor.
        tensor: String,
        /// Where the bad element starts.
        offset: usize,
    },
    /// Data in a `contents` field that does not belong to the tensor's datatype.
    #[error("tensor {tensor:?}: {datatype} data must be in {expected}")]
    WrongContentsField {
        /// The tensor.
        tensor: String,
        /// Its datatype name.
        datatype: &'static str,
        /// The field it must use.
        expected: &'static str,
    },
    /// A typed `int_contents`/`uint_contents` element (32 bits in the protocol) that does not
    /// fit the tensor's narrower datatype: a model server would read only its low bits, so the
    /// value it used is not the one sent, and guessing it would log a value nobody checked.
    #[error("tensor {tensor:?}: {value} is out of range for {datatype}")]
    ValueOutOfRange {
        /// The tensor.
        tensor: String,
        /// Its datatype name.
        datatype: &'static str,
        /// The first element out of range.
        value: i64,
    },
    /// The request has raw contents for some inputs but not for this one.
    #[error("request has {raw} raw_input_contents for {inputs} inputs")]
    RawCountMismatch {
        /// Number of inputs.
        inputs: usize,
        /// Number of raw contents.
        raw: usize,
    },
}

/// A tensor's elements, in row-major order, in the type the model received them as.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorValues {
    /// BOOL.
    Bool(Vec<bool>),
    /// INT8, INT16, INT32 (widened).
    Int32(Vec<i32>),
    /// INT64.
    Int64(Vec<i64>),
    /// UINT8, UINT16, UINT32 (widened).
    Uint32(Vec<u32>),
    /// UINT64.
    Uint64(Vec<u64>),
    /// FP16 and BF16, as bit patterns.
    Half(Vec<u16>),
    /// FP32.
    Fp32(Vec<f32>),
    /// FP64.
    Fp64(Vec<f64>),
    /// BYTES.
    Bytes(Vec<Bytes>),
}

/// A decoded tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Its name.
    pub name: String,
    /// Its datatype.
    pub datatype: DataType,
    /// Its shape.
    pub shape: Vec<i64>,
    /// Its elements.
    pub values: TensorValues,
}

impl TensorValues {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorValues::Bool(v) => v.len(),
            TensorValues::Int32(v) => v.len(),
            TensorValues::Int64(v) => v.len(),
            TensorValues::Uint32(v) => v.len(),
            TensorValues::Uint64(v) => v.len(),
            TensorValues::Half(v) => v.len(),
            TensorValues::Fp32(v) => v.len(),
            TensorValues::Fp64(v) => v.len(),
            TensorValues::Bytes(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements of the given rows, each `per_row` elements long, in the order given.
    /// Rows out of range are skipped (callers pass rows they derived from the same shape).
    pub fn select_rows(&self, rows: &[usize], per_row: usize) -> TensorValues {
        fn pick<T: Clone>(v: &[T], rows: &[usize], per_row: usize) -> Vec<T> {
            let mut out = Vec::with_capacity(rows.len() * per_row);
            for &row in rows {
                if let Some(slice) = v.get(row * per_row..(row + 1) * per_row) {
                    out.extend_from_slice(slice);
                }
            }
            out
        }
        match self {
            TensorValues::Bool(v) => TensorValues::Bool(pick(v, rows, per_row)),
            TensorValues::Int32(v) => TensorValues::Int32(pick(v, rows, per_row)),
            TensorValues::Int64(v) => TensorValues::Int64(pick(v, rows, per_row)),
            TensorValues::Uint32(v) => TensorValues::Uint32(pick(v, rows, per_row)),
            TensorValues::Uint64(v) => TensorValues::Uint64(pick(v, rows, per_row)),
            TensorValues::Half(v) => TensorValues::Half(pick(v, rows, per_row)),
            TensorValues::Fp32(v) => TensorValues::Fp32(pick(v, rows, per_row)),
            TensorValues::Fp64(v) => TensorValues::Fp64(pick(v, rows, per_row)),
            TensorValues::Bytes(v) => TensorValues::Bytes(pick(v, rows, per_row)),
        }
    }

    /// Each element as f64, where that is meaningful (numbers, booleans as 0/1); `None` for
    /// BYTES. Used to rank candidates by a score.
    pub fn to_f64(&self) -> Option<Vec<f64>> {
        Some(match self {
            TensorValues::Bool(v) => v.iter().map(|&b| f64::from(u8::from(b))).collect(),
            TensorValues::Int32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            TensorValues::Int64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorValues::Uint32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            TensorValues::Uint64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorValues::Half(_) | TensorValues::Bytes(_) => return None,
            TensorValues::Fp32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            TensorValues::Fp64(v) => v.clone(),
        })
    }

    /// Each element rendered as an id: integers in decimal, BYTES as UTF-8 (lossy).
    pub fn to_ids(&self) -> Option<Vec<String>> {
        Some(match self {
            TensorValues::Int32(v) => v.iter().map(ToString::to_string).collect(),
            TensorValues::Int64(v) => v.iter().map(ToString::to_string).collect(),
            TensorValues::Uint32(v) => v.iter().map(ToString::to_string).collect(),
            TensorValues::Uint64(v) => v.iter().map(ToString::to_string).collect(),
            TensorValues::Bytes(v) => v
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect(),
            _ => return None,
        })
    }

    /// Into the columnar form of a FeatureLog.
    pub fn into_values(self) -> Values {
        let mut out = Values::default();
        match self {
            TensorValues::Bool(v) => out.bool_values = v,
            TensorValues::Int32(v) => out.int32_values = v,
            TensorValues::Int64(v) => out.int64_values = v,
            TensorValues::Uint32(v) => out.uint32_values = v,
            TensorValues::Uint64(v) => out.uint64_values = v,
            TensorValues::Half(v) => out.half_bits = v.into_iter().map(u32::from).collect(),
            TensorValues::Fp32(v) => out.fp32_values = v,
            TensorValues::Fp64(v) => out.fp64_values = v,
            TensorValues::Bytes(v) => out.bytes_values = v,
        }
        out
    }

    /// Raw little-endian contents, as `raw_input_contents` / `raw_output_contents` carry them.
    pub fn to_raw(&self) -> Bytes {
        let mut out = Vec::new();
        match self {
            TensorValues::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
            TensorValues::Int32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            TensorValues::Int64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            TensorValues::Uint32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            TensorValues::Uint64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            TensorValues::Half(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            TensorValues::Fp32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            TensorValues::Fp64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            TensorValues::Bytes(v) => v.iter().for_each(|b| {
                out.extend((b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }),
        }
        Bytes::from(out)
    }

    /// Raw contents of a tensor of `datatype` whose narrow integers were widened here.
    pub fn to_raw_as(&self, datatype: DataType) -> Bytes {
        match (self, datatype) {
            (TensorValues::Int32(v), DataType::Int8) => v.iter().map(|&x| x as i8 as u8).collect(),
            (TensorValues::Int32(v), DataType::Int16) => {
                v.iter().flat_map(|&x| (x as i16).to_le_bytes()).collect()
            }
            (TensorValues::Uint32(v), DataType::Uint8) => v.iter().map(|&x| x as u8).collect(),
            (TensorValues::Uint32(v), DataType::Uint16) => {
                v.iter().flat_map(|&x| (x as u16).to_le_bytes()).collect()
            }
            _ => self.to_raw(),
        }
    }

    /// Typed `contents`. FP16 and BF16 have no typed field in the protocol; callers send them raw.
    pub fn to_contents(&self) -> InferTensorContents {
        let mut out = InferTensorContents::default();
        match self {
            TensorValues::Bool(v) => out.bool_contents = v.clone(),
            TensorValues::Int32(v) => out.int_contents = v.clone(),
            TensorValues::Int64(v) => out.int64_contents = v.clone(),
            TensorValues::Uint32(v) => out.uint_contents = v.clone(),
            TensorValues::Uint64(v) => out.uint64_contents = v.clone(),
            TensorValues::Half(v) => out.uint_contents = v.iter().map(|&x| u32::from(x)).collect(),
            TensorValues::Fp32(v) => out.fp32_contents = v.clone(),
            TensorValues::Fp64(v) => out.fp64_contents = v.clone(),
            TensorValues::Bytes(v) => out.bytes_contents = v.clone(),
        }
        out
    }
}

/// The number of elements a shape holds, refusing negative dimensions and overflow.
pub fn element_count(tensor: &str, shape: &[i64]) -> Result<usize, TensorError> {
    let invalid = || TensorError::InvalidShape {
        tensor: tensor.to_owned(),
        shape: shape.to_vec(),
    };
    shape.iter().try_fold(1usize, |acc, &d| {
        let d = usize::try_from(d).map_err(|_| invalid())?;
        acc.checked_mul(d).ok_or_else(invalid)
    })
}

/// Decodes a tensor from its datatype, shape and either typed `contents` or `raw` bytes.
pub fn decode(
    name: &str,
    datatype: &str,
    shape: &[i64],
    contents: Option<&InferTensorContents>,
    raw: Option<&Bytes>,
) -> Result<Tensor, TensorError> {
    let dt = DataType::from_protocol_name(datatype).map_err(|_| TensorError::UnknownDatatype {
        tensor: name.to_owned(),
        datatype: datatype.to_owned(),
    })?;
    let expected = element_count(name, shape)?;
    let values = match raw {
        Some(raw) => decode_raw(name, dt, raw, expected)?,
        None => decode_typed(name, dt, contents, expected)?,
    };
    if values.len() != expected {
        return Err(TensorError::ShapeMismatch {
            tensor: name.to_owned(),
            shape: shape.to_vec(),
            expected,
            actual: values.len(),
        });
    }
    Ok(Tensor {
        name: name.to_owned(),
        datatype: dt,
        shape: shape.to_vec(),
        values,
    })
}

fn decode_raw(
    name: &str,
    dt: DataType,
    raw: &Bytes,
    expected: usize,
) -> Result<TensorValues, TensorError> {
    let dt_name = dt.protocol_name().unwrap_or("UNSPECIFIED");
    let Some(size) = dt.raw_element_size() else {
        return decode_raw_bytes(name, raw, expected);
    };
    if !raw.len().is_multiple_of(size) {
        return Err(TensorError::RawLength {
            tensor: name.to_owned(),
            datatype: dt_name,
            len: raw.len(),
        });
    }
    let n = raw.len() / size;
    if n != expected {
        // Checked before allocating, so a lying shape cannot make us allocate.
        return Err(TensorError::ShapeMismatch {
            tensor: name.to_owned(),
            shape: Vec::new(),
            expected,
            actual: n,
        });
    }
    let mut b = raw.clone();
    Ok(match dt {
        DataType::Bool => TensorValues::Bool(raw.iter().map(|&x| x != 0).collect()),
        DataType::Int8 => TensorValues::Int32(raw.iter().map(|&x| i32::from(x as i8)).collect()),
        DataType::Int16 => TensorValues::Int32((0..n).map(|_| i32::from(b.get_i16_le())).collect()),
        DataType::Int32 => TensorValues::Int32((0..n).map(|_| b.get_i32_le()).collect()),
        DataType::Int64 => TensorValues::Int64((0..n).map(|_| b.get_i64_le()).collect()),
        DataType::Uint8 => TensorValues::Uint32(raw.iter().map(|&x| u32::from(x)).collect()),
        DataType::Uint16 => {
            TensorValues::Uint32((0..n).map(|_| u32::from(b.get_u16_le())).collect())
        }
        DataType::Uint32 => TensorValues::Uint32((0..n).map(|_| b.get_u32_le()).collect()),
        DataType::Uint64 => TensorValues::Uint64((0..n).map(|_| b.get_u64_le()).collect()),
        DataType::Fp16 | DataType::Bf16 => {
            TensorValues::Half((0..n).map(|_| b.get_u16_le()).collect())
        }
        // from_bits keeps NaN payloads: the bits the model received are the bits we log.
        DataType::Fp32 => {
            TensorValues::Fp32((0..n).map(|_| f32::from_bits(b.get_u32_le())).collect())
        }
        DataType::Fp64 => {
            TensorValues::Fp64((0..n).map(|_| f64::from_bits(b.get_u64_le())).collect())
        }
        DataType::Bytes | DataType::Unspecified => {
            return Err(TensorError::UnknownDatatype {
                tensor: name.to_owned(),
                datatype: dt_name.to_owned(),
            });
        }
    })
}

fn decode_raw_bytes(name: &str, raw: &Bytes, expected: usize) -> Result<TensorValues, TensorError> {
    // Every element costs at least its 4-byte prefix: bound the allocation by the data.
    let mut out = Vec::with_capacity(expected.min(raw.len() / 4));
    let mut offset = 0usize;
    while offset < raw.len() {
        let bad = || TensorError::BadBytes {
            tensor: name.to_owned(),
            offset,
        };
        let prefix = raw.get(offset..offset + 4).ok_or_else(bad)?;
        let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        let start = offset + 4;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= raw.len())
            .ok_or_else(bad)?;
        out.push(raw.slice(start..end));
        offset = end;
    }
    Ok(TensorValues::Bytes(out))
}

fn decode_typed(
    name: &str,
    dt: DataType,
    contents: Option<&InferTensorContents>,
    expected: usize,
) -> Result<TensorValues, TensorError> {
    let empty = InferTensorContents::default();
    let c = contents.unwrap_or(&empty);
    let dt_name = dt.protocol_name().unwrap_or("UNSPECIFIED");
    let wrong = |field: &'static str| TensorError::WrongContentsField {
        tensor: name.to_owned(),
        datatype: dt_name,
        expected: field,
    };
    // Data in a field that is not the datatype's is a malformed request, not an empty tensor.
    let populated = [
        ("bool_contents", !c.bool_contents.is_empty()),
        ("int_contents", !c.int_contents.is_empty()),
        ("int64_contents", !c.int64_contents.is_empty()),
        ("uint_contents", !c.uint_contents.is_empty()),
        ("uint64_contents", !c.uint64_contents.is_empty()),
        ("fp32_contents", !c.fp32_contents.is_empty()),
        ("fp64_contents", !c.fp64_contents.is_empty()),
        ("bytes_contents", !c.bytes_contents.is_empty()),
    ];
    let field = match dt {
        DataType::Bool => "bool_contents",
        DataType::Int8 | DataType::Int16 | DataType::Int32 => "int_contents",
        DataType::Int64 => "int64_contents",
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => "uint_contents",
        DataType::Uint64 => "uint64_contents",
        DataType::Fp32 => "fp32_contents",
        DataType::Fp64 => "fp64_contents",
        DataType::Bytes => "bytes_contents",
        // The protocol has no typed field for half floats: they must come raw.
        DataType::Fp16 | DataType::Bf16 | DataType::Unspecified => {
            if expected == 0 {
                return Ok(TensorValues::Half(Vec::new()));
            }
            return Err(wrong("raw_input_contents"));
        }
    };
    if populated.iter().any(|&(f, set)| set && f != field) {
        return Err(wrong(field));
    }
    // INT8/INT16/UINT8/UINT16 travel in 32-bit fields; a value outside the datatype's range is
    // not what the model read (servers keep the low bits), so it is refused, not logged.
    let range = match dt {
        DataType::Int8 => Some((i64::from(i8::MIN), i64::from(i8::MAX))),
        DataType::Int16 => Some((i64::from(i16::MIN), i64::from(i16::MAX))),
        DataType::Uint8 => Some((0, i64::from(u8::MAX))),
        DataType::Uint16 => Some((0, i64::from(u16::MAX))),
        _ => None,
    };
    if let Some((min, max)) = range {
        let mut values = c
            .int_contents
            .iter()
            .map(|&v| i64::from(v))
            .chain(c.uint_contents.iter().map(|&v| i64::from(v)));
        if let Some(value) = values.find(|v| !(min..=max).contains(v)) {
            return Err(TensorError::ValueOutOfRange {
                tensor: name.to_owned(),
                datatype: dt_name,
                value,
            });
        }
    }
    Ok(match dt {
        DataType::Bool => TensorValues::Bool(c.bool_contents.clone()),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => {
            TensorValues::Int32(c.int_contents.clone())
        }
        DataType::Int64 => TensorValues::Int64(c.int64_contents.clone()),
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => {
            TensorValues::Uint32(c.uint_contents.clone())
        }
        DataType::Uint64 => TensorValues::Uint64(c.uint64_contents.clone()),
        DataType::Fp32 => TensorValues::Fp32(c.fp32_contents.clone()),
        DataType::Fp64 => TensorValues::Fp64(c.fp64_contents.clone()),
        _ => TensorValues::Bytes(c.bytes_contents.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_typed_fp32_decode_to_the_same_bits() {
        let values = TensorValues::Fp32(vec![1.5, -0.0, f32::from_bits(0x7fc0_0001)]);
        let raw = values.to_raw();
        let from_raw = decode("x", "FP32", &[3], None, Some(&raw)).unwrap();
        let from_typed = decode("x", "FP32", &[3], Some(&values.to_contents()), None).unwrap();
        let bits = |t: &Tensor| match &t.values {
            TensorValues::Fp32(v) => v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            _ => panic!(),
        };
        assert_eq!(bits(&from_raw), bits(&from_typed));
        assert_eq!(bits(&from_raw)[2], 0x7fc0_0001);
    }

    #[test]
    fn narrow_integers_round_trip_through_raw() {
        let values = TensorValues::Int32(vec![-128, 0, 127]);
        let raw = values.to_raw_as(DataType::Int8);
        assert_eq!(raw.len(), 3);
        assert_eq!(
            decode("x", "INT8", &[3], None, Some(&raw)).unwrap().values,
            values
        );
        let values = TensorValues::Uint32(vec![0, 65535]);
        let raw = values.to_raw_as(DataType::Uint16);
        assert_eq!(
            decode("x", "UINT16", &[2], None, Some(&raw))
                .unwrap()
                .values,
            values
        );
    }

    #[test]
    fn narrow_typed_integers_outside_their_datatype_are_refused_with_the_value() {
        // In range, the limits included: decoded as sent.
        let ok = [
            ("INT8", TensorValues::Int32(vec![-128, 0, 127])),
            ("INT16", TensorValues::Int32(vec![-32768, 0, 32767])),
            ("UINT8", TensorValues::Uint32(vec![0, 1, 255])),
            ("UINT16", TensorValues::Uint32(vec![0, 1, 65535])),
            ("INT32", TensorValues::Int32(vec![i32::MIN, 0, i32::MAX])),
            ("UINT32", TensorValues::Uint32(vec![0, 1, u32::MAX])),
        ];
        for (dt, values) in ok {
            let got = decode("x", dt, &[3], Some(&values.to_contents()), None).unwrap();
            assert_eq!(got.values, values, "{dt}");
        }
        // Triton reads int_contents=[300] as INT8 44: what the model read is not what was sent.
        let bad = [
            ("INT8", TensorValues::Int32(vec![1, 300, 2]), 300),
            ("INT8", TensorValues::Int32(vec![-129, 0, 0]), -129),
            ("INT16", TensorValues::Int32(vec![0, 0, 32768]), 32768),
            ("INT16", TensorValues::Int32(vec![-32769, 0, 0]), -32769),
            ("UINT8", TensorValues::Uint32(vec![256, 0, 0]), 256),
            ("UINT16", TensorValues::Uint32(vec![0, 65536, 0]), 65536),
            (
                "UINT16",
                TensorValues::Uint32(vec![0, u32::MAX, 0]),
                i64::from(u32::MAX),
            ),
        ];
        for (dt, values, value) in bad {
            let err = decode("age", dt, &[3], Some(&values.to_contents()), None).unwrap_err();
            assert!(matches!(err, TensorError::ValueOutOfRange { .. }), "{dt}");
            let want = TensorError::ValueOutOfRange {
                tensor: "age".into(),
                datatype: DataType::from_protocol_name(dt)
                    .unwrap()
                    .protocol_name()
                    .unwrap(),
                value,
            };
            assert_eq!(err, want);
            assert!(err.to_string().contains(&value.to_string()), "{err}");
        }
    }

    #[test]
    fn raw_bytes_are_length_prefixed() {
        let values = TensorValues::Bytes(vec!["en-US".into(), Bytes::new(), "jp_JA".into()]);
        let raw = values.to_raw();
        assert_eq!(
            decode("x", "BYTES", &[3], None, Some(&raw)).unwrap().values,
            values
        );
    }

    #[test]
    fn a_shape_that_disagrees_with_the_data_is_refused() {
        let raw = TensorValues::Fp32(vec![1.0; 6]).to_raw();
        let err = decode("emb", "FP32", &[2, 4], None, Some(&raw)).unwrap_err();
        assert!(matches!(err, TensorError::ShapeMismatch { .. }));
        let typed = TensorValues::Int64(vec![1, 2]).to_contents();
        let err = decode("ids", "INT64", &[3], Some(&typed), None).unwrap_err();
        assert!(matches!(err, TensorError::ShapeMismatch { .. }));
    }

    #[test]
    fn a_huge_claimed_shape_is_refused_without_allocating() {
        let raw = Bytes::from_static(&[0; 8]);
        let err = decode("x", "FP32", &[1 << 40, 1 << 20], None, Some(&raw)).unwrap_err();
        assert!(matches!(err, TensorError::ShapeMismatch { .. }));
        let err = decode("x", "FP32", &[i64::MAX, 4], None, Some(&raw)).unwrap_err();
        assert!(matches!(err, TensorError::InvalidShape { .. }));
        let err = decode("x", "FP32", &[-1], None, Some(&raw)).unwrap_err();
        assert!(matches!(err, TensorError::InvalidShape { .. }));
    }

    #[test]
    fn malformed_raw_bytes_and_odd_lengths_are_refused() {
        let bad = Bytes::from_static(&[10, 0, 0, 0, b'a']);
        assert!(matches!(
            decode("x", "BYTES", &[1], None, Some(&bad)).unwrap_err(),
            TensorError::BadBytes { .. }
        ));
        let odd = Bytes::from_static(&[0; 7]);
        assert!(matches!(
            decode("x", "FP32", &[2], None, Some(&odd)).unwrap_err(),
            TensorError::RawLength { .. }
        ));
    }

    #[test]
    fn unknown_datatypes_and_wrong_fields_are_refused() {
        assert!(matches!(
            decode("x", "FP8", &[1], None, None).unwrap_err(),
            TensorError::UnknownDatatype { .. }
        ));
        let typed = TensorValues::Fp64(vec![1.0]).to_contents();
        assert!(matches!(
            decode("x", "FP32", &[1], Some(&typed), None).unwrap_err(),
            TensorError::WrongContentsField { .. }
        ));
    }

    #[test]
    fn rows_are_selected_whole() {
        let v = TensorValues::Int64(vec![10, 11, 20, 21, 30, 31]);
        assert_eq!(
            v.select_rows(&[2, 0], 2),
            TensorValues::Int64(vec![30, 31, 10, 11])
        );
    }
}
