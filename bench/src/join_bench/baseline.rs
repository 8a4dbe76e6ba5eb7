//! The consume-only baselines: both topics read to the end without joining, with or without
//! decoding, in a process of their own as the joiner runs in one.

use std::time::Duration;

use anyhow::Context;
use featurelog_kafka::KafkaConfig;
use featurelog_schemas::featurelog::v1::FeatureLog;
use prost::Message as _;
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer, StreamConsumer};

use crate::{Args, cpu_seconds};

/// Reads both topics to the end, decoding nothing (the floor any consumer pays), or with
/// `decode`, decoding every record as a plain consumer of them would (prost for the feature
/// logs, serde_json for the events) and joining nothing.
pub(crate) async fn consume_only(
    kafka: &KafkaConfig,
    topics: &[&str],
    expected: usize,
    decode: bool,
) -> anyhow::Result<(f64, u64)> {
    let consumer: StreamConsumer = kafka
        .client_config(&[
            (
                "group.id",
                &format!("bench-consume-{decode}-{}", std::process::id()),
            ),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
        ])
        .create()?;
    consumer.subscribe(topics)?;
    let cpu0 = cpu_seconds();
    let faults0 = featurelog_bench::process_minor_faults(None);
    let mut bytes = 0usize;
    for _ in 0..expected {
        let m = tokio::time::timeout(Duration::from_secs(60), consumer.recv()).await??;
        let payload = m.payload().unwrap_or_default();
        bytes += payload.len();
        if decode {
            if m.topic() == topics[0] {
                bytes += FeatureLog::decode(payload)?.candidate_int_ids.len();
            } else {
                bytes += serde_json::from_slice::<serde_json::Value>(payload)?
                    .as_object()
                    .map_or(0, serde_json::Map::len);
            }
        }
    }
    let cpu = cpu_seconds() - cpu0;
    let faults = featurelog_bench::process_minor_faults(None) - faults0;
    std::hint::black_box(bytes);
    Ok((cpu, faults))
}

/// The child side of [`consume_in_own_process`]: consumes, then reports the whole process.
pub(crate) async fn run_consume(args: &Args, spec: &str) -> anyhow::Result<()> {
    let parts: Vec<&str> = spec.split(',').collect();
    let [features, events, records, decode] = parts[..] else {
        anyhow::bail!("--run-consume {spec}: expected features,events,records,decode");
    };
    let kafka = KafkaConfig::new(&args.kafka);
    consume_only(
        &kafka,
        &[features, events],
        records.parse()?,
        decode.parse()?,
    )
    .await?;
    println!(
        "{} {}",
        featurelog_bench::process_cpu_seconds(None),
        featurelog_bench::process_minor_faults(None)
    );
    Ok(())
}

/// A baseline measured as the joiner is: a fresh process of its own (its own heap, so its
/// memory comes fresh from the kernel as the joiner's does), its CPU counted from its start
/// (creating the consumer and joining the group included) to the last record read.
pub(crate) fn consume_in_own_process(
    args: &Args,
    topics: [&str; 2],
    records: usize,
    decode: bool,
) -> anyhow::Result<(f64, u64)> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["--kafka", &args.kafka, "--run-consume"])
        .arg(format!("{},{},{records},{decode}", topics[0], topics[1]))
        .output()
        .context("running the consume-only baseline process")?;
    anyhow::ensure!(
        out.status.success(),
        "the consume-only baseline process failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let (cpu, faults) = text
        .trim()
        .split_once(' ')
        .with_context(|| format!("baseline process printed {text:?}"))?;
    Ok((cpu.parse()?, faults.parse()?))
}
