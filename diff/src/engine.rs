//! The keyed comparison: loads the offline side's key and feature columns into a
//! [`Store`](crate::store) (records, a dictionary per text feature, a hash index of the keys
//! built in parallel), then streams the served side unit by unit through worker threads that
//! probe the index, compare matched rows and count distributions ([`crate::probe`]). Only the
//! offline side is held in memory; the served side is never held whole.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::input::Input;
use crate::options::EffectiveLimits;
use crate::plan::plan;
use crate::probe::{KEY_EXAMPLES, Served, Worker};
use crate::report::{Coverage, Rename, Report, SCHEMA_VERSION, Side, Verdict};
use crate::stats::{self, DistSpec, FeatureAcc};
use crate::store::{self, DUPLICATE, MATCHED, NULL_KEY};
use crate::summary::feature_report;
use crate::{DiffError, DiffOptions};

/// One side's input: a local path, or an `s3://` URL copied to a temporary directory first
/// (returned with it, to be kept while the input is read); either read through its Delta log
/// when it is a table, at `version` (the newest when `None`). Reports name the path as given.
fn open_input(
    path: &std::path::Path,
    keys: &[String],
    complete_only: bool,
    version: Option<u64>,
) -> Result<(Input, Option<crate::remote::Fetched>), DiffError> {
    let shown = path.display().to_string();
    let not_a_table = || {
        DiffError::Options(format!(
            "a version ({}) applies to a Delta table, and {shown} is not one (no _delta_log/ in it)",
            version.unwrap_or_default()
        ))
    };
    if crate::remote::s3_url(path).is_none() {
        if crate::delta::is_local_table(path) {
            let table = crate::delta::local(path, version)?;
            let input = crate::delta::open(path, table, &shown, keys, complete_only)?;
            return Ok((input, None));
        }
        if version.is_some() {
            return Err(not_a_table());
        }
        return Ok((Input::open(path, keys, complete_only)?, None));
    }
    let mut copy = crate::remote::fetch(path, version, complete_only)?;
    let mut input = match copy.table.take() {
        Some(table) => crate::delta::open(&copy.root, table, &shown, keys, complete_only)?,
        None if version.is_some() => return Err(not_a_table()),
        None => Input::open(&copy.root, keys, complete_only)?,
    };
    input.root = path.to_owned();
    Ok((input, Some(copy)))
}

/// Runs a diff (see [`DiffOptions`]) and returns its judged report. Either side may be a local
/// path or an `s3://bucket/prefix` URL (settings from the environment, as the AWS tools').
pub fn run(opts: &DiffOptions) -> Result<Report, DiffError> {
    let start = Instant::now();
    let (served_keys, offline_keys) = crate::plan::key_names(opts);
    // `s3://` inputs are copied to local disk first (the copies go when the diff returns).
    let (served, _served_copy) = open_input(
        &opts.served,
        &served_keys,
        opts.complete_only,
        opts.served_version,
    )?;
    let (offline_input, _offline_copy) = open_input(
        &opts.offline,
        &offline_keys,
        opts.complete_only,
        opts.offline_version,
    )?;
    let plan = plan(&served, &offline_input, opts)?;
    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let limits: Vec<EffectiveLimits> = plan
        .features
        .iter()
        .map(|f| f.limits(&opts.thresholds))
        .collect();

    let offline = store::load(&offline_input, &plan, threads)?;
    // Each feature's bins from the offline side (sorting a sample per feature: threads share
    // the features).
    let columns = offline.spec_columns();
    let spec = |k: usize| match (plan.features.get(k), columns.get(k)) {
        (Some(f), Some(col)) if stats::has_distribution(f.domain) => DistSpec::from_offline(col),
        _ => DistSpec::None("lists are compared by key only".into()),
    };
    let n = plan.features.len();
    let specs: Vec<DistSpec> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let spec = &spec;
                scope.spawn(move || {
                    (t..n)
                        .step_by(threads)
                        .map(|k| (k, spec(k)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(usize, DistSpec)> = handles
            .into_iter()
            .filter_map(|h| h.join().ok())
            .flatten()
            .collect();
        all.sort_by_key(|(k, _)| *k);
        all.into_iter().map(|(_, s)| s).collect()
    });
    if specs.len() != plan.features.len() {
        return Err(DiffError::Internal("a distribution thread panicked".into()));
    }
    drop(columns);

    let served_pass = Served::new(&served, &plan, &offline, &specs, &limits);
    let units = served.units();
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<DiffError>> = Mutex::new(None);
    let workers: Vec<Worker> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut w = Worker::new(&specs, &served_pass.numeric);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&unit) = units.get(i) else { break };
                        let r = served_pass.unit(unit, &mut w);
                        if let Err(e) = r {
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(e);
                            }
                            // Stop the other workers early too.
                            next.store(units.len(), Ordering::Relaxed);
                            break;
                        }
                    }
                    w
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    if let Some(e) = failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    if workers.len() != threads {
        return Err(DiffError::Internal("a worker thread panicked".into()));
    }

    // Merge the workers.
    let mut served_rows = 0;
    let mut served_null = 0;
    let mut matched_dups = 0;
    let mut unmatched = Vec::new();
    let mut examples = Vec::new();
    let mut accs: Vec<FeatureAcc> = specs.iter().map(|s| FeatureAcc::new(s.bins())).collect();
    let mut matched_bins: Vec<Vec<u64>> = served_pass
        .numeric
        .iter()
        .map(|&k| vec![0; specs[k].bins()])
        .collect();
    for w in workers {
        for (a, b) in matched_bins.iter_mut().zip(&w.offline) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        served_rows += w.rows;
        served_null += w.null_keys;
        matched_dups += w.matched_duplicates;
        unmatched.extend(w.unmatched);
        for (h, k) in w.examples {
            stats::offer_example(&mut examples, KEY_EXAMPLES, h, || k);
        }
        for (a, b) in accs.iter_mut().zip(w.features) {
            a.merge(b);
        }
    }
    // The offline distributions: the matched rows were binned by the workers.
    let offline_dists = offline.distributions(&specs, threads, Some(matched_bins));
    unmatched.sort_unstable();
    let unmatched_rows = unmatched.len() as u64;
    unmatched.dedup();
    let served_only = unmatched.len() as u64;
    let mut examples: Vec<String> = examples.into_iter().map(|(_, k)| k).collect();
    examples.sort();

    let mut both = 0u64;
    let mut offline_only = 0u64;
    let mut offline_examples = Vec::new();
    let (mut offline_null, mut offline_dups) = (0u64, 0u64);
    for (r, flags) in offline.flags.iter().enumerate() {
        let flags = flags.load(Ordering::Relaxed);
        if flags & NULL_KEY != 0 {
            offline_null += 1;
        } else if flags & DUPLICATE != 0 {
            offline_dups += 1;
        } else if flags & MATCHED != 0 {
            both += 1;
        } else {
            offline_only += 1;
            if offline_examples.len() < KEY_EXAMPLES {
                offline_examples.push(offline.render_key(r as u32));
            }
        }
    }
    let rate = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
    let coverage = Coverage {
        served_rows,
        offline_rows: offline.rows as u64,
        both,
        served_only,
        offline_only,
        served_only_rate: rate(served_only, served_rows),
        offline_only_rate: rate(offline_only, offline.rows as u64),
        served_duplicate_keys: matched_dups + (unmatched_rows - served_only),
        offline_duplicate_keys: offline_dups,
        served_null_keys: served_null,
        offline_null_keys: offline_null,
        served_only_examples: examples,
        offline_only_examples: offline_examples,
    };

    let features = plan
        .features
        .iter()
        .zip(accs)
        .zip(&specs)
        .zip(&offline_dists)
        .zip(&offline.nulls)
        .zip(&limits)
        .map(|(((((f, acc), spec), odist), &nulls), l)| {
            let offline_nulls = (nulls, offline.rows as u64);
            feature_report(f, acc, spec, odist, offline_nulls, *l, opts.top_pairs)
        })
        .collect();
    let side = |input: &Input, rows: u64| Side {
        path: input.root.display().to_string(),
        files: input.file_count(),
        rows,
        columns: input.schema.fields().len(),
        incomplete_files_skipped: input.incomplete_skipped,
        delta_version: input.table_version,
    };
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        served: side(&served, served_rows),
        offline: side(&offline_input, offline.rows as u64),
        keys: plan
            .served_keys
            .iter()
            .zip(&plan.offline_keys)
            .map(|(s, o)| Rename {
                served: s.clone(),
                offline: o.clone(),
            })
            .collect(),
        coverage,
        schema: plan.schema,
        features,
        violations: Vec::new(),
        verdict: Verdict::Pass,
        thresholds: opts.thresholds.clone(),
        elapsed_seconds: 0.0,
    };
    if report.coverage.served_rows == 0 && report.coverage.offline_rows == 0 {
        return Err(DiffError::NoRows {
            served: opts.served.clone(),
            offline: opts.offline.clone(),
        });
    }
    report.judge();
    report.elapsed_seconds = start.elapsed().as_secs_f64();
    Ok(report)
}
