//! TLS on both sides of the sidecar: on the client port, the certificate, key and optional
//! client CA of `[tls]`; toward an `https://` model server, the CA and client certificate of
//! `[upstream-tls]`. Both are loaded at start (files that do not load stop the start with what
//! is wrong) and reloaded when the files change, as certificate managers renew them in place.
//! A change that does not load is refused with a log line and the files in force stay, as with
//! the allow list.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::DigitallySignedStruct;
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::{TlsConfig, UpstreamTlsConfig};
use crate::metrics::Metrics;

/// The files of `[upstream-tls]` (its CA, and its client certificate for a model server that
/// requires one), loaded at start and reloaded when they change: certificate managers renew
/// client certificates and rotate CAs in place, and a sidecar that kept the first ones would
/// lose its model server when they expire. Connections opened after a reload use the new
/// files; open ones keep the handshake they made.
#[derive(Debug)]
pub struct UpstreamTls {
    config: UpstreamTlsConfig,
    provider: Arc<CryptoProvider>,
    /// With `ca`: the verifier in force. Without it the system's roots, which are not watched.
    verifier: Option<Arc<Reloadable<WebPkiServerVerifier>>>,
    /// With `cert` and `key`: the client certificate in force.
    identity: Option<Arc<Reloadable<CertifiedKey>>>,
    /// The files' bytes in force, to notice a change.
    files: Vec<Vec<u8>>,
}

/// What a reload swaps: read at each handshake.
#[derive(Debug)]
struct Reloadable<T>(ArcSwap<T>);

impl ServerCertVerifier for Reloadable<WebPkiServerVerifier> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0
            .load()
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.load().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.load().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.load().supported_verify_schemes()
    }
}

impl ResolvesClientCert for Reloadable<CertifiedKey> {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// What a set of `[upstream-tls]` files makes.
type Built = (Option<Arc<WebPkiServerVerifier>>, Option<Arc<CertifiedKey>>);

impl UpstreamTls {
    /// Loads the files `config` names.
    pub fn load(config: &UpstreamTlsConfig) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let files = read_upstream_files(config)?;
        let (verifier, identity) = build_upstream(config, &provider, &files)?;
        Ok(Self {
            config: config.clone(),
            verifier: verifier.map(|v| Arc::new(Reloadable(ArcSwap::new(v)))),
            identity: identity.map(|i| Arc::new(Reloadable(ArcSwap::new(i)))),
            provider,
            files,
        })
    }

    /// Checks the files every `interval` until `shutdown`, and takes a changed set that loads;
    /// counts each change taken or refused.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) {
        let read = || read_upstream_files(&self.config);
        let apply = |files: &[Vec<u8>]| {
            let built = build_upstream(&self.config, &self.provider, files);
            match built {
                Ok((verifier, identity)) => {
                    if let (Some(current), Some(new)) = (&self.verifier, verifier) {
                        current.0.store(new);
                    }
                    if let (Some(current), Some(new)) = (&self.identity, identity) {
                        current.0.store(new);
                    }
                    metrics.upstream_tls_reloaded(true);
                    tracing::info!(
                        "upstream-tls files reloaded: new connections to the model server use them"
                    );
                    true
                }
                Err(err) => {
                    tracing::error!(%err, "the changed upstream-tls files are refused; the ones in force stay");
                    metrics.upstream_tls_reloaded(false);
                    false
                }
            }
        };
        watch_files(interval, shutdown, self.files.clone(), read, apply).await;
    }
}

fn read_upstream_files(config: &UpstreamTlsConfig) -> Result<Vec<Vec<u8>>, String> {
    [&config.ca, &config.cert, &config.key]
        .into_iter()
        .flatten()
        .map(|p| read(p))
        .collect()
}

/// The verifier and client certificate that `files` (read by [`read_upstream_files`]) make.
fn build_upstream(
    config: &UpstreamTlsConfig,
    provider: &Arc<CryptoProvider>,
    files: &[Vec<u8>],
) -> Result<Built, String> {
    let mut files = files.iter();
    let verifier = match &config.ca {
        Some(path) => {
            let pem = files.next().ok_or("CA file not read")?;
            let roots = ca_roots(path, pem)?;
            let verifier =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            Some(verifier)
        }
        None => None,
    };
    let identity = match (&config.cert, &config.key) {
        (Some(cert), Some(key)) => {
            let (cert_pem, key_pem) = (files.next(), files.next());
            let (cert_pem, key_pem) = cert_pem.zip(key_pem).ok_or("client certificate not read")?;
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!("{}: no PEM certificate in it", cert.display()));
            }
            let key_der = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| format!("{}: no PEM private key in it: {e}", key.display()))?;
            let identity = CertifiedKey::from_der(chain, key_der, provider).map_err(|e| {
                format!(
                    "{} and {} do not make a certificate and its key: {e}",
                    cert.display(),
                    key.display()
                )
            })?;
            Some(Arc::new(identity))
        }
        _ => None,
    };
    Ok((verifier, identity))
}

/// The TLS client configuration for the model server at `url`: for `https://`, trusting
/// `upstream-tls.ca` (the system's roots when it is not set) and presenting its client
/// certificate if one is set, both as reloaded by `tls`; for `http://`, one that is never used
/// (the connector passes cleartext through), so that no roots are loaded for it.
pub fn upstream_client_config(
    url: &str,
    tls: Option<&UpstreamTls>,
) -> Result<rustls::ClientConfig, String> {
    let provider = tls.map_or_else(
        || Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        |t| t.provider.clone(),
    );
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    if !url.starts_with("https://") {
        return Ok(builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth());
    }
    let builder = match tls.and_then(|t| t.verifier.clone()) {
        Some(verifier) => builder
            .dangerous()
            .with_custom_certificate_verifier(verifier),
        None => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                return Err(format!(
                    "upstream {url:?} is https but the system has no CA certificates: set upstream-tls.ca"
                ));
            }
            builder.with_root_certificates(roots)
        }
    };
    Ok(match tls.and_then(|t| t.identity.clone()) {
        Some(identity) => builder.with_client_cert_resolver(identity),
        None => builder.with_no_client_auth(),
    })
}

/// Polls a set of files every `interval` until `shutdown`, starting from `current` (the set in
/// force), and hands `apply` each changed set once it is stable; `apply` says whether it took
/// it. A renewal rewrites two or three files, not at one instant: a set is acted on only when
/// two checks in a row read it unchanged (as the allow list is), so that a certificate read
/// beside the previous key is neither taken nor refused. A set refused stays refused (one log
/// line, one count) until the files change again. Unreadable files (mid-rename) wait.
async fn watch_files(
    interval: Duration,
    shutdown: CancellationToken,
    mut current: Vec<Vec<u8>>,
    read: impl Fn() -> Result<Vec<Vec<u8>>, String>,
    mut apply: impl FnMut(&[Vec<u8>]) -> bool,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen: Option<Vec<Vec<u8>>> = None;
    let mut refused: Option<Vec<Vec<u8>>> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Ok(files) = read() else {
            seen = None;
            continue;
        };
        let stable = seen.as_ref() == Some(&files);
        seen = Some(files.clone());
        if !stable || files == current || refused.as_ref() == Some(&files) {
            continue;
        }
        if apply(&files) {
            current = files;
            refused = None;
        } else {
            refused = Some(files);
        }
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
        let read = || read_files(&self.config);
        let apply = |files: &[Vec<u8>]| match build(&self.config, files.to_vec()) {
            Ok(loaded) => {
                self.current.store(Arc::new(loaded));
                metrics.tls_reloaded(true);
                tracing::info!(cert = %self.config.cert.display(), "TLS certificate reloaded");
                true
            }
            Err(err) => {
                tracing::error!(%err, "the changed TLS files are refused; the certificate in force stays");
                metrics.tls_reloaded(false);
                false
            }
        };
        let current = self.current.load().files.clone();
        watch_files(interval, shutdown, current, read, apply).await;
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
    fn upstream_tls_files_say_what_is_wrong_and_cleartext_needs_none() {
        let dir = tempfile::tempdir().unwrap();
        // Cleartext: nothing to read, nothing to refuse.
        assert!(upstream_client_config("http://127.0.0.1:9001", None).is_ok());
        let missing = UpstreamTlsConfig {
            ca: Some(dir.path().join("nope.crt")),
            ..UpstreamTlsConfig::default()
        };
        let err = UpstreamTls::load(&missing).unwrap_err();
        assert!(err.contains("nope.crt"), "{err}");
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = UpstreamTls::load(&UpstreamTlsConfig {
            ca: Some(empty),
            ..UpstreamTlsConfig::default()
        })
        .unwrap_err();
        assert!(err.contains("no PEM certificate"), "{err}");
    }

    /// A CA and a certificate it signed for `name`, as PEM.
    fn ca_and_leaf(name: &str) -> (String, String, String) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (ca.pem(), leaf.pem(), key.serialize_pem())
    }

    fn verify(tls: &UpstreamTls, leaf_pem: &str, name: &str) -> bool {
        let leaf = CertificateDer::from_pem_slice(leaf_pem.as_bytes()).unwrap();
        let name = ServerName::try_from(name.to_owned()).unwrap();
        tls.verifier
            .as_ref()
            .unwrap()
            .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotated_ca_and_client_certificate_are_taken_and_a_broken_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (ca_a, server_a, _) = ca_and_leaf("model");
        let (ca_b, server_b, _) = ca_and_leaf("model");
        let (_, client_1, client_1_key) = ca_and_leaf("sidecar");
        let (_, client_2, client_2_key) = ca_and_leaf("sidecar");
        let config = UpstreamTlsConfig {
            ca: Some(dir.path().join("ca.crt")),
            cert: Some(dir.path().join("client.crt")),
            key: Some(dir.path().join("client.key")),
        };
        let write = |ca: &str, cert: &str, key: &str| {
            std::fs::write(dir.path().join("ca.crt"), ca).unwrap();
            std::fs::write(dir.path().join("client.crt"), cert).unwrap();
            std::fs::write(dir.path().join("client.key"), key).unwrap();
        };
        write(&ca_a, &client_1, &client_1_key);
        let tls = Arc::new(UpstreamTls::load(&config).unwrap());
        let presented = |tls: &UpstreamTls| {
            let key = tls.identity.as_ref().unwrap().resolve(&[], &[]).unwrap();
            key.cert[0].as_ref().to_vec()
        };
        let first = presented(&tls);
        assert!(verify(&tls, &server_a, "model"));
        assert!(!verify(&tls, &server_b, "model"));
        assert!(!verify(&tls, &server_a, "other"));

        let metrics = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        let watcher = tokio::spawn(tls.clone().watch(
            Duration::from_secs(1),
            metrics.clone(),
            shutdown.clone(),
        ));
        let settle = || async {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tokio::task::yield_now().await;
            }
        };
        // The CA rotates and the client certificate is renewed: both taken.
        write(&ca_b, &client_2, &client_2_key);
        settle().await;
        assert!(verify(&tls, &server_b, "model"));
        assert!(!verify(&tls, &server_a, "model"));
        assert_ne!(presented(&tls), first);
        // A renewal whose key is not the certificate's: refused, the pair in force stays.
        let renewed = presented(&tls);
        write(&ca_b, &client_1, &client_2_key);
        settle().await;
        assert_eq!(presented(&tls), renewed);
        assert!(verify(&tls, &server_b, "model"));
        let text = metrics.render();
        assert!(
            text.contains("featurelog_sidecar_upstream_tls_reloads_total{reason=\"applied\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("featurelog_sidecar_upstream_tls_reloads_total{reason=\"refused\"} 1"),
            "{text}"
        );
        shutdown.cancel();
        watcher.await.unwrap();
    }
}
