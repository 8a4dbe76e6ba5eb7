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

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use featurelog_schemas::inference::infer_parameter::ParameterChoice;
use featurelog_schemas::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use featurelog_schemas::inference::model_infer_response::InferOutputTensor;
use featurelog_schemas::inference::{InferParameter, ModelInferRequest, ModelInferResponse};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

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

/// A `data` value's place in the body's JSON: its first byte and length.
#[derive(Deserialize, Clone, Copy)]
struct Span(usize, usize);

/// The JSON text with each tensor's `data` value (the member `data` of an object in an array
/// in the top object: `inputs[i].data`, `outputs[i].data`) replaced by its [`Span`] in `json`.
/// serde then reads the few hundred bytes of the call's structure instead of every number of
/// every tensor: skipping values it does not keep cost serde ~all of the parse (143 of 145 us
/// for a 66 kB body of 51 tensors, 11 of them wanted), and here they are stepped over by
/// searching for brackets and quotes only; the request's `id` is found on the way (see
/// [`HeaderCache`]). `None` when the text ends inside a value.
fn outline(json: &[u8]) -> Option<Outline> {
    walk(json, false)
}

/// [`outline`]'s walk; with `only_id`, it stops at the top-level `id` (and outlines nothing).
fn walk(json: &[u8], only_id: bool) -> Option<Outline> {
    let mut out = Vec::with_capacity(if only_id { 0 } else { 1024 });
    let mut id = None;
    let (mut at, mut copied, mut depth) = (0usize, 0usize, 0usize);
    while at < json.len() {
        match json[at] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let end = string_end(json, at)?;
                // An escaped key is what it decodes to, as serde will read it.
                let is = |name: &str| {
                    let key = &json[at..end];
                    (key.len() == name.len() + 2 && &key[1..key.len() - 1] == name.as_bytes())
                        || (key.contains(&b'\\')
                            && serde_json::from_slice::<String>(key).is_ok_and(|k| k == name))
                };
                let is_data = depth == 3 && is("data");
                if depth == 1 && id.is_none() && is("id") {
                    let colon = skip_ws(json, end);
                    if json.get(colon) == Some(&b':') {
                        let start = skip_ws(json, colon + 1);
                        id = Some((start, value_end(json, start)?));
                        if only_id {
                            return Some(Outline { text: out, id });
                        }
                    }
                }
                at = end;
                if is_data && !only_id {
                    let colon = skip_ws(json, at);
                    if json.get(colon) == Some(&b':') {
                        let start = skip_ws(json, colon + 1);
                        let stop = value_end(json, start)?;
                        out.extend_from_slice(&json[copied..start]);
                        out.extend_from_slice(format!("[{start},{}]", stop - start).as_bytes());
                        (at, copied) = (stop, stop);
                    }
                }
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    out.extend_from_slice(&json[copied..]);
    Some(Outline { text: out, id })
}

/// What [`outline`] makes of a body's JSON.
struct Outline {
    /// The JSON with each tensor's `data` replaced by its [`Span`].
    text: Vec<u8>,
    /// Where the value of the top-level member `id` is (its first): start and end.
    id: Option<(usize, usize)>,
}

fn skip_ws(json: &[u8], mut at: usize) -> usize {
    while json.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// One past the closing quote of the string whose opening quote is at `at`.
fn string_end(json: &[u8], at: usize) -> Option<usize> {
    let mut from = at + 1;
    loop {
        let found = from + memchr::memchr2(b'"', b'\\', json.get(from..)?)?;
        if json[found] == b'"' {
            return Some(found + 1);
        }
        // An escape: the next byte is never the string's end.
        from = found + 2;
    }
}

/// One past the end of the JSON value that starts at `at`: an array or object by its matching
/// bracket (strings stepped over whole), or a scalar up to the next delimiter (`None` if that
/// is no scalar).
fn value_end(json: &[u8], at: usize) -> Option<usize> {
    match *json.get(at)? {
        b'"' => string_end(json, at),
        open @ (b'[' | b'{') => {
            let close = if open == b'[' { b']' } else { b'}' };
            let (mut depth, mut from) = (0usize, at);
            loop {
                let found = from + memchr::memchr3(b'"', open, close, json.get(from..)?)?;
                from = found + 1;
                match json[found] {
                    b'"' => from = string_end(json, found)?,
                    b if b == open => depth += 1,
                    _ => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(from);
                        }
                    }
                }
            }
        }
        _ => {
            let len = json[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .unwrap_or(json.len() - at);
            // Only a number, `true`, `false` or `null`: text that is no value (`1x`, `:1`, or
            // nothing before the next comma) would otherwise be cut out of the body, which
            // then read as JSON where it is not (and `1x` as the number 1).
            serde_json::from_slice::<serde::de::IgnoredAny>(&json[at..at + len]).ok()?;
            Some(at + len)
        }
    }
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

/// A body's JSON part outlined (see [`outline`]; `what` names it in errors), with the JSON
/// text (where the outline's spans point) and the binary part.
fn outlined(
    body: &Bytes,
    header_length: Option<usize>,
    what: &str,
) -> Result<(Outline, Bytes, Bytes), RestBodyError> {
    let (json, binary) = split(body, header_length)?;
    let outlined =
        outline(&json).ok_or_else(|| malformed(format!("{what} JSON: ends inside a value")))?;
    Ok((outlined, json, binary))
}

/// An outlined body's JSON read as `T`, which may borrow from it.
fn read<'a, T: Deserialize<'a>>(outlined: &'a [u8], what: &str) -> Result<T, RestBodyError> {
    serde_json::from_slice(outlined).map_err(|e| malformed(format!("{what} JSON: {e}")))
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

/// The tensors that `wanted` names, described, and their raw contents in the same order; the
/// binary part must be used up exactly.
fn tensors(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: &str) -> bool {
        true
    }

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
        let r = request(&body, None, "ranker", "2", &all, None).unwrap();
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
        let r = request(&body, Some(json.len()), "m", "", &all, None).unwrap();
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
            request(&short, Some(json.len()), "m", "", &all, None)
                .unwrap_err()
                .reason(),
            "malformed_json"
        );
        let mut long = body.to_vec();
        long.push(0);
        let err = request(&Bytes::from(long), Some(json.len()), "m", "", &all, None).unwrap_err();
        assert!(err.to_string().contains("belong to no tensor"), "{err}");
        assert!(request(&body, Some(body.len() + 1), "m", "", &all, None).is_err());
    }

    #[test]
    fn bad_bodies_say_why_and_never_panic() {
        let req = |json: &str| request(&Bytes::from(json.to_owned()), None, "m", "", &all, None);
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
    fn data_is_found_whatever_it_holds_and_a_cut_body_is_refused_without_a_panic() {
        // Strings holding brackets, quotes and escapes; nesting; whitespace around the colon;
        // an escaped key; `data` members that are not a tensor's (in parameters) left alone.
        let json = r#"{ "parameters" : {"data":"p"},
            "inputs" : [
              {"name":"tags","shape":[3],"datatype":"BYTES","parameters":{"data":[9]},
               "data" : ["a]b[", "q\"uo\\te\"", "}{"]},
              {"name":"grid","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,4]]},
              {"name":"one","shape":[1],"datatype":"FP64","data":2.5e0},
              {"name":"skip","shape":[1],"datatype":"BYTES","data":["]]]\"[[["]}
            ]}"#;
        let body = Bytes::from(json);
        let r = request(&body, None, "m", "", &|n| n != "skip", None).unwrap();
        let names: Vec<&str> = r.inputs.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["tags", "grid", "one"]);
        assert_eq!(
            &r.raw_input_contents[0][..],
            b"\x04\0\0\0a]b[\x08\0\0\0q\"uo\\te\"\x02\0\0\0}{"
        );
        let grid: Vec<i32> = r.raw_input_contents[1]
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(grid, [1, 2, 3, 4]);
        assert_eq!(&r.raw_input_contents[2][..], 2.5f64.to_le_bytes());
        assert_eq!(
            r.parameters["data"].parameter_choice,
            Some(ParameterChoice::StringParam("p".into()))
        );
        // Every prefix of the body: an error or (never) a wrong answer, and no panic.
        for end in 0..json.len() {
            assert!(
                request(&body.slice(..end), None, "m", "", &all, None).is_err(),
                "{end}"
            );
        }
    }

    /// A tensor's raw contents as the model server reads them from the whole body parsed as
    /// JSON (a plain tree, no outline): `None` for what this reference does not model.
    fn reference(tensor: &serde_json::Value) -> Option<(String, Vec<i64>, Vec<u8>)> {
        fn flat<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
            match v {
                serde_json::Value::Array(items) => items.iter().for_each(|i| flat(i, out)),
                other => out.push(other),
            }
        }
        let name = tensor.get("name")?.as_str()?.to_owned();
        let shape = (tensor.get("shape")?.as_array()?.iter())
            .map(serde_json::Value::as_i64)
            .collect::<Option<Vec<i64>>>()?;
        let mut values = Vec::new();
        flat(tensor.get("data")?, &mut values);
        let mut raw = Vec::new();
        for v in values {
            match tensor.get("datatype")?.as_str()? {
                "FP32" => raw.extend((v.as_f64()? as f32).to_le_bytes()),
                "INT64" => raw.extend(v.as_i64()?.to_le_bytes()),
                "BYTES" => {
                    let s = v.as_str()?;
                    raw.extend(u32::try_from(s.len()).ok()?.to_le_bytes());
                    raw.extend(s.as_bytes());
                }
                _ => return None,
            }
        }
        Some((name, shape, raw))
    }

    /// Bodies changed at random in the bytes JSON is made of: never a panic, and whatever the
    /// outline reads from a body that is valid JSON is what a plain parse of the whole body
    /// reads: the same id, and each tensor's name, shape and contents. The outline steps over
    /// strings, brackets and escapes by hand: a slip would log one tensor's values under
    /// another's name.
    #[test]
    fn mutated_bodies_never_panic_and_read_as_a_whole_parse_reads_them() {
        let good = br#"{"id":"r-[1]","parameters":{"note":"a \"data\": [9]","data":[1]},
            "inputs":[
              {"name":"price","shape":[2,2],"datatype":"FP32","data":[[0.5,-1e-3],[2,3.25]]},
              {"name":"item_id","shape":[2],"datatype":"INT64","data":[12,-7]},
              {"name":"tags","shape":[2],"datatype":"BYTES","data":["x]\"{","\u0041b"]},
              {"name":"d\u0061ta","shape":[1],"datatype":"FP32","data":[1.5]}
            ],
            "outputs":[{"name":"score"}]}"#;
        let alphabet = br#"[]{}",:\ 0123456789.-eE datatypeshape"#;
        let mut rng = fastrand::Rng::with_seed(0x853c_49e6_748f_ea9b);
        let mut next = || rng.u64(..);
        let (mut read, mut compared) = (0, 0);
        for _ in 0..20_000 {
            let mut body = good.to_vec();
            for _ in 0..1 + next() % 2 {
                let at = (next() % body.len() as u64) as usize;
                let b = alphabet[(next() % alphabet.len() as u64) as usize];
                match next() % 3 {
                    0 => body[at] = b,
                    1 => body.insert(at, b),
                    _ => {
                        body.remove(at);
                    }
                }
            }
            let bytes = Bytes::from(body.clone());
            let Ok(r) = request(&bytes, None, "m", "", &all, None) else {
                continue;
            };
            read += 1;
            // The id handed back to the caller is the one the record carries.
            assert_eq!(peek_id(&bytes, None).unwrap_or_default(), r.id);
            let Ok(whole) = serde_json::from_slice::<serde_json::Value>(&body) else {
                continue;
            };
            let text = String::from_utf8_lossy(&body);
            assert_eq!(
                r.id,
                whole.get("id").and_then(|i| i.as_str()).unwrap_or_default(),
                "{text}"
            );
            let inputs = whole["inputs"].as_array().expect("inputs were read");
            assert_eq!(inputs.len(), r.inputs.len(), "{text}");
            for ((tensor, raw), json) in r.inputs.iter().zip(&r.raw_input_contents).zip(inputs) {
                let Some((name, shape, want)) = reference(json) else {
                    continue;
                };
                assert_eq!(
                    (&tensor.name, &tensor.shape, raw.as_ref()),
                    (&name, &shape, want.as_slice()),
                    "{text}"
                );
                compared += 1;
            }
        }
        assert!(
            read > 2_000 && compared > 5_000,
            "{read} read, {compared} compared"
        );
    }

    /// A binary-data request as `tritonclient.http` sends it, with `id` as the JSON text of
    /// its id member (none when empty).
    fn binary_request(id: &str, rows: usize) -> (Bytes, usize) {
        let id = if id.is_empty() {
            String::new()
        } else {
            format!(r#""id":{id},"#)
        };
        let json = format!(
            r#"{{{id}"parameters":{{"user":"u7"}},"inputs":[
              {{"name":"item_id","shape":[{rows}],"datatype":"INT64","parameters":{{"binary_data_size":{}}}}},
              {{"name":"price","shape":[{rows}],"datatype":"FP32","parameters":{{"binary_data_size":{},"note":"x"}}}},
              {{"name":"tags","shape":[1],"datatype":"BYTES","parameters":{{"binary_data_size":6}}}}],
              "outputs":[{{"name":"score","parameters":{{"binary_data":true}}}}]}}"#,
            rows * 8,
            rows * 4
        );
        let mut body = json.as_bytes().to_vec();
        body.extend((0..rows as i64).flat_map(|i| (i * 7 - 3).to_le_bytes()));
        body.extend((0..rows).flat_map(|i| (i as f32 * 0.5).to_le_bytes()));
        body.extend(b"\x02\0\0\0ok");
        (Bytes::from(body), json.len())
    }

    /// A header seen before is not read again, and what comes of it is exactly what reading
    /// it gives: for other ids (escaped, null, absent, not a string), other wanted tensors,
    /// other row counts, and bodies changed at random in their JSON or binary part.
    #[test]
    fn kept_headers_read_exactly_as_reading_them_again() {
        let mut cache = HeaderCache::default();
        let some = |n: &str| n != "price";
        let wanted: [&dyn Fn(&str) -> bool; 2] = [&all, &some];
        let check = |cache: &mut HeaderCache, body: &Bytes, len: usize| {
            for w in wanted {
                let fresh = request(body, Some(len), "m", "1", w, None);
                let kept = request(body, Some(len), "m", "1", w, Some(cache));
                assert_eq!(kept, fresh, "{:?}", String::from_utf8_lossy(body));
                if let Ok(r) = fresh {
                    assert_eq!(peek_id(body, Some(len)).unwrap_or_default(), r.id);
                }
            }
        };
        for (id, rows) in [
            (r#""r-1""#, 3),
            (r#""r-2""#, 3),
            (r#""r\"3\u0041""#, 3),
            ("null", 3),
            ("", 3),
            ("17", 3),
            (r#"["r"]"#, 3),
            (r#""r-4""#, 5),
            (r#""r-5""#, 3),
        ] {
            let (body, len) = binary_request(id, rows);
            check(&mut cache, &body, len);
        }
        assert_eq!(
            cache.entries.len(),
            3,
            "one header per row count, and one without an id"
        );
        let (good, len) = binary_request(r#""r-6""#, 3);
        let hit = request(&good, Some(len), "m", "1", &all, Some(&mut cache)).unwrap();
        assert_eq!(hit.id, "r-6");
        assert_eq!(hit.inputs.len(), 3);
        assert_eq!(&hit.raw_input_contents[2][..], b"\x02\0\0\0ok");

        let alphabet = br#"[]{}",:\ 0123456789.-rxnul"#;
        let mut rng = fastrand::Rng::with_seed(0x6a09_e667_f3bc_c908);
        let mut next = || rng.u64(..);
        for _ in 0..5_000 {
            let mut body = good.to_vec();
            let mut header_len = len;
            // Mostly the id's value (which keeps the key), else anywhere.
            let at = if next() % 2 == 0 {
                5 + (next() % 6) as usize
            } else {
                (next() % body.len() as u64) as usize
            };
            let b = alphabet[(next() % alphabet.len() as u64) as usize];
            match next() % 3 {
                0 => body[at] = b,
                1 => {
                    body.insert(at, b);
                    header_len += usize::from(at < len);
                }
                _ => {
                    body.remove(at);
                    header_len -= usize::from(at < len);
                }
            }
            check(&mut cache, &Bytes::from(body), header_len);
        }
    }

    #[test]
    fn only_the_wanted_tensors_are_read() {
        // An unread tensor may hold anything; binary data of skipped tensors is stepped over.
        let json = r#"{"inputs":[
            {"name":"skipped","shape":[1],"datatype":"FP32","data":["not a number"]},
            {"name":"bin_skipped","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}},
            {"name":"kept","shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4}}]}"#;
        let mut body = json.as_bytes().to_vec();
        body.extend_from_slice(&1.0f32.to_le_bytes());
        body.extend_from_slice(&9i32.to_le_bytes());
        let r = request(
            &Bytes::from(body),
            Some(json.len()),
            "m",
            "",
            &|n| n == "kept",
            None,
        )
        .unwrap();
        assert_eq!(r.inputs.len(), 1);
        assert_eq!(r.inputs[0].name, "kept");
        assert_eq!(&r.raw_input_contents[0][..], 9i32.to_le_bytes());
    }

    #[test]
    fn responses_read_json_and_binary_outputs() {
        // As KServe's server writes them: absent members as null.
        let kserve = br#"{"model_name":"ranker","model_version":null,"id":"a","parameters":null,
            "outputs":[{"name":"score","shape":[2],"datatype":"FP32","parameters":null,"data":[3.0,7.5]}]}"#;
        let r = response(&Bytes::from_static(kserve), None, &all).unwrap();
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
        let r = response(&Bytes::from(body), Some(json.len()), &all).unwrap();
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
