//! ModelInferRequest generators.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use featurelog_schemas::inference::infer_parameter::ParameterChoice;
use featurelog_schemas::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use featurelog_schemas::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use proptest::prelude::*;

use crate::allowlist::ModelRule;

const INPUT_NAMES: &[&str] = &["a", "ids", "b", "c", "price", "é"];
pub(super) const PARAMETER_KEYS: &[&str] = &["surface", "user", "k"];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-z0-9_-]{0,6}", 1 => "\\PC{0,4}"]
}

fn parameter() -> impl Strategy<Value = InferParameter> {
    prop_oneof![
        any::<bool>().prop_map(ParameterChoice::BoolParam),
        any::<i64>().prop_map(ParameterChoice::Int64Param),
        text().prop_map(ParameterChoice::StringParam),
        (-1e6f64..1e6).prop_map(ParameterChoice::DoubleParam),
        any::<u64>().prop_map(ParameterChoice::Uint64Param),
    ]
    .prop_map(|choice| InferParameter {
        parameter_choice: Some(choice),
    })
}

fn parameters() -> impl Strategy<Value = HashMap<String, InferParameter>> {
    prop::collection::hash_map(
        prop::sample::select(PARAMETER_KEYS.to_vec()).prop_map(str::to_owned),
        parameter(),
        0..3,
    )
}

/// Element sizes of the datatypes the fast path copies or re-encodes, 0 for the others.
pub(super) fn element_size(datatype: &str) -> usize {
    match datatype {
        "FP32" | "INT32" => 4,
        "FP64" | "INT64" => 8,
        _ => 0,
    }
}

/// An input: mostly a numeric tensor of `rows` rows whose raw contents fit its shape (the fast
/// path's case), else anything: other datatypes, shapes, typed contents, parameters.
fn input(rows: i64) -> impl Strategy<Value = (InferInputTensor, Vec<u8>)> {
    let datatype = prop_oneof![
        4 => prop::sample::select(vec!["FP32", "FP64", "INT32", "INT64"]).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["BYTES", "BOOL", "FP16", ""]).prop_map(str::to_owned),
        1 => text(),
    ];
    let shape = prop_oneof![
        3 => Just(vec![rows]),
        2 => (1i64..4).prop_map(move |k| vec![rows, k]),
        1 => (0i64..4).prop_map(|k| vec![1, k]),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(prop_oneof![0i64..5, any::<i64>()], 0..3),
    ];
    (
        prop::sample::select(INPUT_NAMES.to_vec()),
        datatype,
        shape,
        prop::option::weighted(0.15, parameters()),
        prop::option::weighted(0.1, prop::collection::vec(-1e3f32..1e3, 0..4)),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(name, datatype, shape, parameters, contents, fits, seed)| {
                let mut rng = fastrand::Rng::with_seed(seed);
                let count = shape
                    .iter()
                    .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
                    .filter(|&n| n < 64);
                let len = match (fits, count) {
                    (true, Some(n)) if element_size(&datatype) > 0 => n * element_size(&datatype),
                    _ => rng.usize(..24),
                };
                let raw = (0..len).map(|_| rng.u8(..)).collect();
                let tensor = InferInputTensor {
                    name: name.to_owned(),
                    datatype,
                    shape,
                    parameters: parameters.unwrap_or_default(),
                    contents: contents.map(|fp32_contents| InferTensorContents {
                        fp32_contents,
                        ..InferTensorContents::default()
                    }),
                };
                (tensor, raw)
            },
        )
}

/// A request: raw contents for every input (Triton's clients), for none, or for some.
pub(super) fn request() -> impl Strategy<Value = ModelInferRequest> {
    (0i64..5)
        .prop_flat_map(|rows| {
            (
                (text(), text(), text()),
                parameters(),
                prop::collection::vec(input(rows), 0..6),
                prop::collection::vec(
                    (text(), parameters()).prop_map(|(name, parameters)| {
                        InferRequestedOutputTensor { name, parameters }
                    }),
                    0..2,
                ),
                prop_oneof![6 => Just(0usize), 1 => Just(1), 1 => Just(2)],
            )
        })
        .prop_map(
            |((model_name, model_version, id), parameters, inputs, outputs, raw)| {
                let (inputs, contents): (Vec<_>, Vec<_>) = inputs.into_iter().unzip();
                let raw_input_contents = match raw {
                    0 => contents.into_iter().map(Bytes::from).collect(),
                    1 => Vec::new(),
                    _ => contents.into_iter().skip(1).map(Bytes::from).collect(),
                };
                ModelInferRequest {
                    model_name,
                    model_version,
                    id,
                    parameters,
                    inputs,
                    outputs,
                    raw_input_contents,
                }
            },
        )
}

pub(super) fn rule() -> impl Strategy<Value = ModelRule> {
    let name = || prop::sample::select(INPUT_NAMES.to_vec()).prop_map(str::to_owned);
    (
        prop::collection::vec(prop_oneof![name(), Just("missing".to_owned())], 0..4),
        prop::option::of(name()),
        prop_oneof![
            3 => Just(Vec::new()),
            1 => prop::collection::vec(
                prop::sample::select(PARAMETER_KEYS.to_vec()).prop_map(str::to_owned),
                1..2,
            ),
        ],
    )
        .prop_map(
            |(mut features, candidate_ids_input, parameters)| ModelRule {
                name: "ranker".into(),
                version: None,
                // The allow list refuses a feature listed twice.
                features: {
                    let mut seen = HashSet::new();
                    features.retain(|f| seen.insert(f.clone()));
                    features
                },
                outputs: vec![],
                candidate_ids_input,
                candidate_ids_parameter: None,
                parameters,
                headers: vec![],
                sample_rate: 1.0,
                top_k: None,
            },
        )
}
