//! `lazy::scan` / `Scanned::decode_for_rule` against `ModelInferRequest::decode`.

use std::collections::HashSet;

use bytes::Bytes;
use featurelog_schemas::inference::ModelInferRequest;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use proptest::prelude::*;
use prost::Message as _;

use super::config;
use super::generators::{mutate, mutations};
use super::reencode::reencode_request;
use super::requests::{request, rule};
use crate::allowlist::ModelRule;
use crate::extract::lazy::LazyError;

/// What the rule's decode must hold, from prost's decode of the whole request: the head, the
/// inputs the rule names (every one with that name, in order) with their raw contents at the
/// same positions, and the parameters when the rule reads any.
fn expected_for_rule(
    full: &ModelInferRequest,
    rule: &ModelRule,
) -> Result<ModelInferRequest, LazyError> {
    if !full.raw_input_contents.is_empty() && full.raw_input_contents.len() != full.inputs.len() {
        return Err(LazyError::RawCount(
            featurelog_schemas::tensor::TensorError::RawCountMismatch {
                inputs: full.inputs.len(),
                raw: full.raw_input_contents.len(),
            },
        ));
    }
    let wanted: HashSet<&str> = rule
        .features
        .iter()
        .chain(&rule.candidate_ids_input)
        .map(String::as_str)
        .collect();
    let mut out = ModelInferRequest {
        model_name: full.model_name.clone(),
        model_version: full.model_version.clone(),
        id: full.id.clone(),
        ..ModelInferRequest::default()
    };
    for (i, input) in full.inputs.iter().enumerate() {
        if wanted.contains(input.name.as_str()) {
            out.inputs.push(input.clone());
            if let Some(raw) = full.raw_input_contents.get(i) {
                out.raw_input_contents.push(raw.clone());
            }
        }
    }
    if !rule.parameters.is_empty() || rule.candidate_ids_parameter.is_some() {
        out.parameters = full.parameters.clone();
    }
    Ok(out)
}

/// `lazy::decode_for_rule` on `raw` against prost's decode of it: where prost reads the
/// request, the lazy decode reads the same; where prost refuses it, the lazy decode may still
/// read it (it steps over what the rule does not need without decoding it: the model server
/// refuses such a call, and a failed call is never logged), but never panics.
fn check_lazy(raw: &[u8], rule: &ModelRule) -> Result<bool, TestCaseError> {
    let got = crate::extract::lazy::decode_for_rule(Bytes::copy_from_slice(raw), rule);
    let Ok(full) = ModelInferRequest::decode(raw) else {
        return Ok(false);
    };
    let want = expected_for_rule(&full, rule);
    prop_assert_eq!(&got, &want, "{:?}", raw);
    let scanned = crate::extract::lazy::scan(Bytes::copy_from_slice(raw));
    let scanned = scanned.map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    prop_assert_eq!(
        (&scanned.model_name, &scanned.model_version, &scanned.id),
        (&full.model_name, &full.model_version, &full.id)
    );
    prop_assert_eq!(scanned.input_count(), full.inputs.len());
    prop_assert_eq!(scanned.raw_count(), full.raw_input_contents.len());
    for (i, raw) in full.raw_input_contents.iter().enumerate() {
        prop_assert_eq!(scanned.raw(i), &raw[..]);
    }
    for (i, input) in full.inputs.iter().enumerate() {
        let read = InferInputTensor::decode(scanned.input(i));
        prop_assert_eq!(read.as_ref().ok(), Some(input));
    }
    Ok(true)
}

proptest! {
    #![proptest_config(config(1024))]

    /// Requests as prost writes them and as other writers may: the rule's decode holds what
    /// prost's full decode holds.
    #[test]
    fn lazy_decodes_read_as_prost_reads_them(r in request(), rule in rule(), seed in any::<u64>()) {
        let plain = r.encode_to_vec();
        prop_assert!(check_lazy(&plain, &rule)?);
        let other = reencode_request(&plain, seed);
        prop_assert!(check_lazy(&other, &rule)?, "a valid re-encoding: {:?}", other);
    }

    /// The same changed at random.
    #[test]
    fn mutated_requests_lazily_decode_as_prost_or_not_at_all(
        r in request(),
        rule in rule(),
        seed in any::<u64>(),
        reencode in any::<bool>(),
        mutations in mutations(),
    ) {
        let mut raw = r.encode_to_vec();
        if reencode {
            raw = reencode_request(&raw, seed);
        }
        mutate(&mut raw, &mutations);
        check_lazy(&raw, &rule)?;
    }
}
