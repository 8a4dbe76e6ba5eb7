//! `featurelog inspect`: the command line of `featurelog_inspect`.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use featurelog_inspect::{Decode, Options, Start};
use featurelog_kafka::KafkaConfig;

use crate::Failure;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kafka brokers, host:port[,host:port...].
    #[arg(long, env = "FEATURELOG_KAFKA", value_name = "HOST:PORT")]
    bootstrap_servers: String,
    /// The topic to read.
    #[arg(long)]
    topic: String,
    /// Only these partitions (repeatable); all by default.
    #[arg(long = "partition", value_name = "N")]
    partitions: Vec<i32>,
    /// Where to start: `beginning`, `end`, `-N` (the last N records of each partition) or a
    /// time (`2026-12-01T10:00:00Z`).
    #[arg(long, default_value = "beginning", allow_hyphen_values = true)]
    from: Start,
    /// Stop after printing this many records.
    #[arg(long)]
    limit: Option<u64>,
    /// Keep printing new records until interrupted, instead of stopping at the end.
    #[arg(long)]
    follow: bool,
    /// Only records of this request (keyed by it, or naming it).
    #[arg(long)]
    request_id: Option<String>,
    /// Only records naming this model (feature logs, the sidecar's dead letters).
    #[arg(long)]
    model: Option<String>,
    /// How to read values: auto, feature-log, impression, json or raw.
    #[arg(long, default_value = "auto")]
    decode: Decode,
    /// A librdkafka setting, `key=value` (repeatable): security.protocol, sasl.*, ssl.*.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// How long to wait for the brokers (and, without --follow, for a record before giving up
    /// on reaching the end), e.g. `30s`.
    #[arg(long, default_value = "30s", value_parser = humantime_duration)]
    timeout: Duration,
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 30s, 2m)"))
}

pub fn run(args: Args) -> Result<(), Failure> {
    let mut kafka = KafkaConfig::new(args.bootstrap_servers);
    for property in &args.properties {
        let (key, value) = property
            .split_once('=')
            .with_context(|| format!("-X {property}: expected key=value"))
            .map_err(Failure::Config)?;
        kafka.properties.insert(key.to_owned(), value.to_owned());
    }
    kafka
        .check()
        .map_err(|e| Failure::Config(anyhow::anyhow!(e)))?;
    let options = Options {
        topic: args.topic,
        partitions: args.partitions,
        start: args.from,
        limit: args.limit,
        follow: args.follow,
        request_id: args.request_id,
        model: args.model,
        decode: args.decode,
        timeout: args.timeout,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let summary = featurelog_inspect::inspect(&kafka, &options, &mut out)
        .map_err(|e| Failure::Run(e.into()))?;
    out.flush().context("writing the output")?;
    eprintln!(
        "featurelog inspect: {} of {} records read printed",
        summary.printed, summary.read
    );
    Ok(())
}
