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
//!
//! `outline` finds the members of a body's JSON without parsing the tensors' data; `tensor`
//! reads one tensor into its raw contents.

mod outline;
mod tensor;
#[cfg(test)]
mod tests;

use crate::reason::Dropped;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use featurelog_schemas::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use featurelog_schemas::inference::model_infer_response::InferOutputTensor;
use featurelog_schemas::inference::{InferParameter, ModelInferRequest, ModelInferResponse};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use outline::{Span, outlined, read, split, walk};
use tensor::{Described, parameters, tensors};

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
    pub fn reason(&self) -> Dropped {
        match self {
            RestBodyError::Malformed(_) => Dropped::MalformedJson,
            RestBodyError::Data { .. } => Dropped::BadJsonData,
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
struct RequestJson<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Members>,
    #[serde(borrow)]
    inputs: Vec<TensorJson<'a>>,
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
struct ResponseJson<'a> {
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    model_version: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Members>,
    #[serde(default, borrow)]
    outputs: Option<Vec<TensorJson<'a>>>,
}

/// A tensor as the body describes it, borrowed from the outlined text: a call has one per input
/// (tritonclient sends every feature of a recommender, 51 here), and the sidecar keeps a few.
/// Owned names and a map of every tensor's parameters were most of reading a binary-data body.
#[derive(Deserialize)]
struct TensorJson<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    shape: Vec<i64>,
    #[serde(borrow)]
    datatype: Cow<'a, str>,
    /// Read for `binary_data_size` alone, and whole only for a tensor that is kept.
    #[serde(default, borrow)]
    parameters: Option<&'a RawValue>,
    /// Where the value is in the body's JSON (see [`outline`]): only the tensors the allow
    /// list reads are parsed, straight into bytes.
    #[serde(default)]
    data: Option<Span>,
}

/// The request's `id` (for the response's `x-request-id` decision), read from its JSON part
/// only; `None` when it has none or the body is not the protocol's JSON.
///
/// On the call's path, for every REST call without an `x-request-id` header: only the text up
/// to the top-level `id` member is walked (clients write it first), not the whole header (22 us
/// for a header of 51 tensors). For a body the publisher reads, this is the id it reads (a
/// valid body has one `id`); a body it refuses is not logged, whatever this says.
pub fn peek_id(body: &Bytes, header_length: Option<usize>) -> Option<String> {
    let (json, _) = split(body, header_length).ok()?;
    let (start, end) = walk(&json, true)?.id?;
    serde_json::from_slice::<Option<String>>(&json[start..end]).ok()?
}

/// Per publisher thread: what recent JSON headers of binary-data requests described, so that a
/// request whose header is one seen before (the same tensors, shapes and sizes: a client's
/// every call, but for its `id`) is not read again. Reading a header that describes every
/// tensor of a recommender (51 here, each with its `binary_data_size`) was nearly all of the
/// publisher's work on a `tritonclient.http` call; the tensors' bytes are in the binary part and
/// need no reading at all. A header's key is its bytes with the `id` value cut out; headers
/// whose tensors carry JSON `data` are not kept (its positions move with the id).
#[derive(Default)]
pub struct HeaderCache {
    entries: Vec<Arc<Header>>,
    /// The entry the next new header replaces, once the cache is full.
    next: usize,
}

/// Headers kept per publisher thread: a client sends a few shapes (candidate counts vary),
/// and a miss costs only what reading costs anyway.
const HEADERS_KEPT: usize = 16;

/// A request header as read once: everything but its `id`.
struct Header {
    /// The header's bytes before and after the `id` value (all of them without one).
    key: (Vec<u8>, Vec<u8>),
    /// Every input, in order, with its place in the binary part.
    inputs: Vec<(Described, std::ops::Range<usize>)>,
    /// The binary part's length.
    binary_len: usize,
    parameters: HashMap<String, InferParameter>,
    outputs: Vec<InferRequestedOutputTensor>,
}

impl HeaderCache {
    /// The entry for `json` (its `id` value at `id`), if one is kept.
    fn find(&self, json: &[u8], id: Option<(usize, usize)>) -> Option<&Arc<Header>> {
        let (before, after) = match id {
            Some((s, e)) => (&json[..s], &json[e..]),
            None => (json, &json[json.len()..]),
        };
        self.entries
            .iter()
            .find(|h| h.key.0 == before && h.key.1 == after)
    }

    fn keep(&mut self, header: Header) {
        if self.entries.len() < HEADERS_KEPT {
            self.entries.push(Arc::new(header));
        } else {
            self.entries[self.next] = Arc::new(header);
            self.next = (self.next + 1) % HEADERS_KEPT;
        }
    }
}

/// The request that a kept header describes, with this body's `id` (its JSON value at `id`)
/// and binary part; `None` when they do not fit it (then the body is read in full, which
/// says why).
fn from_header(
    header: &Header,
    json: &[u8],
    id: Option<(usize, usize)>,
    binary: &Bytes,
    model: &str,
    version: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> Option<ModelInferRequest> {
    let id = match id {
        Some((s, e)) => serde_json::from_slice::<Option<String>>(&json[s..e]).ok()?,
        None => None,
    };
    if binary.len() != header.binary_len {
        return None;
    }
    let (mut inputs, mut raw) = (Vec::new(), Vec::new());
    for (t, range) in header.inputs.iter().filter(|(t, _)| wanted(&t.name)) {
        inputs.push(InferInputTensor {
            name: t.name.clone(),
            datatype: t.datatype.clone(),
            shape: t.shape.clone(),
            parameters: t.parameters.clone(),
            contents: None,
        });
        raw.push(binary.slice(range.clone()));
    }
    Some(ModelInferRequest {
        model_name: model.to_owned(),
        model_version: version.to_owned(),
        id: id.unwrap_or_default(),
        parameters: header.parameters.clone(),
        inputs,
        outputs: header.outputs.clone(),
        raw_input_contents: raw,
    })
}

/// Reads an inference request of `model` (and `version`, empty for none) from its body, with
/// the input tensors that `wanted` names (the others are skipped unread, as the gRPC path
/// decodes only the tensors a rule logs). With a `cache`, a binary-data header seen before is
/// not read again (see [`HeaderCache`]).
pub fn request(
    body: &Bytes,
    header_length: Option<usize>,
    model: &str,
    version: &str,
    wanted: &dyn Fn(&str) -> bool,
    cache: Option<&mut HeaderCache>,
) -> Result<ModelInferRequest, RestBodyError> {
    let (outlined, json, binary) = outlined(body, header_length, "request")?;
    let cache = cache.filter(|_| header_length.is_some());
    if let Some(cache) = &cache {
        let read = (cache.find(&json, outlined.id))
            .and_then(|h| from_header(h, &json, outlined.id, &binary, model, version, wanted));
        if let Some(request) = read {
            return Ok(request);
        }
    }
    let parsed: RequestJson<'_> = read(&outlined.text, "request")?;
    let outputs: Vec<InferRequestedOutputTensor> = parsed
        .outputs
        .unwrap_or_default()
        .into_iter()
        .map(|o| InferRequestedOutputTensor {
            name: o.name,
            parameters: parameters(o.parameters.unwrap_or_default()),
        })
        .collect();
    let request_parameters = parameters(parsed.parameters.unwrap_or_default());
    let binary_only = parsed.inputs.iter().all(|t| t.data.is_none());
    let (tensors, raw) = match cache {
        // Every input described, kept, and the wanted ones taken from it.
        Some(cache) if binary_only => {
            let (tensors, raw) = self::tensors(parsed.inputs, &json, binary.clone(), &|_| true)?;
            let mut at = 0;
            let inputs: Vec<_> = (tensors.into_iter().zip(&raw))
                .map(|(t, r)| {
                    at += r.len();
                    (t, at - r.len()..at)
                })
                .collect();
            let key = match outlined.id {
                Some((s, e)) => (json[..s].to_vec(), json[e..].to_vec()),
                None => (json.to_vec(), Vec::new()),
            };
            let header = Header {
                key,
                inputs,
                binary_len: binary.len(),
                parameters: request_parameters.clone(),
                outputs: outputs.clone(),
            };
            let kept: (Vec<Described>, Vec<Bytes>) = (header.inputs.iter())
                .zip(raw)
                .filter(|((t, _), _)| wanted(&t.name))
                .map(|((t, _), r)| (t.clone(), r))
                .unzip();
            cache.keep(header);
            kept
        }
        _ => tensors(parsed.inputs, &json, binary, wanted)?,
    };
    let inputs = tensors
        .into_iter()
        .map(|t| InferInputTensor {
            name: t.name,
            datatype: t.datatype,
            shape: t.shape,
            parameters: t.parameters,
            contents: None,
        })
        .collect();
    Ok(ModelInferRequest {
        model_name: model.to_owned(),
        model_version: version.to_owned(),
        id: parsed.id.unwrap_or_default(),
        parameters: request_parameters,
        inputs,
        outputs,
        raw_input_contents: raw,
    })
}

/// Reads an inference response from its body, with the output tensors that `wanted` names.
pub fn response(
    body: &Bytes,
    header_length: Option<usize>,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<ModelInferResponse, RestBodyError> {
    let (outlined, json, binary) = outlined(body, header_length, "response")?;
    let parsed: ResponseJson<'_> = read(&outlined.text, "response")?;
    let (tensors, raw) = tensors(parsed.outputs.unwrap_or_default(), &json, binary, wanted)?;
    let outputs = tensors
        .into_iter()
        .map(|t| InferOutputTensor {
            name: t.name,
            datatype: t.datatype,
            shape: t.shape,
            parameters: t.parameters,
            contents: None,
        })
        .collect();
    Ok(ModelInferResponse {
        model_name: parsed.model_name.unwrap_or_default(),
        model_version: parsed.model_version.unwrap_or_default(),
        id: parsed.id.unwrap_or_default(),
        parameters: parameters(parsed.parameters.unwrap_or_default()),
        outputs,
        raw_output_contents: raw,
    })
}
