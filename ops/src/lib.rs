//! The operator's HTTP endpoint of every featurelog service: `/metrics` (Prometheus text
//! format, rendered by the service), `/healthz` (the process is up) and `/readyz` (the service
//! does its work; 503 while starting or shutting down). Also the layering of every service's
//! configuration: a TOML file under environment overrides.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A TOML config with `PREFIX` + `SECTION__KEY` environment overrides on top: sections are
/// separated by `__` and single underscores stand for dashes, so
/// `FEATURELOG_SIDECAR__PUBLISH__QUEUE_CAPACITY=5` sets `publish.queue-capacity`. The
/// environment is passed in (not read here) so that tests stay hermetic.
pub fn layered_config(
    text: &str,
    prefix: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> figment::Figment {
    use figment::providers::{Format, Serialized, Toml};
    let mut figment = figment::Figment::new().merge(Toml::string(text));
    for (key, value) in env {
        let Some(rest) = key.strip_prefix(prefix) else {
            continue;
        };
        let dotted = rest
            .to_ascii_lowercase()
            .replace("__", ".")
            .replace('_', "-");
        let parsed: figment::value::Value = value
            .parse::<figment::value::Value>()
            .unwrap_or_else(|_| value.clone().into());
        figment = figment.merge(Serialized::global(&dotted, parsed));
    }
    figment
}

/// Renders the service's metrics in the text exposition format.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves the endpoint until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    metrics: Render,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(err) => {
                    tracing::warn!(%err, "metrics endpoint: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (metrics, ready) = (metrics.clone(), ready.clone());
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let response = route(request.uri().path(), &metrics, &ready);
            async move { Ok::<_, Infallible>(response) }
        });
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn route(path: &str, metrics: &Render, ready: &AtomicBool) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" if ready.load(Ordering::SeqCst) => {
            (StatusCode::OK, "text/plain", "ready\n".to_owned())
        }
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics, /healthz or /readyz\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        response.headers_mut().insert("content-type", v);
    }
    response
}
