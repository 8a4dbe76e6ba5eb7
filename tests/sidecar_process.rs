//! The sidecar as an operator runs it: the `featurelog` binary, with a config file, stopped by
//! SIGTERM. It forwards calls, serves /metrics and /readyz, and exits 0 after draining.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::process::{Command, Stdio};
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(["sidecar", "--config", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let ready = featurelog_testkit::eventually(Duration::from_secs(20), || {
        http_get(metrics, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    assert!(ready, "/readyz never said ready");

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
