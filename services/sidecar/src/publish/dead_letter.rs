//! Dead letters of the sidecar: how an operator finds a call that could not be logged because
//! of what its caller sent (a malformed body, tensors whose shape and data disagree, a body over
//! the size limit, ...), as opposed to Kafka trouble or load, which the metrics count alone.
//!
//! A dead letter is one JSON record on `publish.dead-letter-topic`: the reason (the same as the
//! `dropped_total` label), the model, the request id the caller got back, what was wrong, and
//! sizes. It never holds the call's tensors or headers: the allow list decides what leaves the
//! pod, and a call that failed to decode is no exception. Details name tensors, datatypes,
//! shapes and byte counts, and at most one value of a tensor the allow list logs (an integer
//! out of its datatype's range).
//!
//! A client that sends nothing but bad calls would otherwise make a dead letter of each: a
//! token bucket per sidecar lets `publish.dead-letters-per-second` through and counts the rest.

use std::time::{Instant, SystemTime};

use serde::Serialize;

use crate::extract::framing::Unframe;
use crate::reason::Dropped;

/// The headers a dead letter carries, as the joiner's do, so that one reader of the topic tells
/// both apart: the reason, and where it came from (`sidecar/<instance>`).
pub const ERROR_HEADER: &str = "featurelog-error";
/// See [`ERROR_HEADER`].
pub const SOURCE_HEADER: &str = "featurelog-source";

/// How long a detail may be: error messages quote names, which a caller chooses.
const MAX_DETAIL_BYTES: usize = 1024;

/// A call that was forwarded but not logged because of what its caller sent.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// The `dropped_total` reason.
    pub reason: Dropped,
    /// What was wrong, for a person.
    pub detail: String,
    /// `grpc` or `rest`.
    pub binding: &'static str,
    /// The model the call named, when it could be read.
    pub model: String,
    /// Its version (empty when none was named or it could not be read).
    pub model_version: String,
    /// The call's own `id`, else the `x-request-id` it came with or the id the sidecar gave it
    /// (returned in the response's `x-request-id`): the id the app joins its events by.
    pub request_id: String,
    /// The request body's size as received.
    pub request_bytes: usize,
    /// When the call arrived.
    pub served_at: SystemTime,
    /// The size of the record that was refused, for a record the brokers would not take.
    pub record_bytes: Option<usize>,
    /// The largest record the topic takes, when that is why it was refused.
    pub limit_bytes: Option<usize>,
}

impl Rejected {
    /// A rejection of a call of `binding` for `reason`, the rest to be filled in.
    pub fn new(reason: Dropped, binding: &'static str, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
            binding,
            model: String::new(),
            model_version: String::new(),
            request_id: String::new(),
            request_bytes: 0,
            served_at: SystemTime::now(),
            record_bytes: None,
            limit_bytes: None,
        }
    }

    /// The same, for a record of `bytes` that was refused.
    pub fn record_bytes(mut self, bytes: usize) -> Self {
        self.record_bytes = Some(bytes);
        self
    }

    /// The same, with the limit the record was over.
    pub fn limit_bytes(mut self, bytes: usize) -> Self {
        self.limit_bytes = Some(bytes);
        self
    }

    /// The same, for `model` and `version`.
    pub fn model(mut self, model: &str, version: &str) -> Self {
        model.clone_into(&mut self.model);
        version.clone_into(&mut self.model_version);
        self
    }

    /// The same, with the call's request id, size and arrival.
    pub fn call(mut self, request_id: &str, request_bytes: usize, served_at: SystemTime) -> Self {
        request_id.clone_into(&mut self.request_id);
        self.request_bytes = request_bytes;
        self.served_at = served_at;
        self
    }

    /// The record's value: JSON, one object.
    pub fn to_json(&self, instance: &str, allow_list_version: &str) -> Vec<u8> {
        let served_at = humantime::format_rfc3339_millis(self.served_at).to_string();
        let letter = Letter {
            reason: self.reason.as_str(),
            detail: truncated(&self.detail, MAX_DETAIL_BYTES),
            binding: self.binding,
            model: &self.model,
            model_version: &self.model_version,
            request_id: &self.request_id,
            request_bytes: self.request_bytes,
            served_at: &served_at,
            sidecar: instance,
            allow_list_version,
            record_bytes: self.record_bytes,
            limit_bytes: self.limit_bytes,
        };
        // Strings and integers only: serializing cannot fail.
        serde_json::to_vec(&letter).unwrap_or_default()
    }
}

/// The JSON of a dead letter (documented in the README, "Dead letters").
#[derive(Serialize)]
struct Letter<'a> {
    reason: &'a str,
    detail: &'a str,
    binding: &'a str,
    model: &'a str,
    model_version: &'a str,
    request_id: &'a str,
    request_bytes: usize,
    served_at: &'a str,
    sidecar: &'a str,
    allow_list_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    record_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_bytes: Option<usize>,
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A token bucket: `per_second` a second on average, bursts of twice that.
#[derive(Debug)]
pub(crate) struct Budget {
    per_second: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl Budget {
    pub(crate) fn new(per_second: u32) -> Self {
        let per_second = f64::from(per_second);
        Self {
            per_second,
            tokens: 2.0 * per_second,
            at: None,
        }
    }

    /// Whether one more may go at `now`.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * self.per_second;
            self.tokens = (self.tokens + refill).min(2.0 * self.per_second);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Unframe {
    /// The drop reason and what was wrong, for a body of `binding` (`grpc`, `rest`) in
    /// `encoding`, read up to `limit` bytes.
    pub(crate) fn rejected(
        &self,
        binding: &'static str,
        encoding: Option<&str>,
        limit: usize,
    ) -> Rejected {
        let rest = binding == "rest";
        let (reason, detail) = match self {
            Unframe::Malformed if rest => (
                Dropped::MalformedJson,
                format!(
                    "the body does not inflate as its Content-Encoding {encoding:?} says (or has bytes after the compressed stream)"
                ),
            ),
            Unframe::Malformed => (
                Dropped::MalformedGrpcFrame,
                "the body is not gRPC's length-prefixed messages, or a message's gzip does not inflate (or has bytes after it)".to_owned(),
            ),
            Unframe::TooLarge => (
                Dropped::TooLarge,
                format!("a body larger than publish.max-message-bytes ({limit} bytes) once inflated"),
            ),
            Unframe::Compression if rest => (
                Dropped::UnsupportedCompression,
                format!("Content-Encoding {encoding:?} is not read (identity, gzip and deflate are)"),
            ),
            Unframe::Compression => (
                Dropped::UnsupportedCompression,
                format!("grpc-encoding {encoding:?} is not read (identity and gzip are)"),
            ),
        };
        Rejected::new(reason, binding, detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_budget_lets_a_burst_through_then_the_rate() {
        let mut budget = Budget::new(10);
        let t0 = Instant::now();
        let burst = (0..50).filter(|_| budget.take(t0)).count();
        assert_eq!(burst, 20, "a burst of twice the rate");
        // A steady flood for 10 s: 10 a second get through, whatever the flood's rate.
        let passed = (1..=10_000)
            .filter(|i| budget.take(t0 + Duration::from_millis(*i)))
            .count();
        assert!((99..=101).contains(&passed), "{passed} in 10 s");
        // After a quiet while the burst is back, no more.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!((0..50).filter(|_| budget.take(later)).count(), 20);
        let mut none = Budget::new(0);
        assert!(!none.take(t0) && !none.take(later));
    }

    #[test]
    fn a_dead_letter_says_what_an_operator_needs_and_nothing_else() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_590_400_123);
        let rejected = Rejected::new(
            Dropped::ShapeMismatch,
            "grpc",
            "tensor \"user_age\": shape [4] holds 4 elements but contents has 3",
        )
        .model("ranker", "2")
        .call("req-1", 21_795, at);
        let json: serde_json::Value =
            serde_json::from_slice(&rejected.to_json("pod-a", "v7")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "reason": "shape_mismatch",
                "detail": "tensor \"user_age\": shape [4] holds 4 elements but contents has 3",
                "binding": "grpc",
                "model": "ranker",
                "model_version": "2",
                "request_id": "req-1",
                "request_bytes": 21_795,
                "served_at": "2025-12-01T12:00:00.123Z",
                "sidecar": "pod-a",
                "allow_list_version": "v7",
            })
        );
        let refused = Rejected::new(Dropped::TooLarge, "grpc", "over the topic's limit")
            .record_bytes(2_300_000)
            .limit_bytes(1_048_588);
        let json: serde_json::Value =
            serde_json::from_slice(&refused.to_json("pod-a", "v7")).unwrap();
        assert_eq!(json["record_bytes"], 2_300_000);
        assert_eq!(json["limit_bytes"], 1_048_588);
        let long = Rejected::new(Dropped::MalformedJson, "rest", "é".repeat(2000));
        let json: serde_json::Value = serde_json::from_slice(&long.to_json("p", "v")).unwrap();
        let detail = json["detail"].as_str().unwrap();
        assert!(detail.len() <= MAX_DETAIL_BYTES && detail.chars().all(|c| c == 'é'));
    }
}
