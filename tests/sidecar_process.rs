//! The sidecar as an operator runs it: the `featurelog` binary, with a config file, stopped by
//! SIGTERM. It forwards calls, serves /metrics, /healthz and /readyz, fails readiness as soon
//! as it is told to stop, and exits 0 after draining, in time even when Kafka is gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use featurelog_testkit::serving::{free_addr, http_get, model_server, ranker_request};

#[tokio::test]
async fn sidecar_binary_serves_metrics_and_stops_cleanly_on_sigterm() {
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("allow.toml"), "").unwrap();
    let (listen, metrics) = (free_addr(), free_addr());
    let config = dir.path().join("sidecar.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{listen}\"\nupstream = \"http://{model_addr}\"\nmode = \"pass-through\"\n\
             allow-list = \"allow.toml\"\n[metrics]\nlisten = \"{metrics}\"\n"
        ),
    )
    .unwrap();
    let mut child = start_ready(&config, metrics, Stdio::inherit(), "warn").await;

    let mut client = featurelog_testkit::serving::client(listen).await;
    let response = client
        .model_infer(ranker_request("bin-1", 3, 0, 1, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.outputs[0].shape, [3]);
    let text = http_get(metrics, "/metrics").unwrap();
    assert!(
        text.contains("featurelog_sidecar_calls_total{method=\"model_infer\",outcome=\"ok\"} 1"),
        "{text}"
    );

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "sidecar exits 0 after SIGTERM: {exit}");
}

/// A TCP relay in front of the model server that the test controls: `forwarding` is set once
/// bytes come through it towards the model server (the sidecar connects upstream only to
/// forward a call, so the first call is then in flight), and nothing comes back from the model
/// server until `release` is sent `true`. A call can so be held in flight for as long as a
/// test needs, without a timer.
struct Relay {
    addr: SocketAddr,
    forwarding: Arc<AtomicBool>,
    release: tokio::sync::watch::Sender<bool>,
}

async fn relay(target: SocketAddr) -> Relay {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let forwarding = Arc::new(AtomicBool::new(false));
    let (release, released) = tokio::sync::watch::channel(false);
    let seen = forwarding.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let (seen, mut released) = (seen.clone(), released.clone());
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let (mut from_client, mut to_client) = inbound.into_split();
                let (mut from_server, mut to_server) = outbound.into_split();
                let up = async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                        seen.store(true, Ordering::SeqCst);
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = to_server.shutdown().await;
                };
                let down = async move {
                    let _ = released.wait_for(|open| *open).await;
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                    let _ = to_client.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    Relay {
        addr,
        forwarding,
        release,
    }
}

/// Writes a log-mode sidecar config to `dir` (the ranker's `user_age` and `item_price`
/// logged to `topic` on `kafka`) and returns its path and the client and metrics addresses.
fn log_mode_config(
    dir: &std::path::Path,
    upstream: SocketAddr,
    kafka: &featurelog_kafka::KafkaConfig,
    topic: &str,
    shutdown_timeout: &str,
) -> (std::path::PathBuf, SocketAddr, SocketAddr) {
    std::fs::write(
        dir.join("allow.toml"),
        "[[model]]\nname = \"ranker\"\nfeatures = [\"user_age\", \"item_price\"]\n\
         candidate-ids-input = \"item_id\"\n",
    )
    .unwrap();
    let (listen, metrics) = (free_addr(), free_addr());
    let config = dir.join("sidecar.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{listen}\"\nupstream = \"http://{upstream}\"\nmode = \"log\"\n\
             allow-list = \"allow.toml\"\nshutdown-timeout = \"{shutdown_timeout}\"\n\
             [metrics]\nlisten = \"{metrics}\"\n[publish]\ntopic = \"{topic}\"\n{}",
            featurelog_testkit::serving::kafka_toml(kafka)
        ),
    )
    .unwrap();
    (config, listen, metrics)
}

/// Starts `featurelog sidecar --config config` and waits until its `/readyz` says ready.
async fn start_ready(
    config: &std::path::Path,
    metrics: SocketAddr,
    stderr: Stdio,
    log: &str,
) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(["sidecar", "--config", config.to_str().unwrap()])
        .env("FEATURELOG_LOG", log)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let ready = featurelog_testkit::eventually(Duration::from_secs(20), || {
        is_status(metrics, "/readyz", 200)
    })
    .await;
    assert!(ready, "/readyz never said ready");
    child
}

fn is_status(addr: SocketAddr, path: &str, status: u16) -> bool {
    http_get(addr, path).is_some_and(|r| r.starts_with(&format!("HTTP/1.1 {status} ")))
}

fn sigterm(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// SIGTERM while a call is in flight: the sidecar stops being ready at once (so that Kubernetes
/// stops routing to it) while it stays alive, the call in flight still gets the model server's
/// answer, its record reaches Kafka, and the process exits 0.
#[tokio::test]
async fn sigterm_fails_readiness_finishes_the_call_in_flight_and_logs_it() {
    let Some(kafka) = featurelog_testkit::kafka("sigterm_finishes_the_call_in_flight") else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-sigterm", 1).await;
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let relay = relay(model_addr).await;
    let dir = tempfile::tempdir().unwrap();
    let (config, listen, metrics) =
        log_mode_config(dir.path(), relay.addr, &kafka.config, &topic, "20s");
    let mut child = start_ready(&config, metrics, Stdio::inherit(), "warn").await;
    assert!(
        is_status(metrics, "/healthz", 200),
        "/healthz while serving"
    );

    let request = ranker_request("drain-1", 3, 0, 1, false);
    let want = featurelog_testkit::serving::client(model_addr)
        .await
        .model_infer(request.clone())
        .await
        .unwrap()
        .into_inner();
    let mut client = featurelog_testkit::serving::client(listen).await;
    let call = tokio::spawn(async move { client.model_infer(request).await });
    let forwarding = relay.forwarding.clone();
    assert!(
        featurelog_testkit::eventually(Duration::from_secs(20), || forwarding
            .load(Ordering::SeqCst))
        .await,
        "the call never reached the model server"
    );

    sigterm(&child);
    let draining = featurelog_testkit::eventually(Duration::from_secs(20), || {
        is_status(metrics, "/readyz", 503)
    })
    .await;
    assert!(draining, "/readyz still said ready after SIGTERM");
    assert!(
        is_status(metrics, "/healthz", 200),
        "/healthz during the drain: the process is alive"
    );
    assert!(!call.is_finished(), "the relay still holds the answer");
    relay.release.send(true).unwrap();
    let got = call
        .await
        .unwrap()
        .expect("the call in flight at SIGTERM failed");
    assert_eq!(
        got.into_inner(),
        want,
        "the model server's answer, unchanged"
    );

    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "sidecar exits 0 after draining: {exit}");
    let records = kafka.read(&topic, 1, Duration::from_secs(60)).await;
    assert_eq!(records[0].key_str(), "drain-1");
    let record = featurelog_testkit::serving::decode_log(&records[0].payload);
    let names: Vec<_> = record.features.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["user_age", "item_price"]);
}

/// SIGTERM with the broker unreachable: the flush cannot succeed, and the process still exits
/// 0 within its shutdown timeout (once for the drain, once for the flush) plus slack, saying
/// how many records Kafka never acknowledged.
#[tokio::test]
async fn sigterm_with_the_broker_unreachable_exits_within_the_shutdown_timeout() {
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1; no topic is ever created, so the name need not be unique.
    let nowhere = featurelog_kafka::KafkaConfig::new("127.0.0.1:1");
    let timeout = Duration::from_secs(2);
    let (config, listen, metrics) = log_mode_config(
        dir.path(),
        model_addr,
        &nowhere,
        "sidecar-unreachable",
        "2s",
    );
    let child = start_ready(&config, metrics, Stdio::piped(), "info").await;
    let mut client = featurelog_testkit::serving::client(listen).await;
    for i in 0..3 {
        client
            .model_infer(ranker_request(&format!("lost-{i}"), 3, 0, i, false))
            .await
            .expect("a call failed with the broker unreachable");
    }
    let produced = "featurelog_sidecar_records_produced_total{model=\"ranker\"} 3";
    let handed_over = featurelog_testkit::eventually(Duration::from_secs(20), || {
        http_get(metrics, "/metrics").is_some_and(|m| m.lines().any(|l| l == produced))
    })
    .await;
    assert!(handed_over, "the records were not handed to the producer");

    let started = std::time::Instant::now();
    sigterm(&child);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    assert!(
        took < timeout * 2 + Duration::from_secs(5),
        "the shutdown took {took:?} with a shutdown-timeout of {timeout:?}:\n{stderr}"
    );
    let said = stderr
        .lines()
        .find(|l| l.contains("records not acknowledged by Kafka at shutdown"));
    assert!(
        said.is_some_and(|l| l.contains("left=3")),
        "the 3 records were not reported:\n{stderr}"
    );
}
