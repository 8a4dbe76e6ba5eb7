//! The router's Kafka transactions: each commits the events routed with the offsets they were
//! read at, exactly once; an abortable failure or a revoke aborts it and rewinds the consumer
//! to what is committed, and a retriable one is retried until shutdown.

use crate::state::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::consumer::JoinContext;
use super::error::{JoinError, client};
use super::thread::wait_unless_shutdown;

/// Commits the router's open transaction with its input offsets; on an abortable error
/// (a rebalance fenced the offsets), aborts and rewinds the consumer to what is committed.
/// Each offset carries the dataset's id as its commit metadata, which start-up checks
/// (`group_offsets.rs`): the offsets outlive the repartition records marked with it.
/// Returns false when it aborted. A retriable error (the coordinator restarting, a request
/// timing out during a broker outage) resumes the same step until it succeeds, as librdkafka
/// asks, or until shutdown: giving up there would stop the joiner over a passing outage.
pub(super) fn commit_router(
    producer: &BaseProducer,
    consumer: &BaseConsumer<JoinContext>,
    next: &mut HashMap<String, HashMap<i32, i64>>,
    dataset: &str,
    shutdown: &CancellationToken,
) -> Result<bool, JoinError> {
    let mut offsets = TopicPartitionList::new();
    for (topic, partitions) in next.iter() {
        for (partition, offset) in partitions {
            let mut at = offsets.add_partition(topic, *partition);
            at.set_offset(Offset::Offset(*offset))
                .map_err(client("building router offsets"))?;
            at.set_metadata(dataset);
        }
    }
    next.clear();
    let committed = match commit_with_offsets(producer, consumer, &offsets, shutdown) {
        Ok(()) => true,
        Err(RdKafkaError::Transaction(e)) if e.txn_requires_abort() => {
            tracing::warn!(error = %e, "router transaction aborted; rewinding to committed offsets");
            retrying(shutdown, "aborting a router transaction", || {
                featurelog_kafka::txn::abort_transaction(producer, TXN_TIMEOUT)
            })
            .map_err(client("aborting a transaction"))?;
            rewind(consumer, shutdown)?;
            false
        }
        Err(err) => return Err(client("committing a router transaction")(err)),
    };
    producer
        .begin_transaction()
        .map_err(client("beginning a transaction"))?;
    Ok(committed)
}

/// Adds `offsets` to the open transaction and commits it, each step retried (see
/// [`retrying`]).
fn commit_with_offsets(
    producer: &BaseProducer,
    consumer: &BaseConsumer<JoinContext>,
    offsets: &TopicPartitionList,
    shutdown: &CancellationToken,
) -> rdkafka::error::KafkaResult<()> {
    let metadata = consumer.group_metadata().ok_or(RdKafkaError::Canceled)?;
    retrying(
        shutdown,
        "adding the router's offsets to its transaction",
        || producer.send_offsets_to_transaction(offsets, &metadata, TXN_TIMEOUT),
    )?;
    retrying(shutdown, "committing a router transaction", || {
        producer.commit_transaction(TXN_TIMEOUT)
    })
}

/// How long one attempt of a transaction step may take.
pub(super) const TXN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a retriable failure waits before the step is tried again (less at shutdown).
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Runs `step` again while it fails with a retriable transaction error, until `shutdown`.
pub(super) fn retrying(
    shutdown: &CancellationToken,
    what: &'static str,
    mut step: impl FnMut() -> rdkafka::error::KafkaResult<()>,
) -> rdkafka::error::KafkaResult<()> {
    let mut attempt = 0u32;
    loop {
        match step() {
            Err(RdKafkaError::Transaction(e))
                if e.is_retriable() && !e.txn_requires_abort() && !e.is_fatal() =>
            {
                attempt += 1;
                if shutdown.is_cancelled() {
                    return Err(RdKafkaError::Transaction(e));
                }
                tracing::warn!(error = %e, attempt, "{what}: retrying");
                // Cut short by a shutdown: the next failure then returns.
                wait_unless_shutdown(shutdown, RETRY_AFTER);
            }
            // rust-rdkafka's commit first flushes the transaction's records, which may not
            // all be delivered within one attempt during an outage.
            Err(RdKafkaError::Flush(rdkafka::types::RDKafkaErrorCode::OperationTimedOut))
                if !shutdown.is_cancelled() =>
            {
                attempt += 1;
                tracing::warn!(attempt, "{what}: records not delivered yet; retrying");
            }
            done => return done,
        }
    }
}

/// After a revoke, completes the abort of the transaction it started, if the rebalance
/// callback could not (the coordinator unreachable), and begins the next transaction.
/// Returns true when a revoke aborted the open transaction: what the router gathered for it
/// is gone, and positions restart from committed offsets.
pub(super) fn after_revoke(
    producer: &BaseProducer,
    consumer: &BaseConsumer<JoinContext>,
    shutdown: &CancellationToken,
) -> Result<bool, JoinError> {
    use std::sync::atomic::Ordering;
    let context = consumer.context();
    if !context.router_aborted.swap(false, Ordering::SeqCst) {
        return Ok(false);
    }
    if context.abort_pending.load(Ordering::SeqCst) {
        retrying(
            shutdown,
            "aborting the router transaction of a rebalance",
            || featurelog_kafka::txn::abort_transaction(producer, TXN_TIMEOUT),
        )
        .map_err(client("aborting a transaction"))?;
        context.abort_pending.store(false, Ordering::SeqCst);
        producer
            .begin_transaction()
            .map_err(client("beginning a transaction"))?;
        tracing::info!("the router transaction of a rebalance is aborted");
    }
    Ok(true)
}

/// Seeks every assigned partition back to its committed offset. A broker that does not answer
/// is asked again (the positions must move back before anything else is routed).
pub(super) fn rewind(
    consumer: &BaseConsumer<JoinContext>,
    shutdown: &CancellationToken,
) -> Result<(), JoinError> {
    let assignment = consumer
        .assignment()
        .map_err(client("reading the assignment"))?;
    let committed = loop {
        match consumer.committed_offsets(assignment.clone(), Duration::from_secs(30)) {
            Ok(committed) => break committed,
            Err(err) if !shutdown.is_cancelled() && consumer.client().fatal_error().is_none() => {
                tracing::warn!(%err, "reading committed offsets to rewind the router: retrying");
                // Cut short by a shutdown: the next failure then returns.
                wait_unless_shutdown(shutdown, RETRY_AFTER);
            }
            Err(err) => return Err(client("reading committed offsets")(err)),
        }
    };
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        if let Err(err) = consumer.seek(e.topic(), e.partition(), offset, Duration::from_secs(10)) {
            tracing::warn!(%err, topic = e.topic(), partition = e.partition(), "rewind");
        }
    }
    Ok(())
}
