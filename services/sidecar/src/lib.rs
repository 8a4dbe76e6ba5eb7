//! The featurelog sidecar: a gRPC proxy beside an Open Inference Protocol model server that
//! forwards every call unchanged and publishes the allow-listed features of each inference to
//! Kafka as a `featurelog.v1.FeatureLog`, keyed by request id.
//!
//! - [`config`]: the config file and its environment overrides.
//! - [`allowlist`]: what is logged, per model; hot-reloaded.
//! - [`proxy`]: the byte-for-byte HTTP/2 proxy and its tap on ModelInfer; [`proxy::rest`]: the
//!   same for the protocol's HTTP/REST binding; [`proxy::tls`]: TLS on the client port, its
//!   certificate reloaded when renewed.
//! - [`publish`]: the bounded queue, decoding threads and producer, the adaptive fraction
//!   logged while the brokers fail, and the dead letters of calls that cannot be logged.
//! - [`extract`]: the captured bodies read and one call made into one record;
//!   [`extract::rest_json`] reads the REST bodies, [`extract::direct`] is the fast path for raw
//!   numeric tensors.
//! - [`metrics`]: what an operator sees (served by `featurelog-ops`); [`reason`]: every value
//!   its call and dead-letter labels take.
//!
//! The stages depend one way: `proxy` hands calls to `publish`, which reads them with
//! `extract`; `extract` depends on neither.
//!
//! [`start`] runs it all; the returned [`Sidecar`] shuts it down in order: stop accepting,
//! finish the calls in flight, drain the queue, flush the producer.

pub mod allowlist;
pub mod config;
mod error;
pub mod extract;
pub mod metrics;
#[cfg(test)]
mod proptests;
pub mod proxy;
pub mod publish;
pub mod reason;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::{Mode, SidecarConfig};
pub use error::SidecarError;

use crate::allowlist::AllowListHandle;
use crate::metrics::Metrics;
use crate::proxy::{rest, tls};
use crate::publish::Publisher;

/// A running sidecar.
pub struct Sidecar {
    /// Where clients connect.
    pub local_addr: SocketAddr,
    /// Where REST clients connect, when `[rest]` is set.
    pub rest_addr: Option<SocketAddr>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    /// The allow list in force (log mode only).
    pub allow_list: Option<AllowListHandle>,
    config: SidecarConfig,
    shutdown: CancellationToken,
    proxy_task: JoinHandle<()>,
    rest_task: Option<JoinHandle<()>>,
    publisher: Option<Arc<Publisher>>,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, SidecarError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| SidecarError::Bind { addr, source })
}

/// Starts the sidecar: loads the allow list, connects the producer, binds both ports. Returns
/// once it accepts calls. Cancelling `shutdown` stops accepting; call [`Sidecar::wait`] to
/// finish the shutdown.
pub async fn start(
    config: SidecarConfig,
    shutdown: CancellationToken,
) -> Result<Sidecar, SidecarError> {
    let metrics = Arc::new(Metrics::new());
    let (allow_list, publisher) = match (config.mode, &config.kafka) {
        (Mode::Log, Some(kafka)) => {
            let allow_list = AllowListHandle::load(&config.allow_list)?;
            metrics.allow_list_reloaded(&allow_list.current().version, true);
            tokio::spawn(allow_list.clone().watch(
                config.allow_list_reload_interval,
                metrics.clone(),
                shutdown.clone(),
            ));
            let publisher = Publisher::start(
                kafka,
                &config.publish,
                allow_list.clone(),
                metrics.clone(),
                config.instance_name(),
                shutdown.clone(),
            )?;
            (Some(allow_list), Some(Arc::new(publisher)))
        }
        _ => (None, None),
    };
    let upstream_tls = match &config.upstream_tls {
        // Read only when a model server is reached over TLS: a cleartext upstream never uses them.
        Some(t) if config.https_upstreams() => {
            let loaded =
                Arc::new(
                    tls::UpstreamTls::load(t).map_err(|message| SidecarError::Config {
                        path: "upstream-tls".into(),
                        message,
                    })?,
                );
            metrics.upstream_tls_reloaded(true);
            tokio::spawn(loaded.clone().watch(
                config.allow_list_reload_interval,
                metrics.clone(),
                shutdown.clone(),
            ));
            Some(loaded)
        }
        _ => None,
    };
    let upstream_tls = |url: &str, what: &str| {
        tls::upstream_client_config(url, upstream_tls.as_deref()).map_err(|message| {
            SidecarError::Config {
                path: what.into(),
                message,
            }
        })
    };
    let proxy = proxy::Proxy::new(
        &config.upstream,
        upstream_tls(&config.upstream, "upstream-tls")?,
        metrics.clone(),
        publisher.clone(),
        config.publish.max_message_bytes,
        config.max_request_header_bytes,
    )
    .map_err(|message| SidecarError::Config {
        path: "upstream".into(),
        message,
    })?;
    let tls = match &config.tls {
        Some(t) => {
            let tls = Arc::new(tls::Tls::load(t).map_err(|message| SidecarError::Config {
                path: "tls".into(),
                message,
            })?);
            metrics.tls_reloaded(true);
            tokio::spawn(tls.clone().watch(
                config.allow_list_reload_interval,
                metrics.clone(),
                shutdown.clone(),
            ));
            Some(tls)
        }
        None => None,
    };
    let rest = match &config.rest {
        Some(r) => {
            let proxy = rest::RestProxy::new(
                &r.upstream,
                upstream_tls(&r.upstream, "upstream-tls")?,
                metrics.clone(),
                publisher.clone(),
                config.publish.max_message_bytes,
            )
            .map_err(|message| SidecarError::Config {
                path: "rest.upstream".into(),
                message,
            })?;
            Some((Arc::new(proxy), bind(r.listen).await?))
        }
        None => None,
    };
    let listener = bind(config.listen).await?;
    let metrics_listener = bind(config.metrics.listen).await?;
    let local_addr = listener.local_addr().map_err(|source| SidecarError::Bind {
        addr: config.listen,
        source,
    })?;
    let metrics_addr = metrics_listener
        .local_addr()
        .map_err(|source| SidecarError::Bind {
            addr: config.metrics.listen,
            source,
        })?;
    // The metrics endpoint outlives the proxy's drain so the drain itself can be watched; it
    // stops with the process.
    let render_metrics = metrics.clone();
    tokio::spawn(featurelog_ops::serve(
        metrics_listener,
        Arc::new(move || render_metrics.render()),
        // Readiness fails the moment the shutdown starts, whoever cancels the token and whether
        // or not `wait` is running yet: the listener stops accepting then, and Kubernetes must
        // stop routing calls here. It answers once the sidecar accepts calls, as now.
        featurelog_ops::Readiness::ready(shutdown.clone()),
        CancellationToken::new(),
    ));
    let mut rest_addr = None;
    let rest_task = match rest {
        Some((proxy, listener)) => {
            rest_addr = listener.local_addr().ok();
            Some(tokio::spawn(rest::serve(
                listener,
                tls.clone(),
                proxy,
                shutdown.clone(),
                config.shutdown_timeout,
            )))
        }
        None => None,
    };
    let proxy_task = tokio::spawn(proxy::serve(
        listener,
        tls,
        Arc::new(proxy),
        shutdown.clone(),
        config.shutdown_timeout,
    ));
    tracing::info!(
        listen = %local_addr,
        tls = config.tls.is_some(),
        upstream = %config.upstream,
        rest = ?rest_addr,
        mode = ?config.mode,
        metrics = %metrics_addr,
        allow_list = ?allow_list.as_ref().map(|a| a.current().version.clone()),
        "sidecar started"
    );
    Ok(Sidecar {
        local_addr,
        rest_addr,
        metrics_addr,
        metrics,
        allow_list,
        config,
        shutdown,
        proxy_task,
        rest_task,
        publisher,
    })
}

impl Sidecar {
    /// Asks the sidecar to stop (the same as cancelling the token given to [`start`]).
    pub fn stop(&self) {
        self.shutdown.cancel();
    }

    /// Waits for the shutdown: the proxy drains its calls, then the publisher drains its queue
    /// and flushes the producer, each within the configured shutdown timeout. Returns the number
    /// of records that Kafka had not acknowledged when the flush gave up (counted as dropped,
    /// `delivery_failed`, by then).
    pub async fn wait(self) -> usize {
        self.shutdown.cancelled().await;
        let _ = self.proxy_task.await;
        if let Some(rest) = self.rest_task {
            let _ = rest.await;
        }
        let Some(publisher) = self.publisher else {
            return 0;
        };
        // Connections that outlived the drain may still hold the publisher: what is queued
        // is flushed all the same, and their calls count as `shutting_down`.
        let left = publisher.shutdown(self.config.shutdown_timeout).await;
        if left > 0 {
            tracing::warn!(left, "records not acknowledged by Kafka at shutdown");
        }
        left
    }
}
