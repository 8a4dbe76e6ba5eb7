//! The publisher threads: each takes queued calls in batches, decodes a gRPC call (a REST
//! call goes to `rest`), applies the allow list, sampling and the adaptive fraction, and hands
//! the record to the producer. They also serve librdkafka's delivery reports, and dead-letter
//! the records the producer refused.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use featurelog_schemas::inference::ModelInferResponse;
use prost::Message;

use crate::extract::framing::{Unframe, request_model, unframe};
use crate::extract::{CallContext, extract};

use super::Shared;
use super::dead_letter::Rejected;
use super::producer::{RecordOf, dead_letter_refused, produce};
use super::queue::Queued;
use super::record::{Local, admit, count_missing, produce_planned};
use super::rest::publish_rest;
use crate::reason::{Dropped, Skipped};

/// How long a publisher thread sleeps when the queue is empty. A call waits at most this long
/// before it is worked on; in exchange no thread is ever blocked on the queue, so handing a call
/// over costs the proxy no wake-up system call, and each wake-up here serves a whole batch.
const DRAIN_INTERVAL: Duration = Duration::from_millis(50);

/// Calls taken from the queue at a time (under its lock).
const BATCH: usize = 256;

pub(super) fn worker(shared: &Shared, rx: &Mutex<Receiver<Queued>>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut local = Local::default();
    loop {
        // Read before the queue is looked at: a thread that finds the queue empty after
        // `closing` was set has seen every call submitted before the shutdown began. Read
        // after, a call submitted between the look and the read would be left in the queue
        // (counted `shutting_down` by the shutdown) instead of published.
        let closing = shared.closing.load(Ordering::SeqCst);
        let mut disconnected = false;
        match rx.lock() {
            Ok(rx) => {
                while batch.len() < BATCH {
                    match rx.try_recv() {
                        Ok(call) => batch.push(call),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => {
                            disconnected = true;
                            break;
                        }
                    }
                }
            }
            Err(_) => return,
        }
        let worked = !batch.is_empty();
        for call in batch.drain(..) {
            let depth = shared
                .queue_len
                .fetch_sub(1, Ordering::Relaxed)
                .saturating_sub(1);
            shared.metrics.queue_depth.set(depth as i64);
            let bytes = call.bytes;
            publish(shared, call, &mut local);
            // Counted until the call's bodies are let go (publish consumes them).
            let left = shared
                .queue_bytes
                .fetch_sub(bytes, Ordering::Relaxed)
                .saturating_sub(bytes);
            shared.metrics.queue_bytes.set(left as i64);
        }
        // The publisher threads also serve librdkafka's delivery reports and statistics
        // (BaseProducer rather than ThreadedProducer: no extra thread waking on its own). Each
        // poll serves at most one event; a few per round keep up with a batch's reports.
        for _ in 0..4 {
            shared.producer.poll(Duration::ZERO);
        }
        dead_letter_refused(shared);
        if !worked {
            if disconnected || closing {
                return;
            }
            std::thread::sleep(DRAIN_INTERVAL);
        }
    }
}

fn publish(shared: &Shared, queued: Queued, local: &mut Local) {
    let Queued {
        mut call,
        allow_list: list,
        bytes: _,
    } = queued;
    if let Some(rest) = call.rest.take() {
        return publish_rest(shared, call, rest, &list, local);
    }
    let request_size: usize = call.request.iter().map(Bytes::len).sum();
    let limit = shared.max_message_bytes;
    // What a dead letter says of this call, besides what went wrong.
    let about = |rejected: Rejected, request_id: &str| {
        rejected.call(request_id, request_size, call.served_at)
    };
    // Its first chunk (a reference), so that a dead letter can name the model of a request
    // that does not decode.
    let first = call.request.first().cloned().unwrap_or_default();
    let named = || {
        request_model(std::slice::from_ref(&first))
            .map(|(m, v)| (m.to_owned(), v.to_owned()))
            .unwrap_or_default()
    };
    let unframed = unframe(
        call.request,
        call.request_encoding.as_deref(),
        limit,
        &mut local.scratch,
    );
    let request_bytes = match unframed {
        Ok(b) => b,
        Err(e) => {
            let (model, version) = named();
            let rejected = e.rejected("grpc", call.request_encoding.as_deref(), limit);
            return shared.reject(about(
                rejected.model(&model, &version),
                &call.fallback_request_id,
            ));
        }
    };
    // One pass over the request: the head picks the rule, the rest is decoded only if logged.
    let mut scanned = match crate::extract::lazy::scan(request_bytes) {
        Ok(s) => s,
        Err(_) => {
            let (model, version) = named();
            let rejected = Rejected::new(Dropped::MalformedProtobuf, "grpc", MALFORMED_REQUEST);
            return shared.reject(about(
                rejected.model(&model, &version),
                &call.fallback_request_id,
            ));
        }
    };
    let Some(rule) = list.rule(&scanned.model_name, &scanned.model_version) else {
        return shared.metrics.skip_call(Skipped::NotAllowListed);
    };
    let own = std::mem::take(&mut scanned.id);
    let Some(request_id) = admit(shared, rule, own, call.fallback_request_id) else {
        return;
    };
    let ctx = CallContext {
        request_id: &request_id,
        served_at: call.served_at,
        instance: &shared.instance,
        allow_list_version: &list.version,
        headers: &call.headers,
    };
    let of = RecordOf {
        model: &rule.name,
        request_id: &request_id,
        binding: "grpc",
        request_size,
        served_at: call.served_at,
    };
    let Some(scanned) = produce_planned(shared, local, &list, rule, scanned, ctx, of) else {
        return;
    };
    let version = scanned.model_version.clone();
    let request = match scanned.decode_for_rule(rule) {
        Ok(r) => r,
        Err(err) => {
            let rejected = match err {
                crate::extract::lazy::LazyError::Malformed => {
                    Rejected::new(Dropped::MalformedProtobuf, "grpc", MALFORMED_REQUEST)
                }
                crate::extract::lazy::LazyError::RawCount(err) => {
                    Rejected::new(Dropped::from(&err), "grpc", err.to_string())
                }
            };
            return shared.reject(about(rejected.model(&rule.name, &version), &request_id));
        }
    };
    let needs_response = !rule.outputs.is_empty() || rule.top_k.is_some();
    let response = if needs_response {
        let framed = unframe(
            call.response,
            call.response_encoding.as_deref(),
            shared.max_message_bytes,
            &mut BytesMut::new(),
        );
        let rejected = match framed.map(ModelInferResponse::decode) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) | Err(Unframe::Malformed) => Err(Rejected::new(
                Dropped::MalformedResponse,
                "grpc",
                "the model server's response is not a valid ModelInferResponse",
            )),
            Err(e) => Err(e.rejected("grpc", call.response_encoding.as_deref(), limit)),
        };
        match rejected {
            Ok(r) => Some(r),
            Err(rejected) => {
                let rejected = rejected.model(&request.model_name, &request.model_version);
                return shared.reject(about(rejected, &request_id));
            }
        }
    } else {
        None
    };
    let record = match extract(rule, &request, response.as_ref(), ctx) {
        Ok(r) => r,
        Err(err) => {
            let rejected = Rejected::new(err.reason(), "grpc", err.to_string())
                .model(&request.model_name, &request.model_version);
            return shared.reject(about(rejected, &request_id));
        }
    };
    count_missing(shared, rule, &record);
    produce(shared, of, &record.encode_to_vec(), record.row_count);
}

/// The detail of a request that is not a `ModelInferRequest`.
const MALFORMED_REQUEST: &str = "the request is not a valid ModelInferRequest (protobuf)";
