//! The sidecar against hostile or merely unusual clients and model servers: oversized metadata,
//! oversized trailers, records larger than the topic takes, requests that lack a feature, and a
//! client that misbehaves in every way at once. The promise under test: only the offending
//! call fails, with the status a gRPC server gives; every other call is answered as the model
//! server answered it, and logged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use featurelog_testkit::serving::{
    client, decode_log, grpc_frame, h2_connection, model_server, ranker_request, sidecar,
    sidecar_config, temp_dir,
};
use featurelog_testkit::{eventually, kafka};
use http_body_util::BodyExt;
use prost::Message;

fn allow(features: &[&str]) -> String {
    format!(
        "[[model]]\nname = \"ranker\"\nfeatures = {features:?}\ncandidate-ids-input = \"item_id\"\n"
    )
}

/// A sidecar in log mode in front of the reference model server (the ranker), logging
/// `features` to a fresh topic named after `prefix`: the sidecar, the topic, and what must live
/// as long as the test (the allow list's directory, the model server's stop token).
async fn logging_sidecar(
    kafka: &featurelog_testkit::TestKafka,
    prefix: &str,
    features: &[&str],
) -> (
    featurelog_sidecar::Sidecar,
    String,
    (tempfile::TempDir, tokio_util::sync::CancellationToken),
) {
    let topic = kafka.unique_topic(prefix, 1).await;
    let (model_addr, stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let config = sidecar_config(
        dir.path(),
        model_addr,
        Some(&kafka.config),
        &topic,
        &allow(features),
    );
    (sidecar(config).await, topic, (dir, stop))
}

/// A request carrying `bytes` of metadata in one header.
fn with_metadata(
    request: featurelog_schemas::inference::ModelInferRequest,
    bytes: usize,
) -> tonic::Request<featurelog_schemas::inference::ModelInferRequest> {
    let mut request = tonic::Request::new(request);
    let value = tonic::metadata::MetadataValue::try_from("m".repeat(bytes)).unwrap();
    request.metadata_mut().insert("x-app-context", value);
    request
}

/// 200 calls share one connection with two whose metadata is over the limit (20 kB, which
/// HTTP/2 would refuse with a 431, and 70 kB, which would close the connection): those two are
/// answered RESOURCE_EXHAUSTED, as a gRPC server answers, and counted; the 200 others are
/// answered and logged.
#[tokio::test]
async fn oversized_metadata_fails_its_own_call_and_no_other() {
    let Some(kafka) = kafka("oversized_metadata_fails_its_own_call_and_no_other") else {
        return;
    };
    let (sidecar, topic, _keep) =
        logging_sidecar(&kafka, "sidecar-big-metadata", &["item_price"]).await;
    let metrics = sidecar.metrics.clone();
    // One channel: every call below is a stream of the same HTTP/2 connection.
    let via = client(sidecar.local_addr).await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let mut via = via.clone();
        calls.spawn(async move {
            let request = ranker_request(&format!("fine-{i}"), 4, 0, i, i % 2 == 0);
            via.model_infer(with_metadata(request, 100))
                .await
                .map(|_| ())
        });
    }
    for bytes in [20_000, 70_000] {
        let mut via = via.clone();
        calls.spawn(async move {
            let request = ranker_request(&format!("big-{bytes}"), 4, 0, 1, false);
            match via.model_infer(with_metadata(request, bytes)).await {
                Err(status) if status.code() == tonic::Code::ResourceExhausted => Ok(()),
                other => panic!("{bytes} bytes of metadata: {other:?}"),
            }
        });
    }
    let mut failed = Vec::new();
    while let Some(done) = calls.join_next().await {
        if let Err(status) = done.unwrap() {
            failed.push(status);
        }
    }
    assert!(failed.is_empty(), "well-formed calls failed: {failed:?}");
    let refused = featurelog_sidecar::metrics::CallLabels {
        method: "model_infer",
        outcome: "headers_too_large",
    };
    assert_eq!(metrics.calls.get_or_create(&refused).get(), 2);
    // The connection is still good.
    via.clone()
        .model_infer(ranker_request("after", 4, 0, 7, false))
        .await
        .expect("the connection did not survive the oversized metadata");

    sidecar.stop();
    sidecar.wait().await;
    let records = kafka.read(&topic, 201, Duration::from_secs(60)).await;
    let fine = records
        .iter()
        .filter(|r| r.key_str().starts_with("fine-"))
        .count();
    assert_eq!(fine, 200, "every well-formed call is logged");
    assert!(!records.iter().any(|r| r.key_str().starts_with("big-")));
}

/// A model server that answers every call with a gRPC-framed empty response whose headers and
/// trailers echo the request's `id`, as MLServer's `ce-id` and `ce-requestid` trailers do. It
/// adds no `date` header, so that any `date` the client sees was added on the way.
async fn echoing_model_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (io, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(
                |req: http::Request<hyper::body::Incoming>| async move {
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let id = featurelog_schemas::inference::ModelInferRequest::decode(&body[5..])
                        .unwrap()
                        .id;
                    let id = http::HeaderValue::from_str(&id).unwrap();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    trailers.insert("ce-id", id.clone());
                    trailers.insert("ce-requestid", id.clone());
                    let response = http::Response::builder()
                        .header("content-type", "application/grpc")
                        .header("x-model-server", "echo")
                        .header("ce-source", id);
                    let empty = featurelog_schemas::inference::ModelInferResponse::default();
                    let body = Frames(
                        [
                            http_body::Frame::data(grpc_frame(&empty.encode_to_vec())),
                            http_body::Frame::trailers(trailers),
                        ]
                        .into(),
                    );
                    response.body(body)
                },
            );
            let mut builder =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder
                .max_header_list_size(1 << 20)
                .auto_date_header(false);
            tokio::spawn(builder.serve_connection(hyper_util::rt::TokioIo::new(io), service));
        }
    });
    addr
}

/// A body of frames that are all ready, in order.
struct Frames(std::collections::VecDeque<http_body::Frame<Bytes>>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// Calls ModelInfer at `addr` over a bare HTTP/2 connection that takes header lists up to
/// 1 MiB, for a request whose `id` is `id`: the response's headers and trailers.
async fn headers_and_trailers(addr: SocketAddr, id: &str) -> (http::HeaderMap, http::HeaderMap) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .max_header_list_size(1 << 20)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = ranker_request(id, 4, 0, 1, false);
    let call = http::Request::post(format!(
        "http://{addr}/inference.GRPCInferenceService/ModelInfer"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(http_body_util::Full::new(grpc_frame(
        &request.encode_to_vec(),
    )))
    .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), send.send_request(call))
        .await
        .expect("no answer")
        .expect("the call failed");
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body failed");
    (headers, body.trailers().cloned().unwrap_or_default())
}

/// Headers and trailers of any size the client takes reach it as the model server sent them,
/// in pass-through and in log mode, and the sidecar adds none of its own (no `date`).
#[tokio::test]
async fn the_model_server_s_headers_and_trailers_reach_the_client_as_sent() {
    let upstream = echoing_model_server().await;
    let dir = temp_dir();
    let shared = kafka("the_model_server_s_headers_and_trailers_reach_the_client_as_sent");
    let mut sidecars = vec![
        sidecar(sidecar_config(
            dir.path(),
            upstream,
            None,
            "unused",
            &allow(&["item_price"]),
        ))
        .await,
    ];
    if let Some(kafka) = &shared {
        let topic = kafka.unique_topic("sidecar-echo", 1).await;
        let logging = dir.path().join("log");
        std::fs::create_dir_all(&logging).unwrap();
        sidecars.push(
            sidecar(sidecar_config(
                &logging,
                upstream,
                Some(&kafka.config),
                &topic,
                &allow(&["item_price"]),
            ))
            .await,
        );
    }
    for length in [8_000, 20_000, 100_000] {
        let id = format!("{}id", "0".repeat(length - 2));
        let direct = headers_and_trailers(upstream, &id).await;
        assert_eq!(direct.1.get("ce-requestid").unwrap(), id.as_str());
        assert!(direct.0.get("date").is_none());
        for sidecar in &sidecars {
            let via = headers_and_trailers(sidecar.local_addr, &id).await;
            assert_eq!(
                via.0, direct.0,
                "response headers through the sidecar, id of {length} characters"
            );
            assert_eq!(
                via.1, direct.1,
                "trailers through the sidecar, id of {length} characters"
            );
        }
    }
    for sidecar in sidecars {
        sidecar.stop();
        sidecar.wait().await;
    }
}

/// Creates `topic` taking records of at most `max_message_bytes`.
async fn topic_with_limit(
    kafka: &featurelog_testkit::TestKafka,
    prefix: &str,
    max_message_bytes: usize,
) -> String {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let topic = format!("{prefix}-{}", uuid_like());
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        kafka.config.client_config(&[]).create().unwrap();
    let limit = max_message_bytes.to_string();
    let new = NewTopic::new(&topic, 1, TopicReplication::Fixed(1)).set("max.message.bytes", &limit);
    let created = admin
        .create_topics([&new], &AdminOptions::new())
        .await
        .unwrap();
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    featurelog_kafka::admin::wait_for_leaders(&kafka.config, &topic, 1, Duration::from_secs(30))
        .await
        .unwrap();
    topic
}

/// A name no other test run uses.
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}-{}", std::process::id())
}

/// Small calls and calls whose records are larger than the topic takes, side by side for a few
/// seconds: the large records are refused before the producer as `too_large`, each
/// dead-lettered with its model, request id, size and the limit; the adaptive controller never
/// reads them as a sick broker, so every small call is logged and none is shed.
#[tokio::test]
async fn records_over_the_topic_s_limit_are_dead_lettered_and_logging_goes_on() {
    let Some(kafka) = kafka("records_over_the_topic_s_limit_are_dead_lettered") else {
        return;
    };
    let limit = 200_000;
    let topic = topic_with_limit(&kafka, "sidecar-limit", limit).await;
    let dead_letters = kafka.unique_topic("sidecar-limit-dl", 1).await;
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let features: Vec<String> = ["item_price", "item_embedding"]
        .into_iter()
        .map(String::from)
        .chain((0..50).map(|f| format!("f{f}")))
        .collect();
    let features: Vec<&str> = features.iter().map(String::as_str).collect();
    let mut config = sidecar_config(
        dir.path(),
        model_addr,
        Some(&kafka.config),
        &topic,
        &allow(&features),
    );
    config.publish.dead_letter_topic = dead_letters.clone();
    config.publish.adaptive.interval = Duration::from_millis(200);
    let sidecar = sidecar(config).await;
    let metrics = sidecar.metrics.clone();
    assert!(
        eventually(Duration::from_secs(30), || metrics.record_limit_bytes.get()
            == limit as i64)
        .await,
        "the topic's max.message.bytes was not learned (limit {})",
        metrics.record_limit_bytes.get()
    );
    let mut via = client(sidecar.local_addr).await;
    // 10 small calls a second and 5 large ones, for 4 s.
    for i in 0..60u32 {
        let (id, request) = if i % 3 == 2 {
            let id = format!("large-{i}");
            (id.clone(), ranker_request(&id, 1_000, 50, i, i % 2 == 0))
        } else {
            let id = format!("small-{i}");
            (id.clone(), ranker_request(&id, 4, 50, i, i % 2 == 0))
        };
        via.model_infer(request)
            .await
            .unwrap_or_else(|status| panic!("call {id} failed: {status}"));
        tokio::time::sleep(Duration::from_millis(66)).await;
    }
    assert!(
        eventually(Duration::from_secs(30), || metrics.records_delivered.get()
            == 40)
        .await,
        "{} of the 40 small records were delivered",
        metrics.records_delivered.get()
    );
    assert_eq!(metrics.dropped_count("too_large"), 20);
    assert_eq!(metrics.dropped_count("adaptive_shed"), 0, "nothing shed");
    assert_eq!(metrics.logged_fraction.get(), 1.0);
    sidecar.stop();
    sidecar.wait().await;

    let letters = kafka.read(&dead_letters, 20, Duration::from_secs(60)).await;
    assert_eq!(letters.len(), 20);
    for letter in &letters {
        let json: serde_json::Value = serde_json::from_slice(&letter.payload).unwrap();
        assert_eq!(json["reason"], "too_large", "{json}");
        assert_eq!(json["model"], "ranker", "{json}");
        assert!(
            json["request_id"].as_str().unwrap().starts_with("large-"),
            "{json}"
        );
        assert_eq!(json["limit_bytes"], limit, "{json}");
        assert!(
            json["record_bytes"].as_u64().unwrap() > limit as u64,
            "{json}"
        );
        assert_eq!(letter.key_str(), json["request_id"].as_str().unwrap());
    }
    let records = kafka.read(&topic, 40, Duration::from_secs(60)).await;
    assert_eq!(records.len(), 40);
    assert!(records.iter().all(|r| r.key_str().starts_with("small-")));
}

/// A logged call that lacks a feature its allow-list entry lists is counted per model and
/// feature, on the fast path (raw tensors) and the general one (typed contents) alike.
#[tokio::test]
async fn a_listed_feature_the_request_lacks_is_counted() {
    let Some(kafka) = kafka("a_listed_feature_the_request_lacks_is_counted") else {
        return;
    };
    let (sidecar, topic, _keep) =
        logging_sidecar(&kafka, "sidecar-missing", &["user_age", "user_country"]).await;
    let metrics = sidecar.metrics.clone();
    let mut via = client(sidecar.local_addr).await;
    for i in 0..5u32 {
        via.model_infer(ranker_request(&format!("m-{i}"), 4, 0, i, i < 3))
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(30), || metrics.records_delivered.get()
            == 5)
        .await,
        "the calls were not logged"
    );
    assert_eq!(metrics.missing_feature_count("ranker", "user_country"), 5);
    assert_eq!(metrics.missing_feature_count("ranker", "user_age"), 0);
    let text = metrics.render();
    assert!(
        text.contains(
            "featurelog_sidecar_missing_features_total{model=\"ranker\",feature=\"user_country\"} 5"
        ),
        "{text}"
    );
    sidecar.stop();
    sidecar.wait().await;
    let records = kafka.read(&topic, 5, Duration::from_secs(60)).await;
    for record in records {
        let names: Vec<_> = decode_log(&record.payload)
            .features
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["user_age"]);
    }
}

/// A body that sends `first` and then fails: the client resets its stream mid-body.
struct ResetMidBody(Option<Bytes>);

impl http_body::Body for ResetMidBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(Some(match self.0.take() {
            Some(first) => Ok(http_body::Frame::data(first)),
            None => Err(std::io::Error::other("the client gives up mid-body")),
        }))
    }
}

/// A body of `total` bytes in 1 MiB chunks: one gRPC message that claims all of it.
struct Huge {
    left: usize,
    started: bool,
}

impl http_body::Body for Huge {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if !self.started {
            self.started = true;
            let mut head = vec![0u8];
            head.extend(((self.left - 5) as u32).to_be_bytes());
            self.left -= 5;
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(head.into()))));
        }
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.left.min(1 << 20);
        self.left -= n;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(vec![7u8; n])))))
    }
}

fn infer_call<B>(addr: SocketAddr, body: B) -> http::Request<B> {
    http::Request::post(format!(
        "http://{addr}/inference.GRPCInferenceService/ModelInfer"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(body)
    .unwrap()
}

/// While one client sends huge metadata, resets streams mid-body, sends a 100 MB body and
/// trickles a connection's first bytes one a second, another client's calls all succeed and
/// are all logged.
#[tokio::test]
async fn a_misbehaving_client_costs_a_well_behaved_one_nothing() {
    let Some(kafka) = kafka("a_misbehaving_client_costs_a_well_behaved_one_nothing") else {
        return;
    };
    let (sidecar, topic, _keep) = logging_sidecar(&kafka, "sidecar-hostile", &["item_price"]).await;
    let addr = sidecar.local_addr;
    let done = tokio_util::sync::CancellationToken::new();
    let mut hostile = tokio::task::JoinSet::new();

    // Huge metadata, again and again, on a channel of its own.
    let stop = done.clone();
    hostile.spawn(async move {
        let mut bad = client(addr).await;
        let mut i = 0;
        while !stop.is_cancelled() {
            let request = with_metadata(
                ranker_request(&format!("bad-meta-{i}"), 4, 0, i, false),
                70_000,
            );
            let status = bad.model_infer(request).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::ResourceExhausted);
            i += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // Streams reset mid-body.
    let stop = done.clone();
    hostile.spawn(async move {
        let mut send = h2_connection::<ResetMidBody>(addr).await;
        let message = ranker_request("bad-reset", 4, 0, 1, false).encode_to_vec();
        let framed = grpc_frame(&message);
        while !stop.is_cancelled() {
            let half = framed.slice(..framed.len() / 2);
            let _ = send
                .send_request(infer_call(addr, ResetMidBody(Some(half))))
                .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // A 100 MB body.
    hostile.spawn(async move {
        let mut send = h2_connection::<Huge>(addr).await;
        let response = send
            .send_request(infer_call(
                addr,
                Huge {
                    left: 100 << 20,
                    started: false,
                },
            ))
            .await;
        if let Ok(response) = response {
            let _ = response.into_body().collect().await;
        }
    });
    // A connection that sends one byte a second.
    let stop = done.clone();
    hostile.spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        for byte in b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".iter().cycle() {
            if stop.is_cancelled() || tcp.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });

    let mut good = client(addr).await;
    for i in 0..100u32 {
        good.model_infer(ranker_request(&format!("good-{i}"), 4, 0, i, i % 2 == 0))
            .await
            .unwrap_or_else(|status| panic!("the well-behaved client's call {i} failed: {status}"));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    done.cancel();
    while let Some(finished) = hostile.join_next().await {
        finished.expect("a misbehaving client's task panicked");
    }
    let metrics = sidecar.metrics.clone();
    sidecar.stop();
    sidecar.wait().await;
    let delivered = metrics.records_delivered.get() as usize;
    let records = kafka.read(&topic, delivered, Duration::from_secs(60)).await;
    let good = records
        .iter()
        .filter(|r| r.key_str().starts_with("good-"))
        .count();
    assert_eq!(good, 100, "every call of the well-behaved client is logged");
}
