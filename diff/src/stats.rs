//! Per-feature accumulators: what a worker thread counts while comparing matched rows (rates,
//! the sizes of numeric differences, the mismatching value pairs and their classes) and the
//! value distributions of each side; merged across threads at the end.

use arrow_array::Array;
use hashbrown::HashMap;

use crate::values::{self, DArr, Domain, Outcome, Unit, Val};

mod pairs;
use pairs::Pairs;
pub(crate) use pairs::{PAIR_CAP, offer_example};

/// Distinct offline values up to which a text feature gets a categorical distribution.
pub(crate) const CATEGORY_CAP: usize = 1000;
/// Quantile bins of a numeric distribution.
const BINS: usize = 20;
/// Lower bounds of the difference histogram's decades, 1e-12 to 1e18: wide enough that the
/// top decades stay bounded for every difference worth telling apart (times are in
/// microseconds: 1 ms is [1e3, 1e4), 1 h is [1e9, 1e10), a century under 1e16).
const DIFF_EDGES: [f64; 31] = [
    1e-12, 1e-11, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3,
    1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18,
];
/// Buckets of the difference histogram: [0, 1e-12), the decades, [1e18, f64::MAX], and one
/// for infinite differences (an infinity, or NaN against a number).
pub(crate) const DIFF_BUCKETS: usize = DIFF_EDGES.len() + 2;

/// The label of the null bin, the last of every distribution: a feature that turns null in
/// 30% of the rows has shifted as much as one whose values moved, so nulls are a share like
/// any other (as a category they cannot be mistaken for a value: categories print quoted).
pub(crate) const NULL_BIN: &str = "null";

/// How values are binned for a distribution, derived from the offline side. Every spec ends
/// with the null bin ([`NULL_BIN`]).
#[derive(Debug, Clone)]
pub(crate) enum DistSpec {
    /// Numbers (in comparison units: microseconds for times): bin `i` is
    /// `[edges[i-1], edges[i])`, bin 0 below the first edge, one more bin for NaN, then the
    /// null bin. The unit of the offline values, when exact, prints the edges.
    Bins(Vec<f64>, Option<Unit>),
    /// Text: the offline side's values; one more bin for values offline never had, then the
    /// null bin.
    Categories(HashMap<Box<[u8]>, u32>, Vec<String>),
    /// Not computed, and why.
    None(String),
}

impl DistSpec {
    pub(crate) fn bins(&self) -> usize {
        match self {
            DistSpec::Bins(e, _) => e.len() + 3,
            DistSpec::Categories(_, names) => names.len() + 2,
            DistSpec::None(_) => 0,
        }
    }

    /// Derives the bins from the offline column.
    pub(crate) fn from_offline(col: &DArr) -> DistSpec {
        if col.len() == 0 {
            return DistSpec::None("no offline rows".into());
        }
        let numbers = |n: usize, value: &dyn Fn(usize) -> Option<f64>, unit: Option<Unit>| {
            let stride = (n / 200_000).max(1);
            let sample: Vec<f64> = (0..n)
                .step_by(stride)
                .filter_map(value)
                .filter(|v| !v.is_nan())
                .collect();
            Self::quantiles(sample, unit)
        };
        match col {
            DArr::Num(a) => numbers(a.len(), &|i| a.is_valid(i).then(|| a.value(i)), None),
            DArr::Exact(a, u) => numbers(
                a.len(),
                &|i| a.is_valid(i).then(|| values::exact_f64(a.value(i), *u)),
                Some(*u),
            ),
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

    /// Quantile bins of the sampled offline numbers. Only nulls and NaN offline: one bin for
    /// every number, so that served values against offline nulls still show as the shift
    /// they are.
    fn quantiles(mut sample: Vec<f64>, unit: Option<Unit>) -> DistSpec {
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
        DistSpec::Bins(edges, unit)
    }

    /// Counts column `col` (rows `0..len`) into `counts`, nulls into the last bin.
    pub(crate) fn count(&self, col: &DArr, counts: &mut [u64]) {
        let Some(null_bin) = counts.len().checked_sub(1) else {
            return;
        };
        match (self, col) {
            (DistSpec::Bins(edges, _), DArr::Num(a)) => {
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
            (DistSpec::Bins(edges, _), DArr::Exact(a, u)) => {
                for i in 0..a.len() {
                    if a.is_null(i) {
                        counts[null_bin] += 1;
                        continue;
                    }
                    let v = values::exact_f64(a.value(i), *u);
                    if let Some(c) = counts.get_mut(edges.partition_point(|e| *e <= v)) {
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
            DistSpec::Bins(edges, unit) => {
                let mut out = Vec::with_capacity(edges.len() + 2);
                let f = |v: f64| values::fmt_number(v, *unit);
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
    /// Mismatches per struct field that differs (a row counts once for each such field).
    pub(crate) fields: HashMap<Box<str>, u64>,
    pub(crate) pairs: Pairs,
    /// Served distribution over the spec's bins (all served rows, matched or not).
    pub(crate) dist: Vec<u64>,
    /// Served rows, and null ones among them (all served rows, whatever the spec).
    pub(crate) rows: u64,
    pub(crate) nulls: u64,
}

/// The bucket of a positive difference; infinite and NaN ones (an infinity, or NaN against a
/// number) go to the last bucket, of their own.
#[inline]
pub(crate) fn diff_bucket(d: f64) -> usize {
    if !d.is_finite() {
        return DIFF_BUCKETS - 1;
    }
    DIFF_EDGES.partition_point(|e| *e <= d)
}

/// The lower bound of a bucket: 0 for the first, `f64::MAX` for the infinite differences.
pub(crate) fn diff_bucket_lower(b: usize) -> f64 {
    match b.checked_sub(1) {
        None => 0.0,
        Some(i) => DIFF_EDGES.get(i).copied().unwrap_or(f64::MAX),
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
            fields: HashMap::new(),
            pairs: Pairs::default(),
            dist: vec![0; bins],
            rows: 0,
            nulls: 0,
        }
    }

    pub(crate) fn mismatches(&self) -> u64 {
        self.served_null + self.offline_null + self.differ
    }

    /// Compares served value `sv` with offline value `ov`; their key has hash `hash` and text
    /// `key()`.
    #[inline]
    pub(crate) fn compare_vals(
        &mut self,
        sv: Val<'_>,
        ov: Val<'_>,
        abs: f64,
        rel: f64,
        hash: u64,
        key: impl FnOnce() -> String,
    ) {
        self.compared += 1;
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
                let class = self.pairs.count(sv, ov, hash, key, &mut self.fields);
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
        for (k, v) in other.fields {
            *self.fields.entry(k).or_insert(0) += v;
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

    /// Decades from 1e-12 to 1e18, each bucket bounded but the infinite one: a 1 ms and a
    /// 1 h shift (in microseconds) land apart, as do 1e3 and 1e9.
    #[test]
    fn difference_buckets_are_bounded_decades() {
        assert_eq!(diff_bucket(0.0), 0);
        assert_eq!(diff_bucket(5e-13), 0);
        assert_eq!(diff_bucket(1e-12), 1);
        assert_eq!(diff_bucket(1e-9), 4);
        assert_eq!(diff_bucket(0.5), 12);
        assert_eq!(diff_bucket_lower(12), 0.1);
        let (ms, hour) = (diff_bucket(1e3), diff_bucket(3.6e9));
        assert_ne!(ms, hour);
        assert_eq!(diff_bucket_lower(ms), 1e3);
        assert_eq!(diff_bucket_lower(hour), 1e9);
        assert_eq!(diff_bucket_lower(hour + 1), 1e10);
        assert_eq!(diff_bucket(1e18), DIFF_BUCKETS - 2);
        assert_eq!(diff_bucket(f64::MAX), DIFF_BUCKETS - 2);
        assert_eq!(diff_bucket_lower(DIFF_BUCKETS - 1), f64::MAX);
        for d in [f64::INFINITY, f64::NAN] {
            assert_eq!(diff_bucket(d), DIFF_BUCKETS - 1);
        }
        for b in 0..DIFF_BUCKETS - 1 {
            assert!(diff_bucket_lower(b) < diff_bucket_lower(b + 1), "{b}");
        }
        for b in 0..DIFF_BUCKETS - 2 {
            assert_eq!(diff_bucket(diff_bucket_lower(b + 1)), b + 1, "{b}");
        }
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
