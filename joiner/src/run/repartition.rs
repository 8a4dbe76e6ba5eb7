//! The repartition topic's records, written by the router and read by the join tasks: batches
//! of routed events, the router's progress, and Kafka's murmur2 partitioner that says which
//! partition a request's events go to. Its records are sent in the router's transactions.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use featurelog_schemas::featurelog::v1::{EventType, Impression};
use rdkafka::Message as _;
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord};

use super::error::{JoinError, OtherDataset, client};
use crate::event::{Event, EventKind};
use crate::sink::Dataset;

/// An app event as the router passes it on.
pub(super) fn to_impression(e: Event) -> Impression {
    let (event_type, event_name) = match e.kind {
        EventKind::Impression => (EventType::Impression, String::new()),
        EventKind::Click => (EventType::Click, String::new()),
        EventKind::Conversion => (EventType::Conversion, String::new()),
        EventKind::Other(name) => (EventType::Other, name),
    };
    Impression {
        request_id: e.request_id,
        item_id: e.item_id,
        event_time: Some(prost_types::Timestamp {
            seconds: e.time_us.div_euclid(1_000_000),
            nanos: (e.time_us.rem_euclid(1_000_000) * 1000) as i32,
        }),
        event_type: event_type as i32,
        event_name,
        labels: e.labels.into_iter().collect(),
        event_id: e.event_id.unwrap_or_default(),
    }
}

/// What the router reports of its progress, in every partition of the repartition topic after
/// the events of each transaction that changed it (docs/JOINER.md, "Watermarks"): by events
/// partition, the event time up to which its events have been routed. A record without a key
/// and with the `featurelog-progress` header.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RouterProgress {
    #[prost(btree_map = "int32, int64", tag = "1")]
    pub(super) sources: BTreeMap<i32, i64>,
}

pub(super) const PROGRESS_HEADER: &str = "featurelog-progress";

/// Routed events in one repartition record: the router packs the events of one transaction
/// that go to the same partition together, because librdkafka's work per message (on the
/// router's produce and on the join task's consume) cost more than the join itself did for an
/// event. A record without a key and with the `featurelog-events` header; its events are in the
/// order they were routed.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RoutedEvents {
    #[prost(message, repeated, tag = "1")]
    pub(super) events: Vec<Impression>,
}

pub(super) const EVENTS_HEADER: &str = "featurelog-events";

/// The header that marks every record of the repartition topic with the id of the dataset it
/// was routed for ([`crate::sink::Dataset::recorded_id`]). A group's repartition topic and
/// its router's offsets serve one dataset: start-up (`oldest_marks.rs`) and a task that finds
/// another dataset's records (the group reused for a new `output.path`) refuse them instead of
/// joining against that dataset's events and progress.
pub(super) const DATASET_HEADER: &str = "featurelog-dataset";

/// Where the router sends: the repartition topic, for one dataset.
pub(super) struct RepartitionTopic {
    pub(super) name: String,
    /// The dataset's id, in every record's [`DATASET_HEADER`].
    pub(super) dataset: String,
}

impl RepartitionTopic {
    /// The headers of a record of kind `kind` ([`EVENTS_HEADER`] or [`PROGRESS_HEADER`]).
    pub(super) fn headers(&self, kind: &'static str) -> OwnedHeaders {
        OwnedHeaders::new_with_capacity(2)
            .insert(Header {
                key: kind,
                value: Some("1"),
            })
            .insert(Header {
                key: DATASET_HEADER,
                value: Some(self.dataset.as_str()),
            })
    }
}

/// A batch is sent when it holds this many events or bytes (well under the topic's default
/// 1 MB message limit), and in any case before a transaction commits.
pub(super) const BATCH_EVENTS: usize = 1000;
pub(super) const BATCH_BYTES: usize = 256 * 1024;

/// Kafka's murmur2 partitioner (the Java client's default for keyed records, and librdkafka's
/// `murmur2_random` for non-empty keys): the partition of the feature logs of a request id.
/// The router must compute it itself to put the events of several requests in one record.
pub fn murmur2_partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions.max(1) as u32) as i32
}

/// Kafka's murmur2 hash (`Utils.murmur2` of the Java client).
pub(super) fn murmur2(key: &[u8]) -> u32 {
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
pub(super) struct Batches {
    open: HashMap<i32, (Vec<u8>, usize)>,
}

impl Batches {
    /// Adds an event for `partition`; sends the batch when it is full.
    pub(super) fn add(
        &mut self,
        producer: &BaseProducer,
        to: &RepartitionTopic,
        partition: i32,
        event: &Impression,
    ) -> Result<(), JoinError> {
        let (buf, n) = self.open.entry(partition).or_default();
        // A repeated message field is its elements, each tagged and length-delimited.
        prost::encoding::message::encode(1, event, buf);
        *n += 1;
        if *n >= BATCH_EVENTS || buf.len() >= BATCH_BYTES {
            let (buf, _) = self.open.remove(&partition).unwrap_or_default();
            send_batch(producer, to, partition, &buf)?;
        }
        Ok(())
    }

    /// Sends every open batch.
    pub(super) fn flush(
        &mut self,
        producer: &BaseProducer,
        to: &RepartitionTopic,
    ) -> Result<(), JoinError> {
        for (partition, (buf, _)) in self.open.drain() {
            send_batch(producer, to, partition, &buf)?;
        }
        Ok(())
    }
}

pub(super) fn send_batch(
    producer: &BaseProducer,
    to: &RepartitionTopic,
    partition: i32,
    buf: &[u8],
) -> Result<(), JoinError> {
    let record = BaseRecord::<str, [u8]>::to(&to.name)
        .partition(partition)
        .payload(buf)
        .headers(to.headers(EVENTS_HEADER));
    send_waiting(producer, record, "routing events")?;
    // Serves the delivery reports of the batches sent so far: one a batch, so the router
    // need not poll its producer for every event it reads.
    producer.poll(Duration::ZERO);
    Ok(())
}

/// Sends a record with the router's transactional producer, waiting while its queue is full
/// (the transaction must hold every record, so none may be dropped).
pub(super) fn send_waiting(
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

/// The number under which the router reports the progress of partition `partition` of the
/// `index`-th events topic (`input.events-topic`): the partition itself for the first topic,
/// as before there could be several, so that checkpoints of one topic read the same.
/// Config validation keeps `index` below 64; Kafka topics have far fewer than 2^20 partitions.
pub(super) fn source_id(index: usize, partition: i32) -> i32 {
    ((index as i32) << 20) | partition
}

/// Refuses `message`, a record of the repartition topic, when it is marked for a dataset other
/// than `expected`. A record without the mark was routed before records had one, under the
/// same rule that a group serves one dataset.
pub(super) fn same_dataset(
    message: &rdkafka::message::BorrowedMessage<'_>,
    expected: &str,
    group: &str,
    dataset: &Dataset,
) -> Result<(), JoinError> {
    match header_value(message, DATASET_HEADER) {
        Some(id) if id != expected.as_bytes() => {
            Err(JoinError::OtherDataset(Box::new(OtherDataset {
                group: group.to_owned(),
                topic: message.topic().to_owned(),
                partition: message.partition(),
                offset: message.offset(),
                found: String::from_utf8_lossy(id).into_owned(),
                path: dataset.root().display().to_string(),
                expected: expected.to_owned(),
            })))
        }
        _ => Ok(()),
    }
}

/// Whether `message` has a header `key`.
pub(super) fn has_header(message: &rdkafka::message::BorrowedMessage<'_>, key: &str) -> bool {
    header(message, key).is_some()
}

/// The value of `message`'s header `key`, when it has one with a value.
pub(super) fn header_value<'a>(
    message: &'a rdkafka::message::BorrowedMessage<'_>,
    key: &str,
) -> Option<&'a [u8]> {
    header(message, key)?.value
}

/// `message`'s first header `key`.
fn header<'a>(
    message: &'a rdkafka::message::BorrowedMessage<'_>,
    key: &str,
) -> Option<rdkafka::message::Header<'a, &'a [u8]>> {
    use rdkafka::message::Headers;
    message.headers()?.iter().find(|h| h.key == key)
}
