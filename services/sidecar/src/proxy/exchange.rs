//! The two sides of a logged call, tapped by different tasks and brought together by whichever
//! is done last, then handed to the publisher whole or counted as a drop; and the id the
//! response carries back when the call names none.

use crate::reason::{Dropped, Skipped};
use std::sync::{Arc, Mutex};

use std::time::Duration;
use tokio::sync::Notify;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::Body;

use crate::extract::framing::{frame_head, request_model};
use crate::metrics::Metrics;
use crate::publish::dead_letter::Rejected;
use crate::publish::{CallInFlight, CapturedCall, Publisher};

use super::REQUEST_ID;
use super::request_id::captured_request_id;
use super::tap::{Captured, Tap};

/// The two sides of a call, brought together by whichever of their taps is done last.
#[derive(Default)]
pub(crate) struct Exchange {
    sides: Mutex<Sides>,
    /// Told when the request's tap is done, for a response that wants its id.
    request_done: Notify,
    /// The request body is gRPC-framed: one whole message in it is as good as its end.
    grpc: bool,
    /// Holds the call in the publisher's count until both taps are done with the exchange
    /// (see `CallInFlight`): a shutdown waits for it to be handed over.
    _in_flight: Option<CallInFlight>,
}

/// What an [`Exchange`] holds until both of its taps are done.
#[derive(Default)]
enum Sides {
    #[default]
    Open,
    /// The request's tap is done first (as nearly always): its capture waits for the response.
    Request(Captured),
    /// The response ended first: what logs the call once the request's tap is done.
    Response(Box<dyn FnOnce(Captured, bool) + Send>),
}

/// How long a response waits for its request's tap to be done before it chooses the id it
/// returns. The model server has answered, so the request was sent whole and its tap is done
/// at once or a moment later; only an upstream that answers before the request ends can make
/// it wait this long (and then a request that names itself may be returned a generated id).
pub(super) const REQUEST_END_WAIT: Duration = Duration::from_millis(500);

/// `found` (a request id the call carries, if non-empty), else a generated one, which goes
/// into the response's `x-request-id` header so the caller can tag its impressions with it.
pub(crate) fn id_or_generated(found: Option<String>, response_headers: &mut HeaderMap) -> String {
    if let Some(id) = found.filter(|id| !id.is_empty()) {
        return id;
    }
    let generated = uuid::Uuid::new_v4().to_string();
    if let Ok(value) = HeaderValue::from_str(&generated) {
        response_headers.insert(REQUEST_ID, value);
    }
    generated
}

impl Exchange {
    /// The exchange of a call that `publisher` may log.
    pub(crate) fn new(publisher: &Publisher) -> Self {
        Self {
            _in_flight: Some(publisher.call_in_flight()),
            ..Self::default()
        }
    }

    /// The exchange of a gRPC call (see [`Exchange::whole`]).
    pub(crate) fn grpc(self) -> Self {
        Self { grpc: true, ..self }
    }

    /// Whether the request body the tap `captured` holds all that the model server read: it
    /// reached its end, or, for a unary gRPC call, it holds exactly one whole message. A model
    /// server may answer once it has the message, before the caller's end of stream arrives,
    /// and reset the rest of the stream; the model read the call all the same.
    fn whole(&self, captured: &Captured) -> bool {
        captured.complete
            || (self.grpc
                && !captured.overflow
                && frame_head(&captured.chunks)
                    .is_some_and(|(_, len, _)| captured.len == len.saturating_add(5)))
    }

    fn sides(&self) -> std::sync::MutexGuard<'_, Sides> {
        // Nothing panics while holding it; a poisoned lock still holds a consistent value.
        self.sides
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The request body, passed through, left here when it is done.
    pub(crate) fn tap<B: Body>(self: &Arc<Self>, body: B, limit: usize) -> Tap<B> {
        let exchange = self.clone();
        Tap::new(body, limit, move |captured| exchange.request_done(captured))
    }

    /// The request's tap is done with `captured`: it waits for the response, or completes a
    /// call whose response ended first.
    pub(crate) fn request_done(&self, captured: Captured) {
        let mut sides = self.sides();
        if let Sides::Response(log) = std::mem::take(&mut *sides) {
            drop(sides);
            let whole = self.whole(&captured);
            return log(captured, whole);
        }
        *sides = Sides::Request(captured);
        drop(sides);
        self.request_done.notify_waiters();
    }

    /// Waits, for up to [`REQUEST_END_WAIT`], until the request's tap is done.
    pub(crate) async fn request_seen(&self) {
        let notified = self.request_done.notified();
        tokio::pin!(notified);
        // Registered before looking, so that a tap done in between still wakes it.
        notified.as_mut().enable();
        if matches!(*self.sides(), Sides::Request(_)) {
            return;
        }
        let _ = tokio::time::timeout(REQUEST_END_WAIT, notified).await;
    }

    /// The request body as its tap captured it, when the tap is done and saw the whole body.
    pub(crate) fn whole_request<T>(&self, read: impl FnOnce(&Captured) -> T) -> Option<T> {
        match &*self.sides() {
            Sides::Request(captured) if self.whole(captured) => Some(read(captured)),
            _ => None,
        }
    }

    /// The request's `id` field if the whole request body has been seen; `None` otherwise.
    /// Reads the chunks in place: this runs on the call's path, so nothing is copied (but for
    /// a compressed request, which must be inflated as the publisher will).
    pub(super) fn peek_request_id(&self, encoding: Option<&str>, limit: usize) -> Option<String> {
        self.whole_request(|captured| captured_request_id(captured, encoding, limit))
            .flatten()
    }
}

impl Exchange {
    /// The end of a call whose response body was `response`: counts it as `method` with
    /// `outcome` and, when it `succeeded`, logs it with its request once the request's tap is
    /// done too (`log_call`). The two taps are dropped by different tasks, in either order: on a
    /// loaded machine the task that forwarded the request can be descheduled between sending
    /// its end and dropping its body, while the answer comes back through another.
    pub(crate) fn finish(
        &self,
        response: Captured,
        metrics: Arc<Metrics>,
        publisher: Arc<Publisher>,
        (method, outcome, succeeded): (&'static str, &'static str, bool),
        call: impl FnOnce(Vec<Bytes>, Vec<Bytes>) -> CapturedCall + Send + 'static,
    ) {
        metrics.count_call(method, outcome);
        if !succeeded {
            return metrics.skip_call(Skipped::CallFailed);
        }
        let log = move |request: Captured, whole: bool| {
            log_call(request, whole, response, &metrics, &publisher, call);
        };
        let mut sides = self.sides();
        match std::mem::take(&mut *sides) {
            Sides::Request(request) => {
                drop(sides);
                let whole = self.whole(&request);
                log(request, whole);
            }
            Sides::Open => *sides = Sides::Response(Box::new(log)),
            // One response per exchange: nothing else can be here.
            other @ Sides::Response(_) => *sides = other,
        }
    }
}

/// Logs a call whose request and response bodies were `request` (`whole`: see
/// `Exchange::whole`) and `response`, when both are whole and within the size limit, handing
/// them to `publisher` as `call` makes them into a [`CapturedCall`]; otherwise counts the drop
/// (and dead-letters a call too large to log).
fn log_call(
    request: Captured,
    whole: bool,
    response: Captured,
    metrics: &Metrics,
    publisher: &Publisher,
    call: impl FnOnce(Vec<Bytes>, Vec<Bytes>) -> CapturedCall,
) {
    if !whole || !response.complete {
        return metrics.drop_call(Dropped::IncompleteCall);
    }
    if request.overflow || response.overflow {
        // The request, or its head when it is the large one, names the model and the call.
        let named = if request.overflow {
            vec![Bytes::from(request.head)]
        } else {
            request.chunks
        };
        let head = call(named, Vec::new());
        let (model, version) = match &head.rest {
            Some(rest) => (rest.model.clone(), rest.version.clone()),
            None => request_model(&head.request)
                .map(|(m, v)| (m.to_owned(), v.to_owned()))
                .unwrap_or_default(),
        };
        let (body, size) = if request.overflow {
            ("request", request.len)
        } else {
            ("response", response.len)
        };
        let binding = if head.rest.is_some() { "rest" } else { "grpc" };
        let detail = format!(
            "the {body} body ({size} bytes) is larger than publish.max-message-bytes ({} bytes)",
            publisher.max_message_bytes()
        );
        let rejected = Rejected::new(Dropped::TooLarge, binding, detail)
            .model(&model, &version)
            .call(&head.fallback_request_id, request.len, head.served_at);
        return publisher.reject(rejected);
    }
    publisher.submit(call(request.chunks, response.chunks));
}
