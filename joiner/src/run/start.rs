//! Start-up: the topic and dataset checks that must pass before either stage runs (partition
//! counts, the events topics and layout the dataset was written with, the repartition and
//! dead-letter topics, the group's offsets), and where held feature logs are kept.

use std::sync::Arc;
use std::time::Duration;

use super::error::JoinError;
use super::group_offsets::{check_join_group, check_router_group};
use super::oldest_marks::check_oldest_marks;
use super::recover::same_partitioning;
use super::supervise::outcome;
use crate::config::{EventsPartitioning, HeldLogs, JoinerConfig, OutputFormat};
use crate::sink::Dataset;
/// What start-up found out.
#[derive(Clone)]
pub(super) struct Started {
    pub(super) partitions: i32,
    /// The sources of each task's events watermark: every partition of every events topic,
    /// or the task's own events partition when the events are co-partitioned.
    pub(super) event_sources: u32,
    pub(super) held_in_topic: bool,
    pub(super) dataset: Dataset,
    /// The dataset's id ([`Dataset::recorded_id`]), which marks its repartition records.
    pub(super) dataset_id: String,
}

/// Checks the topics and the dataset before either stage runs, creating the repartition and
/// dead-letter topics when they are missing.
pub(super) async fn start(config: &Arc<JoinerConfig>) -> Result<Started, JoinError> {
    let kafka = &config.kafka;
    let features = &config.input.features_topic;
    let partitions =
        featurelog_kafka::admin::partition_count(kafka, features, Duration::from_secs(30))
            .await?
            .ok_or_else(|| JoinError::NoTopic(features.clone()))?;
    // Every partition of every events topic is a source of the events' watermark.
    let mut events_partitions = Vec::new();
    for topic in config.input.events_topic.names() {
        let count = featurelog_kafka::admin::partition_count(kafka, topic, Duration::from_secs(30))
            .await?
            .ok_or_else(|| JoinError::NoEventsTopic(topic.clone()))?;
        events_partitions.push((topic.clone(), count));
    }
    let event_sources: i32 = events_partitions.iter().map(|(_, count)| count).sum();
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
    let dataset_id = {
        let handle = dataset.clone();
        start_up_io(move || Ok(handle.recorded_id()?)).await?
    };
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
    {
        let handle = dataset.clone();
        let recorded = start_up_io(move || Ok(handle.recorded_delta()?)).await?;
        if recorded != (config.output.format == OutputFormat::Delta) {
            return Err(JoinError::FormatChanged {
                path: dataset.root().display().to_string(),
                recorded: if recorded { "delta" } else { "parquet" },
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
    // After the partitioning check, whose error says more when the events input changed. The
    // checks only read, each in a few round trips to the brokers: asked together, they delay
    // the start by the longest one. The join group's offsets speak first when several refuse.
    let (join_group, router_group, marks) = {
        let (c, d) = (config.clone(), dataset.clone());
        let join_group = start_up_io(move || check_join_group(&c, &d, partitions));
        let (c, d, id) = (config.clone(), dataset.clone(), dataset_id.clone());
        let router_group = check_unless(direct, move || {
            check_router_group(&c, &d, &id, &events_partitions)
        });
        let (c, d, id) = (config.clone(), dataset.clone(), dataset_id.clone());
        let marks = check_unless(direct, move || check_oldest_marks(&c, &d, &id, partitions));
        tokio::join!(join_group, router_group, marks)
    };
    join_group?;
    router_group?;
    marks?;
    tracing::info!(%features, partitions, %events, event_sources, events_partitioning = ?config.input.events_partitioning, held_in_topic, %dataset_id, "joiner starting");
    Ok(Started {
        partitions,
        // A task reading its events partition directly has that one source of event time.
        event_sources: if direct {
            1
        } else {
            u32::try_from(event_sources).unwrap_or(0)
        },
        held_in_topic,
        dataset,
        dataset_id,
    })
}

/// Runs start-up's dataset requests on a blocking thread. During an object-store outage each
/// request retries for minutes: run on the task that awaits the start-up's `select!`, they
/// would make SIGTERM wait for the retries to give up.
pub(super) async fn start_up_io<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, JoinError> + Send + 'static,
) -> Result<T, JoinError> {
    outcome("start-up", tokio::task::spawn_blocking(work).await, || {
        Err(JoinError::Panicked {
            stage: "start-up",
            message: "cancelled".into(),
        })
    })
}

/// Runs `check` through [`start_up_io`], unless `skip`.
async fn check_unless(
    skip: bool,
    check: impl FnOnce() -> Result<(), JoinError> + Send + 'static,
) -> Result<(), JoinError> {
    if skip {
        return Ok(());
    }
    start_up_io(check).await
}

/// Whether checkpoints refer to held feature logs by their offsets in the feature-log topic
/// (true) or copy them into state files (false), from `join.held-logs` and the topic's
/// retention. A log read back at a restore must still be in the topic, so offsets are used
/// only when no retention rule can delete it while a restore may need it.
pub(super) async fn held_logs_in_topic(config: &JoinerConfig) -> Result<bool, JoinError> {
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

pub(super) fn choose_held_logs(
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
