//! The keyed comparison: loads the offline side's key and feature columns (columnar, each
//! feature already cast to its comparison domain), indexes its keys in hash partitions built
//! in parallel, then streams the served side unit by unit through worker threads that probe
//! the index, compare matched rows and count distributions. Only the offline side is held in
//! memory, and only as columns; the served side is never held whole.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use arrow_array::{ArrayRef, RecordBatch};
use hashbrown::HashTable;

use crate::input::{Input, Unit};
use crate::keys::Keys;
use crate::options::EffectiveLimits;
use crate::plan::{Plan, plan};
use crate::report::{
    Bin, ClassReport, Coverage, DiffBucket, Distribution, FeatureReport, PairReport, Rename,
    Report, SCHEMA_VERSION, Side, Verdict,
};
use crate::stats::{self, DIFF_BUCKETS, DistSpec, FeatureAcc};
use crate::values::{self, DArr, Domain, to_domain};
use crate::{DiffError, DiffOptions};

/// Hash partitions of the index (a power of two): built by the threads in parallel.
const PARTITIONS: usize = 16;
/// Example keys kept for served-only and offline-only rows.
const KEY_EXAMPLES: usize = 5;

#[inline]
fn partition(h: u64) -> usize {
    // Middle bits: hashbrown uses the low bits for the bucket and the top 7 for tags.
    ((h >> 32) as usize) & (PARTITIONS - 1)
}

/// The offline side in memory.
struct Offline {
    keys: Keys,
    rows: usize,
    features: Vec<DArr>,
    null_key: Vec<bool>,
    duplicate: Vec<bool>,
    tables: Vec<HashTable<u32>>,
}

/// What one worker counted while probing.
struct Worker {
    rows: u64,
    null_keys: u64,
    matched_duplicates: u64,
    unmatched: Vec<u64>,
    /// Served-only keys, by [`stats::offer_example`].
    examples: Vec<(u64, String)>,
    features: Vec<FeatureAcc>,
}

/// One side's input: a local path, or an `s3://` URL copied to a temporary directory first
/// (returned with it, to be kept while the input is read). Reports name the URL.
fn open_input(
    path: &std::path::Path,
    keys: &[String],
    complete_only: bool,
) -> Result<(Input, Option<crate::remote::Fetched>), DiffError> {
    if crate::remote::s3_url(path).is_none() {
        return Ok((Input::open(path, keys, complete_only)?, None));
    }
    let copy = crate::remote::fetch(path)?;
    let mut input = Input::open(&copy.root, keys, complete_only)?;
    input.root = path.to_owned();
    Ok((input, Some(copy)))
}

/// Runs a diff (see [`DiffOptions`]) and returns its judged report. Either side may be a local
/// path or an `s3://bucket/prefix` URL (settings from the environment, as the AWS tools').
pub fn run(opts: &DiffOptions) -> Result<Report, DiffError> {
    let start = Instant::now();
    let (served_keys, offline_keys) = crate::plan::key_names(opts);
    // `s3://` inputs are copied to local disk first (the copies go when the diff returns).
    let (served, _served_copy) = open_input(&opts.served, &served_keys, opts.complete_only)?;
    let (offline_input, _offline_copy) =
        open_input(&opts.offline, &offline_keys, opts.complete_only)?;
    let plan = plan(&served, &offline_input, opts)?;
    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let limits: Vec<EffectiveLimits> = plan
        .features
        .iter()
        .map(|f| opts.thresholds.for_feature(&f.name))
        .collect();

    let offline = load_offline(&offline_input, &plan, threads)?;
    let specs: Vec<DistSpec> = plan
        .features
        .iter()
        .zip(&offline.features)
        .map(|(f, col)| {
            if stats::has_distribution(f.domain) {
                DistSpec::from_offline(col)
            } else {
                DistSpec::None("lists are compared by key only".into())
            }
        })
        .collect();
    let offline_dists = offline_distributions(&offline, &specs, threads);

    let matched: Vec<AtomicBool> = (0..offline.rows).map(|_| AtomicBool::new(false)).collect();
    let units = served.units();
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<DiffError>> = Mutex::new(None);
    // Keys, features, then the features' type variants (read to fill their feature's nulls).
    let columns: Vec<String> = plan
        .served_keys
        .iter()
        .chain(plan.features.iter().map(|f| &f.name))
        .chain(plan.features.iter().flat_map(|f| &f.variants))
        .cloned()
        .collect();
    let workers: Vec<Worker> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut w = Worker {
                        rows: 0,
                        null_keys: 0,
                        matched_duplicates: 0,
                        unmatched: Vec::new(),
                        examples: Vec::new(),
                        features: specs.iter().map(|s| FeatureAcc::new(s.bins())).collect(),
                    };
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&unit) = units.get(i) else { break };
                        let r = probe_unit(
                            &served, unit, &columns, &plan, &offline, &matched, &specs, &limits,
                            &mut w,
                        );
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
    for w in workers {
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
    for (r, seen) in matched.iter().enumerate() {
        if offline.null_key[r] {
            offline_null += 1;
        } else if offline.duplicate[r] {
            offline_dups += 1;
        } else if seen.load(Ordering::Relaxed) {
            both += 1;
        } else {
            offline_only += 1;
            if offline_examples.len() < KEY_EXAMPLES {
                offline_examples.push(offline.keys.render(r));
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
        .zip(&offline.features)
        .zip(&limits)
        .map(|(((((f, acc), spec), odist), ocol), l)| {
            let offline_nulls = (ocol.null_count() as u64, offline.rows as u64);
            feature_report(f, acc, spec, odist, offline_nulls, *l, opts.top_pairs)
        })
        .collect();
    let side = |input: &Input, rows: u64| Side {
        path: input.root.display().to_string(),
        files: input.file_count(),
        rows,
        columns: input.schema.fields().len(),
        incomplete_files_skipped: input.incomplete_skipped,
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

/// Reads the offline key and feature columns with `threads` readers and indexes the keys.
fn load_offline(input: &Input, plan: &Plan, threads: usize) -> Result<Offline, DiffError> {
    let columns: Vec<String> = plan
        .offline_keys
        .iter()
        .chain(plan.features.iter().map(|f| &f.offline_name))
        .cloned()
        .collect();
    let units = input.units();
    let next = AtomicUsize::new(0);
    let batches: Mutex<Vec<(usize, Vec<RecordBatch>)>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<DiffError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&unit) = units.get(i) else { break };
                    let mut got = Vec::new();
                    let r = input.read(unit, &columns, |b| {
                        got.push(b);
                        Ok(())
                    });
                    match r {
                        Ok(()) => {
                            if let Ok(mut all) = batches.lock() {
                                all.push((i, got));
                            }
                        }
                        Err(e) => {
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(e);
                            }
                            next.store(units.len(), Ordering::Relaxed);
                            break;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    let mut batches = batches
        .into_inner()
        .map_err(|_| DiffError::Internal("offline reader lock poisoned".into()))?;
    // Unit order, so that "the first row of a duplicated key" means the same row every run.
    batches.sort_by_key(|(i, _)| *i);
    let batches: Vec<RecordBatch> = batches.into_iter().flat_map(|(_, b)| b).collect();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows > u32::MAX as usize {
        return Err(DiffError::TooManyRows {
            path: input.root.clone(),
            rows: rows as u64,
        });
    }
    let arrow_err = |source| DiffError::Arrow {
        path: input.root.clone(),
        source,
    };
    let concat_column = |c: usize| -> Result<ArrayRef, DiffError> {
        let parts: Vec<&dyn arrow_array::Array> = batches
            .iter()
            .filter_map(|b| b.columns().get(c))
            .map(|a| a.as_ref())
            .collect();
        if parts.is_empty() {
            let dt = input
                .schema
                .field_with_name(&columns[c])
                .map(|f| f.data_type().clone())
                .unwrap_or(arrow_schema::DataType::Null);
            return Ok(arrow_array::new_empty_array(&dt));
        }
        arrow_select::concat::concat(&parts).map_err(arrow_err)
    };
    let nk = plan.offline_keys.len();
    let key_arrays = (0..nk).map(concat_column).collect::<Result<Vec<_>, _>>()?;
    let keys = Keys::new(&key_arrays, &plan.offline_keys, "offline")?;
    let mut features = Vec::with_capacity(plan.features.len());
    for (k, f) in plan.features.iter().enumerate() {
        let raw = concat_column(nk + k)?;
        features.push(
            to_domain(&raw, f.domain).map_err(|source| DiffError::Arrow {
                path: input.root.join(&f.offline_name),
                source,
            })?,
        );
    }
    drop(batches);

    // Hashes in parallel, then each thread builds its own partitions of the index.
    let chunk = rows.div_ceil(threads).max(1);
    let mut hashes = vec![0u64; rows];
    let mut null_key = vec![false; rows];
    std::thread::scope(|scope| {
        for (ci, (hs, ns)) in hashes
            .chunks_mut(chunk)
            .zip(null_key.chunks_mut(chunk))
            .enumerate()
        {
            let keys = &keys;
            scope.spawn(move || {
                for (k, (h, n)) in hs.iter_mut().zip(ns.iter_mut()).enumerate() {
                    match keys.hash(ci * chunk + k) {
                        Some(v) => *h = v,
                        None => *n = true,
                    }
                }
            });
        }
    });
    let mut per_partition = [0usize; PARTITIONS];
    for (h, n) in hashes.iter().zip(&null_key) {
        if !n {
            per_partition[partition(*h)] += 1;
        }
    }
    let built: Vec<(usize, HashTable<u32>, Vec<u32>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (hashes, null_key, keys, per_partition) =
                    (&hashes, &null_key, &keys, &per_partition);
                scope.spawn(move || {
                    let mine: Vec<usize> = (0..PARTITIONS).filter(|p| p % threads == t).collect();
                    let mut tables: Vec<(usize, HashTable<u32>, Vec<u32>)> = mine
                        .iter()
                        .map(|&p| (p, HashTable::with_capacity(per_partition[p]), Vec::new()))
                        .collect();
                    for (r, (&h, &n)) in hashes.iter().zip(null_key).enumerate() {
                        let p = partition(h);
                        if n || p % threads != t {
                            continue;
                        }
                        let Some((_, table, dups)) = tables.iter_mut().find(|(q, _, _)| *q == p)
                        else {
                            continue;
                        };
                        let found = table.find(h, |&o| keys.eq(r, keys, o as usize)).is_some();
                        if found {
                            dups.push(r as u32);
                        } else {
                            table.insert_unique(h, r as u32, |&o| hashes[o as usize]);
                        }
                    }
                    tables
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().ok())
            .flatten()
            .collect()
    });
    if built.len() != PARTITIONS {
        return Err(DiffError::Internal("an index thread panicked".into()));
    }
    let mut duplicate = vec![false; rows];
    let mut tables: Vec<HashTable<u32>> = (0..PARTITIONS).map(|_| HashTable::new()).collect();
    for (p, table, dups) in built {
        for d in dups {
            duplicate[d as usize] = true;
        }
        tables[p] = table;
    }
    Ok(Offline {
        keys,
        rows,
        features,
        null_key,
        duplicate,
        tables,
    })
}

/// The offline side's counts over each feature's bins.
fn offline_distributions(offline: &Offline, specs: &[DistSpec], threads: usize) -> Vec<Vec<u64>> {
    let mut out: Vec<Vec<u64>> = specs.iter().map(|s| vec![0; s.bins()]).collect();
    let per = specs.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for ((outs, sp), cols) in out
            .chunks_mut(per)
            .zip(specs.chunks(per))
            .zip(offline.features.chunks(per))
        {
            scope.spawn(move || {
                for ((counts, spec), col) in outs.iter_mut().zip(sp).zip(cols) {
                    spec.count(col, counts);
                }
            });
        }
    });
    out
}

#[allow(clippy::too_many_arguments)]
fn probe_unit(
    served: &Input,
    unit: Unit,
    columns: &[String],
    plan: &Plan,
    offline: &Offline,
    matched: &[AtomicBool],
    specs: &[DistSpec],
    limits: &[EffectiveLimits],
    w: &mut Worker,
) -> Result<(), DiffError> {
    let nk = plan.served_keys.len();
    // Where each feature's variants are among `columns`.
    let mut next_variant = nk + plan.features.len();
    let variants: Vec<std::ops::Range<usize>> = plan
        .features
        .iter()
        .map(|f| {
            let at = next_variant;
            next_variant += f.variants.len();
            at..next_variant
        })
        .collect();
    // Matched rows of a batch: (served row, offline row, key hash).
    let mut pairs: Vec<(u32, u32, u64)> = Vec::with_capacity(crate::input::BATCH_ROWS);
    served.read(unit, columns, |batch| {
        let n = batch.num_rows();
        w.rows += n as u64;
        let keys = Keys::new(
            batch.columns().get(..nk).unwrap_or(&[]),
            &plan.served_keys,
            "served",
        )?;
        pairs.clear();
        for i in 0..n {
            let Some(h) = keys.hash(i) else {
                w.null_keys += 1;
                continue;
            };
            let table = &offline.tables[partition(h)];
            match table.find(h, |&j| keys.eq(i, &offline.keys, j as usize)) {
                Some(&j) => {
                    if matched[j as usize].swap(true, Ordering::Relaxed) {
                        w.matched_duplicates += 1;
                    } else {
                        pairs.push((i as u32, j, h));
                    }
                }
                None => {
                    w.unmatched.push(h);
                    stats::offer_example(&mut w.examples, KEY_EXAMPLES, h, || keys.render(i));
                }
            }
        }
        for (k, f) in plan.features.iter().enumerate() {
            let Some(raw) = batch.columns().get(nk + k) else {
                continue;
            };
            let arrow = |name: &str| {
                let path = served.root.join(name);
                move |source| DiffError::Arrow { path, source }
            };
            let mut s = to_domain(raw, f.domain).map_err(arrow(&f.name))?;
            for (v, name) in variants[k].clone().zip(&f.variants) {
                if let Some(variant) = batch.columns().get(v) {
                    let variant = to_domain(variant, f.domain).map_err(arrow(name))?;
                    s = s.or_else(&variant).map_err(arrow(name))?;
                }
            }
            let acc = &mut w.features[k];
            acc.rows += n as u64;
            acc.nulls += s.null_count() as u64;
            specs[k].count(&s, &mut acc.dist);
            let o = &offline.features[k];
            let (abs, rel) = (limits[k].abs_tolerance, limits[k].rel_tolerance);
            for &(i, j, h) in &pairs {
                acc.compare(&s, i as usize, o, j as usize, abs, rel, h, || {
                    keys.render(i as usize)
                });
            }
        }
        Ok(())
    })
}

/// `offline_nulls`: the offline side's (null rows, rows) of the feature.
fn feature_report(
    f: &crate::plan::Feature,
    acc: FeatureAcc,
    spec: &DistSpec,
    odist: &[u64],
    offline_nulls: (u64, u64),
    limits: EffectiveLimits,
    top: usize,
) -> FeatureReport {
    let mismatches = acc.mismatches();
    let matches = acc.compared - mismatches;
    let rate = |n: u64| {
        if acc.compared == 0 {
            0.0
        } else {
            n as f64 / acc.compared as f64
        }
    };
    let share = |n: u64| {
        if mismatches == 0 {
            0.0
        } else {
            n as f64 / mismatches as f64
        }
    };
    let numeric = matches!(f.domain, Domain::Number | Domain::NumberList);
    let difference_histogram = if numeric {
        (0..DIFF_BUCKETS)
            .filter(|&b| acc.diff_hist[b] > 0)
            .map(|b| DiffBucket {
                lower: stats::diff_bucket_lower(b),
                upper: (b + 1 < DIFF_BUCKETS).then(|| stats::diff_bucket_lower(b + 1)),
                count: acc.diff_hist[b],
            })
            .collect()
    } else {
        Vec::new()
    };
    let top_pairs = acc
        .pairs
        .top(top)
        .into_iter()
        .map(|(s, o, count, class, examples)| PairReport {
            served: s.render(),
            offline: o.render(),
            count,
            share: share(count),
            class: values::class_name(class),
            example_keys: examples,
        })
        .collect();
    let mut class_list: Vec<(u16, u64)> = acc.classes.iter().map(|(k, v)| (*k, *v)).collect();
    class_list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mismatch_rate = rate(mismatches);
    let classes = class_list
        .iter()
        .map(|&(class, count)| {
            let fixed: u64 = if class == values::OTHER {
                0
            } else {
                class_list
                    .iter()
                    .filter(|(c, _)| *c != values::OTHER && c & !class == 0)
                    .map(|(_, n)| n)
                    .sum()
            };
            let after = rate(mismatches - fixed);
            let name = values::class_name(class);
            let explanation = if class == values::OTHER {
                format!(
                    "{}: {:.2}% of mismatches are not explained by any normalization",
                    f.name,
                    100.0 * share(count)
                )
            } else {
                format!(
                    "{}: {:.2}% mismatch, {:.2}% after {}",
                    f.name,
                    100.0 * mismatch_rate,
                    100.0 * after,
                    values::class_action(class)
                )
            };
            ClassReport {
                class: name,
                count,
                share: share(count),
                mismatch_rate_after: after,
                explanation,
            }
        })
        .collect();
    let (distribution, distribution_note) = match spec {
        DistSpec::None(why) => (None, Some(why.clone())),
        _ => {
            let ordered = matches!(spec, DistSpec::Bins(_));
            let d = stats::distances(&acc.dist, odist, ordered);
            let labels = spec.labels();
            let mut bins: Vec<Bin> = labels
                .into_iter()
                .enumerate()
                .map(|(i, label)| Bin {
                    label,
                    served: acc.dist.get(i).copied().unwrap_or(0),
                    offline: odist.get(i).copied().unwrap_or(0),
                    psi: d.contributions.get(i).copied().unwrap_or(0.0),
                })
                .collect();
            let mut by_psi: Vec<&Bin> = bins.iter().filter(|b| b.psi > 1e-9).collect();
            by_psi.sort_by(|a, b| b.psi.total_cmp(&a.psi));
            let top_contributors = by_psi.iter().take(5).map(|b| b.label.clone()).collect();
            let null = bins.pop();
            let (served_nulls, offline_nulls) =
                null.as_ref().map_or((0, 0), |b| (b.served, b.offline));
            if ordered {
                // The NaN bin only when used.
                if bins.last().is_some_and(|b| b.served == 0 && b.offline == 0) {
                    bins.pop();
                }
            } else {
                let other = bins.pop();
                bins.sort_by_key(|b| std::cmp::Reverse(b.served + b.offline));
                bins.truncate(50);
                if let Some(o) = other.filter(|o| o.served > 0) {
                    bins.push(o);
                }
            }
            // The null bin, last, only when used.
            bins.extend(null.filter(|b| b.served > 0 || b.offline > 0));
            (
                Some(Distribution {
                    kind: if ordered { "numeric" } else { "categorical" }.into(),
                    psi: d.psi,
                    js: d.js,
                    ks: d.ks,
                    served_nulls,
                    offline_nulls,
                    bins,
                    top_contributors,
                }),
                None,
            )
        }
    };
    FeatureReport {
        name: f.name.clone(),
        offline_name: f.offline_name.clone(),
        served_type: f.served_type.clone(),
        offline_type: f.offline_type.clone(),
        compared_as: f.domain,
        limits,
        compared: acc.compared,
        matches,
        mismatches,
        match_rate: if acc.compared == 0 {
            1.0
        } else {
            rate(matches)
        },
        mismatch_rate,
        both_null: acc.both_null,
        within_tolerance: acc.within_tolerance,
        null_served_only: acc.served_null,
        null_offline_only: acc.offline_null,
        served_null_rate: if acc.rows == 0 {
            0.0
        } else {
            acc.nulls as f64 / acc.rows as f64
        },
        offline_null_rate: if offline_nulls.1 == 0 {
            0.0
        } else {
            offline_nulls.0 as f64 / offline_nulls.1 as f64
        },
        difference_histogram,
        top_pairs,
        pairs_complete: !acc.pairs.truncated,
        classes,
        distribution,
        distribution_note,
        violations: Vec::new(),
    }
}
