//! The start-up check that the join group's committed offsets belong to this dataset. They are
//! written for lag monitoring, after each checkpoint and never ahead of it, and the join
//! consumer starts each partition at them. An offset committed beyond the dataset's checkpoint
//! (or on a dataset with none) was committed for another dataset: the group was used with
//! another `output.path`, and joining on would skip every record before it.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::error::{JoinError, client};
use super::task::events_key;
use crate::config::JoinerConfig;
use crate::sink::Dataset;

/// Refuses to start when the group has committed, for a partition of the feature-log topic
/// or of the events input, an offset beyond this dataset's checkpoint of it. Blocks on the
/// brokers and the dataset.
pub(super) fn check_group_offsets(
    config: &JoinerConfig,
    dataset: &Dataset,
    partitions: i32,
) -> Result<(), JoinError> {
    let features = config.input.features_topic.clone();
    let events = config.join_events_topic();
    // The committed offsets first: each was committed after a checkpoint at least as far,
    // so checkpoints read afterwards are as far, even while other processes of the group
    // commit meanwhile.
    let committed = committed_offsets(config, &[&features, &events], partitions)?;
    let key = events_key(config.input.events_partitioning);
    let at = |topic: &str, p: i32| match committed.find_partition(topic, p)?.offset() {
        Offset::Offset(at) if at > 0 => Some(at),
        _ => None,
    };
    for p in 0..partitions {
        let ours = [(&features, "features"), (&events, key)].map(|(t, k)| (t, k, at(t, p)));
        // A partition the group committed nothing of needs no checkpoint read: a fresh group
        // costs the dataset no request.
        if ours.iter().all(|(_, _, at)| at.is_none()) {
            continue;
        }
        let checkpoint = dataset.latest_checkpoint(&format!("{features}-{p}"))?;
        for (topic, k, committed) in ours {
            let checkpointed = checkpoint
                .as_ref()
                .and_then(|cp| cp.offsets.get(k).copied())
                .unwrap_or(0);
            if let Some(committed) = committed.filter(|&at| at > checkpointed) {
                return Err(JoinError::GroupAhead {
                    group: config.group.clone(),
                    topic: topic.clone(),
                    partition: p,
                    committed,
                    checkpoint: checkpointed,
                    path: dataset.root().display().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// The join group's committed offsets of partitions `0..partitions` of `topics`, asked by a
/// consumer that does not join the group.
fn committed_offsets(
    config: &JoinerConfig,
    topics: &[&str],
    partitions: i32,
) -> Result<TopicPartitionList, JoinError> {
    let consumer: BaseConsumer = config
        .kafka
        .client_config(&[
            ("group.id", config.group.as_str()),
            ("enable.auto.commit", "false"),
        ])
        .create()
        .map_err(client("creating a consumer to read the group's offsets"))?;
    let mut tpl = TopicPartitionList::new();
    for topic in topics {
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
    }
    // A new broker, or one just restarted, answers "not coordinator" until the group's
    // coordinator is loaded: asked again until it is, as librdkafka does for a group member.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Err(err) if coordinator_not_ready(&err) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500));
            }
            committed => return committed.map_err(client("reading the group's committed offsets")),
        }
    }
}

/// Whether `err` says that the group's coordinator is not ready yet.
fn coordinator_not_ready(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorNotAvailable
                | RDKafkaErrorCode::CoordinatorLoadInProgress
        )
    )
}
