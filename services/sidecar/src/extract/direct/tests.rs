//! Unit tests of the fast path: its records decode equal to the general path's, and it declines
//! every call it cannot encode exactly.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use featurelog_schemas::featurelog::v1::FeatureLog;
use featurelog_schemas::inference::ModelInferRequest;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use featurelog_schemas::tensor::TensorValues;
use featurelog_schemas::wire::model_infer_request;
use prost::Message;

use super::*;
use crate::allowlist::TopK;

fn rule(features: &[&str], ids: Option<&str>) -> ModelRule {
    ModelRule {
        name: "ranker".into(),
        version: None,
        features: features.iter().map(|s| s.to_string()).collect(),
        outputs: vec![],
        candidate_ids_input: ids.map(str::to_owned),
        candidate_ids_parameter: None,
        parameters: vec![],
        headers: vec![],
        sample_rate: 1.0,
        top_k: None,
    }
}

fn request(tensors: &[(&str, &str, &[i64], TensorValues)]) -> ModelInferRequest {
    let mut r = ModelInferRequest {
        model_name: "ranker".into(),
        model_version: "3".into(),
        id: "req-1".into(),
        ..Default::default()
    };
    for (name, datatype, shape, values) in tensors {
        r.inputs.push(InferInputTensor {
            name: name.to_string(),
            datatype: datatype.to_string(),
            shape: shape.to_vec(),
            ..Default::default()
        });
        r.raw_input_contents.push(values.to_raw());
    }
    r
}

fn ctx() -> CallContext<'static> {
    CallContext {
        request_id: "req-1",
        served_at: SystemTime::UNIX_EPOCH + Duration::new(1_790_000_000, 123_456_789),
        instance: "sidecar-a",
        allow_list_version: "v7",
        headers: &[],
    }
}

/// The general path's record for the same call.
fn general(rule: &ModelRule, request: &ModelInferRequest) -> FeatureLog {
    general_encoded(rule, &request.encode_to_vec())
}

fn general_encoded(rule: &ModelRule, request: &[u8]) -> FeatureLog {
    let scanned = crate::extract::lazy::scan(Bytes::copy_from_slice(request)).unwrap();
    let decoded = scanned.decode_for_rule(rule).unwrap();
    crate::extract::extract(rule, &decoded, None, ctx()).unwrap()
}

fn fast(rule: &ModelRule, request: &ModelInferRequest) -> Option<FeatureLog> {
    fast_encoded(rule, &request.encode_to_vec())
}

fn fast_encoded(rule: &ModelRule, request: &[u8]) -> Option<FeatureLog> {
    let scanned = crate::extract::lazy::scan(Bytes::copy_from_slice(request)).unwrap();
    let (bytes, rows) = encode(rule, &scanned, ctx())?;
    let record = FeatureLog::decode(&bytes[..]).unwrap();
    assert_eq!(record.row_count, rows);
    Some(record)
}

/// One run of a shape field as an encoder may write it.
enum Run<'a> {
    Packed(&'a [i64]),
    Element(i64),
}

/// `request` encoded by hand with the shapes of the inputs named in `split` written as the
/// given runs instead of prost's one packed field. Protobuf concatenates repeated fields,
/// so a model server reads the runs' elements in order as the shape.
fn with_split_shapes(request: &ModelInferRequest, split: &[(&str, &[Run<'_>])]) -> Vec<u8> {
    let mut out = Vec::new();
    for input in &request.inputs {
        let Some((_, runs)) = split.iter().find(|(n, _)| *n == input.name) else {
            prost::encoding::message::encode(model_infer_request::INPUTS, input, &mut out);
            continue;
        };
        let mut header = input.clone();
        header.shape.clear();
        // Two encodings of one message, concatenated, are their merge.
        let mut tensor = header.encode_to_vec();
        for run in *runs {
            match run {
                // By hand: prost writes nothing for an empty run, an encoder may.
                Run::Packed(dims) => {
                    prost::encoding::encode_key(
                        infer_input_tensor::SHAPE,
                        WireType::LengthDelimited.into(),
                        &mut tensor,
                    );
                    let len: usize = dims.iter().map(|&d| varint_len(d as u64)).sum();
                    encode_varint(len as u64, &mut tensor);
                    dims.iter()
                        .for_each(|&d| encode_varint(d as u64, &mut tensor));
                }
                Run::Element(d) => {
                    prost::encoding::int64::encode(infer_input_tensor::SHAPE, d, &mut tensor)
                }
            }
        }
        prost::encoding::bytes::encode(5, &tensor, &mut out);
    }
    let mut rest = request.clone();
    rest.inputs.clear();
    rest.encode(&mut out).unwrap();
    out
}

fn floats(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| match i % 5 {
            0 => f32::NAN,
            1 => -0.0,
            2 => f32::from_bits(1), // subnormal
            _ => seed * i as f32 - 1.5,
        })
        .collect()
}

#[test]
fn records_equal_the_general_paths_for_every_supported_shape() {
    let ids = TensorValues::Int64(vec![9_000_000_001, -4, 0, 17]);
    let req = request(&[
        ("other", "FP32", &[4], TensorValues::Fp32(floats(4, 9.0))),
        ("item_id", "INT64", &[4], ids),
        ("price", "FP32", &[4], TensorValues::Fp32(floats(4, 0.25))),
        (
            "age",
            "INT32",
            &[4, 1],
            TensorValues::Int32(vec![i32::MIN, -1, 0, 70]),
        ),
        ("emb", "FP32", &[4, 3], TensorValues::Fp32(floats(12, 2.0))),
        (
            "ctx",
            "FP64",
            &[1, 2],
            TensorValues::Fp64(vec![1e300, -0.5]),
        ),
        ("clock", "INT64", &[], TensorValues::Int64(vec![i64::MAX])),
        ("empty", "FP32", &[4, 0], TensorValues::Fp32(vec![])),
    ]);
    let with_ids = rule(
        &["price", "missing", "age", "emb", "ctx", "clock", "empty"],
        Some("item_id"),
    );
    let without_ids = rule(&["emb", "ctx", "price"], None);
    for r in [&with_ids, &without_ids] {
        let want = general(r, &req);
        let got = fast(r, &req).expect("eligible");
        // NaN != NaN: compare the encodings of two independently built records.
        assert_eq!(got.encode_to_vec(), want.encode_to_vec());
    }

    // Shapes split across several fields: packed runs, single elements, or a mix (and an
    // empty run). "ctx" is [1, 2] read whole; its last run alone, [2], would also fit its
    // data and make it a per-row feature of two rows.
    let split = with_split_shapes(
        &req,
        &[
            ("ctx", &[Run::Packed(&[1]), Run::Packed(&[2])]),
            ("emb", &[Run::Element(4), Run::Packed(&[3])]),
            ("age", &[Run::Packed(&[4]), Run::Element(1)]),
            ("item_id", &[Run::Packed(&[]), Run::Packed(&[4])]),
            ("price", &[Run::Element(4)]),
        ],
    );
    let no_ctx_rows = rule(&["ctx"], None);
    for r in [&with_ids, &without_ids, &no_ctx_rows] {
        let want = general_encoded(r, &split);
        // The general path reads what the model server reads: the whole shape.
        let ctx = want.features.iter().find(|f| f.name == "ctx").unwrap();
        assert_eq!(ctx.row_shape, [2]);
        assert_eq!(want.encode_to_vec(), general(r, &req).encode_to_vec());
        let got = fast_encoded(r, &split).expect("eligible");
        assert_eq!(got.encode_to_vec(), want.encode_to_vec());
    }
}

fn cached(
    cache: &mut PlanCache,
    list: &Arc<AllowList>,
    request: &ModelInferRequest,
) -> Option<FeatureLog> {
    let scanned = crate::extract::lazy::scan(Bytes::from(request.encode_to_vec())).unwrap();
    let rule = &list.models[0];
    let plan = cache.plan(list, rule, &scanned)?;
    let mut out = Vec::new();
    encode_planned(plan, rule, &scanned, ctx(), &mut out)?;
    Some(FeatureLog::decode(&out[..]).unwrap())
}

#[test]
fn plans_are_reused_only_for_the_same_input_headers() {
    let list = Arc::new(AllowList {
        version: "v7".into(),
        models: vec![rule(&["price", "emb"], Some("item_id"))],
    });
    let mut cache = PlanCache::default();
    let make = |seed: f32, rows: usize| {
        request(&[
            (
                "item_id",
                "INT64",
                &[rows as i64],
                TensorValues::Int64((0..rows as i64).map(|i| i * 7 - 3).collect()),
            ),
            (
                "price",
                "FP32",
                &[rows as i64],
                TensorValues::Fp32(floats(rows, seed)),
            ),
            (
                "emb",
                "FP32",
                &[rows as i64, 2],
                TensorValues::Fp32(floats(rows * 2, seed)),
            ),
        ])
    };
    // Same layout, other values (a hit); another row count (a miss); then back.
    for req in [make(1.0, 4), make(2.0, 4), make(3.0, 5), make(4.0, 4)] {
        let want = general(&list.models[0], &req);
        let got = cached(&mut cache, &list, &req).expect("eligible");
        assert_eq!(got.encode_to_vec(), want.encode_to_vec());
    }
    assert_eq!(cache.entries.len(), 2);
    // Raw contents that no longer match the cached shape go the general way.
    let mut bad = make(5.0, 4);
    bad.raw_input_contents[1] = Bytes::from_static(&[0; 12]);
    assert!(cached(&mut cache, &list, &bad).is_none());
    // A new allow list does not reuse the old one's plans.
    let other = Arc::new(AllowList {
        version: "v8".into(),
        models: vec![rule(&["emb"], Some("item_id"))],
    });
    let got = cached(&mut cache, &other, &make(6.0, 4)).unwrap();
    assert_eq!(got.features.len(), 1);
}

#[test]
fn plans_are_not_kept_for_typed_contents_long_keys_or_ineligible_rules() {
    let list = Arc::new(AllowList {
        version: "v7".into(),
        models: vec![rule(&["price", "emb"], Some("item_id"))],
    });
    let tensors = |rows: usize| {
        vec![
            (
                "item_id",
                "INT64",
                vec![rows as i64],
                TensorValues::Int64((0..rows as i64).collect()),
            ),
            (
                "price",
                "FP32",
                vec![rows as i64],
                TensorValues::Fp32(floats(rows, 3.0)),
            ),
            (
                "emb",
                "FP32",
                vec![rows as i64, 2],
                TensorValues::Fp32(floats(rows * 2, 5.0)),
            ),
        ]
    };
    let raw = |rows: usize| {
        let t = tensors(rows);
        let t: Vec<_> = t
            .iter()
            .map(|(n, d, s, v)| (*n, *d, &s[..], v.clone()))
            .collect();
        request(&t)
    };
    // Typed contents: every tensor's values sit in the input fields.
    let typed = |rows: usize| {
        let mut r = raw(rows);
        r.raw_input_contents.clear();
        for (input, (_, _, _, values)) in r.inputs.iter_mut().zip(tensors(rows)) {
            input.contents = Some(values.to_contents());
        }
        r
    };
    let mut cache = PlanCache::default();
    for req in [typed(4), typed(1000)] {
        assert!(cached(&mut cache, &list, &req).is_none());
        assert_eq!(cache.entries.len(), 0);
        // The general path still logs the call as the model read it.
        let record = general(&list.models[0], &req);
        assert_eq!(record.row_count, req.inputs[0].shape[0] as u32);
        assert_eq!(
            record.encode_to_vec(),
            general(&list.models[0], &raw(req.inputs[0].shape[0] as usize)).encode_to_vec()
        );
    }
    // Typed contents beside raw contents for every input (the raw ones are read).
    let mut both = raw(4);
    let unlogged = TensorValues::Fp32(vec![7.0; 4]);
    both.inputs.push(InferInputTensor {
        name: "unlogged".into(),
        datatype: "FP32".into(),
        shape: vec![4],
        contents: Some(unlogged.to_contents()),
        ..Default::default()
    });
    both.raw_input_contents.push(unlogged.to_raw());
    let got = cached(&mut cache, &list, &both).expect("eligible");
    assert_eq!(
        got.encode_to_vec(),
        general(&list.models[0], &both).encode_to_vec()
    );
    assert_eq!(cache.entries.len(), 0);
    // A run of headers longer than the limit (here a large tensor parameter, not logged).
    let mut long = raw(4);
    long.inputs[1].parameters.insert(
        "note".into(),
        featurelog_schemas::inference::InferParameter {
            parameter_choice: Some(
                featurelog_schemas::inference::infer_parameter::ParameterChoice::StringParam(
                    "x".repeat(PLAN_KEY_MAX_BYTES),
                ),
            ),
        },
    );
    let got = cached(&mut cache, &list, &long).expect("eligible");
    assert_eq!(
        got.encode_to_vec(),
        general(&list.models[0], &long).encode_to_vec()
    );
    assert_eq!(cache.entries.len(), 0);
    // A rule the fast path cannot serve is not looked up, nor kept.
    let mut needs_outputs = rule(&["price"], Some("item_id"));
    needs_outputs.outputs = vec!["score".into()];
    let other = Arc::new(AllowList {
        version: "v8".into(),
        models: vec![needs_outputs],
    });
    assert!(cached(&mut cache, &other, &raw(4)).is_none());
    assert_eq!(cache.entries.len(), 0);
    // Headers alone still are.
    let got = cached(&mut cache, &list, &raw(4)).expect("eligible");
    assert_eq!(
        got.encode_to_vec(),
        general(&list.models[0], &raw(4)).encode_to_vec()
    );
    assert_eq!(cache.entries.len(), 1);
}

/// What the model server reads of a logged feature: its raw contents, little-endian.
fn raw_of(record: &featurelog_schemas::featurelog::v1::Feature) -> Vec<u8> {
    let v = record.values.clone().unwrap_or_default();
    let mut out: Vec<u8> = v.fp32_values.iter().flat_map(|x| x.to_le_bytes()).collect();
    out.extend(v.fp64_values.iter().flat_map(|x| x.to_le_bytes()));
    out.extend(v.int32_values.iter().flat_map(|x| x.to_le_bytes()));
    out.extend(v.int64_values.iter().flat_map(|x| x.to_le_bytes()));
    out
}

/// Bytes of a request changed at random (a bit flip on the wire, a client's encoder bug, a
/// hostile caller): the sidecar never panics on them, its fast path logs exactly the
/// record the general path logs, and any record it logs holds the bytes the model server
/// reads from the same request (prost's decoding) for every logged feature.
#[test]
fn mutated_requests_never_panic_and_every_path_logs_what_the_model_server_reads() {
    let req = request(&[
        (
            "item_id",
            "INT64",
            &[3],
            TensorValues::Int64(vec![7, -1, 300]),
        ),
        ("price", "FP32", &[3], TensorValues::Fp32(floats(3, 0.25))),
        ("age", "INT32", &[3, 1], TensorValues::Int32(vec![1, -2, 3])),
        ("emb", "FP32", &[3, 2], TensorValues::Fp32(floats(6, 2.0))),
        (
            "ctx",
            "FP64",
            &[1, 2],
            TensorValues::Fp64(vec![1e300, -0.5]),
        ),
    ]);
    let good = req.encode_to_vec();
    let rules = [
        rule(&["price", "age", "emb", "ctx"], Some("item_id")),
        rule(&["emb", "price"], None),
    ];
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let mut next = || rng.u64(..);
    let (mut logged, mut checked) = (0, 0);
    for _ in 0..20_000 {
        let mut raw = good.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % raw.len() as u64) as usize;
            match next() % 8 {
                // Mostly small changes to lengths, tags and counts, which move fields.
                0..=4 => raw[at] = raw[at].wrapping_add(1 + (next() % 3) as u8),
                5 => raw[at] = next() as u8,
                6 => raw.truncate(at),
                _ => raw.insert(at, next() as u8),
            }
            if raw.is_empty() {
                break;
            }
        }
        let bytes = Bytes::from(raw.clone());
        let server = ModelInferRequest::decode(&raw[..]).ok();
        for r in &rules {
            let Ok(scanned) = crate::extract::lazy::scan(bytes.clone()) else {
                break;
            };
            let fast = encode(r, &scanned, ctx());
            let general = crate::extract::lazy::scan(bytes.clone())
                .and_then(|s| s.decode_for_rule(r))
                .ok()
                .and_then(|d| crate::extract::extract(r, &d, None, ctx()).ok());
            let record = match (fast, general) {
                (Some((fast, rows)), Some(general)) => {
                    let fast = FeatureLog::decode(&fast[..]).expect("valid protobuf");
                    assert_eq!(fast.row_count, rows);
                    assert_eq!(fast.encode_to_vec(), general.encode_to_vec(), "{raw:?}");
                    general
                }
                (Some(_), None) => {
                    panic!("fast path logged what the general path did not: {raw:?}")
                }
                (None, Some(general)) => general,
                (None, None) => continue,
            };
            logged += 1;
            // A request the model server cannot decode fails the call: not logged then.
            let Some(server) = &server else {
                continue;
            };
            if server.raw_input_contents.len() != server.inputs.len() {
                continue;
            }
            for feature in &record.features {
                let at = server.inputs.iter().position(|i| i.name == feature.name);
                let at = at.expect("a logged feature is an input");
                assert_eq!(
                    raw_of(feature),
                    server.raw_input_contents[at].as_ref(),
                    "{}: {raw:?}",
                    feature.name
                );
            }
            if !record.candidate_int_ids.is_empty() {
                let at = server
                    .inputs
                    .iter()
                    .position(|i| i.name == "item_id")
                    .unwrap();
                let ids: Vec<u8> = (record.candidate_int_ids.iter())
                    .flat_map(|x| x.to_le_bytes())
                    .collect();
                assert_eq!(ids, server.raw_input_contents[at].as_ref(), "{raw:?}");
            }
            checked += 1;
        }
    }
    assert!(
        logged > 1000 && checked > 500,
        "{logged} logged, {checked} checked"
    );
}

#[test]
fn anything_else_takes_the_general_path() {
    let req = request(&[
        ("item_id", "INT64", &[2], TensorValues::Int64(vec![1, 2])),
        (
            "lang",
            "BYTES",
            &[2],
            TensorValues::Bytes(vec![Bytes::from_static(b"en"), Bytes::from_static(b"de")]),
        ),
        (
            "price",
            "FP32",
            &[3],
            TensorValues::Fp32(vec![1.0, 2.0, 3.0]),
        ),
        ("short", "FP32", &[2], TensorValues::Fp32(vec![1.0, 2.0])),
    ]);
    // A datatype it does not copy, a row count that disagrees with the ids.
    assert!(fast(&rule(&["lang"], Some("item_id")), &req).is_none());
    assert!(fast(&rule(&["price"], Some("item_id")), &req).is_none());
    // Rules that need the response or parameters.
    let mut top = rule(&["short"], Some("item_id"));
    top.top_k = Some(TopK {
        by: "score".into(),
        k: 1,
    });
    assert!(fast(&top, &req).is_none());
    // Raw contents that do not match the shape.
    let mut bad = req.clone();
    bad.raw_input_contents[3] = Bytes::from_static(&[0, 0, 128]);
    assert!(fast(&rule(&["short"], Some("item_id")), &bad).is_none());
    // Typed contents.
    let mut typed = req.clone();
    typed.raw_input_contents.clear();
    assert!(fast(&rule(&["short"], Some("item_id")), &typed).is_none());
    // The eligible case still works.
    assert_eq!(
        fast(&rule(&["short"], Some("item_id")), &req).map(|r| r.row_count),
        Some(2)
    );
}
