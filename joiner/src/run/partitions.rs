//! Partition counts while running: the feature-log topic must keep the dataset's count, and
//! the partitions of a topic assigned to this member.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use super::error::JoinError;

/// How often a running joiner asks the brokers whether the feature-log topic gained partitions.
pub(super) const PARTITIONS_CHECK: Duration = Duration::from_secs(10);

/// Stops the joiner when the feature-log topic has more partitions than it started with
/// (`partitions`, the dataset's count): from then on a sidecar puts a request's records where
/// no task has its events (docs/JOINER.md, "Partition counts"). `seen` is a partition a
/// record came from, when that is what raised the question. A broker that does not answer is
/// no answer: the next check asks again.
pub(super) fn check_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: i32,
    seen: Option<i32>,
) -> Result<(), JoinError> {
    let now = partitions_now(consumer, topic);
    let found = now
        .into_iter()
        .chain(seen.map(|p| p.saturating_add(1)))
        .max()
        .unwrap_or(partitions);
    if found > partitions {
        return Err(JoinError::PartitionsChanged {
            topic: topic.to_owned(),
            recorded: partitions,
            found,
        });
    }
    Ok(())
}

/// `topic`'s partition count as the brokers see it now, if they answer within 3 s: the join
/// loop waits for the answer, and during a broker outage a longer wait on every check would
/// hold up its commits for nothing.
pub(super) fn partitions_now<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
) -> Option<i32> {
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(3))
        .ok()
        .and_then(|m| {
            m.topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
                .and_then(|t| i32::try_from(t.partitions().len()).ok())
        })
}

/// The partitions of `topic` assigned to this member.
pub(super) fn assigned_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
) -> Vec<i32> {
    consumer.assignment().map_or_else(
        |_| Vec::new(),
        |a| {
            a.elements_for_topic(topic)
                .iter()
                .map(|e| e.partition())
                .collect()
        },
    )
}
