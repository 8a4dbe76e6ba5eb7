//! The joiner's Kafka runtime (docs/JOINER.md): the router stage, which moves app events to the
//! repartition topic keyed by request id inside Kafka transactions, and the join stage, which
//! runs one task per partition and commits rows, state and offsets together through the
//! dataset's checkpoints. Each stage runs on a thread of its own, a loop that polls its
//! consumer and calls the dataset and librdkafka's blocking calls directly; [`run`] is async
//! for its callers (it also serves the metrics endpoint) and awaits the stages' threads.
//!
//! - `start`: the checks before either stage runs (`group_offsets` and `oldest_marks`: that
//!   the group serves this dataset); `supervise`: a stage's panic or fence;
//!   `thread`: the stages' threads and the waits that end at shutdown.
//! - `router`, `router_progress`, `router_txn`, `repartition`: the router stage and the
//!   records it writes to the repartition topic.
//! - `event_loop` over `join`: the join stage, its `tick` and its steps for each `record`; a
//!   `task` per partition, its recovery (`recover`) and its commit (`flush`).
//! - `consumer`, `reading`, `partitions`, `inputs`: what the stages share of Kafka; `queues`:
//!   the join consumer's queue of each partition, which the join loop reads.

mod consumer;
mod error;
mod event_loop;
mod flush;
mod group_offsets;
mod inputs;
mod join;
mod oldest_marks;
mod partitions;
mod queues;
mod reading;
mod record;
mod recover;
mod repartition;
mod router;
mod router_progress;
mod router_txn;
mod start;
mod supervise;
mod task;
#[cfg(test)]
mod tests;
mod thread;
mod tick;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use error::{JoinError, OtherDataset};
pub use repartition::murmur2_partition;

use crate::config::{EventsPartitioning, JoinerConfig};
use crate::metrics::JoinMetrics;
use event_loop::join;
use router::router;
use start::{Started, start};
use supervise::restarting_after_fences;
use thread::on_thread;

/// Runs the router and the join until `shutdown`; returns the first error of either. The
/// metrics endpoint answers from the first moment: `/healthz` 200 and `/readyz` 503 while the
/// start-up (topic checks, the checkpoint's recovery) runs, so that a probe sees a slow start
/// as starting, not as dead.
pub async fn run(config: JoinerConfig, shutdown: CancellationToken) -> Result<(), JoinError> {
    let config = Arc::new(config);
    let metrics = Arc::new(JoinMetrics::new());
    let listen = config.metrics.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| JoinError::Bind {
            addr: listen,
            source,
        })?;
    // Cancelled with the shutdown, and when the run ends on an error.
    let draining = shutdown.child_token();
    let readiness = featurelog_ops::Readiness::starting(draining.clone());
    let render = metrics.clone();
    // The endpoint outlives the first signal, so that the drain and the last commit can be
    // watched (/readyz answers 503 from the signal on); it stops when this function returns.
    let endpoint = CancellationToken::new();
    let _endpoint = endpoint.clone().drop_guard();
    tokio::spawn(featurelog_ops::serve(
        listener,
        Arc::new(move || render.render()),
        readiness.clone(),
        endpoint,
    ));
    // Start-up waits on the brokers (topic checks, up to tens of seconds when they are slow or
    // gone): a shutdown signal meanwhile ends it at once, with nothing to drain.
    let started = tokio::select! {
        _ = shutdown.cancelled() => {
            tracing::info!("shutdown requested during start-up");
            return Ok(());
        }
        started = start(&config) => started?,
    };
    readiness.started();
    serve(config, started, metrics, draining, shutdown).await
}

/// Runs the router (unless the events are co-partitioned) and the join stage until either
/// ends, and then stops the other.
async fn serve(
    config: Arc<JoinerConfig>,
    started: Started,
    metrics: Arc<JoinMetrics>,
    draining: CancellationToken,
    shutdown: CancellationToken,
) -> Result<(), JoinError> {
    let direct = config.input.events_partitioning == EventsPartitioning::ByRequestId;

    let stop = shutdown.child_token();
    // The stages' threads end at their next turn when this future is dropped, as they do at
    // shutdown (after their last commit), instead of running on unawaited.
    let _stop_on_drop = stop.clone().drop_guard();
    let router = (!direct).then(|| {
        restarting_after_fences(&metrics, || {
            let (config, metrics, stop) = (config.clone(), metrics.clone(), stop.clone());
            let (partitions, dataset_id) = (started.partitions, started.dataset_id.clone());
            on_thread("featurelog-router", "router", move || {
                router(config, partitions, dataset_id, metrics, stop)
            })
        })
    });
    let join = restarting_after_fences(&metrics, || {
        let (config, started, metrics, stop) = (
            config.clone(),
            started.clone(),
            metrics.clone(),
            stop.clone(),
        );
        on_thread("featurelog-join", "join stage", move || {
            join(config, started, metrics, stop)
        })
    });
    // Whichever stage ends first, on an error or not, the other stops too: a router that
    // failed alone would leave the join waiting for events forever, looking healthy.
    let (joined, routed) = match router {
        None => (join.await, Ok(())),
        Some(router) => {
            tokio::pin!(join);
            tokio::pin!(router);
            tokio::select! {
                joined = &mut join => {
                    stop.cancel();
                    (joined, router.await)
                }
                routed = &mut router => {
                    stop.cancel();
                    if let Err(err) = &routed {
                        tracing::error!(%err, "the router stopped; stopping the join stage too");
                    }
                    (join.await, routed)
                }
            }
        }
    };
    draining.cancel();
    joined.and(routed)
}
