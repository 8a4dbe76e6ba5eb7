//! The producer's side of publishing: librdkafka's settings, the hand-over of one encoded
//! record (refused here when the topic cannot take it) or of one dead letter (within the
//! budget, and only while the dead-letter topic exists), and metadata asked of the brokers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::dead_letter::Rejected;
use super::delivery::{Failure, Produced, Sent, classify};
use crate::reason::{DeadLetter, Dropped};

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
    let refuse = |reason: Dropped, detail: String| {
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
            super::record_limit::batch_bytes(of.request_id.len(), payload.len()),
            shared.topic,
        );
        let rejected = refuse(Dropped::TooLarge, detail).limit_bytes(limit);
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
                ) => Dropped::ProducerQueueFull,
                _ => Dropped::ProduceError,
            };
            metrics.drop_call(reason);
            shared.window.failed.fetch_add(1, Ordering::Relaxed);
            if reason == Dropped::ProduceError {
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

impl Shared {
    /// Counts a call that was not logged because of what its caller sent, and describes it on
    /// the dead-letter topic (within the budget). Never waits: a full producer queue counts
    /// the dead letter as failed.
    pub(super) fn reject(&self, rejected: Rejected) {
        self.metrics.drop_call(rejected.reason);
        tracing::debug!(reason = rejected.reason.as_str(), model = %rejected.model, request_id = %rejected.request_id, "not logged: {}", rejected.detail);
        self.dead_letter(&rejected);
    }

    /// Describes a call that was not logged (and counted already) on the dead-letter topic,
    /// within the budget.
    pub(super) fn dead_letter(&self, rejected: &Rejected) {
        let Some(topic) = &self.dead_letter_topic else {
            return;
        };
        let admitted = self
            .dead_letter_budget
            .lock()
            .is_ok_and(|mut b| b.take(Instant::now()));
        if !admitted {
            return self.metrics.dead_letter(DeadLetter::RateLimited);
        }
        if self.dead_letter_topic_missing.load(Ordering::Relaxed) {
            return self.metrics.dead_letter(DeadLetter::NoTopic);
        }
        let payload = rejected.to_json(&self.instance, &self.allow_list.peek().version);
        let source = format!("sidecar/{}", self.instance);
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: super::dead_letter::ERROR_HEADER,
                value: Some(rejected.reason.as_str()),
            })
            .insert(Header {
                key: super::dead_letter::SOURCE_HEADER,
                value: Some(&source),
            });
        let mut record = BaseRecord::with_opaque_to(topic, Box::new(Sent::DeadLetter))
            .payload(&payload)
            .headers(headers);
        if !rejected.request_id.is_empty() {
            record = record.key(rejected.request_id.as_bytes());
        }
        if let Err((err, _)) = self.producer.send(record) {
            tracing::debug!(%err, "dead letter not produced");
            self.metrics.dead_letter(DeadLetter::Failed);
        }
    }
}

/// How often a missing dead-letter topic is looked for again.
const DEAD_LETTER_TOPIC_CHECK: Duration = Duration::from_secs(30);

/// Asks the brokers whether the dead-letter topic exists, at start and every
/// [`DEAD_LETTER_TOPIC_CHECK`] until it does: while it does not, dead letters are counted
/// (`no_topic`) instead of produced. A broker that does not answer changes nothing.
pub(super) async fn watch_dead_letters(shared: Arc<Shared>, shutdown: CancellationToken) {
    let Some(topic) = shared.dead_letter_topic.clone() else {
        return;
    };
    let mut warned = false;
    loop {
        let Some(answer) = ask_topic(&shared, &topic, Duration::from_secs(10), &shutdown).await
        else {
            return;
        };
        match answer {
            Some(true) => {
                shared
                    .dead_letter_topic_missing
                    .store(false, Ordering::Relaxed);
                shared.metrics.dead_letter_topic_missing.set(0);
                if warned {
                    tracing::info!(%topic, "the dead-letter topic exists now: dead letters are sent");
                }
                return;
            }
            Some(false) => {
                shared
                    .dead_letter_topic_missing
                    .store(true, Ordering::Relaxed);
                shared.metrics.dead_letter_topic_missing.set(1);
                if !warned {
                    tracing::warn!(
                        %topic,
                        "the dead-letter topic does not exist: dead letters are only counted (featurelog_sidecar_dead_letters_total{{outcome=\"no_topic\"}}) until it does. The joiner creates it at start-up; or create it, or set publish.dead-letter-topic = \"\""
                    );
                    warned = true;
                }
            }
            None => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(DEAD_LETTER_TOPIC_CHECK) => {}
        }
    }
}

/// Dead-letters the records the producer refused (counted when they were refused): a delivery
/// report cannot produce, so they wait for a publisher thread.
pub(super) fn dead_letter_refused(shared: &Shared) {
    let refused = match shared.producer.context().refused.lock() {
        Ok(mut refused) if !refused.is_empty() => std::mem::take(&mut *refused),
        _ => return,
    };
    for rejected in &refused {
        shared.dead_letter(rejected);
    }
}
