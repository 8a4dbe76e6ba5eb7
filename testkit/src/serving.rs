//! The serving side of an end-to-end test: the reference model server and a sidecar in front of
//! it, both in this process on ports chosen by the OS, and requests shaped like a recommender's.
#![allow(clippy::panic, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use featurelog_kafka::KafkaConfig;
use featurelog_model_server::ReferenceModelServer;
use featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use featurelog_schemas::inference::{InferParameter, ModelInferRequest, infer_parameter};
use featurelog_schemas::tensor::TensorValues;
use featurelog_sidecar::{Sidecar, SidecarConfig};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A model server running until the returned token is cancelled (or the test ends).
pub async fn model_server(models: &[&str]) -> (SocketAddr, CancellationToken) {
    let (addr, stop, _) = model_server_counting(models).await;
    (addr, stop)
}

/// [`model_server`], also returning its count of calls cancelled before they finished.
pub async fn model_server_counting(
    models: &[&str],
) -> (
    SocketAddr,
    CancellationToken,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let server = ReferenceModelServer::new(models.iter().copied());
    let cancelled = server.cancelled_calls();
    let token = stop.clone();
    tokio::spawn(featurelog_model_server::serve(
        server,
        listener,
        async move {
            token.cancelled().await;
        },
    ));
    (addr, stop, cancelled)
}

/// A model server on `addr`: one on [`crate::ports::restartable_addr`], or the same upstream
/// address coming back after an earlier one stopped. Waits up to 10 s for the address to be
/// free again.
pub async fn model_server_at(addr: SocketAddr, models: &[&str]) -> CancellationToken {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => break listener,
            Err(err) if tokio::time::Instant::now() > deadline => {
                panic!("cannot listen on {addr} again: {err}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(featurelog_model_server::serve(
        ReferenceModelServer::new(models.iter().copied()),
        listener,
        async move {
            token.cancelled().await;
        },
    ));
    stop
}

/// A sidecar config for tests: loopback, port 0, fast reloads, the allow list in `dir`.
pub fn sidecar_config(
    dir: &std::path::Path,
    upstream: SocketAddr,
    kafka: Option<&KafkaConfig>,
    topic: &str,
    allow_list: &str,
) -> SidecarConfig {
    let path = dir.join("allow-list.toml");
    std::fs::write(&path, allow_list).expect("write allow list");
    let mode = if kafka.is_some() {
        "log"
    } else {
        "pass-through"
    };
    let mut text = format!(
        r#"
        listen = "127.0.0.1:0"
        upstream = "http://{upstream}"
        mode = "{mode}"
        allow-list = "{}"
        allow-list-reload-interval = "100ms"
        shutdown-timeout = "10s"
        [metrics]
        listen = "127.0.0.1:0"
        [publish]
        topic = "{topic}"
        "#,
        path.display()
    );
    if let Some(k) = kafka {
        text.push_str(&kafka_toml(k));
    }
    SidecarConfig::from_toml_with_env(&dir.join("sidecar.toml"), &text, Vec::new())
        .expect("test sidecar config")
}

/// The `[kafka]` section of a featurelog config for `kafka`: bootstrap servers and raw
/// librdkafka properties (security settings, for a SASL_SSL listener).
pub fn kafka_toml(kafka: &KafkaConfig) -> String {
    let mut text = format!(
        "[kafka]\nbootstrap-servers = \"{}\"\n",
        kafka.bootstrap_servers
    );
    if !kafka.properties.is_empty() {
        text.push_str("[kafka.properties]\n");
        for (key, value) in &kafka.properties {
            text.push_str(&format!("{key:?} = {value:?}\n"));
        }
    }
    text
}

/// Starts a sidecar with `config`.
pub async fn sidecar(config: SidecarConfig) -> Sidecar {
    featurelog_sidecar::start(config, CancellationToken::new())
        .await
        .expect("sidecar starts")
}

/// A gRPC client of the protocol at `addr`.
pub async fn client(addr: SocketAddr) -> GrpcInferenceServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    GrpcInferenceServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20)
}

/// A bare HTTP/2 connection to `addr`: requests on it carry exactly the headers and frames the
/// test writes, with no gRPC client's own timers in the way.
pub async fn h2_connection<B>(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    send
}

/// The 5-byte gRPC prefix (uncompressed, length) and `message`.
pub fn grpc_frame(message: &[u8]) -> bytes::Bytes {
    let mut framed = vec![0u8];
    framed.extend((message.len() as u32).to_be_bytes());
    framed.extend(message);
    framed.into()
}

/// Where the test's temporary files go.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// A recommender's request: `candidates` items, per-item features `f0..f{extra}` (FP32), an
/// 8-wide item embedding, a per-request user age and locale, the item ids, and a `surface`
/// parameter. Values are distinct per request `seed` and include a NaN payload and -0.0.
pub fn ranker_request(
    id: &str,
    candidates: usize,
    extra: usize,
    seed: u32,
    raw: bool,
) -> ModelInferRequest {
    let n = candidates as i64;
    let mut tensors: Vec<(String, &str, Vec<i64>, TensorValues)> = vec![
        (
            "item_id".into(),
            "INT64",
            vec![n],
            TensorValues::Int64(
                (0..n)
                    .map(|i| 1000 + i + i64::from(seed) * 10_000)
                    .collect(),
            ),
        ),
        (
            "user_age".into(),
            "INT32",
            vec![1],
            TensorValues::Int32(vec![20 + (seed % 50) as i32]),
        ),
        (
            "user_locale".into(),
            "BYTES",
            vec![1],
            TensorValues::Bytes(vec![
                if seed.is_multiple_of(2) {
                    "en-US"
                } else {
                    "jp_JA"
                }
                .into(),
            ]),
        ),
        (
            "item_price".into(),
            "FP32",
            vec![n],
            TensorValues::Fp32(
                (0..candidates)
                    .map(|i| match i {
                        0 => -0.0,
                        1 => f32::from_bits(0x7fc0_0000 | seed),
                        _ => i as f32 * 1.25 + seed as f32,
                    })
                    .collect(),
            ),
        ),
        (
            "item_embedding".into(),
            "FP32",
            vec![n, 8],
            TensorValues::Fp32(
                (0..candidates * 8)
                    .map(|i| (i as f32).sin() + seed as f32)
                    .collect(),
            ),
        ),
        (
            "item_category".into(),
            "BYTES",
            vec![n],
            TensorValues::Bytes(
                (0..candidates)
                    .map(|i| format!("cat-{}", i % 7).into())
                    .collect(),
            ),
        ),
    ];
    for f in 0..extra {
        tensors.push((
            format!("f{f}"),
            "FP32",
            vec![n],
            TensorValues::Fp32(
                (0..candidates)
                    .map(|i| (i * 31 + f * 7) as f32 / 13.0)
                    .collect(),
            ),
        ));
    }
    let mut request = ModelInferRequest {
        model_name: "ranker".into(),
        id: id.into(),
        parameters: [(
            "surface".to_string(),
            InferParameter {
                parameter_choice: Some(infer_parameter::ParameterChoice::StringParam(
                    "home".into(),
                )),
            },
        )]
        .into(),
        ..Default::default()
    };
    for (name, datatype, shape, values) in tensors {
        let mut input = InferInputTensor {
            name,
            datatype: datatype.into(),
            shape,
            ..Default::default()
        };
        if raw {
            request.raw_input_contents.push(values.to_raw());
        } else {
            input.contents = Some(values.to_contents());
        }
        request.inputs.push(input);
    }
    request
}

/// A ranker request of 4 candidates whose ids are floats: the model takes it, the sidecar
/// cannot use them as candidate ids (`bad_candidate_ids`), so the call is answered and not
/// logged.
pub fn float_ids_request(id: &str, seed: u32) -> ModelInferRequest {
    let mut request = ranker_request(id, 4, 0, seed, false);
    request.inputs[0].datatype = "FP32".into();
    request.inputs[0].contents = Some(TensorValues::Fp32(vec![1.0, 2.0, 3.0, 4.0]).to_contents());
    request
}

/// The values a request sent for input `name`, decoded.
pub fn sent_values(request: &ModelInferRequest, name: &str) -> TensorValues {
    let (i, input) = request
        .inputs
        .iter()
        .enumerate()
        .find(|(_, t)| t.name == name)
        .unwrap_or_else(|| panic!("no input {name}"));
    featurelog_schemas::tensor::decode(
        &input.name,
        &input.datatype,
        &input.shape,
        input.contents.as_ref(),
        request.raw_input_contents.get(i),
    )
    .expect("decodable")
    .values
}

/// Parses a FeatureLog.
/// A logged feature's values as the Python clients of the tests print what they sent: FP32 as
/// their bits, BYTES as text, INT32 as numbers.
pub fn logged_values_json(
    feature: &featurelog_schemas::featurelog::v1::Feature,
) -> serde_json::Value {
    use featurelog_schemas::featurelog::v1::DataType;
    let v = feature.values.clone().unwrap_or_default();
    match DataType::try_from(feature.datatype) {
        Ok(DataType::Fp32) => {
            serde_json::json!(
                v.fp32_values
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>()
            )
        }
        Ok(DataType::Bytes) => serde_json::json!(
            v.bytes_values
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect::<Vec<_>>()
        ),
        Ok(DataType::Int32) => serde_json::json!(v.int32_values),
        other => panic!("{}: unexpected datatype {other:?}", feature.name),
    }
}

pub fn decode_log(payload: &[u8]) -> featurelog_schemas::featurelog::v1::FeatureLog {
    prost::Message::decode(payload).expect("a FeatureLog")
}

/// A local address no one listens on now, for a process that must be told its port. Below the
/// ephemeral range (see [`crate::ports`]): the process binds it some time after this returns,
/// and a test may restart it on the same port, so no outgoing connection must take it meanwhile.
pub fn free_addr() -> SocketAddr {
    crate::ports::restartable_addr()
}

/// The whole HTTP/1.1 response to `GET path`, or `None` if nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
