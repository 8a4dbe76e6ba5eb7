//! How far a partition is read and where it ends, without asking the brokers: the consumer's
//! positions and the ends its statistics saw (see [`JoinContext`]). Idle watermarks need a
//! partition read to its end; read-ahead alignment needs to know whether one has records left.

use std::cell::OnceCell;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::consumer::JoinContext;
use super::inputs::Inputs;
use crate::align::Input;

/// Whether `next` (the next offset to read) is the end of the partition, as the consumer's
/// last statistics saw it (see [`JoinContext`]); false while they have not seen it yet.
pub(super) fn read_to_end(context: &JoinContext, topic: &str, partition: i32, next: i64) -> bool {
    end_of(context, topic, partition).is_some_and(|(low, high)| next >= high || low == high)
}

/// A partition's low and high watermarks as the consumer's last statistics saw them.
pub(super) fn end_of(context: &JoinContext, topic: &str, partition: i32) -> Option<(i64, i64)> {
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
pub(super) fn position(
    positions: Option<&TopicPartitionList>,
    topic: &str,
    partition: i32,
    next: i64,
) -> i64 {
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
pub(super) fn has_unread(context: &JoinContext, topic: &str, partition: i32, next: i64) -> bool {
    end_of(context, topic, partition).is_none_or(|(low, high)| next < high && low < high)
}

/// The wall clock in microseconds since the epoch, for idle watermarks.
pub(super) fn wall_clock_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The join consumer's read positions, asked for once, when first needed: a tick asks once
/// for every task, a record at most once, and only when read-ahead alignment needs them.
/// Nothing is consumed while one is in use, so the positions cannot move meanwhile.
pub(super) struct Positions<'a> {
    consumer: &'a BaseConsumer<JoinContext>,
    list: OnceCell<Option<TopicPartitionList>>,
}

impl<'a> Positions<'a> {
    pub(super) fn new(consumer: &'a BaseConsumer<JoinContext>) -> Self {
        Self {
            consumer,
            list: OnceCell::new(),
        }
    }

    /// How far partition `partition` of `topic` is read, `next` being the task's next offset
    /// (see [`position`]).
    fn read_to(&self, topic: &str, partition: i32, next: i64) -> i64 {
        let list = self.list.get_or_init(|| self.consumer.position().ok());
        position(list.as_ref(), topic, partition, next)
    }

    /// Whether the partition is read to its end (see [`read_to_end`]): only then may it be
    /// idle; one that is behind is not.
    pub(super) fn read_to_end(&self, topic: &str, partition: i32, next: i64) -> bool {
        let at = self.read_to(topic, partition, next);
        read_to_end(self.consumer.context(), topic, partition, at)
    }

    /// Whether `input` of the task of partition `partition`, which reads `topics` and takes
    /// `next` from them, may have records left to read (see [`has_unread`]).
    pub(super) fn unread(
        &self,
        topics: &Inputs<String>,
        partition: i32,
        next: Inputs<i64>,
        input: Input,
    ) -> bool {
        let topic = topics.get(input);
        let at = self.read_to(topic, partition, *next.get(input));
        has_unread(self.consumer.context(), topic, partition, at)
    }
}
