//! The fixed-rate load and what it calls (a gRPC client, a stream, or a REST client), the REST
//! model server it calls in REST runs, and one scenario's measurement.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use featurelog_schemas::inference::ModelInferRequest;
use featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

use crate::procs::{cpu_by_group, cpu_seconds, tree_cpu_seconds};
use crate::{Args, Protocol};

/// A REST model server that reads each call's body and answers with the same scores: what
/// the sidecar costs is measured, not a model.
pub(crate) async fn canned_rest_server(candidates: usize) -> anyhow::Result<SocketAddr> {
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

pub(crate) async fn connect(
    addr: SocketAddr,
) -> anyhow::Result<GrpcInferenceServiceClient<Channel>> {
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

pub(crate) struct Run {
    pub(crate) calls: u64,
    pub(crate) errors: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// CPU per call of the proxy in between (the sidecar, nginx or HAProxy).
    pub(crate) proxy_cpu_us_per_call: Option<f64>,
    /// Per call: proxy (tokio), publisher threads, librdkafka, other.
    pub(crate) sidecar_groups_us: [f64; 4],
    pub(crate) model_cpu_us_per_call: f64,
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
pub(crate) async fn measure(
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
