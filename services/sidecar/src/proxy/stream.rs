//! Logging Triton's ModelStreamInfer: many inferences over one bidirectional stream, as
//! tritonclient's stream API sends them. Both bodies pass through untouched; on the way, each is
//! cut into its gRPC messages. A request message waits (by its `id`) for the response message
//! that carries the same id, and the pair is handed to the publisher exactly as a ModelInfer
//! call's two bodies would be, so that streamed inferences are decoded, filtered, sampled and
//! counted by the same code.
//!
//! Pairing is by id because that is what the protocol guarantees: Triton echoes each request's
//! id in its response, and a decoupled model may answer a request more than once or not at all.
//! So a streamed request without an id is not logged (`no_request_id`): the sidecar cannot
//! return a generated id to the caller per message, and the app could not join its events. A
//! request whose response does not come before the stream ends, or that waits behind
//! [`MAX_WAITING`] others, is counted as `incomplete_call`.

use crate::reason::{Dropped, Skipped};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use featurelog_schemas::wire::{
    WireType, model_infer_request, model_infer_response, model_stream_infer_response,
};
use http_body::Body;

use super::tap::{Watch, Watched};
use crate::extract::fields::{NotField, fields};
use crate::extract::framing::unframe;
use crate::metrics::Metrics;
use crate::publish::dead_letter::Rejected;
use crate::publish::{CapturedCall, Publisher};

/// Requests of one stream waiting for their responses, at most: past it (or past
/// `publish.max-message-bytes` of them, the bound of one unary call's bodies) the oldest is
/// given up.
pub(crate) const MAX_WAITING: usize = 1024;

/// One gRPC message as it passed: its 5-byte prefix and its bytes, in the chunks they arrived
/// in; or one past the size limit, which is not kept.
#[derive(Debug)]
pub(crate) enum Message {
    Whole(Vec<Bytes>),
    TooLarge,
}

/// Cuts a gRPC body into messages as its chunks pass, keeping references to the chunks.
#[derive(Debug, Default)]
struct Splitter {
    head: [u8; 5],
    head_len: usize,
    /// Bytes of the current message still to come.
    need: usize,
    /// Bytes of an oversized message still to pass.
    skip: usize,
    parts: Vec<Bytes>,
}

impl Splitter {
    fn feed(&mut self, data: &Bytes, limit: usize, out: &mut dyn FnMut(Message)) {
        let mut at = 0;
        while at < data.len() {
            let left = data.len() - at;
            if self.skip > 0 {
                let n = self.skip.min(left);
                self.skip -= n;
                at += n;
            } else if self.need > 0 {
                let n = self.need.min(left);
                self.parts.push(data.slice(at..at + n));
                self.need -= n;
                at += n;
                if self.need == 0 {
                    out(Message::Whole(std::mem::take(&mut self.parts)));
                }
            } else {
                let n = (5 - self.head_len).min(left);
                self.head[self.head_len..self.head_len + n].copy_from_slice(&data[at..at + n]);
                self.head_len += n;
                at += n;
                if self.head_len < 5 {
                    continue;
                }
                self.head_len = 0;
                let [_, a, b, c, d] = self.head;
                let len = u32::from_be_bytes([a, b, c, d]) as usize;
                if len > limit {
                    self.skip = len;
                    out(Message::TooLarge);
                } else if len == 0 {
                    out(Message::Whole(vec![Bytes::copy_from_slice(&self.head)]));
                } else {
                    self.parts = vec![Bytes::copy_from_slice(&self.head)];
                    self.need = len;
                }
            }
        }
    }
}

type OnMessage = Box<dyn FnMut(Message) + Send>;
type OnEnd = Box<dyn FnOnce(Option<&http::HeaderMap>) + Send>;

/// Hands each whole message of a passing body to `on_message` as it completes, then, when the
/// body is dropped, its trailers (if it ended with them) to `on_end`.
pub(crate) struct Cut {
    splitter: Splitter,
    limit: usize,
    on_message: OnMessage,
    on_end: Option<OnEnd>,
    trailers: Option<http::HeaderMap>,
}

/// A body passed through with its messages cut out on the way (see [`Cut`]).
pub(crate) type Messages<B> = Watched<B, Cut>;

/// `body` passed through, its messages handed to `on_message` and its end to `on_end`.
pub(crate) fn messages<B: Body>(
    body: B,
    limit: usize,
    on_message: impl FnMut(Message) + Send + 'static,
    on_end: impl FnOnce(Option<&http::HeaderMap>) + Send + 'static,
) -> Messages<B> {
    Watched::around(
        body,
        Cut {
            splitter: Splitter::default(),
            limit,
            on_message: Box::new(on_message),
            on_end: Some(Box::new(on_end)),
            trailers: None,
        },
    )
}

impl Watch for Cut {
    fn data(&mut self, data: &Bytes) {
        let on_message = &mut self.on_message;
        self.splitter.feed(data, self.limit, &mut |m| on_message(m));
    }

    fn trailers(&mut self, trailers: &http::HeaderMap) {
        self.trailers = Some(trailers.clone());
    }

    fn done(&mut self, _ended: bool) {
        if let Some(on_end) = self.on_end.take() {
            on_end(self.trailers.as_ref());
        }
    }
}

struct Waiting {
    id: String,
    request: Vec<Bytes>,
    served_at: SystemTime,
}

/// The detail of a response message that cannot be read.
const MALFORMED_RESPONSE: &str = "a response of a ModelStreamInfer stream is not a valid ModelStreamInferResponse (or its gzip does not inflate)";

/// One stream's pairing of requests with responses.
pub(crate) struct StreamLog {
    publisher: Arc<Publisher>,
    metrics: Arc<Metrics>,
    headers: Vec<(String, String)>,
    request_encoding: Option<String>,
    response_encoding: Mutex<Option<String>>,
    limit: usize,
    waiting: Mutex<VecDeque<Waiting>>,
}

impl StreamLog {
    pub(crate) fn new(
        publisher: Arc<Publisher>,
        metrics: Arc<Metrics>,
        headers: Vec<(String, String)>,
        request_encoding: Option<String>,
        limit: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            publisher,
            metrics,
            headers,
            request_encoding,
            response_encoding: Mutex::new(None),
            limit,
            waiting: Mutex::new(VecDeque::new()),
        })
    }

    /// The response stream's `grpc-encoding`, known once its headers came.
    pub(crate) fn set_response_encoding(&self, encoding: Option<String>) {
        if let Ok(mut e) = self.response_encoding.lock() {
            *e = encoding;
        }
    }

    /// A request message of the stream, as it passes to the model server.
    pub(crate) fn request(&self, message: Message) {
        let request = match message {
            Message::Whole(parts) => parts,
            Message::TooLarge => {
                let detail = format!(
                    "a streamed request larger than publish.max-message-bytes ({} bytes)",
                    self.limit
                );
                return self.reject(Rejected::new(Dropped::TooLarge, "grpc", detail));
            }
        };
        // Only for a request that is not logged: nothing of it is read on the way otherwise.
        let about = |rejected: Rejected| {
            let size = request.iter().map(Bytes::len).sum::<usize>();
            let (model, version) =
                crate::extract::framing::request_model(&request).unwrap_or_default();
            rejected
                .model(model, version)
                .call("", size, SystemTime::now())
        };
        // Uncompressed (nearly always): read in place on the call's path, without a copy.
        let id = if request.first().and_then(|p| p.first()) == Some(&0) {
            super::request_id::id_in_chunks(&request, 5)
        } else {
            match unframe(
                request.clone(),
                self.request_encoding.as_deref(),
                self.limit,
                &mut bytes::BytesMut::new(),
            ) {
                Ok(message) => string_field(message, model_infer_request::ID),
                Err(e @ crate::extract::framing::Unframe::Compression) => {
                    let encoding = self.request_encoding.as_deref();
                    return self.reject(about(e.rejected("grpc", encoding, self.limit)));
                }
                Err(_) => None,
            }
        };
        let Some(id) = id else {
            let detail = "a streamed request is not a valid ModelInferRequest (protobuf)";
            return self.reject(about(Rejected::new(
                Dropped::MalformedProtobuf,
                "grpc",
                detail,
            )));
        };
        if id.is_empty() {
            let detail = "a request of a ModelStreamInfer stream has no id: streamed inferences are paired with their responses, and joined with the app's events, by it";
            return self.reject(about(Rejected::new(Dropped::NoRequestId, "grpc", detail)));
        }
        let Ok(mut waiting) = self.waiting.lock() else {
            return;
        };
        // A decoupled model may leave requests unanswered for the life of the stream: what
        // waits is bounded, as one unary call's bodies are.
        let size = |w: &Waiting| w.request.iter().map(Bytes::len).sum::<usize>();
        let bytes = request.iter().map(Bytes::len).sum::<usize>();
        let mut held = waiting.iter().map(size).sum::<usize>();
        while !waiting.is_empty() && (waiting.len() >= MAX_WAITING || held + bytes > self.limit) {
            if let Some(oldest) = waiting.pop_front() {
                held -= size(&oldest);
            }
            self.metrics.drop_call(Dropped::IncompleteCall);
        }
        waiting.push_back(Waiting {
            id,
            request,
            served_at: SystemTime::now(),
        });
    }

    /// Counts a request of the stream that cannot be logged, with its dead letter.
    fn reject(&self, rejected: Rejected) {
        self.publisher.reject(rejected);
    }

    /// A response message of the stream, as it passes to the caller: its request's pair is
    /// published.
    pub(crate) fn response(&self, message: Message) {
        let Message::Whole(parts) = message else {
            // Its request waits until the stream ends, and is counted then.
            return;
        };
        let encoding = self.response_encoding.lock().ok().and_then(|e| e.clone());
        let Ok(message) = unframe(
            parts,
            encoding.as_deref(),
            self.limit,
            &mut bytes::BytesMut::new(),
        ) else {
            return self.reject(Rejected::new(
                Dropped::MalformedResponse,
                "grpc",
                MALFORMED_RESPONSE,
            ));
        };
        let Some((error, response)) = stream_response(message) else {
            return self.reject(Rejected::new(
                Dropped::MalformedResponse,
                "grpc",
                MALFORMED_RESPONSE,
            ));
        };
        let Some(id) = response
            .clone()
            .and_then(|r| string_field(r, model_infer_response::ID))
        else {
            return;
        };
        let found = self.waiting.lock().ok().and_then(|mut w| {
            let at = w.iter().position(|r| r.id == id)?;
            w.remove(at)
        });
        // A response no request waits for: a decoupled model's second answer, or a request
        // that was not to be logged.
        let Some(request) = found else {
            return;
        };
        let response = match response {
            Some(r) if !error => r,
            _ => return self.metrics.skip_call(Skipped::CallFailed),
        };
        let mut prefix = vec![0u8];
        prefix.extend_from_slice(&(response.len() as u32).to_be_bytes());
        self.publisher.submit(CapturedCall {
            request: request.request,
            response: vec![Bytes::from(prefix), response],
            request_encoding: self.request_encoding.clone(),
            response_encoding: None,
            fallback_request_id: id,
            served_at: request.served_at,
            headers: self.headers.clone(),
            rest: None,
        });
    }

    /// The stream ended: what still waits will not be answered.
    pub(crate) fn end(&self) {
        let left = self.waiting.lock().map(|mut w| w.drain(..).count());
        for _ in 0..left.unwrap_or(0) {
            self.metrics.drop_call(Dropped::IncompleteCall);
        }
    }
}

/// The text of field `number` of an encoded message (`None` if the message does not parse
/// that far; empty if the field is absent).
fn string_field(message: Bytes, number: u32) -> Option<String> {
    let mut found = String::new();
    for f in fields(&message) {
        match f {
            Ok(f) if f.number == number && f.wire == WireType::LengthDelimited => {
                found = f.str(&message).ok()?.to_owned();
            }
            Ok(_) | Err(NotField::Group(_)) => {}
            Err(NotField::Malformed) => return None,
        }
    }
    Some(found)
}

/// A ModelStreamInferResponse: whether it reports an error, and its `infer_response` bytes.
fn stream_response(message: Bytes) -> Option<(bool, Option<Bytes>)> {
    let (mut error, mut response) = (false, None);
    for f in fields(&message) {
        match f {
            Ok(f) if f.wire == WireType::LengthDelimited => match f.number {
                model_stream_infer_response::ERROR_MESSAGE => error = f.payload.0 != f.payload.1,
                model_stream_infer_response::INFER_RESPONSE => {
                    response = Some(message.slice(f.range()));
                }
                _ => {}
            },
            Ok(_) | Err(NotField::Group(_)) => {}
            Err(NotField::Malformed) => return None,
        }
    }
    Some((error, response))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    /// Feeds `body` cut at every `step` bytes; returns the messages seen, joined.
    fn split(body: &[u8], step: usize, limit: usize) -> Vec<Result<Vec<u8>, ()>> {
        let mut splitter = Splitter::default();
        let mut seen = Vec::new();
        for chunk in body.chunks(step) {
            splitter.feed(&Bytes::copy_from_slice(chunk), limit, &mut |m| {
                seen.push(match m {
                    Message::Whole(parts) => Ok(parts.concat()),
                    Message::TooLarge => Err(()),
                });
            });
        }
        seen
    }

    #[test]
    fn messages_are_found_however_the_chunks_cut_them() {
        let messages: [&[u8]; 4] = [b"first", b"", &[7u8; 300], b"last"];
        let body: Vec<u8> = messages.iter().flat_map(|m| framed(m)).collect();
        for step in [1, 2, 3, 5, 7, 64, 1000] {
            let expected: Vec<Result<Vec<u8>, ()>> =
                messages.iter().map(|m| Ok(framed(m))).collect();
            assert_eq!(split(&body, step, 1 << 20), expected, "step {step}");
            // Past the limit: reported, skipped, and the next ones still found.
            let mut expected = expected;
            expected[2] = Err(());
            assert_eq!(split(&body, step, 100), expected, "step {step}");
        }
    }

    /// A request message with `id` and `pad` bytes of parameters, framed.
    fn request(id: &str, pad: usize) -> Message {
        use featurelog_schemas::inference::ModelInferRequest;
        use prost::Message as _;
        let message = ModelInferRequest {
            id: id.into(),
            model_name: "ranker".into(),
            model_version: "x".repeat(pad),
            ..Default::default()
        };
        Message::Whole(vec![Bytes::from(framed(&message.encode_to_vec()))])
    }

    #[tokio::test]
    async fn what_waits_for_an_answer_is_bounded_and_counted_when_given_up() {
        let (publisher, metrics, _dir) =
            crate::publish::tests::unconnected(&crate::config::PublishConfig::default());
        let dropped = |reason| metrics.dropped_count(reason);
        let log = StreamLog::new(Arc::new(publisher), metrics.clone(), Vec::new(), None, 1000);
        log.request(request("", 0));
        assert_eq!(dropped("no_request_id"), 1);
        // By bytes: each of these is ~420 bytes, and 1000 hold two.
        for id in ["a", "b", "c"] {
            log.request(request(id, 400));
        }
        assert_eq!(dropped("incomplete_call"), 1, "the oldest, a, was given up");
        // By count.
        let log = StreamLog::new(
            log.publisher.clone(),
            metrics.clone(),
            Vec::new(),
            None,
            1 << 30,
        );
        for i in 0..MAX_WAITING + 5 {
            log.request(request(&format!("r{i}"), 0));
        }
        assert_eq!(dropped("incomplete_call"), 6);
        // The stream ends with the rest unanswered: each counted once.
        log.end();
        assert_eq!(dropped("incomplete_call"), 6 + MAX_WAITING as u64);
    }

    #[test]
    fn stream_responses_and_ids_are_read_and_garbage_is_refused() {
        use featurelog_schemas::inference::{ModelInferResponse, ModelStreamInferResponse};
        use prost::Message as _;
        let inner = ModelInferResponse {
            id: "r-1".into(),
            model_name: "ranker".into(),
            ..Default::default()
        };
        let ok = ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(inner.clone()),
        };
        let (error, response) = stream_response(ok.encode_to_vec().into()).unwrap();
        assert!(!error);
        let response = response.unwrap();
        assert_eq!(response, inner.encode_to_vec());
        assert_eq!(string_field(response, 3).as_deref(), Some("r-1"));
        let failed = ModelStreamInferResponse {
            error_message: "no such model".into(),
            infer_response: Some(inner),
        };
        assert!(stream_response(failed.encode_to_vec().into()).unwrap().0);
        assert_eq!(stream_response(Bytes::from_static(&[0x12, 0x7f, 1])), None);
        assert_eq!(
            string_field(Bytes::from_static(&[0x1a, 2, 0xff, 0xfe]), 3),
            None
        );
    }
    /// prost's decode (the client's, the model server's) steps over a group of a field it does
    /// not know, and so must the sidecar: the walker it reads with refuses groups.
    #[test]
    fn groups_are_stepped_over_as_prost_steps_over_them() {
        // A group 30 (keys 0xf3 0x01 and 0xf4 0x01) around a nested group 1 and a varint.
        let group = [0xf3, 0x01, 0x0b, 0x12, 1, 0x0c, 0x0c, 0x08, 1, 0xf4, 0x01];
        let response = [&[0x1a, 3, b'r', b'-', b'1'][..], &group].concat();
        assert_eq!(
            string_field(Bytes::from([&group[..], &response].concat()), 3).as_deref(),
            Some("r-1")
        );
        let message = [&group[..], &[0x12, response.len() as u8], &response, &group].concat();
        let (error, inner) = stream_response(Bytes::from(message)).unwrap();
        assert!(!error);
        assert_eq!(inner.as_deref(), Some(&response[..]));
        // An end-group key without its start is refused, as prost refuses it.
        assert_eq!(stream_response(Bytes::from_static(&[0x0c])), None);
        assert_eq!(string_field(Bytes::from_static(&[0x1c]), 3), None);
    }
}
