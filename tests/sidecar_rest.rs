//! The sidecar's REST binding against a model server that is not ours (KServe's Python
//! ModelServer) and the clients apps use (`tritonclient.http` with binary tensor data, plain
//! JSON over HTTP), with the real broker: every response through the sidecar equals the direct
//! one, and the records hold exactly the allow-listed features, bit for bit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use featurelog_sidecar::config::RestConfig;
use featurelog_sidecar::metrics::Reason;
use featurelog_testkit::kafka;
use featurelog_testkit::serving::{decode_log, model_server, sidecar, sidecar_config, temp_dir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ALLOW: &str = r#"
[[model]]
name = "ranker"
features = ["user_age", "user_locale", "item_price", "item_embedding"]
outputs = ["score"]
candidate-ids-input = "item_id"
headers = ["x-user-country"]

[[model]]
name = "other"
features = ["item_price", "user_age"]
candidate-ids-input = "item_id"
"#;

/// KServe's model server in a process of its own, stopped when dropped.
struct KserveServer {
    child: Child,
    addr: SocketAddr,
}

impl Drop for KserveServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status line of `GET path` on `addr`, if it answers.
async fn get_status(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response);
    text.lines().next().map(str::to_owned)
}

async fn kserve_server() -> KserveServer {
    let addr = featurelog_testkit::ports::restartable_addr();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/kserve_rest_server.py"
    );
    let child = Command::new("python3")
        .args([script, &addr.port().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs (scripts/test.sh installs tests/requirements.txt)");
    let server = KserveServer { child, addr };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if get_status(addr, "/v2/health/ready")
            .await
            .is_some_and(|s| s.contains(" 200"))
        {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "KServe's model server did not become ready on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_clients_get_the_model_servers_answers_and_are_logged_bit_exact() {
    let Some(kafka) = kafka("rest_clients_get_the_model_servers_answers_and_are_logged_bit_exact")
    else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-rest", 2).await;
    let dead = kafka.unique_topic("sidecar-rest-dead", 1).await;
    let kserve = kserve_server().await;
    let (grpc_model, _stop_model) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let mut config = sidecar_config(dir.path(), grpc_model, Some(&kafka.config), &topic, ALLOW);
    config.publish.dead_letter_topic = dead.clone();
    config.rest = Some(RestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstream: format!("http://{}", kserve.addr),
    });
    let sidecar = sidecar(config).await;
    let rest_addr = sidecar.rest_addr.expect("the REST port is bound");

    let argv = vec![rest_addr.to_string(), kserve.addr.to_string()];
    let sent = featurelog_testkit::python_json_async("rest_infer.py", argv).await;
    let calls = sent["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 6);

    // HTTP/2 with prior knowledge, as some HTTP clients speak it in a cluster: the same answer
    // (the hop to the model server is HTTP/1.1).
    let h2 = |addr: SocketAddr| async move {
        use http_body_util::BodyExt;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http::<http_body_util::Empty<bytes::Bytes>>();
        let response = client
            .get(format!("http://{addr}/v2/models/ranker").parse().unwrap())
            .await
            .unwrap();
        let status = response.status();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    };
    let (status, body) = h2(rest_addr).await;
    assert_eq!(status, 200, "{body:?}");
    let direct = {
        let (mut stream, request) = (
            tokio::net::TcpStream::connect(kserve.addr).await.unwrap(),
            format!(
                "GET /v2/models/ranker HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                kserve.addr
            ),
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        response
    };
    assert!(
        direct.ends_with(&body),
        "over h2c: {body:?}; directly: {:?}",
        String::from_utf8_lossy(&direct)
    );

    // Candidate ids as floats: the model takes them, the sidecar cannot log them. The caller
    // gets the model's answer; the operator gets a dead letter naming the call.
    let floats = r#"{"id":"rest-dead-1","inputs":[
        {"name":"item_id","shape":[2],"datatype":"FP32","data":[1.5,2.5]},
        {"name":"item_price","shape":[2],"datatype":"FP32","data":[9.5,4.5]}]}"#;
    let post = |addr: SocketAddr| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /v2/models/other/infer HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{floats}",
            floats.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let text = String::from_utf8_lossy(&response).into_owned();
        text[text.find("\r\n\r\n").unwrap()..].to_owned()
    };
    let (via, direct) = (post(rest_addr).await, post(kserve.addr).await);
    assert_eq!(via, direct);
    assert!(via.contains("score"), "the model answered: {via}");

    let metrics = sidecar.metrics.clone();
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(metrics.dropped_count("bad_candidate_ids"), 1);
    let letters = kafka.read(&dead, 1, Duration::from_secs(60)).await;
    assert_eq!(letters[0].key_str(), "rest-dead-1");
    let letter: serde_json::Value = serde_json::from_slice(&letters[0].payload).unwrap();
    assert_eq!(
        (&letter["reason"], &letter["binding"], &letter["model"]),
        (
            &serde_json::json!("bad_candidate_ids"),
            &serde_json::json!("rest"),
            &serde_json::json!("other")
        )
    );
    assert_eq!(letter["request_bytes"], floats.len());
    let records = kafka
        .read(&topic, calls.len(), Duration::from_secs(60))
        .await;
    let by_key: BTreeMap<String, _> = records
        .iter()
        .map(|r| (r.key_str().to_owned(), decode_log(&r.payload)))
        .collect();
    assert_eq!(by_key.len(), calls.len(), "one record per logged call");
    for call in calls {
        let id = call["request_id"].as_str().unwrap();
        let record = by_key
            .get(id)
            .unwrap_or_else(|| panic!("no record keyed {id:?}: {:?}", by_key.keys()));
        assert_eq!(record.request_id, id);
        // The header the allow list logs, where the client sent it.
        let country = (id == "json-1").then_some("JP");
        assert_eq!(
            record.parameters.get("x-user-country").map(String::as_str),
            country,
            "{id}"
        );
        let model = call["model"].as_str().unwrap();
        assert_eq!(record.model_name, model);
        let ids: Vec<i64> = serde_json::from_value(call["candidate_ids"].clone()).unwrap();
        assert_eq!(record.candidate_int_ids, ids, "{id}");
        let names: Vec<_> = record.features.iter().map(|f| f.name.as_str()).collect();
        let listed: &[&str] = if model == "other" {
            &["item_price", "user_age"]
        } else {
            &["user_age", "user_locale", "item_price", "item_embedding"]
        };
        assert_eq!(names, listed, "{id}: exactly the allow-listed features");
        for feature in &record.features {
            let got = featurelog_testkit::serving::logged_values_json(feature);
            assert_eq!(
                got, call["features"][&feature.name],
                "{id}: {} differs from what the client sent",
                feature.name
            );
        }
        if model == "other" {
            assert!(record.outputs.is_empty(), "{id}: its rule logs no outputs");
            continue;
        }
        let emb = record
            .features
            .iter()
            .find(|f| f.name == "item_embedding")
            .unwrap();
        assert_eq!(emb.row_shape, [4], "{id}: a vector stays a vector");
        let score: Vec<u32> = record.outputs[0]
            .values
            .as_ref()
            .unwrap()
            .fp32_values
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(
            serde_json::json!(score),
            call["score_bits"],
            "{id}: the logged score is the one returned"
        );
    }
    let skipped = |reason| metrics.skipped.get_or_create(&Reason { reason }).get();
    let dropped = |reason| metrics.dropped.get_or_create(&Reason { reason }).get();
    assert_eq!(skipped("not_allow_listed"), 1, "the unlisted model");
    // The refused call: an error from the model server, or data the sidecar cannot read.
    assert_eq!(skipped("call_failed") + dropped("shape_mismatch"), 1);
    let rendered = metrics.render();
    assert!(
        rendered.contains(r#"featurelog_sidecar_calls_total{method="rest_infer",outcome="ok"}"#),
        "{rendered}"
    );
}
