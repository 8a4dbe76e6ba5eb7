//! The gRPC proxy: every HTTP/2 request is forwarded to the model server as it came, byte for
//! byte, and the upstream's response (headers, body, trailers, errors) goes back the same way.
//! Working below gRPC means any method passes, Triton's extensions and health checks included,
//! with no re-encoding; deadlines travel in `grpc-timeout`, and a caller that cancels resets its
//! stream, which drops our upstream request and so resets the upstream stream too.
//!
//! For `ModelInfer` in log mode, both bodies are also tapped: each chunk is kept by reference
//! (a `Bytes` clone, no copy) and, once the call has finished with `grpc-status: 0`, the chunks go
//! to the [`Publisher`], which decodes them on its own threads. The only work added to the call
//! itself is the tap and, when the caller sent no `x-request-id`, peeking at the request's `id`
//! field so a generated id can be returned in the response metadata. Triton's
//! `ModelStreamInfer` is cut into messages as it passes and logged per inference (`stream`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf, Bytes};
use http::{HeaderMap, HeaderValue, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::dead_letter::Rejected;
use crate::metrics::Metrics;
use crate::publisher::{CapturedCall, Publisher};
use crate::stream::{StreamLog, messages};

/// The body type both directions are boxed into.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;
/// Errors of a body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
/// Triton's streaming extension (see `stream`).
const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";
const REQUEST_ID: &str = "x-request-id";

/// The SETTINGS_MAX_HEADER_LIST_SIZE the sidecar advertises, to its clients and to the model
/// server: larger than any model server's default (gRPC's and hyper's are 16 KiB), so that
/// whatever the model server sends reaches the client as it is, and a request's oversized
/// metadata is refused for its own stream (`max-request-header-bytes`) instead of by the
/// HTTP/2 layer, which answers 431 over the limit and closes the whole connection at four
/// times it. It bounds what one header block may hold in memory.
pub(crate) const HEADER_LIST_BYTES: u32 = 1 << 20;

/// The HTTP/2 flow-control windows of every connection the sidecar makes or accepts: a
/// connection's is the bytes it may hold unread across its calls (see `Proxy::new`).
pub(crate) const CONNECTION_WINDOW: u32 = 16 << 20;
/// See [`CONNECTION_WINDOW`]: one call's share.
pub(crate) const STREAM_WINDOW: u32 = 1 << 20;

/// What the proxy needs to forward calls and, optionally, log them.
pub struct Proxy {
    client: Client<HttpsConnector<HttpConnector>, ProxyBody>,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    publisher: Option<Arc<Publisher>>,
    max_message_bytes: usize,
    max_request_header_bytes: usize,
}

impl Proxy {
    /// A proxy to `upstream` (`http://host:port`, or `https://` with `tls`); with a publisher,
    /// ModelInfer calls are logged.
    pub fn new(
        upstream: &str,
        tls: rustls::ClientConfig,
        metrics: Arc<Metrics>,
        publisher: Option<Arc<Publisher>>,
        max_message_bytes: usize,
        max_request_header_bytes: usize,
    ) -> Result<Self, String> {
        let upstream = Upstream::parse(upstream, "upstream")?;
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .http2_only(true)
            // Fixed, large windows rather than adaptive ones that start at 64 KiB: h2 bounds the
            // small DATA frames a connection may hold unread to half its window, and 200
            // concurrent calls' small responses passed that, which closed the connection that
            // every caller's calls share (GOAWAY too_many_data_frames).
            .http2_initial_connection_window_size(CONNECTION_WINDOW)
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .http2_max_header_list_size(HEADER_LIST_BYTES)
            .http2_keep_alive_interval(Some(Duration::from_secs(30)))
            .build(connector(tls, true));
        Ok(Self {
            client,
            upstream,
            metrics,
            publisher,
            max_message_bytes,
            max_request_header_bytes,
        })
    }

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let served_at = SystemTime::now();
        let method = match request.uri().path() {
            MODEL_INFER => "model_infer",
            MODEL_STREAM_INFER => "model_stream_infer",
            _ => "other",
        };
        let (mut parts, body) = request.into_parts();
        // Refused here, for this stream alone, as a gRPC server refuses metadata over its
        // limit: forwarded, it could make the model server close the connection that every
        // caller's calls share.
        let metadata = header_list_bytes(&parts);
        if metadata > self.max_request_header_bytes {
            self.count(method, "headers_too_large");
            return trailers_only(
                "8",
                &format!(
                    "featurelog sidecar: the request's metadata is {metadata} bytes, over the {} bytes it forwards (max-request-header-bytes)",
                    self.max_request_header_bytes
                ),
            );
        }
        parts.uri = match self.upstream.uri(&parts.uri) {
            Ok(uri) => uri,
            Err(err) => return self.unavailable(method, &format!("bad request path: {err}")),
        };

        if let (Some(publisher), "model_stream_infer") = (&self.publisher, method) {
            return self.stream(parts, body, publisher.clone()).await;
        }
        let tap = match &self.publisher {
            Some(publisher) if method == "model_infer" => Some(publisher.clone()),
            _ => None,
        };
        let Some(publisher) = tap else {
            let body = body.map_err(BoxError::from).boxed_unsync();
            return match self.client.request(Request::from_parts(parts, body)).await {
                Ok(response) => {
                    let outcome = outcome_of(response.headers());
                    self.count(method, outcome);
                    response.map(|b| b.map_err(BoxError::from).boxed_unsync())
                }
                Err(err) => self.unavailable(method, &err.to_string()),
            };
        };

        let logged_headers = publisher.capture_headers(&parts.headers);
        let header_id = header_str(&parts.headers, REQUEST_ID).filter(|v| !v.is_empty());
        let request_encoding = header_str(&parts.headers, "grpc-encoding");
        let exchange = Arc::new(Exchange::new(&publisher).grpc());
        let request_tap = exchange.tap(body, self.max_message_bytes);
        let upstream_started = Instant::now();
        let response = self
            .client
            .request(Request::from_parts(parts, request_tap.boxed_unsync()))
            .await;
        let upstream_time = upstream_started.elapsed();
        let response = match response {
            Ok(r) => r,
            Err(err) => return self.unavailable(method, &err.to_string()),
        };
        let (mut parts, body) = response.into_parts();

        // Whose id is it? The request's own `id` first, then the caller's header, then ours,
        // which the caller gets back so it can tag its impressions with it.
        // (When the request names itself, the publisher reads the same id from the body.)
        // A trailers-only response (an error, usually) carries its status in the headers.
        let headers_status = status_of(&parts.headers);
        let found = match header_id {
            Some(id) => Some(id),
            None => {
                // An error is not logged: it need not wait for an id (a model server may
                // refuse a large request before reading it all).
                if parts.status.is_success() && headers_status != Some("error") {
                    exchange.request_seen().await;
                }
                exchange.peek_request_id(request_encoding.as_deref(), self.max_message_bytes)
            }
        };
        let fallback_id = id_or_generated(found, &mut parts.headers);
        let response_encoding = header_str(&parts.headers, "grpc-encoding");
        let metrics = self.metrics.clone();
        let response_tap = Tap::new(body, self.max_message_bytes, move |captured: Captured| {
            // No grpc-status at all means the call was cut short (the upstream reset or
            // crashed after its message): the caller got an error, so nothing is logged.
            let status = captured
                .trailers
                .as_ref()
                .and_then(status_of)
                .or(headers_status)
                .unwrap_or("error");
            let how = ("model_infer", status, status == "ok");
            exchange.finish(
                captured,
                metrics,
                publisher,
                how,
                move |request, response| CapturedCall {
                    request,
                    response,
                    request_encoding,
                    response_encoding,
                    fallback_request_id: fallback_id,
                    served_at,
                    headers: logged_headers,
                    rest: None,
                },
            );
        });
        let added = started.elapsed().saturating_sub(upstream_time);
        self.metrics.added_latency.observe(added.as_secs_f64());
        Response::from_parts(parts, response_tap.boxed_unsync())
    }

    /// A ModelStreamInfer call in log mode: both streams pass through, cut into messages on the
    /// way, and each request is logged with the response that carries its id (`stream`).
    async fn stream(
        &self,
        parts: http::request::Parts,
        body: Incoming,
        publisher: Arc<Publisher>,
    ) -> Response<ProxyBody> {
        let log = StreamLog::new(
            publisher.clone(),
            self.metrics.clone(),
            publisher.capture_headers(&parts.headers),
            header_str(&parts.headers, "grpc-encoding"),
            self.max_message_bytes,
        );
        let requests = {
            let log = log.clone();
            messages(
                body,
                self.max_message_bytes,
                move |m| log.request(m),
                |_| {},
            )
        };
        let response = self
            .client
            .request(Request::from_parts(parts, requests.boxed_unsync()))
            .await;
        let response = match response {
            Ok(r) => r,
            Err(err) => return self.unavailable("model_stream_infer", &err.to_string()),
        };
        let (parts, body) = response.into_parts();
        log.set_response_encoding(header_str(&parts.headers, "grpc-encoding"));
        // A trailers-only response (an error, usually) carries its status in the headers.
        let headers_status = status_of(&parts.headers);
        let metrics = self.metrics.clone();
        let answers = log.clone();
        let body = messages(
            body,
            self.max_message_bytes,
            move |m| answers.response(m),
            move |trailers| {
                let status = trailers.and_then(status_of).or(headers_status);
                metrics.count_call("model_stream_infer", status.unwrap_or("error"));
                log.end();
            },
        );
        Response::from_parts(parts, body.boxed_unsync())
    }

    fn count(&self, method: &'static str, outcome: &'static str) {
        self.metrics.count_call(method, outcome);
    }

    /// A trailers-only gRPC error, as a gRPC server would send for UNAVAILABLE.
    fn unavailable(&self, method: &'static str, why: &str) -> Response<ProxyBody> {
        self.count(method, "upstream_unavailable");
        tracing::warn!(upstream = %self.upstream, "upstream call failed: {why}");
        trailers_only(
            "14",
            &format!("featurelog sidecar: upstream unavailable: {why}"),
        )
    }
}

/// A trailers-only gRPC answer with `status` (a gRPC status code) and `message`, as a gRPC
/// server sends an error it decides before any response message.
fn trailers_only(status: &'static str, message: &str) -> Response<ProxyBody> {
    let mut response = Response::new(
        http_body_util::Empty::new()
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from_static(status));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert("grpc-message", v);
    }
    response
}

/// A request's header list size as HTTP/2 counts it against SETTINGS_MAX_HEADER_LIST_SIZE
/// (RFC 9113, 6.5.2): each field's name and value plus 32 bytes, pseudo-headers included.
pub(crate) fn header_list_bytes(parts: &http::request::Parts) -> usize {
    let field = |name: usize, value: usize| name + value + 32;
    let pseudo = field(":method".len(), parts.method.as_str().len())
        + field(":scheme".len(), parts.uri.scheme_str().map_or(4, str::len))
        + field(
            ":authority".len(),
            parts.uri.authority().map_or(0, |a| a.as_str().len()),
        )
        + field(
            ":path".len(),
            parts.uri.path_and_query().map_or(1, |p| p.as_str().len()),
        );
    parts
        .headers
        .iter()
        .map(|(name, value)| field(name.as_str().len(), value.len()))
        .sum::<usize>()
        + pseudo
}

/// The model server a proxy forwards to: `http://` or `https://`, and its host and port.
pub(crate) struct Upstream {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
}

impl Upstream {
    /// `url` (`http://host:port` or `https://host:port`); `what` names the setting.
    pub(crate) fn parse(url: &str, what: &str) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|e| format!("{e}"))?;
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("{what} {url:?} has no host:port"))?;
        let scheme = uri.scheme().cloned().unwrap_or(http::uri::Scheme::HTTP);
        Ok(Self { scheme, authority })
    }

    /// A request's URI with the upstream in place of the sidecar: path and query as they
    /// came.
    pub(crate) fn uri(&self, uri: &Uri) -> Result<Uri, http::Error> {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)
    }
}

/// How both proxies connect to the model server: no Nagle delay, a bounded connect, and TLS
/// (`tls`, offering HTTP/2 or HTTP/1.1 by `h2`) for an `https://` upstream.
pub(crate) fn connector(tls: rustls::ClientConfig, h2: bool) -> HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    // The https connector below takes the https:// scheme; this one must let it through.
    http.enforce_http(false);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if h2 {
        builder.enable_http2().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
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
            return metrics.skip_call("call_failed");
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
        return metrics.drop_call("incomplete_call");
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
            None => crate::publisher::request_model(&head.request)
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
        let rejected = Rejected::new("too_large", binding, detail)
            .model(&model, &version)
            .call(&head.fallback_request_id, request.len, head.served_at);
        return publisher.reject(rejected);
    }
    publisher.submit(call(request.chunks, response.chunks));
}

pub(crate) fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `ok` for grpc-status 0, `error` for any other status; a response with no status yet (its
/// trailers still to come) counts as `ok` until they say otherwise.
fn outcome_of(headers: &HeaderMap) -> &'static str {
    status_of(headers).unwrap_or("ok")
}

/// `ok` for grpc-status 0, `error` for any other, `None` when there is no grpc-status.
fn status_of(headers: &HeaderMap) -> Option<&'static str> {
    match headers.get("grpc-status").map(HeaderValue::as_bytes) {
        None => None,
        Some(b"0") => Some("ok"),
        Some(_) => Some("error"),
    }
}

/// grpc-message is percent-encoded (gRPC over HTTP/2 spec).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The first fields of a ModelInferRequest: enough to learn whether the request names itself.
/// prost skips the fields it does not declare.
#[derive(Clone, PartialEq, Message)]
struct RequestHead {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
}

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
    _in_flight: Option<crate::publisher::CallInFlight>,
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
const REQUEST_END_WAIT: Duration = Duration::from_millis(500);

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
    fn peek_request_id(&self, encoding: Option<&str>, limit: usize) -> Option<String> {
        self.whole_request(|captured| captured_request_id(captured, encoding, limit))
            .flatten()
    }
}

/// The `id` field of the request a tap captured whole (see `Exchange::peek_request_id`).
pub(crate) fn captured_request_id(
    captured: &Captured,
    encoding: Option<&str>,
    limit: usize,
) -> Option<String> {
    if captured.overflow {
        // Too large to be logged, but the response still gets an `x-request-id` only if
        // the request names itself nowhere: its chunks are gone, its first bytes remain.
        return head_id(&captured.head);
    }
    if captured.chunks.iter().find(|c| !c.is_empty())?.first() == Some(&1) {
        // The id the caller gets back must be the one the record carries: the message as
        // the publisher will read it.
        let message = crate::publisher::unframe(
            captured.chunks.clone(),
            encoding,
            limit,
            &mut bytes::BytesMut::new(),
        )
        .ok()?;
        return match request_id(&mut &message[..]) {
            Ok(id) => Some(id),
            Err(Unusual) => RequestHead::decode(&message[..]).ok().map(|h| h.id),
        };
    }
    // Nearly always the whole message is in one chunk: read it as a slice, which perf
    // showed several times cheaper than going field by field through `ChunksBuf`.
    if let Some(message) = contiguous_message(&captured.chunks) {
        return match request_id(&mut &message[..]) {
            Ok(id) => Some(id),
            Err(Unusual) => RequestHead::decode(message).ok().map(|h| h.id),
        };
    }
    let message = || {
        let mut buf = ChunksBuf::new(&captured.chunks);
        if buf.remaining() < 5 || buf.get_u8() != 0 {
            // Compressed requests: the publisher inflates them; here a compressed message
            // gives no cheap answer, so assume there is no id.
            return None;
        }
        let len = buf.get_u32() as usize;
        (len <= buf.remaining()).then(|| buf.take(len))
    };
    match request_id(&mut message()?) {
        Ok(id) => Some(id),
        // Anything unusual: the full decode decides, as the publisher's would.
        Err(Unusual) => RequestHead::decode(message()?).ok().map(|h| h.id),
    }
}

/// The `id` of an uncompressed ModelInferRequest in `chunks` after their first `skip` bytes
/// (a gRPC prefix), read in place; `None` if it does not decode.
pub(crate) fn id_in_chunks(chunks: &[Bytes], skip: usize) -> Option<String> {
    let mut buf = ChunksBuf::new(chunks);
    if buf.remaining() < skip {
        return None;
    }
    buf.advance(skip);
    match request_id(&mut buf) {
        Ok(id) => Some(id),
        Err(Unusual) => {
            let message = chunks.concat();
            RequestHead::decode(message.get(skip..)?).ok().map(|h| h.id)
        }
    }
}

/// A gRPC body's prefix (compressed flag, message length) and the rest of its first non-empty
/// chunk, which is where the message starts.
pub(crate) fn frame_head(chunks: &[Bytes]) -> Option<(u8, usize, &[u8])> {
    let first = chunks.iter().find(|c| !c.is_empty())?;
    let (&[flag, a, b, c, d], rest) = first.split_first_chunk::<5>()?;
    Some((flag, u32::from_be_bytes([a, b, c, d]) as usize, rest))
}

/// The message of an uncompressed gRPC body whose prefix and message sit in its first
/// non-empty chunk.
fn contiguous_message(chunks: &[Bytes]) -> Option<&[u8]> {
    match frame_head(chunks)? {
        (0, len, rest) => rest.get(..len),
        _ => None,
    }
}

/// The `id` of a request body of which only the first bytes were kept (it passed the size
/// limit), read from its leading fields: every encoder writes fields in field-number order, so
/// model_name, model_version and id come before the tensors, and the first field past `id`
/// means there is none. `None` when the bytes end before that, or the message is compressed or
/// unusual: the caller then generates an id, as for a request with none.
pub(crate) fn head_id(head: &[u8]) -> Option<String> {
    let ([0, ..], mut buf) = head.split_first_chunk::<5>()? else {
        return None;
    };
    let mut id = String::new();
    while !buf.is_empty() {
        let key = prost::encoding::decode_varint(&mut buf).ok()?;
        match (key >> 3, key & 7) {
            (tag @ 1..=3, 2) => {
                let len = usize::try_from(prost::encoding::decode_varint(&mut buf).ok()?).ok()?;
                let text = std::str::from_utf8(buf.get(..len)?).ok()?;
                if tag == 3 {
                    text.clone_into(&mut id);
                }
                buf = &buf[len..];
            }
            (4.., _) => return Some(id),
            _ => return None,
        }
    }
    None
}

/// How much of a body past the size limit a tap keeps, copied: the head of a request message
/// (model name, version, id) fits many times over.
const HEAD_BYTES: usize = 4096;

/// Fills `head` with the next `chunks` of a body until it holds [`HEAD_BYTES`].
fn extend_head<'a>(head: &mut Vec<u8>, chunks: impl IntoIterator<Item = &'a Bytes>) {
    for chunk in chunks {
        let take = HEAD_BYTES.saturating_sub(head.len()).min(chunk.len());
        if take == 0 {
            return;
        }
        head.extend_from_slice(&chunk[..take]);
    }
}

/// A message [`request_id`] leaves to prost.
struct Unusual;

/// The `id` of an encoded ModelInferRequest, as `RequestHead::decode` reads it, for a message
/// whose top-level fields are all well formed and of the usual wire types. The other fields
/// are skipped by their length: this runs on the call's path, and prost's generic skipping of
/// a hundred tensor fields through a chunked buffer cost a few microseconds per call (perf).
fn request_id(buf: &mut impl Buf) -> Result<String, Unusual> {
    let varint = |buf: &mut _| prost::encoding::decode_varint(buf).map_err(|_| Unusual);
    let mut id = String::new();
    while buf.has_remaining() {
        let key = varint(buf)?;
        let tag = key >> 3;
        if tag == 0 || key > u64::from(u32::MAX) {
            return Err(Unusual);
        }
        match (tag, key & 7) {
            (_, 2) => {
                let len = usize::try_from(varint(buf)?).map_err(|_| Unusual)?;
                if len > buf.remaining() {
                    return Err(Unusual);
                }
                if tag <= 3 {
                    // model_name, model_version and id must be UTF-8 for the decode to work;
                    // checked in place when the field is in one chunk, which it nearly always is.
                    if buf.chunk().len() >= len {
                        let text = std::str::from_utf8(&buf.chunk()[..len]).map_err(|_| Unusual)?;
                        if tag == 3 {
                            text.clone_into(&mut id);
                        }
                        buf.advance(len);
                    } else {
                        let mut field = vec![0; len];
                        buf.copy_to_slice(&mut field);
                        let text = String::from_utf8(field).map_err(|_| Unusual)?;
                        if tag == 3 {
                            id = text;
                        }
                    }
                } else {
                    buf.advance(len);
                }
            }
            (1..=3, _) => return Err(Unusual),
            (_, 0) => {
                varint(buf)?;
            }
            (_, wire @ (1 | 5)) => {
                let len = if wire == 1 { 8 } else { 4 };
                if len > buf.remaining() {
                    return Err(Unusual);
                }
                buf.advance(len);
            }
            _ => return Err(Unusual),
        }
    }
    Ok(id)
}

/// A [`Buf`] over a body's chunks, in order, without joining them.
struct ChunksBuf<'a> {
    chunks: &'a [Bytes],
    offset: usize,
    remaining: usize,
}

impl<'a> ChunksBuf<'a> {
    fn new(chunks: &'a [Bytes]) -> Self {
        let mut this = Self {
            chunks,
            offset: 0,
            remaining: chunks.iter().map(Bytes::len).sum(),
        };
        this.advance(0);
        this
    }
}

impl Buf for ChunksBuf<'_> {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.chunks
            .first()
            .and_then(|c| c.get(self.offset..))
            .unwrap_or_default()
    }

    fn advance(&mut self, mut cnt: usize) {
        cnt = cnt.min(self.remaining);
        self.remaining -= cnt;
        while cnt > 0 {
            while self.chunks.first().is_some_and(|c| c.len() == self.offset) {
                self.chunks = &self.chunks[1..];
                self.offset = 0;
            }
            let Some(first) = self.chunks.first() else {
                return;
            };
            let left = first.len() - self.offset;
            if cnt < left {
                self.offset += cnt;
                return;
            }
            cnt -= left;
            self.chunks = &self.chunks[1..];
            self.offset = 0;
        }
        // Skip empty chunks so chunk() is never empty while bytes remain.
        while self.chunks.first().is_some_and(|c| c.len() == self.offset) && self.remaining > 0 {
            self.chunks = &self.chunks[1..];
            self.offset = 0;
        }
    }
}

/// What a tap saw of one body.
#[derive(Debug, Default)]
pub struct Captured {
    /// The data chunks, by reference.
    pub chunks: Vec<Bytes>,
    /// Their total length.
    pub len: usize,
    /// True when the data passed the size limit (chunks were then let go).
    pub overflow: bool,
    /// When it passed the limit, a copy of the body's first bytes (up to 4 KiB): where a
    /// request's id is.
    pub head: Vec<u8>,
    /// True when the body reached its end (not cut by an error or a reset).
    pub complete: bool,
    /// The trailers, if any.
    pub trailers: Option<HeaderMap>,
}

/// What a body passing through the proxy shows whoever watches it on the way.
pub(crate) trait Watch {
    /// A data chunk, as it passes.
    fn data(&mut self, data: &Bytes);
    /// The trailers, as they pass.
    fn trailers(&mut self, trailers: &HeaderMap);
    /// The body is dropped; `ended` says whether it reached its end (rather than being cut by
    /// an error or a reset).
    fn done(&mut self, ended: bool);
}

/// A body passed through frame by frame, unchanged, with `watch` shown each frame.
pub(crate) struct Watched<B: Body, W: Watch> {
    inner: B,
    watch: W,
    /// The body ended in an error (a reset, a broken connection): never complete.
    errored: bool,
    finished: bool,
}

impl<B: Body, W: Watch> Watched<B, W> {
    pub(crate) fn around(inner: B, watch: W) -> Self {
        Self {
            inner,
            watch,
            errored: false,
            finished: false,
        }
    }
}

impl<B, W> Body for Watched<B, W>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    W: Watch + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.watch.data(data);
                } else if let Some(trailers) = frame.trailers_ref() {
                    this.watch.trailers(trailers);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => {
                this.errored = true;
                Poll::Ready(Some(Err(err.into())))
            }
            Poll::Ready(None) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body, W: Watch> Drop for Watched<B, W> {
    fn drop(&mut self) {
        // hyper may stop polling once the body says it has ended, without asking for the final
        // `None`: the end of stream is as good as that. But an h2 body that was reset also says
        // it has ended; the error it returned tells the two apart.
        let ended = !self.errored && (self.finished || self.inner.is_end_stream());
        self.watch.done(ended);
    }
}

type OnDone = Box<dyn FnOnce(Captured) + Send>;

/// Keeps a reference to each data chunk of a body; when the body is dropped (after its end, or
/// cut short) hands what it saw to `on_done`.
pub(crate) struct Capture {
    captured: Captured,
    limit: usize,
    on_done: Option<OnDone>,
}

/// A body passed through with its chunks captured (see [`Capture`]).
pub(crate) type Tap<B> = Watched<B, Capture>;

impl<B: Body> Tap<B> {
    pub(crate) fn new(
        inner: B,
        limit: usize,
        on_done: impl FnOnce(Captured) + Send + 'static,
    ) -> Self {
        Watched::around(
            inner,
            Capture {
                captured: Captured::default(),
                limit,
                on_done: Some(Box::new(on_done)),
            },
        )
    }
}

impl Watch for Capture {
    fn data(&mut self, data: &Bytes) {
        let c = &mut self.captured;
        c.len += data.len();
        if c.len > self.limit {
            // Not logged now, but a request's first bytes still tell whether it names itself
            // (see `Exchange::peek_request_id`).
            extend_head(&mut c.head, c.chunks.iter().chain([data]));
            c.overflow = true;
            c.chunks.clear();
        } else if !c.overflow {
            c.chunks.push(data.clone());
        }
    }

    fn trailers(&mut self, trailers: &HeaderMap) {
        self.captured.trailers = Some(trailers.clone());
    }

    fn done(&mut self, ended: bool) {
        self.captured.complete = ended;
        if let Some(on_done) = self.on_done.take() {
            on_done(std::mem::take(&mut self.captured));
        }
    }
}

/// Serves one client connection (cleartext or TLS) until it ends or the graceful shutdown
/// that `watcher` belongs to closes it.
async fn serve_client<I>(
    io: I,
    proxy: Arc<Proxy>,
    builder: hyper::server::conn::http2::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let proxy = proxy.clone();
        async move { Ok::<_, Infallible>(proxy.handle(request).await) }
    });
    if let Err(err) = watcher
        .watch(builder.serve_connection(TokioIo::new(io), service))
        .await
    {
        tracing::debug!(%peer, %err, "client connection ended with an error");
    }
}

/// What serves the connections a listener accepts (past TLS, when it is on): the gRPC proxy's
/// HTTP/2, or the REST proxy's HTTP/1.1 and HTTP/2.
pub(crate) trait Connections: Clone + Send + 'static {
    /// Serves one connection until it ends or the graceful shutdown `watcher` belongs to
    /// closes it.
    fn serve<I>(
        self,
        io: I,
        watcher: hyper_util::server::graceful::Watcher,
        peer: SocketAddr,
    ) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;

    /// Where TLS handshake failures are counted.
    fn metrics(&self) -> &Metrics;

    /// The TLS acceptor for a new connection (they differ in the protocols they offer).
    fn acceptor(tls: &crate::tls::Tls) -> tokio_rustls::TlsAcceptor {
        tls.acceptor()
    }
}

#[derive(Clone)]
struct GrpcConnections {
    proxy: Arc<Proxy>,
    builder: hyper::server::conn::http2::Builder<TokioExecutor>,
}

impl Connections for GrpcConnections {
    fn serve<I>(
        self,
        io: I,
        watcher: hyper_util::server::graceful::Watcher,
        peer: SocketAddr,
    ) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        serve_client(io, self.proxy, self.builder, watcher, peer)
    }

    fn metrics(&self) -> &Metrics {
        &self.proxy.metrics
    }
}

/// Serves the proxy on `listener` (over TLS with `tls`) until `shutdown`, then stops accepting
/// and lets the calls in flight finish for up to `drain`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<crate::tls::Tls>>,
    proxy: Arc<Proxy>,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_stream_window_size(STREAM_WINDOW)
        .max_frame_size(1 << 20)
        .max_header_list_size(HEADER_LIST_BYTES)
        // The client gets the model server's headers, not the proxy's clock.
        .auto_date_header(false);
    let connections = GrpcConnections { proxy, builder };
    accept_loop(listener, tls, connections, shutdown, drain).await;
}

/// Accepts connections on `listener` for `connections` (over TLS with `tls`) until
/// `shutdown`, then stops accepting and lets the calls in flight finish for up to `drain`.
pub(crate) async fn accept_loop<C: Connections>(
    listener: TcpListener,
    tls: Option<Arc<crate::tls::Tls>>,
    connections: C,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer): (_, SocketAddr) = match accepted {
            Ok(a) => a,
            Err(err) => {
                // Out of file descriptors and the like: back off rather than spin.
                tracing::warn!(%err, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (connections, watcher) = (connections.clone(), graceful.watcher());
        let Some(tls) = &tls else {
            tokio::spawn(connections.serve(stream, watcher, peer));
            continue;
        };
        // The handshake runs in the connection's task, so that a slow or silent client holds
        // up neither the accept loop nor anyone else.
        let acceptor = C::acceptor(tls);
        tokio::spawn(async move {
            let handshake =
                tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            match handshake {
                Ok(Ok(stream)) => connections.serve(stream, watcher, peer).await,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, %err, "TLS handshake failed");
                    connections.metrics().tls_handshake_failed("error");
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    connections.metrics().tls_handshake_failed("timeout");
                }
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all client calls finished"),
        _ = tokio::time::sleep(drain) => {
            tracing::warn!(?drain, "calls still in flight after the drain timeout; closing them");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gRPC-framed ModelInferRequest for `model` with the `id` given.
    fn framed_request(model: &str, id: &str) -> Bytes {
        let message = featurelog_schemas::inference::ModelInferRequest {
            model_name: model.into(),
            id: id.into(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut body = vec![0u8];
        body.extend((message.len() as u32).to_be_bytes());
        body.extend(message);
        Bytes::from(body)
    }

    /// The taps of a call are dropped by different tasks, so the response's can be done
    /// before the request's (a CI run lost a request's record that way): the call is handed to
    /// the publisher once the request's tap is done. A request cut short after its response is
    /// counted as incomplete, unless it is a gRPC request that holds its whole message (the
    /// model server answered it and reset the stream before the caller's end came).
    #[tokio::test]
    async fn a_call_whose_response_is_done_before_its_request_is_still_handed_over() {
        use crate::config::PublishConfig;
        let (publisher, metrics, _dir) =
            crate::publisher::tests::unconnected(&PublishConfig::default());
        let publisher = Arc::new(publisher);
        // A model the allow list does not name: handed over, the publisher counts it skipped.
        let message = framed_request("other", "r");
        let half = message.slice(..message.len() / 2);
        type Request = UnsyncBoxBody<Bytes, BoxError>;
        let whole: Request = http_body_util::Full::new(message.clone())
            .map_err(|e| match e {})
            .boxed_unsync();
        // Its one frame, then nothing more: the stream of a call the model server answered and
        // reset before the caller's end of stream came.
        let open = |b: &Bytes| -> Request {
            Frames(vec![Ok(Frame::data(b.clone()))], false).boxed_unsync()
        };
        // (gRPC, request body, polled to its end, handed over)
        let cases = [
            (false, whole, true, true),
            (false, open(&message), false, false),
            (true, open(&message), false, true),
            (true, open(&half), false, false),
        ];
        let (mut handed, mut incomplete) = (0, 0);
        for (grpc, body, to_the_end, handed_over) in cases {
            let exchange = Exchange::new(&publisher);
            let exchange = Arc::new(if grpc { exchange.grpc() } else { exchange });
            let mut request = exchange.tap(body, 1 << 20);
            let response = Captured {
                complete: true,
                ..Captured::default()
            };
            exchange.finish(
                response,
                metrics.clone(),
                publisher.clone(),
                ("model_infer", "ok", true),
                |request, response| CapturedCall {
                    request,
                    response,
                    ..crate::publisher::tests::sized_call(0)
                },
            );
            assert_eq!(
                metrics.skipped_count("not_allow_listed"),
                handed,
                "not before the request's tap is done"
            );
            if to_the_end {
                while request.frame().await.is_some() {}
            } else {
                // Its one frame, then the stream is reset.
                request.frame().await;
            }
            drop(request);
            handed += u64::from(handed_over);
            incomplete += u64::from(!handed_over);
            assert_eq!(metrics.skipped_count("not_allow_listed"), handed);
            assert_eq!(metrics.dropped_count("incomplete_call"), incomplete);
        }
    }

    /// A response whose request's tap is not done yet waits for it (up to
    /// `REQUEST_END_WAIT`) to learn the request's own id, rather than returning a generated one
    /// that the logged record would not carry.
    #[tokio::test(start_paused = true)]
    async fn a_response_waits_for_its_request_tap_to_learn_the_id() {
        let exchange = Arc::new(Exchange::default());
        let late = exchange.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let body = framed_request("ranker", "req-7");
            late.request_done(Captured {
                len: body.len(),
                chunks: vec![body],
                complete: true,
                ..Captured::default()
            });
        });
        exchange.request_seen().await;
        assert_eq!(
            exchange.peek_request_id(None, 1 << 20).as_deref(),
            Some("req-7")
        );

        // A request whose tap is never done: the response goes on without it.
        let never = Exchange::default();
        let started = tokio::time::Instant::now();
        never.request_seen().await;
        assert!(started.elapsed() >= REQUEST_END_WAIT);
        assert_eq!(never.peek_request_id(None, 1 << 20), None);
    }

    /// What the full decode says, `None` for an error.
    fn decoded(message: &[u8]) -> Option<String> {
        RequestHead::decode(message).ok().map(|h| h.id)
    }

    /// The quick reading where it has an answer, else the decode it falls back to.
    fn quick(message: &[u8]) -> Option<String> {
        match request_id(&mut &message[..]) {
            Ok(id) => Some(id),
            Err(Unusual) => decoded(message),
        }
    }

    #[test]
    fn the_quick_id_reading_agrees_with_the_full_decode() {
        use featurelog_schemas::inference::ModelInferRequest;
        use featurelog_schemas::inference::model_infer_request::InferInputTensor;
        let mut request = ModelInferRequest {
            model_name: "ranker".into(),
            id: "req-7".into(),
            ..Default::default()
        };
        request.inputs.push(InferInputTensor {
            name: "f0".into(),
            datatype: "FP32".into(),
            shape: vec![2],
            ..Default::default()
        });
        request.raw_input_contents.push(Bytes::from_static(&[0; 8]));
        let plain = request.encode_to_vec();
        let mut cases: Vec<Vec<u8>> = vec![plain.clone(), Vec::new()];
        // A later id wins; unknown fields of every wire type; a varint where a string belongs;
        // a group; a truncated field; invalid UTF-8 in the model name; tag 0.
        let extra: &[&[u8]] = &[
            &[0x1a, 2, b'z', b'z'],
            &[
                0x40, 0x96, 0x01, 0x49, 1, 2, 3, 4, 5, 6, 7, 8, 0x4d, 1, 2, 3, 4,
            ],
            &[0x18, 5],
            &[0x4b, 0x4c],
            &[0x1a, 9, b'x'],
            &[0x0a, 1, 0xff],
            &[0x02, 0],
            &[
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        ];
        for e in extra {
            let mut m = plain.clone();
            m.extend_from_slice(e);
            cases.push(m);
            cases.push(e.to_vec());
        }
        for case in cases {
            assert_eq!(quick(&case), decoded(&case), "{case:?}");
        }
        assert_eq!(quick(&plain).as_deref(), Some("req-7"));
        // Bytes changed at random: the id handed back to the caller (and put on the record)
        // is always the one the model server decodes, or none when it decodes none.
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let mut next = || rng.u64(..);
        let mut ids = 0;
        for _ in 0..20_000 {
            let mut m = plain.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() % m.len() as u64) as usize;
                match next() % 4 {
                    0 | 1 => m[at] = m[at].wrapping_add(1 + (next() % 3) as u8),
                    2 => m[at] = next() as u8,
                    _ => m.insert(at, next() as u8),
                }
            }
            let want = decoded(&m);
            ids += usize::from(want.is_some());
            assert_eq!(quick(&m), want, "{m:?}");
        }
        assert!(ids > 5_000, "only {ids} mutations had an id");
    }

    /// A body that yields `frames`, then, when `ends`, says it has ended (as an h2 body does
    /// after a reset too); otherwise it stays open.
    struct Frames(Vec<Result<Frame<Bytes>, BoxError>>, bool);

    impl Body for Frames {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            match (self.0.is_empty(), self.1) {
                (false, _) => Poll::Ready(Some(self.0.remove(0))),
                (true, true) => Poll::Ready(None),
                (true, false) => Poll::Pending,
            }
        }

        fn is_end_stream(&self) -> bool {
            self.1
        }
    }

    /// What a tap over `frames` hands on when polled to its end and dropped.
    async fn tapped(frames: Vec<Result<Frame<Bytes>, BoxError>>) -> Captured {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut tap = Tap::new(Frames(frames, true), 1 << 20, move |c| {
            tx.send(c).unwrap();
        });
        while let Some(Ok(_)) = tap.frame().await {}
        drop(tap);
        rx.recv().unwrap()
    }

    #[tokio::test]
    async fn a_response_cut_by_a_reset_is_not_complete() {
        let message = || Ok(Frame::data(Bytes::from_static(b"message")));
        let ended = tapped(vec![message()]).await;
        assert!(ended.complete);
        let reset = tapped(vec![message(), Err("stream reset".into())]).await;
        assert!(
            !reset.complete,
            "a reset after the message is not a finished call"
        );
    }

    #[test]
    fn a_response_without_any_grpc_status_is_not_a_success() {
        let mut headers = HeaderMap::new();
        assert_eq!(status_of(&headers), None);
        headers.insert("grpc-status", HeaderValue::from_static("0"));
        assert_eq!(status_of(&headers), Some("ok"));
        headers.insert("grpc-status", HeaderValue::from_static("13"));
        assert_eq!(status_of(&headers), Some("error"));
    }

    #[test]
    fn a_compressed_request_s_own_id_is_the_id_returned_to_the_caller() {
        let message = featurelog_schemas::inference::ModelInferRequest {
            model_name: "ranker".into(),
            id: "req-gz".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &message).unwrap();
        let gz = gz.finish().unwrap();
        let mut body = vec![1u8];
        body.extend((gz.len() as u32).to_be_bytes());
        body.extend(&gz);
        let exchange = Exchange::default();
        exchange.request_done(Captured {
            // Split across chunks, as a large body arrives.
            chunks: vec![
                Bytes::copy_from_slice(&body[..7]),
                Bytes::copy_from_slice(&body[7..]),
            ],
            len: body.len(),
            complete: true,
            ..Captured::default()
        });
        assert_eq!(
            exchange.peek_request_id(Some("gzip"), 1 << 20).as_deref(),
            Some("req-gz")
        );
        // Larger than the limit once inflated, or an encoding the publisher cannot read: no id
        // here, and no record there.
        assert_eq!(exchange.peek_request_id(Some("gzip"), 3), None);
        assert_eq!(exchange.peek_request_id(Some("snappy"), 1 << 20), None);
    }

    #[tokio::test]
    async fn a_request_past_the_size_limit_still_gives_its_id_from_its_first_bytes() {
        use featurelog_schemas::inference::ModelInferRequest;
        let body = |id: &str| {
            let mut request = ModelInferRequest {
                model_name: "ranker".into(),
                id: id.into(),
                ..Default::default()
            };
            request
                .raw_input_contents
                .push(Bytes::from(vec![7; 20_000]));
            let message = request.encode_to_vec();
            let mut body = vec![0u8];
            body.extend((message.len() as u32).to_be_bytes());
            body.extend(message);
            body
        };
        let peek = |captured: Captured| {
            let exchange = Exchange::default();
            exchange.request_done(captured);
            exchange.peek_request_id(None, 1 << 20)
        };
        for (id, split) in [("req-big", 3), ("req-big", 10), ("", 1000)] {
            let body = body(id);
            let (tx, rx) = std::sync::mpsc::channel();
            let mut tap = Tap::new(
                Frames(
                    body.chunks(split)
                        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                        .collect(),
                    true,
                ),
                100,
                move |c| tx.send(c).unwrap(),
            );
            while let Some(Ok(_)) = tap.frame().await {}
            drop(tap);
            let captured = rx.recv().unwrap();
            assert!(captured.overflow && captured.chunks.is_empty());
            assert_eq!(captured.head, body[..HEAD_BYTES]);
            assert_eq!(peek(captured).as_deref(), Some(id), "split {split}");
        }
        // Cut inside the head, or compressed: no answer (an id is generated).
        let head = body("req-big")[..12].to_vec();
        assert_eq!(head_id(&head), None);
        let mut compressed = body("req-big")[..HEAD_BYTES].to_vec();
        compressed[0] = 1;
        assert_eq!(head_id(&compressed), None);
    }

    #[test]
    fn only_an_uncompressed_message_within_the_first_chunk_is_read_in_place() {
        let framed = |flag: u8, len: u32, body: &[u8]| {
            let mut out = vec![flag];
            out.extend(len.to_be_bytes());
            out.extend_from_slice(body);
            Bytes::from(out)
        };
        let whole = framed(0, 3, b"abcde");
        assert_eq!(
            contiguous_message(&[Bytes::new(), whole]),
            Some(&b"abc"[..])
        );
        assert_eq!(contiguous_message(&[framed(1, 3, b"abc")]), None);
        let split = [framed(0, 5, b"abc"), Bytes::from_static(b"de")];
        assert_eq!(contiguous_message(&split), None);
        assert_eq!(contiguous_message(&[Bytes::from_static(&[0, 0])]), None);
    }

    #[test]
    fn the_request_id_is_read_across_chunk_boundaries() {
        let head = RequestHead {
            model_name: "ranker".into(),
            model_version: String::new(),
            id: "req-42".into(),
        };
        let message = head.encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend((message.len() as u32).to_be_bytes());
        framed.extend(&message);
        let whole = Bytes::copy_from_slice(&framed);
        let mut layouts = vec![vec![whole.clone()], vec![Bytes::new(), whole, Bytes::new()]];
        for split in 1..framed.len() {
            let (a, b) = framed.split_at(split);
            layouts.push(vec![
                Bytes::copy_from_slice(a),
                Bytes::new(),
                Bytes::copy_from_slice(b),
            ]);
        }
        for (layout, chunks) in layouts.into_iter().enumerate() {
            let exchange = Exchange::default();
            exchange.request_done(Captured {
                chunks,
                len: framed.len(),
                overflow: false,
                head: Vec::new(),
                complete: true,
                trailers: None,
            });
            assert_eq!(
                exchange.peek_request_id(None, 1 << 20).as_deref(),
                Some("req-42"),
                "layout {layout}"
            );
        }
    }
}
