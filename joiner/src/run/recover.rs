//! A task's recovery from the dataset: its latest checkpoint's state and offsets, checked
//! against the configured events partitioning; and the restart of a task another owner
//! committed first.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use featurelog_kafka::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::error::{JoinError, client};
use super::inputs::Inputs;
use super::partitions::assigned_partitions;
use super::task::{Task, events_key};
use crate::config::{EventsPartitioning, JoinerConfig};
use crate::sink::{Checkpoint, Dataset};
use crate::state::JoinState;

/// Reads the records at `offsets` of a feature-log partition back for a restore, in one pass
/// from the lowest to the highest. Records the topic no longer has (retention, compaction)
/// are missing from the answer; the restore counts them.
pub(super) fn read_back(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
    partition: i32,
    offsets: &BTreeSet<i64>,
) -> Result<HashMap<i64, Vec<u8>>, String> {
    let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) else {
        return Ok(HashMap::new());
    };
    let failed = |what: &str, e: RdKafkaError| {
        format!(
            "reading held feature logs back from {topic}[{partition}] at offsets {first}..={last}: {what}: {e}"
        )
    };
    // librdkafka wants a group id even for assign(); this consumer never joins it (no
    // subscribe) and commits nothing.
    let consumer: BaseConsumer = kafka
        .client_config(&[
            ("group.id", group),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("isolation.level", "read_committed"),
        ])
        .create()
        .map_err(|e| failed("creating a consumer", e))?;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(30))
        .map_err(|e| failed("reading the partition's offsets", e))?;
    let start = first.max(low);
    let end = last.min(high - 1);
    let mut found = HashMap::with_capacity(offsets.len());
    if start > end {
        return Ok(found);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(start))
        .and_then(|()| consumer.assign(&assignment))
        .map_err(|e| failed("assigning the partition", e))?;
    let mut last_record = Instant::now();
    let mut last_error = String::from("none");
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                last_record = Instant::now();
                if offsets.contains(&m.offset()) {
                    found.insert(m.offset(), m.payload().unwrap_or_default().to_vec());
                }
                if m.offset() >= end {
                    return Ok(found);
                }
            }
            // Consumer errors are events, not the end of the read: an offset reset when
            // retention deletes the start meanwhile, a broker that is restarting. The time
            // bound below ends a read that makes no progress.
            Some(Err(e)) => {
                tracing::warn!(topic, partition, error = %e, "reading held feature logs back");
                last_error = e.to_string();
            }
            None => {}
        }
        if last_record.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "reading held feature logs back from {topic}[{partition}]: no record for 60 s before offset {end} (last error: {last_error}); is the broker reachable?"
            ));
        }
    }
}

/// Refuses a checkpoint written with the other `input.events-partitioning`.
pub(super) fn same_partitioning(
    cp: &Checkpoint,
    partitioning: EventsPartitioning,
) -> Result<(), JoinError> {
    let other = match partitioning {
        EventsPartitioning::Any => EventsPartitioning::ByRequestId,
        EventsPartitioning::ByRequestId => EventsPartitioning::Any,
    };
    if cp.offsets.contains_key(events_key(other)) {
        return Err(JoinError::PartitioningChanged {
            task: cp.task.clone(),
            written: other.as_str(),
            configured: partitioning.as_str(),
        });
    }
    Ok(())
}

/// Task `partition` as its latest checkpoint left it (its state restored, held feature logs
/// read back from the topic when the checkpoint refers to them by offset), or a new task.
pub(super) fn recover(
    dataset: &Dataset,
    partition: i32,
    config: &JoinerConfig,
    event_sources: u32,
) -> Result<Task, JoinError> {
    let topic = &config.input.features_topic;
    let name = &format!("{topic}-{partition}");
    let checkpoint = dataset.recover(name)?;
    let partitioning = config.input.events_partitioning;
    let (state, next, epoch, committed_watermark_us, state_file) = match checkpoint {
        Some(cp) => {
            same_partitioning(&cp, partitioning)?;
            let state = match &cp.state {
                Some(path) => {
                    let bytes = dataset.read_state(path)?;
                    // Segments by the names the snapshot gives them.
                    let segment = |file: &str| dataset.read_state(file).map_err(|e| e.to_string());
                    let read_back = |offsets: &BTreeSet<i64>| {
                        read_back(
                            &config.kafka,
                            &format!("{}.read-back", config.group),
                            topic,
                            partition,
                            offsets,
                        )
                    };
                    let state = JoinState::restore(
                        config.join_config(event_sources),
                        &bytes,
                        segment,
                        read_back,
                    )
                    .map_err(|message| JoinError::Restore {
                        task: name.to_owned(),
                        path: path.clone(),
                        message,
                    })?;
                    if state.counts.lost_on_restore > 0 {
                        tracing::error!(
                            task = name,
                            lost = state.counts.lost_on_restore,
                            "held feature logs are no longer in the feature-log topic (its retention is shorter than the time they are held plus the joiner's downtime): their impressions will find no features"
                        );
                    }
                    state
                }
                None => JoinState::new(config.join_config(event_sources)),
            };
            let at = |k: &str| cp.offsets.get(k).copied().unwrap_or(0);
            (
                state,
                Inputs {
                    features: at("features"),
                    events: at(events_key(partitioning)),
                },
                cp.epoch,
                cp.watermark_us,
                cp.state,
            )
        }
        None => (
            JoinState::new(config.join_config(event_sources)),
            Inputs::default(),
            0,
            i64::MIN,
            None,
        ),
    };
    tracing::info!(
        task = name,
        epoch,
        features_offset = next.features,
        events_offset = next.events,
        held_requests = state.requests(),
        "task recovered"
    );
    Ok(Task {
        last_state_files: state
            .segment_files()
            .into_iter()
            .chain(state_file)
            .collect(),
        name: name.to_owned(),
        last_features: std::time::Instant::now(),
        last_events: std::time::Instant::now(),
        misplaced: 0,
        state,
        next,
        epoch,
        committed_watermark_us,
        rows: crate::buffer::Rows::default(),
        dirty: false,
        reported: crate::state::Counts::default(),
        alignment: crate::align::Alignment::default(),
    })
}

/// After another owner committed task `p` first (a fence): if `p` is still assigned here, the
/// task starts again from that owner's checkpoint, and the consumer's positions in both of its
/// partitions move to the checkpoint's offsets. Without the seek, the records between those
/// offsets and where this consumer had read to would never be read by the new task.
pub(super) fn follow_fence<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    dataset: &Dataset,
    p: i32,
    config: &JoinerConfig,
    event_sources: u32,
    topics: &Inputs<String>,
) -> Result<Option<Task>, JoinError> {
    if !assigned_partitions(consumer, &topics.features).contains(&p) {
        return Ok(None);
    }
    let task = recover(dataset, p, config, event_sources)?;
    for (topic, next) in [
        (&topics.features, task.next.features),
        (&topics.events, task.next.events),
    ] {
        consumer
            .seek(
                topic,
                p,
                rdkafka::Offset::Offset(next),
                Duration::from_secs(10),
            )
            .map_err(client(
                "seeking to the checkpoint of a task another owner committed",
            ))?;
    }
    tracing::info!(task = %task.name, epoch = task.epoch, "task follows the other owner's checkpoint");
    Ok(Some(task))
}
