//! What the join stage runs with: its consumer of both inputs, its dead-letter producer and
//! the settings its steps need ([`Join`]), what changes as it runs ([`Running`]), and the
//! steps the tick and the records share: recovering, committing and aligning a task.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::BaseProducer;

use super::consumer::{EVENTS_FETCH, JoinContext, group_consumer, serve_before_close};
use super::error::{JoinError, client};
use super::flush::flush;
use super::inputs::Inputs;
use super::queues::{Queues, Wake, queue_kbytes, waker};
use super::reading::Positions;
use super::recover::{follow_fence, recover};
use super::start::Started;
use super::task::Task;
use crate::config::{EventsPartitioning, JoinerConfig};
use crate::metrics::JoinMetrics;
use crate::sink::{Dataset, SinkError};

/// The join stage's clients and settings, the same from its start to its end.
pub(super) struct Join {
    pub(super) config: Arc<JoinerConfig>,
    pub(super) dataset: Dataset,
    /// The dataset's id: a routed record marked with another is refused
    /// ([`super::repartition::DATASET_HEADER`]).
    pub(super) dataset_id: String,
    pub(super) metrics: Arc<JoinMetrics>,
    pub(super) consumer: Arc<BaseConsumer<JoinContext>>,
    /// The consumer's queue of each partition of each input, which the loop reads.
    pub(super) queues: Queues,
    pub(super) dead_letters: BaseProducer,
    /// The topics the tasks read: the feature-log topic, and the router's repartition topic or
    /// the events topic itself when it is co-partitioned with the feature logs.
    pub(super) topics: Inputs<String>,
    /// The feature-log topic's partitions, the dataset's count.
    pub(super) partitions: i32,
    pub(super) partitioning: EventsPartitioning,
    /// Whether tasks read their events partition directly (co-partitioned events).
    pub(super) direct: bool,
    pub(super) held_in_topic: bool,
    /// The name of every task of the dataset, for the completeness markers.
    pub(super) all_tasks: Vec<String>,
    pub(super) completeness_lag: i64,
    /// What the completeness pass then does to a Delta table (`[output.delta]`).
    pub(super) upkeep: crate::sink::TableUpkeep,
    pub(super) max_ahead_us: i64,
    pub(super) features_wait_us: i64,
    /// The monotonic clock's origin for [`crate::align::Every`].
    pub(super) started: std::time::Instant,
}

/// What the join stage changes as it runs.
pub(super) struct Running {
    pub(super) tasks: HashMap<i32, Task>,
    /// The sources of the events' watermark: grows when the events topic gains partitions.
    pub(super) event_sources: u32,
    pub(super) partitions_checked: Instant,
    /// The completeness markers' pass in flight.
    pub(super) markers: Option<std::thread::JoinHandle<MarkerPass>>,
}

/// What a pass of the completeness markers returns: the hours it marked complete, then the
/// hours of the Delta table it compacted.
pub(super) type MarkerPass = Result<(Vec<String>, Vec<String>), SinkError>;

/// How often alignment may ask whether one of a task's inputs has records left to read.
const UNREAD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Drop for Join {
    fn drop(&mut self) {
        serve_before_close(&self.consumer);
    }
}

impl Join {
    /// Creates the join consumer, subscribed to both inputs, and the dead-letter producer.
    pub(super) fn new(
        config: Arc<JoinerConfig>,
        started: Started,
        metrics: Arc<JoinMetrics>,
    ) -> Result<Self, JoinError> {
        let Started {
            partitions,
            event_sources,
            held_in_topic,
            dataset,
            dataset_id,
        } = started;
        let kafka = &config.kafka;
        let features_topic = config.input.features_topic.clone();
        let partitioning = config.input.events_partitioning;
        let direct = partitioning == EventsPartitioning::ByRequestId;
        let events_input = config.join_events_topic();
        // Same-numbered partitions of the two topics go to the same member.
        // A fetch to a broker waits up to fetch.wait.max.ms when a partition in it has
        // nothing new: at librdkafka's 500 ms, a task whose other input is held back for
        // alignment (crate::align) would wait that long for its next records on a backlog.
        // librdkafka's 1 s `fetch.queue.backoff.ms` would likewise leave a task idle for a
        // second once it has drained a queue on a backlog. Each partition's records have a queue of their
        // own (`queues`), so the prefetch bound is shared out between them. Raw settings in
        // [kafka.properties] still win.
        let queue_kbytes = queue_kbytes(partitions);
        let mut settings = vec![
            ("partition.assignment.strategy", "range"),
            ("fetch.wait.max.ms", "100"),
            ("fetch.queue.backoff.ms", "100"),
            ("queued.max.messages.kbytes", queue_kbytes.as_str()),
        ];
        if direct {
            // The app's events topic, read here without the router, at the router's fetch
            // size: at 1 MiB one fetch of compressed events spans minutes of event time, all
            // of it decompressed into the queue of a partition that alignment holds back.
            // Routed, R's records already span little event time, and 64 KiB cost CPU.
            settings.push(EVENTS_FETCH);
        }
        let mut consumer = group_consumer(
            &config,
            &config.group,
            &[&features_topic, &events_input],
            &settings,
            (
                "creating the join consumer",
                "subscribing to the join inputs",
            ),
        )?;
        let topics = Inputs {
            features: features_topic,
            events: events_input,
        };
        let wake = Arc::new(Wake::default());
        consumer.set_nonempty_callback(waker(&wake));
        let consumer = Arc::new(consumer);
        let queues = Queues::split(&consumer, &topics, partitions, wake)?;
        let dead_letters: BaseProducer = kafka
            .client_config(&[("enable.idempotence", "true")])
            .create()
            .map_err(client("creating the dead-letter producer"))?;
        let all_tasks: Vec<String> = (0..partitions)
            .map(|p| format!("{}-{p}", topics.features))
            .collect();
        // An hour is complete once every task's watermark is past its end plus the longest
        // time a row of it can still be emitted (docs/JOINER.md, "Completeness").
        let completeness_lag = {
            let j = config.join_config(event_sources);
            j.features_wait_us
                .saturating_add(j.label_window_us.unwrap_or(0))
        };
        let max_ahead_us =
            i64::try_from(config.join.max_read_ahead.as_micros()).unwrap_or(i64::MAX);
        let features_wait_us =
            i64::try_from(config.join.features_wait.as_micros()).unwrap_or(i64::MAX);
        Ok(Self {
            dataset,
            dataset_id,
            metrics,
            consumer,
            queues,
            dead_letters,
            topics,
            partitions,
            partitioning,
            direct,
            held_in_topic,
            all_tasks,
            completeness_lag,
            upkeep: crate::sink::TableUpkeep::from_config(&config.output.delta),
            max_ahead_us,
            features_wait_us,
            started: std::time::Instant::now(),
            config,
        })
    }

    /// Drops the tasks of the partitions a rebalance took away.
    pub(super) fn drop_revoked(&self, tasks: &mut HashMap<i32, Task>) {
        if let Ok(mut revoked) = self.consumer.context().revoked.lock() {
            for p in revoked.drain(..) {
                if tasks.remove(&p).is_some() {
                    tracing::info!(
                        partition = p,
                        "task revoked; its uncommitted work is redone by the next owner"
                    );
                }
            }
        }
    }

    /// Task `p` as its latest checkpoint left it.
    pub(super) fn recover(&self, p: i32, event_sources: u32) -> Result<Task, JoinError> {
        recover(&self.dataset, p, &self.config, event_sources)
    }

    /// Commits `task`; false when another owner committed it first.
    pub(super) fn flush(&self, task: &mut Task) -> Result<bool, JoinError> {
        flush(
            &self.dataset,
            task,
            self.partitioning,
            self.completeness_lag,
            &self.metrics,
            &self.dead_letters,
        )
    }

    /// Replaces task `p`, which another owner committed first, by one from that owner's
    /// checkpoint, if `p` is still assigned here.
    pub(super) fn follow_fence(
        &self,
        tasks: &mut HashMap<i32, Task>,
        p: i32,
        event_sources: u32,
    ) -> Result<(), JoinError> {
        tasks.remove(&p);
        if let Some(task) = follow_fence(
            &self.consumer,
            &self.dataset,
            p,
            &self.config,
            event_sources,
            &self.topics,
        )? {
            tasks.insert(p, task);
        }
        Ok(())
    }

    /// Decides whether the loop holds back an input of task `p` (leaves its queue unread), to
    /// keep its inputs within `join.max-read-ahead` of each other (see [`crate::align`]).
    /// Whether an input has records left is asked at most every [`UNREAD_EVERY`] (see
    /// [`crate::align::Alignment::decide_at`]).
    pub(super) fn align(&self, p: i32, task: &mut Task, positions: &Positions<'_>) {
        let next = task.next;
        let every = crate::align::Every {
            now_us: i64::try_from(self.started.elapsed().as_micros()).unwrap_or(i64::MAX),
            us: i64::try_from(UNREAD_EVERY.as_micros()).unwrap_or(i64::MAX),
        };
        task.alignment.decide_at(
            &task.state.input_times(),
            self.max_ahead_us,
            self.features_wait_us,
            every,
            |input| positions.unread(&self.topics, p, next, input),
        );
    }

    /// Sends `message` to the dead-letter topic.
    pub(super) fn dead_letter(
        &self,
        message: &BorrowedMessage<'_>,
        reason: crate::reason::Reason,
        detail: &str,
    ) {
        crate::dead_letter::dead_letter(
            &self.dead_letters,
            &self.config.input.dead_letter_topic,
            message,
            reason,
            detail,
            &self.metrics,
        );
    }
}
