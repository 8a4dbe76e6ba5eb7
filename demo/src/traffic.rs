//! The recommender's traffic: inference calls through the sidecar at the configured rate, and
//! the app's impressions and clicks of the candidates it shows, published as JSON.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use featurelog_kafka::KafkaConfig;
use featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use crate::error::DemoError;
use crate::rows::count_rows;
use crate::world::World;
use crate::{DemoOptions, Progress, Stage};

/// What the traffic generator did.
pub(crate) struct Traffic {
    pub(crate) requests: u64,
    pub(crate) impressions: u64,
    pub(crate) clicks: u64,
    /// The impressed (request, user, item) triples, for the offline pipeline.
    pub(crate) impressed: Vec<(String, u64, i64)>,
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn send_traffic(
    options: &DemoOptions,
    world: &World,
    run_id: &str,
    sidecar: std::net::SocketAddr,
    kafka: &KafkaConfig,
    events_topic: &str,
    metrics: &featurelog_sidecar::metrics::Metrics,
    dataset: &Path,
    shutdown: &CancellationToken,
    progress: &mut impl FnMut(Progress),
) -> Result<Traffic, DemoError> {
    let endpoint = format!("http://{sidecar}");
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .map_err(|e| DemoError::ModelServer(e.to_string()))?
        .connect()
        .await
        .map_err(|e| DemoError::ModelServer(format!("connecting to the sidecar: {e}")))?;
    let client = GrpcInferenceServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    // The app publishes with its own client and partitioner (keyed by item, not request): the
    // joiner must not depend on co-partitioning.
    let producer: FutureProducer = kafka
        .client_config(&[("partitioner", "consistent_random"), ("linger.ms", "20")])
        .create()
        .map_err(|source| DemoError::Produce {
            topic: events_topic.to_owned(),
            source,
        })?;

    let answered = Arc::new(AtomicU64::new(0));
    let mut calls = tokio::task::JoinSet::new();
    let mut traffic = Traffic {
        requests: 0,
        impressions: 0,
        clicks: 0,
        impressed: Vec::new(),
    };
    let period = Duration::from_secs_f64(1.0 / f64::from(options.rate.max(1)));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut last_report = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    for n in 0..options.requests {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let request = world.request(run_id, n);
        let message = world.infer_request(&request);
        let mut outcome = Vec::new();
        for slot in 0..request.items.len() {
            let (shown, clicked) =
                world.outcome(&request, slot, options.impression_rate, options.click_rate);
            if shown {
                outcome.push((request.items[slot], clicked));
                traffic
                    .impressed
                    .push((request.id.clone(), request.user, request.items[slot]));
                traffic.impressions += 1;
                traffic.clicks += u64::from(clicked);
            }
        }
        let permit = limit.clone().acquire_owned().await.ok();
        let mut client = client.clone();
        let answered_calls = answered.clone();
        let producer = producer.clone();
        let topic = events_topic.to_owned();
        let id = request.id.clone();
        calls.spawn(async move {
            let _permit = permit;
            client
                .model_infer(message)
                .await
                .map_err(|status| DemoError::Call {
                    request_id: id.clone(),
                    status: Box::new(status),
                })?;
            answered_calls.fetch_add(1, Ordering::Relaxed);
            // The app shows some candidates right after scoring, and the user clicks a few.
            let now_ms = chrono_ms();
            let mut sends = Vec::new();
            for (item, clicked) in outcome {
                sends.push((item, now_ms, "impression"));
                if clicked {
                    sends.push((item, now_ms + 400, "click"));
                    // Apps retry: some clicks reach the topic twice. Each event has an id
                    // of its own, so the joiner counts them once.
                    if item % 3 == 0 {
                        sends.push((item, now_ms + 400, "click"));
                    }
                }
            }
            for (item, time_ms, kind) in sends {
                let body = format!(
                    r#"{{"request_id":"{id}","item_id":"{item}","event_time":{time_ms},"event_type":"{kind}","event_id":"{id}/{item}/{kind}"}}"#
                );
                let key = item.to_string();
                producer
                    .send(
                        FutureRecord::to(&topic).key(&key).payload(&body),
                        Duration::from_secs(30),
                    )
                    .await
                    .map_err(|(source, _)| DemoError::Produce {
                        topic: topic.clone(),
                        source,
                    })?;
            }
            Ok::<(), DemoError>(())
        });
        traffic.requests += 1;
        while let Some(done) = calls.try_join_next() {
            flatten(done)?;
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            progress(Progress {
                stage: Stage::Traffic,
                requests: answered.load(Ordering::Relaxed),
                records: metrics.produced().records,
                rows: count_rows(dataset)?.rows,
                expected_rows: traffic.impressions,
            });
        }
    }
    while let Some(done) = calls.join_next().await {
        flatten(done)?;
    }
    if shutdown.is_cancelled() {
        return Err(DemoError::Joiner("interrupted".into()));
    }
    Ok(traffic)
}

fn flatten(done: Result<Result<(), DemoError>, tokio::task::JoinError>) -> Result<(), DemoError> {
    match done {
        Ok(r) => r,
        Err(e) => Err(DemoError::Joiner(format!("a traffic task failed: {e}"))),
    }
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
