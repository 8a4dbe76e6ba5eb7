//! Transactions with a `BaseProducer`: what librdkafka expects of the application around
//! them that rust-rdkafka's `BaseProducer` does not do by itself.

use std::time::{Duration, Instant};

use rdkafka::error::KafkaResult;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext, PurgeConfig};

/// Aborts `producer`'s open transaction within `timeout`.
///
/// librdkafka's abort first waits until the application has taken the delivery report of
/// every record the transaction sent, and a `BaseProducer` hands reports over only when it
/// is polled. Nothing polls while the caller is blocked in the abort, so with one report not
/// yet taken (a record sent moments ago, or still in flight) `abort_transaction` always waits
/// out its whole timeout and fails. This purges the records not yet sent and polls the
/// reports of those in flight first; the abort then only has to tell the coordinator.
///
/// A retriable error (the coordinator unreachable) leaves the abort in progress: call this
/// again to resume it, as librdkafka asks.
pub fn abort_transaction<C: ProducerContext>(
    producer: &BaseProducer<C>,
    timeout: Duration,
) -> KafkaResult<()> {
    let deadline = Instant::now() + timeout;
    producer.purge(PurgeConfig::default().queue());
    while producer.in_flight_count() > 0 && Instant::now() < deadline {
        producer.poll(Duration::from_millis(50));
    }
    producer.abort_transaction(deadline.saturating_duration_since(Instant::now()))
}
