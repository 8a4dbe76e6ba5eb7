//! `featurelog inspect`: reads one of featurelog's Kafka topics (the sidecar's feature logs,
//! the apps' events, the dead letters of the sidecar and the joiner) and prints each record as
//! a line of JSON, decoded: what an operator needs to see whether the allow list logs what it
//! should, or why a call or an event was dead-lettered. The protobuf records are not readable
//! with a generic Kafka tool.
//!
//! Reading takes no consumer group and commits nothing: it can run beside the joiner on the
//! same topic without taking anything from it.

pub mod render;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use featurelog_kafka::KafkaConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Map, Value};

pub use render::Decode;

/// Why reading a topic failed.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The consumer could not be created (a bad librdkafka setting).
    #[error("creating a Kafka consumer for {brokers}: {source}")]
    Client {
        /// The bootstrap servers.
        brokers: String,
        /// librdkafka's error.
        source: Box<KafkaError>,
    },
    /// The brokers did not answer for the topic.
    #[error(
        "asking {brokers} about topic {topic}: {source} (is the broker reachable, and are security.protocol and sasl.* set with -X?)"
    )]
    Metadata {
        /// The bootstrap servers.
        brokers: String,
        /// The topic.
        topic: String,
        /// librdkafka's error.
        source: Box<KafkaError>,
    },
    /// The topic does not exist.
    #[error("topic {topic} does not exist on {brokers}")]
    UnknownTopic {
        /// The bootstrap servers.
        brokers: String,
        /// The topic.
        topic: String,
    },
    /// A partition asked for is not one of the topic's.
    #[error("topic {topic} has no partition {partition} (it has {count})")]
    NoSuchPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// How many the topic has.
        count: usize,
    },
    /// Where to start could not be found.
    #[error("finding where to start in {topic}: {source}")]
    Offsets {
        /// The topic.
        topic: String,
        /// librdkafka's error.
        source: Box<KafkaError>,
    },
    /// Reading failed.
    #[error("reading {topic}: {source}")]
    Consume {
        /// The topic.
        topic: String,
        /// librdkafka's error.
        source: Box<KafkaError>,
    },
    /// No record came for a while although the end was not reached.
    #[error(
        "reading {topic}: nothing came for {waited:?} before the end of partitions {partitions:?} (a broker down?)"
    )]
    Stalled {
        /// The topic.
        topic: String,
        /// How long nothing came.
        waited: Duration,
        /// The partitions not read to their end.
        partitions: Vec<i32>,
    },
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Where reading starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The oldest record the topic keeps.
    Beginning,
    /// After the newest: only records produced from now on (with `follow`).
    End,
    /// The last N records of each partition.
    Last(i64),
    /// The first record at or after that time.
    Time(SystemTime),
}

impl std::str::FromStr for Start {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "beginning" => Ok(Start::Beginning),
            "end" => Ok(Start::End),
            _ => {
                if let Some(n) = s.strip_prefix('-') {
                    return n
                        .parse()
                        .map(Start::Last)
                        .map_err(|_| format!("{s:?}: -N needs a number of records"));
                }
                humantime::parse_rfc3339_weak(s).map(Start::Time).map_err(|_| {
                    format!("{s:?}: expected beginning, end, -N (the last N records of each partition) or a time such as 2026-12-01T10:00:00Z")
                })
            }
        }
    }
}

/// What to read and print.
#[derive(Debug, Clone)]
pub struct Options {
    /// The topic.
    pub topic: String,
    /// Only these partitions (all when empty).
    pub partitions: Vec<i32>,
    /// Where to start.
    pub start: Start,
    /// Stop after printing this many records.
    pub limit: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end of every partition (as it
    /// was when reading started).
    pub follow: bool,
    /// Only records keyed by this request id, or whose value names it.
    pub request_id: Option<String>,
    /// Only records whose value names this model (`model_name`, or a dead letter's `model`).
    pub model: Option<String>,
    /// How values are read.
    pub decode: Decode,
    /// How long to wait for the brokers, and for a record before giving up on reaching the end.
    pub timeout: Duration,
}

/// What a read found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records read.
    pub read: u64,
    /// Records printed (that passed the filters).
    pub printed: u64,
}

/// Reads `options.topic` and writes one JSON line per record that passes the filters to `out`.
pub fn inspect(
    kafka: &KafkaConfig,
    options: &Options,
    out: &mut dyn Write,
) -> Result<Summary, InspectError> {
    let brokers = kafka.bootstrap_servers.clone();
    let topic = options.topic.as_str();
    // No group offsets are read or committed: `group.id` is only what librdkafka asks for.
    let consumer: BaseConsumer = kafka
        .client_config(&[
            ("group.id", "featurelog-inspect"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("allow.auto.create.topics", "false"),
        ])
        .create()
        .map_err(|source| InspectError::Client {
            brokers: brokers.clone(),
            source: Box::new(source),
        })?;
    let metadata = consumer
        .fetch_metadata(Some(topic), options.timeout)
        .map_err(|source| InspectError::Metadata {
            brokers: brokers.clone(),
            topic: topic.to_owned(),
            source: Box::new(source),
        })?;
    let count = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map_or(0, |t| t.partitions().len());
    if count == 0 {
        return Err(InspectError::UnknownTopic {
            brokers,
            topic: topic.to_owned(),
        });
    }
    let partitions: Vec<i32> = if options.partitions.is_empty() {
        (0..count as i32).collect()
    } else {
        options.partitions.clone()
    };
    if let Some(&p) = partitions.iter().find(|&&p| p < 0 || p as usize >= count) {
        return Err(InspectError::NoSuchPartition {
            topic: topic.to_owned(),
            partition: p,
            count,
        });
    }
    let offsets_error = |source| InspectError::Offsets {
        topic: topic.to_owned(),
        source: Box::new(source),
    };
    // Each partition's end as reading starts: without `follow`, reading stops there.
    let mut ends = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, options.timeout)
            .map_err(offsets_error)?;
        let from = match options.start {
            Start::Beginning | Start::Time(_) => low,
            Start::End => high,
            Start::Last(n) => (high - n).max(low),
        };
        ends.insert(p, high);
        assignment
            .add_partition_offset(topic, p, Offset::Offset(from))
            .map_err(offsets_error)?;
    }
    if let Start::Time(at) = options.start {
        let ms = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut times = TopicPartitionList::new();
        for &p in &partitions {
            times
                .add_partition_offset(topic, p, Offset::Offset(ms))
                .map_err(offsets_error)?;
        }
        let found = consumer
            .offsets_for_times(times, options.timeout)
            .map_err(offsets_error)?;
        for element in found.elements() {
            // No record at or after the time: start at the end.
            let offset = match element.offset() {
                Offset::Offset(o) => Offset::Offset(o),
                _ => Offset::Offset(ends[&element.partition()]),
            };
            assignment
                .set_partition_offset(topic, element.partition(), offset)
                .map_err(offsets_error)?;
        }
    }
    let mut next: BTreeMap<i32, i64> = assignment
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect();
    tracing::info!(
        topic,
        start = ?next,
        end = ?ends,
        follow = options.follow,
        "reading (offsets by partition)"
    );
    consumer
        .assign(&assignment)
        .map_err(|source| InspectError::Consume {
            topic: topic.to_owned(),
            source: Box::new(source),
        })?;

    let mut summary = Summary::default();
    let mut last_progress = Instant::now();
    loop {
        if options.limit.is_some_and(|l| summary.printed >= l) {
            return Ok(summary);
        }
        let left: Vec<i32> = ends
            .iter()
            .filter(|(p, end)| next.get(p).is_some_and(|n| n < end))
            .map(|(p, _)| *p)
            .collect();
        if !options.follow && left.is_empty() {
            return Ok(summary);
        }
        let message = match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => m,
            Some(Err(source)) => {
                return Err(InspectError::Consume {
                    topic: topic.to_owned(),
                    source: Box::new(source),
                });
            }
            None => {
                // Transaction markers take offsets no record is delivered at: the position
                // moves past them.
                if let Ok(position) = consumer.position() {
                    for e in position.elements_for_topic(topic) {
                        if let (Offset::Offset(o), Some(n)) =
                            (e.offset(), next.get_mut(&e.partition()))
                            && o > *n
                        {
                            *n = o;
                            last_progress = Instant::now();
                        }
                    }
                }
                if !options.follow && last_progress.elapsed() > options.timeout {
                    return Err(InspectError::Stalled {
                        topic: topic.to_owned(),
                        waited: options.timeout,
                        partitions: left,
                    });
                }
                continue;
            }
        };
        last_progress = Instant::now();
        let (p, offset) = (message.partition(), message.offset());
        next.insert(p, offset + 1);
        if !options.follow && offset >= ends.get(&p).copied().unwrap_or(i64::MAX) {
            continue;
        }
        summary.read += 1;
        let (schema_id, value) =
            render::read(message.payload().unwrap_or_default(), options.decode);
        if !passes(options, message.key(), &value) {
            continue;
        }
        let mut line = Map::new();
        line.insert("topic".into(), topic.into());
        line.insert("partition".into(), p.into());
        line.insert("offset".into(), offset.into());
        let at = message
            .timestamp()
            .to_millis()
            .and_then(|ms| u64::try_from(ms).ok());
        line.insert(
            "timestamp".into(),
            at.map_or(Value::Null, |ms| {
                let at = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
                humantime::format_rfc3339_millis(at).to_string().into()
            }),
        );
        line.insert(
            "key".into(),
            message.key().map_or(Value::Null, render::bytes),
        );
        let mut headers = Map::new();
        if let Some(hs) = message.headers() {
            for h in hs.iter() {
                headers.insert(h.key.to_owned(), h.value.map_or(Value::Null, render::bytes));
            }
        }
        line.insert("headers".into(), Value::Object(headers));
        if let Some(id) = schema_id {
            line.insert("schema_id".into(), id.into());
        }
        line.insert("value".into(), value);
        serde_json::to_writer(&mut *out, &Value::Object(line)).map_err(std::io::Error::from)?;
        out.write_all(b"\n")?;
        if options.follow {
            out.flush()?;
        }
        summary.printed += 1;
    }
}

/// Whether a record passes the request-id and model filters.
fn passes(options: &Options, key: Option<&[u8]>, value: &Value) -> bool {
    let named = |field: &str, want: &str| value.get(field).and_then(Value::as_str) == Some(want);
    if let Some(id) = &options.request_id
        && key != Some(id.as_bytes())
        && !named("request_id", id)
    {
        return false;
    }
    if let Some(model) = &options.model
        && !named("model_name", model)
        && !named("model", model)
    {
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn starts_parse_as_an_operator_writes_them() {
        assert_eq!("beginning".parse(), Ok(Start::Beginning));
        assert_eq!("end".parse(), Ok(Start::End));
        assert_eq!("-10".parse(), Ok(Start::Last(10)));
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_590_400);
        assert_eq!("2025-12-01T12:00:00Z".parse(), Ok(Start::Time(at)));
        let err = "yesterday".parse::<Start>().unwrap_err();
        assert!(err.contains("-N"), "{err}");
    }

    #[test]
    fn filters_match_keys_and_the_names_in_values() {
        let options = Options {
            topic: "t".into(),
            partitions: Vec::new(),
            start: Start::Beginning,
            limit: None,
            follow: false,
            request_id: Some("req-1".into()),
            model: Some("ranker".into()),
            decode: Decode::Auto,
            timeout: Duration::from_secs(1),
        };
        let log = json!({"request_id": "req-1", "model_name": "ranker"});
        let letter = json!({"request_id": "other", "model": "ranker"});
        assert!(passes(&options, None, &log));
        assert!(passes(&options, Some(b"req-1"), &letter), "by key");
        assert!(!passes(&options, Some(b"req-2"), &letter));
        assert!(!passes(
            &options,
            Some(b"req-1"),
            &json!({"model_name": "other"})
        ));
    }
}
