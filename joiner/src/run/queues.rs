//! The join consumer's partition queues: one for each partition of each input, split from the
//! consumer's queue before it is first polled, so that each task reads its two inputs at its
//! own pace. Read-ahead alignment (crate::align) holds an input back by not reading its queue:
//! librdkafka keeps what it prefetched and stops fetching once the queue is full. Pausing the
//! partition in librdkafka instead would drop its prefetched records, to be fetched and
//! decompressed again at the resume (docs/JOINER.md, "Read-ahead alignment").
//!
//! A partition's records must all come through one queue, in order: a task skips records
//! below its next offset as already committed, so a record read late from another queue would
//! be lost. Hence every queue is split once, before any assignment, and kept for the
//! consumer's life (librdkafka keeps an application's split across rebalances and seeks);
//! partitions added to a topic later come through the consumer's own queue.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use rdkafka::consumer::base_consumer::PartitionQueue;

use super::consumer::JoinContext;
use super::error::JoinError;
use super::inputs::Inputs;

/// What the join consumer prefetches across all its queues, in KiB: librdkafka bounds each
/// queue by `queued.max.messages.kbytes`, so each gets a share (the consumer's single queue
/// was bounded at 16 MiB; docs/JOINER.md, "Resident memory").
const PREFETCH_KIB: usize = 16 * 1024;

/// The least any queue gets, in KiB: less would only make fetches smaller.
const QUEUE_MIN_KIB: usize = 256;

/// `queued.max.messages.kbytes` for a consumer with a queue for each of `partitions`
/// partitions of two inputs.
pub(super) fn queue_kbytes(partitions: i32) -> String {
    let queues = 2 * usize::try_from(partitions.max(1)).unwrap_or(1);
    (PREFETCH_KIB / queues).max(QUEUE_MIN_KIB).to_string()
}

/// Wakes the join loop when a queue it waits on gets records (librdkafka calls back when a
/// queue goes from empty to not empty).
#[derive(Default)]
pub(super) struct Wake {
    ready: Mutex<bool>,
    cond: Condvar,
}

impl Wake {
    fn notify(&self) {
        if let Ok(mut ready) = self.ready.lock() {
            *ready = true;
            self.cond.notify_one();
        }
    }

    /// Forgets earlier wake-ups: called before the queues are looked at, so that a queue that
    /// gets records after its look wakes the wait that follows.
    fn arm(&self) {
        if let Ok(mut ready) = self.ready.lock() {
            *ready = false;
        }
    }

    /// Waits until a queue gets records, at most `timeout`.
    fn wait(&self, timeout: Duration) {
        if let Ok(ready) = self.ready.lock() {
            let _ = self
                .cond
                .wait_timeout_while(ready, timeout, |ready| !*ready);
        }
    }
}

/// The queues of partitions `0..partitions` of each input.
pub(super) struct Queues {
    by_partition: Vec<Inputs<PartitionQueue<JoinContext>>>,
    wake: Arc<Wake>,
}

impl Queues {
    /// Splits the queues of `topics`' partitions `0..partitions` from `consumer`'s, which must
    /// not have been polled yet; `wake` is already set on the consumer's own queue.
    pub(super) fn split(
        consumer: &Arc<BaseConsumer<JoinContext>>,
        topics: &Inputs<String>,
        partitions: i32,
        wake: Arc<Wake>,
    ) -> Result<Self, JoinError> {
        let queue = |topic: &str, p: i32| {
            let mut queue = consumer.split_partition_queue(topic, p).ok_or_else(|| {
                JoinError::PartitionQueue {
                    topic: topic.to_owned(),
                    partition: p,
                }
            })?;
            queue.set_nonempty_callback(waker(&wake));
            Ok::<_, JoinError>(queue)
        };
        let by_partition = (0..partitions)
            .map(|p| {
                Ok(Inputs {
                    features: queue(&topics.features, p)?,
                    events: queue(&topics.events, p)?,
                })
            })
            .collect::<Result<_, JoinError>>()?;
        Ok(Self { by_partition, wake })
    }

    /// The queues of each partition, by partition.
    pub(super) fn each(&self) -> impl Iterator<Item = (i32, &Inputs<PartitionQueue<JoinContext>>)> {
        (0i32..).zip(&self.by_partition)
    }

    /// Forgets earlier wake-ups, before the queues are looked at (see [`Queues::wait`]).
    pub(super) fn arm(&self) {
        self.wake.arm();
    }

    /// Waits until a queue gets records, at most `timeout`: at once if one got records since
    /// [`Queues::arm`].
    pub(super) fn wait(&self, timeout: Duration) {
        self.wake.wait(timeout);
    }
}

/// The callback for the consumer's own queue: wakes `wake`.
pub(super) fn waker(wake: &Arc<Wake>) -> impl Fn() + Send + Sync + 'static {
    let wake = wake.clone();
    move || wake.notify()
}
