//! What the joiner costs, against baselines run in the same command:
//! 1. CPU per input record: consuming the FeatureLog and event topics without joining (reading
//!    only, the baseline of the target; and reading and decoding, for the cost of joining
//!    proper), against `featurelog join` (router + join + Parquet + checkpoints) on the same
//!    records, run in a process of its own as users run it (its own heap and threads). The
//!    baselines run in processes of their own too and all three are measured whole, so that
//!    the ratio compares like with like.
//! 2. Memory per buffered request: the join state's estimate and the process's resident memory
//!    growth while holding feature logs that wait for impressions.
//! 3. The Parquet stage (`Dataset::stage`: rows to Arrow, zstd Parquet, fsync) against writing
//!    the same record batch with arrow's `ArrowWriter` alone.
//!
//! Run with `bench/join.sh`; it needs a Kafka broker in `FEATURELOG_KAFKA`. `bench/flink.sh`
//! runs it in parts (`--produce-only`, then `--topics` with `--joiner-only`, then
//! `--delete-topics`) to set the joiner beside Flink on the same records.
//!
//! This file owns the command line and the run of the three measurements; beside it,
//! `data.rs` makes and produces the input records, `baseline.rs` consumes them without joining,
//! `course.rs` follows the joiner process as it runs, and `probes.rs` holds the in-process
//! decode, join and memory probes.

#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used)]

// The same allocator as the featurelog binary, so the joiner runs here as it runs there
// (bench/join-heap.sh builds without it, for heaptrack).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use featurelog_joiner::config::JoinerConfig;
use featurelog_joiner::log::{Layouts, ServedLog};
use featurelog_joiner::sink::{Dataset, SinkOptions};
use featurelog_joiner::state::{Labels, Row};
use featurelog_kafka::KafkaConfig;
use prost::Message as _;

#[path = "join_bench/baseline.rs"]
mod baseline;
#[path = "join_bench/course.rs"]
mod course;
#[path = "join_bench/data.rs"]
mod data;
#[path = "join_bench/probes.rs"]
mod probes;

use baseline::{consume_in_own_process, consume_only, run_consume};
use course::{Sample, metric, print_course, scrape};
use data::{FIRST_SERVED_S, feature_log, produce};
use probes::{decode_probe, join_probe, memory_probe};

#[derive(Debug, Parser)]
struct Args {
    /// Requests (feature logs) to produce.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Candidates per request.
    #[arg(long, default_value_t = 100)]
    candidates: usize,
    /// Logged FP32 features per candidate.
    #[arg(long, default_value_t = 10)]
    features: usize,
    /// Give each feature continuous values (nearly every one distinct, as a score or an
    /// embedding has) instead of 97 values repeating in a pattern.
    #[arg(long)]
    continuous_features: bool,
    /// Impressions per request.
    #[arg(long, default_value_t = 5)]
    impressions: usize,
    /// The joiner's flush (commit) interval; 10 s is its default.
    #[arg(long, default_value = "10s")]
    flush_interval: String,
    /// The joiner's `join.held-logs`: `auto` (offsets in the topic, whose retention here is
    /// the broker's week), `topic` or `state-files` (copies into the state files).
    #[arg(long, default_value = "auto")]
    held_logs: String,
    /// Requests per second of event time: request i is served at `i / event-rate` seconds after
    /// the first, its impressions 100 ms later. 0: every request at the same instant, so that
    /// with the default `--features-wait` no feature log expires during the run and the join
    /// state only grows (a ramp from empty, every byte of it fresh memory from the kernel).
    #[arg(long, default_value_t = 0.0)]
    event_rate: f64,
    /// The joiner's `join.features-wait`. With `--event-rate`, a wait shorter than the run's
    /// span of event time makes feature logs expire during it: a steady state in which the
    /// state holds about `event-rate x features-wait` requests and its memory is reused.
    #[arg(long, default_value = "1h")]
    features_wait: String,
    /// The joiner's `join.max-read-ahead`; default: the joiner's.
    #[arg(long)]
    max_read_ahead: Option<String>,
    /// The joiner's `output.flush-rows` (rows a task holds before it commits ahead of its
    /// flush interval); default: the joiner's.
    #[arg(long)]
    flush_rows: Option<usize>,
    /// Extra librdkafka properties for the joiner (`key=value`, repeatable), as its
    /// `[kafka.properties]`.
    #[arg(long = "kafka-property")]
    kafka_properties: Vec<String>,
    /// The joiner's `input.events-partitioning`: `any` (events keyed by item id into 3
    /// partitions, routed through the repartition topic) or `by-request-id` (events keyed by
    /// request id with murmur2 into the feature-log topic's 4 partitions, read directly).
    #[arg(long, default_value = "any")]
    events_partitioning: String,
    /// Kafka bootstrap servers.
    #[arg(long, env = "FEATURELOG_KAFKA", default_value = "")]
    kafka: String,
    /// Only fill a join state and print its memory (the benchmark runs itself with this, so
    /// that the measurement starts from a fresh process's resident memory).
    #[arg(long, hide = true)]
    memory_probe: bool,
    /// Only time `ServedLog::decode` on `--requests` records in memory (7 rounds), against
    /// copying them: the join's per-record decoding cost without Kafka.
    #[arg(long)]
    decode_probe: bool,
    /// Only run the join's own work in memory, no Kafka: decode the same records, join them in
    /// one state (as one co-partitioned task) and stage the rows as Parquet; prints CPU per
    /// stage. What the join costs without consuming, to set against the full run.
    #[arg(long)]
    join_probe: bool,
    /// With `--join-probe`, read each request's impressions before its feature log, as the
    /// joiner often does on a backlog (a fetch of events spans more event time than one of
    /// feature logs): every impression waits in the pending table until its log comes.
    #[arg(long)]
    impressions_first: bool,
    /// Run the joiner with this config until killed (the benchmark runs the joiner in a
    /// process of its own with this, as users run it: its own heap and threads).
    #[arg(long, hide = true)]
    run_joiner: Option<std::path::PathBuf>,
    /// Consume `<features topic>,<events topic>,<records>,<decode: true|false>` to the end in
    /// this process, then print the whole process's CPU seconds and page faults (the benchmark
    /// runs its baselines in a process of their own with this, measured as the joiner is).
    #[arg(long, hide = true)]
    run_consume: Option<String>,
    /// Only create and fill the two topics, print `topics <features> <events> <input records>
    /// <impressions>` and exit, keeping them (bench/flink.sh runs the joiner and Flink on them).
    #[arg(long)]
    produce_only: bool,
    /// Read these topics (`<features>,<events>`, as `--produce-only` made them with the same
    /// data arguments) instead of producing new ones.
    #[arg(long)]
    topics: Option<String>,
    /// Run only the joiner (no consume-only baselines, memory probe or Parquet stage) and print
    /// its figures on one `joiner-figures` line.
    #[arg(long)]
    joiner_only: bool,
    /// Write the joiner's dataset here and keep it (default: a temporary directory).
    #[arg(long)]
    output: Option<std::path::PathBuf>,
    /// The joiner's `output.format`: `parquet` or `delta` (bench/delta.sh sets them side by
    /// side on the same records).
    #[arg(long, default_value = "parquet")]
    format: String,
    /// With `--format delta`, `output.delta.target-file-bytes` (0: no compaction); default:
    /// the joiner's.
    #[arg(long)]
    delta_target_file_bytes: Option<u64>,
    /// With `--format delta`, keep the joiner running after the last row is committed until it
    /// has compacted this many hours, and report the CPU that took apart from the write's.
    #[arg(long, default_value_t = 0)]
    wait_compacted: u64,
    /// Only delete every topic whose name starts with this prefix and exit (bench/flink.sh
    /// clears its own broker between rounds: disk is limited).
    #[arg(long)]
    delete_topics: Option<String>,
}

/// Deletes every topic whose name starts with `prefix`.
async fn delete_topics(kafka: &KafkaConfig, prefix: &str) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = kafka.client_config(&[]).create()?;
    let metadata = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(30))?;
    let names: Vec<String> = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    if !names.is_empty() {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for result in admin.delete_topics(&refs, &AdminOptions::new()).await? {
            result.map_err(|(topic, code)| anyhow::anyhow!("deleting {topic}: {code}"))?;
        }
    }
    println!("deleted {} topics", names.len());
    Ok(())
}

fn cpu_seconds() -> f64 {
    featurelog_bench::process_cpu_seconds(None)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.decode_probe {
        return decode_probe(&args);
    }
    if args.memory_probe {
        return memory_probe(&args);
    }
    if args.join_probe {
        return join_probe(&args);
    }
    if let Some(spec) = &args.run_consume {
        return run_consume(&args, spec).await;
    }
    if let Some(path) = &args.run_joiner {
        let text = std::fs::read_to_string(path)?;
        let config = JoinerConfig::from_toml_with_env(path, &text, Vec::new())?;
        featurelog_joiner::run::run(config, tokio_util::sync::CancellationToken::new()).await?;
        return Ok(());
    }
    anyhow::ensure!(
        !args.kafka.is_empty(),
        "set --kafka or FEATURELOG_KAFKA (scripts/kafka.sh start gives a broker)"
    );
    let properties = args
        .kafka_properties
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .with_context(|| format!("--kafka-property {kv}: expected key=value"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let kafka = KafkaConfig::new(&args.kafka);
    if let Some(prefix) = &args.delete_topics {
        return delete_topics(&kafka, prefix).await;
    }
    let run = featurelog_bench::run_id();
    let (features, events, impressions) = match &args.topics {
        Some(spec) => {
            let (f, e) = spec
                .split_once(',')
                .with_context(|| format!("--topics {spec}: expected <features>,<events>"))?;
            (f.to_owned(), e.to_owned(), args.requests * args.impressions)
        }
        None => {
            let (features, events) = (
                format!("bench-features-{run}"),
                format!("bench-events-{run}"),
            );
            featurelog_kafka::admin::ensure_topic(&kafka, &features, 4, 1, Duration::from_secs(30))
                .await?;
            let event_partitions = if args.events_partitioning == "by-request-id" {
                4
            } else {
                3
            };
            featurelog_kafka::admin::ensure_topic(
                &kafka,
                &events,
                event_partitions,
                1,
                Duration::from_secs(30),
            )
            .await?;
            let impressions = produce(&args, &kafka, &features, &events)
                .await
                .context("producing")?;
            (features, events, impressions)
        }
    };
    let records = args.requests + impressions;
    if args.produce_only {
        println!("topics {features} {events} {records} {impressions}");
        return Ok(());
    }
    println!(
        "join benchmark: {} requests x {} candidates x {} FP32 features, {impressions} impressions ({records} input records)",
        args.requests, args.candidates, args.features
    );

    // 1. Consume-only baseline, then the joiner, on the same records.
    let ((consume_cpu, consume_faults), (decode_cpu, decode_faults)) = if args.joiner_only {
        ((f64::NAN, 0), (f64::NAN, 0))
    } else {
        (
            consume_only(&kafka, &[&features, &events], records, false).await?,
            consume_only(&kafka, &[&features, &events], records, true).await?,
        )
    };
    let ((own_cpu, own_faults), (own_decode_cpu, own_decode_faults)) = if args.joiner_only {
        ((f64::NAN, 0), (f64::NAN, 0))
    } else {
        (
            consume_in_own_process(&args, [&features, &events], records, false)?,
            consume_in_own_process(&args, [&features, &events], records, true)?,
        )
    };
    let dir = tempfile::tempdir()?;
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| dir.path().join("out"));
    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let text = format!(
        "group = \"bench-join-{run}\"\n[kafka]\nbootstrap-servers = \"{}\"\n[input]\nfeatures-topic = \"{features}\"\n\
         events-topic = \"{events}\"\nevents-partitioning = \"{}\"\ndead-letter-topic = \"bench-dlq-{run}\"\n[join]\nfeatures-wait = \"{}\"\n\
         impressions-wait = \"1h\"\nidle-timeout = \"1h\"\nheld-logs = \"{}\"\n{}[output]\npath = \"{}\"\nflush-interval = \"{}\"\nformat = \"{}\"\n{}{}\
         [metrics]\nlisten = \"{metrics_addr}\"\n[kafka.properties]\n{}",
        args.kafka,
        args.events_partitioning,
        args.features_wait,
        args.held_logs,
        args.max_read_ahead
            .as_ref()
            .map_or_else(String::new, |d| format!("max-read-ahead = \"{d}\"\n")),
        out_dir.display(),
        args.flush_interval,
        args.format,
        args.flush_rows
            .map_or_else(String::new, |n| format!("flush-rows = {n}\n")),
        args.delta_target_file_bytes
            .map_or_else(String::new, |n| format!(
                "[output.delta]\ntarget-file-bytes = {n}\n"
            )),
        properties
            .iter()
            .map(|(k, v)| format!("\"{k}\" = \"{v}\"\n"))
            .collect::<String>(),
    );
    let config_path = dir.path().join("join.toml");
    // Checked here, so that a mistake shows as an error rather than a child that never writes.
    JoinerConfig::from_toml_with_env(&config_path, &text, Vec::new())?;
    std::fs::write(&config_path, &text)?;
    let started = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("--run-joiner")
        .arg(&config_path)
        .spawn()
        .context("starting the joiner process")?;
    let pid = Some(child.id());
    // The run's course, sampled every second: a joiner whose cost does not grow with the
    // volume it has seen uses the same CPU per row and the same memory late in a run as early.
    let mut course: Vec<Sample> = Vec::new();
    let mut sampled = Instant::now();
    let measured = async {
        loop {
            let text = scrape(metrics_addr).await.unwrap_or_default();
            let written = metric(&text, "featurelog_join_rows_written_total");
            if sampled.elapsed() >= Duration::from_secs(1) || written as usize >= impressions {
                sampled = Instant::now();
                course.push(Sample {
                    rows: written,
                    cpu: featurelog_bench::process_cpu_seconds(pid),
                    rss: featurelog_bench::resident_bytes(pid),
                    state: metric(&text, "featurelog_join_state_bytes"),
                    paused: metric(&text, "featurelog_join_paused_partitions"),
                });
            }
            if written as usize >= impressions {
                return Ok(());
            }
            if let Some(status) = child.try_wait()? {
                anyhow::bail!("the joiner exited ({status}) after writing {written} rows");
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(600),
                "joiner wrote {written} of {impressions} rows in 600 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    .await;
    let join_cpu = featurelog_bench::process_cpu_seconds(pid);
    let join_wall = started.elapsed().as_secs_f64();
    // The table's upkeep after the write: its CPU is reported apart from the write's.
    let compacted = if measured.is_ok() {
        async {
            loop {
                let text = scrape(metrics_addr).await.unwrap_or_default();
                let compacted = metric(&text, "featurelog_join_hours_compacted_total");
                if compacted as u64 >= args.wait_compacted {
                    return Ok(compacted as u64);
                }
                if let Some(status) = child.try_wait()? {
                    anyhow::bail!(
                        "the joiner exited ({status}) after compacting {compacted} hours"
                    );
                }
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(1200),
                    "joiner compacted {compacted} of {} hours in 1200 s",
                    args.wait_compacted
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        .await
    } else {
        Ok(0)
    };
    let compact_cpu = featurelog_bench::process_cpu_seconds(pid) - join_cpu;
    let join_faults = featurelog_bench::process_minor_faults(pid);
    let join_rss = featurelog_bench::resident_bytes(pid);
    let join_peak = featurelog_bench::peak_resident_bytes(pid);
    let (librdkafka_cpu, rest_cpu) = featurelog_bench::librdkafka_and_other_cpu(pid);
    // The two stages' own threads, so that a change to one is measured apart from the rest.
    let stage_cpu = |name: &str| -> f64 {
        featurelog_bench::thread_cpu(pid)
            .into_iter()
            .filter(|(comm, _)| comm.starts_with(name))
            .map(|(_, seconds)| seconds)
            .sum()
    };
    let (router_cpu, join_thread_cpu) =
        (stage_cpu("featurelog-rout"), stage_cpu("featurelog-join"));
    let end_metrics = scrape(metrics_addr).await.unwrap_or_default();
    // Memory once the joiner has been caught up for a flush interval and two seconds: right
    // after the last commit, the reading holds a varying amount of memory the rows and logs
    // just written freed and mimalloc has not yet given back (it does so after its purge delay,
    // when the thread next allocates): runs of one size ended up to 2x apart.
    let settled_rss = if measured.is_ok() {
        let settle = humantime::parse_duration(&args.flush_interval)? + Duration::from_secs(2);
        let caught_up = Instant::now();
        while caught_up.elapsed() < settle && child.try_wait()?.is_none() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        featurelog_bench::resident_bytes(pid)
    } else {
        0
    };
    child.kill()?;
    child.wait()?;
    measured?;
    let compacted = compacted?;
    println!();
    // The baselines' figures, unless they were skipped (`--joiner-only`).
    if !args.joiner_only {
        println!(
            "| stage | CPU s | input records per CPU s | joined rows per CPU s | minor page faults |"
        );
        println!("| --- | --- | --- | --- | --- |");
        println!(
            "| consume only, own process (the baseline) | {own_cpu:.2} | {:.0} | - | {own_faults} |",
            records as f64 / own_cpu
        );
        println!(
            "| consume and decode (prost, serde_json), own process | {own_decode_cpu:.2} | {:.0} | - | {own_decode_faults} |",
            records as f64 / own_decode_cpu
        );
        println!(
            "| consume only, loop only in the bench's process | {consume_cpu:.2} | {:.0} | - | {consume_faults} |",
            records as f64 / consume_cpu
        );
        println!(
            "| consume and decode, loop only in the bench's process | {decode_cpu:.2} | {:.0} | - | {decode_faults} |",
            records as f64 / decode_cpu
        );
        println!(
            "| featurelog join, own process | {join_cpu:.2} | {:.0} | {:.0} | {join_faults} |",
            records as f64 / join_cpu,
            impressions as f64 / join_cpu
        );
        println!(
            "joiner throughput per core / consume-only: {:.3} (target >= 0.5); / consume-and-decode: {:.3}; both measured as the joiner is, whole processes (loop only in the bench's process: {:.3} and {:.3}); wall {join_wall:.1} s (includes waiting for flushes)",
            own_cpu / join_cpu,
            own_decode_cpu / join_cpu,
            consume_cpu / join_cpu,
            decode_cpu / join_cpu
        );
    }
    println!(
        "join CPU by thread (threads alive at the end): librdkafka {:.2} s, the rest (the join and router threads, the dataset's runtime, tokio workers, metrics) {:.2} s",
        librdkafka_cpu, rest_cpu
    );
    println!(
        "join state at the end: {} buffered requests, {:.1} MiB; {} commits; {} candidates expired scored but not impressed",
        metric(&end_metrics, "featurelog_join_buffered_requests"),
        metric(&end_metrics, "featurelog_join_state_bytes") / 1048576.0,
        metric(&end_metrics, "featurelog_join_commits"),
        metric(
            &end_metrics,
            "featurelog_join_outcomes_total{name=\"scored_not_impressed\"}"
        ),
    );
    println!(
        "join page faults: {join_faults} ({:.1} MiB of memory fresh from the kernel); resident memory at the last commit {:.1} MiB, after a flush interval caught up {:.1} MiB, at its peak {:.1} MiB",
        join_faults as f64 * 4096.0 / 1048576.0,
        join_rss as f64 / 1048576.0,
        settled_rss as f64 / 1048576.0,
        join_peak as f64 / 1048576.0,
    );
    print_course(&course, impressions, &out_dir);
    if args.joiner_only {
        // The dataset's data files, without the joiner's own state and checkpoints.
        let parquet_bytes = featurelog_bench::file_bytes(&out_dir, &|path| {
            path.extension().is_some_and(|e| e == "parquet")
                && !path.components().any(|c| c.as_os_str() == "_featurelog")
        });
        // One line for bench/flink.sh to read.
        println!(
            "joiner-figures cpu_s={join_cpu:.3} router_cpu_s={router_cpu:.3} join_thread_cpu_s={join_thread_cpu:.3} librdkafka_cpu_s={librdkafka_cpu:.3} peak_rss_bytes={join_peak} rss_end_bytes={join_rss} rss_settled_bytes={settled_rss} buffered_requests={} wall_s={join_wall:.1} rows={impressions} commits={} hours_compacted={compacted} compaction_cpu_seconds={compact_cpu:.3} parquet_bytes={parquet_bytes}",
            metric(&end_metrics, "featurelog_join_buffered_requests"),
            metric(&end_metrics, "featurelog_join_commits"),
        );
        return Ok(());
    }

    // 2. Memory per buffered request, in a fresh process: this one's allocator keeps the
    // join's freed memory, which would hide the growth.
    let probe = std::process::Command::new(std::env::current_exe()?)
        .args([
            "--memory-probe",
            "--candidates",
            &args.candidates.to_string(),
        ])
        .args(["--features", &args.features.to_string()])
        .args(["--requests", &args.requests.to_string()])
        .output()
        .context("running the memory probe")?;
    print!("{}", String::from_utf8_lossy(&probe.stdout));

    // 3. The Parquet stage against arrow's writer alone, on the same rows.
    let log = Arc::new(ServedLog::decode(
        feature_log(&args, 0).encode_to_vec(),
        &mut Layouts::default(),
    )?);
    let rows: Vec<Row> = (0..100_000)
        .map(|i| Row {
            request_id: format!("bench-{}", i / args.candidates),
            item_id: (i % args.candidates).to_string(),
            features: log.clone(),
            row: i % args.candidates,
            impression_time_us: Some(FIRST_SERVED_S * 1_000_000),
            labels: Labels::default(),
        })
        .collect();
    // The first stage of a dataset also claims every column name (a create-if-absent file,
    // fsynced, per name: `_featurelog/columns/`), once per name and process; the ones after it
    // are what a running joiner's flushes cost. Each is timed by the clock and by this
    // thread's CPU (the difference is waiting for fsyncs).
    let ds = Dataset::open(dir.path().join("stage"), SinkOptions::default())?;
    let mut stages = Vec::new();
    for epoch in 1..=4 {
        let (t, cpu) = (
            Instant::now(),
            featurelog_bench::current_thread_cpu_seconds(),
        );
        ds.stage("bench", epoch, &rows, i64::MIN)?;
        stages.push((
            t.elapsed().as_secs_f64(),
            featurelog_bench::current_thread_cpu_seconds() - cpu,
        ));
    }
    let batch = featurelog_joiner::rows::to_record_batch(
        &rows,
        &featurelog_joiner::rows::InMemoryColumns::default(),
    )?;
    let mut raw = Vec::new();
    for i in 0..3 {
        let (t, cpu) = (
            Instant::now(),
            featurelog_bench::current_thread_cpu_seconds(),
        );
        let file = std::fs::File::create(dir.path().join(format!("raw-{i}.parquet")))?;
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(
                parquet::basic::ZstdLevel::try_new(3)?,
            ))
            .build();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))?;
        writer.write(&batch)?;
        let file = writer.into_inner()?;
        let written = (
            t.elapsed().as_secs_f64(),
            featurelog_bench::current_thread_cpu_seconds() - cpu,
        );
        file.sync_all()?;
        raw.push((
            written,
            (
                t.elapsed().as_secs_f64(),
                featurelog_bench::current_thread_cpu_seconds() - cpu,
            ),
        ));
    }
    let median = |mut v: Vec<(f64, f64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v[v.len() / 2]
    };
    let first = stages[0];
    let stage = median(stages[1..].to_vec());
    let alone = median(raw.iter().map(|r| r.0).collect());
    let synced = median(raw.iter().map(|r| r.1).collect());
    println!(
        "parquet: 100000 rows staged (rows to Arrow + zstd Parquet + fsync of file and directory): {:.3} s, {:.3} CPU s (the dataset's first stage, claiming its column names: {:.3} s, {:.3} CPU s)",
        stage.0, stage.1, first.0, first.1
    );
    println!(
        "parquet: arrow's writer alone on a ready batch {:.3} s, {:.3} CPU s; with an fsync of its file {:.3} s; stage / writer alone: {:.2}x by the clock, {:.2}x by CPU; / writer and fsync: {:.2}x by the clock",
        alone.0,
        alone.1,
        synced.0,
        stage.0 / alone.0,
        stage.1 / alone.1,
        stage.0 / synced.0
    );
    Ok(())
}
