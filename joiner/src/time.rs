//! Calendar arithmetic, in one place and through chrono: RFC 3339 event times, and the UTC
//! hours of the dataset's `dt=YYYY-MM-DD/hr=HH` partitions. No system clock, no time zones.

use chrono::{DateTime, NaiveDate, SecondsFormat, Timelike};

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (RFC 3339) as seconds since the Unix epoch and
/// nanoseconds into that second (digits past the ninth are dropped). A date the calendar does
/// not have (`2026-02-31`) is `None`, as is anything that is not RFC 3339.
pub fn parse_rfc3339(text: &str) -> Option<(i64, i64)> {
    let at = DateTime::parse_from_rfc3339(text).ok()?;
    // A leap second (`23:59:60`) is the last instant of its minute's second 59.
    let nanos = i64::from(at.nanosecond() % 1_000_000_000);
    Some((at.timestamp(), nanos))
}

/// An event time as RFC 3339 text in UTC, to the microsecond, for messages.
pub fn rfc3339_us(time_us: i64) -> String {
    match DateTime::from_timestamp_micros(time_us) {
        Some(at) => at.to_rfc3339_opts(SecondsFormat::Micros, true),
        None => format!("{time_us} us since the epoch"),
    }
}

/// The hive partition of an event time: (`YYYY-MM-DD`, `HH`) in UTC.
pub fn hour_partition(time_us: i64) -> (String, String) {
    let hour_start = time_us.div_euclid(3_600_000_000) * 3_600;
    match DateTime::from_timestamp(hour_start, 0) {
        Some(at) => (
            at.format("%Y-%m-%d").to_string(),
            format!("{:02}", at.hour()),
        ),
        // Past chrono's ±262,000 years: no event time the joiner accepts is there.
        None => ("0000-01-01".into(), "00".into()),
    }
}

/// The start of hour `hh` of day `date` (`YYYY-MM-DD`), UTC, in epoch microseconds; `None`
/// when either is no such day or hour.
pub fn hour_start_us(date: &str, hh: &str) -> Option<i64> {
    if hh.len() != 2 {
        return None;
    }
    let day = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
    let hour: u32 = hh.parse().ok()?;
    let start = day.and_hms_opt(hour, 0, 0)?.and_utc();
    start.timestamp().checked_mul(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_reads_known_instants_and_refuses_days_the_calendar_lacks() {
        let us = |s: &str| parse_rfc3339(s).map(|(s, ns)| s * 1_000_000 + ns / 1000);
        assert_eq!(us("2025-11-29T18:00:00Z"), Some(1_764_439_200_000_000));
        assert_eq!(
            us("2025-11-29T19:00:00.25+01:00"),
            Some(1_764_439_200_250_000)
        );
        assert_eq!(
            us("2025-11-29T18:00:00.123456789123Z"),
            Some(1_764_439_200_123_456)
        );
        assert_eq!(us("2024-02-29T00:00:00Z"), Some(1_709_164_800_000_000));
        for bad in [
            "2026-02-31T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01",
            "",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn hour_partitions_are_utc_calendar_hours_and_invert() {
        assert_eq!(hour_partition(0), ("1970-01-01".into(), "00".into()));
        assert_eq!(
            hour_partition(1_764_439_200_000_000),
            ("2025-11-29".into(), "18".into())
        );
        assert_eq!(hour_partition(-1), ("1969-12-31".into(), "23".into()));
        assert_eq!(
            hour_partition(1_709_164_800_000_000 + 3_599_999_999),
            ("2024-02-29".into(), "00".into())
        );
        for t in [
            0,
            1_709_164_800_000_000,
            1_764_439_200_000_000,
            7_258_118_399_000_000,
        ] {
            let (dt, hr) = hour_partition(t);
            let start = hour_start_us(&dt, &hr).unwrap();
            assert!(start <= t && t < start + 3_600_000_000, "{t} {dt} {hr}");
        }
        assert_eq!(
            rfc3339_us(1_764_439_200_250_000),
            "2025-11-29T18:00:00.250000Z"
        );
        assert_eq!(hour_start_us("2026-02-31", "00"), None);
        assert_eq!(hour_start_us("2026-02-28", "24"), None);
        assert_eq!(hour_start_us("2026-02-28", "7"), None);
    }
}
