//! The producer's side of publishing: librdkafka's settings, the hand-over of one encoded
//! record (refused here when the topic cannot take it), and metadata asked of the brokers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::producer::{BaseRecord, Producer};
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::dead_letter::Rejected;
use super::delivery::{Failure, Produced, Sent, classify};

/// librdkafka settings the sidecar starts from; `[kafka.properties]` overrides any of them.
pub const PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("compression.type", "zstd"),
    // zstd's fastest level: compressing was the largest cost of the producer's thread at the
    // default level 3 (perf), for a few percent more bytes on the wire.
    ("compression.level", "1"),
    // Records are not latency-sensitive; larger batches cut per-batch costs (a zstd context
    // reset, a request) that dominated the producer's CPU at 5 ms.
    ("linger.ms", "100"),
    // The Java client's default partitioner hashes keys with murmur2. Apps that publish
    // impressions keyed by request id with a Java client then land a request's impressions on
    // the same partition number as its features (given equal partition counts).
    ("partitioner", "murmur2_random"),
    ("message.timeout.ms", "30000"),
    ("queue.buffering.max.messages", "100000"),
    ("queue.buffering.max.kbytes", "65536"),
    // Feeds the wire-bytes gauges; parsing one JSON document every 5 s costs nothing.
    ("statistics.interval.ms", "5000"),
];

/// Asks the brokers for `topic`'s metadata, on a thread of its own rather than the runtime's
/// blocking pool: a shutdown must not wait for a metadata request to a broker that does not
/// answer. `None` on shutdown (or when no thread can be had); else `Some` of the answer:
/// whether the topic exists with partitions, `None` when the brokers did not answer.
pub(super) async fn ask_topic(
    shared: &Arc<Shared>,
    topic: &str,
    timeout: Duration,
    shutdown: &CancellationToken,
) -> Option<Option<bool>> {
    let (asking, name) = (shared.clone(), topic.to_owned());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("featurelog-metadata".into())
        .spawn(move || {
            let metadata = asking
                .producer
                .client()
                .fetch_metadata(Some(&name), timeout);
            let exists = metadata.ok().and_then(|m| {
                let found = m.topics().iter().find(|t| t.name() == name)?;
                Some(found.error().is_none() && !found.partitions().is_empty())
            });
            let _ = tx.send(exists);
        })
        .ok()?;
    tokio::select! {
        _ = shutdown.cancelled() => None,
        answer = rx => Some(answer.ok().flatten()),
    }
}

/// What the counters, a dead letter and a delivery report say of a record besides its bytes.
#[derive(Clone, Copy)]
pub(super) struct RecordOf<'a> {
    /// The allow-list entry's model name.
    pub(super) model: &'a str,
    pub(super) request_id: &'a str,
    pub(super) binding: &'static str,
    /// The size of the request it was taken from.
    pub(super) request_size: usize,
    pub(super) served_at: SystemTime,
}

/// Hands one encoded record to librdkafka (which copies it), counting the outcome. A record the
/// topic cannot take, or one librdkafka refuses for what it is, is dead-lettered; only a full
/// queue or a broker failure tells the adaptive controller that Kafka is struggling.
pub(super) fn produce(shared: &Shared, of: RecordOf<'_>, payload: &[u8], rows: u32) {
    let metrics = &shared.metrics;
    let refuse = |reason: &'static str, detail: String| {
        Rejected::new(reason, of.binding, detail)
            .model(of.model, "")
            .call(of.request_id, of.request_size, of.served_at)
            .record_bytes(payload.len())
    };
    if let Some(limit) = shared
        .record_limit
        .exceeded(of.request_id.len(), payload.len())
    {
        let detail = format!(
            "the record is {} bytes, over the {limit} bytes topic {:?} takes (the smaller of its max.message.bytes and publish.max-message-bytes); log fewer features or fewer candidates for this model, or raise both",
            crate::publish::record_limit::batch_bytes(of.request_id.len(), payload.len()),
            shared.topic,
        );
        let rejected = refuse("too_large", detail).limit_bytes(limit);
        return shared.producer.context().refused(rejected);
    }
    let sent = Sent::Record(Produced {
        at: Instant::now(),
        model: of.model.to_owned(),
        binding: of.binding,
        request_bytes: of.request_size,
        served_at: of.served_at,
    });
    let produced = shared.producer.send(
        BaseRecord::with_opaque_to(&shared.topic, Box::new(sent))
            .key(of.request_id.as_bytes())
            .payload(payload),
    );
    let err = match produced {
        Ok(()) => {
            let counters = metrics.model(of.model);
            counters.records.inc();
            counters.rows.inc_by(u64::from(rows));
            counters.request_bytes.inc_by(of.request_size as u64);
            counters.record_bytes.inc_by(payload.len() as u64);
            return;
        }
        Err((err, _)) => err,
    };
    match classify(&err) {
        Failure::Record(reason) => {
            let detail = format!(
                "the producer refused the record on topic {:?}: {err}",
                shared.topic
            );
            shared.producer.context().refused(refuse(reason, detail));
        }
        Failure::Broker => {
            let reason = match err {
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::QueueFull,
                ) => "producer_queue_full",
                _ => "produce_error",
            };
            metrics.drop_call(reason);
            shared.window.failed.fetch_add(1, Ordering::Relaxed);
            if reason == "produce_error" {
                shared.outage.failure(
                    &format!(
                        "a record of model {:?} (request {:?}, {} bytes) was not produced to {:?}: {err}",
                        of.model,
                        of.request_id,
                        payload.len(),
                        shared.topic
                    ),
                    true,
                );
            }
        }
    }
}
