//! The served side's pass: worker threads stream the served units batch by batch, find each
//! row's key in the offline [`Store`], then compare the matched rows feature by feature and
//! count the served distributions. Only the offline side is held in memory; the served side
//! is never held whole.
//!
//! The hot loops are written for the memory system, as the profile of the 10M-row benchmark
//! asked: a batch's index slots are all loaded before any is used (so that their cache misses
//! overlap instead of following one another), matched pairs are compared a chunk at a time so
//! that the chunk's offline records stay in cache across the features, values equal on both
//! sides (most of them) are counted without building a value, and text read as a Parquet
//! dictionary is looked up and binned once per distinct value instead of once per row.

use std::ops::Range;
use std::sync::atomic::Ordering;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, DictionaryArray};

use crate::DiffError;
use crate::bins::{Binner, DiffBuckets, exact_f64};
use crate::input::{Input, Unit};
use crate::keys::{self, Keys};
use crate::options::EffectiveLimits;
use crate::plan::Plan;
use crate::stats::{self, DistSpec, FeatureAcc};
use crate::store::{self, MATCHED, Slot, Store};
use crate::values::{DArr, Domain, Val, to_domain};

/// Example keys kept for served-only rows.
pub(crate) const KEY_EXAMPLES: usize = 5;
/// Matched pairs compared together, feature after feature: their offline records (about
/// 115 bytes each on the benchmark) stay in the core's cache meanwhile.
const PAIR_CHUNK: usize = 1024;
/// A served dictionary value not among the offline values.
const ABSENT: u32 = u32::MAX - 1;
/// Not looked up yet.
const UNSET: u32 = u32::MAX;

/// What one worker counted.
pub(crate) struct Worker {
    pub(crate) rows: u64,
    pub(crate) null_keys: u64,
    pub(crate) matched_duplicates: u64,
    pub(crate) unmatched: Vec<u64>,
    /// Served-only keys, by [`stats::offer_example`].
    pub(crate) examples: Vec<(u64, String)>,
    pub(crate) features: Vec<FeatureAcc>,
    /// Per feature, the last served dictionary seen and what its values were found to be.
    memos: Vec<Option<Memo>>,
    /// The offline distributions of the numeric features ([`Store::numeric`]) over the
    /// matched rows, binned here while their records are in cache.
    pub(crate) offline: Vec<Vec<u64>>,
    bins: store::Scratch,
    scratch: Scratch,
}

impl Worker {
    pub(crate) fn new(specs: &[DistSpec], numeric: &[usize]) -> Worker {
        Worker {
            offline: numeric.iter().map(|&k| vec![0; specs[k].bins()]).collect(),
            bins: store::Scratch::default(),
            rows: 0,
            null_keys: 0,
            matched_duplicates: 0,
            unmatched: Vec::new(),
            examples: Vec::new(),
            features: specs.iter().map(|s| FeatureAcc::new(s.bins())).collect(),
            memos: specs.iter().map(|_| None).collect(),
            scratch: Scratch::default(),
        }
    }
}

/// Per-batch buffers, kept across batches.
#[derive(Default)]
struct Scratch {
    /// The batch's encoded keys, one after the other; `ends[i]` ends row i's (an empty one:
    /// a null key).
    enc: Vec<u8>,
    ends: Vec<usize>,
    hashes: Vec<u64>,
    first: Vec<u64>,
    /// Matched rows: (served row, offline row, key hash).
    pairs: Vec<(u32, u32, u64)>,
    /// A chunk's offline rows.
    rows: Vec<u32>,
}

/// A served dictionary's values as the offline side knows them.
struct Memo {
    /// The dictionary's values, held so that their buffers (the identity checked) live on.
    values: ArrayRef,
    text: DArr,
    /// Offline code per value ([`ABSENT`], [`UNSET`]).
    code: Vec<u32>,
    /// Distribution bin per value ([`UNSET`]).
    bin: Vec<u32>,
}

/// Whether `a` is the same dictionary values array as `b` (the same buffers).
fn same_values(a: &ArrayRef, b: &ArrayRef) -> bool {
    let (x, y) = (a.to_data(), b.to_data());
    x.len() == y.len()
        && x.offset() == y.offset()
        && x.data_type() == y.data_type()
        && x.buffers().len() == y.buffers().len()
        && x.buffers()
            .iter()
            .zip(y.buffers())
            .all(|(p, q)| p.as_ptr() == q.as_ptr())
}

/// A feature's served column in a batch (twenty a batch: their sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Col<'a> {
    /// Its domain form (variants filled in).
    Arr(DArr),
    /// Text read as a dictionary, against a text slot: the memo of `Worker::memos[k]`.
    Dict(&'a DictionaryArray<Int32Type>),
}

/// The served side's pass over one unit at a time.
pub(crate) struct Served<'a> {
    pub(crate) input: &'a Input,
    pub(crate) plan: &'a Plan,
    pub(crate) store: &'a Store,
    pub(crate) specs: &'a [DistSpec],
    pub(crate) limits: &'a [EffectiveLimits],
    /// Keys, features, then the features' type variants (read to fill their feature's nulls).
    columns: Vec<String>,
    /// The features read as dictionaries where the file stores them so.
    dictionary: Vec<String>,
    /// Where each feature's variants are among `columns`.
    variants: Vec<Range<usize>>,
    /// Each numeric feature's distribution bins, as a table.
    binners: Vec<Option<Binner>>,
    buckets: DiffBuckets,
    /// The offline numeric features and their binners ([`Store::numeric`]).
    pub(crate) numeric: Vec<usize>,
    numeric_binners: Vec<Option<Binner>>,
    /// Each feature's place in `numeric`.
    numeric_at: Vec<Option<usize>>,
}

impl<'a> Served<'a> {
    pub(crate) fn new(
        input: &'a Input,
        plan: &'a Plan,
        store: &'a Store,
        specs: &'a [DistSpec],
        limits: &'a [EffectiveLimits],
    ) -> Served<'a> {
        let columns: Vec<String> = plan
            .served_keys
            .iter()
            .chain(plan.features.iter().map(|f| &f.name))
            .chain(plan.features.iter().flat_map(|f| &f.variants))
            .cloned()
            .collect();
        let dictionary = plan
            .features
            .iter()
            .zip(&store.slots)
            .filter(|(f, s)| matches!(s, Slot::Code(..)) && f.variants.is_empty())
            .map(|(f, _)| f.name.clone())
            .collect();
        let mut next = plan.served_keys.len() + plan.features.len();
        let variants = plan
            .features
            .iter()
            .map(|f| {
                let at = next;
                next += f.variants.len();
                at..next
            })
            .collect();
        let (numeric, numeric_binners) = store.numeric(specs);
        let numeric_at = (0..plan.features.len())
            .map(|k| numeric.iter().position(|&n| n == k))
            .collect();
        Served {
            numeric_at,
            binners: specs.iter().map(Binner::of).collect(),
            buckets: DiffBuckets::new(),
            numeric,
            numeric_binners,
            input,
            plan,
            store,
            specs,
            limits,
            columns,
            dictionary,
            variants,
        }
    }

    /// Probes and compares the rows of `unit`.
    pub(crate) fn unit(&self, unit: Unit, w: &mut Worker) -> Result<(), DiffError> {
        let nk = self.plan.served_keys.len();
        self.input
            .read(unit, &self.columns, &self.dictionary, |batch| {
                let n = batch.num_rows();
                w.rows += n as u64;
                let keys = Keys::new(
                    batch.columns().get(..nk).unwrap_or(&[]),
                    &self.plan.served_keys,
                    "served",
                )?;
                self.probe(&keys, n, w);
                let mut cols = Vec::with_capacity(self.plan.features.len());
                for k in 0..self.plan.features.len() {
                    cols.push(self.served_column(&batch, k, w)?);
                }
                let Worker {
                    scratch,
                    features,
                    memos,
                    offline,
                    bins,
                    ..
                } = w;
                let mut binned = vec![false; self.numeric.len()];
                for chunk in scratch.pairs.chunks(PAIR_CHUNK) {
                    for (k, col) in cols.iter().enumerate() {
                        let (acc, memo) = (&mut features[k], &memos[k]);
                        // The offline values' bins, counted by the comparison where it reads
                        // them anyway.
                        let at = self.numeric_at[k];
                        let obins = at.and_then(|at| {
                            Some((self.numeric_binners[at].as_ref()?, &mut offline[at]))
                        });
                        let done = self.compare(k, col, memo.as_ref(), chunk, acc, &keys, obins);
                        if let Some(at) = at {
                            binned[at] = done;
                        }
                    }
                    // Those it did not: read again, while their records are still in cache.
                    if binned.iter().any(|b| !b) {
                        scratch.rows.clear();
                        scratch.rows.extend(chunk.iter().map(|&(_, j, _)| j));
                        self.store.bin_rows(
                            &self.numeric,
                            &self.numeric_binners,
                            &scratch.rows,
                            offline,
                            bins,
                            |at| binned[at],
                        );
                    }
                }
                Ok(())
            })
    }

    /// Finds the batch's keys: `w.scratch.pairs` gets the matched rows.
    fn probe(&self, keys: &Keys, n: usize, w: &mut Worker) {
        let s = &mut w.scratch;
        s.enc.clear();
        s.ends.clear();
        s.hashes.clear();
        s.first.clear();
        s.pairs.clear();
        for i in 0..n {
            let start = s.enc.len();
            let h = if keys.encode(i, &mut s.enc) {
                keys::hash_encoded(&s.enc[start..])
            } else {
                0
            };
            s.hashes.push(h);
            s.ends.push(s.enc.len());
        }
        // Every slot requested first: the loads are independent, so their misses overlap.
        let index = &self.store.index;
        s.first
            .extend(s.hashes.iter().map(|&h| index.first_slot(h)));
        let mut start = 0;
        for i in 0..n {
            let (h, end) = (s.hashes[i], s.ends[i]);
            let enc = &s.enc[start..end];
            start = end;
            if enc.is_empty() {
                w.null_keys += 1;
                continue;
            }
            match index.find(h, s.first[i], |row| self.store.key_is(row, enc)) {
                Some(j) => {
                    let prev = self.store.flags[j as usize].fetch_or(MATCHED, Ordering::Relaxed);
                    if prev & MATCHED != 0 {
                        w.matched_duplicates += 1;
                    } else {
                        s.pairs.push((i as u32, j, h));
                    }
                }
                None => {
                    w.unmatched.push(h);
                    stats::offer_example(&mut w.examples, KEY_EXAMPLES, h, || keys.render(i));
                }
            }
        }
    }

    /// Feature `k`'s served column of `batch`, its rows and nulls counted and its
    /// distribution binned.
    fn served_column<'b>(
        &self,
        batch: &'b arrow_array::RecordBatch,
        k: usize,
        w: &mut Worker,
    ) -> Result<Col<'b>, DiffError> {
        let nk = self.plan.served_keys.len();
        let f = &self.plan.features[k];
        let acc = &mut w.features[k];
        let n = batch.num_rows();
        acc.rows += n as u64;
        let arrow = |name: &str| {
            let path = self.input.root.join(name);
            move |source| DiffError::Arrow { path, source }
        };
        let Some(raw) = batch.columns().get(nk + k) else {
            return Err(DiffError::Internal(format!("no column for {}", f.name)));
        };
        if let (Slot::Code(_, d), true, Some(dict)) = (
            &self.store.slots[k],
            f.variants.is_empty(),
            raw.as_dictionary_opt::<Int32Type>(),
        ) {
            let memo = &mut w.memos[k];
            if !memo
                .as_ref()
                .is_some_and(|m| same_values(&m.values, dict.values()))
            {
                let text = to_domain(dict.values(), Domain::Text).map_err(arrow(&f.name))?;
                let m = dict.values().len();
                *memo = Some(Memo {
                    values: dict.values().clone(),
                    text,
                    code: vec![UNSET; m],
                    bin: vec![UNSET; m],
                });
            }
            if let Some(memo) = memo.as_mut() {
                self.count_dictionary(k, *d, dict, memo, acc);
                return Ok(Col::Dict(dict));
            }
        }
        let mut s = to_domain(raw, f.domain).map_err(arrow(&f.name))?;
        for (v, name) in self.variants[k].clone().zip(&f.variants) {
            if let Some(variant) = batch.columns().get(v) {
                let variant = to_domain(variant, f.domain).map_err(arrow(name))?;
                s = s.or_else(&variant).map_err(arrow(name))?;
            }
        }
        acc.nulls += s.null_count() as u64;
        let binned = self.binners[k]
            .as_ref()
            .is_some_and(|b| b.count(&s, &mut acc.dist));
        if !binned {
            self.specs[k].count(&s, &mut acc.dist);
        }
        Ok(Col::Arr(s))
    }

    /// Counts a dictionary column's nulls and distribution, filling in the memo's codes (in
    /// offline dictionary `d`) and bins of the values it meets.
    fn count_dictionary(
        &self,
        k: usize,
        d: usize,
        dict: &DictionaryArray<Int32Type>,
        memo: &mut Memo,
        acc: &mut FeatureAcc,
    ) {
        let DArr::Text(values) = &memo.text else {
            return;
        };
        let spec = &self.specs[k];
        let offline = self.store.dicts.get(d);
        let keys = dict.keys();
        let null_bin = acc.dist.len().checked_sub(1);
        let mut one = vec![0u64; acc.dist.len()];
        for r in 0..keys.len() {
            let v = if keys.is_valid(r) {
                keys.value(r) as usize
            } else {
                usize::MAX
            };
            if v >= values.len() || values.is_null(v) {
                acc.nulls += 1;
                if let Some(b) = null_bin {
                    acc.dist[b] += 1;
                }
                continue;
            }
            if memo.code[v] == UNSET {
                let bytes = values.value(v);
                memo.code[v] = offline.and_then(|o| o.get(bytes)).unwrap_or(ABSENT);
                // The bin DistSpec::count gives this value.
                one.iter_mut().for_each(|x| *x = 0);
                spec.count(&DArr::Text(values.slice(v, 1)), &mut one);
                memo.bin[v] = one.iter().position(|&x| x > 0).map_or(UNSET, |b| b as u32);
            }
            if let Some(c) = acc.dist.get_mut(memo.bin[v] as usize) {
                *c += 1;
            }
        }
    }

    /// Compares feature `k` of the matched `pairs`.
    /// Compares feature `k` of the matched `pairs`; with `obins`, counts the offline values
    /// into their distribution bins too, and says whether it did.
    #[allow(clippy::too_many_arguments)] // one call per feature and chunk of pairs
    fn compare(
        &self,
        k: usize,
        col: &Col<'_>,
        memo: Option<&Memo>,
        pairs: &[(u32, u32, u64)],
        acc: &mut FeatureAcc,
        keys: &Keys,
        obins: Option<(&Binner, &mut Vec<u64>)>,
    ) -> bool {
        let store = self.store;
        let (abs, rel) = (self.limits[k].abs_tolerance, self.limits[k].rel_tolerance);
        // Both null, or both present and equal: counted here without building the values
        // (what `values::compare` says of them: both null, or equal). Anything else goes
        // through the full comparison.
        macro_rules! each_pair {
            (|$i:ident, $j:ident, $rec:ident| $served_null:expr, $equal:expr) => {
                for &(i, j, h) in pairs {
                    let ($i, $j, $rec) = (i as usize, j, store.record(j));
                    let (sn, on) = ($served_null, store.is_null($rec, k));
                    if sn && on {
                        acc.compared += 1;
                        acc.both_null += 1;
                        continue;
                    }
                    if !sn && !on && $equal {
                        acc.compared += 1;
                        acc.equal += 1;
                        continue;
                    }
                    let sv = served_val(col, memo, $i);
                    acc.compare_vals(sv, store.val($j, k), abs, rel, h, || keys.render($i));
                }
            };
        }
        match (col, &store.slots[k]) {
            (Col::Arr(DArr::Num(a)), slot @ (&Slot::F64(off) | &Slot::F32(off))) => {
                let wide = matches!(slot, Slot::F64(_));
                let (binner, counts) = match obins {
                    Some((b, c)) => (Some(b), c.as_mut_slice()),
                    None => (None, &mut [][..]),
                };
                for &(i, j, h) in pairs {
                    let (i, rec) = (i as usize, store.record(j));
                    let on = store.is_null(rec, k);
                    let y = if wide {
                        Store::f64_at(rec, off)
                    } else {
                        f64::from(Store::f32_at(rec, off))
                    };
                    if let Some(c) =
                        binner.and_then(|b| counts.get_mut(b.bin_float((!on).then_some(y))))
                    {
                        *c += 1;
                    }
                    match (a.is_null(i), on) {
                        (true, true) => {
                            acc.compared += 1;
                            acc.both_null += 1;
                            continue;
                        }
                        (false, false) => {
                            let x = a.value(i);
                            if x == y {
                                acc.compared += 1;
                                acc.equal += 1;
                                continue;
                            }
                            // Apart within tolerance: the benchmark's noisy f64 features, every
                            // row of them.
                            if let Some(d) = within(x, y, abs, rel) {
                                acc.compared += 1;
                                acc.within_tolerance += 1;
                                acc.diff_hist[self.buckets.bucket(d)] += 1;
                                continue;
                            }
                        }
                        _ => {}
                    }
                    let sv = served_val(col, memo, i);
                    acc.compare_vals(sv, store.val(j, k), abs, rel, h, || keys.render(i));
                }
                binner.is_some()
            }
            (Col::Arr(DArr::Exact(a, u)), &Slot::Exact(off, ou)) if *u == ou => {
                let (binner, counts) = match obins {
                    Some((b, c)) => (Some(b), c.as_mut_slice()),
                    None => (None, &mut [][..]),
                };
                for &(i, j, h) in pairs {
                    let (i, rec) = (i as usize, store.record(j));
                    let on = store.is_null(rec, k);
                    let y = store.exact_at(rec, off, j, k);
                    let bin = binner.map(|b| b.bin_float((!on).then(|| exact_f64(y, ou))));
                    if let Some(c) = bin.and_then(|b| counts.get_mut(b)) {
                        *c += 1;
                    }
                    match (a.is_null(i), on) {
                        (true, true) => {
                            acc.compared += 1;
                            acc.both_null += 1;
                            continue;
                        }
                        (false, false) if a.value(i) == y => {
                            acc.compared += 1;
                            acc.equal += 1;
                            continue;
                        }
                        _ => {}
                    }
                    let sv = served_val(col, memo, i);
                    acc.compare_vals(sv, store.val(j, k), abs, rel, h, || keys.render(i));
                }
                binner.is_some()
            }
            (Col::Arr(DArr::Text(a)), &Slot::Code(off, d)) => {
                let Some(dict) = store.dicts.get(d) else {
                    return false;
                };
                each_pair!(|i, _j, rec| a.is_null(i), {
                    a.value(i) == dict.value(Store::u32_at(rec, off))
                });
                false
            }
            (Col::Dict(dict), &Slot::Code(off, _)) => {
                let Some(memo) = memo else {
                    return false;
                };
                let keys_ = dict.keys();
                // A served null (key or value) has no code: UNSET never equals an offline one.
                let code = |i: usize| {
                    if keys_.is_null(i) {
                        UNSET
                    } else {
                        memo.code
                            .get(keys_.value(i) as usize)
                            .copied()
                            .unwrap_or(UNSET)
                    }
                };
                each_pair!(
                    |i, _j, rec| matches!(served_val(col, Some(memo), i), Val::Null),
                    code(i) == Store::u32_at(rec, off)
                );
                false
            }
            _ => {
                each_pair!(
                    |i, _j, _rec| matches!(served_val(col, memo, i), Val::Null),
                    false
                );
                false
            }
        }
    }
}

/// The difference of two unequal finite floats when it is within tolerance, as
/// `values::compare` judges floats (there: `WithinTolerance` of this difference); `None` for
/// anything else, left to it.
#[inline]
fn within(x: f64, y: f64, abs: f64, rel: f64) -> Option<f64> {
    if !(x.is_finite() && y.is_finite()) {
        return None;
    }
    let d = (x - y).abs();
    (d <= abs || d <= rel * x.abs().max(y.abs())).then_some(d)
}

/// Served row `i`'s value of a feature column.
#[inline]
fn served_val<'c>(col: &'c Col<'_>, memo: Option<&'c Memo>, i: usize) -> Val<'c> {
    match col {
        Col::Arr(a) => a.get(i),
        Col::Dict(dict) => {
            let keys = dict.keys();
            match (keys.is_valid(i), memo) {
                (true, Some(m)) => m.text.get(keys.value(i) as usize),
                _ => Val::Null,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::{Outcome, compare};

    /// The float fast path says "within tolerance" exactly when the full comparison does, with
    /// the same difference.
    #[test]
    fn within_tolerance_as_compare_says() {
        let specials = [
            0.0,
            -0.0,
            1.0,
            1.0 + 1e-9,
            1e-300,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            100.5,
            100.0,
        ];
        let mut seed = 3u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut pairs: Vec<(f64, f64)> = Vec::new();
        for &x in &specials {
            for &y in &specials {
                pairs.push((x, y));
            }
        }
        for _ in 0..20_000 {
            let x = (next() - 0.5) * 10f64.powi((next() * 20.0) as i32 - 10);
            let y = x * (1.0 + (next() - 0.5) * 1e-5) + (next() - 0.5) * 1e-9;
            pairs.push((x, y));
        }
        for (abs, rel) in [(0.0, 1e-6), (1e-9, 0.0), (0.0, 0.0), (0.5, 1e-3)] {
            for &(x, y) in &pairs {
                if x == y {
                    continue;
                }
                let full = compare(Val::Num(x), Val::Num(y), abs, rel);
                match within(x, y, abs, rel) {
                    Some(d) => assert_eq!(full, Outcome::WithinTolerance(d), "{x} {y}"),
                    None => assert!(
                        !matches!(full, Outcome::WithinTolerance(_)) || x.is_nan() || y.is_nan(),
                        "{x} {y}: {full:?}"
                    ),
                }
            }
        }
    }
}
