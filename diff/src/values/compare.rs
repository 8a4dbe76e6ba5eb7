//! How two values compare: exactly, or within a tolerance for numbers that have one.

use arrow_array::Array;

use super::{Unit, Val, exact_f64};

/// How one pair of values compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Outcome {
    BothNull,
    Equal,
    /// Numbers that differ by this much but within tolerance.
    WithinTolerance(f64),
    /// Only the served value is null.
    ServedNull,
    /// Only the offline value is null.
    OfflineNull,
    /// Both present and different; the absolute difference for numbers (in comparison units:
    /// microseconds for times), infinite when no finite number measures it.
    Differ(Option<f64>),
}

#[inline]
fn num_close(a: f64, b: f64, abs: f64, rel: f64) -> Result<(), f64> {
    if a == b || (a.is_nan() && b.is_nan()) {
        return Ok(());
    }
    if a.is_infinite() || b.is_infinite() {
        // No tolerance reaches an infinity (`rel * max(|a|, |b|)` would be infinite too).
        return Err(f64::INFINITY);
    }
    let d = (a - b).abs();
    if d <= abs || d <= rel * a.abs().max(b.abs()) {
        Ok(())
    } else {
        Err(d)
    }
}

#[inline]
fn floats(a: f64, b: f64, abs: f64, rel: f64) -> Outcome {
    if a == b || (a.is_nan() && b.is_nan()) {
        Outcome::Equal
    } else {
        match num_close(a, b, abs, rel) {
            Ok(()) => Outcome::WithinTolerance((a - b).abs()),
            Err(d) => Outcome::Differ(Some(if d.is_nan() { f64::INFINITY } else { d })),
        }
    }
}

/// `a` (scale `sa`) and `b` (scale `sb`) at the larger scale; `None` when that overflows
/// i128 (then they differ).
#[inline]
fn at_common_scale(a: i128, sa: i32, b: i128, sb: i32) -> Option<(i128, i128, i32)> {
    let up = |v: i128, by: i32| {
        10i128
            .checked_pow(u32::try_from(by).ok()?)
            .and_then(|p| v.checked_mul(p))
    };
    match sa.cmp(&sb) {
        std::cmp::Ordering::Equal => Some((a, b, sa)),
        std::cmp::Ordering::Less => Some((up(a, sb - sa)?, b, sb)),
        std::cmp::Ordering::Greater => Some((a, up(b, sa - sb)?, sa)),
    }
}

/// Two exact numbers: equal only when their values are (at a common scale); otherwise their
/// difference in comparison units, judged by the tolerances (0 unless a threshold sets one).
#[inline]
fn exact(a: i128, ua: Unit, b: i128, ub: Unit, abs: f64, rel: f64) -> Outcome {
    let (sa, sb) = (ua.scale(), ub.scale());
    if sa == sb && a == b {
        return Outcome::Equal;
    }
    let d = match at_common_scale(a, sa, b, sb) {
        Some((x, y, _)) if x == y => return Outcome::Equal,
        Some((x, y, s)) => match x.checked_sub(y) {
            Some(d) => d.unsigned_abs() as f64 / 10f64.powi(s),
            None => (exact_f64(a, ua) - exact_f64(b, ub)).abs(),
        },
        None => (exact_f64(a, ua) - exact_f64(b, ub)).abs(),
    };
    let magnitude = exact_f64(a, ua).abs().max(exact_f64(b, ub).abs());
    if d <= abs || d <= rel * magnitude {
        Outcome::WithinTolerance(d)
    } else {
        Outcome::Differ(Some(d))
    }
}

/// Compares a served value with an offline one; `abs` and `rel` are the feature's tolerances
/// (in comparison units: microseconds for times).
#[inline]
pub(crate) fn compare(s: Val<'_>, o: Val<'_>, abs: f64, rel: f64) -> Outcome {
    match (s, o) {
        (Val::Null, Val::Null) => Outcome::BothNull,
        (Val::Null, _) => Outcome::ServedNull,
        (_, Val::Null) => Outcome::OfflineNull,
        (Val::Exact(a, ua), Val::Exact(b, ub)) => exact(a, ua, b, ub, abs, rel),
        (Val::Num(a), Val::Num(b)) => floats(a, b, abs, rel),
        (Val::Num(a), Val::Exact(b, ub)) => floats(a, exact_f64(b, ub), abs, rel),
        (Val::Exact(a, ua), Val::Num(b)) => floats(exact_f64(a, ua), b, abs, rel),
        (Val::Text(a), Val::Text(b)) => {
            if a == b {
                Outcome::Equal
            } else {
                Outcome::Differ(None)
            }
        }
        (Val::NumList(a, s1, e1), Val::NumList(b, s2, e2)) => {
            if e1 - s1 != e2 - s2 {
                return Outcome::Differ(None);
            }
            let (Some(xs), Some(ys)) = (a.values().get(s1..e1), b.values().get(s2..e2)) else {
                return Outcome::Differ(None);
            };
            // A null element equals only a null element (its slot holds an arbitrary number).
            let nulls = a.null_count() > 0 || b.null_count() > 0;
            let mut worst = 0.0f64;
            let mut identical = true;
            for (k, (&x, &y)) in xs.iter().zip(ys).enumerate() {
                if nulls {
                    match (a.is_null(s1 + k), b.is_null(s2 + k)) {
                        (true, true) => continue,
                        (false, false) => {}
                        _ => return Outcome::Differ(None),
                    }
                }
                if x == y || (x.is_nan() && y.is_nan()) {
                    continue;
                }
                identical = false;
                match num_close(x, y, abs, rel) {
                    Ok(()) => worst = worst.max((x - y).abs()),
                    Err(d) => {
                        return Outcome::Differ(Some(if d.is_nan() { f64::INFINITY } else { d }));
                    }
                }
            }
            if identical {
                Outcome::Equal
            } else {
                Outcome::WithinTolerance(worst)
            }
        }
        (Val::TextList(a, s1, e1), Val::TextList(b, s2, e2)) => {
            let same = |k: usize| match (a.is_null(s1 + k), b.is_null(s2 + k)) {
                (true, true) => true,
                (false, false) => a.value(s1 + k) == b.value(s2 + k),
                _ => false,
            };
            if e1 - s1 == e2 - s2 && (0..e1 - s1).all(same) {
                Outcome::Equal
            } else {
                Outcome::Differ(None)
            }
        }
        _ => Outcome::Differ(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Float64Array;

    #[test]
    fn tolerance_is_absolute_or_relative() {
        assert_eq!(
            compare(Val::Num(1.0), Val::Num(1.0), 0.0, 0.0),
            Outcome::Equal
        );
        assert!(matches!(
            compare(Val::Num(1.0), Val::Num(1.005), 0.01, 0.0),
            Outcome::WithinTolerance(_)
        ));
        assert!(matches!(
            compare(Val::Num(1000.0), Val::Num(1000.5), 0.0, 1e-3),
            Outcome::WithinTolerance(_)
        ));
        assert!(matches!(
            compare(Val::Num(1.0), Val::Num(1.5), 0.01, 1e-3),
            Outcome::Differ(Some(_))
        ));
        assert_eq!(
            compare(Val::Num(f64::NAN), Val::Num(f64::NAN), 0.0, 0.0),
            Outcome::Equal
        );
        assert_eq!(
            compare(Val::Null, Val::Num(1.0), 0.0, 0.0),
            Outcome::ServedNull
        );
        assert_eq!(compare(Val::Null, Val::Null, 0.0, 0.0), Outcome::BothNull);
    }

    /// Exact numbers differ by one unit at any magnitude (f64 would merge ids beyond 2^53);
    /// decimals of two scales and an integer against a time (as microseconds) meet at a
    /// common scale; a tolerance applies only when given.
    #[test]
    fn exact_numbers_differ_by_one_unit() {
        let id = 1_500_000_000_000_000_001i128;
        assert_eq!(
            compare(
                Val::Exact(id, Unit::Int),
                Val::Exact(id - 1, Unit::Int),
                0.0,
                0.0
            ),
            Outcome::Differ(Some(1.0))
        );
        assert_eq!(
            compare(
                Val::Exact(id, Unit::Int),
                Val::Exact(id, Unit::Int),
                0.0,
                0.0
            ),
            Outcome::Equal
        );
        // 1.50 (scale 2) and 1.5000 (scale 4); 1.5 and 1.5001.
        let (a, b) = (Val::Exact(150, Unit::Decimal(2)), Unit::Decimal(4));
        assert_eq!(compare(a, Val::Exact(15_000, b), 0.0, 0.0), Outcome::Equal);
        match compare(a, Val::Exact(15_001, b), 0.0, 0.0) {
            Outcome::Differ(Some(d)) => assert!((d - 1e-4).abs() < 1e-12, "{d}"),
            other => panic!("{other:?}"),
        }
        // An integer of microseconds against a timestamp in nanoseconds.
        let ns = 1_700_000_000_000_000_000i128;
        assert_eq!(
            compare(
                Val::Exact(ns / 1000, Unit::Int),
                Val::Exact(ns, Unit::Timestamp),
                0.0,
                0.0
            ),
            Outcome::Equal
        );
        // Ten minutes, in microseconds; within a 15-minute tolerance.
        let ten_min = 600_000_000_000i128;
        let t = |v| Val::Exact(v, Unit::Timestamp);
        assert_eq!(
            compare(t(ns), t(ns + ten_min), 0.0, 0.0),
            Outcome::Differ(Some(6e8))
        );
        assert_eq!(
            compare(t(ns), t(ns + ten_min), 9e8, 0.0),
            Outcome::WithinTolerance(6e8)
        );
        // Against a float, as floats.
        assert_eq!(
            compare(Val::Exact(1, Unit::Int), Val::Num(1.0), 0.0, 0.0),
            Outcome::Equal
        );
        // Scales too far apart for i128: different, measured as floats.
        assert!(matches!(
            compare(
                Val::Exact(i128::MAX, Unit::Int),
                Val::Exact(1, Unit::Decimal(30)),
                0.0,
                0.0
            ),
            Outcome::Differ(Some(_))
        ));
        assert!(matches!(
            compare(
                Val::Exact(i128::MAX, Unit::Int),
                Val::Exact(i128::MIN, Unit::Int),
                0.0,
                0.0
            ),
            Outcome::Differ(Some(_))
        ));
    }

    /// An infinity matches only the same infinity: the relative tolerance of an infinite
    /// magnitude is infinite and must not apply.
    #[test]
    fn infinities_match_only_themselves() {
        let (inf, ninf) = (f64::INFINITY, f64::NEG_INFINITY);
        for (a, b) in [
            (inf, 0.0),
            (0.0, inf),
            (ninf, inf),
            (inf, 1e308),
            (ninf, f64::NAN),
        ] {
            assert_eq!(
                compare(Val::Num(a), Val::Num(b), 1.0, 1e-6),
                Outcome::Differ(Some(inf)),
                "{a} vs {b}"
            );
        }
        assert_eq!(
            compare(Val::Num(inf), Val::Num(inf), 0.0, 1e-6),
            Outcome::Equal
        );
        assert_eq!(
            compare(Val::Num(ninf), Val::Num(ninf), 0.0, 1e-6),
            Outcome::Equal
        );
        let l = |v: Vec<f64>| Float64Array::from(v);
        let (a, b) = (l(vec![1.0, inf]), l(vec![1.0, 0.0]));
        assert_eq!(
            compare(Val::NumList(&a, 0, 2), Val::NumList(&b, 0, 2), 0.0, 1e-6),
            Outcome::Differ(Some(inf))
        );
    }
}
