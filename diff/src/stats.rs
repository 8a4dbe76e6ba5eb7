//! Per-feature accumulators: what a worker thread counts while comparing matched rows (rates,
//! the sizes of numeric differences, the mismatching value pairs and their classes) and the
//! value distributions of each side; merged across threads at the end.

use arrow_array::Array;
use hashbrown::HashMap;

use crate::values::{self, DArr, Domain, Outcome, Owned, Val};

/// Distinct pairs kept per feature before the rarest are dropped (then counts of the kept
/// pairs are lower bounds and the report says so).
const PAIR_CAP: usize = 4096;
/// Example keys kept per pair.
const EXAMPLES: usize = 3;
/// Distinct offline values up to which a text feature gets a categorical distribution.
pub(crate) const CATEGORY_CAP: usize = 1000;
/// Quantile bins of a numeric distribution.
const BINS: usize = 20;
/// Decades of the difference histogram: below 1e-9, then [1e-9, 1e-8) ... [1e3, inf).
pub(crate) const DIFF_BUCKETS: usize = 14;

#[derive(Debug, Clone, Default)]
pub(crate) struct PairEntry {
    pub(crate) count: u64,
    pub(crate) class: u16,
    /// Example keys by [`offer_example`].
    pub(crate) examples: Vec<(u64, String)>,
}

/// Offers the key of hash `hash` (rendered by `key`, called only when it may be kept) to
/// `list`, which keeps the `cap` distinct keys of smallest (hash, text), in that order. The
/// choice depends on the set of keys offered only, not on their order: neither on which
/// thread saw which rows, nor on which of a served key's duplicate rows was compared (a
/// duplicate has the same hash and text, so it is kept once). A key's hash is a fixed function
/// of the key, so the examples are the same every run, and a spread sample of the data rather
/// than the first rows of whichever file was read first.
pub(crate) fn offer_example(
    list: &mut Vec<(u64, String)>,
    cap: usize,
    hash: u64,
    key: impl FnOnce() -> String,
) {
    if cap == 0 || (list.len() >= cap && list.last().is_some_and(|(h, _)| *h < hash)) {
        return;
    }
    let key = key();
    let at = match list.binary_search_by(|(h, k)| (*h, k.as_str()).cmp(&(hash, key.as_str()))) {
        Ok(_) => return, // already kept
        Err(at) => at,
    };
    if at < cap {
        list.insert(at, (hash, key));
        list.truncate(cap);
    }
}

/// Counts of mismatching (served, offline) pairs, keyed by their encodings.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pairs {
    pub(crate) map: HashMap<Box<[u8]>, PairEntry>,
    /// Some pairs were dropped to stay within [`PAIR_CAP`].
    pub(crate) truncated: bool,
    scratch: Vec<u8>,
}

impl Pairs {
    /// Counts one pair, of the key of hash `hash` rendered by `key`; returns its class.
    fn add(&mut self, s: Val<'_>, o: Val<'_>, hash: u64, key: impl FnOnce() -> String) -> u16 {
        self.scratch.clear();
        let mut tmp = std::mem::take(&mut self.scratch);
        tmp.extend_from_slice(&[0; 4]);
        s.encode(&mut tmp);
        let n = (tmp.len() - 4) as u32;
        tmp[..4].copy_from_slice(&n.to_le_bytes());
        o.encode(&mut tmp);
        let class = if let Some(e) = self.map.get_mut(tmp.as_slice()) {
            e.count += 1;
            offer_example(&mut e.examples, EXAMPLES, hash, key);
            e.class
        } else {
            let (a, b) = split(&tmp);
            let class = values::classify(&values::decode(a), &values::decode(b));
            self.map.insert(
                tmp.as_slice().into(),
                PairEntry {
                    count: 1,
                    class,
                    examples: vec![(hash, key())],
                },
            );
            if self.map.len() > PAIR_CAP {
                self.prune();
            }
            class
        };
        self.scratch = tmp;
        class
    }

    /// Drops the less frequent half: keeps every pair counted more often than the median
    /// count, and pairs at the median (ties, arbitrary ones) until half the cap is kept. When
    /// every count ties (all 1, the usual case for distinct values) that is half the cap.
    fn prune(&mut self) {
        let mut counts: Vec<u64> = self.map.values().map(|e| e.count).collect();
        let mid = counts.len() / 2;
        let (_, &mut cut, above) = counts.select_nth_unstable(mid);
        let above = above.iter().filter(|&&c| c > cut).count();
        let mut ties = (PAIR_CAP / 2).saturating_sub(above);
        self.map.retain(|_, e| {
            if e.count > cut {
                true
            } else if e.count == cut && ties > 0 {
                ties -= 1;
                true
            } else {
                false
            }
        });
        self.truncated = true;
    }

    fn merge(&mut self, other: Pairs) {
        self.truncated |= other.truncated;
        for (k, e) in other.map {
            let mine = self.map.entry(k).or_insert_with(|| PairEntry {
                count: 0,
                class: e.class,
                examples: Vec::new(),
            });
            mine.count += e.count;
            for (h, k) in e.examples {
                offer_example(&mut mine.examples, EXAMPLES, h, || k);
            }
        }
        if self.map.len() > PAIR_CAP {
            self.prune();
        }
    }

    /// The pairs, most frequent first: (served, offline, count, class, example keys sorted).
    pub(crate) fn top(&self, n: usize) -> Vec<(Owned, Owned, u64, u16, Vec<String>)> {
        let mut all: Vec<(&Box<[u8]>, &PairEntry)> = self.map.iter().collect();
        all.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(b.0)));
        all.into_iter()
            .take(n)
            .map(|(k, e)| {
                let (a, b) = split(k);
                let mut examples: Vec<String> = e.examples.iter().map(|(_, k)| k.clone()).collect();
                examples.sort();
                (
                    values::decode(a),
                    values::decode(b),
                    e.count,
                    e.class,
                    examples,
                )
            })
            .collect()
    }
}

fn split(k: &[u8]) -> (&[u8], &[u8]) {
    let mut w = [0u8; 4];
    w.copy_from_slice(k.get(..4).unwrap_or(&[0; 4]));
    let n = (u32::from_le_bytes(w) as usize).min(k.len().saturating_sub(4));
    let rest = k.get(4..).unwrap_or(&[]);
    rest.split_at(n)
}

/// The label of the null bin, the last of every distribution: a feature that turns null in
/// 30% of the rows has shifted as much as one whose values moved, so nulls are a share like
/// any other (as a category they cannot be mistaken for a value: categories print quoted).
pub(crate) const NULL_BIN: &str = "null";

/// How values are binned for a distribution, derived from the offline side. Every spec ends
/// with the null bin ([`NULL_BIN`]).
#[derive(Debug, Clone)]
pub(crate) enum DistSpec {
    /// Numbers: bin `i` is `[edges[i-1], edges[i])`, bin 0 below the first edge, one more bin
    /// for NaN, then the null bin.
    Bins(Vec<f64>),
    /// Text: the offline side's values; one more bin for values offline never had, then the
    /// null bin.
    Categories(HashMap<Box<[u8]>, u32>, Vec<String>),
    /// Not computed, and why.
    None(String),
}

impl DistSpec {
    pub(crate) fn bins(&self) -> usize {
        match self {
            DistSpec::Bins(e) => e.len() + 3,
            DistSpec::Categories(_, names) => names.len() + 2,
            DistSpec::None(_) => 0,
        }
    }

    /// Derives the bins from the offline column.
    pub(crate) fn from_offline(col: &DArr) -> DistSpec {
        if col.len() == 0 {
            return DistSpec::None("no offline rows".into());
        }
        match col {
            DArr::Num(a) => {
                let n = a.len();
                let stride = (n / 200_000).max(1);
                let mut sample: Vec<f64> = (0..n)
                    .step_by(stride)
                    .filter(|&i| a.is_valid(i))
                    .map(|i| a.value(i))
                    .filter(|v| !v.is_nan())
                    .collect();
                // Only nulls and NaN offline: one bin for every number, so that served
                // values against offline nulls still show as the shift they are.
                sample.sort_by(f64::total_cmp);
                let mut distinct = sample.clone();
                distinct.dedup();
                let mut edges = if distinct.len() <= BINS {
                    distinct
                } else {
                    let mut e: Vec<f64> = (0..BINS)
                        .map(|k| sample[(k * sample.len()) / BINS])
                        .collect();
                    e.dedup();
                    e
                };
                // -0.0 and 0.0 are one edge.
                edges.dedup_by(|a, b| a == b);
                DistSpec::Bins(edges)
            }
            DArr::Text(a) => {
                let mut map: HashMap<Box<[u8]>, u32> = HashMap::new();
                let mut names = Vec::new();
                for i in 0..a.len() {
                    if a.is_null(i) {
                        continue;
                    }
                    let v = a.value(i);
                    if !map.contains_key(v) {
                        if names.len() >= CATEGORY_CAP {
                            return DistSpec::None(format!(
                                "more than {CATEGORY_CAP} distinct offline values"
                            ));
                        }
                        map.insert(v.into(), names.len() as u32);
                        names.push(String::from_utf8_lossy(v).into_owned());
                    }
                }
                DistSpec::Categories(map, names)
            }
            DArr::NumList(..) | DArr::TextList(..) => {
                DistSpec::None("lists are compared by key only".into())
            }
        }
    }

    /// Counts column `col` (rows `0..len`) into `counts`, nulls into the last bin.
    pub(crate) fn count(&self, col: &DArr, counts: &mut [u64]) {
        let Some(null_bin) = counts.len().checked_sub(1) else {
            return;
        };
        match (self, col) {
            (DistSpec::Bins(edges), DArr::Num(a)) => {
                let nan_bin = edges.len() + 1;
                for i in 0..a.len() {
                    if a.is_null(i) {
                        counts[null_bin] += 1;
                        continue;
                    }
                    let v = a.value(i);
                    let b = if v.is_nan() {
                        nan_bin
                    } else {
                        edges.partition_point(|e| *e <= v)
                    };
                    if let Some(c) = counts.get_mut(b) {
                        *c += 1;
                    }
                }
            }
            (DistSpec::Categories(map, names), DArr::Text(a)) => {
                let other = names.len();
                for i in 0..a.len() {
                    if a.is_null(i) {
                        counts[null_bin] += 1;
                        continue;
                    }
                    let b = map.get(a.value(i)).map_or(other, |&b| b as usize);
                    if let Some(c) = counts.get_mut(b) {
                        *c += 1;
                    }
                }
            }
            _ => {}
        }
    }

    /// A label per bin.
    pub(crate) fn labels(&self) -> Vec<String> {
        match self {
            DistSpec::Bins(edges) => {
                let mut out = Vec::with_capacity(edges.len() + 2);
                let f = |v: f64| values::fmt_num(v);
                for i in 0..=edges.len() {
                    out.push(
                        match (i.checked_sub(1).and_then(|j| edges.get(j)), edges.get(i)) {
                            (None, Some(hi)) => format!("< {}", f(*hi)),
                            (Some(lo), Some(hi)) => format!("[{}, {})", f(*lo), f(*hi)),
                            (Some(lo), None) => format!(">= {}", f(*lo)),
                            (None, None) => "all".into(),
                        },
                    );
                }
                out.push("NaN".into());
                out.push(NULL_BIN.into());
                out
            }
            DistSpec::Categories(_, names) => {
                let mut out: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                out.push("(not offline)".into());
                out.push(NULL_BIN.into());
                out
            }
            DistSpec::None(_) => Vec::new(),
        }
    }
}

/// What one thread counted for one feature.
#[derive(Debug, Clone)]
pub(crate) struct FeatureAcc {
    pub(crate) compared: u64,
    pub(crate) equal: u64,
    pub(crate) both_null: u64,
    pub(crate) within_tolerance: u64,
    pub(crate) served_null: u64,
    pub(crate) offline_null: u64,
    pub(crate) differ: u64,
    /// Decades of |served - offline| for numbers that differ (within tolerance or not).
    pub(crate) diff_hist: [u64; DIFF_BUCKETS],
    /// Mismatches per class bitmask.
    pub(crate) classes: HashMap<u16, u64>,
    pub(crate) pairs: Pairs,
    /// Served distribution over the spec's bins (all served rows, matched or not).
    pub(crate) dist: Vec<u64>,
    /// Served rows, and null ones among them (all served rows, whatever the spec).
    pub(crate) rows: u64,
    pub(crate) nulls: u64,
}

/// The decade bucket of a positive difference; infinite and NaN ones (an infinity, or NaN
/// against a number) go to the top bucket.
pub(crate) fn diff_bucket(d: f64) -> usize {
    if !d.is_finite() {
        return DIFF_BUCKETS - 1;
    }
    if d < 1e-9 {
        return 0;
    }
    let b = d.log10().floor() as i64 + 10; // 1e-9 -> 1
    b.clamp(1, DIFF_BUCKETS as i64 - 1) as usize
}

/// The lower bound of a bucket (0 for the first).
pub(crate) fn diff_bucket_lower(b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        10f64.powi(b as i32 - 10)
    }
}

impl FeatureAcc {
    pub(crate) fn new(bins: usize) -> FeatureAcc {
        FeatureAcc {
            compared: 0,
            equal: 0,
            both_null: 0,
            within_tolerance: 0,
            served_null: 0,
            offline_null: 0,
            differ: 0,
            diff_hist: [0; DIFF_BUCKETS],
            classes: HashMap::new(),
            pairs: Pairs::default(),
            dist: vec![0; bins],
            rows: 0,
            nulls: 0,
        }
    }

    pub(crate) fn mismatches(&self) -> u64 {
        self.served_null + self.offline_null + self.differ
    }

    /// Compares served row `i` of `s` with offline row `j` of `o`; their key has hash `hash`
    /// and text `key()`.
    #[inline]
    #[allow(clippy::too_many_arguments)] // the hot loop: a struct per call would cost
    pub(crate) fn compare(
        &mut self,
        s: &DArr,
        i: usize,
        o: &DArr,
        j: usize,
        abs: f64,
        rel: f64,
        hash: u64,
        key: impl FnOnce() -> String,
    ) {
        self.compared += 1;
        let (sv, ov) = (s.get(i), o.get(j));
        match values::compare(sv, ov, abs, rel) {
            Outcome::BothNull => self.both_null += 1,
            Outcome::Equal => self.equal += 1,
            Outcome::WithinTolerance(d) => {
                self.within_tolerance += 1;
                self.diff_hist[diff_bucket(d)] += 1;
            }
            outcome => {
                match outcome {
                    Outcome::ServedNull => self.served_null += 1,
                    Outcome::OfflineNull => self.offline_null += 1,
                    Outcome::Differ(d) => {
                        self.differ += 1;
                        if let Some(d) = d {
                            self.diff_hist[diff_bucket(d)] += 1;
                        }
                    }
                    _ => {}
                }
                let class = self.pairs.add(sv, ov, hash, key);
                *self.classes.entry(class).or_insert(0) += 1;
            }
        }
    }

    pub(crate) fn merge(&mut self, other: FeatureAcc) {
        self.compared += other.compared;
        self.equal += other.equal;
        self.both_null += other.both_null;
        self.within_tolerance += other.within_tolerance;
        self.served_null += other.served_null;
        self.offline_null += other.offline_null;
        self.differ += other.differ;
        for (a, b) in self.diff_hist.iter_mut().zip(other.diff_hist) {
            *a += b;
        }
        for (k, v) in other.classes {
            *self.classes.entry(k).or_insert(0) += v;
        }
        self.pairs.merge(other.pairs);
        for (a, b) in self.dist.iter_mut().zip(other.dist) {
            *a += b;
        }
        self.rows += other.rows;
        self.nulls += other.nulls;
    }
}

/// Distances between two binned distributions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Distances {
    pub(crate) psi: f64,
    pub(crate) js: f64,
    pub(crate) ks: Option<f64>,
    /// PSI term of each bin.
    pub(crate) contributions: Vec<f64>,
}

/// PSI and Jensen-Shannon distance (base 2) over every bin, the null bin included; for
/// ordered bins, KS over the bin edges of the values alone: KS compares cumulative
/// distributions of values, where a null has no place (its shift is PSI's and JS's).
pub(crate) fn distances(served: &[u64], offline: &[u64], ordered: bool) -> Distances {
    let ts: u64 = served.iter().sum();
    let to: u64 = offline.iter().sum();
    if ts == 0 || to == 0 {
        return Distances::default();
    }
    let values = served.len().saturating_sub(1);
    let ks = ordered.then(|| ks(&served[..values], &offline[..values]));
    // Empty bins get a small share so that PSI stays finite (the usual smoothing).
    const EPS: f64 = 1e-4;
    let mut out = Distances::default();
    let mut js = 0.0;
    for (&s, &o) in served.iter().zip(offline) {
        let p = s as f64 / ts as f64;
        let q = o as f64 / to as f64;
        let (ps, qs) = (p.max(EPS), q.max(EPS));
        let term = if s == 0 && o == 0 {
            0.0
        } else {
            (ps - qs) * (ps / qs).ln()
        };
        out.contributions.push(term);
        out.psi += term;
        let m = (p + q) / 2.0;
        if p > 0.0 {
            js += 0.5 * p * (p / m).log2();
        }
        if q > 0.0 {
            js += 0.5 * q * (q / m).log2();
        }
    }
    out.js = js.max(0.0).sqrt();
    out.ks = ks;
    out
}

/// The largest difference of the two sides' cumulative shares at the bin edges; 0 when a side
/// has no value.
fn ks(served: &[u64], offline: &[u64]) -> f64 {
    let ts: u64 = served.iter().sum();
    let to: u64 = offline.iter().sum();
    if ts == 0 || to == 0 {
        return 0.0;
    }
    let (mut cs, mut co, mut ks) = (0u64, 0u64, 0.0f64);
    for (&s, &o) in served.iter().zip(offline) {
        cs += s;
        co += o;
        ks = ks.max((cs as f64 / ts as f64 - co as f64 / to as f64).abs());
    }
    ks
}

/// Whether a domain has a distribution spec at all.
pub(crate) fn has_distribution(d: Domain) -> bool {
    matches!(d, Domain::Number | Domain::Text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_distributions_are_at_distance_zero() {
        // The last bin is the null bin.
        let d = distances(&[10, 20, 30, 0], &[1, 2, 3, 0], true);
        assert!(d.psi.abs() < 1e-12 && d.js.abs() < 1e-6 && d.ks.unwrap() < 1e-12);
        let far = distances(&[100, 0, 0], &[0, 100, 0], true);
        assert!(far.psi > 5.0);
        assert!((far.js - 1.0).abs() < 1e-9);
        assert!((far.ks.unwrap() - 1.0).abs() < 1e-9);
    }

    /// Nulls are a bin of their own, for numbers and text alike: 30% more nulls on one side is
    /// a shift (PSI over 0.25) even when the values keep their shares, which KS (values only)
    /// does not see.
    #[test]
    fn nulls_are_a_bin_of_their_own() {
        let values = |null_every: Option<usize>| {
            (0..1000).map(move |i| (null_every.is_none_or(|k| i % 10 >= k)).then_some(i % 10))
        };
        let nums = |nulls| {
            DArr::Num(arrow_array::Float64Array::from_iter(
                values(nulls).map(|v| v.map(|v| v as f64)),
            ))
        };
        let texts = |nulls| {
            DArr::Text(arrow_array::BinaryArray::from_iter(
                values(nulls).map(|v| v.map(|v| format!("c{v}").into_bytes())),
            ))
        };
        for (served, offline, ordered) in [
            (nums(Some(3)), nums(None), true),
            (nums(None), nums(Some(3)), true),
            (texts(Some(3)), texts(None), false),
            (texts(None), texts(Some(3)), false),
        ] {
            let spec = DistSpec::from_offline(&offline);
            let (mut s, mut o) = (vec![0; spec.bins()], vec![0; spec.bins()]);
            spec.count(&served, &mut s);
            spec.count(&offline, &mut o);
            assert_eq!(spec.labels().last().map(String::as_str), Some(NULL_BIN));
            assert_eq!(s.last().unwrap() + o.last().unwrap(), 300, "{s:?} {o:?}");
            let d = distances(&s, &o, ordered);
            assert!(d.psi > 0.25, "{spec:?}: {d:?}");
            assert!(d.js > 0.1, "{spec:?}: {d:?}");
            let top = d
                .contributions
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i);
            assert_eq!(top, Some(spec.bins() - 1), "the null bin contributes most");
            let same = distances(&s, &s, ordered);
            assert!(same.psi.abs() < 1e-12 && same.js < 1e-6);
        }
        // Numbers null on every offline row: one bin for all served values, no note.
        let spec =
            DistSpec::from_offline(&DArr::Num(arrow_array::Float64Array::from(vec![
                None::<f64>;
                4
            ])));
        assert_eq!(spec.labels(), ["all", "NaN", NULL_BIN]);
        let mut s = vec![0; spec.bins()];
        spec.count(&nums(None), &mut s);
        assert_eq!(s, [1000, 0, 0]);
    }

    #[test]
    fn difference_buckets_are_decades() {
        assert_eq!(diff_bucket(0.0), 0);
        assert_eq!(diff_bucket(5e-10), 0);
        assert_eq!(diff_bucket(1e-9), 1);
        assert_eq!(diff_bucket(0.5), 9);
        assert_eq!(diff_bucket(1e9), DIFF_BUCKETS - 1);
        assert_eq!(diff_bucket(f64::MAX), DIFF_BUCKETS - 1);
        assert_eq!(diff_bucket(f64::INFINITY), DIFF_BUCKETS - 1);
        assert_eq!(diff_bucket(f64::NAN), DIFF_BUCKETS - 1);
        assert_eq!(diff_bucket_lower(9), 0.1);
    }

    /// Example keys are distinct, and the same whatever the order they were seen in and
    /// however the rows were split between threads.
    #[test]
    fn example_keys_are_distinct_and_independent_of_order() {
        let keys: Vec<(u64, String)> = (0..50u64)
            .map(|k| ((k * 0x9e37_79b9) % 101, format!("k{k}")))
            .collect();
        let mut expected = keys.clone();
        expected.sort();
        expected.truncate(EXAMPLES);
        for rotation in [0, 7, 31] {
            for split in [1, 2, 5] {
                let mut order = keys.clone();
                order.rotate_left(rotation);
                // Each key twice, as a served key repeated on another row would be.
                order.extend(keys.iter().rev().cloned());
                let mut parts: Vec<Pairs> = (0..split).map(|_| Pairs::default()).collect();
                for (n, (h, k)) in order.into_iter().enumerate() {
                    parts[n % split].add(Val::Num(1.0), Val::Num(2.0), h, || k);
                }
                let mut all = Pairs::default();
                for p in parts {
                    all.merge(p);
                }
                let top = all.top(1);
                let mut want: Vec<String> = expected.iter().map(|(_, k)| k.clone()).collect();
                want.sort();
                assert_eq!(top[0].4, want, "rotation {rotation}, {split} parts");
                assert_eq!(top[0].2, 100);
            }
        }
        // The same hash, two keys: both kept, once each.
        let mut list = Vec::new();
        for k in ["b", "a", "b", "a"] {
            offer_example(&mut list, 3, 5, || k.to_owned());
        }
        assert_eq!(list, [(5, "a".to_owned()), (5, "b".to_owned())]);
    }

    #[test]
    fn pairs_keep_the_frequent_ones_when_pruned() {
        let mut p = Pairs::default();
        for _ in 0..10 {
            p.add(Val::Text(b"a"), Val::Text(b"A"), 1, || "k".into());
        }
        for i in 0..(PAIR_CAP * 2) {
            p.add(Val::Num(i as f64), Val::Num(-1.5), i as u64, || "k".into());
        }
        assert!(p.truncated);
        let top = p.top(1);
        assert_eq!(top[0].2, 10);
        assert_eq!(top[0].3, values::CASE);
        assert_eq!(top[0].0, Owned::Text("a".into()));
    }

    /// Every pair distinct (all counts 1): pruning must keep half the cap, not empty the map.
    #[test]
    fn pruning_ties_keeps_half_the_cap() {
        let mut p = Pairs::default();
        for i in 0..=PAIR_CAP {
            p.add(Val::Num(i as f64), Val::Num(-0.5), i as u64, || {
                format!("k{i}")
            });
        }
        assert!(p.truncated);
        assert_eq!(p.map.len(), PAIR_CAP / 2);
        assert_eq!(p.top(10).len(), 10);
        // More after the prune are counted as usual.
        p.add(Val::Num(0.25), Val::Num(-0.5), 7, || "x".into());
        assert_eq!(p.map.len(), PAIR_CAP / 2 + 1);

        // Pairs above the median stay whatever the ties; ties fill up to half the cap.
        let mut p = Pairs::default();
        for i in 0..PAIR_CAP / 4 {
            for _ in 0..2 {
                p.add(Val::Num(i as f64), Val::Num(-1.5), i as u64, || "a".into());
            }
        }
        for i in 0..PAIR_CAP {
            p.add(Val::Num(i as f64), Val::Num(-2.5), i as u64, || "b".into());
        }
        assert!(p.truncated);
        let twice = p.map.values().filter(|e| e.count == 2).count();
        assert_eq!(twice, PAIR_CAP / 4);
        assert!(p.map.len() >= PAIR_CAP / 2, "{}", p.map.len());

        // Merging two full maps of distinct pairs keeps half the cap too.
        let (mut a, mut b) = (Pairs::default(), Pairs::default());
        for i in 0..PAIR_CAP {
            a.add(Val::Num(i as f64), Val::Num(1.5), i as u64, || "a".into());
            b.add(Val::Num(i as f64), Val::Num(2.5), i as u64, || "b".into());
        }
        a.merge(b);
        assert!(a.truncated);
        assert_eq!(a.map.len(), PAIR_CAP / 2);
    }

    #[test]
    fn numeric_bins_come_from_offline_quantiles() {
        let a = arrow_array::Float64Array::from((0..1000).map(f64::from).collect::<Vec<_>>());
        let col = DArr::Num(a);
        let spec = DistSpec::from_offline(&col);
        let mut counts = vec![0; spec.bins()];
        spec.count(&col, &mut counts);
        assert_eq!(counts.len(), BINS + 3);
        assert_eq!(counts[0], 0);
        assert!(counts[1..=BINS].iter().all(|&c| c == 50), "{counts:?}");
    }
}
