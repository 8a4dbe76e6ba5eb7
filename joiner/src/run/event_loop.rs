//! The join stage's loop: one task per partition of the feature-log topic and of the events
//! input. It joins each record as it comes ([`receive`]), commits and keeps time on a tick
//! ([`tick`]), and commits every task once more at shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::error::JoinError;
use super::flush::commit_monitoring;
use super::join::{Join, Running};
use super::record::receive;
use super::tick::tick;
use crate::config::JoinerConfig;
use crate::metrics::JoinMetrics;
use crate::sink::Dataset;

/// The join stage: one task per partition of the feature-log topic and the repartition topic.
pub(super) async fn join(
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
    let mut ticks = tokio::time::interval(join.config.output.flush_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return stop(&join, &mut running),
            _ = ticks.tick() => tick(&join, &mut running).await?,
            message = join.consumer.recv() => receive(&join, &mut running, message)?,
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
