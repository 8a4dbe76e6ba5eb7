//! `featurelog sidecar` and `featurelog model-server`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use featurelog_sidecar::SidecarConfig;

#[derive(Debug, clap::Args)]
pub struct SidecarArgs {
    /// The sidecar's config file (TOML); see services/sidecar/sidecar.example.toml.
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    config: Option<PathBuf>,
    /// Validate this config file, its allow list and TLS files, print the result and exit (0
    /// valid, 2 not).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
}

/// Loads the TLS files `config` names (client port and model server), if any, as the start
/// would.
fn check_tls(config: &SidecarConfig, path: &std::path::Path) -> anyhow::Result<()> {
    if let Some(tls) = &config.tls {
        featurelog_sidecar::proxy::tls::Tls::load(tls)
            .map_err(|e| anyhow::anyhow!("{}: [tls]: {e}", path.display()))?;
    }
    let upstream_tls = match &config.upstream_tls {
        Some(t) if config.https_upstreams() => Some(
            featurelog_sidecar::proxy::tls::UpstreamTls::load(t)
                .map_err(|e| anyhow::anyhow!("{}: [upstream-tls]: {e}", path.display()))?,
        ),
        _ => None,
    };
    let upstreams =
        std::iter::once(&config.upstream).chain(config.rest.as_ref().map(|r| &r.upstream));
    for url in upstreams {
        featurelog_sidecar::proxy::tls::upstream_client_config(url, upstream_tls.as_ref())
            .map_err(|e| anyhow::anyhow!("{}: [upstream-tls]: {e}", path.display()))?;
    }
    Ok(())
}

/// Validates a config, the allow list and the TLS files it names.
pub fn check(path: &std::path::Path) -> anyhow::Result<SidecarConfig> {
    let config = SidecarConfig::load(path)?;
    check_tls(&config, path)?;
    if config.mode == featurelog_sidecar::Mode::Log {
        let list = featurelog_sidecar::allowlist::AllowListHandle::load(&config.allow_list)?;
        let current = list.current();
        println!(
            "{}: valid; allow list {} ({}) logs {} model entr{}",
            path.display(),
            config.allow_list.display(),
            current.version,
            current.models.len(),
            if current.models.len() == 1 {
                "y"
            } else {
                "ies"
            }
        );
    } else {
        println!("{}: valid (pass-through mode)", path.display());
    }
    Ok(config)
}

pub fn run(args: SidecarArgs) -> Result<(), crate::Failure> {
    if let Some(path) = args.check_config {
        return check(&path).map(drop).map_err(crate::Failure::Config);
    }
    let path = args
        .config
        .context("--config is required")
        .map_err(crate::Failure::Config)?;
    let config = SidecarConfig::load(&path)
        .map_err(anyhow::Error::from)
        .map_err(crate::Failure::Config)?;
    // The same checks as --check-config, before anything starts: a missing or broken allow
    // list or TLS file is a configuration error (exit 2), not a failure of the running service.
    if config.mode == featurelog_sidecar::Mode::Log {
        featurelog_sidecar::allowlist::AllowListHandle::load(&config.allow_list)
            .map_err(anyhow::Error::from)
            .map_err(crate::Failure::Config)?;
    }
    check_tls(&config, &path).map_err(crate::Failure::Config)?;
    let runtime = crate::runtime_with(Some(config.worker_threads))?;
    let result = runtime.block_on(async move {
        let shutdown = crate::signals::shutdown_on_signals()?;
        let sidecar = featurelog_sidecar::start(config, shutdown).await?;
        let left = sidecar.wait().await;
        tracing::info!(unacknowledged = left, "sidecar stopped");
        Ok::<_, anyhow::Error>(())
    });
    // The flush finished (or gave up) inside `block_on`: nothing left may hold the exit.
    runtime.shutdown_background();
    result?;
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct ModelServerArgs {
    /// Address to serve the Open Inference Protocol on.
    #[arg(long, default_value = "127.0.0.1:9001")]
    listen: SocketAddr,
    /// Model names to serve (repeatable); each is the same reference recommender.
    #[arg(long = "model", default_values = ["ranker"])]
    models: Vec<String>,
}

pub fn run_model_server(args: ModelServerArgs) -> Result<(), crate::Failure> {
    crate::runtime()?.block_on(async move {
        let shutdown = crate::signals::shutdown_on_signals()?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        tracing::info!(listen = %args.listen, models = ?args.models, "reference model server started");
        let server = featurelog_model_server::ReferenceModelServer::new(args.models);
        featurelog_model_server::serve(server, listener, async move {
            shutdown.cancelled().await;
        })
        .await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}
