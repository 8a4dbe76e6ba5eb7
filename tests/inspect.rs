//! `featurelog inspect` on a real broker: what the sidecar logged, and why it dead-lettered a
//! call, read back the way an operator reads them (the binary, its JSON lines).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::BTreeSet;
use std::time::Duration;

use featurelog_schemas::tensor::TensorValues;
use featurelog_testkit::kafka;
use featurelog_testkit::serving::{
    client, float_ids_request, model_server, ranker_request, sent_values, sidecar, sidecar_config,
    temp_dir,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Runs `featurelog inspect` with `args` (and `--bootstrap-servers brokers` unless empty): its
/// exit code, its JSON lines, its stderr.
async fn inspect(brokers: &str, args: &[&str]) -> (i32, Vec<Value>, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_featurelog"));
    command.args(["inspect", "--timeout", "30s"]).args(args);
    if !brokers.is_empty() {
        command.args(["--bootstrap-servers", brokers]);
    }
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code().unwrap_or(-1), lines, stderr)
}

/// A JSON value as an f32, as a reader of the output would take it ("NaN" for NaNs).
fn as_f32(v: &Value) -> f32 {
    match v {
        Value::String(s) if s == "NaN" => f32::NAN,
        other => other.as_f64().unwrap() as f32,
    }
}

fn same_f32(got: &[Value], want: &[f32]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| {
            let g = as_f32(g);
            // JSON has no NaN payloads: any NaN reads as the canonical one.
            (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits()
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_what_the_sidecar_logged_and_why_it_dead_lettered_a_call() {
    let Some(kafka) = kafka("inspect_shows_what_the_sidecar_logged") else {
        return;
    };
    let topic = kafka.unique_topic("inspect-logs", 2).await;
    let dead = kafka.unique_topic("inspect-dead", 1).await;
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let allow = "[[model]]\nname = \"ranker\"\nfeatures = [\"item_price\", \"user_locale\", \"item_embedding\"]\ncandidate-ids-input = \"item_id\"\n";
    let mut config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, allow);
    config.publish.dead_letter_topic = dead.clone();
    let sidecar = sidecar(config).await;
    let mut via = client(sidecar.local_addr).await;
    let raw = ranker_request("req-raw", 4, 2, 1, true);
    let typed = ranker_request("req-typed", 3, 0, 2, false);
    let bad = float_ids_request("req-bad", 3);
    for request in [&raw, &typed, &bad] {
        via.model_infer(request.clone()).await.unwrap();
    }
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    let records = kafka.read(&topic, 2, Duration::from_secs(60)).await;
    let brokers = kafka.config.bootstrap_servers.as_str();

    // One request's record, as the sidecar logged it: the allow list's columns, bit-exact.
    let (code, lines, stderr) =
        inspect(brokers, &["--topic", &topic, "--request-id", "req-raw"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["key"], "req-raw");
    let log = &line["value"];
    assert_eq!(log["kind"], "feature_log");
    assert_eq!(log["model_name"], "ranker");
    assert_eq!(log["row_count"], 4);
    let TensorValues::Int64(ids) = sent_values(&raw, "item_id") else {
        panic!("INT64 ids")
    };
    assert_eq!(log["candidate_int_ids"], serde_json::json!(ids));
    assert_eq!(log["candidate_ids"], serde_json::json!([]));
    let columns = log["features"].as_array().unwrap();
    let names: Vec<&str> = columns
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["item_price", "user_locale", "item_embedding"]);
    let TensorValues::Fp32(prices) = sent_values(&raw, "item_price") else {
        panic!("FP32 prices")
    };
    assert!(
        same_f32(columns[0]["values"].as_array().unwrap(), &prices),
        "{}",
        columns[0]
    );
    assert_eq!(columns[1]["values"], serde_json::json!(["jp_JA"]));
    assert_eq!(columns[1]["per_request"], true);
    let TensorValues::Fp32(embedding) = sent_values(&raw, "item_embedding") else {
        panic!("FP32 embedding")
    };
    let rows = columns[2]["values"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "one array per candidate");
    let flat: Vec<Value> = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap().clone())
        .collect();
    assert!(same_f32(&flat, &embedding), "{}", columns[2]);

    // The dead letter of the call the sidecar could not log.
    let (code, lines, stderr) = inspect(brokers, &["--topic", &dead]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["key"], "req-bad");
    assert_eq!(lines[0]["headers"]["featurelog-error"], "bad_candidate_ids");
    assert_eq!(lines[0]["value"]["reason"], "bad_candidate_ids");
    assert_eq!(lines[0]["value"]["model"], "ranker");

    // The last record of each partition; a model with no records; a limit.
    let partitions: BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    let (code, lines, _) = inspect(brokers, &["--topic", &topic, "--from", "-1"]).await;
    assert_eq!(code, 0);
    assert_eq!(lines.len(), partitions.len());
    let (_, lines, _) = inspect(brokers, &["--topic", &topic, "--model", "other"]).await;
    assert!(lines.is_empty());
    let (_, lines, _) = inspect(brokers, &["--topic", &topic, "--limit", "1"]).await;
    assert_eq!(lines.len(), 1);

    // The sidecar's own config says where its topics are (and how to reach the brokers).
    let file = dir.path().join("sidecar.toml");
    std::fs::write(
        &file,
        format!(
            "upstream = \"http://{model_addr}\"\nallow-list = \"allow.toml\"\n[kafka]\nbootstrap-servers = \"{brokers}\"\n[publish]\ntopic = \"{topic}\"\ndead-letter-topic = \"{dead}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("allow.toml"), allow).unwrap();
    let config = file.to_str().unwrap();
    let (code, lines, stderr) = inspect("", &["--config", config, "--dead-letters"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["value"]["request_id"], "req-bad");
    let (_, lines, _) = inspect("", &["--config", config]).await;
    assert_eq!(lines.len(), 2, "both logged requests");

    // Following: a record produced after it started is printed as it comes.
    let mut follower = tokio::process::Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(["inspect", "--bootstrap-servers", brokers, "--topic", &dead])
        .args(["--from", "end", "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(follower.stderr.take().unwrap()).lines();
    let started = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if line.contains("reading") {
                return;
            }
        }
        panic!("inspect ended before reading");
    });
    started.await.expect("inspect says when it starts reading");
    let producer = kafka.producer();
    let record = rdkafka::producer::FutureRecord::to(&dead)
        .key("later")
        .payload(r#"{"reason":"bad_bytes","model":"ranker"}"#);
    producer
        .send(record, Duration::from_secs(30))
        .await
        .unwrap();
    let mut stdout = BufReader::new(follower.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
        .await
        .expect("the new record within 30 s")
        .unwrap()
        .unwrap();
    let line: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["key"], "later", "only records from the end on: {line}");
    assert_eq!(line["value"]["reason"], "bad_bytes");
    follower.kill().await.unwrap();

    // A topic that is not there is an error that says so, not an empty output.
    let missing = format!("{topic}-missing");
    let (code, lines, stderr) = inspect(brokers, &["--topic", &missing]).await;
    assert_eq!(code, 1);
    assert!(lines.is_empty());
    assert!(stderr.contains("does not exist"), "{stderr}");
}
