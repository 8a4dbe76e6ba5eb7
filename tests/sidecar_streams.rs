//! The sidecar with calls other than a unary ModelInfer, and with an upstream in trouble:
//! streams of other services (server streaming and bidirectional) pass through message by
//! message with their headers, end and trailers; a model server that is down fails calls at once
//! with UNAVAILABLE and is used again, logging included, when it is back on the same address; a
//! ModelInfer larger than `publish.max-message-bytes` is forwarded untouched and counted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use featurelog_schemas::inference::ServerLiveRequest;
use featurelog_sidecar::metrics::CallLabels;
use featurelog_testkit::kafka;
use featurelog_testkit::proxy::CutProxy;
use featurelog_testkit::serving::{
    client, decode_log, model_server, model_server_at, ranker_request, sidecar, sidecar_config,
    temp_dir,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const ALLOW: &str = "[[model]]\nname = \"ranker\"\nfeatures = [\"item_price\"]\ncandidate-ids-input = \"item_id\"\n";

/// The bound on any one step: a proxy that buffers a stream or hangs a call fails the test
/// instead of hanging it. Never reached when things work.
const STEP: Duration = Duration::from_secs(30);

async fn step<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {STEP:?}"))
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap()
}

/// Messages as raw bytes: the test's own service needs no schema.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

const ECHO: &str = "featurelog.test.Echo";
const CHAT: &str = "/featurelog.test.Echo/Chat";

/// The smallest bidirectional service (the protocol's schema has no streaming method):
/// `Chat` answers each message as it arrives with `echo: <message>`. The caller's end of stream
/// ends the call with OK and an `x-echo-count` trailer; a message `fail` ends it with ABORTED
/// and an `x-reason` trailer. Its response headers carry `x-echo: hello`.
#[derive(Debug, Clone)]
struct Echo;

impl tonic::server::NamedService for Echo {
    const NAME: &'static str = ECHO;
}

struct ChatMethod;

fn trailer(key: &'static str, value: &str) -> tonic::metadata::MetadataMap {
    let mut map = tonic::metadata::MetadataMap::new();
    map.insert(key, value.parse().unwrap());
    map
}

impl tonic::server::StreamingService<Bytes> for ChatMethod {
    type Response = Bytes;
    type ResponseStream = ReceiverStream<Result<Bytes, Status>>;
    type Future = BoxFuture<tonic::Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Bytes>>) -> Self::Future {
        Box::pin(async move {
            let mut incoming = request.into_inner();
            let (tx, rx) = mpsc::channel(1);
            tokio::spawn(async move {
                let mut count = 0;
                let end = loop {
                    match incoming.message().await {
                        Ok(Some(m)) if &m[..] == b"fail" => {
                            break Status::with_metadata(
                                Code::Aborted,
                                "asked to fail",
                                trailer("x-reason", "asked"),
                            );
                        }
                        Ok(Some(m)) => {
                            count += 1;
                            let mut reply = b"echo: ".to_vec();
                            reply.extend_from_slice(&m);
                            if tx.send(Ok(Bytes::from(reply))).await.is_err() {
                                return;
                            }
                        }
                        // A status with code OK as the stream's last item: tonic ends the
                        // response with grpc-status 0 and the status's metadata as trailers.
                        Ok(None) => {
                            break Status::with_metadata(
                                Code::Ok,
                                "",
                                trailer("x-echo-count", &count.to_string()),
                            );
                        }
                        Err(status) => break status,
                    }
                };
                let _ = tx.send(Err(end)).await;
            });
            let mut response = tonic::Response::new(ReceiverStream::new(rx));
            response
                .metadata_mut()
                .insert("x-echo", "hello".parse().unwrap());
            Ok(response)
        })
    }
}

impl Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            if request.uri().path() == CHAT {
                Ok(tonic::server::Grpc::new(RawCodec)
                    .streaming(ChatMethod, request)
                    .await)
            } else {
                Ok(Status::unimplemented("no such method").into_http())
            }
        })
    }
}

/// An upstream with the gRPC health service and [`Echo`]; the reporter sets what `Watch` sees.
async fn stream_upstream() -> (
    SocketAddr,
    tonic_health::server::HealthReporter,
    CancellationToken,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status(ECHO, ServingStatus::Serving)
        .await;
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(Echo)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
                token.cancelled().await;
            }),
    );
    (addr, health, stop)
}

/// A `Watch` of the echo service at `addr`: the first status, then two changes set on the
/// upstream while the stream is open, each of which must arrive as a message of that stream.
async fn watch(addr: SocketAddr, health: &tonic_health::server::HealthReporter) -> Vec<i32> {
    let mut client = HealthClient::new(channel(addr).await);
    let mut stream = step(
        "Watch's response headers",
        client.watch(HealthCheckRequest {
            service: ECHO.into(),
        }),
    )
    .await
    .unwrap()
    .into_inner();
    let mut seen = vec![
        step("Watch's first status", stream.message())
            .await
            .unwrap()
            .expect("Watch ended before its first status")
            .status,
    ];
    for status in [ServingStatus::NotServing, ServingStatus::Serving] {
        health.set_service_status(ECHO, status).await;
        let changed = step(
            "a status set on the upstream after Watch started (a buffered response?)",
            stream.message(),
        )
        .await
        .unwrap()
        .expect("Watch ended instead of sending the new status");
        seen.push(changed.status);
    }
    seen
}

/// What a caller of `Chat` saw.
#[derive(Debug, PartialEq)]
struct ChatSeen {
    /// The `x-echo` response header.
    header: Option<String>,
    replies: Vec<String>,
    code: Code,
    message: String,
    /// `x-echo-count` from the trailers of a call that ended OK; `x-reason` from the status of
    /// one that failed.
    trailer: Option<String>,
}

/// Calls `Chat` at `addr` and sends `messages` one by one, each only after the reply to the one
/// before arrived (a message `fail` gets no reply); then ends its side of the stream.
async fn chat(addr: SocketAddr, messages: &[&str]) -> ChatSeen {
    let mut grpc = tonic::client::Grpc::new(channel(addr).await);
    step("the channel's readiness", grpc.ready()).await.unwrap();
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    let response = step(
        "Chat's response headers",
        grpc.streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static(CHAT),
            RawCodec,
        ),
    )
    .await
    .unwrap();
    let header = response
        .metadata()
        .get("x-echo")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut replies = response.into_inner();
    let mut seen = Vec::new();
    for &message in messages {
        tx.send(Bytes::from(message.to_owned())).await.unwrap();
        if message == "fail" {
            break;
        }
        let reply = step(
            "the reply to a message, before the next is sent (a buffered stream?)",
            replies.message(),
        )
        .await
        .unwrap()
        .expect("Chat ended before replying");
        seen.push(String::from_utf8(reply.to_vec()).unwrap());
    }
    drop(tx);
    let (code, message, trailer) = match step("the end of Chat", replies.message()).await {
        Ok(None) => {
            let trailers = step("Chat's trailers", replies.trailers())
                .await
                .unwrap()
                .expect("trailers at the end of Chat");
            let count = trailers
                .get("x-echo-count")
                .map(|v| v.to_str().unwrap().to_owned());
            (Code::Ok, String::new(), count)
        }
        Ok(Some(extra)) => panic!("a message no one asked for: {extra:?}"),
        Err(status) => {
            let reason = status
                .metadata()
                .get("x-reason")
                .map(|v| v.to_str().unwrap().to_owned());
            (status.code(), status.message().to_owned(), reason)
        }
    };
    ChatSeen {
        header,
        replies: seen,
        code,
        message,
        trailer,
    }
}

#[tokio::test]
async fn streams_of_other_services_pass_through_message_by_message_with_their_trailers() {
    let (upstream, health, _stop) = stream_upstream().await;
    let dir = temp_dir();
    let sidecar = sidecar(sidecar_config(dir.path(), upstream, None, "unused", "")).await;
    let via = sidecar.local_addr;

    // Server streaming: statuses set on the upstream after the call started arrive while the
    // stream stays open.
    let serving = ServingStatus::Serving as i32;
    let not_serving = ServingStatus::NotServing as i32;
    assert_eq!(
        watch(upstream, &health).await,
        [serving, not_serving, serving]
    );
    assert_eq!(watch(via, &health).await, [serving, not_serving, serving]);

    // Bidirectional: every reply arrives before the next message is sent, and the end of the
    // stream carries its status and custom trailers, OK or not.
    let ok = chat(via, &["one", "two", "three"]).await;
    assert_eq!(
        ok,
        ChatSeen {
            header: Some("hello".into()),
            replies: vec!["echo: one".into(), "echo: two".into(), "echo: three".into()],
            code: Code::Ok,
            message: String::new(),
            trailer: Some("3".into()),
        }
    );
    assert_eq!(ok, chat(upstream, &["one", "two", "three"]).await);
    let failed = chat(via, &["one", "fail"]).await;
    assert_eq!(
        failed,
        ChatSeen {
            header: Some("hello".into()),
            replies: vec!["echo: one".into()],
            code: Code::Aborted,
            message: "asked to fail".into(),
            trailer: Some("asked".into()),
        }
    );
    assert_eq!(failed, chat(upstream, &["one", "fail"]).await);

    // A method the upstream does not have: its UNIMPLEMENTED comes back as it was.
    let mut grpc = tonic::client::Grpc::new(channel(via).await);
    grpc.ready().await.unwrap();
    let err = grpc
        .unary(
            tonic::Request::new(Bytes::from_static(b"x")),
            http::uri::PathAndQuery::from_static("/featurelog.test.Echo/Nope"),
            RawCodec,
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::Unimplemented, "no such method")
    );
}

/// One call through the sidecar while its upstream is down: it must fail with UNAVAILABLE, at
/// once rather than at its (long) deadline.
async fn call_while_down(
    via: &mut featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient<Channel>,
    id: &str,
) {
    let mut request = tonic::Request::new(ranker_request(id, 4, 0, 9, false));
    request.set_timeout(STEP);
    let err = tokio::time::timeout(STEP * 2, via.model_infer(request))
        .await
        .expect("a call while the upstream is down hung")
        .expect_err("a call succeeded with the upstream down");
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    let mut live = tonic::Request::new(ServerLiveRequest {});
    live.set_timeout(STEP);
    let err = via.server_live(live).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
}

#[tokio::test]
async fn calls_fail_fast_while_the_model_server_is_down_and_flow_and_log_when_it_is_back() {
    let Some(kafka) = kafka("calls_fail_fast_while_the_model_server_is_down") else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-upstream-down", 1).await;
    // On a port the model server is sure to get back (see featurelog_testkit::ports).
    let model_addr = featurelog_testkit::ports::restartable_addr();
    let stop_model = model_server_at(model_addr, &["ranker"]).await;
    let dir = temp_dir();
    let config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, ALLOW);
    let sidecar = sidecar(config).await;
    let metrics = sidecar.metrics.clone();
    let mut via = client(sidecar.local_addr).await;
    via.model_infer(ranker_request("before", 4, 0, 1, false))
        .await
        .unwrap();

    // The model server stops (its listener closes: connecting is refused).
    stop_model.cancel();
    assert!(
        featurelog_testkit::eventually(STEP, || std::net::TcpStream::connect(model_addr).is_err())
            .await,
        "the model server did not stop"
    );
    for i in 0..3 {
        call_while_down(&mut via, &format!("down-{i}")).await;
    }

    // Back on the same address: the same sidecar and the same client connection work again.
    let _restarted = model_server_at(model_addr, &["ranker"]).await;
    for i in 0..3 {
        via.model_infer(ranker_request(&format!("after-{i}"), 4, 0, 2 + i, false))
            .await
            .expect("a call after the model server came back");
    }

    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    let unavailable = CallLabels {
        method: "model_infer",
        outcome: "upstream_unavailable",
    };
    assert_eq!(metrics.calls.get_or_create(&unavailable).get(), 3);
    assert_eq!(
        metrics.records_delivered.get(),
        4,
        "down calls are not logged"
    );
    let records = kafka.read(&topic, 4, Duration::from_secs(60)).await;
    let mut keys: Vec<String> = records.iter().map(|r| r.key_str()).collect();
    keys.sort();
    assert_eq!(keys, ["after-0", "after-1", "after-2", "before"]);
    for record in &records {
        assert_eq!(decode_log(&record.payload).features.len(), 1);
    }
}

/// As a crash, not a shutdown: the upstream's connections drop with no GOAWAY and connecting
/// is refused, then it is back on the same address.
#[tokio::test]
async fn calls_fail_fast_while_the_model_server_is_cut_off_and_flow_again_after() {
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let cut = CutProxy::start(model_addr);
    let dir = temp_dir();
    let sidecar = sidecar(sidecar_config(dir.path(), cut.addr, None, "unused", "")).await;
    let mut via = client(sidecar.local_addr).await;
    via.model_infer(ranker_request("before", 4, 0, 1, false))
        .await
        .unwrap();
    // A stream open through the sidecar when the upstream goes: it ends in an error, not in
    // silence and not as if it had finished.
    let mut health = HealthClient::new(channel(sidecar.local_addr).await);
    let mut watching = health
        .watch(HealthCheckRequest {
            service: "inference.GRPCInferenceService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = step("Watch's first status", watching.message()).await;
    assert_eq!(
        first.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    cut.cut();
    let cut_short = step("the end of a stream cut short", watching.message()).await;
    assert!(cut_short.is_err(), "{cut_short:?}");
    assert!(
        featurelog_testkit::eventually(STEP, || std::net::TcpStream::connect(cut.addr).is_err())
            .await,
        "the proxy was not cut"
    );
    for i in 0..3 {
        call_while_down(&mut via, &format!("down-{i}")).await;
    }
    cut.restore();
    assert!(
        featurelog_testkit::eventually(STEP, || std::net::TcpStream::connect(cut.addr).is_ok())
            .await,
        "the proxy was not restored"
    );
    for i in 0..3 {
        via.model_infer(ranker_request(&format!("after-{i}"), 4, 0, 2 + i, false))
            .await
            .expect("a call after the model server came back");
    }
}

#[tokio::test]
async fn a_model_infer_larger_than_max_message_bytes_is_forwarded_untouched_and_counted() {
    let Some(kafka) = kafka("a_model_infer_larger_than_max_message_bytes") else {
        return;
    };
    let topic = kafka.unique_topic("sidecar-large", 1).await;
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let mut config = sidecar_config(dir.path(), model_addr, Some(&kafka.config), &topic, ALLOW);
    config.publish.max_message_bytes = 1 << 20;
    let sidecar = sidecar(config).await;
    let metrics = sidecar.metrics.clone();
    let mut direct = client(model_addr).await;
    let mut via = client(sidecar.local_addr).await;

    // Several MiB, many HTTP/2 frames and flow-control windows.
    let large = ranker_request("large", 60_000, 10, 1, true);
    assert!(prost::Message::encoded_len(&large) > 4 << 20);
    let want = direct.model_infer(large.clone()).await.unwrap();
    let got = via.model_infer(large.clone()).await.unwrap();
    assert_eq!(got.get_ref(), want.get_ref());
    assert_eq!(
        got.metadata().get("x-request-id"),
        None,
        "the request names itself: the response gets no id of the sidecar's"
    );
    // One with no id gets an id all the same, as every call that names no id.
    let mut anonymous = large;
    anonymous.id = String::new();
    let got = via.model_infer(anonymous).await.unwrap();
    assert!(got.metadata().get("x-request-id").is_some());

    // The next call works and is logged.
    via.model_infer(ranker_request("next", 4, 0, 2, false))
        .await
        .unwrap();
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(metrics.dropped_count("too_large"), 2);
    assert_eq!(metrics.records_delivered.get(), 1);
    let records = kafka.read(&topic, 1, Duration::from_secs(60)).await;
    assert_eq!(records[0].key_str(), "next");
}
