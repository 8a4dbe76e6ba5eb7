//! The start-up check that the repartition topic's oldest records were routed for this
//! dataset. A task without a checkpoint reads the topic from its start, and refuses a record
//! marked for another dataset (`repartition::same_dataset`); by then the router would have
//! routed the events under this dataset's id and committed its offsets with it, so the group
//! would no longer resume the other dataset either. Asked before either stage starts, the
//! refusal leaves the group as it was.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::error::{JoinError, client};
use super::repartition::same_dataset;
use crate::config::JoinerConfig;
use crate::sink::Dataset;

/// How long the oldest records may take to come. A broker that does not answer in time leaves
/// the check to the tasks, which make it on every record.
const WAIT: Duration = Duration::from_secs(30);

/// Refuses to start when the oldest record of a partition of the repartition topic is marked
/// for a dataset other than `dataset_id`. Blocks on the brokers.
pub(super) fn check_oldest_marks(
    config: &JoinerConfig,
    dataset: &Dataset,
    dataset_id: &str,
    partitions: i32,
) -> Result<(), JoinError> {
    let topic = config.repartition_topic();
    // librdkafka wants a group id even for assign(); this consumer never joins the group (no
    // subscribe) and commits nothing.
    let consumer: BaseConsumer<EndsAreNoErrors> = config
        .kafka
        .client_config(&[
            ("group.id", config.group.as_str()),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "true"),
            // Records expiring between the lookup and the fetch: the oldest left.
            ("auto.offset.reset", "earliest"),
            // As the tasks read: records of aborted router transactions are not the topic's.
            ("isolation.level", "read_committed"),
            // An empty partition answers at once rather than after the broker's wait for
            // records (librdkafka's 500 ms), which would delay every start by that much.
            ("fetch.wait.max.ms", "10"),
        ])
        .create_with_context(EndsAreNoErrors)
        .map_err(client("creating a consumer to read the repartition topic"))?;
    let deadline = Instant::now() + WAIT;
    // The partitions' leaders known first: asked before, librdkafka's lookup of the oldest
    // offsets failed and was retried half a second later, on every start.
    if let Err(err) = consumer.fetch_metadata(Some(&topic), WAIT) {
        tracing::debug!(%err, %topic, "reading the repartition topic's leaders");
    }
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(&topic, p, Offset::Beginning)
            .map_err(client("assigning the repartition topic"))?;
    }
    consumer
        .assign(&tpl)
        .map_err(client("assigning the repartition topic"))?;
    let mut left: BTreeSet<i32> = (0..partitions).collect();
    let mut last_error = None;
    while !left.is_empty() {
        if Instant::now() >= deadline {
            tracing::warn!(%topic, partitions = ?left, error = ?last_error, "the oldest records of the repartition topic did not come within {WAIT:?}: the tasks check them as they read");
            break;
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) if left.remove(&message.partition()) => {
                same_dataset(&message, dataset_id, &config.group, dataset)?;
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                left.remove(&p);
            }
            // A topic just created may be unknown to the broker asked for a while, and a
            // broker may be restarting: librdkafka retries, and so does this loop.
            Some(Err(err)) => last_error = Some(err),
            Some(Ok(_)) | None => {}
        }
    }
    Ok(())
}

/// rust-rdkafka hands every error event to the client context before the consumer's `poll`
/// returns it, and its default context logs each as an error: an operator would read one per
/// partition at every start. The ends of partitions are this check's answers.
struct EndsAreNoErrors;

impl ClientContext for EndsAreNoErrors {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            DefaultClientContext.error(error, reason);
        }
    }
}

impl ConsumerContext for EndsAreNoErrors {}
