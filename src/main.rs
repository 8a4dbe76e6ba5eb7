//! The `featurelog` binary: parses the command line and hands each subcommand to the library
//! that owns it. Exit codes: 0 success, 1 failure while running (or, for `diff`, skew over a
//! threshold), 2 bad usage or configuration.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod demo;
mod dev_broker;
mod diff;
mod inspect;
mod join;
mod sidecar;
mod signals;

/// Inference-side feature logging: record the features a model actually consumed, join them
/// with what users did, and check them against an offline pipeline.
#[derive(Debug, Parser)]
#[command(name = "featurelog", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the logging proxy next to an Open Inference Protocol (KServe V2) model server:
    /// forward every call unchanged and publish the allow-listed features to Kafka.
    Sidecar(sidecar::SidecarArgs),
    /// Join the sidecar's feature logs with impression and click events from Kafka and write
    /// Parquet training rows, exactly once.
    Join(join::JoinArgs),
    /// Compare served features (Parquet) with an offline pipeline's and explain each skew.
    Diff(diff::DiffArgs),
    /// Run the whole pipeline on this machine (model server, sidecar, traffic, joiner, diff) on
    /// the embedded broker and print what it found.
    Demo(demo::DemoArgs),
    /// Run an in-process Kafka-protocol broker (librdkafka's mock cluster) and print its
    /// bootstrap address. For trying featurelog without installing Kafka, not for production:
    /// it keeps everything in memory and loses it on exit.
    DevBroker(dev_broker::Args),
    /// Print the records of a featurelog topic (feature logs, events, dead letters) as JSON
    /// lines, decoded: what the sidecar logged, what the apps sent, why something was
    /// dead-lettered. Reads without a consumer group and commits nothing.
    Inspect(inspect::Args),
    /// Serve the reference Open Inference Protocol model server (a small recommender that
    /// scores candidates), for the demo, the tests and benchmarks.
    ModelServer(sidecar::ModelServerArgs),
}

/// How a subcommand failed, which decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage or configuration: exit 2.
    Config(anyhow::Error),
    /// Failure while running: exit 1.
    Run(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        Failure::Run(err)
    }
}

/// The multi-threaded runtime the services run on: one worker per core.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    runtime_with(None)
}

/// The same with `workers` worker threads (one per core when `None`).
pub fn runtime_with(workers: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    match cli.command {
        Command::Sidecar(args) => exit(sidecar::run(args)),
        Command::ModelServer(args) => exit(sidecar::run_model_server(args)),
        Command::Join(args) => exit(join::run(args)),
        Command::Diff(args) => diff::run(args),
        Command::Demo(args) => exit(demo::run(args)),
        Command::DevBroker(args) => report(dev_broker::run(args)),
        Command::Inspect(args) => exit(inspect::run(args)),
    }
}

/// Logs go to stderr so that stdout stays for what a command reports. The Delta kernel logs
/// every snapshot and scan it builds at info, several lines per table read or commit: only its
/// warnings show unless `FEATURELOG_LOG` asks for more.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FEATURELOG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,delta_kernel=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn exit(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Config(err)) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
        Err(Failure::Run(err)) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
