//! TLS on the client port: the certificate, key and optional client CA of `[tls]`, loaded at
//! start (a pair that does not load stops the start with what is wrong) and reloaded when the
//! files change, as certificate managers renew them in place. A change that does not load is
//! refused with a log line and the certificate in force stays, as with the allow list.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::{TlsConfig, UpstreamTlsConfig};
use crate::metrics::Metrics;

/// The TLS client configuration for the model server at `url`: for `https://`, trusting
/// `upstream-tls.ca` (the system's roots when it is not set) and presenting its client
/// certificate if one is set; for `http://`, one that is never used (the connector passes
/// cleartext through), so that no roots are loaded for it.
pub fn upstream_client_config(
    url: &str,
    config: Option<&UpstreamTlsConfig>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    let https = url.starts_with("https://");
    let ca = config.and_then(|c| c.ca.as_ref());
    match ca {
        _ if !https => {}
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            roots = ca_roots(path, &pem)?;
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err(format!(
                    "upstream {url:?} is https but the system has no CA certificates: set upstream-tls.ca"
                ));
            }
        }
    }
    let builder = builder.with_root_certificates(roots);
    let identity = config.and_then(|c| c.cert.as_ref().zip(c.key.as_ref()));
    match identity {
        Some((cert, key)) if https => {
            let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            let key_der = PrivateKeyDer::from_pem_slice(&read(key)?)
                .map_err(|e| format!("{}: no PEM private key in it: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("upstream-tls.cert and upstream-tls.key: {e}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The CA certificates of a PEM file (`path`, for messages): at least one.
fn ca_roots(path: &Path, pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(roots)
}

/// How long a client may take over its handshake before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The acceptor in force, swapped when the files change.
pub struct Tls {
    config: TlsConfig,
    current: ArcSwap<Loaded>,
}

struct Loaded {
    /// The files' bytes it was built from, to notice a change.
    files: Vec<Vec<u8>>,
    acceptor: TlsAcceptor,
    /// The same certificate for the REST port, whose clients speak HTTP/1.1 too.
    rest_acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("config", &self.config).finish()
    }
}

impl Tls {
    /// Loads the files of `config`.
    pub fn load(config: &TlsConfig) -> Result<Self, String> {
        let loaded = load(config)?;
        Ok(Self {
            config: config.clone(),
            current: ArcSwap::from_pointee(loaded),
        })
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current.load().acceptor.clone()
    }

    /// The acceptor for a new connection to the REST port.
    pub fn rest_acceptor(&self) -> TlsAcceptor {
        self.current.load().rest_acceptor.clone()
    }

    /// Checks the files every `interval` until `shutdown`, and takes a changed set that loads;
    /// counts each change taken or refused.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A renewal rewrites two or three files, not at one instant: a set is acted on only
        // when two checks in a row read it unchanged (as the allow list is), so that a
        // certificate read beside the previous key is neither taken nor refused. A set refused
        // stays refused (one log line, one count) until the files change again.
        let mut seen: Option<Vec<Vec<u8>>> = None;
        let mut refused: Option<Vec<Vec<u8>>> = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Ok(files) = read_files(&self.config) else {
                seen = None;
                continue;
            };
            let stable = seen.as_ref() == Some(&files);
            seen = Some(files.clone());
            if !stable || files == self.current.load().files || refused.as_ref() == Some(&files) {
                continue;
            }
            match build(&self.config, files.clone()) {
                Ok(loaded) => {
                    self.current.store(Arc::new(loaded));
                    refused = None;
                    metrics.tls_reloaded(true);
                    tracing::info!(cert = %self.config.cert.display(), "TLS certificate reloaded");
                }
                Err(err) => {
                    tracing::error!(%err, "the changed TLS files are refused; the certificate in force stays");
                    refused = Some(files);
                    metrics.tls_reloaded(false);
                }
            }
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_files(config: &TlsConfig) -> Result<Vec<Vec<u8>>, String> {
    let mut files = vec![read(&config.cert)?, read(&config.key)?];
    if let Some(ca) = &config.client_ca {
        files.push(read(ca)?);
    }
    Ok(files)
}

fn load(config: &TlsConfig) -> Result<Loaded, String> {
    build(config, read_files(config)?)
}

fn build(config: &TlsConfig, files: Vec<Vec<u8>>) -> Result<Loaded, String> {
    let (cert_pem, key_pem) = (&files[0], &files[1]);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", config.cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "{}: no PEM certificate in it",
            config.cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("{}: no PEM private key in it: {e}", config.key.display()))?;
    // The provider named rather than the process default: more than one is compiled into this
    // binary (object_store's client brings its own), and then there is no default.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match (&config.client_ca, files.get(2)) {
        (Some(path), Some(ca_pem)) => {
            let roots = ca_roots(path, ca_pem)?;
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut server = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "{} and {} do not make a certificate and its key: {e}",
            config.cert.display(),
            config.key.display()
        )
    })?;
    // REST clients speak HTTP/1.1 or HTTP/2: a client that offers only http/1.1 would be
    // refused by a server that offers only h2.
    let mut rest = server.clone();
    rest.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // gRPC is HTTP/2 only.
    server.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Loaded {
        files,
        acceptor: TlsAcceptor::from(Arc::new(server)),
        rest_acceptor: TlsAcceptor::from(Arc::new(rest)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_tls_files_are_read_only_for_https_and_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let missing = UpstreamTlsConfig {
            ca: Some(dir.path().join("nope.crt")),
            ..UpstreamTlsConfig::default()
        };
        // Cleartext: nothing to read, nothing to refuse.
        assert!(upstream_client_config("http://127.0.0.1:9001", Some(&missing)).is_ok());
        let err = upstream_client_config("https://model:9001", Some(&missing)).unwrap_err();
        assert!(err.contains("nope.crt"), "{err}");
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = upstream_client_config(
            "https://model:9001",
            Some(&UpstreamTlsConfig {
                ca: Some(empty),
                ..UpstreamTlsConfig::default()
            }),
        )
        .unwrap_err();
        assert!(err.contains("no PEM certificate"), "{err}");
    }
}
