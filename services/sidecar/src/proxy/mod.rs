//! The gRPC proxy: every HTTP/2 request is forwarded to the model server as it came, byte for
//! byte, and the upstream's response (headers, body, trailers, errors) goes back the same way.
//! Working below gRPC means any method passes, Triton's extensions and health checks included,
//! with no re-encoding; deadlines travel in `grpc-timeout`, and a caller that cancels resets its
//! stream, which drops our upstream request and so resets the upstream stream too.
//!
//! For `ModelInfer` in log mode, both bodies are also tapped: each chunk is kept by reference
//! (a `Bytes` clone, no copy) and, once the call has finished with `grpc-status: 0`, the chunks go
//! to the [`Publisher`](crate::publish::Publisher), which decodes them on its own threads. The
//! only work added to the call itself is the tap and, when the caller sent no `x-request-id`,
//! peeking at the request's `id` field so a generated id can be returned in the response
//! metadata. Triton's `ModelStreamInfer` is cut into messages as it passes and logged per
//! inference (`stream`).
//!
//! - `grpc`: the gRPC proxy's calls and connections;
//! - `exchange`: the two sides of a logged call brought together and handed to the publisher;
//! - `request_id`: the id a call is logged under, read on the call's path;
//! - `tap`: bodies passed through with what they carry watched or kept;
//! - `stream`: `ModelStreamInfer` cut into messages and logged per inference;
//! - [`rest`]: the same proxy for the protocol's HTTP/REST binding;
//! - [`tls`]: TLS on the client port and to the model server, reloaded when renewed;
//! - here: what both proxies share, from the upstream they forward to to the accept loop.

mod exchange;
mod grpc;
pub(crate) mod request_id;
pub mod rest;
pub(crate) mod stream;
pub(crate) mod tap;
#[cfg(test)]
mod tests;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub use grpc::{Proxy, serve};
pub use tap::Captured;

/// The body type both directions are boxed into.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;
/// Errors of a body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

const REQUEST_ID: &str = "x-request-id";

/// Defined with the config it bounds (`max-request-header-bytes`), so that the config does not
/// depend on the proxy.
pub(crate) use crate::config::HEADER_LIST_BYTES;

/// The HTTP/2 flow-control windows of every connection the sidecar makes or accepts: a
/// connection's is the bytes it may hold unread across its calls (see `Proxy::new`).
pub(crate) const CONNECTION_WINDOW: u32 = 16 << 20;
/// See [`CONNECTION_WINDOW`]: one call's share.
pub(crate) const STREAM_WINDOW: u32 = 1 << 20;

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

pub(crate) fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
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
    fn acceptor(tls: &tls::Tls) -> tokio_rustls::TlsAcceptor {
        tls.acceptor()
    }
}

/// Accepts connections on `listener` for `connections` (over TLS with `tls`) until
/// `shutdown`, then stops accepting and lets the calls in flight finish for up to `drain`.
pub(crate) async fn accept_loop<C: Connections>(
    listener: TcpListener,
    tls: Option<Arc<tls::Tls>>,
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
                tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
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
