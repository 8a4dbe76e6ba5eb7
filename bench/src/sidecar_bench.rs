//! What the sidecar costs: the same fixed-rate ModelInfer load sent (1) straight to the model
//! server, (2) through the sidecar in pass-through mode, (3) through the sidecar logging 10 of
//! 50 features. Model server and sidecar run as separate `featurelog` processes so the CPU each
//! one burns can be read from /proc; the load generator runs here. Scenarios alternate over
//! several rounds so that drift on a noisy machine spreads over all of them.
//!
//! With `--protocol rest-json` or `rest-binary` the same tensors go through the sidecar's REST
//! port instead (JSON `data`, or the binary tensor data extension as `tritonclient.http`
//! sends), to a REST model server in this process that answers every call with the same
//! scores; `direct` then calls that server. With `--protocol grpc-stream` the same requests go
//! over one ModelStreamInfer stream per scenario (Triton's streaming extension, as tritonclient's
//! stream API sends them), pipelined, each answered by id.
//!
//! Beside them, for the gRPC bindings, the same load goes through nginx (`grpc_pass` to an
//! upstream with keepalive connections, one worker process) and HAProxy (`proto h2` on both
//! sides, one thread), the proxies a user would put there instead, each in front of the same
//! model server; their CPU is read the same way (for nginx, the master and its workers).
//! `--before <featurelog binary>` adds the sidecar scenarios run by another build, so that a
//! change is measured against the build before it in the same rounds.
//!
//! Run with `bench/sidecar.sh` (builds release binaries first, installs nginx and HAProxy
//! from the Debian packages when they are missing).
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use featurelog_kafka::{DevBroker, KafkaConfig};
use featurelog_schemas::featurelog::v1::DataType;
use featurelog_schemas::inference::ModelInferRequest;
use featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use featurelog_schemas::inference::model_infer_request::InferInputTensor;
use featurelog_schemas::tensor::TensorValues;
use prost::Message;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

#[derive(Debug, Parser)]
struct Args {
    /// Requests per second, held fixed in every scenario.
    #[arg(long, default_value_t = 300)]
    rate: u32,
    /// Measured time per scenario and round.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Unmeasured time before each measurement.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Rounds of the three scenarios.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Candidates per request.
    #[arg(long, default_value_t = 100)]
    candidates: usize,
    /// FP32 features per candidate in the request.
    #[arg(long, default_value_t = 50)]
    features: usize,
    /// Of which the allow list logs this many.
    #[arg(long, default_value_t = 10)]
    logged: usize,
    /// Send tensors as typed `contents` instead of raw bytes (Triton's clients send raw).
    #[arg(long)]
    typed: bool,
    /// librdkafka compression.type for the logging sidecar (the sidecar's default is zstd).
    #[arg(long, default_value = "zstd")]
    compression: String,
    /// Kafka bootstrap servers; default: $FEATURELOG_KAFKA, else the embedded dev broker.
    #[arg(long, env = "FEATURELOG_KAFKA")]
    kafka: Option<String>,
    /// The protocol binding the load uses.
    #[arg(long, value_enum, default_value = "grpc")]
    protocol: Protocol,
    /// The scenarios to run, in this order each round (comma-separated). Default: direct,
    /// pass-through, logging, then nginx and haproxy (gRPC bindings, when installed), then
    /// before-pass-through and before-logging (with `--before`).
    #[arg(long, value_enum, value_delimiter = ',')]
    scenarios: Vec<Scenario>,
    /// Another build's `featurelog` binary, for the `before-*` scenarios.
    #[arg(long, value_name = "BINARY")]
    before: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum)]
enum Scenario {
    /// Straight to the model server.
    Direct,
    /// Through the sidecar, logging off.
    PassThrough,
    /// Through the sidecar, logging.
    Logging,
    /// Through nginx's `grpc_pass`.
    Nginx,
    /// Through HAProxy, HTTP/2 on both sides.
    Haproxy,
    /// Through the `--before` build of the sidecar, logging off.
    BeforePassThrough,
    /// Through the `--before` build of the sidecar, logging.
    BeforeLogging,
}

impl Scenario {
    fn label(self) -> &'static str {
        match self {
            Scenario::Direct => "direct",
            Scenario::PassThrough => "pass-through",
            Scenario::Logging => "logging",
            Scenario::Nginx => "nginx",
            Scenario::Haproxy => "haproxy",
            Scenario::BeforePassThrough => "before-pass-through",
            Scenario::BeforeLogging => "before-logging",
        }
    }

    /// The sidecar's mode, for the sidecar scenarios.
    fn sidecar_mode(self) -> Option<&'static str> {
        match self {
            Scenario::PassThrough | Scenario::BeforePassThrough => Some("pass-through"),
            Scenario::Logging | Scenario::BeforeLogging => Some("log"),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum)]
enum Protocol {
    /// ModelInfer over gRPC.
    Grpc,
    /// The same requests over one ModelStreamInfer stream.
    GrpcStream,
    /// POST /v2/models/ranker/infer with JSON `data`.
    RestJson,
    /// The same with the binary tensor data extension.
    RestBinary,
}

/// The REST binding's bodies for the same requests: JSON `data`, or the binary extension (JSON
/// header, then the raw bytes; `Some` of the header's length).
fn rest_bodies(
    templates: &[ModelInferRequest],
    binary: bool,
) -> Vec<(bytes::Bytes, Option<usize>)> {
    templates
        .iter()
        .map(|r| {
            let mut tail = Vec::new();
            let inputs: Vec<serde_json::Value> = r
                .inputs
                .iter()
                .zip(&r.raw_input_contents)
                .map(|(input, raw)| {
                    let mut t = serde_json::json!({
                        "name": input.name, "shape": input.shape, "datatype": input.datatype,
                    });
                    if binary {
                        t["parameters"] = serde_json::json!({ "binary_data_size": raw.len() });
                        tail.extend_from_slice(raw);
                    } else if input.datatype == "INT64" {
                        let v: Vec<i64> = raw
                            .chunks_exact(8)
                            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                            .collect();
                        t["data"] = serde_json::json!(v);
                    } else {
                        let v: Vec<f32> = raw
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                            .collect();
                        t["data"] = serde_json::json!(v);
                    }
                    t
                })
                .collect();
            let json = serde_json::json!({ "inputs": inputs }).to_string();
            let header = binary.then_some(json.len());
            let mut body = json.into_bytes();
            body.extend_from_slice(&tail);
            (bytes::Bytes::from(body), header)
        })
        .collect()
}

/// A REST model server that reads each call's body and answers with the same scores: what
/// the sidecar costs is measured, not a model.
async fn canned_rest_server(candidates: usize) -> anyhow::Result<SocketAddr> {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let scores: Vec<f32> = (0..candidates).map(|i| i as f32 * 0.01).collect();
    let answer = bytes::Bytes::from(
        serde_json::json!({
            "model_name": "ranker", "id": "",
            "outputs": [{ "name": "score", "shape": [candidates], "datatype": "FP32", "data": scores }],
        })
        .to_string(),
    );
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        async move {
                            let _ = request.into_body().collect().await;
                            let mut response =
                                hyper::Response::new(http_body_util::Full::new(answer));
                            response.headers_mut().insert(
                                "content-type",
                                hyper::header::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

type RestClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

/// One ModelStreamInfer stream that calls are pipelined on: a request is sent, and the answer
/// carrying its id completes it.
#[derive(Clone)]
struct Stream {
    tx: tokio::sync::mpsc::Sender<ModelInferRequest>,
    waiting: Arc<std::sync::Mutex<HashMap<String, tokio::sync::oneshot::Sender<bool>>>>,
    templates: Arc<Vec<ModelInferRequest>>,
}

impl Stream {
    async fn open(
        mut client: GrpcInferenceServiceClient<Channel>,
        templates: Arc<Vec<ModelInferRequest>>,
    ) -> anyhow::Result<Self> {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let mut answers = client
            .model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        let waiting: Arc<std::sync::Mutex<HashMap<String, tokio::sync::oneshot::Sender<bool>>>> =
            Arc::default();
        let done = waiting.clone();
        tokio::spawn(async move {
            while let Ok(Some(answer)) = answers.message().await {
                let ok = answer.error_message.is_empty();
                let id = answer.infer_response.map(|r| r.id).unwrap_or_default();
                if let Some(call) = done.lock().unwrap().remove(&id) {
                    let _ = call.send(ok);
                }
            }
        });
        Ok(Self {
            tx,
            waiting,
            templates,
        })
    }
}

/// What the load calls: a gRPC client with its requests, a stream, or a REST client with its
/// bodies.
#[derive(Clone)]
enum Target {
    Grpc(
        GrpcInferenceServiceClient<Channel>,
        Arc<Vec<ModelInferRequest>>,
    ),
    Stream(Stream),
    Rest(
        RestClient,
        SocketAddr,
        Arc<Vec<(bytes::Bytes, Option<usize>)>>,
    ),
}

impl Target {
    async fn call(self, i: usize, id: String) -> bool {
        match self {
            Target::Grpc(mut client, templates) => {
                let mut request = templates[i % templates.len()].clone();
                request.id = id;
                client.model_infer(request).await.is_ok()
            }
            Target::Stream(stream) => {
                let mut request = stream.templates[i % stream.templates.len()].clone();
                let (done, answered) = tokio::sync::oneshot::channel();
                stream.waiting.lock().unwrap().insert(id.clone(), done);
                request.id = id;
                stream.tx.send(request).await.is_ok() && answered.await.unwrap_or(false)
            }
            Target::Rest(client, addr, bodies) => {
                use http_body_util::BodyExt;
                let (body, header) = &bodies[i % bodies.len()];
                let mut request =
                    hyper::Request::post(format!("http://{addr}/v2/models/ranker/infer"))
                        .header("content-type", "application/json")
                        .header("x-request-id", id);
                if let Some(n) = header {
                    request = request.header("inference-header-content-length", n.to_string());
                }
                let request = request
                    .body(http_body_util::Full::new(body.clone()))
                    .unwrap();
                match client.request(request).await {
                    Ok(response) => {
                        let ok = response.status().is_success();
                        ok && response.into_body().collect().await.is_ok()
                    }
                    Err(_) => false,
                }
            }
        }
    }
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn cpu_seconds(pid: u32) -> f64 {
    featurelog_bench::cpu_seconds(Some(pid))
}

/// CPU seconds of process `pid` and all its descendants (nginx's master and workers).
fn tree_cpu_seconds(pid: u32) -> f64 {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // The parent is the second field after the command, which is in parentheses.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
            if let Some(parent) = parent {
                parents.push((child, parent));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, q)| *q == p).map(|(c, _)| *c));
        i += 1;
    }
    tree.into_iter().map(cpu_seconds).sum()
}

/// `name` on the PATH or in the sbin directories (where Debian puts nginx and HAProxy).
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|uid| uid == "0"))
        .unwrap_or(false)
}

/// nginx in front of the model server as its gRPC proxy guide has it: `grpc_pass` to an
/// upstream that keeps its connections, one worker process (as the sidecar's one thread and
/// HAProxy's), no access log.
fn nginx_config(dir: &Path, name: &str, listen: SocketAddr, upstream: SocketAddr) -> PathBuf {
    let d = dir.display();
    // As root nginx hands its workers to `nobody`, who cannot read the temporary directory.
    let user = if running_as_root() {
        "user root;\n"
    } else {
        ""
    };
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(
        &path,
        format!(
            "{user}worker_processes 1;\ndaemon off;\npid {d}/{name}.pid;\nerror_log stderr warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/{name}-body;\n  proxy_temp_path {d}/{name}-proxy;\n\
               client_max_body_size 64m;\n  keepalive_requests 1000000;\n\
               upstream model {{ server {upstream}; keepalive 32; keepalive_requests 1000000; }}\n\
               server {{\n    listen {listen} http2;\n    location / {{ grpc_pass grpc://model; }}\n  }}\n}}\n"
        ),
    )
    .unwrap();
    path
}

/// HAProxy in front of the model server: HTTP/2 on both sides (`proto h2`), one thread.
fn haproxy_config(dir: &Path, name: &str, listen: SocketAddr, upstream: SocketAddr) -> PathBuf {
    let path = dir.join(format!("{name}.cfg"));
    std::fs::write(
        &path,
        format!(
            "global\n  nbthread 1\n  maxconn 4096\n\
             defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
             frontend grpc\n  bind {listen} proto h2\n  default_backend model\n\
             backend model\n  server model {upstream} proto h2\n"
        ),
    )
    .unwrap();
    path
}

/// CPU seconds per thread group (tokio workers, publisher threads, librdkafka threads, other).
fn cpu_by_group(pid: u32) -> [f64; 4] {
    let mut out = [0.0; 4];
    for (comm, seconds) in featurelog_bench::thread_cpu(Some(pid)) {
        let group = if comm.starts_with("tokio") {
            0
        } else if comm.starts_with("featurelog-pub") {
            1
        } else if comm.starts_with("rdk:") {
            2
        } else {
            3
        };
        out[group] += seconds;
    }
    out
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}

fn spawn(bin: &Path, args: &[&str]) -> anyhow::Result<Proc> {
    let child = Command::new(bin)
        .args(args)
        .env("FEATURELOG_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok(Proc(child))
}

async fn connect(addr: SocketAddr) -> anyhow::Result<GrpcInferenceServiceClient<Channel>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await
        {
            Ok(ch) => {
                return Ok(GrpcInferenceServiceClient::new(ch)
                    .max_decoding_message_size(64 << 20)
                    .max_encoding_message_size(64 << 20));
            }
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => bail!("{addr} did not come up: {e}"),
        }
    }
}

/// A small deterministic PRNG (xorshift64*), so every run sends the same data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `count` different requests, so that compression sees realistic variety: even features take
/// one of 16 levels (categories, buckets, counts), odd ones are continuous values.
fn requests(args: &Args, count: usize) -> Vec<ModelInferRequest> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..count).map(|_| request(args, &mut rng)).collect()
}

fn request(args: &Args, rng: &mut Rng) -> ModelInferRequest {
    let n = args.candidates;
    let mut tensors = vec![(
        "item_id".to_string(),
        DataType::Int64,
        vec![n as i64],
        TensorValues::Int64((0..n).map(|_| (rng.next() % 50_000_000) as i64).collect()),
    )];
    for f in 0..args.features {
        let values = (0..n)
            .map(|_| {
                if f % 2 == 0 {
                    (rng.next() % 16) as f32
                } else {
                    rng.unit() * 100.0
                }
            })
            .collect();
        tensors.push((
            format!("f{f}"),
            DataType::Fp32,
            vec![n as i64],
            TensorValues::Fp32(values),
        ));
    }
    let mut r = ModelInferRequest {
        model_name: "ranker".into(),
        ..Default::default()
    };
    for (name, dt, shape, values) in tensors {
        let mut input = InferInputTensor {
            name,
            datatype: dt.protocol_name().unwrap().into(),
            shape,
            ..Default::default()
        };
        if args.typed {
            input.contents = Some(values.to_contents());
        } else {
            r.raw_input_contents.push(values.to_raw());
        }
        r.inputs.push(input);
    }
    r
}

struct Run {
    calls: u64,
    errors: u64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU per call of the proxy in between (the sidecar, nginx or HAProxy).
    proxy_cpu_us_per_call: Option<f64>,
    /// Per call: proxy (tokio), publisher threads, librdkafka, other.
    sidecar_groups_us: [f64; 4],
    model_cpu_us_per_call: f64,
}

/// Sends `rate` requests per second for `time`; latency is taken from each call's scheduled
/// start, so a stall is charged to the calls it delayed (no coordinated omission).
async fn load(target: &Target, rate: u32, time: Duration, prefix: &str) -> (Vec<f64>, u64) {
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let total = (time.as_secs_f64() * f64::from(rate)) as u64;
    let start = tokio::time::Instant::now();
    let limit = Arc::new(Semaphore::new(256));
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let at = start + interval * i as u32;
        tokio::time::sleep_until(at).await;
        let permit = limit.clone().acquire_owned().await.unwrap();
        let (target, id) = (target.clone(), format!("{prefix}-{i}"));
        tasks.push(tokio::spawn(async move {
            let ok = target.call(i as usize, id).await;
            drop(permit);
            (at.elapsed().as_secs_f64() * 1000.0, ok)
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (ms, ok) = t.await.unwrap();
        if ok {
            latencies.push(ms);
        } else {
            errors += 1;
        }
    }
    (latencies, errors)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    args: &Args,
    addr: SocketAddr,
    rest_addr: Option<SocketAddr>,
    proxy_pid: Option<u32>,
    model_pid: u32,
    template: &Arc<Vec<ModelInferRequest>>,
    bodies: &Arc<Vec<(bytes::Bytes, Option<usize>)>>,
    label: &str,
) -> anyhow::Result<Run> {
    let client = connect(addr).await?;
    let target = match rest_addr {
        Some(rest) => Target::Rest(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http(),
            rest,
            bodies.clone(),
        ),
        None if args.protocol == Protocol::GrpcStream => {
            Target::Stream(Stream::open(client, template.clone()).await?)
        }
        None => Target::Grpc(client, template.clone()),
    };
    load(&target, args.rate, args.warmup, &format!("{label}-warm")).await;
    let (s0, m0) = (proxy_pid.map(tree_cpu_seconds), cpu_seconds(model_pid));
    let g0 = proxy_pid.map(cpu_by_group).unwrap_or_default();
    let (mut lat, errors) = load(&target, args.rate, args.duration, label).await;
    let (s1, m1) = (proxy_pid.map(tree_cpu_seconds), cpu_seconds(model_pid));
    let g1 = proxy_pid.map(cpu_by_group).unwrap_or_default();
    lat.sort_by(f64::total_cmp);
    let calls = lat.len() as u64 + errors;
    Ok(Run {
        calls,
        errors,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        proxy_cpu_us_per_call: s0.zip(s1).map(|(a, b)| (b - a) * 1e6 / calls as f64),
        sidecar_groups_us: std::array::from_fn(|i| (g1[i] - g0[i]) * 1e6 / calls as f64),
        model_cpu_us_per_call: (m1 - m0) * 1e6 / calls as f64,
    })
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}
#[allow(clippy::too_many_arguments)]
fn write_sidecar_config(
    dir: &Path,
    name: &str,
    upstream: SocketAddr,
    listen: SocketAddr,
    metrics: SocketAddr,
    mode: &str,
    kafka: &str,
    topic: &str,
    compression: &str,
    rest: Option<(SocketAddr, SocketAddr)>,
) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let rest = rest
        .map(|(listen, upstream)| {
            format!("[rest]\nlisten = \"{listen}\"\nupstream = \"http://{upstream}\"\n")
        })
        .unwrap_or_default();
    std::fs::write(
        &path,
        format!(
            "listen = \"{listen}\"\nupstream = \"http://{upstream}\"\nmode = \"{mode}\"\nallow-list = \"allow.toml\"\n{rest}\
             [metrics]\nlisten = \"{metrics}\"\n[kafka]\nbootstrap-servers = \"{kafka}\"\n\
             [kafka.properties]\n\"statistics.interval.ms\" = \"1000\"\n\"compression.type\" = \"{compression}\"\n\
             [publish]\ntopic = \"{topic}\"\n"
        ),
    )
    .unwrap();
    path
}

/// Median and range of `values` (NaN when empty).
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    ((v[(n - 1) / 2] + v[n / 2]) / 2.0, v[0], v[n - 1])
}

/// One scenario's proxy for one round: the process to measure and where the load goes.
struct Started {
    proc: Option<Proc>,
    grpc: SocketAddr,
    rest: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    let bin = std::env::current_exe()?
        .parent()
        .context("no exe dir")?
        .join("featurelog");
    if !bin.exists() {
        bail!(
            "{} not found: build it with `cargo build --release --bins`",
            bin.display()
        );
    }
    let grpc = matches!(args.protocol, Protocol::Grpc | Protocol::GrpcStream);
    let (nginx, haproxy) = (find_tool("nginx"), find_tool("haproxy"));
    if args.scenarios.is_empty() {
        args.scenarios = vec![Scenario::Direct, Scenario::PassThrough, Scenario::Logging];
        for (tool, scenario) in [(&nginx, Scenario::Nginx), (&haproxy, Scenario::Haproxy)] {
            match tool {
                Some(_) if grpc => args.scenarios.push(scenario),
                None if grpc => eprintln!(
                    "{} is not installed (bench/sidecar.sh installs it): its scenario is skipped",
                    scenario.label()
                ),
                _ => {}
            }
        }
        if args.before.is_some() {
            args.scenarios
                .extend([Scenario::BeforePassThrough, Scenario::BeforeLogging]);
        }
    }
    for s in &args.scenarios {
        match s {
            Scenario::Nginx | Scenario::Haproxy if !grpc => {
                bail!("the {} scenario is for the gRPC bindings", s.label())
            }
            Scenario::Nginx if nginx.is_none() => bail!("nginx is not installed"),
            Scenario::Haproxy if haproxy.is_none() => bail!("haproxy is not installed"),
            Scenario::BeforePassThrough | Scenario::BeforeLogging if args.before.is_none() => {
                bail!("the {} scenario needs --before", s.label())
            }
            _ => {}
        }
    }
    let _dev_broker;
    let (bootstrap, broker_kind) = match &args.kafka {
        Some(k) => (k.clone(), "real Kafka broker"),
        None => {
            let b = DevBroker::start(1)?;
            let s = b.bootstrap_servers();
            _dev_broker = b;
            (s, "embedded mock cluster")
        }
    };
    let topic = format!("bench-{}", std::process::id());
    featurelog_kafka::admin::ensure_topic(
        &KafkaConfig::new(&bootstrap),
        &topic,
        1,
        1,
        Duration::from_secs(30),
    )
    .await?;

    let dir = tempfile::tempdir()?;
    let allow: Vec<String> = (0..args.logged).map(|f| format!("\"f{f}\"")).collect();
    std::fs::write(
        dir.path().join("allow.toml"),
        format!(
            "[[model]]\nname = \"ranker\"\nfeatures = [{}]\ncandidate-ids-input = \"item_id\"\n",
            allow.join(", ")
        ),
    )?;
    let model_addr = free_addr();
    let model = spawn(&bin, &["model-server", "--listen", &model_addr.to_string()])?;
    connect(model_addr).await?;

    let template = requests(&args, 64);
    let request_bytes = template[0].encoded_len();
    let rest_upstream = match args.protocol {
        Protocol::Grpc | Protocol::GrpcStream => None,
        _ => Some(canned_rest_server(args.candidates).await?),
    };
    let bodies = Arc::new(rest_bodies(
        &template,
        args.protocol == Protocol::RestBinary,
    ));
    let template = Arc::new(template);
    println!(
        "sidecar benchmark ({:?}): {} req/s, {} candidates x {} FP32 features ({} logged), {} tensors, {request_bytes} bytes per request; {} s x {} rounds per scenario; Kafka: {broker_kind}, compression {}",
        args.protocol,
        args.rate,
        args.candidates,
        args.features,
        args.logged,
        if args.typed { "typed" } else { "raw" },
        args.duration.as_secs(),
        args.rounds,
        args.compression
    );
    for (tool, name) in [(&nginx, "nginx"), (&haproxy, "haproxy")] {
        if let Some(tool) = tool
            && args.scenarios.iter().any(|s| s.label() == name)
        {
            let out = Command::new(tool).arg("-v").output()?;
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            println!("  {}", text.lines().next().unwrap_or(name).trim());
        }
    }

    let mut results: Vec<(Scenario, Vec<Run>)> =
        args.scenarios.iter().map(|s| (*s, vec![])).collect();
    let mut published = (0.0, 0.0, 0.0, 0.0);
    for round in 0..args.rounds {
        for (scenario, runs) in &mut results {
            let label = scenario.label();
            let started = match (*scenario, scenario.sidecar_mode()) {
                (Scenario::Direct, _) => Started {
                    proc: None,
                    grpc: model_addr,
                    rest: rest_upstream,
                    metrics: None,
                },
                (_, Some(mode)) => {
                    let (listen, metrics_addr) = (free_addr(), free_addr());
                    let rest = rest_upstream.map(|upstream| (free_addr(), upstream));
                    let config = write_sidecar_config(
                        dir.path(),
                        label,
                        model_addr,
                        listen,
                        metrics_addr,
                        mode,
                        &bootstrap,
                        &topic,
                        &args.compression,
                        rest,
                    );
                    let sidecar_bin = match scenario {
                        Scenario::BeforePassThrough | Scenario::BeforeLogging => {
                            args.before.clone().unwrap()
                        }
                        _ => bin.clone(),
                    };
                    let proc = spawn(
                        &sidecar_bin,
                        &["sidecar", "--config", config.to_str().unwrap()],
                    )?;
                    Started {
                        proc: Some(proc),
                        grpc: listen,
                        rest: rest.map(|(listen, _)| listen),
                        metrics: (mode == "log").then_some(metrics_addr),
                    }
                }
                (Scenario::Nginx, None) => {
                    let listen = free_addr();
                    let config = nginx_config(dir.path(), label, listen, model_addr);
                    let proc = spawn(
                        nginx.as_ref().unwrap(),
                        &[
                            "-p",
                            dir.path().to_str().unwrap(),
                            "-e",
                            "stderr",
                            "-c",
                            config.to_str().unwrap(),
                        ],
                    )?;
                    Started {
                        proc: Some(proc),
                        grpc: listen,
                        rest: None,
                        metrics: None,
                    }
                }
                (_, None) => {
                    let listen = free_addr();
                    let config = haproxy_config(dir.path(), label, listen, model_addr);
                    let proc = spawn(
                        haproxy.as_ref().unwrap(),
                        &["-db", "-q", "-f", config.to_str().unwrap()],
                    )?;
                    Started {
                        proc: Some(proc),
                        grpc: listen,
                        rest: None,
                        metrics: None,
                    }
                }
            };
            let run = measure(
                &args,
                started.grpc,
                started.rest,
                started.proc.as_ref().map(|p| p.0.id()),
                model.0.id(),
                &template,
                &bodies,
                &format!("r{round}-{label}"),
            )
            .await?;
            if let (Some(metrics_addr), Scenario::Logging) = (started.metrics, *scenario) {
                // Let the statistics callback report the final wire bytes.
                tokio::time::sleep(Duration::from_millis(2500)).await;
                let text = scrape(metrics_addr).await?;
                published.0 += metric(&text, "featurelog_sidecar_record_bytes_total");
                published.1 += metric(&text, "featurelog_sidecar_records_produced_total");
                published.2 += metric(&text, "featurelog_sidecar_kafka_tx_bytes");
                published.3 += metric(&text, "featurelog_sidecar_request_bytes_total");
            }
            drop(started);
            eprintln!(
                "round {round} {label:>19}: {} calls, {} errors, p50 {:.2} ms, p99 {:.2} ms, proxy CPU {} us/call, model server {:.1} us/call",
                run.calls,
                run.errors,
                run.p50_ms,
                run.p99_ms,
                run.proxy_cpu_us_per_call
                    .map(|c| format!("{c:.1}"))
                    .unwrap_or_else(|| "-".into()),
                run.model_cpu_us_per_call,
            );
            runs.push(run);
        }
    }

    let range_with = |values: Vec<f64>, digits: usize| {
        let (median, low, high) = spread(&values);
        format!("{median:.digits$} ({low:.digits$}-{high:.digits$})")
    };
    let range = |values: Vec<f64>| range_with(values, 1);
    println!();
    println!(
        "Medians over {} rounds, range in parentheses; CPU per call of the proxy process (nginx: master and workers) and of the model server.",
        args.rounds
    );
    println!();
    println!(
        "| scenario | calls | errors | p50 ms | p99 ms | proxy CPU us/call | model server CPU us/call |"
    );
    println!("| --- | ---: | ---: | --- | --- | --- | --- |");
    for (scenario, runs) in &results {
        let cpu = if *scenario == Scenario::Direct {
            "-".to_string()
        } else {
            range(
                runs.iter()
                    .filter_map(|r| r.proxy_cpu_us_per_call)
                    .collect(),
            )
        };
        println!(
            "| {} | {} | {} | {} | {} | {cpu} | {} |",
            scenario.label(),
            runs.iter().map(|r| r.calls).sum::<u64>(),
            runs.iter().map(|r| r.errors).sum::<u64>(),
            range_with(runs.iter().map(|r| r.p50_ms).collect(), 2),
            range_with(runs.iter().map(|r| r.p99_ms).collect(), 2),
            range(runs.iter().map(|r| r.model_cpu_us_per_call).collect()),
        );
    }
    let sidecars: Vec<_> = results
        .iter()
        .filter(|(s, _)| s.sidecar_mode().is_some())
        .collect();
    if !sidecars.is_empty() {
        println!();
        println!(
            "| sidecar CPU us/call by thread (median) | proxy (tokio) | publisher | librdkafka | other |"
        );
        println!("| --- | --- | --- | --- | --- |");
        for (scenario, runs) in sidecars {
            let g: Vec<String> = (0..4)
                .map(|i| {
                    let (m, _, _) = spread(
                        &runs
                            .iter()
                            .map(|r| r.sidecar_groups_us[i])
                            .collect::<Vec<_>>(),
                    );
                    format!("{m:.1}")
                })
                .collect();
            println!("| {} | {} |", scenario.label(), g.join(" | "));
        }
    }

    // Each ratio is taken round by round (the scenarios of a round run back to back), so its
    // spread says how much of it is the machine's noise rather than the proxies.
    let runs_of = |s: Scenario| results.iter().find(|(r, _)| *r == s).map(|(_, runs)| runs);
    let ratio = |num: Scenario, den: Scenario, target: &str| {
        let (Some(a), Some(b)) = (runs_of(num), runs_of(den)) else {
            return;
        };
        let per_round: Vec<f64> = a
            .iter()
            .zip(b)
            .filter_map(|(x, y)| Some(x.proxy_cpu_us_per_call? / y.proxy_cpu_us_per_call?))
            .collect();
        let (median, low, high) = spread(&per_round);
        println!(
            "{} / {} CPU per call: median {median:.3}x, {low:.3}x to {high:.3}x over {} rounds{target}",
            num.label(),
            den.label(),
            per_round.len()
        );
    };
    println!();
    ratio(Scenario::PassThrough, Scenario::Nginx, " (target <= 1)");
    ratio(Scenario::PassThrough, Scenario::Haproxy, " (target <= 1)");
    ratio(
        Scenario::Logging,
        Scenario::PassThrough,
        " (target <= 1.10x)",
    );
    ratio(Scenario::PassThrough, Scenario::BeforePassThrough, "");
    ratio(Scenario::Logging, Scenario::BeforeLogging, "");
    ratio(Scenario::BeforeLogging, Scenario::BeforePassThrough, "");

    if let Some(direct) = runs_of(Scenario::Direct) {
        let p50 = |runs: &Vec<Run>| spread(&runs.iter().map(|r| r.p50_ms).collect::<Vec<_>>()).0;
        let p99 = |runs: &Vec<Run>| spread(&runs.iter().map(|r| r.p99_ms).collect::<Vec<_>>()).0;
        let added: Vec<String> = results
            .iter()
            .filter(|(s, _)| *s != Scenario::Direct)
            .map(|(s, runs)| {
                format!(
                    "{} p50 {:+.2} ms, p99 {:+.2} ms",
                    s.label(),
                    p50(runs) - p50(direct),
                    p99(runs) - p99(direct)
                )
            })
            .collect();
        println!("added latency vs direct (medians): {}", added.join("; "));
    }
    if runs_of(Scenario::Logging).is_some() {
        let body = if grpc { "gRPC" } else { "HTTP" };
        let records = published.1.max(1.0);
        let per_request = published.3 / records;
        println!(
            "bytes per call: request {per_request:.0} ({body} body); record {:.0} ({:.1}x smaller); on the wire to Kafka (compressed) {:.0} ({:.1}x smaller, target >= 5x)",
            published.0 / records,
            per_request / (published.0 / records),
            published.2 / records,
            per_request / (published.2 / records),
        );
    }
    drop(model);
    Ok(())
}
