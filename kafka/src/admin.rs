//! Creating topics and waiting until every partition has a leader, so that a caller can produce
//! right away without racing the broker's metadata propagation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::types::RDKafkaErrorCode;

use crate::{KafkaConfig, KafkaError};

/// Keeps the last error librdkafka reported for the client as a whole. A failed TLS handshake
/// or a refused SASL login never fails a request by itself: requests only time out. This is
/// what tells the operator why.
#[derive(Clone, Default)]
struct LastError(Arc<Mutex<Option<String>>>);

impl LastError {
    /// `fallback` (what the request said), with the client's own last error if it had one.
    fn explain(&self, fallback: String) -> String {
        match self.0.lock().ok().and_then(|e| e.clone()) {
            Some(client) => format!("{fallback}; the client's last error: {client}"),
            None => fallback,
        }
    }
}

impl ClientContext for LastError {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "Kafka client error");
        if let Ok(mut last) = self.0.lock() {
            *last = Some(reason.to_owned());
        }
    }
}

impl ConsumerContext for LastError {}

/// A client for metadata and admin calls, and where its client-level errors go.
fn client<T: rdkafka::config::FromClientConfigAndContext<LastError>>(
    kafka: &KafkaConfig,
) -> Result<(T, LastError), KafkaError> {
    let last = LastError::default();
    let client = kafka
        .client_config(&[])
        .create_with_context(last.clone())
        .map_err(|source| KafkaError::Client {
            bootstrap: kafka.bootstrap_servers.clone(),
            source,
        })?;
    Ok((client, last))
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
    let (admin, last): (AdminClient<LastError>, _) = client(kafka)?;
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
            let fallback = last.explain(err.to_string());
            return Err(KafkaError::TopicNotReady {
                topic: topic.to_owned(),
                bootstrap: kafka.bootstrap_servers.clone(),
                waited: timeout,
                last_error: diagnose(kafka, fallback).await,
            });
        }
    }
    wait_for_leaders(kafka, topic, partitions, timeout).await
}

/// Why a client cannot use the cluster: a metadata request from a fresh consumer whose events
/// are served (the admin client's are not), so that a handshake or login failure is seen.
async fn diagnose(kafka: &KafkaConfig, fallback: String) -> String {
    let Ok((consumer, last)) = client::<BaseConsumer<LastError>>(kafka) else {
        return fallback;
    };
    let probe = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if consumer
                .fetch_metadata(None, Duration::from_secs(1))
                .is_ok()
            {
                return None;
            }
            let _ = consumer.poll(Duration::from_millis(100));
            if let Ok(Some(error)) = last.0.lock().map(|e| e.clone()) {
                return Some(error);
            }
        }
        None
    })
    .await;
    match probe {
        Ok(Some(error)) => format!("{fallback}; the client's last error: {error}"),
        _ => fallback,
    }
}

/// Waits until the broker reports `partitions` partitions of `topic`, each with a leader.
pub async fn wait_for_leaders(
    kafka: &KafkaConfig,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<(), KafkaError> {
    let (consumer, last): (BaseConsumer<LastError>, _) = client(kafka)?;
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
            // Serves the client's events, so that a TLS or SASL failure reaches `last`.
            let _ = consumer.poll(Duration::from_millis(100));
        }
        Err(last_error)
    })
    .await?;
    outcome.map_err(|last_error| KafkaError::TopicNotReady {
        topic: topic.to_owned(),
        bootstrap: kafka.bootstrap_servers.clone(),
        waited: timeout,
        last_error: last.explain(last_error),
    })
}

/// The number of partitions of `topic`, or `None` if the broker does not know it.
pub async fn partition_count(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Option<i32>, KafkaError> {
    let (consumer, last): (BaseConsumer<LastError>, _) = client(kafka)?;
    let name = topic.to_owned();
    let fetched =
        tokio::task::spawn_blocking(move || consumer.fetch_metadata(Some(&name), timeout)).await?;
    let metadata = match fetched {
        Ok(metadata) => metadata,
        Err(e) => {
            let fallback = last.explain(e.to_string());
            return Err(KafkaError::TopicNotReady {
                topic: topic.to_owned(),
                bootstrap: kafka.bootstrap_servers.clone(),
                waited: timeout,
                last_error: diagnose(kafka, fallback).await,
            });
        }
    };
    Ok(metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len() as i32))
}

/// How long a topic keeps its records, from the broker's view of the topic's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRetention {
    /// `retention.ms`; `None` when records are kept for ever (-1).
    pub retention: Option<Duration>,
    /// `retention.bytes` per partition; `None` when unbounded (-1).
    pub retention_bytes: Option<u64>,
    /// `cleanup.policy` includes `compact`: records may disappear when a later one has the
    /// same key.
    pub compacted: bool,
    /// `cleanup.policy` includes `delete`: `retention` and `retention_bytes` apply.
    pub deletes: bool,
}

impl TopicRetention {
    /// Whether every record stays readable for at least `needed` after it was written.
    pub fn keeps(&self, needed: Duration) -> bool {
        !self.compacted
            && (!self.deletes
                || (self.retention_bytes.is_none() && self.retention.is_none_or(|r| r >= needed)))
    }
}

impl std::fmt::Display for TopicRetention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let policy = match (self.deletes, self.compacted) {
            (true, true) => "compact,delete",
            (false, true) => "compact",
            _ => "delete",
        };
        write!(f, "cleanup.policy={policy}")?;
        if self.deletes {
            match self.retention {
                Some(r) => write!(f, ", retention.ms={}", r.as_millis())?,
                None => write!(f, ", retention.ms=-1")?,
            }
            match self.retention_bytes {
                Some(b) => write!(f, ", retention.bytes={b}")?,
                None => write!(f, ", retention.bytes=-1")?,
            }
        }
        Ok(())
    }
}

/// The configuration of `topic` as the brokers apply it (DescribeConfigs): every entry's name
/// and value. An error when the cluster does not answer the request (librdkafka's mock cluster
/// does not implement it).
async fn topic_configs(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<rdkafka::admin::ConfigResource, KafkaError> {
    use rdkafka::admin::ResourceSpecifier;
    let (admin, last): (AdminClient<LastError>, _) = client(kafka)?;
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let described = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &options)
        .await;
    match described {
        Ok(mut results) if !results.is_empty() => results
            .swap_remove(0)
            .map_err(|code| describe_failed(topic, code.to_string())),
        Ok(_) => Err(describe_failed(topic, "no answer for the topic".into())),
        Err(err) => Err(describe_failed(topic, last.explain(err.to_string()))),
    }
}

fn describe_failed(topic: &str, reason: String) -> KafkaError {
    KafkaError::DescribeTopic {
        topic: topic.to_owned(),
        reason,
    }
}

/// A numeric entry of a topic's configuration; `None` when absent or negative (unbounded).
fn config_number(
    resource: &rdkafka::admin::ConfigResource,
    topic: &str,
    name: &str,
) -> Result<Option<i64>, KafkaError> {
    match resource.get(name).and_then(|e| e.value.as_deref()) {
        None => Ok(None),
        Some(v) => v
            .parse::<i64>()
            .map(|n| (n >= 0).then_some(n))
            .map_err(|_| describe_failed(topic, format!("{name} = {v:?} is not a number"))),
    }
}

/// The retention settings of `topic` (DescribeConfigs). An error when the cluster does not
/// answer the request (librdkafka's mock cluster does not implement it).
pub async fn topic_retention(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<TopicRetention, KafkaError> {
    let resource = topic_configs(kafka, topic, timeout).await?;
    let number = |name: &str| config_number(&resource, topic, name);
    let policy = resource
        .get("cleanup.policy")
        .and_then(|e| e.value.clone())
        .unwrap_or_else(|| "delete".into());
    Ok(TopicRetention {
        retention: number("retention.ms")?.map(|ms| Duration::from_millis(ms as u64)),
        retention_bytes: number("retention.bytes")?.map(|b| b as u64),
        compacted: policy.split(',').any(|p| p.trim() == "compact"),
        deletes: policy.split(',').any(|p| p.trim() == "delete"),
    })
}

/// The largest record batch the brokers accept on `topic`: its `max.message.bytes` (the
/// broker's `message.max.bytes` unless the topic overrides it). Kafka checks it against a
/// batch as it arrives, compressed.
pub async fn topic_max_message_bytes(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<usize, KafkaError> {
    let resource = topic_configs(kafka, topic, timeout).await?;
    config_number(&resource, topic, "max.message.bytes")?
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| describe_failed(topic, "max.message.bytes is not set".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retention(policy: &str, ms: Option<u64>, bytes: Option<u64>) -> TopicRetention {
        TopicRetention {
            retention: ms.map(Duration::from_millis),
            retention_bytes: bytes,
            compacted: policy.contains("compact"),
            deletes: policy.contains("delete"),
        }
    }

    #[test]
    fn a_topic_keeps_records_only_if_no_rule_can_delete_them_sooner() {
        let hour = Duration::from_secs(3600);
        let week = 7 * 24 * 3_600_000;
        assert!(retention("delete", Some(week), None).keeps(hour));
        assert!(retention("delete", None, None).keeps(hour));
        assert!(!retention("delete", Some(1_800_000), None).keeps(hour));
        // A size bound can delete a record at any age under load.
        assert!(!retention("delete", Some(week), Some(1 << 30)).keeps(hour));
        // Compaction drops a record when a later one has the same key.
        assert!(!retention("compact", None, None).keeps(hour));
        assert!(!retention("compact,delete", Some(week), None).keeps(hour));
        assert_eq!(
            retention("delete", Some(week), Some(5)).to_string(),
            "cleanup.policy=delete, retention.ms=604800000, retention.bytes=5"
        );
    }
}
