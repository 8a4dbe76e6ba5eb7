//! Numeric distribution binning at table speed: what [`DistSpec::count`] does for
//! [`DistSpec::Bins`], for the diff's hot loops. Every numeric value of both sides is binned
//! (320M values on the 10M x 20 benchmark), and `partition_point` over the 20 quantile edges
//! (five dependent compare steps per value) was a sixth of the diff's time there.
//!
//! A value's bin is the number of edges at or below it. The range from the first edge to the
//! last is cut into 2^14 equal slices, and a table gives each slice's bin: a subtraction, a
//! multiplication and one read per value. The few slices an edge falls in say so, and their
//! values are binned by search. (Slicing the floats' bit patterns instead spends most slices
//! on exponents: with an edge at 0, the integers 0 to 999 fell in searched slices 60% of the
//! time.)

use arrow_array::Array;

use crate::stats::{self, DistSpec};
use crate::values::{self, DArr, Unit};

const SLICES: usize = 1 << 14;

/// Marks a table slice holding an edge: its values are binned by search.
const SEARCH: u8 = u8::MAX;

/// The bins of one [`DistSpec::Bins`].
#[derive(Debug, Clone)]
pub(crate) struct Binner {
    edges: Vec<f64>,
    /// The first edge, and slices per unit above it.
    first: f64,
    scale: f64,
    /// Per slice, the bin of all its values, or [`SEARCH`]; the last entry is for every value
    /// above the table (above the last edge: the last bin).
    table: Vec<u8>,
    /// Bins: the edges', then NaN, then null.
    nan_bin: usize,
    null_bin: usize,
}

impl Binner {
    /// The binner of `spec`, when it is numeric (and small enough for the table).
    pub(crate) fn of(spec: &DistSpec) -> Option<Binner> {
        let DistSpec::Bins(edges, _) = spec else {
            return None;
        };
        if edges.len() >= SEARCH as usize || edges.iter().any(|e| e.is_nan()) {
            return None;
        }
        let (first, last) = match (edges.first(), edges.last()) {
            (Some(&a), Some(&b)) => (a, b),
            _ => (0.0, 0.0),
        };
        let mut b = Binner {
            edges: edges.clone(),
            first,
            // Infinite when the edges are one value, 0 when their span is infinite: either way
            // the edges' slices are searched, which stays right.
            scale: SLICES as f64 / (last - first),
            table: Vec::new(),
            nan_bin: edges.len() + 1,
            null_bin: edges.len() + 2,
        };
        // The slice function is monotone (a rounded subtraction and a multiplication by a
        // positive number are), so an edge in a slice below a value's is below the value and
        // one in a slice above is above it: a slice no edge falls in has one bin, the number
        // of edges in slices below it.
        let at: Vec<usize> = edges.iter().map(|&e| b.slice(e)).collect();
        b.table = (0..=SLICES + 2)
            .map(|s| {
                if at.contains(&s) {
                    SEARCH
                } else {
                    at.iter().filter(|&&a| a < s).count() as u8
                }
            })
            .collect();
        Some(b)
    }

    /// The table slice of `v` (before the clamp to the table): 0 below the first edge and for
    /// NaN (a saturating conversion), 1 for the first edge, past the table above the last.
    #[inline]
    fn slice(&self, v: f64) -> usize {
        ((v - self.first) * self.scale + 1.0) as usize
    }

    /// The bin of a number that is not NaN: `edges.partition_point(|e| *e <= v)`.
    #[inline]
    pub(crate) fn bin(&self, v: f64) -> usize {
        let slice = self.slice(v).min(self.table.len() - 1);
        match self.table[slice] {
            SEARCH => self.edges.partition_point(|e| *e <= v),
            b => b as usize,
        }
    }

    /// The bin of a float value (`None`: null).
    #[inline]
    pub(crate) fn bin_float(&self, v: Option<f64>) -> usize {
        match v {
            None => self.null_bin,
            Some(v) if v.is_nan() => self.nan_bin,
            Some(v) => self.bin(v),
        }
    }

    /// Counts a served column as [`DistSpec::count`] does; false for a column of another
    /// domain (left to it).
    pub(crate) fn count(&self, col: &DArr, counts: &mut [u64]) -> bool {
        if counts.len() != self.null_bin + 1 {
            return false;
        }
        match col {
            DArr::Num(a) => {
                let values = a.values();
                match a.nulls().filter(|n| n.null_count() > 0) {
                    None => self.count_floats(values, |_| false, counts),
                    Some(n) => self.count_floats(values, |i| n.is_null(i), counts),
                }
                true
            }
            DArr::Exact(a, u) => {
                let floats: Vec<f64> = a.values().iter().map(|&v| exact_f64(v, *u)).collect();
                self.count_floats(&floats, |i| a.is_null(i), counts);
                true
            }
            _ => false,
        }
    }

    /// Counts floats (row `i` null when `null(i)`): their slices first, a block at a time (a
    /// loop of arithmetic alone, which the compiler makes SIMD), then the table reads.
    pub(crate) fn count_floats(
        &self,
        values: &[f64],
        null: impl Fn(usize) -> bool,
        counts: &mut [u64],
    ) {
        let top = (self.table.len() - 1) as f64;
        let mut slices = [0u32; 256];
        for (at, block) in values.chunks(slices.len()).enumerate() {
            for (s, &v) in slices.iter_mut().zip(block) {
                // NaN lands in slice 0, and is sent to its own bin below.
                *s = ((v - self.first) * self.scale + 1.0).clamp(0.0, top) as u32;
            }
            let base = at * slices.len();
            for (i, (&s, &v)) in slices.iter().zip(block).enumerate() {
                let b = match self.table.get(s as usize) {
                    _ if null(base + i) => self.null_bin,
                    Some(&b) if b != SEARCH && !v.is_nan() => b as usize,
                    _ => self.bin_float(Some(v)),
                };
                if let Some(c) = counts.get_mut(b) {
                    *c += 1;
                }
            }
        }
    }
}

/// [`values::exact_f64`], without the slow 128-bit conversion for the usual value that fits
/// 64 bits (the same float: both conversions round the same integer to nearest).
#[inline]
pub(crate) fn exact_f64(v: i128, unit: Unit) -> f64 {
    match i64::try_from(v) {
        Ok(x) if unit.scale() == 0 => x as f64,
        _ => values::exact_f64(v, unit),
    }
}

/// The difference histogram's bucket of a difference, as [`stats::diff_bucket`] gives it,
/// by the difference's binary exponent: a binade holds at most one decade edge, so a table
/// of the buckets at each binade's ends and the edge between them leaves one comparison.
/// (The search over the 31 edges was a third of the comparison's time on the benchmark,
/// where every row of four features differs within tolerance.)
#[derive(Debug, Clone)]
pub(crate) struct DiffBuckets {
    /// Per binary exponent: the bucket of its smallest and largest numbers, and the lower
    /// bound of the larger bucket.
    table: Vec<(u8, u8, f64)>,
}

impl DiffBuckets {
    pub(crate) fn new() -> DiffBuckets {
        let table = (0..2047u64)
            .map(|e| {
                let first = f64::from_bits(e << 52);
                let last = f64::from_bits(((e + 1) << 52) - 1);
                let (lo, hi) = (stats::diff_bucket(first), stats::diff_bucket(last));
                match (u8::try_from(lo), u8::try_from(hi)) {
                    (Ok(lo), Ok(hi)) if hi <= lo.saturating_add(1) && e > 0 => {
                        (lo, hi, stats::diff_bucket_lower(hi as usize))
                    }
                    // Subnormals, and binades holding two edges (none with decades): search.
                    _ => (u8::MAX, u8::MAX, 0.0),
                }
            })
            .collect();
        DiffBuckets { table }
    }

    /// [`stats::diff_bucket`] of `d`.
    #[inline]
    pub(crate) fn bucket(&self, d: f64) -> usize {
        let e = (d.to_bits() >> 52) as usize; // the sign bit too: negatives search
        match self.table.get(e) {
            Some(&(lo, hi, edge)) if lo != u8::MAX => {
                if d >= edge {
                    hi as usize
                } else {
                    lo as usize
                }
            }
            _ => stats::diff_bucket(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *seed >> 11
    }

    /// Binning equals `DistSpec::count` on edges and values of every kind: duplicates near
    /// edges, zeros of both signs, infinities, NaN, nulls, huge spans, one edge, none.
    #[test]
    fn bins_as_dist_spec_counts() {
        let mut seed = 7u64;
        let specials = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            1e-300,
            -1e-300,
            1.7e15,
            1.7e15 + 1.0,
        ];
        for round in 0..200 {
            let mut values: Vec<Option<f64>> = (0..2000)
                .map(|_| {
                    let r = lcg(&mut seed);
                    match r % 10 {
                        0 => None,
                        1 => Some(f64::NAN),
                        2 => Some(specials[(r / 10) as usize % specials.len()]),
                        3 => Some((r % 7) as f64),
                        4 => Some(1.7e15 + (r % 100_000) as f64),
                        _ => Some((r as f64 / (1u64 << 53) as f64 - 0.5) * 10f64.powi(round % 9)),
                    }
                })
                .collect();
            values.extend(specials.iter().map(|&v| Some(v)));
            let col = DArr::Num(values.iter().copied().collect());
            let spec = DistSpec::from_offline(&col);
            let binner = Binner::of(&spec).unwrap();
            let (mut a, mut b) = (vec![0u64; spec.bins()], vec![0u64; spec.bins()]);
            spec.count(&col, &mut a);
            assert!(binner.count(&col, &mut b));
            assert_eq!(a, b, "round {round}: {spec:?}");
            // Edges themselves and their neighbours.
            if let DistSpec::Bins(edges, _) = &spec {
                for &e in edges {
                    for v in [e, e.next_up(), e.next_down(), -e] {
                        assert_eq!(binner.bin(v), edges.partition_point(|x| *x <= v), "{v}");
                    }
                }
            }
        }
        for edges in [
            vec![],
            vec![0.0],
            vec![-0.0, 5.0],
            vec![f64::NEG_INFINITY, 1.0],
        ] {
            let binner = Binner::of(&DistSpec::Bins(edges.clone(), None)).unwrap();
            for v in [
                -1.0,
                -0.0,
                0.0,
                0.5,
                5.0,
                6.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ] {
                assert_eq!(
                    binner.bin(v),
                    edges.partition_point(|x| *x <= v),
                    "{edges:?} {v}"
                );
            }
        }
    }

    #[test]
    fn exact_values_bin_as_dist_spec_counts() {
        let values: Vec<Option<i128>> = (0..5000)
            .map(|i| (i % 17 != 0).then(|| (i as i128 * 7919) % 1000 - 300))
            .chain([Some(i128::MAX), Some(i128::MIN), Some(1 << 70)])
            .collect();
        for unit in [Unit::Int, Unit::Decimal(2), Unit::Timestamp] {
            let col = DArr::Exact(values.iter().copied().collect(), unit);
            let spec = DistSpec::from_offline(&col);
            let binner = Binner::of(&spec).unwrap();
            let (mut a, mut b) = (vec![0u64; spec.bins()], vec![0u64; spec.bins()]);
            spec.count(&col, &mut a);
            assert!(binner.count(&col, &mut b));
            assert_eq!(a, b, "{unit:?}");
        }
        for v in [
            0i128,
            -1,
            i64::MAX as i128,
            i64::MIN as i128,
            1 << 53,
            (1 << 53) + 1,
        ] {
            assert_eq!(
                exact_f64(v, Unit::Int).to_bits(),
                values::exact_f64(v, Unit::Int).to_bits()
            );
        }
    }

    #[test]
    fn difference_buckets_as_stats_gives_them() {
        let b = DiffBuckets::new();
        let mut ds = vec![
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
        ];
        for k in -330..310 {
            let p = 10f64.powi(k);
            ds.extend([p, p.next_up(), p.next_down(), p * 3.7, -p]);
        }
        let mut x = 1e-320f64;
        while x < 1e300 {
            ds.push(x);
            x *= 1.013;
        }
        for d in ds {
            assert_eq!(b.bucket(d), stats::diff_bucket(d), "{d:e}");
        }
    }
}
