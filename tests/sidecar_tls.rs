//! The sidecar's client port over TLS (`[tls]`), for apps that called their model server over
//! TLS: calls pass and are logged as in cleartext; a cleartext client, or one that does not
//! trust the certificate, does not get through; renewed files are taken without a restart and a
//! broken renewal is refused with the certificate in force kept; with `client-ca`, only clients
//! with a certificate it signed are served.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use featurelog_sidecar::config::{RestConfig, TlsConfig};
use featurelog_testkit::kafka;
use featurelog_testkit::serving::{
    client, decode_log, model_server, ranker_request, sidecar, sidecar_config, temp_dir,
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::transport::{Channel, Endpoint};

const ALLOW: &str = "[[model]]\nname = \"ranker\"\nfeatures = [\"item_price\"]\ncandidate-ids-input = \"item_id\"\n";

/// A certificate authority of the test's own.
struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    fn pem(&self) -> String {
        self.0.pem()
    }

    /// A leaf certificate for 127.0.0.1 and localhost (server or client), and its key, PEM.
    fn issue(&self) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        let cert = params.signed_by(&key, &self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A client of the protocol over TLS, trusting `ca`, with `identity` (certificate, key) if
/// given; `Err` when the connection or its handshake fails.
async fn tls_client(
    addr: SocketAddr,
    ca: &str,
    identity: Option<&(String, String)>,
) -> Result<GrpcInferenceServiceClient<Channel>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = ServerName::try_from("localhost").unwrap();
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
        .map_err(|e| format!("{e:?}"))?;
    let mut client = GrpcInferenceServiceClient::new(channel);
    // A handshake the server refuses (a client certificate it does not accept) may only show
    // at the first call under TLS 1.3: make one.
    client
        .server_live(featurelog_schemas::inference::ServerLiveRequest {})
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(client)
}

/// A model server's HTTP port that answers every request with `{"ready":true}`.
async fn ready_http_server() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"ready":true}"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}

/// `GET path` over TLS and HTTP/1.1 (offering only `http/1.1`, as REST clients do), trusting
/// `ca`: the response as text.
async fn https_get(addr: SocketAddr, ca: &str, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // A peer that closes without close_notify still gave its whole response here.
    let _ = tls.read_to_end(&mut response).await;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    // Written whole under another name and renamed, as a certificate manager does.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// A Kubernetes TLS Secret as a pod sees it mounted: `tls.crt` and `tls.key` are links into
/// `..data`, itself a link to a directory of the current version, which an update replaces at
/// once by renaming a new link over it.
struct MountedSecret {
    dir: std::path::PathBuf,
    version: u32,
}

impl MountedSecret {
    fn new(dir: &Path, cert: &str, key: &str) -> Self {
        let mut secret = MountedSecret {
            dir: dir.to_owned(),
            version: 0,
        };
        secret.update(cert, key);
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
        }
        secret
    }

    fn update(&mut self, cert: &str, key: &str) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        std::fs::create_dir(self.dir.join(&version)).unwrap();
        std::fs::write(self.dir.join(&version).join("tls.crt"), cert).unwrap();
        std::fs::write(self.dir.join(&version).join("tls.key"), key).unwrap();
        let link = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&version, &link).unwrap();
        std::fs::rename(&link, self.dir.join("..data")).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_calls_pass_and_are_logged_and_renewed_certificates_are_taken() {
    let Some(kafka) = kafka("over_tls_calls_pass_and_are_logged") else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-tls", 1).await;
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let ca = Ca::new("first ca");
    let (cert, key) = ca.issue();
    let mut config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, ALLOW);
    let mut secret = MountedSecret::new(dir.path(), &cert, &key);
    config.tls = Some(TlsConfig {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
        client_ca: None,
    });
    let http_upstream = ready_http_server().await;
    config.rest = Some(RestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstream: format!("http://{http_upstream}"),
    });
    let sidecar = sidecar(config).await;

    // The REST port is served with the same certificate, to HTTP/1.1 clients too.
    let rest = https_get(sidecar.rest_addr.unwrap(), &ca.pem(), "/v2/health/ready")
        .await
        .unwrap();
    assert!(
        rest.starts_with("HTTP/1.1 200") && rest.ends_with(r#"{"ready":true}"#),
        "{rest}"
    );

    // Through TLS: the model server's answer, and the call's features on the topic.
    let mut direct = client(model_addr).await;
    let mut via = tls_client(sidecar.local_addr, &ca.pem(), None)
        .await
        .unwrap();
    let request = ranker_request("tls-1", 4, 0, 1, false);
    let expected = direct
        .model_infer(request.clone())
        .await
        .unwrap()
        .into_inner();
    let got = via.model_infer(request).await.unwrap().into_inner();
    assert_eq!(got, expected);
    let records = kafka.read(&topic, 1, Duration::from_secs(60)).await;
    assert_eq!(records[0].key.as_deref(), Some(&b"tls-1"[..]));
    assert_eq!(decode_log(&records[0].payload).features.len(), 1);

    // Cleartext on the TLS port, or a client that trusts another CA: no call gets through.
    let cleartext = tokio::time::timeout(Duration::from_secs(15), async {
        client_result(sidecar.local_addr).await
    })
    .await;
    assert!(
        !matches!(cleartext, Ok(Ok(()))),
        "a cleartext call passed the TLS port"
    );
    let stranger = Ca::new("another ca");
    assert!(
        tls_client(sidecar.local_addr, &stranger.pem(), None)
            .await
            .is_err()
    );
    // Both are counted, for the operator whose clients cannot connect.
    let failed = sidecar
        .metrics
        .tls_handshake_failures
        .get_or_create(&featurelog_sidecar::metrics::Reason { reason: "error" })
        .get();
    assert!(failed >= 1, "{failed}");

    // Renewed by another CA: new connections get the new certificate without a restart.
    let (cert2, key2) = stranger.issue();
    secret.update(&cert2, &key2);
    let renewed = featurelog_testkit::eventually(Duration::from_secs(10), || {
        let pem = stranger.pem();
        let addr = sidecar.local_addr;
        // `eventually` takes a plain predicate: ask on a runtime of its own.
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(tls_client(addr, &pem, None))
                .is_ok()
        })
        .join()
        .unwrap()
    })
    .await;
    assert!(renewed, "the renewed certificate was not taken");
    let reloads = |reason: &'static str| {
        sidecar
            .metrics
            .tls_reloads
            .get_or_create(&featurelog_sidecar::metrics::Reason { reason })
            .get()
    };
    // The start-up load, then the renewal.
    assert_eq!(reloads("applied"), 2);
    assert_eq!(reloads("refused"), 0);
    // The connection made before the renewal still works.
    via.model_infer(ranker_request("tls-2", 4, 0, 2, false))
        .await
        .unwrap();

    // A broken renewal (a key that is not the certificate's): refused, the one in force stays.
    let (_, other_key) = stranger.issue();
    secret.update(&cert2, &other_key);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut after = tls_client(sidecar.local_addr, &stranger.pem(), None)
        .await
        .expect("the certificate in force stays after a broken renewal");
    assert!(
        featurelog_testkit::eventually(Duration::from_secs(10), || reloads("refused") == 1).await,
        "the broken renewal was not counted once: {}",
        reloads("refused")
    );
    after
        .model_infer(ranker_request("tls-3", 4, 0, 3, false))
        .await
        .unwrap();

    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
}

/// A cleartext call to `addr`: `Ok` if it was answered.
async fn client_result(addr: SocketAddr) -> Result<(), String> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    GrpcInferenceServiceClient::new(channel)
        .server_live(featurelog_schemas::inference::ServerLiveRequest {})
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_clients_it_signed_are_served() {
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let server_ca = Ca::new("server ca");
    let client_ca = Ca::new("client ca");
    let (cert, key) = server_ca.issue();
    let mut config = sidecar_config(dir.path(), model_addr, None, "unused", ALLOW);
    config.tls = Some(TlsConfig {
        cert: write(dir.path(), "tls.crt", &cert),
        key: write(dir.path(), "tls.key", &key),
        client_ca: Some(write(dir.path(), "clients.crt", &client_ca.pem())),
    });
    let sidecar = sidecar(config).await;

    let signed = client_ca.issue();
    let mut via = tls_client(sidecar.local_addr, &server_ca.pem(), Some(&signed))
        .await
        .unwrap();
    via.model_infer(ranker_request("mtls-1", 4, 0, 1, false))
        .await
        .unwrap();
    assert!(
        tls_client(sidecar.local_addr, &server_ca.pem(), None)
            .await
            .is_err(),
        "a client without a certificate was served"
    );
    let unsigned = server_ca.issue();
    assert!(
        tls_client(sidecar.local_addr, &server_ca.pem(), Some(&unsigned))
            .await
            .is_err(),
        "a client with a certificate the client CA did not sign was served"
    );
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
}

#[test]
fn files_that_do_not_make_a_certificate_stop_the_start_with_what_is_wrong() {
    let dir = temp_dir();
    let ca = Ca::new("ca");
    let (cert, key) = ca.issue();
    let (_, other_key) = ca.issue();
    let cert_path = write(dir.path(), "tls.crt", &cert);
    let key_path = write(dir.path(), "tls.key", &key);
    let junk = write(dir.path(), "junk.pem", "not a certificate");
    let other = write(dir.path(), "other.key", &other_key);
    for (cert, key, says) in [
        (&junk, &key_path, "junk.pem: no PEM certificate"),
        (&cert_path, &junk, "junk.pem: no PEM private key"),
        (&cert_path, &other, "do not make a certificate and its key"),
        (&dir.path().join("missing.crt"), &key_path, "missing.crt"),
    ] {
        let err = featurelog_sidecar::proxy::tls::Tls::load(&TlsConfig {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: None,
        })
        .unwrap_err();
        assert!(err.contains(says), "{err}");
    }
}

/// A model server that serves TLS (`upstream = "https://..."`, `[upstream-tls]`), gRPC and REST:
/// calls through the sidecar get its answers and are logged; a model server whose certificate
/// the configured CA did not sign is not talked to, until the CA file is rotated to one that did. The TLS model server here is the reference
/// one behind a second sidecar that terminates TLS for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn to_a_model_server_over_tls_calls_pass_and_are_logged() {
    let Some(kafka) = kafka("to_a_model_server_over_tls_calls_pass_and_are_logged") else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-upstream-tls", 1).await;
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let http_model = ready_http_server().await;
    let dir = temp_dir();
    let ca = Ca::new("model server ca");
    let (cert, key) = ca.issue();
    // The model server's TLS front, gRPC and REST.
    let mut front = sidecar_config(dir.path(), model_addr, None, "unused", ALLOW);
    front.tls = Some(TlsConfig {
        cert: write(dir.path(), "model.crt", &cert),
        key: write(dir.path(), "model.key", &key),
        client_ca: None,
    });
    front.rest = Some(RestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstream: format!("http://{http_model}"),
    });
    let front = sidecar(front).await;

    let logging = |ca_pem: &str, name: &str| {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let mut config = sidecar_config(&sub, model_addr, Some(&kafka.config), &topic, ALLOW);
        config.upstream = format!("https://127.0.0.1:{}", front.local_addr.port());
        config.upstream_tls = Some(featurelog_sidecar::config::UpstreamTlsConfig {
            ca: Some(write(&sub, "ca.crt", ca_pem)),
            ..Default::default()
        });
        config.rest = Some(RestConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: format!("https://127.0.0.1:{}", front.rest_addr.unwrap().port()),
        });
        config
    };
    let via_tls = sidecar(logging(&ca.pem(), "trusting")).await;
    let mut direct = client(model_addr).await;
    let mut via = client(via_tls.local_addr).await;
    let request = ranker_request("upstream-tls-1", 4, 0, 1, false);
    let expected = direct
        .model_infer(request.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        via.model_infer(request).await.unwrap().into_inner(),
        expected
    );
    let records = kafka.read(&topic, 1, Duration::from_secs(60)).await;
    assert_eq!(records[0].key.as_deref(), Some(&b"upstream-tls-1"[..]));
    // REST, HTTP/1.1 over TLS to the model server's HTTP port.
    let rest = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(via_tls.rest_addr.unwrap())
            .await
            .unwrap();
        s.write_all(b"GET /v2/health/ready HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    assert!(
        rest.starts_with("HTTP/1.1 200") && rest.ends_with(r#"{"ready":true}"#),
        "{rest}"
    );

    // Trusting another CA: the model server is not talked to, and the caller is told so.
    let stranger = Ca::new("another ca");
    let wary = sidecar(logging(&stranger.pem(), "wary")).await;
    let err = client(wary.local_addr)
        .await
        .model_infer(ranker_request("upstream-tls-2", 4, 0, 2, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    assert!(err.message().contains("upstream unavailable"), "{err}");

    // The CA file is rotated to the one that signed the model server's certificate: new
    // connections trust it without a restart.
    write(&dir.path().join("wary"), "ca.crt", &ca.pem());
    let mut wary_client = client(wary.local_addr).await;
    let started = std::time::Instant::now();
    let answer = loop {
        let request = ranker_request("upstream-tls-3", 4, 0, 3, false);
        match wary_client.model_infer(request).await {
            Ok(answer) => break answer.into_inner(),
            Err(err) if started.elapsed() < Duration::from_secs(10) => {
                assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("the rotated CA was not taken: {err}"),
        }
    };
    assert_eq!(answer.model_name, "ranker");
    let reloads = |reason: &'static str| {
        wary.metrics
            .upstream_tls_reloads
            .get_or_create(&featurelog_sidecar::metrics::Reason { reason })
            .get()
    };
    // The start-up load, then the rotation.
    assert_eq!((reloads("applied"), reloads("refused")), (2, 0));

    for s in [via_tls, wary, front] {
        s.stop();
        assert_eq!(s.wait().await, 0);
    }
}
