//! A task's commit: its rows, state and offsets in one checkpoint of the dataset, and the
//! consumer offsets committed after it for lag monitoring.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::consumer::JoinContext;
use super::error::{JoinError, client};
use super::inputs::Inputs;
use super::task::{Task, events_key};
use crate::config::EventsPartitioning;
use crate::dead_letter::DEAD_LETTER_WAIT;
use crate::metrics::JoinMetrics;
use crate::sink::{Checkpoint, Dataset, SinkError};

/// Commits a task: its rows, its state and its offsets, in one checkpoint. Returns false when
/// another owner committed first (the task must be dropped).
pub(super) fn flush(
    dataset: &Dataset,
    task: &mut Task,
    partitioning: EventsPartitioning,
    completeness_lag: i64,
    metrics: &JoinMetrics,
    dead_letters: &BaseProducer,
) -> Result<bool, JoinError> {
    if !task.dirty {
        return Ok(true);
    }
    // A state file does not hold the impressions held ahead of the feature logs.
    let released = task.state.release_held();
    task.rows.extend(released);
    // The checkpoint commits the offsets of the records this task dead-lettered: their dead
    // letters must be on the broker first, or a crash right after the commit loses them (no
    // restart reads those records again).
    if dead_letters.in_flight_count() > 0 {
        dead_letters.flush(DEAD_LETTER_WAIT).map_err(client(
            "delivering dead letters before a commit (is the broker reachable?)",
        ))?;
    }
    let epoch = task.epoch + 1;
    let complete_before = task.committed_watermark_us.saturating_sub(completeness_lag);
    let staged = dataset.stage(&task.name, epoch, task.rows.as_slice(), complete_before)?;
    let staged_late = staged.late_rows;
    if staged.late_rows > 0 {
        tracing::warn!(task = %task.name, rows = staged.late_rows, "rows for hours already complete written under late/");
    }
    let files = staged.files.clone();
    // This writer's own name: a zombie of this epoch writes another file, never this one.
    let snapshot = task
        .state
        .snapshot(epoch, &dataset.state_name(&task.name, epoch));
    let state = dataset.stage_state(&task.name, epoch, snapshot.bytes)?;
    let checkpoint = Checkpoint {
        task: task.name.clone(),
        epoch,
        offsets: [
            ("features".to_string(), task.next.features),
            (events_key(partitioning).to_string(), task.next.events),
        ]
        .into(),
        watermark_us: task.state.watermark_us(),
        files,
        state: Some(state.clone()),
        staging: staged.staging,
    };
    match dataset.commit(&checkpoint) {
        Ok(()) => {}
        // The store applied this very commit and lost its answer (an outage): object_store's
        // retry was refused because the checkpoint now exists. Without this, the task was
        // dropped and restored from its own checkpoint, warning of another owner that did
        // not exist.
        Err(SinkError::Fenced { .. }) if dataset.is_own_commit(&checkpoint) => {
            tracing::info!(task = %task.name, epoch, "commit confirmed after its answer was lost");
        }
        Err(SinkError::Fenced { .. }) => {
            tracing::warn!(task = %task.name, epoch, "another owner committed this task; dropping it");
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    }
    dataset.roll_forward(&checkpoint)?;
    let keep: Vec<String> = snapshot
        .files
        .iter()
        .chain([&state])
        .chain(&task.last_state_files)
        .cloned()
        .collect();
    // Old state files only cost space: a failure to delete them is no reason to stop. Those
    // of losing writers of committed epochs go too; later epochs are never touched.
    if let Err(err) = dataset.prune_state(&task.name, &keep, epoch) {
        tracing::warn!(task = %task.name, %err, "old state files not deleted");
    }
    // Likewise old checkpoints: the next commit retries from the first one not deleted.
    if let Err(err) = dataset.prune_checkpoints(&task.name, epoch) {
        tracing::warn!(task = %task.name, %err, "old checkpoints not deleted");
    }
    task.last_state_files = snapshot.files.into_iter().chain([state]).collect();
    metrics.commits.inc();
    metrics.rows_written(
        task.rows
            .as_slice()
            .iter()
            .map(|r| r.features.model_name.as_str()),
    );
    metrics.late_rows.inc_by(staged_late as u64);
    tracing::debug!(task = %task.name, epoch, rows = task.rows.len(), "committed");
    task.epoch = epoch;
    task.committed_watermark_us = checkpoint.watermark_us;
    task.rows.clear();
    task.dirty = false;
    Ok(true)
}

/// Kafka's committed offsets are for lag monitoring only; the checkpoints are the truth. They
/// never run ahead of a checkpoint: only committed positions are written.
pub(super) fn commit_monitoring(
    consumer: &BaseConsumer<JoinContext>,
    tasks: &HashMap<i32, Task>,
    topics: &Inputs<String>,
) {
    let mut tpl = TopicPartitionList::new();
    for (p, task) in tasks {
        if task.dirty {
            continue;
        }
        for (topic, next) in [
            (&topics.features, task.next.features),
            (&topics.events, task.next.events),
        ] {
            if next > 0 {
                let _ = tpl.add_partition_offset(topic, *p, Offset::Offset(next));
            }
        }
    }
    if tpl.count() == 0 {
        return;
    }
    // One commit in flight at a time. While the coordinator is unreachable librdkafka queues
    // every commit; each tick's would pile up (and fail one by one in the log when the
    // outage ends), and one that goes out after the session timed out gets a static member
    // fenced. A commit whose answer never comes is given up on after a while.
    let Ok(mut sent) = consumer.context().commit_sent.lock() else {
        return;
    };
    if sent.is_some_and(|at| at.elapsed() < MONITORING_COMMIT_TIMEOUT) {
        return;
    }
    match consumer.commit(&tpl, rdkafka::consumer::CommitMode::Async) {
        Ok(()) => *sent = Some(Instant::now()),
        Err(err) => tracing::debug!(%err, "monitoring offsets not committed"),
    }
}

/// How long a monitoring commit may stay unanswered before the next is sent anyway.
pub(super) const MONITORING_COMMIT_TIMEOUT: Duration = Duration::from_secs(60);
