//! The start-up checks that the groups' committed offsets belong to this dataset.
//! - The join group's are written for lag monitoring, after each checkpoint and never ahead of
//!   it, and the join consumer starts each partition at them. An offset committed beyond the
//!   dataset's checkpoint (or on a dataset with none) was committed for another dataset: the
//!   group was used with another `output.path`, and joining on would skip every record before
//!   it.
//! - The router's carry the id of the dataset they were routed for, as commit metadata. An
//!   offset of another id means the same, and the router would resume after every event that
//!   dataset had. The repartition records carry the id too, but they may have expired while
//!   the offsets have not.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::error::{JoinError, OtherDataset, client};
use super::task::events_key;
use crate::config::JoinerConfig;
use crate::sink::Dataset;

/// Refuses to start when the join group has committed, for a partition of the feature-log
/// topic or of the events input, an offset beyond this dataset's checkpoint of it. Blocks on
/// the brokers and the dataset.
pub(super) fn check_join_group(
    config: &JoinerConfig,
    dataset: &Dataset,
    partitions: i32,
) -> Result<(), JoinError> {
    let features = config.input.features_topic.clone();
    let events = config.join_events_topic();
    // The committed offsets first: each was committed after a checkpoint at least as far,
    // so checkpoints read afterwards are as far, even while other processes of the group
    // commit meanwhile.
    let consumer = offsets_reader(config, &config.group)?;
    let committed = committed_offsets(
        &consumer,
        [
            (features.as_str(), partitions),
            (events.as_str(), partitions),
        ],
    )?;
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

/// Refuses to start when the router's group has committed an offset of an events topic (each
/// with its partition count, in `events`) for a dataset other than `dataset_id`. An offset
/// without an id was committed by a router that did not give one, and is accepted. Blocks on
/// the brokers.
pub(super) fn check_router_group(
    config: &JoinerConfig,
    dataset: &Dataset,
    dataset_id: &str,
    events: &[(String, i32)],
) -> Result<(), JoinError> {
    let consumer = offsets_reader(config, &config.router_group())?;
    let committed = committed_offsets(
        &consumer,
        events.iter().map(|(topic, count)| (topic.as_str(), *count)),
    )?;
    let other = committed.elements().into_iter().find(|e| {
        matches!(e.offset(), Offset::Offset(_))
            && !e.metadata().is_empty()
            && e.metadata() != dataset_id
    });
    match other {
        Some(e) => Err(JoinError::RouterOtherDataset(Box::new(OtherDataset {
            group: config.group.clone(),
            topic: e.topic().to_owned(),
            partition: e.partition(),
            offset: e.offset().to_raw().unwrap_or_default(),
            found: e.metadata().to_owned(),
            path: dataset.root().display().to_string(),
            expected: dataset_id.to_owned(),
        }))),
        None => Ok(()),
    }
}

/// A consumer that reads `group`'s committed offsets without joining it.
fn offsets_reader(config: &JoinerConfig, group: &str) -> Result<BaseConsumer, JoinError> {
    config
        .kafka
        .client_config(&[
            ("group.id", group),
            ("enable.auto.commit", "false"),
            // With `read_committed`, librdkafka asks for stable offsets only, and the broker
            // holds the answer while a transaction commits offsets: one a killed router left
            // open waits for its timeout or for the next router, which starts after this
            // check. The offsets committed before it are the ones to check.
            ("isolation.level", "read_uncommitted"),
        ])
        .create()
        .map_err(client("creating a consumer to read a group's offsets"))
}

/// The committed offsets of every partition of `topics`, each given with its partition count.
fn committed_offsets<'a>(
    consumer: &BaseConsumer,
    topics: impl IntoIterator<Item = (&'a str, i32)>,
) -> Result<TopicPartitionList, JoinError> {
    let mut tpl = TopicPartitionList::new();
    for (topic, partitions) in topics {
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
