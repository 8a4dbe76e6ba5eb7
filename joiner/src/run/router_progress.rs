//! The router's progress by events partition, which it reports to every join task: the newest
//! event time it routed from the partition, or the wall clock once the partition is read to
//! its end and quiet (docs/JOINER.md, "Watermarks").

use std::collections::BTreeMap;

use crate::state::HashMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::consumer::JoinContext;
use super::reading::{read_to_end, wall_clock_us};
use super::repartition::source_id;

/// The router's view of one assigned events partition.
pub(super) struct Source {
    /// The newest event time routed from it (`i64::MIN`: none yet).
    pub(super) routed_us: i64,
    /// When a record of it was last read, or when it was assigned.
    pub(super) last_seen: std::time::Instant,
    /// Where reading starts when nothing has been read yet (its committed offset), looked up
    /// once: librdkafka knows no position before the first message.
    start: Option<i64>,
}

impl Source {
    pub(super) fn new() -> Self {
        Self {
            routed_us: i64::MIN,
            last_seen: std::time::Instant::now(),
            start: None,
        }
    }
}

/// The progress to report for each assigned events partition: what was routed, or the wall
/// clock for a partition read to its end that has been quiet for `idle`. A partition that is
/// merely behind never reports idle, however long the router takes (a transaction coordinator
/// loading, a backlog on another partition): that is what keeps its events' windows open.
pub(super) fn router_progress(
    consumer: &BaseConsumer<JoinContext>,
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

/// The committed offset of a partition the router has read nothing of (its low watermark when
/// none is committed, as `auto.offset.reset = earliest` reads it).
pub(super) fn start_offset(
    consumer: &BaseConsumer<JoinContext>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .ok()?;
    match committed.find_partition(topic, partition)?.offset() {
        Offset::Offset(o) => Some(o),
        _ => {
            let (low, _) = consumer
                .fetch_watermarks(topic, partition, Duration::from_secs(10))
                .ok()?;
            Some(low)
        }
    }
}
