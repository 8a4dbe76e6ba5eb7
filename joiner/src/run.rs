//! The joiner's Kafka runtime (docs/JOINER.md): the router stage, which moves app events to the
//! repartition topic keyed by request id inside Kafka transactions, and the join stage, which
//! runs one task per partition and commits rows, state and offsets together through the
//! dataset's checkpoints.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use featurelog_kafka::KafkaConfig;
use featurelog_schemas::featurelog::v1::{EventType, Impression};
use prost::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::align::Input;
use crate::config::{EventFormat, EventsPartitioning, HeldLogs, JoinerConfig};
use crate::dead_letter::{DEAD_LETTER_WAIT, dead_letter, dead_letter_bytes, in_future};
use crate::event::{self, Event, EventKind};
use crate::metrics::JoinMetrics;
use crate::sink::{Checkpoint, Dataset, SinkError};
use crate::state::JoinState;

/// Why the joiner stopped.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// Topic administration failed.
    #[error(transparent)]
    Kafka(#[from] featurelog_kafka::KafkaError),
    /// A Kafka client failed.
    #[error("{what}: {source}")]
    Client {
        /// What the client was doing.
        what: &'static str,
        /// librdkafka's error.
        #[source]
        source: RdKafkaError,
    },
    /// The feature-log topic is missing.
    #[error(
        "the feature-log topic {0:?} (input.features-topic) does not exist; create it with as many partitions as the load needs: the sidecar publishes to it but does not create it"
    )]
    NoTopic(String),
    /// An events topic is missing.
    #[error(
        "the events topic {0:?} (input.events-topic) does not exist; the app that publishes impressions and clicks owns it and must create it (neither the sidecar nor the joiner does), or fix the name"
    )]
    NoEventsTopic(String),
    /// The feature-log topic's partition count is not the dataset's.
    #[error(
        "topic {topic:?} has {found} partitions, but the dataset was written with {recorded}: a dataset is tied to its partition count (every task's checkpoint holds offsets of its partitions, and requests move between partitions when the count changes), so joining on would silently lose the rows of every request that moved. To use the new count, run a new `group` into a new `output.path` (README, \"Scaling out\")"
    )]
    PartitionsChanged {
        /// The feature-log topic.
        topic: String,
        /// The count the dataset was written with.
        recorded: i32,
        /// The topic's count now.
        found: i32,
    },
    /// `input.events-topic` is not the list the dataset was written with, followed by more.
    #[error(
        "input.events-topic is [{configured}], but this dataset's checkpoints were written with [{recorded}]: topics may be appended to the list, never removed or reordered (their places in it number the sources of the events' watermark in every checkpoint, and a source that no longer reports would hold every window open). Restore the list (append new topics at its end), or run a new `group` into a new `output.path`"
    )]
    EventsTopicsChanged {
        /// The list recorded, joined by ", ".
        recorded: String,
        /// The list configured, joined by ", ".
        configured: String,
    },
    /// `output.partition-by-model` is not the setting the dataset was written with.
    #[error(
        "output.partition-by-model is {}, but the dataset {path} was written with {recorded}: one dataset has one layout (its completeness markers, late area and every reader's paths follow it). Set `output.partition-by-model = {recorded}`, or write the other layout into a new `output.path` with a new `group`",
        !recorded
    )]
    LayoutChanged {
        /// The dataset.
        path: String,
        /// The setting it was written with.
        recorded: bool,
    },
    /// The repartition topic disagrees with the feature-log topic.
    #[error(
        "topic {topic:?} has {found} partitions but {features:?} has {expected}: if this group has never written a dataset, delete {topic:?} (the joiner recreates it); otherwise use another group"
    )]
    Partitions {
        /// The repartition topic.
        topic: String,
        /// The feature-log topic.
        features: String,
        /// Its partitions.
        expected: i32,
        /// The repartition topic's.
        found: i32,
    },
    /// `input.events-partitioning = "by-request-id"`, but the events topic cannot be
    /// partitioned like the feature-log topic.
    #[error(
        "`input.events-partitioning = \"by-request-id\"` needs the events topic {events:?} to have as many partitions as the feature-log topic {features:?} ({expected}), but it has {found}: give the topics the same partition count (apps must key events by request id with the murmur2 partitioner), or set `input.events-partitioning = \"any\"` so that the joiner repartitions the events itself"
    )]
    NotCoPartitioned {
        /// The events topic.
        events: String,
        /// The feature-log topic.
        features: String,
        /// Its partitions.
        expected: i32,
        /// The events topic's.
        found: i32,
    },
    /// A task's checkpoint was written with the other `input.events-partitioning`: its events
    /// offset belongs to another topic.
    #[error(
        "task {task}: the dataset's checkpoints were written with `input.events-partitioning = \"{written}\"`, this process runs with \"{configured}\": their events offsets are in different topics. Keep the setting the dataset was written with, or start a new dataset (another output.path and group)"
    )]
    PartitioningChanged {
        /// The task.
        task: String,
        /// The setting the checkpoint was written with.
        written: &'static str,
        /// The configured one.
        configured: &'static str,
    },
    /// A consumer hit an error librdkafka cannot recover from.
    #[error(
        "{what}: fatal Kafka error: {reason}. If it says the instance id was fenced, another live process of this group runs with the same `instance`: give each process its own"
    )]
    Fatal {
        /// Which consumer.
        what: &'static str,
        /// librdkafka's reason.
        reason: String,
    },
    /// The group coordinator fenced a static member's consumer (FENCED_INSTANCE_ID, fatal to
    /// librdkafka). Another live process with the same `instance` does that, but so does
    /// librdkafka itself around a broker outage: an offset commit queued before a session
    /// timeout goes out afterwards with the reset member id (librdkafka's PR 5585), or a
    /// JoinGroup retried after its answer was lost registers the instance twice. The stage
    /// starts again with a new consumer; fenced again and again, the process stops with
    /// [`JoinError::Fatal`].
    #[error("{what}: fenced by the group coordinator ({reason}); starting the stage again")]
    Fenced {
        /// Which consumer.
        what: &'static str,
        /// librdkafka's reason.
        reason: String,
    },
    /// The dataset failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// A stage panicked: a bug. The process stops (the join stage committed what it had) so that
    /// a supervisor restarts it instead of it running on with that stage gone.
    #[error("the {stage} stopped on a bug (please report it): {message}")]
    Panicked {
        /// Which stage.
        stage: &'static str,
        /// The panic's message.
        message: String,
    },
    /// The metrics endpoint could not listen.
    #[error("cannot listen on {addr} for /metrics (is another process using the port?)")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `join.held-logs = "topic"`, but the feature-log topic may delete a held log before a
    /// restore reads it back.
    #[error(
        "feature-log topic {topic:?} may delete a held log before a restore reads it back ({found}): `join.held-logs = \"topic\"` needs retention.ms >= {needed_ms} (features-wait + label-window + max-out-of-orderness + 1 day), retention.bytes = -1 and no compaction. Raise the topic's retention (kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config retention.ms={needed_ms}), or set `join.held-logs` to \"state-files\" or \"auto\""
    )]
    Retention {
        /// The feature-log topic.
        topic: String,
        /// Its retention settings.
        found: String,
        /// The retention needed, in milliseconds.
        needed_ms: u128,
    },
    /// A task's state snapshot could not be read.
    #[error("task {task}: state snapshot {path}: {message}")]
    Restore {
        /// The task.
        task: String,
        /// The snapshot.
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn client(what: &'static str) -> impl FnOnce(RdKafkaError) -> JoinError {
    move |source| JoinError::Client { what, source }
}

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

/// What start-up found out.
struct Started {
    partitions: i32,
    event_sources: i32,
    held_in_topic: bool,
    dataset: Dataset,
}

async fn start(config: &Arc<JoinerConfig>) -> Result<Started, JoinError> {
    let kafka = &config.kafka;
    let features = &config.input.features_topic;
    let partitions =
        featurelog_kafka::admin::partition_count(kafka, features, Duration::from_secs(30))
            .await?
            .ok_or_else(|| JoinError::NoTopic(features.clone()))?;
    // Every partition of every events topic is a source of the events' watermark.
    let mut event_sources = 0;
    for topic in config.input.events_topic.names() {
        event_sources +=
            featurelog_kafka::admin::partition_count(kafka, topic, Duration::from_secs(30))
                .await?
                .ok_or_else(|| JoinError::NoEventsTopic(topic.clone()))?;
    }
    let events = config.input.events_topic.joined();
    let direct = config.input.events_partitioning == EventsPartitioning::ByRequestId;
    if direct && event_sources != partitions {
        return Err(JoinError::NotCoPartitioned {
            events: events.clone(),
            features: features.clone(),
            expected: partitions,
            found: event_sources,
        });
    }
    // Before the repartition topic is looked at: after the feature-log topic gained partitions,
    // this is the error that says what happened and what to do.
    let dataset = Dataset::from_config(&config.output)?;
    let recorded = {
        let (dataset, features) = (dataset.clone(), features.clone());
        start_up_io(move || {
            dataset.check()?;
            Ok(dataset.recorded_partition_count(&features, partitions)?)
        })
        .await?
    };
    {
        let (dataset, topics) = (dataset.clone(), config.input.events_topic.names().to_vec());
        let recorded = start_up_io(move || Ok(dataset.recorded_events_topics(&topics)?)).await?;
        let configured = config.input.events_topic.names();
        if !configured.starts_with(&recorded) {
            return Err(JoinError::EventsTopicsChanged {
                recorded: recorded.join(", "),
                configured: configured.join(", "),
            });
        }
    }
    {
        let handle = dataset.clone();
        let recorded = start_up_io(move || Ok(handle.recorded_partition_by_model()?)).await?;
        if recorded != config.output.partition_by_model {
            return Err(JoinError::LayoutChanged {
                path: dataset.root().display().to_string(),
                recorded,
            });
        }
    }
    if recorded != partitions {
        return Err(JoinError::PartitionsChanged {
            topic: features.clone(),
            recorded,
            found: partitions,
        });
    }
    let repartition = config.repartition_topic();
    match featurelog_kafka::admin::partition_count(kafka, &repartition, Duration::from_secs(10))
        .await?
    {
        // Co-partitioned events need no repartition topic.
        _ if direct => {}
        Some(found) if found != partitions => {
            return Err(JoinError::Partitions {
                topic: repartition,
                features: features.clone(),
                expected: partitions,
                found,
            });
        }
        Some(_) => {}
        None => {
            featurelog_kafka::admin::ensure_topic(
                kafka,
                &repartition,
                partitions,
                1,
                Duration::from_secs(30),
            )
            .await?;
        }
    }
    if featurelog_kafka::admin::partition_count(
        kafka,
        &config.input.dead_letter_topic,
        Duration::from_secs(10),
    )
    .await?
    .is_none()
    {
        featurelog_kafka::admin::ensure_topic(
            kafka,
            &config.input.dead_letter_topic,
            1,
            1,
            Duration::from_secs(30),
        )
        .await?;
    }
    let held_in_topic = held_logs_in_topic(config).await?;
    // Before any group is joined: a dataset written with the other events-partitioning is
    // refused here, not only when one of its tasks is assigned, which a static member keeping
    // its assignment of the other setting's topics might never be. Every task is written with
    // one setting (recovery checks each), so the first checkpoint found tells it.
    {
        let (dataset, features) = (dataset.clone(), features.clone());
        let partitioning = config.input.events_partitioning;
        start_up_io(move || {
            for p in 0..partitions {
                if let Some(cp) = dataset.latest_checkpoint(&format!("{features}-{p}"))? {
                    return same_partitioning(&cp, partitioning);
                }
            }
            Ok(())
        })
        .await?;
    }
    tracing::info!(%features, partitions, %events, event_sources, events_partitioning = ?config.input.events_partitioning, held_in_topic, "joiner starting");
    Ok(Started {
        partitions,
        event_sources,
        held_in_topic,
        dataset,
    })
}

async fn serve(
    config: Arc<JoinerConfig>,
    started: Started,
    metrics: Arc<JoinMetrics>,
    draining: CancellationToken,
    shutdown: CancellationToken,
) -> Result<(), JoinError> {
    let Started {
        partitions,
        event_sources,
        held_in_topic,
        dataset,
    } = started;
    let direct = config.input.events_partitioning == EventsPartitioning::ByRequestId;

    let stop = shutdown.child_token();
    let router = (!direct).then(|| {
        let (config, metrics, stop) = (config.clone(), metrics.clone(), stop.clone());
        tokio::spawn(async move {
            restarting_after_fences(&metrics, || {
                router(config.clone(), partitions, metrics.clone(), stop.clone())
            })
            .await
        })
    });
    let join = restarting_after_fences(&metrics, || {
        join(
            config.clone(),
            dataset.clone(),
            partitions,
            // A task reading its events partition directly has that one source of event time.
            if direct {
                1
            } else {
                u32::try_from(event_sources).unwrap_or(0)
            },
            held_in_topic,
            metrics.clone(),
            stop.clone(),
        )
    });
    // Whichever stage ends first, on an error or not, the other stops too: a router that
    // failed alone would leave the join waiting for events forever, looking healthy.
    let (joined, routed) = match router {
        None => (join.await, Ok(())),
        Some(mut router) => {
            tokio::pin!(join);
            tokio::select! {
                joined = &mut join => {
                    stop.cancel();
                    (joined, router_outcome((&mut router).await))
                }
                routed = &mut router => {
                    stop.cancel();
                    let routed = router_outcome(routed);
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

/// The router task's result, its panic as an error.
fn router_outcome(
    result: Result<Result<(), JoinError>, tokio::task::JoinError>,
) -> Result<(), JoinError> {
    outcome("router", result, || Ok(()))
}

/// A task's result, its panic as an error of `stage`; `cancelled` when the task was cancelled
/// (only at runtime shutdown).
fn outcome<T>(
    stage: &'static str,
    result: Result<Result<T, JoinError>, tokio::task::JoinError>,
    cancelled: impl FnOnce() -> Result<T, JoinError>,
) -> Result<T, JoinError> {
    match result {
        Ok(done) => done,
        Err(err) if err.is_panic() => {
            let panic = err.into_panic();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(JoinError::Panicked { stage, message })
        }
        Err(_) => cancelled(),
    }
}

/// Runs start-up's dataset requests on a blocking thread. During an object-store outage each
/// request retries for minutes; on a runtime thread (`block_in_place`) that held up the
/// start-up's `select!`, so SIGTERM waited for the retries to give up.
async fn start_up_io<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, JoinError> + Send + 'static,
) -> Result<T, JoinError> {
    outcome("start-up", tokio::task::spawn_blocking(work).await, || {
        Err(JoinError::Panicked {
            stage: "start-up",
            message: "cancelled".into(),
        })
    })
}

/// Whether checkpoints refer to held feature logs by their offsets in the feature-log topic
/// (true) or copy them into state files (false), from `join.held-logs` and the topic's
/// retention. A log read back at a restore must still be in the topic, so offsets are used
/// only when no retention rule can delete it while a restore may need it.
async fn held_logs_in_topic(config: &JoinerConfig) -> Result<bool, JoinError> {
    if config.join.held_logs == HeldLogs::StateFiles {
        return Ok(false);
    }
    let topic = &config.input.features_topic;
    let retention =
        featurelog_kafka::admin::topic_retention(&config.kafka, topic, Duration::from_secs(10))
            .await;
    choose_held_logs(
        config.join.held_logs,
        topic,
        retention,
        config.held_logs_retention(),
    )
}

fn choose_held_logs(
    mode: HeldLogs,
    topic: &str,
    retention: Result<featurelog_kafka::admin::TopicRetention, featurelog_kafka::KafkaError>,
    needed: Duration,
) -> Result<bool, JoinError> {
    match (mode, retention) {
        (HeldLogs::StateFiles, _) => Ok(false),
        (_, Ok(r)) if r.keeps(needed) => {
            tracing::info!(topic, retention = %r, "checkpoints refer to held feature logs by offset");
            Ok(true)
        }
        (HeldLogs::Topic, Ok(r)) => Err(JoinError::Retention {
            topic: topic.to_owned(),
            found: r.to_string(),
            needed_ms: needed.as_millis(),
        }),
        (HeldLogs::Topic, Err(e)) => Err(e.into()),
        (HeldLogs::Auto, Ok(r)) => {
            tracing::info!(
                topic,
                retention = %r,
                needed_ms = needed.as_millis(),
                "the feature-log topic may delete records too soon for restores to read them back: checkpoints copy held feature logs into state files"
            );
            Ok(false)
        }
        (HeldLogs::Auto, Err(e)) => {
            tracing::info!(error = %e, "checkpoints copy held feature logs into state files");
            Ok(false)
        }
    }
}

/// Reads the records at `offsets` of a feature-log partition back for a restore, in one pass
/// from the lowest to the highest. Records the topic no longer has (retention, compaction)
/// are missing from the answer; the restore counts them.
fn read_back(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
    partition: i32,
    offsets: &BTreeSet<i64>,
) -> Result<HashMap<i64, Vec<u8>>, String> {
    let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) else {
        return Ok(HashMap::new());
    };
    let failed = |what: &str, e: RdKafkaError| {
        format!(
            "reading held feature logs back from {topic}[{partition}] at offsets {first}..={last}: {what}: {e}"
        )
    };
    // librdkafka wants a group id even for assign(); this consumer never joins it (no
    // subscribe) and commits nothing.
    let consumer: BaseConsumer = kafka
        .client_config(&[
            ("group.id", group),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("isolation.level", "read_committed"),
        ])
        .create()
        .map_err(|e| failed("creating a consumer", e))?;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(30))
        .map_err(|e| failed("reading the partition's offsets", e))?;
    let start = first.max(low);
    let end = last.min(high - 1);
    let mut found = HashMap::with_capacity(offsets.len());
    if start > end {
        return Ok(found);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(start))
        .and_then(|()| consumer.assign(&assignment))
        .map_err(|e| failed("assigning the partition", e))?;
    let mut last_record = Instant::now();
    let mut last_error = String::from("none");
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                last_record = Instant::now();
                if offsets.contains(&m.offset()) {
                    found.insert(m.offset(), m.payload().unwrap_or_default().to_vec());
                }
                if m.offset() >= end {
                    return Ok(found);
                }
            }
            // Consumer errors are events, not the end of the read: an offset reset when
            // retention deletes the start meanwhile, a broker that is restarting. The time
            // bound below ends a read that makes no progress.
            Some(Err(e)) => {
                tracing::warn!(topic, partition, error = %e, "reading held feature logs back");
                last_error = e.to_string();
            }
            None => {}
        }
        if last_record.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "reading held feature logs back from {topic}[{partition}]: no record for 60 s before offset {end} (last error: {last_error}); is the broker reachable?"
            ));
        }
    }
}

fn to_impression(e: &Event) -> Impression {
    let (event_type, event_name) = match &e.kind {
        EventKind::Impression => (EventType::Impression, String::new()),
        EventKind::Click => (EventType::Click, String::new()),
        EventKind::Conversion => (EventType::Conversion, String::new()),
        EventKind::Other(name) => (EventType::Other, name.clone()),
    };
    Impression {
        request_id: e.request_id.clone(),
        item_id: e.item_id.clone(),
        event_time: Some(prost_types::Timestamp {
            seconds: e.time_us.div_euclid(1_000_000),
            nanos: (e.time_us.rem_euclid(1_000_000) * 1000) as i32,
        }),
        event_type: event_type as i32,
        event_name,
        labels: e.labels.clone().into_iter().collect(),
        event_id: e.event_id.clone().unwrap_or_default(),
    }
}

/// What the router reports of its progress, in every partition of the repartition topic after
/// the events of each transaction that changed it (docs/JOINER.md, "Watermarks"): by events
/// partition, the event time up to which its events have been routed. A record without a key
/// and with the `featurelog-progress` header.
#[derive(Clone, PartialEq, prost::Message)]
struct RouterProgress {
    #[prost(btree_map = "int32, int64", tag = "1")]
    sources: BTreeMap<i32, i64>,
}

const PROGRESS_HEADER: &str = "featurelog-progress";

/// Routed events in one repartition record: the router packs the events of one transaction
/// that go to the same partition together, because librdkafka's work per message (on the
/// router's produce and on the join task's consume) cost more than the join itself did for an
/// event. A record without a key and with the `featurelog-events` header; its events are in the
/// order they were routed.
#[derive(Clone, PartialEq, prost::Message)]
struct RoutedEvents {
    #[prost(message, repeated, tag = "1")]
    events: Vec<Impression>,
}

const EVENTS_HEADER: &str = "featurelog-events";

/// A batch is sent when it holds this many events or bytes (well under the topic's default
/// 1 MB message limit), and in any case before a transaction commits.
const BATCH_EVENTS: usize = 1000;
const BATCH_BYTES: usize = 256 * 1024;

/// Kafka's murmur2 partitioner (the Java client's default for keyed records, and librdkafka's
/// `murmur2_random` for non-empty keys): the partition of the feature logs of a request id.
/// The router must compute it itself to put the events of several requests in one record.
pub fn murmur2_partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions.max(1) as u32) as i32
}

/// Kafka's murmur2 hash (`Utils.murmur2` of the Java client).
fn murmur2(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ key.len() as u32;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, b) in rest.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The events routed to each partition in the open transaction and not yet sent.
#[derive(Default)]
struct Batches {
    open: HashMap<i32, (Vec<u8>, usize)>,
}

impl Batches {
    /// Adds an event for `partition`; sends the batch when it is full.
    fn add(
        &mut self,
        producer: &BaseProducer,
        topic: &str,
        partition: i32,
        event: &Impression,
    ) -> Result<(), JoinError> {
        let (buf, n) = self.open.entry(partition).or_default();
        // A repeated message field is its elements, each tagged and length-delimited.
        prost::encoding::message::encode(1, event, buf);
        *n += 1;
        if *n >= BATCH_EVENTS || buf.len() >= BATCH_BYTES {
            let (buf, _) = self.open.remove(&partition).unwrap_or_default();
            send_batch(producer, topic, partition, &buf)?;
        }
        Ok(())
    }

    /// Sends every open batch.
    fn flush(&mut self, producer: &BaseProducer, topic: &str) -> Result<(), JoinError> {
        for (partition, (buf, _)) in self.open.drain() {
            send_batch(producer, topic, partition, &buf)?;
        }
        Ok(())
    }
}

fn send_batch(
    producer: &BaseProducer,
    topic: &str,
    partition: i32,
    buf: &[u8],
) -> Result<(), JoinError> {
    let record = BaseRecord::<str, [u8]>::to(topic)
        .partition(partition)
        .payload(buf)
        .headers(OwnedHeaders::new().insert(Header {
            key: EVENTS_HEADER,
            value: Some("1"),
        }));
    send_waiting(producer, record, "routing events")
}

/// The router's view of one assigned events partition.
struct Source {
    /// The newest event time routed from it (`i64::MIN`: none yet).
    routed_us: i64,
    /// When a record of it was last read, or when it was assigned.
    last_seen: std::time::Instant,
    /// Where reading starts when nothing has been read yet (its committed offset), looked up
    /// once: librdkafka knows no position before the first message.
    start: Option<i64>,
}

impl Source {
    fn new() -> Self {
        Self {
            routed_us: i64::MIN,
            last_seen: std::time::Instant::now(),
            start: None,
        }
    }
}

/// The wall clock in microseconds since the epoch, for idle watermarks.
fn wall_clock_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Sends a record with the router's transactional producer, waiting while its queue is full
/// (the transaction must hold every record, so none may be dropped).
fn send_waiting(
    producer: &BaseProducer,
    mut record: BaseRecord<'_, str, [u8]>,
    what: &'static str,
) -> Result<(), JoinError> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((
                RdKafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                r,
            )) => {
                producer.poll(Duration::from_millis(50));
                record = r;
            }
            Err((err, _)) => return Err(client(what)(err)),
        }
    }
}

/// The progress to report for each assigned events partition: what was routed, or the wall
/// clock for a partition read to its end that has been quiet for `idle`. A partition that is
/// merely behind never reports idle, however long the router takes (a transaction coordinator
/// loading, a backlog on another partition): that is what keeps its events' windows open.
fn router_progress(
    consumer: &StreamConsumer<JoinContext>,
    topics: &[String],
    sources: &mut HashMap<i32, Source>,
    idle: Duration,
) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    let (Ok(assignment), Ok(positions)) = (consumer.assignment(), consumer.position()) else {
        return out;
    };
    let assigned: Vec<(i32, &str, i32)> = topics
        .iter()
        .enumerate()
        .flat_map(|(index, topic)| {
            assignment
                .elements_for_topic(topic)
                .into_iter()
                .map(move |e| {
                    (
                        source_id(index, e.partition()),
                        topic.as_str(),
                        e.partition(),
                    )
                })
        })
        .collect();
    sources.retain(|id, _| assigned.iter().any(|(a, _, _)| a == id));
    let now_us = wall_clock_us();
    for (id, topic, p) in assigned {
        let source = sources.entry(id).or_insert_with(Source::new);
        let position = match positions.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => Some(o),
            _ => {
                if source.start.is_none() && source.last_seen.elapsed() >= idle {
                    source.start = start_offset(consumer, topic, p);
                }
                source.start
            }
        };
        let mut at = source.routed_us;
        // Only a partition quiet for long enough and read to its end is idle.
        if source.last_seen.elapsed() >= idle
            && position.is_some_and(|at| read_to_end(consumer.context(), topic, p, at))
        {
            at = at.max(now_us);
        }
        if at != i64::MIN {
            out.insert(id, at);
        }
    }
    out
}

/// The number under which the router reports the progress of partition `partition` of the
/// `index`-th events topic (`input.events-topic`): the partition itself for the first topic,
/// as before there could be several, so that checkpoints of one topic read the same.
/// Config validation keeps `index` below 64; Kafka topics have far fewer than 2^20 partitions.
pub(crate) fn source_id(index: usize, partition: i32) -> i32 {
    ((index as i32) << 20) | partition
}

/// Whether `next` (the next offset to read) is the end of the partition, as the consumer's
/// last statistics saw it (see [`JoinContext`]); false while they have not seen it yet.
fn read_to_end(context: &JoinContext, topic: &str, partition: i32, next: i64) -> bool {
    end_of(context, topic, partition).is_some_and(|(low, high)| next >= high || low == high)
}

/// A partition's low and high watermarks as the consumer's last statistics saw them.
fn end_of(context: &JoinContext, topic: &str, partition: i32) -> Option<(i64, i64)> {
    context
        .ends
        .lock()
        .ok()
        .and_then(|ends| ends.get(&(topic.to_owned(), partition)).copied())
}

/// How far a partition is read: the consumer's position, which steps over the transaction
/// markers no message carries (the router writes the repartition topic in transactions, so its
/// last offset is a marker), or the task's own next offset if further.
/// `positions` is the consumer's `position()`.
fn position(positions: Option<&TopicPartitionList>, topic: &str, partition: i32, next: i64) -> i64 {
    let at = positions.and_then(|l| {
        l.find_partition(topic, partition)
            .and_then(|e| e.offset().to_raw())
    });
    at.map_or(next, |at| at.max(next))
}

/// Whether records from `next` on may be left in the partition: its end as the consumer's last
/// statistics saw it (see [`JoinContext`]) is further on, or no statistics have shown it yet
/// (a task that starts on a backlog reads it within the first interval; they come every
/// second).
fn has_unread(context: &JoinContext, topic: &str, partition: i32, next: i64) -> bool {
    end_of(context, topic, partition).is_none_or(|(low, high)| next < high && low < high)
}

/// The committed offset of a partition the router has read nothing of (its low watermark when
/// none is committed, as `auto.offset.reset = earliest` reads it).
fn start_offset(
    consumer: &StreamConsumer<JoinContext>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let committed =
        tokio::task::block_in_place(|| consumer.committed_offsets(tpl, Duration::from_secs(10)))
            .ok()?;
    match committed.find_partition(topic, partition)?.offset() {
        Offset::Offset(o) => Some(o),
        _ => {
            let (low, _) = tokio::task::block_in_place(|| {
                consumer.fetch_watermarks(topic, partition, Duration::from_secs(10))
            })
            .ok()?;
            Some(low)
        }
    }
}

/// Moves app events to the repartition topic, keyed by request id, exactly once.
async fn router(
    config: Arc<JoinerConfig>,
    partitions: i32,
    metrics: Arc<JoinMetrics>,
    shutdown: CancellationToken,
) -> Result<(), JoinError> {
    let kafka: &KafkaConfig = &config.kafka;
    let group = format!("{}.router", config.group);
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
        // Partitions the apps add to their events topic hold every task's watermark until the
        // router reads them (docs/JOINER.md, "Partition counts"): look for them every 30 s
        // rather than librdkafka's 5 minutes (one small metadata request; `[kafka.properties]`
        // may say otherwise).
        &[("topic.metadata.refresh.interval.ms", "30000")],
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
            // The repartition topic is the joiner's own and short-lived: lz4 costs a fraction
            // of zstd's CPU, and its bytes never reach users.
            ("compression.type", "lz4"),
            ("linger.ms", "20"),
        ])
        .create()
        .map_err(client("creating the router producer"))?;
    let producer = Arc::new(producer);
    {
        let p = producer.clone();
        tokio::task::block_in_place(move || p.init_transactions(Duration::from_secs(60)))
            .map_err(client("initialising transactions"))?;
    }
    producer
        .begin_transaction()
        .map_err(client("beginning a transaction"))?;
    let _ = consumer.context().router.set(producer.clone());
    let repartition = config.repartition_topic();
    let mut next: HashMap<(String, i32), i64> = HashMap::new();
    let mut sources: HashMap<i32, Source> = HashMap::new();
    let mut reported: BTreeMap<i32, i64> = BTreeMap::new();
    let mut batches = Batches::default();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                if after_revoke(&producer, &consumer, &shutdown)? {
                    // Nothing of the aborted transaction is left to commit.
                    return Ok(());
                }
                batches.flush(&producer, &repartition)?;
                commit_router(&producer, &consumer, &mut next, &shutdown)?;
                return Ok(());
            }
            _ = tick.tick() => {
                // A fatal error is not always handed to `recv` (the client's error callback
                // may take it): looked for here too, or the router would wait on a dead
                // consumer for ever.
                fatal(&consumer, "router consumer")?;
                if after_revoke(&producer, &consumer, &shutdown)? {
                    (next, batches, sources, reported) = Default::default();
                }
                // The events first: a progress record vouches for every event routed before it.
                batches.flush(&producer, &repartition)?;
                let progress = router_progress(&consumer, config.input.events_topic.names(), &mut sources, config.join.idle_timeout);
                let report = !progress.is_empty() && progress != reported;
                if report {
                    let bytes = RouterProgress { sources: progress.clone() }.encode_to_vec();
                    for partition in 0..partitions {
                        let record = BaseRecord::<str, [u8]>::to(&repartition)
                            .partition(partition)
                            .payload(&bytes)
                            .headers(OwnedHeaders::new().insert(Header { key: PROGRESS_HEADER, value: Some("1") }));
                        send_waiting(&producer, record, "reporting router progress")?;
                    }
                    reported = progress;
                }
                if (!next.is_empty() || report) && !commit_router(&producer, &consumer, &mut next, &shutdown)? {
                    // The rewound events are routed again: progress restarts from them.
                    sources.clear();
                    reported.clear();
                }
            }
            message = consumer.recv() => {
                if after_revoke(&producer, &consumer, &shutdown)? {
                    (next, batches, sources, reported) = Default::default();
                }
                let message = match message {
                    Ok(m) => m,
                    Err(err) => {
                        fatal(&consumer, "router consumer")?;
                        tracing::warn!(%err, "router consumer");
                        continue;
                    }
                };
                let payload = message.payload().unwrap_or_default();
                let decoded = decode_event(&config, message.topic(), payload);
                let index = config.input.events_topic.names().iter().position(|t| t == message.topic()).unwrap_or(0);
                let source = sources.entry(source_id(index, message.partition())).or_insert_with(Source::new);
                source.last_seen = std::time::Instant::now();
                match decoded {
                    // Its time still counts for the watermark: the app's events are in order
                    // whether or not the sidecars logged their requests.
                    Ok(e) if !in_sample(&config, &e) => {
                        source.routed_us = source.routed_us.max(e.time_us);
                        metrics.events_not_sampled.inc();
                    }
                    Ok(e) => {
                        source.routed_us = source.routed_us.max(e.time_us);
                        let partition = murmur2_partition(e.request_id.as_bytes(), partitions);
                        batches.add(&producer, &repartition, partition, &to_impression(&e))?;
                        metrics.events_routed.inc();
                    }
                    Err(err) => dead_letter(&producer, &config.input.dead_letter_topic, &message, err.reason(), &err.to_string(), &metrics),
                }
                next.insert((message.topic().to_owned(), message.partition()), message.offset() + 1);
                producer.poll(Duration::ZERO);
            }
        }
    }
}

/// Commits the router's open transaction with its input offsets; on an abortable error
/// (a rebalance fenced the offsets), aborts and rewinds the consumer to what is committed.
/// Returns false when it aborted. A retriable error (the coordinator restarting, a request
/// timing out during a broker outage) resumes the same step until it succeeds, as librdkafka
/// asks, or until shutdown: giving up there would stop the joiner over a passing outage.
fn commit_router(
    producer: &BaseProducer,
    consumer: &StreamConsumer<JoinContext>,
    next: &mut HashMap<(String, i32), i64>,
    shutdown: &CancellationToken,
) -> Result<bool, JoinError> {
    let mut offsets = TopicPartitionList::new();
    for ((topic, partition), offset) in next.iter() {
        offsets
            .add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .map_err(client("building router offsets"))?;
    }
    next.clear();
    let result = tokio::task::block_in_place(|| {
        let metadata = consumer.group_metadata().ok_or(RdKafkaError::Canceled)?;
        retrying(
            shutdown,
            "adding the router's offsets to its transaction",
            || producer.send_offsets_to_transaction(&offsets, &metadata, TXN_TIMEOUT),
        )?;
        retrying(shutdown, "committing a router transaction", || {
            producer.commit_transaction(TXN_TIMEOUT)
        })
    });
    let committed = match result {
        Ok(()) => true,
        Err(RdKafkaError::Transaction(e)) if e.txn_requires_abort() => {
            tracing::warn!(error = %e, "router transaction aborted; rewinding to committed offsets");
            tokio::task::block_in_place(|| {
                retrying(shutdown, "aborting a router transaction", || {
                    featurelog_kafka::txn::abort_transaction(producer, TXN_TIMEOUT)
                })
            })
            .map_err(client("aborting a transaction"))?;
            rewind(consumer, shutdown)?;
            false
        }
        Err(err) => return Err(client("committing a router transaction")(err)),
    };
    producer
        .begin_transaction()
        .map_err(client("beginning a transaction"))?;
    Ok(committed)
}

/// How long one attempt of a transaction step may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `step` again while it fails with a retriable transaction error, until `shutdown`.
fn retrying(
    shutdown: &CancellationToken,
    what: &'static str,
    mut step: impl FnMut() -> rdkafka::error::KafkaResult<()>,
) -> rdkafka::error::KafkaResult<()> {
    let mut attempt = 0u32;
    loop {
        match step() {
            Err(RdKafkaError::Transaction(e))
                if e.is_retriable() && !e.txn_requires_abort() && !e.is_fatal() =>
            {
                attempt += 1;
                if shutdown.is_cancelled() {
                    return Err(RdKafkaError::Transaction(e));
                }
                tracing::warn!(error = %e, attempt, "{what}: retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            // rust-rdkafka's commit first flushes the transaction's records, which may not
            // all be delivered within one attempt during an outage.
            Err(RdKafkaError::Flush(rdkafka::types::RDKafkaErrorCode::OperationTimedOut))
                if !shutdown.is_cancelled() =>
            {
                attempt += 1;
                tracing::warn!(attempt, "{what}: records not delivered yet; retrying");
            }
            done => return done,
        }
    }
}

/// After a revoke, completes the abort of the transaction it started, if the rebalance
/// callback could not (the coordinator unreachable), and begins the next transaction.
/// Returns true when a revoke aborted the open transaction: what the router gathered for it
/// is gone, and positions restart from committed offsets.
fn after_revoke(
    producer: &BaseProducer,
    consumer: &StreamConsumer<JoinContext>,
    shutdown: &CancellationToken,
) -> Result<bool, JoinError> {
    use std::sync::atomic::Ordering;
    let context = consumer.context();
    if !context.router_aborted.swap(false, Ordering::SeqCst) {
        return Ok(false);
    }
    if context.abort_pending.load(Ordering::SeqCst) {
        tokio::task::block_in_place(|| {
            retrying(
                shutdown,
                "aborting the router transaction of a rebalance",
                || featurelog_kafka::txn::abort_transaction(producer, TXN_TIMEOUT),
            )
        })
        .map_err(client("aborting a transaction"))?;
        context.abort_pending.store(false, Ordering::SeqCst);
        producer
            .begin_transaction()
            .map_err(client("beginning a transaction"))?;
        tracing::info!("the router transaction of a rebalance is aborted");
    }
    Ok(true)
}

/// Seeks every assigned partition back to its committed offset. A broker that does not answer
/// is asked again (the positions must move back before anything else is routed).
fn rewind(
    consumer: &StreamConsumer<JoinContext>,
    shutdown: &CancellationToken,
) -> Result<(), JoinError> {
    let assignment = consumer
        .assignment()
        .map_err(client("reading the assignment"))?;
    let committed = loop {
        match tokio::task::block_in_place(|| {
            consumer.committed_offsets(assignment.clone(), Duration::from_secs(30))
        }) {
            Ok(committed) => break committed,
            Err(err) if !shutdown.is_cancelled() && consumer.client().fatal_error().is_none() => {
                tracing::warn!(%err, "reading committed offsets to rewind the router: retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(err) => return Err(client("reading committed offsets")(err)),
        }
    };
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        if let Err(err) = consumer.seek(e.topic(), e.partition(), offset, Duration::from_secs(10)) {
            tracing::warn!(%err, topic = e.topic(), partition = e.partition(), "rewind");
        }
    }
    Ok(())
}

/// The context of the joiner's consumers. It remembers which partitions a rebalance took away,
/// for the join loop to drop their tasks before it does anything else with them; and each
/// partition's low and high watermarks from librdkafka's statistics, which every fetch
/// response refreshes, so that deciding whether a partition is read to its end sends no
/// request. A watermark query (ListOffsets) waits behind the fetch the broker holds open for
/// up to fetch.wait.max.ms (500 ms) on a quiet partition, which is exactly when the question
/// is asked, and the loop asking it stood still meanwhile: seconds per tick with many tasks.
#[derive(Default)]
struct JoinContext {
    revoked: Mutex<Vec<i32>>,
    ends: Mutex<HashMap<(String, i32), (i64, i64)>>,
    /// The router's transactional producer (router consumer only).
    router: std::sync::OnceLock<Arc<BaseProducer>>,
    /// Set when a revoke aborted the router's open transaction; the router drops what it had
    /// gathered for it.
    router_aborted: std::sync::atomic::AtomicBool,
    /// Set when the revoke's abort could not complete: the router finishes it.
    abort_pending: std::sync::atomic::AtomicBool,
    /// When the join stage's monitoring commit now in flight was sent.
    commit_sent: Mutex<Option<Instant>>,
}

/// Returns the consumer's fatal error, if it has one.
fn fatal(consumer: &StreamConsumer<JoinContext>, what: &'static str) -> Result<(), JoinError> {
    match consumer.client().fatal_error() {
        None => Ok(()),
        Some((rdkafka::types::RDKafkaErrorCode::FencedInstanceId, reason)) => {
            Err(JoinError::Fenced { what, reason })
        }
        Some((_, reason)) => Err(JoinError::Fatal { what, reason }),
    }
}

/// How many times a stage may start again after a fence within [`FENCE_WINDOW`]. librdkafka's
/// own fences come one per outage; two processes with one `instance` fence each other every
/// few seconds, and must stop with the error that says so.
const FENCES_ALLOWED: usize = 3;
const FENCE_WINDOW: Duration = Duration::from_secs(600);

/// Runs a stage, starting it again after a fence ([`JoinError::Fenced`]) while the fences are
/// few: its partitions went with its consumer, so nothing of the old run carries over.
async fn restarting_after_fences<F: std::future::Future<Output = Result<(), JoinError>>>(
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

/// How long the rebalance callback may spend aborting the router's transaction.
const REVOKE_ABORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the consumers' statistics (and so the watermarks in [`JoinContext`]) refresh.
const STATISTICS_INTERVAL_MS: &str = "1000";

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

    fn pre_rebalance(&self, _: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
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

struct Task {
    name: String,
    /// When the task last read a feature log (for the features' idle watermark).
    last_features: std::time::Instant,
    /// When the task last read an event of its events-topic partition (co-partitioned events
    /// only: otherwise the router decides when an events partition is idle).
    last_events: std::time::Instant,
    /// Events of its events-topic partition that belong to another partition.
    misplaced: u64,
    state: JoinState,
    /// The next offset to take from the features (0) and events (1) partitions; the events
    /// partition is the repartition topic's, or the events topic's when co-partitioned.
    next: [i64; 2],
    epoch: u64,
    /// The watermark of the task's newest checkpoint (`i64::MIN` before the first): rows
    /// staged for hours it has already declared complete go to the late area.
    committed_watermark_us: i64,
    rows: crate::buffer::Rows,
    dirty: bool,
    /// The state's counts as last added to the metrics.
    reported: crate::state::Counts,
    /// State files the last checkpoint reads (its own and its segments), by name: kept through
    /// the next commit for a process that is still restoring from it.
    last_state_files: Vec<String>,
    /// Whether its partitions are paused for being read ahead of each other.
    alignment: crate::align::Alignment,
}

/// The checkpoint key of a task's events offset. The two settings of
/// `input.events-partitioning` read different topics, so they use different keys: a checkpoint
/// of one is never taken for the other.
fn events_key(partitioning: EventsPartitioning) -> &'static str {
    match partitioning {
        EventsPartitioning::Any => "events",
        EventsPartitioning::ByRequestId => "events-topic",
    }
}

/// Whether `e`'s request is in the sidecars' sample (`input.events-sample-rate`). An event of
/// a request outside it would wait `impressions-wait` in the state for features that were never
/// logged, and be counted as an impression without features, hiding real losses among them.
fn in_sample(config: &JoinerConfig, e: &Event) -> bool {
    featurelog_schemas::sampling::sampled(&e.request_id, config.input.events_sample_rate)
}

/// An app event of `topic` as the config says apps encode them there.
fn decode_event(
    config: &JoinerConfig,
    topic: &str,
    payload: &[u8],
) -> Result<Event, event::EventError> {
    match config.input.format_of(topic) {
        (EventFormat::Protobuf, _) => event::from_protobuf(payload),
        (EventFormat::Json, fields) => event::from_json(payload, fields),
    }
}

/// The `group.instance.id` of a consumer of `topics` for this process: its `instance`, made of
/// the characters Kafka accepts, and a hash of the topics. A static member that rejoins is
/// given its previous assignment without a rebalance, even when it now subscribes to other
/// topics (the classic group protocol only compares assignors); with the topics in the id, a
/// process whose configuration changed what it reads joins as a new member instead of
/// inheriting partitions it no longer reads.
/// A consumer of `topics` in `group` (offsets committed by the joiner, transactional reads,
/// statistics for [`JoinContext`]), a static member unless the config says otherwise.
fn group_consumer(
    config: &JoinerConfig,
    group: &str,
    topics: &[&str],
    extra: &[(&str, &str)],
    (creating, subscribing): (&'static str, &'static str),
) -> Result<StreamConsumer<JoinContext>, JoinError> {
    let instance = static_member_id(&config.instance_name(), topics);
    let mut settings = vec![
        ("group.id", group),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
        ("isolation.level", "read_committed"),
        ("statistics.interval.ms", STATISTICS_INTERVAL_MS),
    ];
    settings.extend_from_slice(extra);
    if config.static_membership {
        // A process restarted with the same `instance` (after a crash, a deploy) takes its
        // partitions back at once, without a rebalance that would move every task and make
        // each new owner restore its state; a process gone for good loses them after
        // session.timeout.ms (static members do not leave the group when they close).
        settings.push(("group.instance.id", &instance));
    }
    let consumer: StreamConsumer<JoinContext> = config
        .kafka
        .client_config(&settings)
        .create_with_context(JoinContext::default())
        .map_err(client(creating))?;
    consumer.subscribe(topics).map_err(client(subscribing))?;
    Ok(consumer)
}

fn static_member_id(instance: &str, topics: &[&str]) -> String {
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

/// Refuses a checkpoint written with the other `input.events-partitioning`.
fn same_partitioning(cp: &Checkpoint, partitioning: EventsPartitioning) -> Result<(), JoinError> {
    let other = match partitioning {
        EventsPartitioning::Any => EventsPartitioning::ByRequestId,
        EventsPartitioning::ByRequestId => EventsPartitioning::Any,
    };
    if cp.offsets.contains_key(events_key(other)) {
        return Err(JoinError::PartitioningChanged {
            task: cp.task.clone(),
            written: other.as_str(),
            configured: partitioning.as_str(),
        });
    }
    Ok(())
}

fn recover(
    dataset: &Dataset,
    partition: i32,
    config: &JoinerConfig,
    event_sources: u32,
) -> Result<Task, JoinError> {
    let topic = &config.input.features_topic;
    let name = &format!("{topic}-{partition}");
    let checkpoint = dataset.recover(name)?;
    let partitioning = config.input.events_partitioning;
    let (state, next, epoch, committed_watermark_us, state_file) = match checkpoint {
        Some(cp) => {
            same_partitioning(&cp, partitioning)?;
            let state = match &cp.state {
                Some(path) => {
                    let bytes = dataset.read_state(path)?;
                    // Segments by the names the snapshot gives them (older formats: by epoch).
                    let legacy_name = |epoch: u64| Dataset::legacy_state_name(name, epoch);
                    let segment = |file: &str| dataset.read_state(file).map_err(|e| e.to_string());
                    let read_back = |offsets: &BTreeSet<i64>| {
                        read_back(
                            &config.kafka,
                            &format!("{}.read-back", config.group),
                            topic,
                            partition,
                            offsets,
                        )
                    };
                    let state = JoinState::restore(
                        config.join_config(event_sources),
                        &bytes,
                        legacy_name,
                        segment,
                        read_back,
                    )
                    .map_err(|message| JoinError::Restore {
                        task: name.to_owned(),
                        path: path.clone(),
                        message,
                    })?;
                    if state.counts.lost_on_restore > 0 {
                        tracing::error!(
                            task = name,
                            lost = state.counts.lost_on_restore,
                            "held feature logs are no longer in the feature-log topic (its retention is shorter than the time they are held plus the joiner's downtime): their impressions will find no features"
                        );
                    }
                    state
                }
                None => JoinState::new(config.join_config(event_sources)),
            };
            let at = |k: &str| cp.offsets.get(k).copied().unwrap_or(0);
            (
                state,
                [at("features"), at(events_key(partitioning))],
                cp.epoch,
                cp.watermark_us,
                cp.state,
            )
        }
        None => (
            JoinState::new(config.join_config(event_sources)),
            [0, 0],
            0,
            i64::MIN,
            None,
        ),
    };
    tracing::info!(
        task = name,
        epoch,
        features_offset = next[0],
        events_offset = next[1],
        held_requests = state.requests(),
        "task recovered"
    );
    Ok(Task {
        last_state_files: state
            .segment_files()
            .into_iter()
            .chain(state_file)
            .collect(),
        name: name.to_owned(),
        last_features: std::time::Instant::now(),
        last_events: std::time::Instant::now(),
        misplaced: 0,
        state,
        next,
        epoch,
        committed_watermark_us,
        rows: crate::buffer::Rows::default(),
        dirty: false,
        reported: crate::state::Counts::default(),
        alignment: crate::align::Alignment::default(),
    })
}

/// After another owner committed task `p` first (a fence): if `p` is still assigned here, the
/// task starts again from that owner's checkpoint, and the consumer's positions in both of its
/// partitions move to the checkpoint's offsets. Without the seek, the records between those
/// offsets and where this consumer had read to would never be read by the new task.
fn follow_fence<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
    dataset: &Dataset,
    p: i32,
    config: &JoinerConfig,
    event_sources: u32,
    topics: [&str; 2],
) -> Result<Option<Task>, JoinError> {
    if !assigned_partitions(consumer, topics[0]).contains(&p) {
        return Ok(None);
    }
    let task = recover(dataset, p, config, event_sources)?;
    for (topic, next) in topics.into_iter().zip(task.next) {
        consumer
            .seek(
                topic,
                p,
                rdkafka::Offset::Offset(next),
                Duration::from_secs(10),
            )
            .map_err(client(
                "seeking to the checkpoint of a task another owner committed",
            ))?;
    }
    tracing::info!(task = %task.name, epoch = task.epoch, "task follows the other owner's checkpoint");
    Ok(Some(task))
}

/// Commits a task: its rows, its state and its offsets, in one checkpoint. Returns false when
/// another owner committed first (the task must be dropped).
fn flush(
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
            ("features".to_string(), task.next[0]),
            (events_key(partitioning).to_string(), task.next[1]),
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

/// The join stage: one task per partition of the feature-log topic and the repartition topic.
async fn join(
    config: Arc<JoinerConfig>,
    dataset: Dataset,
    partitions: i32,
    event_sources: u32,
    held_in_topic: bool,
    metrics: Arc<JoinMetrics>,
    shutdown: CancellationToken,
) -> Result<(), JoinError> {
    // Grows when the events topic gains partitions (below).
    let mut event_sources = event_sources;
    let kafka = &config.kafka;
    let features_topic = config.input.features_topic.clone();
    let partitioning = config.input.events_partitioning;
    let direct = partitioning == EventsPartitioning::ByRequestId;
    // Where a task's events come from: the router's repartition topic, or the events topic
    // itself when it is co-partitioned with the feature logs.
    let events_input = if direct {
        // One topic: the config refuses several with co-partitioned events.
        config.input.events_topic.names().concat()
    } else {
        config.repartition_topic()
    };
    let consumer = group_consumer(
        &config,
        &config.group,
        &[&features_topic, &events_input],
        // Same-numbered partitions of the two topics go to the same member.
        // A partition resumed after read-ahead alignment paused it (crate::align) waits for
        // the fetch in flight to its broker, which the broker holds up to fetch.wait.max.ms when
        // the other partition has nothing new: at librdkafka's 500 ms, catching up on a backlog
        // took a pause per half second. Raw settings in [kafka.properties] still win.
        &[
            ("partition.assignment.strategy", "range"),
            ("fetch.wait.max.ms", "100"),
        ],
        (
            "creating the join consumer",
            "subscribing to the join inputs",
        ),
    )?;
    let dead_letters: BaseProducer = kafka
        .client_config(&[("enable.idempotence", "true")])
        .create()
        .map_err(client("creating the dead-letter producer"))?;
    let mut tasks: HashMap<i32, Task> = HashMap::new();
    let all_tasks: Vec<String> = (0..partitions)
        .map(|p| format!("{features_topic}-{p}"))
        .collect();
    // An hour is complete once every task's watermark is past its end plus the longest time a
    // row of it can still be emitted (docs/JOINER.md, "Completeness").
    let completeness_lag = {
        let j = config.join_config(event_sources);
        j.features_wait_us
            .saturating_add(j.label_window_us.unwrap_or(0))
    };
    let max_ahead_us = i64::try_from(config.join.max_read_ahead.as_micros()).unwrap_or(i64::MAX);
    let features_wait_us = i64::try_from(config.join.features_wait.as_micros()).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(config.output.flush_interval);
    let mut partitions_checked = std::time::Instant::now();
    let mut markers: Option<tokio::task::JoinHandle<Result<Vec<String>, SinkError>>> = None;
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let drop_revoked = |tasks: &mut HashMap<i32, Task>| {
        if let Ok(mut revoked) = consumer.context().revoked.lock() {
            for p in revoked.drain(..) {
                if tasks.remove(&p).is_some() {
                    tracing::info!(
                        partition = p,
                        "task revoked; its uncommitted work is redone by the next owner"
                    );
                }
            }
        }
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                drop_revoked(&mut tasks);
                for task in tasks.values_mut() {
                    tokio::task::block_in_place(|| flush(&dataset, task, partitioning, completeness_lag, &metrics, &dead_letters))?;
                }
                commit_monitoring(&consumer, &tasks, &features_topic, &events_input);
                tracing::info!("join stage stopped after a final commit");
                return Ok(());
            }
            _ = tick.tick() => {
                fatal(&consumer, "join consumer")?;
                drop_revoked(&mut tasks);
                if partitions_checked.elapsed() >= PARTITIONS_CHECK {
                    partitions_checked = std::time::Instant::now();
                    tokio::task::block_in_place(|| check_partitions(&consumer, &features_topic, partitions, None))?;
                    // Apps may add partitions to their events topic: the router reads them (once
                    // its metadata shows them) and every task's watermark waits for them, so that
                    // their events are not late for a watermark that moved on without them.
                    // (Co-partitioned events are refused per event instead: not_co_partitioned.)
                    if !direct {
                        let now = tokio::task::block_in_place(|| {
                            config.input.events_topic.names().iter().map(|t| partitions_now(&consumer, t)).sum::<Option<i32>>()
                        });
                        if let Some(now) = now.and_then(|n| u32::try_from(n).ok()).filter(|&n| n > event_sources) {
                            tracing::warn!(topic = %config.input.events_topic.joined(), was = event_sources, now, "the events topic gained partitions: windows wait for the router to read them");
                            event_sources = now;
                            for task in tasks.values_mut() {
                                task.state.set_event_sources(now);
                            }
                        }
                    }
                }
                if direct {
                    // No router reports progress to every partition here: a task whose two
                    // partitions stay empty must still exist, or its watermark would hold
                    // every hour incomplete.
                    for p in assigned_partitions(&consumer, &features_topic) {
                        if let std::collections::hash_map::Entry::Vacant(e) = tasks.entry(p) {
                            e.insert(tokio::task::block_in_place(|| recover(&dataset, p, &config, event_sources))?);
                        }
                    }
                }
                let idle = config.join.idle_timeout;
                let ooo = i64::try_from(config.join.max_out_of_orderness.as_micros()).unwrap_or(i64::MAX);
                // How far each partition is read: the consumer's position, which steps over
                // the transaction markers no message carries (an app writing its events in
                // transactions ends each with one), or the task's own next offset if further.
                let positions = consumer.position().ok();
                let read_to = |topic: &str, p: i32, next: i64| position(positions.as_ref(), topic, p, next);
                for (p, task) in tasks.iter_mut() {
                    // What the router does for an events partition it reads (router_progress).
                    if direct && task.last_events.elapsed() >= idle && read_to_end(consumer.context(), &events_input, *p, read_to(&events_input, *p, task.next[1])) {
                        let before = task.state.watermark_us();
                        let rows = task.state.source_progress(*p, wall_clock_us());
                        if !rows.is_empty() || task.state.watermark_us() != before {
                            task.dirty = true;
                            task.rows.extend(rows);
                        }
                    }
                    // Only a partition read to its end is quiet; one that is behind is not.
                    if task.last_features.elapsed() >= idle && read_to_end(consumer.context(), &features_topic, *p, read_to(&features_topic, *p, task.next[0])) {
                        let before = task.state.watermark_us();
                        let rows = task.state.features_idle(wall_clock_us().saturating_sub(ooo));
                        if !rows.is_empty() || task.state.watermark_us() != before {
                            task.dirty = true;
                            task.rows.extend(rows);
                        }
                    }
                }
                let mut paused = 0;
                for (p, task) in tasks.iter_mut() {
                    let next = task.next;
                    let unread = |input: Input| {
                        let topic = [&features_topic, &events_input][input as usize];
                        has_unread(consumer.context(), topic, *p, read_to(topic, *p, next[input as usize]))
                    };
                    let changes = task.alignment.decide(&task.state.input_times(), max_ahead_us, features_wait_us, unread);
                    crate::align::apply(&consumer, [&features_topic, &events_input], *p, &changes);
                    paused += [Input::Features, Input::Events].iter().filter(|&&i| task.alignment.is_paused(i)).count();
                }
                metrics.paused_partitions.set(paused as i64);
                let mut fenced = Vec::new();
                for (p, task) in tasks.iter_mut() {
                    if !tokio::task::block_in_place(|| flush(&dataset, task, partitioning, completeness_lag, &metrics, &dead_letters))? {
                        fenced.push(*p);
                    }
                }
                for p in fenced {
                    tasks.remove(&p);
                    if let Some(task) = tokio::task::block_in_place(|| {
                        follow_fence(&consumer, &dataset, p, &config, event_sources, [&features_topic, &events_input])
                    })? {
                        tasks.insert(p, task);
                    }
                }
                commit_monitoring(&consumer, &tasks, &features_topic, &events_input);
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
                // Markers are best effort and may take long (a listing and a request per new
                // hour; minutes of retries while the store is unreachable): they run beside the
                // join, one pass at a time, so that reading Kafka never waits for them. A pass
                // rolls forward only committed checkpoints, as another process's would.
                if markers.as_ref().is_none_or(tokio::task::JoinHandle::is_finished) {
                    if let Some(done) = markers.take() {
                        match done.await {
                            Ok(Ok(marked)) if !marked.is_empty() => tracing::info!(?marked, "hours complete"),
                            Ok(Ok(_)) => {}
                            Ok(Err(err)) => tracing::warn!(%err, "completeness markers"),
                            Err(err) => tracing::warn!(%err, "completeness markers stopped"),
                        }
                    }
                    let (dataset, all_tasks) = (dataset.clone(), all_tasks.clone());
                    markers = Some(tokio::task::spawn_blocking(move || {
                        dataset.mark_complete(&all_tasks, completeness_lag)
                    }));
                }
                dead_letters.poll(Duration::ZERO);
            }
            message = consumer.recv() => {
                drop_revoked(&mut tasks);
                let message = match message {
                    Ok(m) => m,
                    Err(err) => {
                        fatal(&consumer, "join consumer")?;
                        tracing::warn!(%err, "join consumer");
                        continue;
                    }
                };
                let p = message.partition();
                let input = usize::from(message.topic() != features_topic);
                if input == 0 && p >= partitions {
                    tokio::task::block_in_place(|| check_partitions(&consumer, &features_topic, partitions, Some(p)))?;
                }
                let task = match tasks.entry(p) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(tokio::task::block_in_place(|| recover(&dataset, p, &config, event_sources))?)
                    }
                };
                // Already covered by the task's checkpoint: its rows are in the dataset.
                if message.offset() < task.next[input] {
                    continue;
                }
                task.next[input] = message.offset() + 1;
                task.dirty = true;
                let payload = message.payload().unwrap_or_default();
                let rows = if input == 0 {
                    task.last_features = std::time::Instant::now();
                    match crate::log::ServedLog::decode(payload.to_vec(), task.state.layouts()).map_err(|e| e.to_string()).and_then(|log| {
                        crate::rows::validate(&log).map_err(|e| e.to_string()).map(|()| log)
                    }) {
                        Ok(log) if held_in_topic => task.state.add_features(log.with_offset(message.offset())),
                        Ok(log) => task.state.add_features(log),
                        Err(reason) => {
                            tracing::debug!(%reason, "bad feature log");
                            dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, "bad_feature_log", &reason, &metrics);
                            task.state.advance()
                        }
                    }
                } else if direct {
                    task.last_events = std::time::Instant::now();
                    let decoded = decode_event(&config, message.topic(), payload);
                    match decoded {
                        Ok(e) if murmur2_partition(e.request_id.as_bytes(), partitions) == p => {
                            match in_future(&task.state, e.time_us, &config) {
                                // Its time is no progress of its partition either.
                                Some(detail) => {
                                    dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, "event_time_in_future", &detail, &metrics);
                                    task.state.advance()
                                }
                                None => {
                                    let time_us = e.time_us;
                                    let mut rows = if in_sample(&config, &e) {
                                        task.state.add_event(e)
                                    } else {
                                        metrics.events_not_sampled.inc();
                                        task.state.advance()
                                    };
                                    // After the event: progress up to its time must not make it late.
                                    rows.extend(task.state.source_progress(p, time_us));
                                    rows
                                }
                            }
                        }
                        Ok(e) => {
                            if task.misplaced == 0 {
                                tracing::error!(
                                    task = %task.name,
                                    request_id = %e.request_id,
                                    expected_partition = murmur2_partition(e.request_id.as_bytes(), partitions),
                                    "an event is not in the partition of its request's feature logs, so it cannot join here: it goes to the dead-letter topic as not_co_partitioned. Apps must key events by request id with the murmur2 partitioner (librdkafka clients: partitioner = murmur2_random), or set input.events-partitioning = \"any\""
                                );
                            }
                            task.misplaced += 1;
                            dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, "not_co_partitioned", "", &metrics);
                            task.state.advance()
                        }
                        Err(err) => {
                            dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, err.reason(), &err.to_string(), &metrics);
                            task.state.advance()
                        }
                    }
                } else if message.key().is_none() && has_header(&message, EVENTS_HEADER) {
                    match RoutedEvents::decode(payload) {
                        Ok(batch) => {
                            let mut rows = Vec::new();
                            for e in batch.events {
                                let time_us = e.event_time.as_ref().map(event::saturating_us);
                                if let Some(detail) = time_us.and_then(|t| in_future(&task.state, t, &config)) {
                                    // The event as the router passed it on (a protobuf Impression), and the batch it came in.
                                    let source = format!("{}/{}/{} (routed)", message.topic(), message.partition(), message.offset());
                                    let payload = e.encode_to_vec();
                                    dead_letter_bytes(&dead_letters, &config.input.dead_letter_topic, (Some(e.request_id.as_bytes()), &payload), &source, "event_time_in_future", &detail, &metrics);
                                    continue;
                                }
                                match event::from_impression(e) {
                                    Ok(e) => rows.extend(task.state.add_event(e)),
                                    // The router sends only events it decoded and checked.
                                    Err(err) => tracing::warn!(%err, "a routed event is invalid"),
                                }
                            }
                            rows
                        }
                        Err(_) => {
                            dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, "bad_routed_events", "", &metrics);
                            task.state.advance()
                        }
                    }
                } else if message.key().is_none() && has_header(&message, PROGRESS_HEADER) {
                    match RouterProgress::decode(payload) {
                        Ok(progress) => {
                            let mut rows = Vec::new();
                            for (source, up_to_us) in progress.sources {
                                rows.extend(task.state.source_progress(source, up_to_us));
                            }
                            rows
                        }
                        Err(_) => {
                            dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, "bad_router_progress", "", &metrics);
                            task.state.advance()
                        }
                    }
                } else {
                    match event::from_protobuf(payload) {
                        Ok(e) => match in_future(&task.state, e.time_us, &config) {
                            Some(detail) => {
                                dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, "event_time_in_future", &detail, &metrics);
                                task.state.advance()
                            }
                            None => task.state.add_event(e),
                        },
                        Err(err) => {
                            dead_letter(&dead_letters, &config.input.dead_letter_topic, &message, err.reason(), &err.to_string(), &metrics);
                            task.state.advance()
                        }
                    }
                };
                task.rows.extend(rows);
                let next = task.next;
                let unread = |input: Input| {
                    let topic = [&features_topic, &events_input][input as usize];
                    has_unread(consumer.context(), topic, p, position(consumer.position().ok().as_ref(), topic, p, next[input as usize]))
                };
                let changes = task.alignment.decide(&task.state.input_times(), max_ahead_us, features_wait_us, unread);
                crate::align::apply(&consumer, [&features_topic, &events_input], p, &changes);
                if (task.rows.len() >= config.output.flush_rows || task.rows.bytes() >= config.output.flush_bytes)
                    && !tokio::task::block_in_place(|| flush(&dataset, task, partitioning, completeness_lag, &metrics, &dead_letters))?
                {
                    tasks.remove(&p);
                    if let Some(task) = tokio::task::block_in_place(|| {
                        follow_fence(&consumer, &dataset, p, &config, event_sources, [&features_topic, &events_input])
                    })? {
                        tasks.insert(p, task);
                    }
                }
            }
        }
    }
}

/// The partitions of `topic` assigned to this member.
/// How often a running joiner asks the brokers whether the feature-log topic gained partitions.
const PARTITIONS_CHECK: Duration = Duration::from_secs(10);

/// Stops the joiner when the feature-log topic has more partitions than it started with
/// (`partitions`, the dataset's count): from then on a sidecar puts a request's records where
/// no task has its events (docs/JOINER.md, "Partition counts"). `seen` is a partition a
/// record came from, when that is what raised the question. A broker that does not answer is
/// no answer: the next check asks again.
fn check_partitions<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
    topic: &str,
    partitions: i32,
    seen: Option<i32>,
) -> Result<(), JoinError> {
    let now = partitions_now(consumer, topic);
    let found = now
        .into_iter()
        .chain(seen.map(|p| p.saturating_add(1)))
        .max()
        .unwrap_or(partitions);
    if found > partitions {
        return Err(JoinError::PartitionsChanged {
            topic: topic.to_owned(),
            recorded: partitions,
            found,
        });
    }
    Ok(())
}

/// `topic`'s partition count as the brokers see it now, if they answer within 3 s: the join
/// loop waits for the answer, and during a broker outage a longer wait on every check would
/// hold up its commits for nothing.
fn partitions_now<C: ConsumerContext>(consumer: &StreamConsumer<C>, topic: &str) -> Option<i32> {
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(3))
        .ok()
        .and_then(|m| {
            m.topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
                .and_then(|t| i32::try_from(t.partitions().len()).ok())
        })
}

fn assigned_partitions<C: ConsumerContext>(consumer: &StreamConsumer<C>, topic: &str) -> Vec<i32> {
    consumer.assignment().map_or_else(
        |_| Vec::new(),
        |a| {
            a.elements_for_topic(topic)
                .iter()
                .map(|e| e.partition())
                .collect()
        },
    )
}

fn has_header(message: &rdkafka::message::BorrowedMessage<'_>, key: &str) -> bool {
    use rdkafka::message::Headers;
    message
        .headers()
        .is_some_and(|h| h.iter().any(|h| h.key == key))
}

/// Kafka's committed offsets are for lag monitoring only; the checkpoints are the truth. They
/// never run ahead of a checkpoint: only committed positions are written.
fn commit_monitoring(
    consumer: &StreamConsumer<JoinContext>,
    tasks: &HashMap<i32, Task>,
    features_topic: &str,
    events_input: &str,
) {
    let mut tpl = TopicPartitionList::new();
    for (p, task) in tasks {
        if task.dirty {
            continue;
        }
        for (topic, next) in [(features_topic, task.next[0]), (events_input, task.next[1])] {
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
const MONITORING_COMMIT_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;
    use featurelog_kafka::admin::TopicRetention;

    #[test]
    fn held_logs_stay_in_the_topic_only_when_its_retention_covers_a_restore() {
        let hour = Duration::from_secs(3600);
        let keeps = |days: u64| TopicRetention {
            retention: Some(Duration::from_secs(days * 24 * 3600)),
            retention_bytes: None,
            compacted: false,
            deletes: true,
        };
        let unknown = || {
            Err(featurelog_kafka::KafkaError::DescribeTopic {
                topic: "f".into(),
                reason: "not supported".into(),
            })
        };
        let choose = |mode, r| choose_held_logs(mode, "f", r, 26 * hour);
        assert!(choose(HeldLogs::Auto, Ok(keeps(7))).unwrap());
        assert!(choose(HeldLogs::Topic, Ok(keeps(7))).unwrap());
        assert!(!choose(HeldLogs::StateFiles, Ok(keeps(7))).unwrap());
        // A day of retention is less than the 26 hours a restore may need.
        assert!(!choose(HeldLogs::Auto, Ok(keeps(1))).unwrap());
        assert!(!choose(HeldLogs::Auto, unknown()).unwrap());
        let refused = choose(HeldLogs::Topic, Ok(keeps(1)))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("retention.ms >= 93600000") && refused.contains("state-files"),
            "{refused}"
        );
        assert!(choose(HeldLogs::Topic, unknown()).is_err());
    }

    #[test]
    fn static_member_ids_are_legal_and_change_with_the_topics_read() {
        let a = static_member_id("joiner-0", &["f", "r"]);
        assert!(a.starts_with("joiner-0-"), "{a}");
        assert_eq!(a, static_member_id("joiner-0", &["f", "r"]));
        assert_ne!(a, static_member_id("joiner-0", &["f", "e"]));
        assert_ne!(a, static_member_id("joiner-0", &["fr"]));
        let odd = static_member_id("pod 3/ü", &["f"]);
        assert!(
            odd.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
            "{odd}"
        );
    }

    #[tokio::test]
    async fn a_router_that_panics_stops_the_joiner_with_an_error() {
        let panicked = tokio::spawn(async { panic!("poison record") }).await;
        let err = router_outcome(panicked).unwrap_err();
        assert!(
            matches!(&err, JoinError::Panicked { stage: "router", message } if message == "poison record"),
            "{err}"
        );
        assert!(router_outcome(Ok(Ok(()))).is_ok());
    }

    fn fenced() -> JoinError {
        JoinError::Fenced {
            what: "join consumer",
            reason: "Static consumer fenced by other consumer with same group.instance.id".into(),
        }
    }

    #[tokio::test]
    async fn a_stage_fenced_after_an_outage_starts_again_and_runs_on() {
        let metrics = JoinMetrics::new();
        let mut runs = 0;
        let outcome = restarting_after_fences(&metrics, || {
            runs += 1;
            let result = if runs <= FENCES_ALLOWED {
                Err(fenced())
            } else {
                Ok(())
            };
            async move { result }
        })
        .await;
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(runs, FENCES_ALLOWED + 1);
        assert!(
            metrics.render().contains(&format!(
                "featurelog_join_stage_restarts_total {FENCES_ALLOWED}"
            )),
            "{}",
            metrics.render()
        );
    }

    #[tokio::test]
    async fn a_stage_fenced_again_and_again_stops_the_joiner_with_what_to_do() {
        let metrics = JoinMetrics::new();
        let mut runs = 0;
        let outcome = restarting_after_fences(&metrics, || {
            runs += 1;
            async { Err(fenced()) }
        })
        .await;
        let err = outcome.unwrap_err();
        assert!(matches!(err, JoinError::Fatal { .. }), "{err}");
        assert_eq!(runs, FENCES_ALLOWED + 1);
        let text = err.to_string();
        assert!(
            text.contains("another live process of this group runs with the same `instance`")
                && text.contains("4 times within 600 s"),
            "{text}"
        );
        // Any other error ends the stage at once.
        let mut runs = 0;
        let outcome = restarting_after_fences(&metrics, || {
            runs += 1;
            async { Err(JoinError::NoTopic("features".into())) }
        })
        .await;
        assert!(matches!(outcome, Err(JoinError::NoTopic(_))));
        assert_eq!(runs, 1);
    }

    #[test]
    fn the_router_partitions_as_kafka_s_murmur2_does() {
        // From org.apache.kafka.common.utils.Utils.murmur2 (kafka-clients 4.1.1), through
        // toPositive, modulo 4 and 7 partitions.
        let want = [
            ("a", 0, 5),
            ("ab", 2, 0),
            ("abc", 3, 4),
            ("abcd", 0, 5),
            ("req-7", 0, 4),
            ("21", 0, 3),
            ("a-little-bit-long-string", 0, 1),
            ("request-0123456789abcdef", 3, 2),
        ];
        for (key, four, seven) in want {
            assert_eq!(murmur2_partition(key.as_bytes(), 4), four, "{key:?} of 4");
            assert_eq!(murmur2_partition(key.as_bytes(), 7), seven, "{key:?} of 7");
        }
    }

    #[test]
    fn a_batch_of_routed_events_decodes_to_the_same_events_in_order() {
        let events: Vec<Event> = (0..3)
            .map(|i| Event {
                request_id: format!("r{i}"),
                item_id: format!("item-{i}"),
                time_us: 1_764_439_200_000_000 + i,
                kind: if i == 1 {
                    EventKind::Click
                } else {
                    EventKind::Other(format!("kind {i}"))
                },
                labels: [("price".to_string(), 1.5 * i as f64)]
                    .into_iter()
                    .collect(),
                // The router carries the id the app gave, for the task to drop retries.
                event_id: (i != 2).then(|| format!("ev-{i}")),
            })
            .collect();
        let mut buf = Vec::new();
        for e in &events {
            prost::encoding::message::encode(1, &to_impression(e), &mut buf);
        }
        let batch = RoutedEvents::decode(buf.as_slice()).unwrap();
        let back: Vec<Event> = batch
            .events
            .into_iter()
            .map(|m| event::from_impression(m).unwrap())
            .collect();
        assert_eq!(back, events);
    }
}
