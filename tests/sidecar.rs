//! The sidecar against the real broker and the reference model server: what a client sees is
//! what the model server said, and what lands on the topic is exactly the allow-listed features,
//! bit for bit, for typed and for raw tensors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::time::Duration;

use featurelog_schemas::featurelog::v1::{DataType, Values};
use featurelog_schemas::inference::ModelMetadataRequest;
use featurelog_schemas::tensor::TensorValues;
use featurelog_testkit::kafka;
use featurelog_testkit::serving::{
    client, decode_log, grpc_frame, h2_connection, model_server, ranker_request, sent_values,
    sidecar, sidecar_config, temp_dir,
};

const ALLOW: &str = r#"
[[model]]
name = "ranker"
features = ["user_age", "user_locale", "item_price", "item_embedding", "item_category"]
outputs = ["score"]
candidate-ids-input = "item_id"
parameters = ["surface"]
headers = ["x-user-country"]
"#;

/// The features `ALLOW` logs, in its order (which is the order of a record's features).
const LOGGED: [&str; 5] = [
    "user_age",
    "user_locale",
    "item_price",
    "item_embedding",
    "item_category",
];

fn values_equal_bitwise(got: &Values, want: &TensorValues) -> bool {
    let want = want.clone().into_values();
    got.fp32_values
        .iter()
        .map(|x| x.to_bits())
        .eq(want.fp32_values.iter().map(|x| x.to_bits()))
        && got.int32_values == want.int32_values
        && got.int64_values == want.int64_values
        && got.bytes_values == want.bytes_values
}

/// A record of the allow list `ALLOW` for `request`, answered with `response`: exactly the
/// listed features, in list order, bit-exact to what the model received, and the score.
fn check_record(
    record: &featurelog_schemas::featurelog::v1::FeatureLog,
    request: &featurelog_schemas::inference::ModelInferRequest,
    response: &featurelog_schemas::inference::ModelInferResponse,
) {
    assert_eq!(record.request_id, request.id);
    assert_eq!(record.model_name, "ranker");
    assert_eq!(
        record.parameters.get("surface").map(String::as_str),
        Some("home")
    );
    let names: Vec<_> = record.features.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names, LOGGED,
        "exactly the allow-listed features, in allow-list order"
    );
    assert_eq!(record.row_count, 20);
    // INT64 ids are logged as numbers.
    let sent_ids: Vec<i64> = sent_values(request, "item_id")
        .to_ids()
        .unwrap()
        .iter()
        .map(|id| id.parse().unwrap())
        .collect();
    assert_eq!(record.candidate_int_ids, sent_ids);
    assert!(record.candidate_ids.is_empty());
    for feature in &record.features {
        let sent = sent_values(request, &feature.name);
        assert!(
            values_equal_bitwise(feature.values.as_ref().unwrap(), &sent),
            "{} of {}: logged values differ from what the model received",
            feature.name,
            request.id
        );
    }
    let age = record
        .features
        .iter()
        .find(|f| f.name == "user_age")
        .unwrap();
    assert!(age.per_request && age.datatype == DataType::Int32 as i32);
    let emb = record
        .features
        .iter()
        .find(|f| f.name == "item_embedding")
        .unwrap();
    assert_eq!(emb.row_shape, [8]);
    let returned = featurelog_schemas::tensor::decode(
        "score",
        "FP32",
        &response.outputs[0].shape,
        response.outputs[0].contents.as_ref(),
        response.raw_output_contents.first(),
    )
    .unwrap();
    assert_eq!(record.outputs.len(), 1);
    assert!(values_equal_bitwise(
        record.outputs[0].values.as_ref().unwrap(),
        &returned.values
    ));
}

#[tokio::test]
async fn sidecar_is_transparent_and_logs_exactly_the_allow_listed_features() {
    let Some(kafka) = kafka("sidecar_is_transparent_and_logs_exactly_the_allow_listed_features")
    else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-e2e", 2).await;
    let (model_addr, _stop_model) = model_server(&["ranker", "unlisted"]).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, ALLOW);
    let sidecar = sidecar(config).await;
    let mut direct = client(model_addr).await;
    let mut via = client(sidecar.local_addr).await;

    // Typed and raw requests: the same response either way, and a record each.
    let typed = ranker_request("req-typed", 20, 30, 1, false);
    let raw = ranker_request("req-raw", 20, 30, 2, true);
    let mut scores = Vec::new();
    for request in [&typed, &raw] {
        let want = direct
            .model_infer(request.clone())
            .await
            .unwrap()
            .into_inner();
        let got = via.model_infer(request.clone()).await.unwrap().into_inner();
        assert_eq!(
            got, want,
            "the sidecar changed the response of {}",
            request.id
        );
        scores.push(want);
    }
    assert!(scores[1].raw_output_contents.len() == 1, "raw in, raw out");

    // Errors pass through unchanged, code and message.
    let unknown = ModelMetadataRequest {
        name: "nope".into(),
        version: String::new(),
    };
    let want = direct.model_metadata(unknown.clone()).await.unwrap_err();
    let got = via.model_metadata(unknown).await.unwrap_err();
    assert_eq!((got.code(), got.message()), (want.code(), want.message()));

    // A method the protocol does not define (the gRPC health service) passes through.
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", sidecar.local_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: "inference.GRPCInferenceService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // No id anywhere: the sidecar makes one and returns it. An x-request-id header is used as is.
    let anonymous = via
        .model_infer(ranker_request("", 5, 0, 3, false))
        .await
        .unwrap();
    let generated = anonymous
        .metadata()
        .get("x-request-id")
        .expect("a generated request id in the response metadata")
        .to_str()
        .unwrap()
        .to_owned();
    let mut tagged = tonic::Request::new(ranker_request("", 5, 0, 4, true));
    tagged
        .metadata_mut()
        .insert("x-request-id", "from-header".parse().unwrap());
    // Context an API gateway adds, which the allow list logs (`headers`).
    tagged
        .metadata_mut()
        .insert("x-user-country", "JP".parse().unwrap());
    let tagged = via.model_infer(tagged).await.unwrap();
    assert!(
        tagged.metadata().get("x-request-id").is_none(),
        "the caller's id is not replaced"
    );

    // A model that is not on the allow list is forwarded and not logged.
    let mut unlisted = ranker_request("req-unlisted", 5, 0, 5, false);
    unlisted.model_name = "unlisted".into();
    let want = direct
        .model_infer(unlisted.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(via.model_infer(unlisted).await.unwrap().into_inner(), want);

    // Shutdown drains and flushes: nothing is left unacknowledged.
    let metrics = sidecar.metrics.clone();
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(metrics.records_delivered.get(), 4);
    // Counted by model: the listed one only, the unlisted model has no series.
    let exposition = metrics.render();
    assert!(
        exposition
            .lines()
            .any(|l| l == "featurelog_sidecar_records_produced_total{model=\"ranker\"} 4"),
        "{exposition}"
    );
    assert!(!exposition.contains("model=\"unlisted\""), "{exposition}");

    let records = kafka.read(&topic, 4, Duration::from_secs(60)).await;
    let by_key = |k: &str| {
        records
            .iter()
            .find(|r| r.key_str() == k)
            .unwrap_or_else(|| panic!("no record keyed {k}"))
    };
    for (request, response) in [&typed, &raw].into_iter().zip(&scores) {
        check_record(&decode_log(&by_key(&request.id).payload), request, response);
    }
    assert_eq!(
        decode_log(&by_key(&generated).payload).request_id,
        generated
    );
    let tagged = decode_log(&by_key("from-header").payload);
    assert_eq!(tagged.request_id, "from-header");
    assert_eq!(
        tagged.parameters.get("x-user-country").map(String::as_str),
        Some("JP"),
        "the listed header, with the request's parameters"
    );
    assert_eq!(
        tagged.parameters.get("surface").map(String::as_str),
        Some("home")
    );
    assert!(
        records.iter().all(|r| r.key_str() != "req-unlisted"),
        "deny by default"
    );
    assert_eq!(metrics.skipped_count("not_allow_listed"), 1);
}

/// A body fed from a channel, frame by frame: it ends when the sender is dropped.
struct Fed(tokio::sync::mpsc::Receiver<http_body::Frame<bytes::Bytes>>);

impl Fed {
    /// A body of `frames`, in order, and its end.
    fn of(frames: impl IntoIterator<Item = http_body::Frame<bytes::Bytes>>) -> Self {
        let frames: Vec<_> = frames.into_iter().collect();
        let (tx, rx) = tokio::sync::mpsc::channel(frames.len().max(1));
        for frame in frames {
            let _ = tx.try_send(frame);
        }
        Self(rx)
    }
}

impl http_body::Body for Fed {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

/// A model server that answers a ModelInfer call as soon as it has the request's message,
/// without waiting for the end of the request stream (HTTP/2 allows it; gRPC servers that read
/// one message and reply do it), then lets the request go, which resets the rest of the stream.
/// The answer is the reference model server's, at `model`.
async fn answers_before_the_request_ends(model: std::net::SocketAddr) -> std::net::SocketAddr {
    use http_body_util::BodyExt;
    use prost::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (io, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(
                move |req: http::Request<hyper::body::Incoming>| async move {
                    let mut body = req.into_body();
                    let mut got = Vec::new();
                    while got.len() < 5
                        || got.len()
                            < 5 + u32::from_be_bytes(got[1..5].try_into().unwrap()) as usize
                    {
                        let frame = body.frame().await.unwrap().unwrap();
                        got.extend_from_slice(&frame.into_data().unwrap());
                    }
                    drop(body);
                    let request =
                        featurelog_schemas::inference::ModelInferRequest::decode(&got[5..])
                            .unwrap();
                    let response = client(model)
                        .await
                        .model_infer(request)
                        .await
                        .unwrap()
                        .into_inner();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    let body = Fed::of([
                        http_body::Frame::data(grpc_frame(&response.encode_to_vec())),
                        http_body::Frame::trailers(trailers),
                    ]);
                    http::Response::builder()
                        .header("content-type", "application/grpc")
                        .body(body)
                },
            );
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(io), service),
            );
        }
    });
    addr
}

/// NVIDIA's own Python client (raw tensors, its own gRPC stack) through the sidecar: the same
/// response as direct, and a record bit-exact to what the client sent.
#[tokio::test]
async fn tritonclient_works_through_the_sidecar_and_is_logged_bit_exact() {
    official_client_through_the_sidecar("tritonclient", "triton_infer.py", &["triton-req-1"]).await;
}

/// The same through tritonclient's stream API (`start_stream`, `async_stream_infer`: Triton's
/// ModelStreamInfer).
#[tokio::test]
async fn tritonclient_s_stream_api_works_through_the_sidecar_and_is_logged_bit_exact() {
    official_client_through_the_sidecar(
        "tritonclient_stream",
        "triton_infer.py",
        &["triton-stream-1", "stream"],
    )
    .await;
}

/// KServe's Python client (`kserve.InferenceGRPCClient`, typed `contents` from Python lists,
/// asyncio gRPC) through the sidecar: the same response as direct, a record bit-exact to what
/// it sent.
#[tokio::test]
async fn kserve_client_works_through_the_sidecar_and_is_logged_bit_exact() {
    official_client_through_the_sidecar("kserve", "kserve_infer.py", &["kserve-req-1"]).await;
}

/// Runs `tests/clients/<script> SIDECAR MODEL REQUEST_ID [MODE]` (`args`: the id, then the
/// mode), which calls the model through the sidecar and directly, fails if the responses
/// differ, and prints what it sent; then checks the one logged record against that, bit for
/// bit.
async fn official_client_through_the_sidecar(client: &str, script: &str, args: &[&str]) {
    let request_id = args[0];
    let Some(kafka) = kafka(&format!("{client}_works_through_the_sidecar")) else {
        return;
    };
    let topic = kafka.unique_topic(&format!("sidecar-{client}"), 1).await;
    let (model_addr, _stop_model) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, ALLOW);
    let sidecar = sidecar(config).await;

    let mut argv = vec![sidecar.local_addr.to_string(), model_addr.to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let sent = featurelog_testkit::python_json_async(script, argv).await;

    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    let records = kafka.read(&topic, 1, Duration::from_secs(60)).await;
    let record = decode_log(&records[0].payload);
    assert_eq!(record.request_id, request_id);
    assert_eq!(records[0].key_str(), request_id);
    // The loop below checks only the features the record has: a record with none, or with
    // one missing, would pass it.
    let logged: Vec<&str> = record.features.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        logged, LOGGED,
        "exactly the allow-listed features, in allow-list order"
    );
    let mut sent_names: Vec<&str> = sent["features"]
        .as_object()
        .expect("the client prints the features it sent")
        .keys()
        .map(String::as_str)
        .collect();
    sent_names.sort_unstable();
    let mut logged_sorted = logged.clone();
    logged_sorted.sort_unstable();
    assert_eq!(
        logged_sorted, sent_names,
        "every allow-listed feature the client sent is logged, and nothing else"
    );
    let ids: Vec<i64> = serde_json::from_value(sent["candidate_ids"].clone()).unwrap();
    assert_eq!(record.candidate_int_ids, ids);
    for feature in &record.features {
        let want = &sent["features"][&feature.name];
        let got = featurelog_testkit::serving::logged_values_json(feature);
        assert_eq!(&got, want, "{}", feature.name);
    }
    let scores: Vec<u32> = record.outputs[0]
        .values
        .as_ref()
        .unwrap()
        .fp32_values
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(serde_json::json!(scores), sent["score_bits"]);
}

/// A caller's deadline travels through the sidecar: the call fails at the deadline, and the
/// model server sees the call cancelled instead of finishing it.
#[tokio::test]
async fn deadlines_and_cancellation_reach_the_model_server() {
    let (model_addr, _stop, cancelled) =
        featurelog_testkit::serving::model_server_counting(&["ranker"]).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), model_addr, None, "unused", "");
    let sidecar = sidecar(config).await;
    let mut via = client(sidecar.local_addr).await;
    let mut request = tonic::Request::new(slow_request("slow", 5_000));
    request.set_timeout(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let err = via.model_infer(request).await.unwrap_err();
    // tonic's client enforces the deadline too, so whichever timer fires first decides between
    // these two; what matters is below: the model server stopped working on the call.
    assert!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the deadline was not honoured"
    );
    let seen = featurelog_testkit::eventually(Duration::from_secs(3), || {
        cancelled.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    assert!(seen, "the model server never saw the call cancelled");
}

/// `/healthz` says the process is up and `/readyz` that it takes calls. Once the sidecar is
/// told to stop it no longer accepts calls, and `/readyz` fails at once, before anything waits
/// for the shutdown, so that Kubernetes stops routing to it; `/healthz` still answers.
#[tokio::test]
async fn readiness_fails_as_soon_as_the_sidecar_is_told_to_stop() {
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), model_addr, None, "unused", "");
    let sidecar = sidecar(config).await;
    let addr = sidecar.metrics_addr;
    // The endpoint runs on this test's runtime: its blocking client must not.
    let status = |path: &'static str| async move {
        let answer =
            tokio::task::spawn_blocking(move || featurelog_testkit::serving::http_get(addr, path))
                .await
                .unwrap()
                .unwrap_or_default();
        answer
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .unwrap_or("none")
            .to_owned()
    };
    assert_eq!(status("/healthz").await, "200");
    assert_eq!(status("/readyz").await, "200");

    sidecar.stop();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while status("/readyz").await != "503" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz still said ready 10 s after the sidecar was told to stop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status("/healthz").await, "200", "the process is still up");
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(status("/readyz").await, "503");
}

/// A ranker request the reference model server takes `delay_ms` to answer.
fn slow_request(id: &str, delay_ms: i64) -> featurelog_schemas::inference::ModelInferRequest {
    let mut slow = ranker_request(id, 3, 0, 1, false);
    slow.parameters.insert(
        "delay_ms".into(),
        featurelog_schemas::inference::InferParameter {
            parameter_choice: Some(
                featurelog_schemas::inference::infer_parameter::ParameterChoice::Int64Param(
                    delay_ms,
                ),
            ),
        },
    );
    slow
}

/// Calls ModelInfer at `addr` with a `grpc-timeout` of `timeout` (the header's own syntax,
/// `300m`) from a client with no timer of its own, so that the answer is the one the server
/// (or, through the sidecar, the model server) gave: its grpc-status and grpc-message.
async fn infer_with_grpc_timeout(
    addr: std::net::SocketAddr,
    request: &featurelog_schemas::inference::ModelInferRequest,
    timeout: &str,
) -> (String, String) {
    use http_body_util::BodyExt;
    use prost::Message;
    let mut send = h2_connection(addr).await;
    let call = http::Request::post(format!(
        "http://{addr}/inference.GRPCInferenceService/ModelInfer"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-timeout", timeout)
    .body(http_body_util::Full::new(grpc_frame(
        &request.encode_to_vec(),
    )))
    .unwrap();
    // Bounded only so that a deadline that never reaches the model server fails the test
    // instead of hanging it: the model would answer after its whole delay.
    let response = tokio::time::timeout(Duration::from_secs(20), async {
        let response = send.send_request(call).await.unwrap();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap();
        (headers, body.trailers().cloned().unwrap_or_default())
    })
    .await
    .expect("the deadline was not enforced: the call ran past it");
    let (headers, trailers) = response;
    // A trailers-only answer (an error, usually) carries its status in the headers.
    let field = |name: &str| {
        trailers
            .get(name)
            .or_else(|| headers.get(name))
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    (field("grpc-status"), field("grpc-message"))
}

/// The same as `deadlines_and_cancellation_reach_the_model_server`, with the call on the
/// logging path (log mode, the model allow-listed), where the proxy taps both bodies and may
/// wait for the request before it answers: a deadline still reaches the model server, which
/// enforces it, and the caller gets what the model server said, as directly; a caller that
/// cancels cancels the model server's work. Neither call is logged (a failed call is skipped,
/// a cancelled one never finished), and the sidecar goes on serving and logging.
#[tokio::test]
async fn deadlines_and_cancellation_on_the_logging_path_reach_the_model_server() {
    use featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
    use std::sync::atomic::Ordering::SeqCst;
    let Some(kafka) = kafka("deadlines_and_cancellation_on_the_logging_path") else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-deadlines", 1).await;
    let (model_addr, _stop, cancelled) =
        featurelog_testkit::serving::model_server_counting(&["ranker"]).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, ALLOW);
    let sidecar = sidecar(config).await;
    let metrics = sidecar.metrics.clone();
    let mut direct = client(model_addr).await;
    let mut via = client(sidecar.local_addr).await;
    via.model_infer(ranker_request("before", 20, 0, 1, false))
        .await
        .unwrap();
    let cancellations = |n: u64| {
        let cancelled = cancelled.clone();
        async move {
            featurelog_testkit::eventually(Duration::from_secs(10), || cancelled.load(SeqCst) == n)
                .await
        }
    };

    // A deadline well inside the model's delay: the model server's own timer ends the call.
    let want = infer_with_grpc_timeout(model_addr, &slow_request("late", 20_000), "300m").await;
    assert!(cancellations(1).await, "the direct call was not cancelled");
    assert_ne!(
        want.0, "0",
        "the direct call ran past its deadline: {want:?}"
    );
    let got =
        infer_with_grpc_timeout(sidecar.local_addr, &slow_request("late", 20_000), "300m").await;
    assert_eq!(
        got, want,
        "through the sidecar the caller gets what the model server said"
    );
    assert!(
        cancellations(2).await,
        "the model server did not cancel the call at the deadline the sidecar forwarded"
    );

    // A caller that gives up (its client resets the stream) while the model is working, directly
    // and through the sidecar: the model server stops working on it either way.
    let give_up = |mut client: GrpcInferenceServiceClient<tonic::transport::Channel>| async move {
        let call = client.model_infer(slow_request("given-up", 20_000));
        // Long enough for the call to reach the model server; the model takes 20 s.
        let outcome = tokio::time::timeout(Duration::from_secs(1), call).await;
        assert!(outcome.is_err(), "the slow call finished: {outcome:?}");
    };
    give_up(direct.clone()).await;
    assert!(cancellations(3).await, "the direct call was not cancelled");
    give_up(via.clone()).await;
    assert!(
        cancellations(4).await,
        "the model server never saw the call cancelled through the sidecar"
    );

    // Still serving, over the same connection, and still logging.
    let after = ranker_request("after", 20, 0, 2, false);
    let want = direct
        .model_infer(after.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(via.model_infer(after).await.unwrap().into_inner(), want);

    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(
        metrics.skipped_count("call_failed"),
        1,
        "the call past its deadline"
    );
    assert_eq!(metrics.dropped_count("incomplete_call"), 0);
    assert_eq!(
        metrics.records_delivered.get(),
        2,
        "only the calls that succeeded are logged"
    );
    let records = kafka.read(&topic, 2, Duration::from_secs(60)).await;
    let mut keys: Vec<String> = records.iter().map(|r| r.key_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["after", "before"]);
}

/// Triton's ModelStreamInfer (many inferences over one stream, as tritonclient's stream API
/// sends them): the responses through the sidecar are the model server's, and each streamed
/// inference is logged as a ModelInfer call would be, paired with its response by id. A
/// request without an id, one for an unlisted model and one that fails are forwarded and
/// answered, and not logged, each counted by its reason.
#[tokio::test]
async fn streamed_inferences_are_logged_like_calls_and_answered_unchanged() {
    use featurelog_schemas::inference::model_infer_request::InferRequestedOutputTensor;
    let Some(kafka) = kafka("streamed_inferences_are_logged_like_calls_and_answered_unchanged")
    else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-stream", 2).await;
    let (model_addr, _stop_model) = model_server(&["ranker", "unlisted"]).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, ALLOW);
    let sidecar = sidecar(config).await;

    let raw = ranker_request("stream-raw", 20, 30, 11, true);
    let typed = ranker_request("stream-typed", 20, 30, 12, false);
    let anonymous = ranker_request("", 20, 0, 13, false);
    let mut unlisted = ranker_request("stream-unlisted", 5, 0, 14, false);
    unlisted.model_name = "unlisted".into();
    let mut failing = ranker_request("stream-failing", 5, 0, 15, false);
    failing.outputs = vec![InferRequestedOutputTensor {
        name: "nope".into(),
        ..Default::default()
    }];
    let requests = vec![raw.clone(), anonymous, unlisted, failing, typed.clone()];
    let answers = |addr| {
        let requests = requests.clone();
        async move {
            let mut stream = client(addr)
                .await
                .model_stream_infer(tonic::codegen::tokio_stream::iter(requests))
                .await
                .unwrap()
                .into_inner();
            let mut answers = Vec::new();
            while let Some(answer) = stream.message().await.unwrap() {
                answers.push(answer);
            }
            answers
        }
    };
    let direct = answers(model_addr).await;
    let via = answers(sidecar.local_addr).await;
    assert_eq!(via, direct, "the sidecar changed the stream's answers");
    assert_eq!(via.len(), 5);
    assert!(via[3].error_message.contains("nope"), "{:?}", via[3]);

    let metrics = sidecar.metrics.clone();
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    let records = kafka.read(&topic, 2, Duration::from_secs(60)).await;
    let mut keys: Vec<String> = records.iter().map(|r| r.key_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["stream-raw", "stream-typed"]);
    for (request, answer) in [(&raw, &direct[0]), (&typed, &direct[4])] {
        let record = records.iter().find(|r| r.key_str() == request.id).unwrap();
        check_record(
            &decode_log(&record.payload),
            request,
            answer.infer_response.as_ref().unwrap(),
        );
    }
    assert_eq!(metrics.records_delivered.get(), 2);
    let count = |family: &str, reason: &'static str| {
        let reason = featurelog_sidecar::metrics::Reason { reason };
        match family {
            "dropped" => metrics.dropped.get_or_create(&reason).get(),
            _ => metrics.skipped.get_or_create(&reason).get(),
        }
    };
    assert_eq!(count("dropped", "no_request_id"), 1);
    assert_eq!(count("skipped", "not_allow_listed"), 1);
    assert_eq!(count("skipped", "call_failed"), 1);
    assert_eq!(count("dropped", "incomplete_call"), 0);
}

/// A model server may answer once it has a call's message, before the caller's end of stream
/// arrives, and reset the rest of the request stream. The call is still logged (the model read
/// the whole message), and the caller is not handed a generated `x-request-id`: the request
/// names itself, and that is the id its record carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_answered_before_its_request_ends_is_logged_under_its_own_id() {
    use http_body_util::BodyExt;
    use prost::Message;
    let Some(kafka) = kafka("a_call_answered_before_its_request_ends_is_logged_under_its_own_id")
    else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-early", 1).await;
    let (model_addr, _stop_model) = model_server(&["ranker"]).await;
    let upstream = answers_before_the_request_ends(model_addr).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), upstream, Some(&kafka.config), &topic, ALLOW);
    let sidecar = sidecar(config).await;

    let request = ranker_request("req-early", 20, 30, 7, true);
    let want = client(model_addr)
        .await
        .model_infer(request.clone())
        .await
        .unwrap()
        .into_inner();
    // A client that sends the message and keeps its request stream open until it has the
    // whole answer.
    let mut send = h2_connection(sidecar.local_addr).await;
    let (feed, body) = tokio::sync::mpsc::channel(1);
    feed.send(http_body::Frame::data(grpc_frame(&request.encode_to_vec())))
        .await
        .unwrap();
    let call = http::Request::post(format!(
        "http://{}/inference.GRPCInferenceService/ModelInfer",
        sidecar.local_addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Fed(body))
    .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), send.send_request(call))
        .await
        .expect("answered while the request is still open")
        .unwrap();
    assert!(
        response.headers().get("x-request-id").is_none(),
        "the request names itself: {:?}",
        response.headers()
    );
    let answer = response.into_body().collect().await.unwrap();
    assert_eq!(
        answer
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .map(|v| v.as_bytes()),
        Some(&b"0"[..])
    );
    let bytes = answer.to_bytes();
    let got = featurelog_schemas::inference::ModelInferResponse::decode(&bytes[5..]).unwrap();
    assert_eq!(got, want, "the model server's answer, unchanged");
    drop(feed);

    let metrics = sidecar.metrics.clone();
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(metrics.dropped_count("incomplete_call"), 0);
    let records = kafka.read(&topic, 1, Duration::from_secs(60)).await;
    assert_eq!(records[0].key_str(), "req-early");
    check_record(&decode_log(&records[0].payload), &request, &want);
}
