//! The benchmark's input: feature logs and their impressions, dated in event time, and their
//! production to Kafka.

use featurelog_kafka::KafkaConfig;
use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
use prost::Message as _;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::Args;

/// When the first request is served (2025-11-29T18:00:00Z), in seconds.
pub(crate) const FIRST_SERVED_S: i64 = 1_764_439_200;

/// When request `i` is served, in microseconds (`--event-rate`).
fn served_us(args: &Args, i: usize) -> i64 {
    let offset = if args.event_rate > 0.0 {
        (i as f64 * 1e6 / args.event_rate) as i64
    } else {
        0
    };
    FIRST_SERVED_S * 1_000_000 + offset
}

pub(crate) fn feature_log(args: &Args, i: usize) -> FeatureLog {
    let n = args.candidates;
    let served = served_us(args, i);
    FeatureLog {
        request_id: format!("bench-{i}"),
        model_name: "ranker".into(),
        model_version: "1".into(),
        served_at: Some(prost_types::Timestamp {
            seconds: served.div_euclid(1_000_000),
            nanos: (served.rem_euclid(1_000_000) * 1000) as i32,
        }),
        row_count: n as u32,
        // INT64 ids, as the sidecar logs them (numbers, `candidate_int_ids`).
        candidate_int_ids: (0..n).map(|j| (i * 1000 + j) as i64).collect(),
        features: (0..args.features)
            .map(|f| Feature {
                name: format!("f{f}"),
                datatype: DataType::Fp32 as i32,
                row_shape: vec![],
                values: Some(Values {
                    fp32_values: (0..n).map(|j| fp32_value(args, i, j, f)).collect(),
                    ..Default::default()
                }),
                per_request: false,
            })
            .collect(),
        ..Default::default()
    }
}

/// Feature `f` of candidate `j` of request `i`.
fn fp32_value(args: &Args, i: usize, j: usize, f: usize) -> f32 {
    if args.continuous_features {
        ((i * 131 + j * 7919 + f * 31) as f32 * 0.001).sin()
    } else {
        ((i + j * 7 + f) % 97) as f32 * 0.5
    }
}

/// Impression `k` of request `i`: its item id and its JSON event, 100 ms after the request.
pub(crate) fn impression(args: &Args, i: usize, k: usize) -> (String, String) {
    let item = (i * 1000 + k * 3).to_string();
    let body = format!(
        r#"{{"request_id":"bench-{i}","item_id":"{item}","event_time":{},"event_type":"impression"}}"#,
        served_us(args, i) / 1000 + 100
    );
    (item, body)
}

pub(crate) async fn produce(
    args: &Args,
    kafka: &KafkaConfig,
    features: &str,
    events: &str,
) -> anyhow::Result<usize> {
    let producer: FutureProducer = kafka
        .client_config(&[
            ("partitioner", "murmur2_random"),
            ("linger.ms", "20"),
            ("compression.type", "zstd"),
        ])
        .create()?;
    let mut pending = Vec::new();
    let mut impressions = 0;
    for i in 0..args.requests {
        let log = feature_log(args, i).encode_to_vec();
        let id = format!("bench-{i}");
        pending.push(
            producer
                .send_result(FutureRecord::to(features).key(&id).payload(&log))
                .map_err(|(e, _)| e)?,
        );
        for k in 0..args.impressions {
            let (item, body) = impression(args, i, k);
            let event_key = if args.events_partitioning == "by-request-id" {
                &id
            } else {
                &item
            };
            pending.push(
                producer
                    .send_result(FutureRecord::to(events).key(event_key).payload(&body))
                    .map_err(|(e, _)| e)?,
            );
            impressions += 1;
        }
        if pending.len() > 20_000 {
            for p in pending.drain(..) {
                p.await?.map_err(|(e, _)| e)?;
            }
        }
    }
    for p in pending {
        p.await?.map_err(|(e, _)| e)?;
    }
    Ok(impressions)
}
