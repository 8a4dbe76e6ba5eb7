//! What the producer reports back: delivery outcomes, client errors and statistics, and what
//! each means for the sidecar.
//!
//! A produce or delivery error is one of two kinds ([`classify`]):
//! - the brokers refuse this record for what it is (too large for the topic, invalid, a topic
//!   that does not exist): the call is counted under its reason and dead-lettered with its model
//!   and request id, and nothing else changes;
//! - the brokers or the network failed: only these feed the adaptive controller, and a run of
//!   them is an outage, logged once when it starts and once when it ends, with counts
//!   ([`Outage`]), whatever librdkafka says in between.

use crate::reason::{DeadLetter, Dropped};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::Message as _;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};

use crate::metrics::Metrics;

use super::dead_letter::Rejected;

/// Delivery outcomes since the adaptive controller last looked.
#[derive(Debug, Default)]
pub(crate) struct Window {
    pub(crate) delivered: AtomicU64,
    /// Broker and transport failures only.
    pub(crate) failed: AtomicU64,
}

/// What a produced record was, for its delivery report.
pub(crate) enum Sent {
    /// A FeatureLog record.
    Record(Produced),
    /// A dead letter.
    DeadLetter,
}

/// A FeatureLog record handed to the producer: what its delivery report needs to describe it.
pub(crate) struct Produced {
    pub(crate) at: Instant,
    pub(crate) model: String,
    pub(crate) binding: &'static str,
    pub(crate) request_bytes: usize,
    pub(crate) served_at: std::time::SystemTime,
}

/// How a produce or delivery error counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The brokers will not take this record whatever their health: the `dropped_total` and
    /// dead-letter reason.
    Record(Dropped),
    /// The brokers or the network failed; the record might have gone through another time.
    Broker,
}

/// Tells a record the brokers refuse for what it is from a broker or transport failure.
pub(crate) fn classify(err: &KafkaError) -> Failure {
    use RDKafkaErrorCode as C;
    let code = match err {
        KafkaError::MessageProduction(code) => *code,
        other => match other.rdkafka_error_code() {
            Some(code) => code,
            None => return Failure::Broker,
        },
    };
    match code {
        C::MessageSizeTooLarge | C::InvalidMessageSize | C::MessageBatchTooLarge => {
            Failure::Record(Dropped::TooLarge)
        }
        C::InvalidMessage | C::InvalidRecord | C::BadMessage | C::InvalidTimestamp => {
            Failure::Record(Dropped::InvalidRecord)
        }
        C::UnknownTopic
        | C::UnknownTopicOrPartition
        | C::UnknownPartition
        | C::InvalidTopic
        | C::TopicAuthorizationFailed => Failure::Record(Dropped::UnknownTopic),
        _ => Failure::Broker,
    }
}

/// A run of broker or transport failures, logged as one event: a line when the first failure
/// comes, a line with the counts when the brokers answer again. librdkafka reports a lost
/// broker several times a second; an operator needs to know when it started and when it ended.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// Set while an outage is on: the common case, a healthy producer, never takes the lock.
    on: AtomicBool,
    state: Mutex<Option<OutageState>>,
}

#[derive(Debug)]
struct OutageState {
    since: Instant,
    errors: u64,
    failed_records: u64,
}

impl Outage {
    /// A client error or a failed delivery (`record`) for `reason`. Returns whether this
    /// started the outage (and so was logged).
    pub(crate) fn failure(&self, reason: &str, record: bool) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        match state.as_mut() {
            Some(s) => {
                if record {
                    s.failed_records += 1;
                } else {
                    s.errors += 1;
                }
                tracing::debug!("Kafka producer (outage continues): {reason}");
                false
            }
            None => {
                *state = Some(OutageState {
                    since: Instant::now(),
                    errors: u64::from(!record),
                    failed_records: u64::from(record),
                });
                self.on.store(true, Ordering::Release);
                tracing::warn!(
                    "Kafka brokers are failing: {reason}. Calls are still served; records wait in the producer's queue up to message.timeout.ms and the logged fraction goes down while deliveries fail (featurelog_sidecar_logged_fraction). The end of this outage is logged with its counts."
                );
                true
            }
        }
    }

    /// The brokers answered (a record was acknowledged, or a probe was answered): ends the
    /// outage, if one was on, and logs how long it lasted. Returns its length then.
    pub(crate) fn healthy(&self) -> Option<Duration> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        let ended = self.state.lock().ok()?.take()?;
        self.on.store(false, Ordering::Release);
        let lasted = ended.since.elapsed();
        tracing::info!(
            lasted = %humantime::format_duration(Duration::from_millis(lasted.as_millis() as u64)),
            client_errors = ended.errors,
            failed_records = ended.failed_records,
            "Kafka brokers answer again"
        );
        Some(lasted)
    }

    /// Whether an outage is on.
    #[cfg(test)]
    fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }
}

/// At most one log line every [`Throttle::EVERY`], saying how many were held back: for warnings
/// that a client can cause once a call.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    const EVERY: Duration = Duration::from_secs(10);

    /// `Some(held back since the last line)` when a line may be written now.
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().ok()?;
        let (last, held) = &mut *state;
        match last {
            Some(at) if now.saturating_duration_since(*at) < Self::EVERY => {
                *held += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(held))
            }
        }
    }
}

/// The producer's context: counts deliveries for the metrics and the adaptive controller, and
/// passes refused records back to the publisher threads to be dead-lettered.
pub(crate) struct DeliveryContext {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) window: Arc<Window>,
    pub(crate) outage: Arc<Outage>,
    /// Records the brokers refused, waiting for a publisher thread to dead-letter them (a
    /// delivery report cannot produce).
    pub(crate) refused: Arc<Mutex<Vec<Rejected>>>,
    /// Whether a dead letter's failure has been logged: the first says what to do, the rest
    /// are counted (a missing topic would fail every one).
    pub(crate) dead_letter_failed: AtomicBool,
    /// Refused records are logged at most this often.
    pub(crate) refused_log: Throttle,
}

impl DeliveryContext {
    /// Counts, logs and queues for a dead letter one FeatureLog record the brokers refused.
    pub(crate) fn refused(&self, rejected: Rejected) {
        let reason = rejected.reason;
        self.metrics.drop_call(reason);
        if let Some(held) = self.refused_log.admit(Instant::now()) {
            tracing::warn!(
                model = %rejected.model,
                request_id = %rejected.request_id,
                record_bytes = rejected.record_bytes.unwrap_or_default(),
                held_back = held,
                "a record was not logged: {} (counted in featurelog_sidecar_dropped_total{{reason=\"{reason}\"}} and dead-lettered)",
                rejected.detail,
            );
        }
        if let Ok(mut refused) = self.refused.lock() {
            // Bounded: dead letters have a budget of their own, and a publisher thread takes
            // these every round.
            if refused.len() < 1024 {
                refused.push(rejected);
            }
        }
    }
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::Fatal)) {
            tracing::error!(%error, "Kafka producer failed for good: {reason}; restart the sidecar");
            return;
        }
        self.outage.failure(&format!("{error}: {reason}"), false);
    }

    fn stats(&self, statistics: rdkafka::Statistics) {
        // What actually went over the wire, after batching and compression.
        self.metrics.kafka_tx_bytes.set(statistics.tx_bytes);
        self.metrics.kafka_txmsg_bytes.set(statistics.txmsg_bytes);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Sent>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Sent>) {
        let produced = match *sent {
            Sent::Record(produced) => produced,
            Sent::DeadLetter => {
                let Err((err, message)) = result else {
                    return self.metrics.dead_letter(DeadLetter::Delivered);
                };
                self.metrics.dead_letter(DeadLetter::Failed);
                if !self.dead_letter_failed.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        topic = message.topic(),
                        %err,
                        "a dead letter was not delivered (later failures are only counted, in featurelog_sidecar_dead_letters_total{{outcome=\"failed\"}}): create the topic, or set publish.dead-letter-topic = \"\" to send none"
                    );
                }
                return;
            }
        };
        let (err, message) = match result {
            Ok(_) => {
                self.metrics.records_delivered.inc();
                self.metrics
                    .delivery_latency
                    .observe(produced.at.elapsed().as_secs_f64());
                self.window.delivered.fetch_add(1, Ordering::Relaxed);
                self.outage.healthy();
                return;
            }
            Err((err, message)) => (err, message),
        };
        match classify(err) {
            Failure::Record(reason) => {
                let request_id = message
                    .key()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default();
                let size = message.payload_len();
                let rejected = Rejected::new(
                    reason,
                    produced.binding,
                    format!(
                        "the brokers refused the record ({size} bytes) on topic {:?}: {err}",
                        message.topic()
                    ),
                )
                .model(&produced.model, "")
                .call(&request_id, produced.request_bytes, produced.served_at)
                .record_bytes(size);
                self.refused(rejected);
            }
            Failure::Broker => {
                self.metrics.delivery_errors.inc();
                self.metrics.drop_call(Dropped::DeliveryFailed);
                self.window.failed.fetch_add(1, Ordering::Relaxed);
                self.outage.failure(
                    &format!(
                        "a record of model {:?} was not delivered to {:?}: {err}",
                        produced.model,
                        message.topic()
                    ),
                    true,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_the_brokers_refuse_never_read_as_a_sick_broker() {
        let production = |code| classify(&KafkaError::MessageProduction(code));
        assert_eq!(
            production(RDKafkaErrorCode::MessageSizeTooLarge),
            Failure::Record(Dropped::TooLarge)
        );
        assert_eq!(
            production(RDKafkaErrorCode::InvalidRecord),
            Failure::Record(Dropped::InvalidRecord)
        );
        assert_eq!(
            production(RDKafkaErrorCode::UnknownTopicOrPartition),
            Failure::Record(Dropped::UnknownTopic)
        );
        for broker in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::RequestTimedOut,
            RDKafkaErrorCode::QueueFull,
        ] {
            assert_eq!(production(broker), Failure::Broker, "{broker:?}");
        }
    }

    #[test]
    fn an_outage_is_one_line_when_it_starts_and_one_when_it_ends() {
        let outage = Outage::default();
        assert_eq!(outage.healthy(), None, "no outage, nothing to end");
        assert!(outage.failure("all brokers down", false));
        for _ in 0..100 {
            assert!(!outage.failure("all brokers down", false));
            assert!(!outage.failure("timed out", true));
        }
        assert!(outage.is_on());
        assert!(outage.healthy().is_some());
        assert!(!outage.is_on());
        assert_eq!(outage.healthy(), None, "ended once");
        assert!(outage.failure("again", true), "a new outage is a new line");
    }

    #[test]
    fn the_throttle_writes_one_line_per_period_and_counts_the_rest() {
        let throttle = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(throttle.admit(t0), Some(0));
        for i in 1..=50 {
            assert_eq!(throttle.admit(t0 + Duration::from_millis(i * 100)), None);
        }
        assert_eq!(throttle.admit(t0 + Duration::from_secs(11)), Some(50));
    }
}
