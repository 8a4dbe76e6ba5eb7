//! Creating topics and waiting until every partition has a leader, so that a caller can produce
//! right away without racing the broker's metadata propagation.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

use crate::{KafkaConfig, KafkaError};

/// A plain client of any kind for metadata and admin calls.
fn client<T: rdkafka::config::FromClientConfig>(kafka: &KafkaConfig) -> Result<T, KafkaError> {
    kafka
        .client_config(&[])
        .create()
        .map_err(|source| KafkaError::Client {
            bootstrap: kafka.bootstrap_servers.clone(),
            source,
        })
}

/// Creates `topic` with `partitions` partitions (replication factor `replication`) unless it
/// exists, then waits up to `timeout` until every partition has a leader.
pub async fn ensure_topic(
    kafka: &KafkaConfig,
    topic: &str,
    partitions: i32,
    replication: i32,
    timeout: Duration,
) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = client(kafka)?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let created = admin.create_topics([&new_topic], &options).await;
    match created {
        Ok(results) => {
            for result in results {
                match result {
                    Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((_, code)) => {
                        return Err(KafkaError::CreateTopic {
                            topic: topic.to_owned(),
                            partitions,
                            reason: code.to_string(),
                        });
                    }
                }
            }
        }
        Err(err) => {
            return Err(KafkaError::TopicNotReady {
                topic: topic.to_owned(),
                bootstrap: kafka.bootstrap_servers.clone(),
                waited: timeout,
                last_error: err.to_string(),
            });
        }
    }
    wait_for_leaders(kafka, topic, partitions, timeout).await
}

/// Waits until the broker reports `partitions` partitions of `topic`, each with a leader.
pub async fn wait_for_leaders(
    kafka: &KafkaConfig,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<(), KafkaError> {
    let consumer: BaseConsumer = client(kafka)?;
    let topic_name = topic.to_owned();
    let started = Instant::now();
    // Metadata calls block; keep them off the async worker threads.
    let outcome = tokio::task::spawn_blocking(move || {
        let mut last_error = String::from("no metadata yet");
        while started.elapsed() < timeout {
            match consumer.fetch_metadata(Some(&topic_name), Duration::from_secs(2)) {
                Ok(metadata) => {
                    let ready = metadata.topics().iter().any(|t| {
                        t.name() == topic_name
                            && t.error().is_none()
                            && t.partitions().len() == partitions as usize
                            && t.partitions().iter().all(|p| p.leader() >= 0)
                    });
                    if ready {
                        return Ok(());
                    }
                    last_error = "partitions have no leader yet".into();
                }
                Err(err) => last_error = err.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(last_error)
    })
    .await?;
    outcome.map_err(|last_error| KafkaError::TopicNotReady {
        topic: topic.to_owned(),
        bootstrap: kafka.bootstrap_servers.clone(),
        waited: timeout,
        last_error,
    })
}

/// The number of partitions of `topic`, or `None` if the broker does not know it.
pub async fn partition_count(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Option<i32>, KafkaError> {
    let consumer: BaseConsumer = client(kafka)?;
    let name = topic.to_owned();
    let metadata =
        tokio::task::spawn_blocking(move || consumer.fetch_metadata(Some(&name), timeout))
            .await?
            .map_err(|e| KafkaError::TopicNotReady {
                topic: topic.to_owned(),
                bootstrap: kafka.bootstrap_servers.clone(),
                waited: timeout,
                last_error: e.to_string(),
            })?;
    Ok(metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len() as i32))
}
