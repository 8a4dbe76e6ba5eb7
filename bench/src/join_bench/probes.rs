//! In-process probes: decoding the feature logs, joining them with their impressions, and the
//! memory a join state holds per request.

use std::time::Instant;

use featurelog_joiner::log::{Layouts, ServedLog};
use featurelog_joiner::sink::{Dataset, SinkOptions};
use featurelog_joiner::state::{JoinConfig, JoinState};
use prost::Message as _;

use crate::data::{feature_log, impression};
use crate::{Args, cpu_seconds};

pub(crate) fn decode_probe(args: &Args) -> anyhow::Result<()> {
    let logs: Vec<Vec<u8>> = (0..args.requests)
        .map(|i| feature_log(args, i).encode_to_vec())
        .collect();
    let n = logs.len().max(1) as f64;
    for round in 1..=7 {
        let started = Instant::now();
        for l in &logs {
            std::hint::black_box(l.clone());
        }
        let copy = started.elapsed().as_nanos() as f64 / n;
        let mut layouts = Layouts::default();
        let started = Instant::now();
        let mut ids = 0;
        for l in &logs {
            ids += ServedLog::decode(l.clone(), &mut layouts)?.candidate_count();
        }
        let decode = started.elapsed().as_nanos() as f64 / n;
        anyhow::ensure!(ids == logs.len() * args.candidates, "decoded {ids} ids");
        println!(
            "decode probe round {round}: copy + decode {decode:.0} ns per record, copy alone {copy:.0} ns: decoding {:.0} ns",
            decode - copy
        );
    }
    Ok(())
}

/// A join state as the benchmarks fill it: one task's, logs waiting `features_wait_us`,
/// impressions an hour, no label window, no negatives, no memory bound.
fn bench_state(features_wait_us: i64) -> JoinState {
    JoinState::new(JoinConfig {
        features_wait_us,
        impressions_wait_us: 3_600_000_000,
        label_window_us: None,
        max_out_of_orderness_us: 0,
        negatives_rate: 0.0,
        max_bytes: usize::MAX,
        event_sources: 1,
    })
}

pub(crate) fn join_probe(args: &Args) -> anyhow::Result<()> {
    let mut input: Vec<(bool, Vec<u8>)> = Vec::new();
    for i in 0..args.requests {
        let log = (true, feature_log(args, i).encode_to_vec());
        let impressions =
            (0..args.impressions).map(|k| (false, impression(args, i, k).1.into_bytes()));
        if args.impressions_first {
            input.extend(impressions);
            input.push(log);
        } else {
            input.push(log);
            input.extend(impressions);
        }
    }
    let wait_us = humantime::parse_duration(&args.features_wait)?.as_micros() as i64;
    let fields = featurelog_joiner::event::JsonFields::default();
    let dir = tempfile::tempdir()?;
    let ds = Dataset::open(dir.path().join("out"), SinkOptions::default())?;
    let flush_rows = args
        .flush_rows
        .unwrap_or(featurelog_joiner::config::DEFAULT_FLUSH_ROWS);
    for round in 1..=3 {
        let mut state = bench_state(wait_us);
        let (mut ingest, mut stage) = (0.0, 0.0);
        let mut rows = Vec::new();
        let mut written = 0;
        let mut epoch = 0;
        let cpu0 = cpu_seconds();
        let faults0 = featurelog_bench::process_minor_faults(None);
        for (is_log, payload) in &input {
            let t = Instant::now();
            if *is_log {
                let log = ServedLog::decode(payload.clone(), state.layouts())?;
                rows.extend(state.add_features(log));
            } else {
                let e = featurelog_joiner::event::from_json(payload, &fields)?;
                let time_us = e.time_us;
                rows.extend(state.add_event(e));
                rows.extend(state.source_progress(0, time_us));
            }
            ingest += t.elapsed().as_secs_f64();
            if rows.len() >= flush_rows {
                let t = Instant::now();
                epoch += 1;
                ds.stage("probe", epoch, &rows, i64::MIN)?;
                written += rows.len();
                rows.clear();
                stage += t.elapsed().as_secs_f64();
            }
        }
        let t = Instant::now();
        epoch += 1;
        ds.stage("probe", epoch, &rows, i64::MIN)?;
        written += rows.len();
        stage += t.elapsed().as_secs_f64();
        let total = cpu_seconds() - cpu0;
        let faults = featurelog_bench::process_minor_faults(None) - faults0;
        println!(
            "join probe round {round}: {written} rows, {total:.2} CPU s (by wall clock: decode + join {ingest:.2} s, Parquet {stage:.2} s), {faults} page faults, {} requests left in the state, {} Parquet bytes",
            state.requests(),
            featurelog_bench::file_bytes(dir.path(), &|_| true),
        );
    }
    Ok(())
}

/// Fills a join state as the joiner does and prints its memory per request: the state's own
/// accounting (what its memory bound counts) and the growth of resident memory.
pub(crate) fn memory_probe(args: &Args) -> anyhow::Result<()> {
    let mut state = bench_state(3_600_000_000);
    let n = args.requests.min(20_000);
    let rss_before = featurelog_bench::resident_bytes(None);
    for i in 0..n {
        // As the joiner reads them from Kafka: packed float values stay in the bytes.
        let raw = feature_log(args, i).encode_to_vec();
        let log = ServedLog::decode(raw, state.layouts())?;
        state.add_features(log);
    }
    let rss_growth = featurelog_bench::resident_bytes(None).saturating_sub(rss_before);
    println!(
        "memory per buffered request ({} candidates x {} features): {:.0} bytes by the state's accounting (the record's bytes plus fixed costs per entry and candidate), {:.0} bytes of resident memory growth",
        args.candidates,
        args.features,
        state.bytes() as f64 / n as f64,
        rss_growth as f64 / n as f64,
    );
    Ok(())
}
