//! What the REST readers must make of a body, read from a parse of its whole JSON into a
//! `serde_json::Value`.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use featurelog_schemas::inference::infer_parameter::ParameterChoice;
use featurelog_schemas::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use featurelog_schemas::inference::{InferParameter, ModelInferRequest};

use super::rest_bodies::{DATATYPES, Json, Members};

/// Whether some object in the JSON text names a member twice: a parse into a map keeps the
/// last, the readers refuse a known member named twice (which one a model server reads is not
/// known), so the references do not model such text.
pub(super) fn duplicate_keys(json: &[u8]) -> bool {
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
pub(super) const MALFORMED: &str = "malformed_json";
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
pub(super) fn rest_parts(
    body: &[u8],
    header_length: Option<usize>,
) -> Result<(&[u8], &[u8]), &'static str> {
    match header_length {
        None => Ok((body, &[])),
        Some(n) if n <= body.len() => Ok(body.split_at(n)),
        Some(_) => Err(MALFORMED),
    }
}

/// What `rest_json::request` must read from a body, read from a parse of its whole JSON.
pub(super) fn reference_request(
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
pub(super) fn reference_response(
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
