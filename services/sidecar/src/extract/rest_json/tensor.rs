//! One tensor of a REST body read into raw contents, as gRPC would carry it: JSON `data`
//! (flat or nested) converted to the element type, or the tensor's slice of the binary data.

use std::collections::HashMap;

use bytes::Bytes;
use featurelog_schemas::inference::InferParameter;
use featurelog_schemas::inference::infer_parameter::ParameterChoice;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::outline::Span;
use super::{BINARY_DATA_SIZE, Members, RestBodyError, TensorJson, malformed};

/// The tensors that `wanted` names, described, and their raw contents in the same order; the
/// binary part must be used up exactly.
pub(super) fn tensors(
    all: Vec<TensorJson<'_>>,
    json: &[u8],
    binary: Bytes,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<(Vec<Described>, Vec<Bytes>), RestBodyError> {
    let mut binary = Binary::new(binary);
    let (mut described, mut raw) = (Vec::new(), Vec::new());
    for t in all {
        if let Some((d, contents)) = tensor(t, json, &mut binary, wanted)? {
            described.push(d);
            raw.push(contents);
        }
    }
    binary.finish()?;
    Ok((described, raw))
}

/// A tensor's description, its transport parameters left out.
#[derive(Clone)]
pub(super) struct Described {
    pub(super) name: String,
    pub(super) datatype: String,
    pub(super) shape: Vec<i64>,
    pub(super) parameters: HashMap<String, InferParameter>,
}

/// The binary part of a body, handed out in the order of the tensors that have data there.
struct Binary {
    data: Bytes,
    at: usize,
}

impl Binary {
    fn new(data: Bytes) -> Self {
        Self { data, at: 0 }
    }

    fn take(&mut self, tensor: &str, len: usize) -> Result<Bytes, RestBodyError> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(malformed(format!(
                "tensor {tensor:?} has {len} bytes of binary data but {} are left",
                self.data.len() - self.at
            )));
        };
        let out = self.data.slice(self.at..end);
        self.at = end;
        Ok(out)
    }

    /// Binary data that no tensor claimed means the JSON and the data disagree.
    fn finish(self) -> Result<(), RestBodyError> {
        match self.data.len() - self.at {
            0 => Ok(()),
            left => Err(malformed(format!(
                "{left} bytes of binary data belong to no tensor"
            ))),
        }
    }
}

/// A tensor's description and raw contents; `None` for one that `wanted` does not name (its
/// binary data, if any, is stepped over).
fn tensor(
    t: TensorJson<'_>,
    json: &[u8],
    binary: &mut Binary,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Option<(Described, Bytes)>, RestBodyError> {
    /// The one transport parameter every tensor is read for.
    #[derive(Deserialize)]
    struct Transport<'a> {
        #[serde(default, borrow, rename = "binary_data_size")]
        size: Option<&'a RawValue>,
    }
    let TensorJson {
        name,
        shape,
        datatype,
        parameters: json_parameters,
        data,
    } = t;
    let binary_size = match json_parameters {
        Some(raw) => serde_json::from_str::<Option<Transport<'_>>>(raw.get())
            .map_err(|e| malformed(format!("tensor {name:?}: parameters: {e}")))?
            .and_then(|t| t.size),
        None => None,
    };
    let contents = match (binary_size, data) {
        (Some(size), None) => {
            let len = serde_json::from_str::<u64>(size.get())
                .ok()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    malformed(format!(
                        "tensor {name:?}: {BINARY_DATA_SIZE} {}",
                        size.get()
                    ))
                })?;
            binary.take(&name, len)?
        }
        (None, Some(_)) if !wanted(&name) => Bytes::new(),
        (None, Some(Span(start, len))) => {
            let data = start
                .checked_add(len)
                .and_then(|end| json.get(start..end))
                .ok_or_else(|| malformed(format!("tensor {name:?}: data out of the body")))?;
            encode(&name, &datatype, data)?
        }
        (Some(_), Some(_)) => {
            return Err(malformed(format!(
                "tensor {name:?} has both data and {BINARY_DATA_SIZE}"
            )));
        }
        (None, None) => return Err(malformed(format!("tensor {name:?} has no data"))),
    };
    if !wanted(&name) {
        return Ok(None);
    }
    let mut members: Members = match json_parameters {
        Some(raw) => serde_json::from_str::<Option<Members>>(raw.get())
            .map_err(|e| malformed(format!("tensor {name:?}: parameters: {e}")))?
            .unwrap_or_default(),
        None => Members::new(),
    };
    members.remove(BINARY_DATA_SIZE);
    Ok(Some((
        Described {
            name: name.into_owned(),
            datatype: datatype.into_owned(),
            shape,
            parameters: parameters(members),
        },
        contents,
    )))
}

/// Request, response and tensor parameters: the protocol's scalar kinds; anything else (a
/// list, an object) has no gRPC form and is left out.
pub(super) fn parameters(json: Members) -> HashMap<String, InferParameter> {
    json.into_iter()
        .filter_map(|(k, v)| {
            let choice = match v {
                Value::Bool(b) => ParameterChoice::BoolParam(b),
                Value::String(s) => ParameterChoice::StringParam(s),
                Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                    (Some(i), _) => ParameterChoice::Int64Param(i),
                    (None, Some(u)) => ParameterChoice::Uint64Param(u),
                    _ => ParameterChoice::DoubleParam(n.as_f64()?),
                },
                _ => return None,
            };
            Some((
                k,
                InferParameter {
                    parameter_choice: Some(choice),
                },
            ))
        })
        .collect()
}

/// The element types of the protocol, as JSON `data` is read into them.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    Bf16,
    F32,
    F64,
    Bytes,
}

impl Kind {
    fn of(datatype: &str) -> Option<Kind> {
        Some(match datatype {
            "BOOL" => Kind::Bool,
            "INT8" => Kind::I8,
            "INT16" => Kind::I16,
            "INT32" => Kind::I32,
            "INT64" => Kind::I64,
            "UINT8" => Kind::U8,
            "UINT16" => Kind::U16,
            "UINT32" => Kind::U32,
            "UINT64" => Kind::U64,
            "FP16" => Kind::F16,
            "BF16" => Kind::Bf16,
            "FP32" => Kind::F32,
            "FP64" => Kind::F64,
            "BYTES" => Kind::Bytes,
            _ => return None,
        })
    }
}

/// The raw (little-endian) contents of JSON `data` of `datatype`, flat or nested, written as
/// the text is read: no tree of JSON values is built for a tensor's thousands of numbers.
fn encode(tensor: &str, datatype: &str, data: &[u8]) -> Result<Bytes, RestBodyError> {
    use serde::de::DeserializeSeed as _;
    let bad = |problem: String| RestBodyError::Data {
        tensor: tensor.to_owned(),
        problem,
    };
    let kind = Kind::of(datatype).ok_or_else(|| bad(format!("unknown datatype {datatype:?}")))?;
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(data);
    Elements {
        kind,
        datatype,
        out: &mut out,
    }
    .deserialize(&mut de)
    .map_err(|e| bad(e.to_string()))?;
    Ok(Bytes::from(out))
}

/// Appends the elements of a (nested) JSON array, or one scalar, to `out` as `kind`.
struct Elements<'o> {
    kind: Kind,
    datatype: &'o str,
    out: &'o mut Vec<u8>,
}

impl Elements<'_> {
    fn refuse<E: serde::de::Error>(&self, what: impl std::fmt::Display) -> E {
        E::custom(format!("{what} is not a {} value", self.datatype))
    }

    /// As numpy and Triton read JSON: the number as a double, then rounded to the type.
    fn float<E: serde::de::Error>(&mut self, x: f64) -> Result<(), E> {
        match self.kind {
            Kind::F32 => self.out.extend_from_slice(&(x as f32).to_le_bytes()),
            Kind::F64 => self.out.extend_from_slice(&x.to_le_bytes()),
            Kind::F16 => self
                .out
                .extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
            Kind::Bf16 => self
                .out
                .extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
            _ => return Err(self.refuse(x)),
        }
        Ok(())
    }

    /// An integer literal: exactly, into an integer type that holds it; as a double into a
    /// float type.
    fn integer<E: serde::de::Error>(&mut self, v: i128) -> Result<(), E> {
        macro_rules! put {
            ($t:ty) => {
                self.out.extend_from_slice(
                    &<$t>::try_from(v).map_err(|_| self.refuse(v))?.to_le_bytes(),
                )
            };
        }
        match self.kind {
            Kind::I8 => put!(i8),
            Kind::I16 => put!(i16),
            Kind::I32 => put!(i32),
            Kind::I64 => put!(i64),
            Kind::U8 => put!(u8),
            Kind::U16 => put!(u16),
            Kind::U32 => put!(u32),
            Kind::U64 => put!(u64),
            Kind::F16 | Kind::Bf16 | Kind::F32 | Kind::F64 => return self.float(v as f64),
            Kind::Bool | Kind::Bytes => return Err(self.refuse(v)),
        }
        Ok(())
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Elements<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Elements<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} values, in arrays", self.datatype)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (kind, datatype) = (self.kind, self.datatype);
        while seq
            .next_element_seed(Elements {
                kind,
                datatype,
                out: &mut *self.out,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        if self.kind != Kind::Bool {
            return Err(self.refuse(v));
        }
        self.out.push(u8::from(v));
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(mut self, v: i64) -> Result<(), E> {
        self.integer(i128::from(v))
    }

    fn visit_u64<E: serde::de::Error>(mut self, v: u64) -> Result<(), E> {
        self.integer(i128::from(v))
    }

    fn visit_f64<E: serde::de::Error>(mut self, v: f64) -> Result<(), E> {
        self.float(v)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        if self.kind != Kind::Bytes {
            return Err(self.refuse(format!("{v:?}")));
        }
        let len = u32::try_from(v.len()).map_err(|_| self.refuse("a string of 4 GiB"))?;
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(v.as_bytes());
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Err(self.refuse("null"))
    }
}
