//! The Open Inference Protocol's HTTP/REST bodies, read into the gRPC messages the rest of the
//! sidecar works on: a `POST /v2/models/{model}/infer` request into a `ModelInferRequest`, its
//! response into a `ModelInferResponse`.
//!
//! Every tensor comes out as raw contents (little-endian elements; BYTES as 4-byte lengths and
//! bytes), whether it came as JSON `data` or in the binary tensor data extension (Triton's
//! `Inference-Header-Content-Length`, which `tritonclient.http` uses by default and KServe
//! reads too). JSON numbers become the element type as model servers convert them: a double
//! first, then the type (`as f32` for FP32, as Triton's and numpy's readers do), so that a
//! logged value is the value the model computed on. `data` may be flat or nested (row-major
//! either way).

use std::collections::HashMap;

use bytes::Bytes;
use featurelog_schemas::inference::infer_parameter::ParameterChoice;
use featurelog_schemas::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use featurelog_schemas::inference::model_infer_response::InferOutputTensor;
use featurelog_schemas::inference::{InferParameter, ModelInferRequest, ModelInferResponse};
use serde::Deserialize;
use serde_json::Value;

/// The header of the binary tensor data extension: the length of the JSON part of the body.
pub const HEADER_LENGTH: &str = "inference-header-content-length";
/// The tensor parameter that says a tensor's data is in the binary part, and how long it is.
const BINARY_DATA_SIZE: &str = "binary_data_size";

/// Why a REST body could not be read. The call itself was still forwarded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RestBodyError {
    /// Not the protocol's JSON, or the binary part does not match what the JSON says.
    #[error("malformed REST body: {0}")]
    Malformed(String),
    /// A tensor's `data` does not hold values of its datatype.
    #[error("tensor {tensor:?}: {problem}")]
    Data {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        problem: String,
    },
}

impl RestBodyError {
    /// A short, stable reason for metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            RestBodyError::Malformed(_) => "malformed_json",
            RestBodyError::Data { .. } => "bad_json_data",
        }
    }
}

fn malformed(what: impl Into<String>) -> RestBodyError {
    RestBodyError::Malformed(what.into())
}

// Optional members may also be `null` (KServe's server writes `"parameters": null`,
// `"model_version": null`): each is an `Option`, whose `None` stands for both.

/// A JSON object's members.
type Members = HashMap<String, Value>;

#[derive(Deserialize)]
struct RequestJson {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Members>,
    inputs: Vec<TensorJson>,
    #[serde(default)]
    outputs: Option<Vec<RequestedOutputJson>>,
}

#[derive(Deserialize)]
struct RequestedOutputJson {
    name: String,
    #[serde(default)]
    parameters: Option<Members>,
}

#[derive(Deserialize)]
struct ResponseJson {
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    model_version: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Members>,
    #[serde(default)]
    outputs: Option<Vec<TensorJson>>,
}

#[derive(Deserialize)]
struct TensorJson {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<Members>,
    #[serde(default)]
    data: Option<Value>,
}

/// Splits a body into its JSON part and its binary part: with the extension header, the first
/// `header_length` bytes are JSON; without it, all of it is.
fn split(body: &Bytes, header_length: Option<usize>) -> Result<(Bytes, Bytes), RestBodyError> {
    match header_length {
        None => Ok((body.clone(), Bytes::new())),
        Some(n) if n <= body.len() => Ok((body.slice(..n), body.slice(n..))),
        Some(n) => Err(malformed(format!(
            "{HEADER_LENGTH} is {n} but the body has {} bytes",
            body.len()
        ))),
    }
}

/// The request's `id` (for the response's `x-request-id` decision), read from its JSON part
/// only; `None` when it has none or the body is not the protocol's JSON.
pub fn peek_id(body: &Bytes, header_length: Option<usize>) -> Option<String> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        id: Option<String>,
    }
    let (json, _) = split(body, header_length).ok()?;
    serde_json::from_slice::<Head>(&json).ok()?.id
}

/// Reads an inference request of `model` (and `version`, empty for none) from its body.
pub fn request(
    body: &Bytes,
    header_length: Option<usize>,
    model: &str,
    version: &str,
) -> Result<ModelInferRequest, RestBodyError> {
    let (json, binary) = split(body, header_length)?;
    let parsed: RequestJson =
        serde_json::from_slice(&json).map_err(|e| malformed(format!("request JSON: {e}")))?;
    let mut binary = Binary::new(binary);
    let mut inputs = Vec::with_capacity(parsed.inputs.len());
    let mut raw = Vec::with_capacity(parsed.inputs.len());
    for t in parsed.inputs {
        let (tensor, contents) = tensor(t, &mut binary)?;
        inputs.push(InferInputTensor {
            name: tensor.name,
            datatype: tensor.datatype,
            shape: tensor.shape,
            parameters: tensor.parameters,
            contents: None,
        });
        raw.push(contents);
    }
    binary.finish()?;
    Ok(ModelInferRequest {
        model_name: model.to_owned(),
        model_version: version.to_owned(),
        id: parsed.id.unwrap_or_default(),
        parameters: parameters(parsed.parameters.unwrap_or_default()),
        inputs,
        outputs: parsed
            .outputs
            .unwrap_or_default()
            .into_iter()
            .map(|o| InferRequestedOutputTensor {
                name: o.name,
                parameters: parameters(o.parameters.unwrap_or_default()),
            })
            .collect(),
        raw_input_contents: raw,
    })
}

/// Reads an inference response from its body.
pub fn response(
    body: &Bytes,
    header_length: Option<usize>,
) -> Result<ModelInferResponse, RestBodyError> {
    let (json, binary) = split(body, header_length)?;
    let parsed: ResponseJson =
        serde_json::from_slice(&json).map_err(|e| malformed(format!("response JSON: {e}")))?;
    let mut binary = Binary::new(binary);
    let parsed_outputs = parsed.outputs.unwrap_or_default();
    let mut outputs = Vec::with_capacity(parsed_outputs.len());
    let mut raw = Vec::with_capacity(parsed_outputs.len());
    for t in parsed_outputs {
        let (tensor, contents) = tensor(t, &mut binary)?;
        outputs.push(InferOutputTensor {
            name: tensor.name,
            datatype: tensor.datatype,
            shape: tensor.shape,
            parameters: tensor.parameters,
            contents: None,
        });
        raw.push(contents);
    }
    binary.finish()?;
    Ok(ModelInferResponse {
        model_name: parsed.model_name.unwrap_or_default(),
        model_version: parsed.model_version.unwrap_or_default(),
        id: parsed.id.unwrap_or_default(),
        parameters: parameters(parsed.parameters.unwrap_or_default()),
        outputs,
        raw_output_contents: raw,
    })
}

/// A tensor's description, its transport parameters left out.
struct Described {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    parameters: HashMap<String, InferParameter>,
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

fn tensor(t: TensorJson, binary: &mut Binary) -> Result<(Described, Bytes), RestBodyError> {
    let TensorJson {
        name,
        shape,
        datatype,
        parameters: json_parameters,
        data,
    } = t;
    let mut json_parameters = json_parameters.unwrap_or_default();
    let binary_size = json_parameters.remove(BINARY_DATA_SIZE);
    let contents = match (binary_size, data) {
        (Some(size), None) => {
            let len = size
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| malformed(format!("tensor {name:?}: {BINARY_DATA_SIZE} {size}")))?;
            binary.take(&name, len)?
        }
        (None, Some(data)) => encode(&name, &datatype, &data)?,
        (Some(_), Some(_)) => {
            return Err(malformed(format!(
                "tensor {name:?} has both data and {BINARY_DATA_SIZE}"
            )));
        }
        (None, None) => return Err(malformed(format!("tensor {name:?} has no data"))),
    };
    Ok((
        Described {
            name,
            datatype,
            shape,
            parameters: parameters(json_parameters),
        },
        contents,
    ))
}

/// Request, response and tensor parameters: the protocol's scalar kinds; anything else (a
/// list, an object) has no gRPC form and is left out.
fn parameters(json: Members) -> HashMap<String, InferParameter> {
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

/// The raw (little-endian) contents of JSON `data` of `datatype`, flat or nested.
fn encode(tensor: &str, datatype: &str, data: &Value) -> Result<Bytes, RestBodyError> {
    let mut elements = Vec::new();
    flatten(data, &mut elements);
    let bad = |what: &Value| RestBodyError::Data {
        tensor: tensor.to_owned(),
        problem: format!("{what} is not a {datatype} value"),
    };
    let mut out = Vec::with_capacity(elements.len() * 4);
    macro_rules! ints {
        ($t:ty) => {
            for v in &elements {
                let x = v
                    .as_i64()
                    .and_then(|i| <$t>::try_from(i).ok())
                    .or_else(|| v.as_u64().and_then(|u| <$t>::try_from(u).ok()))
                    .ok_or_else(|| bad(v))?;
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    macro_rules! floats {
        ($convert:expr) => {
            for v in &elements {
                let x = v.as_f64().ok_or_else(|| bad(v))?;
                out.extend_from_slice(&$convert(x).to_le_bytes());
            }
        };
    }
    match datatype {
        "BOOL" => {
            for v in &elements {
                out.push(u8::from(v.as_bool().ok_or_else(|| bad(v))?));
            }
        }
        "INT8" => ints!(i8),
        "INT16" => ints!(i16),
        "INT32" => ints!(i32),
        "INT64" => ints!(i64),
        "UINT8" => ints!(u8),
        "UINT16" => ints!(u16),
        "UINT32" => ints!(u32),
        "UINT64" => ints!(u64),
        // As numpy and Triton read JSON: the number as a double, then rounded to the type.
        "FP32" => floats!(|x: f64| x as f32),
        "FP64" => floats!(|x: f64| x),
        "FP16" => floats!(half::f16::from_f64),
        "BF16" => floats!(half::bf16::from_f64),
        "BYTES" => {
            for v in &elements {
                let s = v.as_str().ok_or_else(|| bad(v))?;
                let len = u32::try_from(s.len()).map_err(|_| bad(v))?;
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
        other => {
            return Err(RestBodyError::Data {
                tensor: tensor.to_owned(),
                problem: format!("unknown datatype {other:?}"),
            });
        }
    }
    Ok(Bytes::from(out))
}

/// The elements of flat or nested JSON `data`, in row-major order.
fn flatten<'v>(data: &'v Value, out: &mut Vec<&'v Value>) {
    match data {
        Value::Array(items) => {
            for item in items {
                flatten(item, out);
            }
        }
        scalar => out.push(scalar),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_f32(raw: &[u8]) -> Vec<u32> {
        raw.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn json_data_becomes_the_raw_contents_the_model_read() {
        let body = Bytes::from(
            r#"{"id":"r-1","parameters":{"user":"u7","k":3,"w":0.5,"on":true,"list":[1]},
               "inputs":[
                 {"name":"price","shape":[2,2],"datatype":"FP32","data":[[0.1,-0.0],[1e-45,3.4028234663852886e38]]},
                 {"name":"item_id","shape":[2],"datatype":"INT64","data":[9007199254740993,-2]},
                 {"name":"locale","shape":[1],"datatype":"BYTES","data":["jp_JA"]},
                 {"name":"flag","shape":[2],"datatype":"BOOL","data":[true,false]},
                 {"name":"half","shape":[1],"datatype":"FP16","data":[0.1]}
               ],
               "outputs":[{"name":"score","parameters":{"binary_data":true}}]}"#,
        );
        let r = request(&body, None, "ranker", "2").unwrap();
        assert_eq!(
            (
                r.model_name.as_str(),
                r.model_version.as_str(),
                r.id.as_str()
            ),
            ("ranker", "2", "r-1")
        );
        assert_eq!(r.inputs[0].shape, [2, 2]);
        assert_eq!(
            raw_f32(&r.raw_input_contents[0]),
            [
                0.1f32.to_bits(),
                (-0.0f32).to_bits(),
                1e-45f32.to_bits(),
                f32::MAX.to_bits()
            ]
        );
        let ids: Vec<i64> = r.raw_input_contents[1]
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            ids,
            [9_007_199_254_740_993, -2],
            "integers are not read through a double"
        );
        assert_eq!(&r.raw_input_contents[2][..], b"\x05\0\0\0jp_JA");
        assert_eq!(&r.raw_input_contents[3][..], [1, 0]);
        assert_eq!(
            &r.raw_input_contents[4][..],
            half::f16::from_f64(0.1).to_le_bytes()
        );
        let p = |k: &str| r.parameters[k].parameter_choice.clone().unwrap();
        assert_eq!(p("user"), ParameterChoice::StringParam("u7".into()));
        assert_eq!(p("k"), ParameterChoice::Int64Param(3));
        assert_eq!(p("w"), ParameterChoice::DoubleParam(0.5));
        assert_eq!(p("on"), ParameterChoice::BoolParam(true));
        assert!(!r.parameters.contains_key("list"));
        assert_eq!(r.outputs[0].name, "score");
    }

    #[test]
    fn binary_tensor_data_is_taken_in_order_and_must_add_up() {
        let json = r#"{"inputs":[
            {"name":"a","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},
            {"name":"b","shape":[1],"datatype":"INT32","data":[7]},
            {"name":"c","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}}]}"#;
        let mut body = json.as_bytes().to_vec();
        body.extend_from_slice(&1.5f32.to_le_bytes());
        body.extend_from_slice(&(-2.0f32).to_le_bytes());
        body.extend_from_slice(b"\x02\0\0\0ok");
        let body = Bytes::from(body);
        let r = request(&body, Some(json.len()), "m", "").unwrap();
        assert_eq!(
            raw_f32(&r.raw_input_contents[0]),
            [1.5f32.to_bits(), (-2.0f32).to_bits()]
        );
        assert_eq!(&r.raw_input_contents[1][..], 7i32.to_le_bytes());
        assert_eq!(&r.raw_input_contents[2][..], b"\x02\0\0\0ok");
        assert!(
            r.inputs[0].parameters.is_empty(),
            "the transport parameter is not the model's"
        );
        assert_eq!(peek_id(&body, Some(json.len())), None);

        // Too little data, too much, a header past the body.
        let short = body.slice(..body.len() - 1);
        assert_eq!(
            request(&short, Some(json.len()), "m", "")
                .unwrap_err()
                .reason(),
            "malformed_json"
        );
        let mut long = body.to_vec();
        long.push(0);
        let err = request(&Bytes::from(long), Some(json.len()), "m", "").unwrap_err();
        assert!(err.to_string().contains("belong to no tensor"), "{err}");
        assert!(request(&body, Some(body.len() + 1), "m", "").is_err());
    }

    #[test]
    fn bad_bodies_say_why_and_never_panic() {
        let req = |json: &str| request(&Bytes::from(json.to_owned()), None, "m", "");
        for (json, reason) in [
            ("{not json", "malformed_json"),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32"}]}"#,
                "malformed_json",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":["x"]}]}"#,
                "bad_json_data",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"INT8","data":[300]}]}"#,
                "bad_json_data",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"UINT8","data":[-1]}]}"#,
                "bad_json_data",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"INT32","data":[1.5]}]}"#,
                "bad_json_data",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"BOOL","data":[1]}]}"#,
                "bad_json_data",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"COMPLEX","data":[1]}]}"#,
                "bad_json_data",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}]}"#,
                "malformed_json",
            ),
            (
                r#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":-4}}]}"#,
                "malformed_json",
            ),
        ] {
            assert_eq!(req(json).unwrap_err().reason(), reason, "{json}");
        }
    }

    #[test]
    fn responses_read_json_and_binary_outputs() {
        // As KServe's server writes them: absent members as null.
        let kserve = br#"{"model_name":"ranker","model_version":null,"id":"a","parameters":null,
            "outputs":[{"name":"score","shape":[2],"datatype":"FP32","parameters":null,"data":[3.0,7.5]}]}"#;
        let r = response(&Bytes::from_static(kserve), None).unwrap();
        assert_eq!(
            (r.model_version.as_str(), r.outputs[0].name.as_str()),
            ("", "score")
        );
        let json = r#"{"model_name":"ranker","model_version":"1","id":"r-1","outputs":[
            {"name":"score","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},
            {"name":"label","shape":[1],"datatype":"BYTES","data":["a"]}]}"#;
        let mut body = json.as_bytes().to_vec();
        body.extend_from_slice(&0.25f32.to_le_bytes());
        body.extend_from_slice(&0.75f32.to_le_bytes());
        let r = response(&Bytes::from(body), Some(json.len())).unwrap();
        assert_eq!(r.model_name, "ranker");
        assert_eq!(r.outputs[0].shape, [2]);
        assert_eq!(
            raw_f32(&r.raw_output_contents[0]),
            [0.25f32.to_bits(), 0.75f32.to_bits()]
        );
        assert_eq!(&r.raw_output_contents[1][..], b"\x01\0\0\0a");
        assert_eq!(
            peek_id(&Bytes::from_static(br#"{"inputs":[],"id":"x"}"#), None).as_deref(),
            Some("x")
        );
    }
}
