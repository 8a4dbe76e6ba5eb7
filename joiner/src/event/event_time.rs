//! Event times: the window of times the joiner accepts, the one conversion of a time into
//! microseconds that checks it, and the reading of numeric times in a configured unit, exactly
//! from their digits.

use serde::{Deserialize, Serialize};

/// The earliest event time accepted, in seconds since the Unix epoch: 2000-01-01T00:00:00Z.
/// No app served features to a model before it; an earlier time is a unit mix-up, most often
/// epoch seconds in an epoch-milliseconds field (January 1970), which would otherwise join
/// nothing and be counted as impressions without features, with nothing to say why.
pub const MIN_EVENT_TIME_S: i64 = 946_684_800;
/// The first event time refused, in seconds since the Unix epoch: 2200-01-01T00:00:00Z. A fixed
/// bound, not the wall clock, so that replays of old data join as they did.
pub const END_EVENT_TIME_S: i64 = 7_258_118_400;
/// [`MIN_EVENT_TIME_S`]..[`END_EVENT_TIME_S`] as text, for errors.
pub const EVENT_TIME_WINDOW: &str = "2000-01-01T00:00:00Z..2200-01-01T00:00:00Z";

/// Why [`event_time_us`] refused a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimeError {
    /// The sub-second part is not in 0..1_000_000_000 nanoseconds.
    Nanos,
    /// Outside [`EVENT_TIME_WINDOW`].
    OutOfRange,
}

/// The one way an event time enters the joiner: `seconds` since the Unix epoch plus `nanos`
/// (0..1_000_000_000) into that second, as microseconds, when inside [`EVENT_TIME_WINDOW`].
/// Times outside it would pin watermarks in the far future and never expire.
pub(super) fn event_time_us(seconds: i64, nanos: i64) -> Result<i64, TimeError> {
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(TimeError::Nanos);
    }
    if !(MIN_EVENT_TIME_S..END_EVENT_TIME_S).contains(&seconds) {
        return Err(TimeError::OutOfRange);
    }
    seconds
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(nanos / 1000))
        .ok_or(TimeError::OutOfRange)
}

/// Microseconds since the Unix epoch of a timestamp of data the joiner already validated (or
/// wrote itself), saturating rather than overflowing on a value no valid record has.
pub(crate) fn saturating_us(t: &prost_types::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(t.nanos / 1000))
}

/// The unit of a numeric event time in JSON events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeUnit {
    /// Epoch seconds (Python's `time.time()`, Unix tools).
    Seconds,
    /// Epoch milliseconds (Java's `System.currentTimeMillis()`, JavaScript's `Date.now()`).
    #[default]
    Milliseconds,
    /// Epoch microseconds.
    Microseconds,
    /// Epoch nanoseconds.
    Nanoseconds,
}

impl TimeUnit {
    /// How many of the unit make a second.
    fn per_second(self) -> i64 {
        match self {
            TimeUnit::Seconds => 1,
            TimeUnit::Milliseconds => 1_000,
            TimeUnit::Microseconds => 1_000_000,
            TimeUnit::Nanoseconds => 1_000_000_000,
        }
    }

    /// Its name in the config.
    pub(super) fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Milliseconds => "milliseconds",
            TimeUnit::Microseconds => "microseconds",
            TimeUnit::Nanoseconds => "nanoseconds",
        }
    }

    /// Seconds since the epoch and nanoseconds into that second of `count` units, exactly.
    pub(super) fn split(self, count: i64) -> (i64, i64) {
        let per = self.per_second();
        (
            count.div_euclid(per),
            count.rem_euclid(per) * (1_000_000_000 / per),
        )
    }

    /// The same for a count written as a plain decimal (`1796222028547.283` milliseconds), read
    /// from its digits exactly: a fraction of a unit is kept to the nanosecond (digits past it
    /// are dropped). Going through the nearest double would put `...547.283` ms at `...547282`
    /// us. `None` when the text is no plain decimal.
    pub(super) fn split_decimal(self, text: &str) -> Option<(i64, i64)> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let all_digits = |t: &str| t.bytes().all(|c| c.is_ascii_digit());
        if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction)
        {
            return None;
        }
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        // Nanoseconds of the whole count plus those of its fraction, truncated at the
        // nanosecond; 19 fraction digits are past any unit's nanosecond.
        let ns_per_unit = i128::from(1_000_000_000 / self.per_second());
        let (mut numerator, mut denominator) = (0i128, 1i128);
        for c in fraction.bytes().take(19) {
            numerator = numerator * 10 + i128::from(c - b'0');
            denominator *= 10;
        }
        let mut total = whole.checked_mul(ns_per_unit)? + numerator * ns_per_unit / denominator;
        if negative {
            total = -total;
        }
        let seconds = i64::try_from(total.div_euclid(1_000_000_000)).ok()?;
        let nanos = i64::try_from(total.rem_euclid(1_000_000_000)).ok()?;
        Some((seconds, nanos))
    }
}

/// A number spelled as text (`"1764439200123"`, `"1764439200.5"`): digits with at most one
/// point and an optional leading minus; no exponent, no `inf` or `NaN`.
pub(super) fn numeric_text(s: &str) -> Option<serde_json::Number> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let plain = !digits.is_empty()
        && digits.bytes().all(|c| c.is_ascii_digit() || c == b'.')
        && digits.bytes().filter(|&c| c == b'.').count() <= 1
        && digits.bytes().any(|c| c.is_ascii_digit());
    if !plain {
        return None;
    }
    match s.parse::<i64>() {
        Ok(n) => Some(n.into()),
        Err(_) => s.parse::<f64>().ok().and_then(serde_json::Number::from_f64),
    }
}
