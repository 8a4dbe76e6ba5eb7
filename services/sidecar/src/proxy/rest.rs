//! The REST proxy: the Open Inference Protocol's HTTP binding, beside the gRPC one. Every HTTP
//! request is forwarded to the model server's HTTP port as it came (hop-by-hop headers aside,
//! as any HTTP proxy must), and the response goes back the same way: health, metadata, model
//! repository and any extension pass through.
//!
//! `POST /v2/models/{model}[/versions/{version}]/infer` in log mode is tapped like gRPC's
//! ModelInfer: the bodies' chunks are kept by reference and, once the model server has
//! answered 2xx, go to the [`Publisher`], which reads the JSON (and binary tensor data) on its
//! own threads ([`crate::extract::rest_json`]) under the same allow list. The request id is the body's
//! `id`, else the `x-request-id` header, else one the proxy generates and returns in the
//! response's `x-request-id` header.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::extract::rest_json::HEADER_LENGTH;
use crate::metrics::Metrics;
use crate::publish::{CapturedCall, Publisher, RestCall};

use super::exchange::{Exchange, id_or_generated};
use super::tap::{Captured, Tap};
use super::{BoxError, Connections, ProxyBody, Upstream, connector, header_str};

const REQUEST_ID: &str = "x-request-id";

/// Headers that belong to one hop (RFC 9110, 7.6.1): never forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// What the REST proxy needs to forward calls and, optionally, log them.
pub struct RestProxy {
    client: Client<HttpsConnector<HttpConnector>, ProxyBody>,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    publisher: Option<Arc<Publisher>>,
    max_message_bytes: usize,
}

/// The model and version of an inference call of the REST binding: `POST` to
/// `/v2/models/{model}/infer` or `/v2/models/{model}/versions/{version}/infer`.
pub fn infer_target(method: &Method, path: &str) -> Option<(String, String)> {
    if method != Method::POST {
        return None;
    }
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let (model, version) = match rest.split_once("/versions/") {
        Some((model, version)) => (model, version),
        None => (rest, ""),
    };
    if model.is_empty() || model.contains('/') || version.contains('/') {
        return None;
    }
    Some((percent_decode(model)?, percent_decode(version)?))
}

/// A path segment with its `%XX` escapes decoded; `None` when it is not valid UTF-8 then.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h)? * 16 + hex(l)?) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers that the Connection header names are hop-by-hop too.
    let named: Vec<String> = headers
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        headers.remove(name);
    }
}

fn header_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

impl RestProxy {
    /// A proxy to `upstream` (`http://host:port`, or `https://` with `tls`); with a publisher,
    /// inference calls are logged.
    pub fn new(
        upstream: &str,
        tls: rustls::ClientConfig,
        metrics: Arc<Metrics>,
        publisher: Option<Arc<Publisher>>,
        max_message_bytes: usize,
    ) -> Result<Self, String> {
        let upstream = Upstream::parse(upstream, "rest.upstream")?;
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector(tls, false));
        Ok(Self {
            client,
            upstream,
            metrics,
            publisher,
            max_message_bytes,
        })
    }

    fn count(&self, method: &'static str, outcome: &'static str) {
        self.metrics.count_call(method, outcome);
    }

    /// The protocol's error response (`{"error": ...}`) for a model server that could not
    /// be reached.
    fn bad_gateway(&self, method: &'static str, why: &str) -> Response<ProxyBody> {
        self.count(method, "upstream_unavailable");
        tracing::warn!(upstream = %self.upstream, "REST upstream call failed: {why}");
        let body = serde_json::json!({
            "error": format!("featurelog sidecar: upstream unavailable: {why}")
        })
        .to_string();
        let mut response = Response::new(
            http_body_util::Full::new(Bytes::from(body))
                .map_err(|never: Infallible| match never {})
                .boxed_unsync(),
        );
        *response.status_mut() = StatusCode::BAD_GATEWAY;
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        response
    }

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let served_at = SystemTime::now();
        let target = infer_target(request.method(), request.uri().path());
        let method = if target.is_some() {
            "rest_infer"
        } else {
            "rest_other"
        };
        let (mut parts, body) = request.into_parts();
        parts.uri = match self.upstream.uri(&parts.uri) {
            Ok(uri) => uri,
            Err(err) => return self.bad_gateway(method, &format!("bad request path: {err}")),
        };
        // The upstream hop is HTTP/1.1 whatever the client spoke.
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);

        let log = match (&self.publisher, target) {
            (Some(publisher), Some(target)) => Some((publisher.clone(), target)),
            _ => None,
        };
        let Some((publisher, (model, version))) = log else {
            let body = body.map_err(BoxError::from).boxed_unsync();
            return match self.client.request(Request::from_parts(parts, body)).await {
                Ok(response) => {
                    let outcome = if response.status().is_success() {
                        "ok"
                    } else {
                        "error"
                    };
                    self.count(method, outcome);
                    let (mut parts, body) = response.into_parts();
                    strip_hop_by_hop(&mut parts.headers);
                    Response::from_parts(parts, body.map_err(BoxError::from).boxed_unsync())
                }
                Err(err) => self.bad_gateway(method, &err.to_string()),
            };
        };

        let logged_headers = publisher.capture_headers(&parts.headers);
        let header_id = header_str(&parts.headers, REQUEST_ID).filter(|v| !v.is_empty());
        let request_encoding = header_str(&parts.headers, "content-encoding");
        let request_header_length = header_length(&parts.headers);
        let exchange = Arc::new(Exchange::new(&publisher));
        let request_tap = exchange.tap(body, self.max_message_bytes);
        let upstream_started = Instant::now();
        let response = self
            .client
            .request(Request::from_parts(parts, request_tap.boxed_unsync()))
            .await;
        let upstream_time = upstream_started.elapsed();
        let response = match response {
            Ok(r) => r,
            Err(err) => return self.bad_gateway(method, &err.to_string()),
        };
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);

        // Whose id is it? The body's own `id` first, then the caller's header, then ours,
        // which the caller gets back so it can tag its impressions with it.
        let found = match header_id {
            Some(id) => Some(id),
            None => {
                // An error is not logged: it need not wait for an id (see proxy.rs).
                if parts.status.is_success() {
                    exchange.request_seen().await;
                }
                self.peek_id(
                    &exchange,
                    request_encoding.as_deref(),
                    request_header_length,
                )
            }
        };
        let fallback_id = id_or_generated(found, &mut parts.headers);
        let ok = parts.status.is_success();
        let response_encoding = header_str(&parts.headers, "content-encoding");
        let response_header_length = header_length(&parts.headers);
        let metrics = self.metrics.clone();
        let response_tap = Tap::new(body, self.max_message_bytes, move |captured: Captured| {
            let outcome = if ok && captured.complete {
                "ok"
            } else {
                "error"
            };
            let how = ("rest_infer", outcome, ok);
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
                    rest: Some(RestCall {
                        model,
                        version,
                        request_header_length,
                        response_header_length,
                    }),
                },
            );
        });
        let added = started.elapsed().saturating_sub(upstream_time);
        self.metrics.added_latency.observe(added.as_secs_f64());
        Response::from_parts(parts, response_tap.boxed_unsync())
    }

    /// The request body's `id`, once the whole body has been seen (the model server has
    /// answered, so it nearly always has); `None` otherwise or when it has none.
    fn peek_id(
        &self,
        exchange: &Exchange,
        encoding: Option<&str>,
        header_length: Option<usize>,
    ) -> Option<String> {
        let chunks = exchange
            .whole_request(|captured| (!captured.overflow).then(|| captured.chunks.clone()))
            .flatten()?;
        let body = crate::extract::framing::inflate_http(
            chunks,
            encoding,
            self.max_message_bytes,
            &mut BytesMut::new(),
        )
        .ok()?;
        crate::extract::rest_json::peek_id(&body, header_length)
    }
}

#[derive(Clone)]
struct RestConnections {
    proxy: Arc<RestProxy>,
    builder: hyper_util::server::conn::auto::Builder<TokioExecutor>,
}

impl Connections for RestConnections {
    async fn serve<I>(self, io: I, watcher: hyper_util::server::graceful::Watcher, peer: SocketAddr)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let proxy = self.proxy;
        let service = hyper::service::service_fn(move |request| {
            let proxy = proxy.clone();
            async move { Ok::<_, Infallible>(proxy.handle(request).await) }
        });
        let connection = self
            .builder
            .serve_connection(TokioIo::new(io), service)
            .into_owned();
        if let Err(err) = watcher.watch(connection).await {
            tracing::debug!(%peer, %err, "REST client connection ended with an error");
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.proxy.metrics
    }

    fn acceptor(tls: &super::tls::Tls) -> tokio_rustls::TlsAcceptor {
        tls.rest_acceptor()
    }
}

/// Serves the REST proxy on `listener` (over TLS with `tls`) until `shutdown`, then stops
/// accepting and lets the calls in flight finish for up to `drain`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<super::tls::Tls>>,
    proxy: Arc<RestProxy>,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // The client gets the model server's headers, not the proxy's clock.
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .auto_date_header(false);
    builder
        .http2()
        .timer(TokioTimer::new())
        .initial_connection_window_size(super::CONNECTION_WINDOW)
        .initial_stream_window_size(super::STREAM_WINDOW)
        .max_header_list_size(super::HEADER_LIST_BYTES)
        .auto_date_header(false);
    let connections = RestConnections { proxy, builder };
    super::accept_loop(listener, tls, connections, shutdown, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_posts_to_a_models_infer_path_are_inference_calls() {
        let post = Method::POST;
        let t = |path| infer_target(&post, path);
        assert_eq!(
            t("/v2/models/ranker/infer"),
            Some(("ranker".into(), "".into()))
        );
        assert_eq!(
            t("/v2/models/ranker/versions/3/infer"),
            Some(("ranker".into(), "3".into()))
        );
        assert_eq!(
            t("/v2/models/my%20model/infer"),
            Some(("my model".into(), "".into()))
        );
        for other in [
            "/v2/models/ranker",
            "/v2/models/ranker/ready",
            "/v2/models//infer",
            "/v2/models/a/b/infer",
            "/v2/health/ready",
            "/v1/models/ranker:predict",
            "/v2/models/ranker/versions/3/infer/x",
        ] {
            assert_eq!(t(other), None, "{other}");
        }
        assert_eq!(infer_target(&Method::GET, "/v2/models/ranker/infer"), None);
        assert_eq!(percent_decode("%ff"), None, "not UTF-8");
        assert_eq!(percent_decode("a%2"), Some("a%2".into()), "not an escape");
    }

    #[test]
    fn hop_by_hop_headers_stay_on_their_hop() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("x-request-id", "r"),
            ("content-type", "application/json"),
        ] {
            h.insert(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str().to_owned()).collect();
        left.sort();
        assert_eq!(left, ["content-type", "x-request-id"]);
    }
}
