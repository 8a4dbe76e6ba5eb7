//! Reading only what the allow list needs from a ModelInferRequest.
//!
//! A recommender's request can carry dozens of input tensors of which a few are logged. Decoding
//! the whole message allocates every tensor's name, shape and contents; this scans the top-level
//! fields once, keeps each input and raw-contents entry as a slice of the original buffer (no
//! copy), and decodes fully only the inputs the rule names. The result is a smaller
//! `ModelInferRequest` that [`crate::extract`] reads like the real one.

use std::collections::HashSet;
use std::ops::Range;

use bytes::Bytes;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use featurelog_schemas::inference::{InferParameter, ModelInferRequest};
use featurelog_schemas::tensor::TensorError;
use featurelog_schemas::wire::model_infer_request::{
    ID, INPUTS, MODEL_NAME, MODEL_VERSION, PARAMETERS, RAW_INPUT_CONTENTS,
};
use featurelog_schemas::wire::{Field, WireType::LengthDelimited, infer_input_tensor};
use prost::Message;

use crate::allowlist::ModelRule;
use crate::extract::fields::{NotField, fields};

/// Why a request could not be read.
#[derive(Debug, PartialEq)]
pub enum LazyError {
    /// Not a valid ModelInferRequest.
    Malformed,
    /// Raw contents for some inputs but not for all.
    RawCount(TensorError),
}

/// The `name` of an encoded tensor message, borrowed from it: no allocation for the many
/// inputs that are not logged.
fn tensor_name(buf: &[u8]) -> Result<&[u8], LazyError> {
    let mut name: &[u8] = &[];
    for f in fields(buf) {
        match f {
            // The last occurrence wins, as in a full decode.
            Ok(f) if (f.number, f.wire) == (infer_input_tensor::NAME, LengthDelimited) => {
                name = f.bytes(buf);
            }
            Ok(_) | Err(NotField::Group(_)) => {}
            Err(NotField::Malformed) => return Err(LazyError::Malformed),
        }
    }
    Ok(name)
}

#[derive(Clone, PartialEq, Message)]
struct ParameterEntry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(message, optional, tag = "2")]
    value: Option<InferParameter>,
}

fn string(field: &Field, buf: &[u8]) -> Result<String, LazyError> {
    field
        .str(buf)
        .map(str::to_owned)
        .map_err(|_| LazyError::Malformed)
}

/// One pass over a request's top-level fields: its head, and where each input, raw-contents
/// entry and parameter lies in the buffer. The publisher picks the allow-list rule from the
/// head, then decodes only what the rule needs with [`Scanned::decode_for_rule`].
///
/// Positions rather than `Bytes` slices: a slice costs an atomic reference count up and down,
/// and a request carries a hundred of them of which a dozen are read.
#[derive(Debug, Default)]
pub struct Scanned {
    /// The model's name.
    pub model_name: String,
    /// The model's version.
    pub model_version: String,
    /// The request's own id (empty if none).
    pub id: String,
    buf: Bytes,
    inputs: Vec<Range<usize>>,
    raw: Vec<Range<usize>>,
    params: Vec<Range<usize>>,
    /// The encoded input fields, keys and lengths included, when they are one run of the
    /// buffer (as every encoder writes a repeated field): equal runs are equal input headers.
    inputs_run: Option<Range<usize>>,
}

/// Scans a serialised ModelInferRequest.
pub fn scan(buf: Bytes) -> Result<Scanned, LazyError> {
    // Sized for a typical recommender's request, so that pushing is not reallocating.
    let mut s = Scanned {
        inputs: Vec::with_capacity(64),
        raw: Vec::with_capacity(64),
        ..Scanned::default()
    };
    let mut run_contiguous = true;
    let mut run = 0..0;
    for f in fields(&buf) {
        let f = match f {
            Ok(f) => f,
            // Name, version or id as a group: prost refuses the message (below). Any other
            // group is stepped over, as prost does.
            Err(NotField::Group(number)) if (MODEL_NAME..=ID).contains(&number) => {
                return Err(LazyError::Malformed);
            }
            Err(NotField::Group(_)) => continue,
            Err(NotField::Malformed) => return Err(LazyError::Malformed),
        };
        match (f.number, f.wire) {
            (MODEL_NAME, LengthDelimited) => s.model_name = string(&f, &buf)?,
            (MODEL_VERSION, LengthDelimited) => s.model_version = string(&f, &buf)?,
            (ID, LengthDelimited) => s.id = string(&f, &buf)?,
            (PARAMETERS, LengthDelimited) => s.params.push(f.range()),
            (INPUTS, LengthDelimited) => {
                if s.inputs.is_empty() {
                    run.start = f.start;
                } else if run.end != f.start {
                    run_contiguous = false;
                }
                run.end = f.end();
                s.inputs.push(f.range());
            }
            (RAW_INPUT_CONTENTS, LengthDelimited) => s.raw.push(f.range()),
            // Name, version or id of another wire type: prost refuses the message, and so
            // does the proxy's reading of the id it gives back (a record logged anyway
            // would carry another id than the caller was given).
            (MODEL_NAME..=ID, _) => return Err(LazyError::Malformed),
            // Unknown fields are skipped, as prost does.
            _ => {}
        }
    }
    if run_contiguous && !s.inputs.is_empty() {
        s.inputs_run = Some(run);
    }
    s.buf = buf;
    Ok(s)
}

/// [`scan`] then [`Scanned::decode_for_rule`].
pub fn decode_for_rule(buf: Bytes, rule: &ModelRule) -> Result<ModelInferRequest, LazyError> {
    scan(buf)?.decode_for_rule(rule)
}

impl Scanned {
    /// The number of inputs.
    pub(crate) fn input_count(&self) -> usize {
        self.inputs.len()
    }

    /// The number of raw-contents entries.
    pub(crate) fn raw_count(&self) -> usize {
        self.raw.len()
    }

    /// The `i`-th encoded input tensor.
    pub(crate) fn input(&self, i: usize) -> &[u8] {
        self.inputs.get(i).map_or(&[], |r| &self.buf[r.clone()])
    }

    /// The `i`-th raw-contents entry.
    pub(crate) fn raw(&self, i: usize) -> &[u8] {
        self.raw.get(i).map_or(&[], |r| &self.buf[r.clone()])
    }

    /// All input fields as one run of bytes, if they are one (see [`Scanned::inputs_run`]).
    pub(crate) fn inputs_run(&self) -> Option<&[u8]> {
        self.inputs_run.as_ref().map(|r| &self.buf[r.clone()])
    }

    /// The request with only the inputs `rule` needs (its features and candidate-id tensor),
    /// their raw contents at matching positions, and its parameters when the rule reads any.
    pub fn decode_for_rule(self, rule: &ModelRule) -> Result<ModelInferRequest, LazyError> {
        let Scanned {
            model_name,
            model_version,
            id,
            buf,
            inputs,
            raw,
            params,
            inputs_run: _,
        } = self;
        let mut request = ModelInferRequest {
            model_name,
            model_version,
            id,
            ..ModelInferRequest::default()
        };
        if !raw.is_empty() && raw.len() != inputs.len() {
            return Err(LazyError::RawCount(TensorError::RawCountMismatch {
                inputs: inputs.len(),
                raw: raw.len(),
            }));
        }
        let wanted: HashSet<&str> = rule
            .features
            .iter()
            .chain(&rule.candidate_ids_input)
            .map(String::as_str)
            .collect();
        for (i, input) in inputs.into_iter().enumerate() {
            let name = tensor_name(&buf[input.clone()])?;
            if !std::str::from_utf8(name).is_ok_and(|n| wanted.contains(n)) {
                continue;
            }
            request.inputs.push(
                InferInputTensor::decode(buf.slice(input)).map_err(|_| LazyError::Malformed)?,
            );
            if let Some(r) = raw.get(i) {
                request.raw_input_contents.push(buf.slice(r.clone()));
            }
        }
        if !rule.parameters.is_empty() || rule.candidate_ids_parameter.is_some() {
            for entry in params {
                let entry =
                    ParameterEntry::decode(&buf[entry]).map_err(|_| LazyError::Malformed)?;
                request
                    .parameters
                    .insert(entry.key, entry.value.unwrap_or_default());
            }
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use featurelog_schemas::inference::infer_parameter::ParameterChoice;
    use featurelog_schemas::tensor::TensorValues;

    fn rule(features: &[&str]) -> ModelRule {
        ModelRule {
            name: "m".into(),
            version: None,
            features: features.iter().map(|s| s.to_string()).collect(),
            outputs: vec![],
            candidate_ids_input: Some("ids".into()),
            candidate_ids_parameter: None,
            parameters: vec!["surface".into()],
            headers: vec![],
            sample_rate: 1.0,
            top_k: None,
        }
    }

    fn full(raw: bool) -> ModelInferRequest {
        let mut r = ModelInferRequest {
            model_name: "m".into(),
            model_version: "2".into(),
            id: "x".into(),
            parameters: [(
                "surface".to_string(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::StringParam("home".into())),
                },
            )]
            .into(),
            ..Default::default()
        };
        for (i, name) in ["a", "ids", "b", "c"].iter().enumerate() {
            let values = TensorValues::Int64(vec![i as i64; 3]);
            let mut t = InferInputTensor {
                name: name.to_string(),
                datatype: "INT64".into(),
                shape: vec![3],
                ..Default::default()
            };
            if raw {
                r.raw_input_contents.push(values.to_raw());
            } else {
                t.contents = Some(values.to_contents());
            }
            r.inputs.push(t);
        }
        r
    }

    #[test]
    fn keeps_only_the_rules_inputs_with_their_raw_contents_aligned() {
        for raw in [false, true] {
            let original = full(raw);
            let got =
                decode_for_rule(Bytes::from(original.encode_to_vec()), &rule(&["c", "a"])).unwrap();
            assert_eq!(
                (
                    got.model_name.as_str(),
                    got.model_version.as_str(),
                    got.id.as_str()
                ),
                ("m", "2", "x")
            );
            let names: Vec<_> = got.inputs.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["a", "ids", "c"]);
            if raw {
                assert_eq!(got.raw_input_contents.len(), 3);
                assert_eq!(got.raw_input_contents[2], original.raw_input_contents[3]);
            } else {
                assert_eq!(got.inputs[2].contents, original.inputs[3].contents);
            }
            assert_eq!(got.parameters, original.parameters);
        }
    }

    #[test]
    fn garbage_and_mismatched_raw_counts_are_errors_not_panics() {
        assert_eq!(
            decode_for_rule(Bytes::from_static(&[0x2a, 0xff, 0xff]), &rule(&[])),
            Err(LazyError::Malformed)
        );
        let mut r = full(true);
        r.raw_input_contents.pop();
        assert!(matches!(
            decode_for_rule(Bytes::from(r.encode_to_vec()), &rule(&[])),
            Err(LazyError::RawCount(_))
        ));
    }
}
