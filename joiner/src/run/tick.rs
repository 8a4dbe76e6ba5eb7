//! The join stage's tick, every `output.flush-interval`: checks the partition counts, moves
//! the watermarks of quiet partitions, keeps each task's inputs aligned, commits every task,
//! reports the metrics and starts the completeness markers' next pass (on a thread of its own).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::consumer::fatal;
use super::error::JoinError;
use super::flush::commit_monitoring;
use super::join::{Join, MarkerPass, Running};
use super::partitions::{PARTITIONS_CHECK, assigned_partitions, check_partitions, partitions_now};
use super::reading::{Positions, wall_clock_us};
use super::task::Task;
use super::thread::{panic_message, spawn_named};
use crate::align::Input;
use crate::state::Row;

/// One tick of the join stage, its steps in order.
pub(super) fn tick(join: &Join, running: &mut Running) -> Result<(), JoinError> {
    fatal(&join.consumer, "join consumer")?;
    join.drop_revoked(&mut running.tasks);
    if running.partitions_checked.elapsed() >= PARTITIONS_CHECK {
        running.partitions_checked = Instant::now();
        check_partition_counts(join, running)?;
    }
    if join.direct {
        start_assigned_tasks(join, running)?;
    }
    // How far each partition is read: the consumer's position, which steps over the
    // transaction markers no message carries (an app writing its events in transactions ends
    // each with one), or the task's own next offset if further.
    let positions = Positions::new(&join.consumer);
    idle_watermarks(join, &mut running.tasks, &positions);
    align_tasks(join, &mut running.tasks, &positions);
    commit_tasks(join, running)?;
    commit_monitoring(&join.consumer, &running.tasks, &join.topics);
    report_metrics(join, &mut running.tasks);
    // One process of the group does the Delta table's upkeep: the owner of the first task.
    // Two would be correct too (a compaction commits only while its files are all in the
    // table), but each would read and write every hour the other does.
    let upkeep = running.tasks.contains_key(&0);
    mark_complete(join, &mut running.markers, upkeep);
    join.dead_letters.poll(Duration::ZERO);
    Ok(())
}

/// Stops on a feature-log topic that gained partitions; follows an events topic that did.
fn check_partition_counts(join: &Join, running: &mut Running) -> Result<(), JoinError> {
    let consumer = &join.consumer;
    check_partitions(consumer, &join.topics.features, join.partitions, None)?;
    // Apps may add partitions to their events topic: the router reads them (once its metadata
    // shows them) and every task's watermark waits for them, so that their events are not late
    // for a watermark that moved on without them. (Co-partitioned events are refused per event
    // instead: not_co_partitioned.)
    if join.direct {
        return Ok(());
    }
    let events_topic = &join.config.input.events_topic;
    let now = events_topic
        .names()
        .iter()
        .map(|t| partitions_now(consumer, t))
        .sum::<Option<i32>>();
    let was = running.event_sources;
    if let Some(now) = now.and_then(|n| u32::try_from(n).ok()).filter(|&n| n > was) {
        tracing::warn!(topic = %events_topic.joined(), was, now, "the events topic gained partitions: windows wait for the router to read them");
        running.event_sources = now;
        for task in running.tasks.values_mut() {
            task.state.set_event_sources(now);
        }
    }
    Ok(())
}

/// Starts a task for every assigned partition that has none. No router reports progress to
/// every partition with co-partitioned events: a task whose two partitions stay empty must
/// still exist, or its watermark would hold every hour incomplete.
fn start_assigned_tasks(join: &Join, running: &mut Running) -> Result<(), JoinError> {
    for p in assigned_partitions(&join.consumer, &join.topics.features) {
        if let std::collections::hash_map::Entry::Vacant(e) = running.tasks.entry(p) {
            e.insert(join.recover(p, running.event_sources)?);
        }
    }
    Ok(())
}

/// Moves the watermark of each task's inputs that are read to their end and have been quiet
/// for `join.idle-timeout` to the wall clock.
fn idle_watermarks(join: &Join, tasks: &mut HashMap<i32, Task>, positions: &Positions<'_>) {
    let idle = join.config.join.idle_timeout;
    let ooo = i64::try_from(join.config.join.max_out_of_orderness.as_micros()).unwrap_or(i64::MAX);
    for (p, task) in tasks.iter_mut() {
        // What the router does for an events partition it reads (router_progress).
        if join.direct
            && task.last_events.elapsed() >= idle
            && positions.read_to_end(&join.topics.events, *p, task.next.events)
        {
            let before = task.state.watermark_us();
            let rows = task.state.source_progress(*p, wall_clock_us());
            take_idle_rows(task, before, rows);
        }
        // Only a partition read to its end is quiet; one that is behind is not.
        if task.last_features.elapsed() >= idle
            && positions.read_to_end(&join.topics.features, *p, task.next.features)
        {
            let before = task.state.watermark_us();
            let rows = task
                .state
                .features_idle(wall_clock_us().saturating_sub(ooo));
            take_idle_rows(task, before, rows);
        }
    }
}

/// Keeps the rows an idle watermark emitted; the task has something to commit when they or
/// the watermark (`before` them) changed.
fn take_idle_rows(task: &mut Task, before: i64, rows: Vec<Row>) {
    if !rows.is_empty() || task.state.watermark_us() != before {
        task.dirty = true;
        task.rows.extend(rows);
    }
}

/// Aligns every task's inputs, and reports how many partitions are paused.
fn align_tasks(join: &Join, tasks: &mut HashMap<i32, Task>, positions: &Positions<'_>) {
    let mut paused = 0;
    for (p, task) in tasks.iter_mut() {
        join.align(*p, task, positions);
        paused += [Input::Features, Input::Events]
            .iter()
            .filter(|&&i| task.alignment.is_paused(i))
            .count();
    }
    join.metrics.paused_partitions.set(paused as i64);
}

/// Commits every task; then those another owner committed first follow its checkpoint.
fn commit_tasks(join: &Join, running: &mut Running) -> Result<(), JoinError> {
    let mut fenced = Vec::new();
    for (p, task) in running.tasks.iter_mut() {
        if !join.flush(task)? {
            fenced.push(*p);
        }
    }
    for p in fenced {
        join.follow_fence(&mut running.tasks, p, running.event_sources)?;
    }
    Ok(())
}

/// The tasks' counts, state size and lowest watermark as metrics.
fn report_metrics(join: &Join, tasks: &mut HashMap<i32, Task>) {
    let metrics = &join.metrics;
    let (mut bytes, mut requests, mut low) = (0usize, 0usize, i64::MAX);
    for task in tasks.values_mut() {
        task.reported = metrics.report(&task.reported, &task.state.counts);
        bytes += task.state.bytes();
        requests += task.state.requests();
        low = low.min(task.state.watermark_us());
    }
    metrics.tasks.set(tasks.len() as i64);
    metrics.state_bytes.set(bytes as i64);
    metrics.buffered_requests.set(requests as i64);
    if low != i64::MAX && low != i64::MIN {
        metrics.watermark_seconds.set(low / 1_000_000);
    }
}

/// Starts a pass of the completeness markers when none is running, after logging how the last
/// one went. Markers are best effort and may take long (a listing and a request per new hour;
/// minutes of retries while the store is unreachable): they run beside the join on a thread of
/// their own, one pass at a time, so that reading Kafka never waits for them. A pass rolls
/// forward only committed checkpoints, as another process's would. With `upkeep`, the pass
/// then does the Delta table's upkeep (compaction, VACUUM, log checkpoints).
fn mark_complete(
    join: &Join,
    markers: &mut Option<std::thread::JoinHandle<MarkerPass>>,
    upkeep: bool,
) {
    if !markers
        .as_ref()
        .is_none_or(std::thread::JoinHandle::is_finished)
    {
        return;
    }
    if let Some(done) = markers.take() {
        match done.join() {
            Ok(Ok((marked, compacted))) => {
                if !marked.is_empty() {
                    tracing::info!(?marked, "hours complete");
                }
                if !compacted.is_empty() {
                    tracing::info!(?compacted, "hours compacted");
                    join.metrics.hours_compacted.inc_by(compacted.len() as u64);
                }
            }
            Ok(Err(err)) => tracing::warn!(%err, "completeness markers"),
            Err(panic) => {
                tracing::warn!(panic = %panic_message(panic.as_ref()), "completeness markers stopped");
            }
        }
    }
    let (dataset, all_tasks) = (join.dataset.clone(), join.all_tasks.clone());
    let (completeness_lag, table_upkeep) = (join.completeness_lag, join.upkeep.clone());
    match spawn_named("featurelog-markers", move || {
        let marked = dataset.mark_complete(&all_tasks, completeness_lag)?;
        // After the markers, whose pass rolled every task's newest checkpoint into the table:
        // a complete hour's files in the table are then all it will hold.
        let mut compacted = Vec::new();
        if upkeep {
            match dataset.upkeep(&table_upkeep) {
                Ok(hours) => compacted = hours,
                Err(err) => tracing::warn!(
                    %err,
                    "Delta table upkeep (compaction, VACUUM), tried again next pass"
                ),
            }
        }
        Ok((marked, compacted))
    }) {
        Ok(pass) => *markers = Some(pass),
        Err(err) => tracing::warn!(%err, "completeness markers: no thread for a pass"),
    }
}
