//! The joiner's Kafka consumers: how they are configured (a static member of its group,
//! transactional reads, statistics), and the context they share with the stages: the
//! partitions a rebalance revoked, the partitions' ends from the statistics, the router
//! transaction's abort on a revoke, the monitoring commit in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{ClientContext, TopicPartitionList};

use super::error::{JoinError, client};
use super::repartition::murmur2;
use crate::config::JoinerConfig;

/// The context of the joiner's consumers. It remembers which partitions a rebalance took away,
/// for the join loop to drop their tasks before it does anything else with them; and each
/// partition's low and high watermarks from librdkafka's statistics, which every fetch
/// response refreshes, so that deciding whether a partition is read to its end sends no
/// request. A watermark query (ListOffsets) waits behind the fetch the broker holds open for
/// up to fetch.wait.max.ms (500 ms) on a quiet partition, which is exactly when the question
/// is asked, and the loop asking it stood still meanwhile: seconds per tick with many tasks.
#[derive(Default)]
pub(super) struct JoinContext {
    pub(super) revoked: Mutex<Vec<i32>>,
    pub(super) ends: Mutex<HashMap<(String, i32), (i64, i64)>>,
    /// The router's transactional producer (router consumer only).
    pub(super) router: std::sync::OnceLock<Arc<BaseProducer>>,
    /// Set when a revoke aborted the router's open transaction; the router drops what it had
    /// gathered for it.
    pub(super) router_aborted: std::sync::atomic::AtomicBool,
    /// Set when the revoke's abort could not complete: the router finishes it.
    pub(super) abort_pending: std::sync::atomic::AtomicBool,
    /// When the join stage's monitoring commit now in flight was sent.
    pub(super) commit_sent: Mutex<Option<Instant>>,
}

/// Returns the consumer's fatal error, if it has one.
pub(super) fn fatal(
    consumer: &BaseConsumer<JoinContext>,
    what: &'static str,
) -> Result<(), JoinError> {
    match consumer.client().fatal_error() {
        None => Ok(()),
        Some((rdkafka::types::RDKafkaErrorCode::FencedInstanceId, reason)) => {
            Err(JoinError::Fenced { what, reason })
        }
        Some((_, reason)) => Err(JoinError::Fatal { what, reason }),
    }
}

/// Serves the rebalance events still queued on `consumer`, for a stage to call before it drops
/// the consumer. An assignment left unserved when the drop closes the consumer made the close
/// wait for ever: served during the close, the rebalance callback asks librdkafka for the
/// rebalance protocol, and no answer comes (librdkafka issues 4041 and 4884). A stage that
/// stopped before its first poll (an error or a signal during the start-up) left its first
/// assignment there. Records still queued are dropped: nothing commits them.
pub(super) fn serve_before_close(consumer: &BaseConsumer<JoinContext>) {
    // `poll` answers None both for an empty queue and for a served event: a rebalance comes
    // as at most a revoke and an assignment, so four Nones in a row leave none queued.
    let mut nones = 0;
    for _ in 0..100_000 {
        match consumer.poll(Duration::ZERO) {
            Some(_) => nones = 0,
            None if nones == 3 => return,
            None => nones += 1,
        }
    }
}

/// How long the rebalance callback may spend aborting the router's transaction.
pub(super) const REVOKE_ABORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a consumer of the app's events topic (the router, or the join consumer when events are
/// co-partitioned) fetches of a partition at a time. At librdkafka's 1 MiB, one fetch of
/// compressed events spans minutes of event time; each reader says why that costs it.
pub(super) const EVENTS_FETCH: (&str, &str) = ("max.partition.fetch.bytes", "65536");

/// How often the consumers' statistics (and so the watermarks in [`JoinContext`]) refresh.
pub(super) const STATISTICS_INTERVAL_MS: &str = "1000";

impl ClientContext for JoinContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Ok(mut ends) = self.ends.lock() else {
            return;
        };
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                // -1 is librdkafka's internal unassigned partition; -1 offsets are unknown.
                if partition >= 0 && p.hi_offset >= 0 {
                    ends.insert((topic.clone(), partition), (p.lo_offset, p.hi_offset));
                }
            }
        }
    }
}

impl ConsumerContext for JoinContext {
    fn commit_callback(&self, _: rdkafka::error::KafkaResult<()>, _: &TopicPartitionList) {
        if let Ok(mut sent) = self.commit_sent.lock() {
            *sent = None;
        }
    }

    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            if let Some(producer) = self.router.get() {
                // The router's open transaction holds events and offsets of partitions that
                // are about to move. Committed after the move, its offsets would be accepted
                // (the broker checks the generation, not who owns a partition) while the new
                // owner routes the same events again: abort it now, before they move. Every
                // partition then restarts from its committed offset, here or at its new owner.
                // Bounded: the consumer is not polled meanwhile. The router loop finishes an
                // abort that could not complete here before it routes anything again; until
                // then the transaction stays open, never committed.
                let aborted =
                    featurelog_kafka::txn::abort_transaction(producer, REVOKE_ABORT_TIMEOUT)
                        .and_then(|()| producer.begin_transaction());
                match aborted {
                    Ok(()) => {
                        // This abort also finished one an earlier revoke left pending.
                        self.abort_pending
                            .store(false, std::sync::atomic::Ordering::SeqCst);
                        tracing::info!(
                            "router transaction aborted for a rebalance; its events are routed again from the committed offsets"
                        )
                    }
                    Err(err) => {
                        tracing::warn!(%err, "the router transaction of a rebalance is not aborted yet; the router finishes the abort before it routes again");
                        self.abort_pending
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                self.router_aborted
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            } else if let Ok(mut revoked) = self.revoked.lock() {
                revoked.extend(tpl.elements().iter().map(|e| e.partition()));
            }
        }
    }
}

/// A consumer of `topics` in `group` (offsets committed by the joiner, transactional reads,
/// statistics for [`JoinContext`]), a static member unless the config says otherwise.
pub(super) fn group_consumer(
    config: &JoinerConfig,
    group: &str,
    topics: &[&str],
    extra: &[(&str, &str)],
    (creating, subscribing): (&'static str, &'static str),
) -> Result<BaseConsumer<JoinContext>, JoinError> {
    let instance = static_member_id(&config.instance_name(), topics);
    let mut settings = vec![
        ("group.id", group),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
        ("isolation.level", "read_committed"),
        ("statistics.interval.ms", STATISTICS_INTERVAL_MS),
        // librdkafka prefetches up to 64 MiB a consumer by default, and caps a fetch response
        // at that; on a backlog the join consumer held that much, in large buffers that the
        // allocator kept afterwards. 16 MiB still keeps every partition fed (the benchmark's
        // wall time is unchanged) and cut the peak resident memory by a third and librdkafka's
        // CPU by a third at 6M records.
        ("queued.max.messages.kbytes", "16384"),
    ];
    settings.extend_from_slice(extra);
    if config.static_membership {
        // A process restarted with the same `instance` (after a crash, a deploy) takes its
        // partitions back at once, without a rebalance that would move every task and make
        // each new owner restore its state; a process gone for good loses them after
        // session.timeout.ms (static members do not leave the group when they close).
        settings.push(("group.instance.id", &instance));
    }
    let consumer: BaseConsumer<JoinContext> = config
        .kafka
        .client_config(&settings)
        .create_with_context(JoinContext::default())
        .map_err(client(creating))?;
    consumer.subscribe(topics).map_err(client(subscribing))?;
    Ok(consumer)
}

/// The `group.instance.id` of a consumer of `topics` for this process: its `instance`, made of
/// the characters Kafka accepts, and a hash of the topics. A static member that rejoins is
/// given its previous assignment without a rebalance, even when it now subscribes to other
/// topics (the classic group protocol only compares assignors); with the topics in the id, a
/// process whose configuration changed what it reads joins as a new member instead of
/// inheriting partitions it no longer reads.
pub(super) fn static_member_id(instance: &str, topics: &[&str]) -> String {
    // Stable across builds (a std hasher is not promised to be): a changed id would cost a
    // restarted process its assignment once.
    let hash = murmur2(topics.join("\0").as_bytes());
    let name: String = instance
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    format!("{name}-{hash:08x}")
}
