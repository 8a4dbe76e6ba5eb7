//! Turning one inference call (request and response) into a [`FeatureLog`] record, as the
//! allow-list rule for its model says: only the listed inputs and outputs, one row per candidate,
//! values exactly as the model received them, optionally only the top K candidates.

pub mod direct;
pub(crate) mod fields;
pub mod framing;
pub mod lazy;
pub mod rest_json;

use std::time::SystemTime;

use featurelog_schemas::featurelog::v1::{Feature, FeatureLog};
use featurelog_schemas::inference::infer_parameter::ParameterChoice;
use featurelog_schemas::inference::{
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse,
};
use featurelog_schemas::tensor::{self, Tensor, TensorError, TensorValues};

use crate::allowlist::ModelRule;
use crate::reason::Dropped;

/// Why a call could not be turned into a record. The call itself was still forwarded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExtractError {
    /// A tensor could not be decoded.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// A tensor's first dimension is neither the candidate count nor 1.
    #[error("tensor {tensor:?} has {first} rows but the request has {rows} candidates")]
    Rows {
        /// The tensor.
        tensor: String,
        /// Its first dimension.
        first: i64,
        /// The candidate count.
        rows: usize,
    },
    /// The candidate ids could not be read.
    #[error("candidate ids from {source_name:?}: {reason}")]
    CandidateIds {
        /// The tensor or parameter named in the allow list.
        source_name: String,
        /// What is wrong.
        reason: String,
    },
    /// The output to rank by is missing or not one number per candidate.
    #[error("top-k by {output:?}: {reason}")]
    TopK {
        /// The output.
        output: String,
        /// What is wrong.
        reason: String,
    },
}

impl ExtractError {
    /// A short, stable reason for metric labels.
    pub fn reason(&self) -> Dropped {
        match self {
            ExtractError::Tensor(e) => Dropped::from(e),
            ExtractError::Rows { .. } => Dropped::RowMismatch,
            ExtractError::CandidateIds { .. } => Dropped::BadCandidateIds,
            ExtractError::TopK { .. } => Dropped::BadTopKOutput,
        }
    }
}

/// What is known about a call besides its messages.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    /// The request id chosen by the proxy.
    pub request_id: &'a str,
    /// When the sidecar received the call.
    pub served_at: SystemTime,
    /// This sidecar's instance name.
    pub instance: &'a str,
    /// The allow-list version that chose the rule.
    pub allow_list_version: &'a str,
    /// The request headers some rule logs, as the proxy kept them (`ModelRule::headers`).
    pub headers: &'a [(String, String)],
}

/// Decodes the tensor called `name` among `tensors` (name, datatype, shape, typed contents),
/// whose raw contents, if any, are `raw` in the same order.
fn decode_named<'a>(
    mut tensors: impl Iterator<Item = (&'a str, &'a str, &'a [i64], Option<&'a InferTensorContents>)>,
    raw: &[bytes::Bytes],
    name: &str,
) -> Result<Option<Tensor>, ExtractError> {
    let Some((i, (n, datatype, shape, contents))) =
        tensors.by_ref().enumerate().find(|(_, t)| t.0 == name)
    else {
        return Ok(None);
    };
    Ok(Some(tensor::decode(
        n,
        datatype,
        shape,
        contents,
        raw.get(i),
    )?))
}

fn input_tensor(request: &ModelInferRequest, name: &str) -> Result<Option<Tensor>, ExtractError> {
    let raw = &request.raw_input_contents;
    if !raw.is_empty() && raw.len() != request.inputs.len() {
        return Err(TensorError::RawCountMismatch {
            inputs: request.inputs.len(),
            raw: raw.len(),
        }
        .into());
    }
    let tensors = request.inputs.iter().map(|t| {
        (
            t.name.as_str(),
            t.datatype.as_str(),
            t.shape.as_slice(),
            t.contents.as_ref(),
        )
    });
    decode_named(tensors, raw, name)
}

fn output_tensor(
    response: &ModelInferResponse,
    name: &str,
) -> Result<Option<Tensor>, ExtractError> {
    let tensors = response.outputs.iter().map(|t| {
        (
            t.name.as_str(),
            t.datatype.as_str(),
            t.shape.as_slice(),
            t.contents.as_ref(),
        )
    });
    decode_named(tensors, &response.raw_output_contents, name)
}

fn parameter_string(p: &InferParameter) -> String {
    match &p.parameter_choice {
        Some(ParameterChoice::BoolParam(b)) => b.to_string(),
        Some(ParameterChoice::Int64Param(i)) => i.to_string(),
        Some(ParameterChoice::StringParam(s)) => s.clone(),
        Some(ParameterChoice::DoubleParam(d)) => d.to_string(),
        Some(ParameterChoice::Uint64Param(u)) => u.to_string(),
        None => String::new(),
    }
}

/// A column before row selection: the tensor and whether it has one row per candidate.
struct Column {
    tensor: Tensor,
    per_request: bool,
    row_shape: Vec<i64>,
    per_row: usize,
}

fn column(tensor: Tensor, rows: usize) -> Result<Column, ExtractError> {
    let (per_request, row_shape) = match tensor.shape.first() {
        None => (true, Vec::new()),
        Some(&n) if usize::try_from(n).is_ok_and(|n| n == rows) => {
            (false, tensor.shape[1..].to_vec())
        }
        Some(1) => (true, tensor.shape[1..].to_vec()),
        Some(&n) => {
            return Err(ExtractError::Rows {
                tensor: tensor.name.clone(),
                first: n,
                rows,
            });
        }
    };
    // The shape was validated against the data when the tensor was decoded.
    let per_row = tensor::element_count(&tensor.name, &row_shape)?;
    Ok(Column {
        tensor,
        per_request,
        row_shape,
        per_row,
    })
}

impl Column {
    fn into_feature(self, selected: Option<&[usize]>) -> Feature {
        let values = match selected {
            Some(rows) if !self.per_request => self.tensor.values.select_rows(rows, self.per_row),
            _ => self.tensor.values,
        };
        Feature {
            name: self.tensor.name,
            datatype: self.tensor.datatype as i32,
            row_shape: self.row_shape,
            values: Some(values.into_values()),
            per_request: self.per_request,
        }
    }
}

fn top_k_rows(
    columns: &[Column],
    by: &str,
    k: usize,
    rows: usize,
) -> Result<Option<Vec<usize>>, ExtractError> {
    let err = |reason: &str| ExtractError::TopK {
        output: by.to_owned(),
        reason: reason.to_owned(),
    };
    let col = columns
        .iter()
        .find(|c| c.tensor.name == by)
        .ok_or_else(|| err("the response has no such output"))?;
    if col.per_request || col.per_row != 1 {
        return Err(err("it must hold one number per candidate"));
    }
    let scores = col
        .tensor
        .values
        .to_f64()
        .ok_or_else(|| err("it is not numeric"))?;
    if k >= rows {
        return Ok(None);
    }
    let mut order: Vec<usize> = (0..rows).collect();
    // Highest first; NaN ranks last so a broken score never pushes out a real one.
    order.sort_by(|&a, &b| {
        let (x, y) = (scores[a], scores[b]);
        y.partial_cmp(&x)
            .unwrap_or_else(|| x.is_nan().cmp(&y.is_nan()))
    });
    order.truncate(k);
    Ok(Some(order))
}

/// Builds the record for one call.
pub fn extract(
    rule: &ModelRule,
    request: &ModelInferRequest,
    response: Option<&ModelInferResponse>,
    ctx: CallContext<'_>,
) -> Result<FeatureLog, ExtractError> {
    // Candidate ids first: they fix the row count when present. Signed integer ids stay
    // numbers (`candidate_int_ids`); the others are text.
    let mut candidate_int_ids: Vec<i64> = Vec::new();
    let mut candidate_ids = match (&rule.candidate_ids_input, &rule.candidate_ids_parameter) {
        (Some(name), _) => {
            let t = input_tensor(request, name)?.ok_or_else(|| ExtractError::CandidateIds {
                source_name: name.clone(),
                reason: "the request has no such input".into(),
            })?;
            match t.values {
                TensorValues::Int32(v) => {
                    candidate_int_ids = v.into_iter().map(i64::from).collect();
                    Vec::new()
                }
                TensorValues::Int64(v) => {
                    candidate_int_ids = v;
                    Vec::new()
                }
                values => values.to_ids().ok_or_else(|| ExtractError::CandidateIds {
                    source_name: name.clone(),
                    reason: "ids must be integers or BYTES".into(),
                })?,
            }
        }
        (None, Some(param)) => match request.parameters.get(param) {
            // Ids are text, comma-separated, or one integer. A flag, a fraction or an empty
            // piece is no id: logged, it would join no impression and could not be told
            // from a real one in the training rows.
            Some(p) => {
                let bad = |reason: &str| ExtractError::CandidateIds {
                    source_name: param.clone(),
                    reason: reason.into(),
                };
                let ids: Vec<String> = match &p.parameter_choice {
                    Some(ParameterChoice::StringParam(s)) => {
                        s.split(',').map(|s| s.trim().to_owned()).collect()
                    }
                    Some(ParameterChoice::Int64Param(_) | ParameterChoice::Uint64Param(_)) => {
                        vec![parameter_string(p)]
                    }
                    _ => return Err(bad("ids must be a comma-separated string or an integer")),
                };
                if ids.iter().any(String::is_empty) {
                    return Err(bad("an id is empty"));
                }
                ids
            }
            None => {
                return Err(ExtractError::CandidateIds {
                    source_name: param.clone(),
                    reason: "the request has no such parameter".into(),
                });
            }
        },
        (None, None) => Vec::new(),
    };

    let mut inputs = Vec::with_capacity(rule.features.len());
    for name in &rule.features {
        if let Some(t) = input_tensor(request, name)? {
            inputs.push(t);
        }
    }
    let mut outputs = Vec::with_capacity(rule.outputs.len() + 1);
    if let Some(response) = response {
        for name in &rule.outputs {
            if let Some(t) = output_tensor(response, name)? {
                outputs.push(t);
            }
        }
    }

    let rows = if rule.candidate_ids_input.is_some() || rule.candidate_ids_parameter.is_some() {
        candidate_ids.len() + candidate_int_ids.len()
    } else {
        inputs
            .iter()
            .chain(&outputs)
            .filter_map(|t| t.shape.first())
            .filter_map(|&n| usize::try_from(n).ok())
            .max()
            .unwrap_or(1)
    };

    let features: Vec<Column> = inputs
        .into_iter()
        .map(|t| column(t, rows))
        .collect::<Result<_, _>>()?;
    let mut output_columns: Vec<Column> = outputs
        .into_iter()
        .map(|t| column(t, rows))
        .collect::<Result<_, _>>()?;

    let selected = match &rule.top_k {
        Some(top) => {
            // The ranking output need not be logged itself.
            if !output_columns.iter().any(|c| c.tensor.name == top.by) {
                let t = response
                    .map(|r| output_tensor(r, &top.by))
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| ExtractError::TopK {
                        output: top.by.clone(),
                        reason: "the response has no such output".into(),
                    })?;
                let ranked = [column(t, rows)?];
                top_k_rows(&ranked, &top.by, top.k, rows)?
            } else {
                top_k_rows(&output_columns, &top.by, top.k, rows)?
            }
        }
        None => None,
    };
    let row_count = match &selected {
        Some(rows) => {
            if !candidate_ids.is_empty() {
                candidate_ids = rows.iter().map(|&r| candidate_ids[r].clone()).collect();
            }
            if !candidate_int_ids.is_empty() {
                candidate_int_ids = rows.iter().map(|&r| candidate_int_ids[r]).collect();
            }
            rows.len()
        }
        None => rows,
    };

    let served_at = ctx
        .served_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| prost_types::Timestamp {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        })
        .ok();
    Ok(FeatureLog {
        request_id: ctx.request_id.to_owned(),
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        served_at,
        sidecar_instance: ctx.instance.to_owned(),
        allow_list_version: ctx.allow_list_version.to_owned(),
        row_count: u32::try_from(row_count).unwrap_or(u32::MAX),
        candidate_ids,
        candidate_int_ids,
        features: features
            .into_iter()
            .map(|c| c.into_feature(selected.as_deref()))
            .collect(),
        outputs: output_columns
            .drain(..)
            .map(|c| c.into_feature(selected.as_deref()))
            .collect(),
        parameters: rule
            .headers
            .iter()
            .filter_map(|h| {
                ctx.headers
                    .iter()
                    .find(|(name, _)| name == h)
                    .map(|(_, v)| (h.clone(), v.clone()))
            })
            // Collected after the headers: a request parameter of the same name wins.
            .chain(rule.parameters.iter().filter_map(|p| {
                request
                    .parameters
                    .get(p)
                    .map(|v| (p.clone(), parameter_string(v)))
            }))
            .collect(),
    })
}

#[cfg(test)]
mod tests;
