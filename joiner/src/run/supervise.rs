//! Supervision of the two stages: a stage's panic becomes an error that stops the process,
//! and a stage fenced by the group coordinator starts again (on a new thread, with a new
//! consumer) while the fences are few.

use std::time::{Duration, Instant};

use super::error::JoinError;
use super::thread::panic_message;
use crate::metrics::JoinMetrics;

/// A blocking task's result, its panic as an error of `stage`; `cancelled` when the task was
/// cancelled (only at runtime shutdown).
pub(super) fn outcome<T>(
    stage: &'static str,
    result: Result<Result<T, JoinError>, tokio::task::JoinError>,
    cancelled: impl FnOnce() -> Result<T, JoinError>,
) -> Result<T, JoinError> {
    match result {
        Ok(done) => done,
        Err(err) if err.is_panic() => Err(JoinError::Panicked {
            stage,
            message: panic_message(err.into_panic().as_ref()),
        }),
        Err(_) => cancelled(),
    }
}

/// How many times a stage may start again after a fence within [`FENCE_WINDOW`]. librdkafka's
/// own fences come one per outage; two processes with one `instance` fence each other every
/// few seconds, and must stop with the error that says so.
pub(super) const FENCES_ALLOWED: usize = 3;
pub(super) const FENCE_WINDOW: Duration = Duration::from_secs(600);

/// Runs a stage, starting it again after a fence ([`JoinError::Fenced`]) while the fences are
/// few: its partitions went with its consumer, so nothing of the old run carries over.
pub(super) async fn restarting_after_fences<
    F: std::future::Future<Output = Result<(), JoinError>>,
>(
    metrics: &JoinMetrics,
    mut stage: impl FnMut() -> F,
) -> Result<(), JoinError> {
    let mut fences: std::collections::VecDeque<Instant> = std::collections::VecDeque::new();
    loop {
        match stage().await {
            Err(JoinError::Fenced { what, reason }) => {
                fences.retain(|at| at.elapsed() < FENCE_WINDOW);
                if fences.len() >= FENCES_ALLOWED {
                    return Err(JoinError::Fatal {
                        what,
                        reason: format!(
                            "{reason} ({} times within {} s)",
                            fences.len() + 1,
                            FENCE_WINDOW.as_secs()
                        ),
                    });
                }
                fences.push_back(Instant::now());
                metrics.stage_restarts.inc();
                tracing::warn!(what, %reason, "fenced by the group coordinator (librdkafka does this after a broker outage); starting the stage again with a new consumer");
            }
            done => return done,
        }
    }
}
