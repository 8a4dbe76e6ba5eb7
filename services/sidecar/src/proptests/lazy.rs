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

/// Groups of fields a ModelInferRequest and its tensors do not declare, which prost steps over
/// (the scan's walker refuses groups; the sidecar steps over them as prost does). The fast
/// path leaves a tensor with one to the general path.
#[test]
fn unknown_groups_are_stepped_over_as_prost_steps_over_them() {
    use prost::encoding::{WireType, encode_key};

    use super::reencode::put;

    let group = |number: u32, inner: &[u8]| {
        let mut out = Vec::new();
        encode_key(number, WireType::StartGroup, &mut out);
        out.extend_from_slice(inner);
        encode_key(number, WireType::EndGroup, &mut out);
        out
    };
    let inner = [
        put(1, WireType::Varint, &[5]),
        group(31, &put(2, WireType::LengthDelimited, &[0x0c])),
    ]
    .concat();
    let tensor = |name: &str| {
        let t = InferInputTensor {
            name: name.into(),
            datatype: "FP32".into(),
            shape: vec![2],
            ..InferInputTensor::default()
        };
        [t.encode_to_vec(), group(30, &inner)].concat()
    };
    let request = |with_parameters_group: bool| {
        let mut raw = put(1, WireType::LengthDelimited, b"ranker");
        raw.extend(group(30, &inner));
        raw.extend(put(3, WireType::LengthDelimited, b"x"));
        for name in ["price", "other"] {
            raw.extend(put(5, WireType::LengthDelimited, &tensor(name)));
            raw.extend(group(8, &[]));
            raw.extend(put(7, WireType::LengthDelimited, &[0; 8]));
        }
        // A group with the number of `parameters` in a tensor: prost refuses the tensor.
        if with_parameters_group {
            let p = [&tensor("p")[..], &group(4, &inner)].concat();
            raw.extend(put(5, WireType::LengthDelimited, &p));
            raw.extend(put(7, WireType::LengthDelimited, &[0; 8]));
        }
        raw
    };
    let rule = ModelRule {
        name: "ranker".into(),
        version: None,
        features: vec!["price".into()],
        outputs: vec![],
        candidate_ids_input: None,
        candidate_ids_parameter: None,
        parameters: vec![],
        headers: vec![],
        sample_rate: 1.0,
        top_k: None,
    };
    let valid = request(false);
    assert!(check_lazy(&valid, &rule).unwrap(), "{valid:?}");
    let scanned = crate::extract::lazy::scan(Bytes::from(valid)).unwrap();
    let ctx = crate::extract::CallContext {
        request_id: "x",
        served_at: std::time::SystemTime::UNIX_EPOCH,
        instance: "i",
        allow_list_version: "v",
        headers: &[],
    };
    assert_eq!(crate::extract::direct::encode(&rule, &scanned, ctx), None);
    // The tensor with a `parameters` group is refused by prost, and by the rule naming it.
    let rule = ModelRule {
        features: vec!["p".into()],
        ..rule
    };
    let raw = request(true);
    assert!(ModelInferRequest::decode(&raw[..]).is_err());
    assert!(crate::extract::lazy::decode_for_rule(Bytes::from(raw), &rule).is_err());
}
