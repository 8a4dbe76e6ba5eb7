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
//! Run with `bench/sidecar.sh` (builds release binaries first).
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
    sidecar_cpu_us_per_call: Option<f64>,
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
    sidecar_pid: Option<u32>,
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
    let (s0, m0) = (sidecar_pid.map(cpu_seconds), cpu_seconds(model_pid));
    let g0 = sidecar_pid.map(cpu_by_group).unwrap_or_default();
    let (mut lat, errors) = load(&target, args.rate, args.duration, label).await;
    let (s1, m1) = (sidecar_pid.map(cpu_seconds), cpu_seconds(model_pid));
    let g1 = sidecar_pid.map(cpu_by_group).unwrap_or_default();
    lat.sort_by(f64::total_cmp);
    let calls = lat.len() as u64 + errors;
    Ok(Run {
        calls,
        errors,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        sidecar_cpu_us_per_call: s0.zip(s1).map(|(a, b)| (b - a) * 1e6 / calls as f64),
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
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

    let mut results: Vec<(&str, Vec<Run>)> = vec![
        ("direct", vec![]),
        ("pass-through", vec![]),
        ("logging", vec![]),
    ];
    let mut published = (0.0, 0.0, 0.0, 0.0);
    for round in 0..args.rounds {
        for (label, runs) in &mut results {
            let run = match *label {
                "direct" => {
                    measure(
                        &args,
                        model_addr,
                        rest_upstream,
                        None,
                        model.0.id(),
                        &template,
                        &bodies,
                        &format!("r{round}-direct"),
                    )
                    .await?
                }
                mode_label => {
                    let mode = if mode_label == "logging" {
                        "log"
                    } else {
                        "pass-through"
                    };
                    let (listen, metrics_addr) = (free_addr(), free_addr());
                    let rest = rest_upstream.map(|upstream| (free_addr(), upstream));
                    let config = write_sidecar_config(
                        dir.path(),
                        mode_label,
                        model_addr,
                        listen,
                        metrics_addr,
                        mode,
                        &bootstrap,
                        &topic,
                        &args.compression,
                        rest,
                    );
                    let sidecar = spawn(&bin, &["sidecar", "--config", config.to_str().unwrap()])?;
                    let run = measure(
                        &args,
                        listen,
                        rest.map(|(listen, _)| listen),
                        Some(sidecar.0.id()),
                        model.0.id(),
                        &template,
                        &bodies,
                        &format!("r{round}-{mode_label}"),
                    )
                    .await?;
                    if mode == "log" {
                        // Let the statistics callback report the final wire bytes.
                        tokio::time::sleep(Duration::from_millis(2500)).await;
                        let text = scrape(metrics_addr).await?;
                        published.0 += metric(&text, "featurelog_sidecar_record_bytes_total");
                        published.1 += metric(&text, "featurelog_sidecar_records_produced_total");
                        published.2 += metric(&text, "featurelog_sidecar_kafka_tx_bytes");
                        published.3 += metric(&text, "featurelog_sidecar_request_bytes_total");
                    }
                    drop(sidecar);
                    run
                }
            };
            eprintln!(
                "round {round} {label:>12}: {} calls, {} errors, p50 {:.2} ms, p99 {:.2} ms, sidecar CPU {} us/call",
                run.calls,
                run.errors,
                run.p50_ms,
                run.p99_ms,
                run.sidecar_cpu_us_per_call
                    .map(|c| format!("{c:.1}"))
                    .unwrap_or_else(|| "-".into())
            );
            runs.push(run);
        }
    }

    let avg =
        |runs: &[Run], f: &dyn Fn(&Run) -> f64| runs.iter().map(f).sum::<f64>() / runs.len() as f64;
    println!();
    println!(
        "| scenario | calls | errors | p50 ms | p99 ms | sidecar CPU us/call | model server CPU us/call |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (label, runs) in &results {
        println!(
            "| {label} | {} | {} | {:.2} | {:.2} | {} | {:.1} |",
            runs.iter().map(|r| r.calls).sum::<u64>(),
            runs.iter().map(|r| r.errors).sum::<u64>(),
            avg(runs, &|r| r.p50_ms),
            avg(runs, &|r| r.p99_ms),
            if *label == "direct" {
                "-".to_string()
            } else {
                format!(
                    "{:.1}",
                    avg(runs, &|r| r.sidecar_cpu_us_per_call.unwrap_or(0.0))
                )
            },
            avg(runs, &|r| r.model_cpu_us_per_call),
        );
    }
    println!();
    println!("| sidecar CPU us/call by thread | proxy (tokio) | publisher | librdkafka | other |");
    println!("| --- | --- | --- | --- | --- |");
    for (label, runs) in results.iter().skip(1) {
        let g: Vec<String> = (0..4)
            .map(|i| format!("{:.1}", avg(runs, &|r| r.sidecar_groups_us[i])))
            .collect();
        println!("| {label} | {} |", g.join(" | "));
    }
    let cpu = |i: usize| avg(&results[i].1, &|r| r.sidecar_cpu_us_per_call.unwrap_or(0.0));
    let lat = |i: usize, f: &dyn Fn(&Run) -> f64| avg(&results[i].1, f);
    println!();
    println!(
        "logging / pass-through sidecar CPU per call: {:.3}x (target <= 1.10x)",
        cpu(2) / cpu(1)
    );
    // The same ratio round by round (each round runs the two scenarios back to back): its
    // spread says how much of a run's figure is the machine's noise rather than the sidecar.
    let mut per_round: Vec<f64> = results[2]
        .1
        .iter()
        .zip(&results[1].1)
        .filter_map(|(log, pass)| {
            Some(log.sidecar_cpu_us_per_call? / pass.sidecar_cpu_us_per_call?)
        })
        .collect();
    per_round.sort_by(f64::total_cmp);
    if let (Some(low), Some(high)) = (per_round.first(), per_round.last()) {
        let n = per_round.len();
        let median = (per_round[(n - 1) / 2] + per_round[n / 2]) / 2.0;
        println!("  per round: median {median:.3}x, {low:.3}x to {high:.3}x over {n} rounds");
    }
    println!(
        "added latency vs direct: pass-through p50 +{:.2} ms, p99 +{:.2} ms; logging p50 +{:.2} ms, p99 +{:.2} ms",
        lat(1, &|r| r.p50_ms) - lat(0, &|r| r.p50_ms),
        lat(1, &|r| r.p99_ms) - lat(0, &|r| r.p99_ms),
        lat(2, &|r| r.p50_ms) - lat(0, &|r| r.p50_ms),
        lat(2, &|r| r.p99_ms) - lat(0, &|r| r.p99_ms),
    );
    let body = if matches!(args.protocol, Protocol::Grpc | Protocol::GrpcStream) {
        "gRPC"
    } else {
        "HTTP"
    };
    let records = published.1.max(1.0);
    let per_request = published.3 / records;
    println!(
        "bytes per call: request {per_request:.0} ({body} body); record {:.0} ({:.1}x smaller); on the wire to Kafka (compressed) {:.0} ({:.1}x smaller, target >= 5x)",
        published.0 / records,
        per_request / (published.0 / records),
        published.2 / records,
        per_request / (published.2 / records),
    );
    drop(model);
    Ok(())
}
