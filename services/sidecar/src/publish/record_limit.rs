//! The largest FeatureLog record the sidecar produces: the smallest of the feature-log topic's
//! `max.message.bytes` (asked of the brokers at start-up and every [`REFRESH`], so a change to
//! the topic is followed), `publish.max-message-bytes`, and the producer's `message.max.bytes`.
//!
//! A record over it is refused before it reaches librdkafka, as `too_large`, and dead-lettered
//! with its size and the limit: sent, the brokers would refuse it after a round trip, and
//! librdkafka's own check would fail it with no word of which call it was.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use featurelog_kafka::KafkaConfig;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How often the topic's limit is asked for again.
pub const REFRESH: Duration = Duration::from_secs(60);

/// What Kafka adds to a record's key and value in a batch of one (the v2 batch header is 61
/// bytes; a record's own header at most 21 more, without headers): the batch the brokers check
/// against `max.message.bytes` is at most this much larger than the record's key and value.
pub const BATCH_OVERHEAD: usize = 128;

/// The limits a record is held to.
#[derive(Debug)]
pub struct RecordLimit {
    /// `publish.max-message-bytes` and the producer's `message.max.bytes`, the smaller.
    configured: usize,
    /// The topic's `max.message.bytes`; 0 until the brokers have said.
    topic: AtomicUsize,
}

impl RecordLimit {
    /// Limits from the configuration alone, until the topic's is learned.
    pub fn new(configured: usize) -> Self {
        Self {
            configured,
            topic: AtomicUsize::new(0),
        }
    }

    /// The topic's `max.message.bytes`, as the brokers said.
    pub fn learned(&self, topic_bytes: usize) {
        self.topic.store(topic_bytes, Ordering::Relaxed);
    }

    /// The largest batch a record may make: the smaller of the configured and learned limits.
    pub fn effective(&self) -> usize {
        match self.topic.load(Ordering::Relaxed) {
            0 => self.configured,
            topic => topic.min(self.configured),
        }
    }

    /// `Some(limit)` when a record with this key and value would make a batch over it.
    pub fn exceeded(&self, key: usize, value: usize) -> Option<usize> {
        let limit = self.effective();
        (batch_bytes(key, value) > limit).then_some(limit)
    }
}

/// The size of a batch holding one record with this key and value, at most.
pub fn batch_bytes(key: usize, value: usize) -> usize {
    key.saturating_add(value).saturating_add(BATCH_OVERHEAD)
}

/// Asks the brokers for `topic`'s `max.message.bytes` now and every [`REFRESH`] until
/// `shutdown`. A cluster that does not answer (down, or one that does not implement
/// DescribeConfigs, as librdkafka's mock cluster) leaves the limit as it was.
pub async fn watch(
    kafka: KafkaConfig,
    topic: String,
    limit: Arc<RecordLimit>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut told: Option<usize> = None;
    loop {
        let asked = tokio::select! {
            _ = shutdown.cancelled() => return,
            asked = featurelog_kafka::admin::topic_max_message_bytes(&kafka, &topic, Duration::from_secs(10)) => asked,
        };
        match asked {
            Ok(bytes) => {
                limit.learned(bytes);
                if told != Some(bytes) {
                    tracing::info!(
                        %topic,
                        max_message_bytes = bytes,
                        effective = limit.effective(),
                        "the topic's record size limit; larger records are dead-lettered as too_large"
                    );
                    told = Some(bytes);
                }
            }
            Err(err) => tracing::debug!(%topic, %err, "the topic's max.message.bytes is unknown"),
        }
        metrics.record_limit_bytes.set(limit.effective() as i64);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(REFRESH) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smaller_limit_wins_and_a_record_is_measured_with_its_framing() {
        let limit = RecordLimit::new(64 << 20);
        assert_eq!(limit.effective(), 64 << 20, "configured until learned");
        limit.learned(1_048_588);
        assert_eq!(limit.effective(), 1_048_588);
        assert_eq!(limit.exceeded(36, 1_000_000), None);
        let value = 1_048_588 - BATCH_OVERHEAD - 36;
        assert_eq!(limit.exceeded(36, value), None, "exactly at the limit");
        assert_eq!(limit.exceeded(36, value + 1), Some(1_048_588));
        let small = RecordLimit::new(10_000);
        small.learned(1_048_588);
        assert_eq!(
            small.effective(),
            10_000,
            "the configured limit when smaller"
        );
    }
}
