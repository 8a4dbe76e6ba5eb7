//! Dead letters of the join stage: a record the joiner cannot use goes to
//! `input.dead-letter-topic` as it was, with its reason (`featurelog-error`), where it came from
//! (`featurelog-source`) and what was wrong (`featurelog-detail`); and the one refusal that
//! depends on the join's state, an event dated too far ahead of the watermark.

use std::time::Duration;

use rdkafka::Message as _;
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord};

use crate::config::JoinerConfig;
use crate::metrics::{JoinMetrics, Label};
use crate::reason::Reason;
use crate::state::JoinState;

/// Why an event of `time_us` is not held by `state`: dated further than
/// `join.max-event-time-ahead` ahead of its watermark (a wrong clock or unit on the app's side
/// would keep it in the state until the watermark reached it, years later). `None` when it may
/// be held, and while the watermark is not known.
pub(crate) fn in_future(state: &JoinState, time_us: i64, config: &JoinerConfig) -> Option<String> {
    let watermark = state.watermark_us();
    let ahead = i64::try_from(config.join.max_event_time_ahead.as_micros()).unwrap_or(i64::MAX);
    (watermark != i64::MIN && time_us > watermark.saturating_add(ahead)).then(|| {
        format!(
            "event time {} is more than join.max-event-time-ahead ({}) ahead of the watermark {}",
            crate::time::rfc3339_us(time_us),
            humantime::format_duration(config.join.max_event_time_ahead),
            crate::time::rfc3339_us(watermark),
        )
    })
}

/// How long a dead letter's `featurelog-detail` may be: error messages quote field names and
/// values, which an app chooses.
const MAX_DETAIL_BYTES: usize = 1024;

/// Sends `message` to the dead-letter topic with its `reason` and, when there is more to say,
/// a `detail` naming the field and what was wrong with it (`field "item_id": expected a
/// non-empty string or an integer, got [1,2]`).
pub(crate) fn dead_letter(
    producer: &BaseProducer,
    topic: &str,
    message: &rdkafka::message::BorrowedMessage<'_>,
    reason: Reason,
    detail: &str,
    metrics: &JoinMetrics,
) {
    let source = format!(
        "{}/{}/{}",
        message.topic(),
        message.partition(),
        message.offset()
    );
    let payload = message.payload().unwrap_or_default();
    dead_letter_bytes(
        producer,
        topic,
        (message.key(), payload),
        &source,
        reason,
        detail,
        metrics,
    );
}

/// [`dead_letter`] of bytes that are not a record read as such: an event of a routed batch,
/// re-encoded, with `source` saying where its batch came from.
pub(crate) fn dead_letter_bytes(
    producer: &BaseProducer,
    topic: &str,
    (key, payload): (Option<&[u8]>, &[u8]),
    source: &str,
    reason: Reason,
    detail: &str,
    metrics: &JoinMetrics,
) {
    let mut end = detail.len().min(MAX_DETAIL_BYTES);
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    let detail = &detail[..end];
    metrics
        .dead_letters
        .get_or_create(&Label {
            name: reason.as_str(),
        })
        .inc();
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "featurelog-error",
            value: Some(reason.as_str()),
        })
        .insert(Header {
            key: "featurelog-source",
            value: Some(source),
        });
    let headers = if detail.is_empty() {
        headers
    } else {
        headers.insert(Header {
            key: "featurelog-detail",
            value: Some(detail),
        })
    };
    let mut record = BaseRecord::<[u8], [u8]>::to(topic)
        .payload(payload)
        .headers(headers);
    if let Some(key) = key {
        record = record.key(key);
    }
    // A burst of bad records must not overflow the producer's queue: the record's offset is
    // committed after this, so a dead letter dropped here would be lost for good.
    let deadline = std::time::Instant::now() + DEAD_LETTER_WAIT;
    loop {
        match producer.send(record) {
            Ok(()) => {
                tracing::warn!(%source, reason = reason.as_str(), detail, "record dead-lettered");
                break;
            }
            Err((
                RdKafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                r,
            )) if std::time::Instant::now() < deadline => {
                producer.poll(Duration::from_millis(50));
                record = r;
            }
            Err((err, _)) => {
                tracing::error!(%err, %source, reason = reason.as_str(), "could not dead-letter a record");
                break;
            }
        }
    }
    producer.poll(Duration::ZERO);
}

/// How long dead-lettering a record may wait for room in its producer's queue (a broker that
/// cannot take them for this long is down, and the record's error is logged instead).
pub(crate) const DEAD_LETTER_WAIT: Duration = Duration::from_secs(30);
