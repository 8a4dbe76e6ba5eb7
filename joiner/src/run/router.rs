//! The router stage: moves app events to the repartition topic, keyed by request id, exactly
//! once. Its loop, on the stage's own thread, reads events, reports its progress on a tick,
//! and commits what it routed with the offsets it read in one Kafka transaction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use featurelog_kafka::KafkaConfig;
use prost::Message as _;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tokio_util::sync::CancellationToken;

use super::consumer::{EVENTS_FETCH, JoinContext, fatal, group_consumer, serve_before_close};
use super::error::{JoinError, client};
use super::repartition::{
    Batches, PROGRESS_HEADER, RepartitionTopic, RouterProgress, murmur2_partition, send_waiting,
    source_id, to_impression,
};
use super::router_progress::{Source, router_progress};
use super::router_txn::{after_revoke, commit_router};
use super::task::{decode_event, in_sample};
use super::thread::Ticks;
use crate::config::JoinerConfig;
use crate::dead_letter::dead_letter;
use crate::metrics::JoinMetrics;
use crate::state::HashMap;

/// How often the router reports its progress and commits what it routed.
const TICK: Duration = Duration::from_millis(250);

/// Moves app events to the repartition topic, keyed by request id, exactly once. Polls the
/// consumer (which also serves its rebalances and statistics) until the next tick is due, and
/// runs the tick when it is; returns after the last commit at `shutdown`.
pub(super) fn router(
    config: Arc<JoinerConfig>,
    partitions: i32,
    dataset_id: String,
    metrics: Arc<JoinMetrics>,
    shutdown: CancellationToken,
) -> Result<(), JoinError> {
    let router = Router::start(config, partitions, dataset_id, metrics, shutdown)?;
    let mut routing = Routing::default();
    let mut ticks = Ticks::new(TICK);
    loop {
        if router.shutdown.is_cancelled() {
            return router.stop(&mut routing);
        }
        let now = std::time::Instant::now();
        if ticks.due(now) {
            router.tick(&mut routing)?;
            continue;
        }
        if let Some(message) = router.consumer.poll(ticks.poll_timeout(now)) {
            router.route(&mut routing, message, now)?;
            // What else is queued is taken without a timeout: a poll that may wait reads the
            // clock four times (librdkafka's three, rdkafka's one), and with this loop's own
            // read that was a tenth of the router's CPU on a backlog (perf).
            for _ in 0..DRAIN {
                let Some(message) = router.consumer.poll(Duration::ZERO) else {
                    break;
                };
                router.route(&mut routing, message, now)?;
            }
        }
    }
}

/// Records routed after a poll before the loop looks at the clock and the shutdown again:
/// about a quarter of a millisecond of routing.
const DRAIN: usize = 256;

/// What the router runs with: its clients and settings.
struct Router {
    config: Arc<JoinerConfig>,
    partitions: i32,
    metrics: Arc<JoinMetrics>,
    shutdown: CancellationToken,
    consumer: BaseConsumer<JoinContext>,
    producer: Arc<BaseProducer>,
    repartition: RepartitionTopic,
}

/// What the router gathered for its open transaction, and the progress it last reported.
#[derive(Default)]
struct Routing {
    /// The next offset to read of each events partition routed from in the transaction, by
    /// topic and partition (by topic first, so that routing an event allocates nothing).
    next: HashMap<String, HashMap<i32, i64>>,
    sources: HashMap<i32, Source>,
    reported: BTreeMap<i32, i64>,
    batches: Batches,
}

impl Drop for Router {
    fn drop(&mut self) {
        serve_before_close(&self.consumer);
    }
}

impl Router {
    /// Creates the router's consumer and transactional producer, and begins a transaction.
    fn start(
        config: Arc<JoinerConfig>,
        partitions: i32,
        dataset_id: String,
        metrics: Arc<JoinMetrics>,
        shutdown: CancellationToken,
    ) -> Result<Self, JoinError> {
        let kafka: &KafkaConfig = &config.kafka;
        let group = config.router_group();
        let consumer = group_consumer(
            &config,
            &group,
            &config
                .input
                .events_topic
                .names()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            // Partitions the apps add to their events topic hold every task's watermark until
            // the router reads them (docs/JOINER.md, "Partition counts"): look for them every
            // 30 s rather than librdkafka's 5 minutes (one small metadata request;
            // `[kafka.properties]` may say otherwise).
            //
            // The router routes in the order librdkafka hands records over: one partition's
            // whole fetch, then the next one's. At librdkafka's 1 MiB a partition, a fetch of
            // compressed events spans minutes of event time, so the repartition topic
            // interleaved the events partitions that far apart, and every task held the
            // impressions of the partition read ahead until the slowest one's progress caught
            // up. 64 KiB a partition keeps them seconds apart. With fetches that small the
            // fetch queue drains often, and librdkafka's 1 s `fetch.queue.backoff.ms` then
            // left the router idle on a backlog: 100 ms.
            &[
                ("topic.metadata.refresh.interval.ms", "30000"),
                EVENTS_FETCH,
                ("fetch.queue.backoff.ms", "100"),
            ],
            (
                "creating the router consumer",
                "subscribing to the events topic",
            ),
        )?;
        let transactional_id = format!("{}.router.{}", config.group, config.instance_name());
        let producer: BaseProducer = kafka
            .client_config(&[
                ("transactional.id", &transactional_id),
                ("partitioner", "murmur2_random"),
                // The repartition topic is the joiner's own and short-lived: lz4 costs a
                // fraction of zstd's CPU, and its bytes never reach users.
                ("compression.type", "lz4"),
                ("linger.ms", "20"),
            ])
            .create()
            .map_err(client("creating the router producer"))?;
        let producer = Arc::new(producer);
        producer
            .init_transactions(Duration::from_secs(60))
            .map_err(client("initialising transactions"))?;
        producer
            .begin_transaction()
            .map_err(client("beginning a transaction"))?;
        let _ = consumer.context().router.set(producer.clone());
        let repartition = RepartitionTopic {
            name: config.repartition_topic(),
            dataset: dataset_id,
        };
        Ok(Self {
            config,
            partitions,
            metrics,
            shutdown,
            consumer,
            producer,
            repartition,
        })
    }

    /// At shutdown: commits what was routed, unless a revoke aborted it.
    fn stop(&self, routing: &mut Routing) -> Result<(), JoinError> {
        if after_revoke(&self.producer, &self.consumer, &self.shutdown)? {
            // Nothing of the aborted transaction is left to commit.
            return Ok(());
        }
        routing.batches.flush(&self.producer, &self.repartition)?;
        commit_router(
            &self.producer,
            &self.consumer,
            &mut routing.next,
            &self.repartition.dataset,
            &self.shutdown,
        )?;
        Ok(())
    }

    /// Sends what was routed and the progress made, and commits them with their offsets.
    fn tick(&self, routing: &mut Routing) -> Result<(), JoinError> {
        // A fatal error is not always handed to `poll` (the client's error callback may take
        // it): looked for here too, or the router would wait on a dead consumer for ever.
        fatal(&self.consumer, "router consumer")?;
        if after_revoke(&self.producer, &self.consumer, &self.shutdown)? {
            *routing = Routing::default();
        }
        // The events first: a progress record vouches for every event routed before it.
        routing.batches.flush(&self.producer, &self.repartition)?;
        let progress = router_progress(
            &self.consumer,
            self.config.input.events_topic.names(),
            &mut routing.sources,
            self.config.join.idle_timeout,
        );
        let report = !progress.is_empty() && progress != routing.reported;
        if report {
            self.report(&progress)?;
            routing.reported = progress;
            self.producer.poll(Duration::ZERO);
        }
        if (!routing.next.is_empty() || report)
            && !commit_router(
                &self.producer,
                &self.consumer,
                &mut routing.next,
                &self.repartition.dataset,
                &self.shutdown,
            )?
        {
            // The rewound events are routed again: progress restarts from them.
            routing.sources.clear();
            routing.reported.clear();
        }
        Ok(())
    }

    /// Sends `progress` to every partition of the repartition topic.
    fn report(&self, progress: &BTreeMap<i32, i64>) -> Result<(), JoinError> {
        let bytes = RouterProgress {
            sources: progress.clone(),
        }
        .encode_to_vec();
        for partition in 0..self.partitions {
            let record = BaseRecord::<str, [u8]>::to(&self.repartition.name)
                .partition(partition)
                .payload(&bytes)
                .headers(self.repartition.headers(PROGRESS_HEADER));
            send_waiting(&self.producer, record, "reporting router progress")?;
        }
        Ok(())
    }

    /// Routes one record of an events topic: its event to the partition of its request, or
    /// the record to the dead-letter topic.
    fn route(
        &self,
        routing: &mut Routing,
        message: KafkaResult<BorrowedMessage<'_>>,
        now: std::time::Instant,
    ) -> Result<(), JoinError> {
        if after_revoke(&self.producer, &self.consumer, &self.shutdown)? {
            *routing = Routing::default();
        }
        let message = match message {
            Ok(m) => m,
            Err(err) => {
                fatal(&self.consumer, "router consumer")?;
                tracing::warn!(%err, "router consumer");
                return Ok(());
            }
        };
        let config = &self.config;
        // Read once: each call measures librdkafka's C string and checks its UTF-8.
        let topic = message.topic();
        let payload = message.payload().unwrap_or_default();
        let decoded = decode_event(config, topic, payload);
        let index = config
            .input
            .events_topic
            .names()
            .iter()
            .position(|t| t == topic)
            .unwrap_or(0);
        let source = routing
            .sources
            .entry(source_id(index, message.partition()))
            .or_insert_with(Source::new);
        // When the poll began: at most a poll's wait and a drain early, against idle timeouts of
        // seconds.
        source.last_seen = now;
        match decoded {
            // Its time still counts for the watermark: the app's events are in order whether
            // or not the sidecars logged their requests.
            Ok(e) if !in_sample(config, &e) => {
                source.routed_us = source.routed_us.max(e.time_us);
                self.metrics.events_not_sampled.inc();
            }
            Ok(e) => {
                source.routed_us = source.routed_us.max(e.time_us);
                let partition = murmur2_partition(e.request_id.as_bytes(), self.partitions);
                routing.batches.add(
                    &self.producer,
                    &self.repartition,
                    partition,
                    &to_impression(e),
                )?;
                self.metrics.events_routed.inc();
            }
            Err(err) => dead_letter(
                &self.producer,
                &config.input.dead_letter_topic,
                &message,
                err.reason(),
                &err.to_string(),
                &self.metrics,
            ),
        }
        let next = match routing.next.get_mut(topic) {
            Some(next) => next,
            None => routing.next.entry(topic.to_owned()).or_default(),
        };
        next.insert(message.partition(), message.offset() + 1);
        Ok(())
    }
}
