//! The join stage's loop, on the stage's own thread: one task per partition of the
//! feature-log topic and of the events input. It joins each record as it comes
//! ([`receive`]), commits and keeps time on a tick ([`tick`]), and commits every task once more
//! at shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::error::JoinError;
use super::flush::commit_monitoring;
use super::join::{Join, Running};
use super::record::receive;
use super::thread::Ticks;
use super::tick::tick;
use crate::config::JoinerConfig;
use crate::metrics::JoinMetrics;
use crate::sink::Dataset;

/// The join stage: one task per partition of the feature-log topic and the repartition topic.
/// Polls the consumer (which also serves its rebalances and statistics) until the next tick
/// is due, and runs the tick when it is; returns after the last commit at `shutdown`.
pub(super) fn join(
    config: Arc<JoinerConfig>,
    dataset: Dataset,
    partitions: i32,
    event_sources: u32,
    held_in_topic: bool,
    metrics: Arc<JoinMetrics>,
    shutdown: CancellationToken,
) -> Result<(), JoinError> {
    let join = Join::new(
        config,
        dataset,
        partitions,
        event_sources,
        held_in_topic,
        metrics,
    )?;
    let mut running = Running {
        tasks: HashMap::new(),
        event_sources,
        partitions_checked: Instant::now(),
        markers: None,
    };
    let mut ticks = Ticks::new(join.config.output.flush_interval);
    loop {
        if shutdown.is_cancelled() {
            return stop(&join, &mut running);
        }
        let now = Instant::now();
        if ticks.due(now) {
            tick(&join, &mut running)?;
            continue;
        }
        if let Some(message) = join.consumer.poll(ticks.poll_timeout(now)) {
            receive(&join, &mut running, message)?;
        }
    }
}

/// Commits every task a last time.
fn stop(join: &Join, running: &mut Running) -> Result<(), JoinError> {
    join.drop_revoked(&mut running.tasks);
    for task in running.tasks.values_mut() {
        join.flush(task)?;
    }
    commit_monitoring(&join.consumer, &running.tasks, &join.topics);
    tracing::info!("join stage stopped after a final commit");
    Ok(())
}
