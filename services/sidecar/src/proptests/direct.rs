//! The fast path.

use bytes::Bytes;
use featurelog_schemas::featurelog::v1::FeatureLog;
use featurelog_schemas::inference::ModelInferRequest;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use proptest::prelude::*;
use prost::Message as _;
use prost::encoding::WireType;

use super::config;
use super::generators::{mutate, mutations};
use super::reencode::{put, reencode_request};
use super::requests::{element_size, request, rule};
use crate::allowlist::{AllowList, ModelRule};
use crate::extract::CallContext;

fn ctx() -> CallContext<'static> {
    CallContext {
        request_id: "req-1",
        served_at: std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::new(1_790_000_000, 123_456_789),
        instance: "sidecar-a",
        allow_list_version: "v7",
        headers: &[],
    }
}

/// What the model server reads of a logged feature: its raw contents, little-endian.
fn raw_of(values: &featurelog_schemas::featurelog::v1::Values, datatype: i32) -> Vec<u8> {
    use featurelog_schemas::featurelog::v1::DataType;
    match DataType::try_from(datatype) {
        Ok(DataType::Fp32) => values
            .fp32_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        Ok(DataType::Fp64) => values
            .fp64_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        Ok(DataType::Int32) => values
            .int32_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        Ok(DataType::Int64) => values
            .int64_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        _ => Vec::new(),
    }
}

/// The fast path on `raw` against the general path and prost: when it logs a call, the
/// general path logs the same record (byte for byte), the plan cache gives the same, and each
/// logged feature holds the bytes prost decodes as that input's raw contents.
fn check_direct(
    raw: &[u8],
    list: &std::sync::Arc<AllowList>,
    cache: &mut crate::extract::direct::PlanCache,
) -> Result<bool, TestCaseError> {
    let rule = &list.models[0];
    let bytes = Bytes::copy_from_slice(raw);
    let Ok(scanned) = crate::extract::lazy::scan(bytes.clone()) else {
        return Ok(false);
    };
    let fast = crate::extract::direct::encode(rule, &scanned, ctx());
    let cached = cache.plan(list, rule, &scanned).and_then(|plan| {
        let mut out = Vec::new();
        crate::extract::direct::encode_planned(plan, rule, &scanned, ctx(), &mut out)
            .map(|rows| (out, rows))
    });
    prop_assert_eq!(&cached, &fast, "the plan cache's record is the plan's");
    let general = crate::extract::lazy::decode_for_rule(bytes, rule)
        .ok()
        .and_then(|d| crate::extract::extract(rule, &d, None, ctx()).ok());
    let Some((fast, rows)) = fast else {
        return Ok(false);
    };
    let record = FeatureLog::decode(&fast[..]).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(record.row_count, rows);
    let Some(general) = general else {
        return Err(TestCaseError::fail(format!(
            "the fast path logged what the general path does not: {raw:?}"
        )));
    };
    // NaN != NaN: the two records are compared by their encodings.
    prop_assert_eq!(&fast, &general.encode_to_vec(), "{:?}", raw);
    if let Ok(server) = ModelInferRequest::decode(raw) {
        for feature in &record.features {
            let at = server.inputs.iter().position(|i| i.name == feature.name);
            let at = at.ok_or_else(|| TestCaseError::fail("a logged feature is an input"))?;
            let values = feature.values.clone().unwrap_or_default();
            prop_assert_eq!(
                raw_of(&values, feature.datatype),
                server.raw_input_contents[at].to_vec(),
                "{}",
                &feature.name
            );
        }
        if let Some(ids) = &rule.candidate_ids_input {
            let at = server.inputs.iter().position(|i| &i.name == ids);
            if let Some(at) = at.filter(|_| !record.candidate_int_ids.is_empty()) {
                let size = element_size(&server.inputs[at].datatype);
                let want: Vec<i64> = server.raw_input_contents[at]
                    .chunks_exact(size)
                    .map(|c| {
                        if size == 4 {
                            i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        } else {
                            i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                        }
                    })
                    .collect();
                prop_assert_eq!(&record.candidate_int_ids, &want);
            }
        }
    }
    Ok(true)
}

proptest! {
    #![proptest_config(config(1024))]

    /// Raw numeric tensors, as prost writes them and as other writers may, and changed at
    /// random: the fast path logs exactly what the general path logs, or leaves the call to it.
    #[test]
    fn the_fast_path_logs_what_the_general_path_and_prost_read(
        r in request(),
        rule in rule(),
        seed in any::<u64>(),
        how in 0u8..3,
        mutations in mutations(),
    ) {
        let mut raw = r.encode_to_vec();
        if how >= 1 {
            raw = reencode_request(&raw, seed);
        }
        if how == 2 {
            mutate(&mut raw, &mutations);
        }
        let list = std::sync::Arc::new(AllowList {
            version: "v7".into(),
            models: vec![rule],
        });
        let mut cache = crate::extract::direct::PlanCache::default();
        check_direct(&raw, &list, &mut cache)?;
        // Again through the same cache (a hit).
        check_direct(&raw, &list, &mut cache)?;
    }
}

// ---------------------------------------------------------------------------------------------
// What the properties found, kept as the exact inputs.

/// A logged tensor whose parameters prost cannot read (a map entry cut short, or the map
/// field as a varint): the general path refuses the call, the fast path logged it.
#[test]
fn the_fast_path_refuses_a_tensor_the_general_path_refuses() {
    let tensor = InferInputTensor {
        name: "price".into(),
        datatype: "FP32".into(),
        shape: vec![2],
        ..InferInputTensor::default()
    }
    .encode_to_vec();
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
    let cut_entry = put(4, WireType::LengthDelimited, &[0x0a, 5, b'x']);
    let as_varint = put(4, WireType::Varint, &[1]);
    let good_entry = put(4, WireType::LengthDelimited, &[0x0a, 1, b'x']);
    for (parameters, valid) in [(cut_entry, false), (as_varint, false), (good_entry, true)] {
        let mut request = put(1, WireType::LengthDelimited, b"ranker");
        request.extend(put(
            5,
            WireType::LengthDelimited,
            &[&tensor[..], &parameters].concat(),
        ));
        request.extend(put(7, WireType::LengthDelimited, &[0; 8]));
        assert_eq!(ModelInferRequest::decode(&request[..]).is_ok(), valid);
        let scanned = crate::extract::lazy::scan(Bytes::from(request.clone())).unwrap();
        let fast = crate::extract::direct::encode(&rule, &scanned, ctx());
        assert_eq!(fast.is_some(), valid, "{request:?}");
        let general = crate::extract::lazy::decode_for_rule(Bytes::from(request), &rule);
        assert_eq!(general.is_ok(), valid);
    }
}
