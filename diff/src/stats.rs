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
    pub(crate) examples: Vec<String>,
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
    /// Counts one pair; returns its class.
    fn add(&mut self, s: Val<'_>, o: Val<'_>, key: impl FnOnce() -> String) -> u16 {
        self.scratch.clear();
        let mut tmp = std::mem::take(&mut self.scratch);
        tmp.extend_from_slice(&[0; 4]);
        s.encode(&mut tmp);
        let n = (tmp.len() - 4) as u32;
        tmp[..4].copy_from_slice(&n.to_le_bytes());
        o.encode(&mut tmp);
        let class = if let Some(e) = self.map.get_mut(tmp.as_slice()) {
            e.count += 1;
            if e.examples.len() < EXAMPLES {
                e.examples.push(key());
            }
            e.class
        } else {
            let (a, b) = split(&tmp);
            let class = values::classify(&values::decode(a), &values::decode(b));
            self.map.insert(
                tmp.as_slice().into(),
                PairEntry {
                    count: 1,
                    class,
                    examples: vec![key()],
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
            for x in e.examples {
                if mine.examples.len() < EXAMPLES {
                    mine.examples.push(x);
                }
            }
        }
        if self.map.len() > PAIR_CAP {
            self.prune();
        }
    }

    /// The pairs, most frequent first: (served, offline, entry).
    pub(crate) fn top(&self, n: usize) -> Vec<(Owned, Owned, PairEntry)> {
        let mut all: Vec<(&Box<[u8]>, &PairEntry)> = self.map.iter().collect();
        all.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(b.0)));
        all.into_iter()
            .take(n)
            .map(|(k, e)| {
                let (a, b) = split(k);
                let mut e = e.clone();
                e.examples.sort();
                (values::decode(a), values::decode(b), e)
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

/// How values are binned for a distribution, derived from the offline side.
#[derive(Debug, Clone)]
pub(crate) enum DistSpec {
    /// Numbers: bin `i` is `[edges[i-1], edges[i])`, bin 0 below the first edge, one more bin
    /// for NaN.
    Bins(Vec<f64>),
    /// Text: the offline side's values; one more bin for values offline never had.
    Categories(HashMap<Box<[u8]>, u32>, Vec<String>),
    /// Not computed, and why.
    None(String),
}

impl DistSpec {
    pub(crate) fn bins(&self) -> usize {
        match self {
            DistSpec::Bins(e) => e.len() + 2,
            DistSpec::Categories(_, names) => names.len() + 1,
            DistSpec::None(_) => 0,
        }
    }

    /// Derives the bins from the offline column.
    pub(crate) fn from_offline(col: &DArr) -> DistSpec {
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
                if sample.is_empty() {
                    return DistSpec::None("no offline values".into());
                }
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

    /// Counts column `col` (rows `0..len`) into `counts`/`nulls`.
    pub(crate) fn count(&self, col: &DArr, counts: &mut [u64], nulls: &mut u64) {
        match (self, col) {
            (DistSpec::Bins(edges), DArr::Num(a)) => {
                let nan_bin = edges.len() + 1;
                for i in 0..a.len() {
                    if a.is_null(i) {
                        *nulls += 1;
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
                        *nulls += 1;
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
                out
            }
            DistSpec::Categories(_, names) => {
                let mut out: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                out.push("(not offline)".into());
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
    pub(crate) dist_nulls: u64,
    pub(crate) dist_rows: u64,
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
            dist_nulls: 0,
            dist_rows: 0,
        }
    }

    pub(crate) fn mismatches(&self) -> u64 {
        self.served_null + self.offline_null + self.differ
    }

    /// Compares served row `i` of `s` with offline row `j` of `o`.
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
                let class = self.pairs.add(sv, ov, key);
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
        self.dist_nulls += other.dist_nulls;
        self.dist_rows += other.dist_rows;
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

/// PSI, Jensen-Shannon distance (base 2) and, for ordered bins, KS over the bin edges.
pub(crate) fn distances(served: &[u64], offline: &[u64], ordered: bool) -> Distances {
    let ts: u64 = served.iter().sum();
    let to: u64 = offline.iter().sum();
    if ts == 0 || to == 0 {
        return Distances::default();
    }
    // Empty bins get a small share so that PSI stays finite (the usual smoothing).
    const EPS: f64 = 1e-4;
    let mut out = Distances::default();
    let (mut cs, mut co, mut ks) = (0.0f64, 0.0f64, 0.0f64);
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
        cs += p;
        co += q;
        ks = ks.max((cs - co).abs());
    }
    out.js = js.max(0.0).sqrt();
    out.ks = ordered.then_some(ks);
    out
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
        let d = distances(&[10, 20, 30], &[1, 2, 3], true);
        assert!(d.psi.abs() < 1e-12 && d.js.abs() < 1e-6 && d.ks.unwrap() < 1e-12);
        let far = distances(&[100, 0], &[0, 100], true);
        assert!(far.psi > 5.0);
        assert!((far.js - 1.0).abs() < 1e-9);
        assert!((far.ks.unwrap() - 1.0).abs() < 1e-9);
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

    #[test]
    fn pairs_keep_the_frequent_ones_when_pruned() {
        let mut p = Pairs::default();
        for _ in 0..10 {
            p.add(Val::Text(b"a"), Val::Text(b"A"), || "k".into());
        }
        for i in 0..(PAIR_CAP * 2) {
            p.add(Val::Num(i as f64), Val::Num(-1.5), || "k".into());
        }
        assert!(p.truncated);
        let top = p.top(1);
        assert_eq!(top[0].2.count, 10);
        assert_eq!(top[0].2.class, values::CASE);
        assert_eq!(top[0].0, Owned::Text("a".into()));
    }

    /// Every pair distinct (all counts 1): pruning must keep half the cap, not empty the map.
    #[test]
    fn pruning_ties_keeps_half_the_cap() {
        let mut p = Pairs::default();
        for i in 0..=PAIR_CAP {
            p.add(Val::Num(i as f64), Val::Num(-0.5), || format!("k{i}"));
        }
        assert!(p.truncated);
        assert_eq!(p.map.len(), PAIR_CAP / 2);
        assert_eq!(p.top(10).len(), 10);
        // More after the prune are counted as usual.
        p.add(Val::Num(0.25), Val::Num(-0.5), || "x".into());
        assert_eq!(p.map.len(), PAIR_CAP / 2 + 1);

        // Pairs above the median stay whatever the ties; ties fill up to half the cap.
        let mut p = Pairs::default();
        for i in 0..PAIR_CAP / 4 {
            for _ in 0..2 {
                p.add(Val::Num(i as f64), Val::Num(-1.5), || "a".into());
            }
        }
        for i in 0..PAIR_CAP {
            p.add(Val::Num(i as f64), Val::Num(-2.5), || "b".into());
        }
        assert!(p.truncated);
        let twice = p.map.values().filter(|e| e.count == 2).count();
        assert_eq!(twice, PAIR_CAP / 4);
        assert!(p.map.len() >= PAIR_CAP / 2, "{}", p.map.len());

        // Merging two full maps of distinct pairs keeps half the cap too.
        let (mut a, mut b) = (Pairs::default(), Pairs::default());
        for i in 0..PAIR_CAP {
            a.add(Val::Num(i as f64), Val::Num(1.5), || "a".into());
            b.add(Val::Num(i as f64), Val::Num(2.5), || "b".into());
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
        let mut nulls = 0;
        spec.count(&col, &mut counts, &mut nulls);
        assert_eq!(counts.len(), BINS + 2);
        assert_eq!(counts[0], 0);
        assert!(counts[1..=BINS].iter().all(|&c| c == 50), "{counts:?}");
    }
}
