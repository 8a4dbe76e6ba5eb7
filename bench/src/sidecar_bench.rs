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
//!
//! This file owns the command line and the run of the scenarios; beside it, `requests.rs`
//! makes the load's requests, `load.rs` sends them and measures a scenario, `procs.rs` starts
//! the processes and reads their CPU, and `report.rs` prints the results.

#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use featurelog_kafka::{DevBroker, KafkaConfig};
use prost::Message;

#[path = "sidecar_bench/load.rs"]
mod load;
#[path = "sidecar_bench/procs.rs"]
mod procs;
#[path = "sidecar_bench/report.rs"]
mod report;
#[path = "sidecar_bench/requests.rs"]
mod requests;

use load::{Run, canned_rest_server, connect, measure};
use procs::{
    Proc, find_tool, free_addr, haproxy_config, metric, nginx_config, scrape, spawn,
    write_sidecar_config,
};
use report::report;
use requests::{requests, rest_bodies};

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
    let topic = format!("bench-{}", featurelog_bench::run_id());
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

    report(&args, results, published, grpc);
    drop(model);
    Ok(())
}
