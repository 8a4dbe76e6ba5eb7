//! Unit tests of the extraction: one call and its allow-list rule to the record it becomes.

use super::*;
use crate::allowlist::TopK;
use featurelog_schemas::featurelog::v1::DataType;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use featurelog_schemas::inference::model_infer_response::InferOutputTensor;
use featurelog_schemas::tensor::TensorValues;

fn input(name: &str, dt: &str, shape: &[i64], v: &TensorValues) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: dt.into(),
        shape: shape.to_vec(),
        parameters: Default::default(),
        contents: Some(v.to_contents()),
    }
}

fn request() -> ModelInferRequest {
    ModelInferRequest {
        model_name: "ranker".into(),
        id: "r1".into(),
        inputs: vec![
            input(
                "item_id",
                "INT64",
                &[3],
                &TensorValues::Int64(vec![7, 8, 9]),
            ),
            input("user_age", "INT32", &[1], &TensorValues::Int32(vec![33])),
            input(
                "price",
                "FP32",
                &[3],
                &TensorValues::Fp32(vec![1.0, 2.0, 3.0]),
            ),
            input("secret", "FP32", &[3], &TensorValues::Fp32(vec![9.0; 3])),
            input(
                "emb",
                "FP32",
                &[3, 2],
                &TensorValues::Fp32(vec![0.0, 0.1, 1.0, 1.1, 2.0, 2.1]),
            ),
        ],
        ..Default::default()
    }
}

fn response() -> ModelInferResponse {
    ModelInferResponse {
        model_name: "ranker".into(),
        outputs: vec![InferOutputTensor {
            name: "score".into(),
            datatype: "FP32".into(),
            shape: vec![3],
            parameters: Default::default(),
            contents: Some(TensorValues::Fp32(vec![0.2, 0.9, 0.5]).to_contents()),
        }],
        ..Default::default()
    }
}

fn rule() -> ModelRule {
    ModelRule {
        name: "ranker".into(),
        version: None,
        features: vec![
            "user_age".into(),
            "price".into(),
            "emb".into(),
            "absent".into(),
        ],
        outputs: vec!["score".into()],
        candidate_ids_input: Some("item_id".into()),
        candidate_ids_parameter: None,
        parameters: vec![],
        headers: vec![],
        sample_rate: 1.0,
        top_k: None,
    }
}

fn ctx() -> CallContext<'static> {
    CallContext {
        request_id: "r1",
        served_at: SystemTime::UNIX_EPOCH,
        instance: "test",
        allow_list_version: "v1",
        headers: &[],
    }
}

#[test]
fn listed_headers_join_the_parameters_and_a_parameter_of_the_same_name_wins() {
    let mut rule = rule();
    rule.headers = vec!["x-user-country".into(), "surface".into(), "x-absent".into()];
    rule.parameters = vec!["surface".into()];
    let mut request = request();
    request.parameters.insert(
        "surface".into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::StringParam("home".into())),
        },
    );
    let headers = [
        ("x-user-country".to_string(), "JP".to_string()),
        ("surface".to_string(), "from-header".to_string()),
    ];
    let log = extract(
        &rule,
        &request,
        Some(&response()),
        CallContext {
            headers: &headers,
            ..ctx()
        },
    )
    .unwrap();
    let mut params: Vec<_> = log.parameters.into_iter().collect();
    params.sort();
    assert_eq!(
        params,
        [
            ("surface".to_string(), "home".to_string()),
            ("x-user-country".to_string(), "JP".to_string()),
        ]
    );
}

#[test]
fn only_allow_listed_tensors_are_logged_one_row_per_candidate() {
    let log = extract(&rule(), &request(), Some(&response()), ctx()).unwrap();
    assert_eq!(log.row_count, 3);
    assert_eq!(log.candidate_int_ids, [7, 8, 9]);
    assert!(log.candidate_ids.is_empty());
    let names: Vec<_> = log.features.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["user_age", "price", "emb"]);
    let age = &log.features[0];
    assert!(age.per_request);
    assert_eq!(age.values.as_ref().unwrap().int32_values, [33]);
    let emb = &log.features[2];
    assert_eq!(emb.row_shape, [2]);
    assert!(!emb.per_request);
    assert_eq!(emb.datatype, DataType::Fp32 as i32);
    assert_eq!(
        log.outputs[0].values.as_ref().unwrap().fp32_values,
        [0.2, 0.9, 0.5]
    );
}

#[test]
fn top_k_keeps_the_best_candidates_in_rank_order() {
    let mut r = rule();
    r.top_k = Some(TopK {
        k: 2,
        by: "score".into(),
    });
    let log = extract(&r, &request(), Some(&response()), ctx()).unwrap();
    assert_eq!(log.row_count, 2);
    assert_eq!(log.candidate_int_ids, [8, 9]);
    assert_eq!(
        log.features[1].values.as_ref().unwrap().fp32_values,
        [2.0, 3.0]
    );
    assert_eq!(
        log.features[2].values.as_ref().unwrap().fp32_values,
        [1.0, 1.1, 2.0, 2.1]
    );
    assert_eq!(log.features[0].values.as_ref().unwrap().int32_values, [33]);
    assert_eq!(
        log.outputs[0].values.as_ref().unwrap().fp32_values,
        [0.9, 0.5]
    );
}

#[test]
fn a_tensor_with_the_wrong_row_count_is_a_counted_reason() {
    let mut req = request();
    req.inputs[2] = input("price", "FP32", &[2], &TensorValues::Fp32(vec![1.0, 2.0]));
    let err = extract(&rule(), &req, Some(&response()), ctx()).unwrap_err();
    assert_eq!(err.reason(), "row_mismatch");
    let mut req = request();
    req.inputs[2].shape = vec![4];
    let err = extract(&rule(), &req, Some(&response()), ctx()).unwrap_err();
    assert_eq!(err.reason(), "shape_mismatch");
}

#[test]
fn a_narrow_typed_value_the_model_would_not_read_as_sent_is_not_logged() {
    // INT8 in int_contents: 300 would reach the model as 44.
    let mut req = request();
    req.inputs[1] = input("user_age", "INT8", &[1], &TensorValues::Int32(vec![300]));
    let err = extract(&rule(), &req, Some(&response()), ctx()).unwrap_err();
    assert_eq!(err.reason(), "value_out_of_range");
    assert!(err.to_string().contains("300"), "{err}");
    // In range, it is logged as sent.
    req.inputs[1] = input("user_age", "INT8", &[1], &TensorValues::Int32(vec![-128]));
    let log = extract(&rule(), &req, Some(&response()), ctx()).unwrap();
    assert_eq!(log.features[0].datatype, DataType::Int8 as i32);
    assert_eq!(
        log.features[0].values.as_ref().unwrap().int32_values,
        [-128]
    );
}

#[test]
fn raw_contents_decode_to_the_same_record_as_typed() {
    let typed = request();
    let mut raw = typed.clone();
    raw.raw_input_contents = raw
        .inputs
        .iter_mut()
        .map(|i| {
            let t =
                tensor::decode(&i.name, &i.datatype, &i.shape, i.contents.as_ref(), None).unwrap();
            i.contents = None;
            t.values.to_raw_as(t.datatype)
        })
        .collect();
    let a = extract(&rule(), &typed, Some(&response()), ctx()).unwrap();
    let b = extract(&rule(), &raw, Some(&response()), ctx()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn signed_integer_ids_stay_numbers_and_the_others_become_text() {
    let cases = [
        (
            "INT8",
            TensorValues::Int32(vec![-1, 0, 5]),
            vec![],
            vec![-1, 0, 5],
        ),
        (
            "INT32",
            TensorValues::Int32(vec![1, 2, 3]),
            vec![],
            vec![1, 2, 3],
        ),
        (
            "UINT64",
            TensorValues::Uint64(vec![u64::MAX, 0, 1]),
            vec!["18446744073709551615", "0", "1"],
            vec![],
        ),
        (
            "BYTES",
            TensorValues::Bytes(vec!["a".into(), "b".into(), "c".into()]),
            vec!["a", "b", "c"],
            vec![],
        ),
    ];
    for (dt, values, text, ints) in cases {
        let mut req = request();
        req.inputs[0] = input("item_id", dt, &[3], &values);
        let log = extract(&rule(), &req, Some(&response()), ctx()).unwrap();
        assert_eq!(log.candidate_ids, text, "{dt}");
        assert_eq!(log.candidate_int_ids, ints, "{dt}");
        assert_eq!(log.row_count, 3);
    }
}

/// `candidate-ids-parameter`: the ids come comma-separated in a request parameter, as
/// text, one row each.
fn ids_from(parameter: Option<ParameterChoice>) -> (ModelRule, ModelInferRequest) {
    let mut rule = rule();
    rule.candidate_ids_input = None;
    rule.candidate_ids_parameter = Some("item_ids".into());
    let mut request = request();
    if let Some(choice) = parameter {
        request.parameters.insert(
            "item_ids".into(),
            InferParameter {
                parameter_choice: Some(choice),
            },
        );
    }
    (rule, request)
}

#[test]
fn candidate_ids_from_a_parameter_are_one_row_each_in_order() {
    let (rule, request) = ids_from(Some(ParameterChoice::StringParam(
        "sku-7, sku-8 ,sku-9".into(),
    )));
    let log = extract(&rule, &request, Some(&response()), ctx()).unwrap();
    assert_eq!(log.row_count, 3);
    assert_eq!(log.candidate_ids, ["sku-7", "sku-8", "sku-9"]);
    assert!(log.candidate_int_ids.is_empty());
    // The rows line up with the per-candidate tensors.
    assert_eq!(
        log.features[1].values.as_ref().unwrap().fp32_values,
        [1.0, 2.0, 3.0]
    );
}

#[test]
fn a_missing_or_miscounted_candidate_ids_parameter_is_a_counted_reason() {
    let (rule, request) = ids_from(None);
    let err = extract(&rule, &request, Some(&response()), ctx()).unwrap_err();
    assert_eq!(err.reason(), "bad_candidate_ids");
    assert!(err.to_string().contains("item_ids"), "{err}");
    // Two ids for tensors of three candidates: which row is whose is unknown.
    let (rule, request) = ids_from(Some(ParameterChoice::StringParam("sku-7,sku-8".into())));
    let err = extract(&rule, &request, Some(&response()), ctx()).unwrap_err();
    assert_eq!(err.reason(), "row_mismatch");
    // Values that are no ids are refused as such, whatever the tensors' row counts.
    for bad in [
        ParameterChoice::StringParam("sku-7,,sku-9".into()),
        ParameterChoice::StringParam("sku-7,sku-8,".into()),
        ParameterChoice::StringParam(String::new()),
        ParameterChoice::BoolParam(true),
        ParameterChoice::DoubleParam(3.5),
    ] {
        let (rule, request) = ids_from(Some(bad.clone()));
        let err = extract(&rule, &request, Some(&response()), ctx()).unwrap_err();
        assert_eq!(err.reason(), "bad_candidate_ids", "{bad:?}");
    }
}
