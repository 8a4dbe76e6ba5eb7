//! How numbers and times print in reports: floats in their shortest form (scientific when
//! very large or very small, so that 1.234e-100 and 2.5e-100 stay apart), decimals with their
//! scale, times as ISO 8601 in UTC, durations in their largest sensible unit.

use chrono::{DateTime, NaiveTime, SecondsFormat};

use super::Unit;

const NANOS_PER_SECOND: i128 = 1_000_000_000;
const NANOS_PER_DAY: i128 = 86_400 * NANOS_PER_SECOND;

/// Shortest text that reads back as the same f64: `1`, `0.1`, and in scientific notation below
/// 1e-5 or from 1e16 on (`1.234e-100`, `1e20`), where positional digits would run long or
/// read as zero.
pub(crate) fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        format!("{v}")
    } else if v != 0.0 && !(1e-5..1e16).contains(&a) {
        format!("{v:e}")
    } else if v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// An exact number as its unit reads: an integer, `true`/`false`, a decimal with its scale
/// (`1.50`), a timestamp as ISO 8601 in UTC (`2024-01-01T00:00:00.123Z`), a date
/// (`2024-01-01`), a time of day (`12:30:00`), a duration (`10m 5s`).
pub(crate) fn fmt_exact(v: i128, unit: Unit) -> String {
    match unit {
        Unit::Int => v.to_string(),
        Unit::Bool => (v != 0).to_string(),
        Unit::Decimal(s) => fmt_decimal(v, s),
        Unit::Timestamp => fmt_timestamp(v),
        Unit::Date if v.rem_euclid(NANOS_PER_DAY) == 0 => {
            match timestamp(v.div_euclid(NANOS_PER_SECOND), 0) {
                Some(t) => t.format("%Y-%m-%d").to_string(),
                None => fmt_timestamp(v),
            }
        }
        Unit::Date => fmt_timestamp(v),
        Unit::Time => {
            let (secs, nanos) = (
                v.div_euclid(NANOS_PER_SECOND),
                v.rem_euclid(NANOS_PER_SECOND),
            );
            u32::try_from(secs)
                .ok()
                .zip(u32::try_from(nanos).ok())
                .and_then(|(s, n)| NaiveTime::from_num_seconds_from_midnight_opt(s, n))
                .map_or_else(
                    || fmt_duration_ns(v),
                    |t| t.format("%H:%M:%S%.f").to_string(),
                )
        }
        Unit::Duration => fmt_duration_ns(v),
    }
}

fn timestamp(secs: i128, nanos: i128) -> Option<DateTime<chrono::Utc>> {
    DateTime::from_timestamp(i64::try_from(secs).ok()?, u32::try_from(nanos).ok()?)
}

/// Nanoseconds since the epoch as ISO 8601 in UTC, with 0, 3, 6 or 9 fractional digits.
fn fmt_timestamp(ns: i128) -> String {
    match timestamp(
        ns.div_euclid(NANOS_PER_SECOND),
        ns.rem_euclid(NANOS_PER_SECOND),
    ) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        None => format!("{ns}ns since 1970-01-01T00:00:00Z"),
    }
}

fn fmt_decimal(v: i128, scale: i8) -> String {
    if scale <= 0 {
        if v == 0 {
            return "0".into();
        }
        return format!("{v}{}", "0".repeat(usize::from(scale.unsigned_abs())));
    }
    let digits = v.unsigned_abs().to_string();
    let scale = usize::from(scale.unsigned_abs());
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int}.{frac}", if v < 0 { "-" } else { "" })
}

/// A duration of `ns` nanoseconds as humantime prints it (`1h 2m 3s 4ms`), signed.
fn fmt_duration_ns(ns: i128) -> String {
    let abs = ns.unsigned_abs();
    let d = std::time::Duration::new(
        u64::try_from(abs / 1_000_000_000).unwrap_or(u64::MAX),
        (abs % 1_000_000_000) as u32,
    );
    let sign = if ns < 0 { "-" } else { "" };
    format!("{sign}{}", humantime::format_duration(d))
}

/// A number in comparison units as its unit reads (times are microseconds, printed as ISO
/// 8601 or a duration, to the microsecond); plain numbers as [`fmt_num`]. For bin edges,
/// which are f64.
pub(crate) fn fmt_number(v: f64, unit: Option<Unit>) -> String {
    match unit {
        // To the microsecond: an f64 of microseconds since the epoch holds no finer.
        Some(u) if u.is_time() && v.is_finite() => {
            fmt_exact((v.round() as i128).saturating_mul(1000), u)
        }
        Some(Unit::Bool) => (v != 0.0).to_string(),
        _ => fmt_num(v),
    }
}

/// A length of time in microseconds, in its largest unit with up to three significant digits
/// (`1ms`, `16.7min`, `2.78h`, `1.16d`): for tolerances and difference buckets.
pub(crate) fn fmt_duration_us(us: f64) -> String {
    if !us.is_finite() {
        return format!("{us}");
    }
    const UNITS: [(f64, &str); 7] = [
        (1e-3, "ns"),
        (1.0, "us"),
        (1e3, "ms"),
        (1e6, "s"),
        (60e6, "min"),
        (3600e6, "h"),
        (86_400e6, "d"),
    ];
    const YEAR: f64 = 365.25 * 86_400e6;
    if us == 0.0 {
        return "0s".into();
    }
    let a = us.abs();
    let (per, name) = if a >= YEAR {
        (YEAR, "y")
    } else {
        UNITS
            .iter()
            .rev()
            .find(|(per, _)| a >= *per)
            .copied()
            .unwrap_or(UNITS[0])
    };
    let x = us / per;
    // Three significant digits, trailing zeros dropped.
    let digits = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{x:.digits$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text}{name}")
}

/// A bound of the difference histogram: a duration for times, otherwise a power of ten
/// (`1e-3`); 0 as `0`.
pub(crate) fn fmt_decade(x: f64, time: bool) -> String {
    if x == 0.0 {
        "0".into()
    } else if time {
        fmt_duration_us(x)
    } else {
        format!("{x:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Very small and very large floats print in scientific notation, never as a run of
    /// zeros that makes two different values look alike.
    #[test]
    fn floats_print_shortest_and_scientific_at_the_extremes() {
        assert_eq!(fmt_num(1.234e-100), "1.234e-100");
        assert_eq!(fmt_num(2.5e-100), "2.5e-100");
        assert_ne!(fmt_num(1.234e-100), fmt_num(2.5e-100));
        assert_eq!(fmt_num(1e300), "1e300");
        assert_eq!(fmt_num(-3.5e20), "-3.5e20");
        assert_eq!(fmt_num(1.0), "1");
        assert_eq!(fmt_num(0.1), "0.1");
        assert_eq!(fmt_num(0.00012), "0.00012");
        assert_eq!(fmt_num(1e15), "1000000000000000");
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(f64::INFINITY), "inf");
        assert_eq!(fmt_num(f64::NAN), "NaN");
        for v in [1.234e-100, 2.5e-100, 1e300, 0.1, 123.456, -7e-9] {
            assert_eq!(fmt_num(v).parse::<f64>().ok(), Some(v), "{v}");
        }
    }

    #[test]
    fn exact_numbers_print_as_their_unit() {
        let ns = 1_700_000_000_123_000_000i128;
        assert_eq!(fmt_exact(ns, Unit::Timestamp), "2023-11-14T22:13:20.123Z");
        assert_eq!(
            fmt_exact(ns - 123_000_000, Unit::Timestamp),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            fmt_exact(-1, Unit::Timestamp),
            "1969-12-31T23:59:59.999999999Z"
        );
        assert!(fmt_exact(i128::MAX, Unit::Timestamp).contains("since 1970"));
        assert_eq!(fmt_exact(19_675 * NANOS_PER_DAY, Unit::Date), "2023-11-14");
        assert_eq!(
            fmt_exact(45_000 * NANOS_PER_SECOND + 500_000_000, Unit::Time),
            "12:30:00.500"
        );
        assert_eq!(fmt_exact(605 * NANOS_PER_SECOND, Unit::Duration), "10m 5s");
        assert_eq!(fmt_exact(-NANOS_PER_SECOND, Unit::Duration), "-1s");
        assert_eq!(fmt_exact(150, Unit::Decimal(2)), "1.50");
        assert_eq!(fmt_exact(-5, Unit::Decimal(3)), "-0.005");
        assert_eq!(fmt_exact(12, Unit::Decimal(-2)), "1200");
        assert_eq!(fmt_exact(1, Unit::Bool), "true");
        assert_eq!(fmt_exact(i128::MIN, Unit::Int), i128::MIN.to_string());
        assert_eq!(
            fmt_number(1_700_000_000_123_000.0, Some(Unit::Timestamp)),
            "2023-11-14T22:13:20.123Z"
        );
        // Beyond any date: a number of nanoseconds, not a panic.
        assert!(fmt_number(f64::MAX, Some(Unit::Timestamp)).contains("since 1970"));
    }

    #[test]
    fn durations_in_their_largest_unit() {
        assert_eq!(fmt_duration_us(1e3), "1ms");
        assert_eq!(fmt_duration_us(3.6e9), "1h");
        assert_eq!(fmt_duration_us(1e9), "16.7min");
        assert_eq!(fmt_duration_us(0.5), "500ns");
        assert_eq!(fmt_duration_us(1e14), "3.17y");
        assert_eq!(fmt_duration_us(0.0), "0s");
        assert_ne!(fmt_decade(1e3, true), fmt_decade(1e9, true));
        assert_eq!(fmt_decade(1e-3, false), "1e-3");
    }
}
