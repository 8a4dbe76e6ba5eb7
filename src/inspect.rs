//! `featurelog inspect`: the command line of `featurelog_inspect`.

use std::io::Write;
use std::time::Duration;

use std::path::{Path, PathBuf};

use anyhow::Context;
use featurelog_inspect::{Decode, Options, Start};
use featurelog_joiner::config::JoinerConfig;
use featurelog_kafka::KafkaConfig;
use featurelog_sidecar::SidecarConfig;

use crate::Failure;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kafka brokers, host:port[,host:port...]; or take them from --config.
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap_servers: Option<String>,
    /// A sidecar or joiner config (with its environment overrides, as the service reads it):
    /// its `[kafka]` section (brokers, SASL, TLS), and the topic to read when --topic is not
    /// given: the sidecar's `publish.topic`, the joiner's `input.features-topic`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// With --config: read its dead-letter topic instead.
    #[arg(long, requires = "config", conflicts_with = "topic")]
    dead_letters: bool,
    /// The topic to read.
    #[arg(long)]
    topic: Option<String>,
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

/// What a service's config says about reading its topics.
struct FromConfig {
    kafka: KafkaConfig,
    topic: String,
    dead_letter_topic: String,
}

/// Reads `path` as the sidecar or the joiner would (a sidecar's config names its `upstream`).
fn from_config(path: &Path) -> anyhow::Result<FromConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
    if table.contains_key("upstream") {
        let config = SidecarConfig::load(path)?;
        let kafka = config.kafka.with_context(|| {
            format!(
                "{} has no [kafka] section (pass-through mode)",
                path.display()
            )
        })?;
        return Ok(FromConfig {
            kafka,
            topic: config.publish.topic,
            dead_letter_topic: config.publish.dead_letter_topic,
        });
    }
    let config = JoinerConfig::load(path)?;
    Ok(FromConfig {
        kafka: config.kafka,
        topic: config.input.features_topic,
        dead_letter_topic: config.input.dead_letter_topic,
    })
}

pub fn run(args: Args) -> Result<(), Failure> {
    let config = args
        .config
        .as_deref()
        .map(from_config)
        .transpose()
        .map_err(Failure::Config)?;
    let mut kafka = match (&config, args.bootstrap_servers) {
        // The command line wins over the file, as environment variables do.
        (Some(c), Some(brokers)) => KafkaConfig {
            bootstrap_servers: brokers,
            ..c.kafka.clone()
        },
        (Some(c), None) => c.kafka.clone(),
        (None, Some(brokers)) => KafkaConfig::new(brokers),
        (None, None) => {
            return Err(Failure::Config(anyhow::anyhow!(
                "name the brokers: --bootstrap-servers (or FEATURELOG_KAFKA), or --config with a sidecar's or joiner's config"
            )));
        }
    };
    let topic = match (args.topic, &config) {
        (Some(topic), _) => topic,
        (None, Some(c)) if args.dead_letters => c.dead_letter_topic.clone(),
        (None, Some(c)) => c.topic.clone(),
        (None, None) => {
            return Err(Failure::Config(anyhow::anyhow!(
                "name the topic: --topic, or --config (its feature-log topic, or with --dead-letters its dead-letter topic)"
            )));
        }
    };
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
        topic,
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
