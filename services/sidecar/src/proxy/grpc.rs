//! The gRPC proxy's calls: each HTTP/2 request forwarded to the model server as it came, and in
//! log mode a `ModelInfer` call tapped on both sides and a `ModelStreamInfer` call cut into
//! messages; and the HTTP/2 connections it serves.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::publish::{CapturedCall, Publisher};

use super::exchange::{Exchange, id_or_generated};
use super::stream::{StreamLog, messages};
use super::tap::{Captured, Tap};
use super::{
    BoxError, CONNECTION_WINDOW, Connections, HEADER_LIST_BYTES, ProxyBody, REQUEST_ID,
    STREAM_WINDOW, Upstream, accept_loop, connector, header_str,
};

const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
/// Triton's streaming extension (see `stream`).
const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

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

/// `ok` for grpc-status 0, `error` for any other status; a response with no status yet (its
/// trailers still to come) counts as `ok` until they say otherwise.
fn outcome_of(headers: &HeaderMap) -> &'static str {
    status_of(headers).unwrap_or("ok")
}

/// `ok` for grpc-status 0, `error` for any other, `None` when there is no grpc-status.
pub(super) fn status_of(headers: &HeaderMap) -> Option<&'static str> {
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
    tls: Option<Arc<super::tls::Tls>>,
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
