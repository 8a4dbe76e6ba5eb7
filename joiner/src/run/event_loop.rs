//! The join stage's loop, on the stage's own thread: one task per partition of the
//! feature-log topic and of the events input. It reads each partition's queue ([`read`]) and
//! joins each record as it comes, commits and keeps time on a tick ([`tick`]), and commits
//! every task once more at shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::error::JoinError;
use super::flush::commit_monitoring;
use super::join::{Join, Running};
use super::record::receive;
use super::start::Started;
use super::thread::Ticks;
use super::tick::tick;
use crate::align::Input;
use crate::config::JoinerConfig;
use crate::metrics::JoinMetrics;

/// The join stage: one task per partition of the feature-log topic and the repartition topic.
/// Reads the consumer's queues (its own also serves its rebalances and statistics) until the
/// next tick is due, and runs the tick when it is; returns after the last commit at
/// `shutdown`.
pub(super) fn join(
    config: Arc<JoinerConfig>,
    started: Started,
    metrics: Arc<JoinMetrics>,
    shutdown: CancellationToken,
) -> Result<(), JoinError> {
    let event_sources = started.event_sources;
    let join = Join::new(config, started, metrics)?;
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
        read(&join, &mut running, ticks.poll_timeout(now))?;
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

/// Records taken from one queue before the next queue's turn: enough that a round costs little
/// per record, few enough that one input cannot run far ahead of an alignment decision.
const BATCH: usize = 256;

/// Reads what the queues hold: from each partition, each input its task does not hold back,
/// up to [`BATCH`] records at a time; then, if none had any, waits for records up to
/// `timeout`. The consumer's own queue (rebalances, statistics, errors, records of partitions
/// without a queue) is served first, without waiting.
fn read(join: &Join, running: &mut Running, timeout: Duration) -> Result<(), JoinError> {
    join.queues.arm();
    let mut read = false;
    if let Some(message) = join.consumer.poll(Duration::ZERO) {
        receive(join, running, message)?;
        read = true;
    }
    for (p, queues) in join.queues.each() {
        for input in [Input::Features, Input::Events] {
            let queue = queues.get(input);
            for _ in 0..BATCH {
                let held = |running: &Running| {
                    running
                        .tasks
                        .get(&p)
                        .is_some_and(|task| task.alignment.is_paused(input))
                };
                if held(running) {
                    break;
                }
                let Some(message) = queue.poll(Duration::ZERO) else {
                    break;
                };
                receive(join, running, message)?;
                read = true;
            }
        }
    }
    if !read {
        join.queues.wait(timeout);
    }
    Ok(())
}
