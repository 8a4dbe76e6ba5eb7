//! The load's requests: the same deterministic ModelInfer requests every run, and their REST
//! bodies.

use featurelog_schemas::featurelog::v1::DataType;
use featurelog_schemas::inference::ModelInferRequest;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use featurelog_schemas::tensor::TensorValues;

use crate::Args;

/// The REST binding's bodies for the same requests: JSON `data`, or the binary extension (JSON
/// header, then the raw bytes; `Some` of the header's length).
pub(crate) fn rest_bodies(
    templates: &[ModelInferRequest],
    binary: bool,
) -> Vec<(bytes::Bytes, Option<usize>)> {
    templates
        .iter()
        .map(|r| {
            let mut tail = Vec::new();
            let inputs: Vec<serde_json::Value> = r
                .inputs
                .iter()
                .zip(&r.raw_input_contents)
                .map(|(input, raw)| {
                    let mut t = serde_json::json!({
                        "name": input.name, "shape": input.shape, "datatype": input.datatype,
                    });
                    if binary {
                        t["parameters"] = serde_json::json!({ "binary_data_size": raw.len() });
                        tail.extend_from_slice(raw);
                    } else if input.datatype == "INT64" {
                        let v: Vec<i64> = raw
                            .chunks_exact(8)
                            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                            .collect();
                        t["data"] = serde_json::json!(v);
                    } else {
                        let v: Vec<f32> = raw
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                            .collect();
                        t["data"] = serde_json::json!(v);
                    }
                    t
                })
                .collect();
            let json = serde_json::json!({ "inputs": inputs }).to_string();
            let header = binary.then_some(json.len());
            let mut body = json.into_bytes();
            body.extend_from_slice(&tail);
            (bytes::Bytes::from(body), header)
        })
        .collect()
}

/// A small deterministic PRNG (xorshift64*), so every run sends the same data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `count` different requests, so that compression sees realistic variety: even features take
/// one of 16 levels (categories, buckets, counts), odd ones are continuous values.
pub(crate) fn requests(args: &Args, count: usize) -> Vec<ModelInferRequest> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..count).map(|_| request(args, &mut rng)).collect()
}

fn request(args: &Args, rng: &mut Rng) -> ModelInferRequest {
    let n = args.candidates;
    let mut tensors = vec![(
        "item_id".to_string(),
        DataType::Int64,
        vec![n as i64],
        TensorValues::Int64((0..n).map(|_| (rng.next() % 50_000_000) as i64).collect()),
    )];
    for f in 0..args.features {
        let values = (0..n)
            .map(|_| {
                if f % 2 == 0 {
                    (rng.next() % 16) as f32
                } else {
                    rng.unit() * 100.0
                }
            })
            .collect();
        tensors.push((
            format!("f{f}"),
            DataType::Fp32,
            vec![n as i64],
            TensorValues::Fp32(values),
        ));
    }
    let mut r = ModelInferRequest {
        model_name: "ranker".into(),
        ..Default::default()
    };
    for (name, dt, shape, values) in tensors {
        let mut input = InferInputTensor {
            name,
            datatype: dt.protocol_name().unwrap().into(),
            shape,
            ..Default::default()
        };
        if args.typed {
            input.contents = Some(values.to_contents());
        } else {
            r.raw_input_contents.push(values.to_raw());
        }
        r.inputs.push(input);
    }
    r
}
