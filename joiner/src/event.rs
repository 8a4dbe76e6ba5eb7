//! Events that apps publish (impressions, clicks, conversions), decoded from the protobuf
//! `featurelog.v1.Impression` or from JSON whose field names the config gives. Anything that
//! cannot be decoded is an [`EventError`] with a reason for the dead-letter topic.

use std::collections::BTreeMap;

use featurelog_schemas::featurelog::v1::{EventType, Impression};
use featurelog_schemas::schema_registry;
use prost::Message;
use serde::{Deserialize, Serialize};

/// What happened to a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// Shown.
    Impression,
    /// Clicked.
    Click,
    /// Converted.
    Conversion,
    /// Another action, by name.
    Other(String),
}

/// One decoded event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The request that scored the candidate.
    pub request_id: String,
    /// The candidate.
    pub item_id: String,
    /// Event time, microseconds since the Unix epoch.
    pub time_us: i64,
    /// What happened.
    pub kind: EventKind,
    /// Label values that came with it.
    pub labels: BTreeMap<String, f64>,
    /// The event's own id, when the app gives one: a second event with the same id for the
    /// same request and item is a retry and counts once.
    pub event_id: Option<String>,
}

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EventError {
    /// Not a valid protobuf Impression.
    #[error("not a featurelog.v1.Impression: {0}")]
    Protobuf(String),
    /// Not valid JSON, or not an object.
    #[error("not a JSON object: {0}")]
    Json(String),
    /// A required field is missing or has the wrong type.
    #[error("field {field:?}: {problem}")]
    Field {
        /// The field name as configured.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The event type is not one the joiner knows and no name was given.
    #[error("unknown event type {0:?}")]
    EventType(String),
    /// The event time is a valid time outside the window the joiner accepts
    /// ([`EVENT_TIME_WINDOW`]): most likely a unit mix-up, such as microseconds or seconds in
    /// an epoch-milliseconds field.
    #[error(
        "field {field:?}: event time {value} is outside {EVENT_TIME_WINDOW}: a unit mix-up? (JSON events: input.json-fields.event-time-unit)"
    )]
    TimeOutOfRange {
        /// The field name as configured.
        field: String,
        /// The value as the event gave it.
        value: String,
    },
}

impl EventError {
    /// A short, stable reason for metric labels and dead-letter headers.
    pub fn reason(&self) -> &'static str {
        match self {
            EventError::Protobuf(_) => "bad_protobuf",
            EventError::Json(_) => "bad_json",
            EventError::Field { .. } => "bad_field",
            EventError::EventType(_) => "unknown_event_type",
            EventError::TimeOutOfRange { .. } => "event_time_out_of_range",
        }
    }
}

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
enum TimeError {
    /// The sub-second part is not in 0..1_000_000_000 nanoseconds.
    Nanos,
    /// Outside [`EVENT_TIME_WINDOW`].
    OutOfRange,
}

/// The one way an event time enters the joiner: `seconds` since the Unix epoch plus `nanos`
/// (0..1_000_000_000) into that second, as microseconds, when inside [`EVENT_TIME_WINDOW`].
/// Times outside it would pin watermarks in the far future and never expire.
fn event_time_us(seconds: i64, nanos: i64) -> Result<i64, TimeError> {
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

/// The field names of JSON events. A name with dots is a path into nested objects
/// (`properties.item_id`; a position for arrays), unless the event has a top-level key with
/// that very name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JsonFields {
    /// The request id field.
    #[serde(default = "default_request_id")]
    pub request_id: String,
    /// The item id field (string or integer).
    #[serde(default = "default_item_id")]
    pub item_id: String,
    /// The event time field: a number of `event_time_unit`s since the Unix epoch (a JSON
    /// number, or text of one) or RFC 3339 text.
    #[serde(default = "default_event_time")]
    pub event_time: String,
    /// The unit of a numeric event time.
    #[serde(default)]
    pub event_time_unit: TimeUnit,
    /// The event type field: a name of `event_types`, or any other name.
    #[serde(default = "default_event_type")]
    pub event_type: String,
    /// Which values of the event type field are impressions, clicks and conversions.
    #[serde(default)]
    pub event_types: EventTypes,
    /// Numeric fields copied as label values (booleans as 1 and 0).
    #[serde(default)]
    pub labels: Vec<String>,
    /// The event id field (string or integer), when the apps give each event an id of its
    /// own: an event whose id was already counted for its request and item (an app's or a
    /// collector's retry) is dropped and counted as `duplicate_events`. Events without it are
    /// all counted.
    #[serde(default)]
    pub event_id: Option<String>,
}

impl Default for JsonFields {
    fn default() -> Self {
        Self {
            request_id: default_request_id(),
            item_id: default_item_id(),
            event_time: default_event_time(),
            event_time_unit: TimeUnit::default(),
            event_type: default_event_type(),
            event_types: EventTypes::default(),
            labels: Vec::new(),
            event_id: None,
        }
    }
}

/// The values of a JSON event's type field that mean an impression, a click or a conversion,
/// compared without regard to ASCII case (`"CLICK"`, a Java enum's name, is a click). Apps name
/// their events as they like (`view`, `purchase`): an impression named otherwise than these
/// would write no row, and a click would count only as a label of its own name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EventTypes {
    /// Names of impressions (at least one).
    #[serde(default = "default_impressions")]
    pub impression: Vec<String>,
    /// Names of clicks.
    #[serde(default = "default_clicks")]
    pub click: Vec<String>,
    /// Names of conversions.
    #[serde(default = "default_conversions")]
    pub conversion: Vec<String>,
}

impl Default for EventTypes {
    fn default() -> Self {
        Self {
            impression: default_impressions(),
            click: default_clicks(),
            conversion: default_conversions(),
        }
    }
}

fn default_impressions() -> Vec<String> {
    vec!["impression".into()]
}
fn default_clicks() -> Vec<String> {
    vec!["click".into()]
}
fn default_conversions() -> Vec<String> {
    vec!["conversion".into()]
}

impl EventTypes {
    /// What an event type field's value means.
    fn kind(&self, value: &str) -> EventKind {
        let named = |names: &[String]| names.iter().any(|n| n.eq_ignore_ascii_case(value));
        if named(&self.impression) {
            EventKind::Impression
        } else if named(&self.click) {
            EventKind::Click
        } else if named(&self.conversion) {
            EventKind::Conversion
        } else {
            EventKind::Other(value.to_owned())
        }
    }

    /// Refuses lists that cannot be meant: no impression name, an empty name, or one name (in
    /// any case) for two kinds of event.
    pub fn check(&self) -> Result<(), String> {
        if self.impression.is_empty() {
            return Err("input.json-fields.event-types.impression must name at least one event type: without impressions no row is written".into());
        }
        let lists = [
            ("impression", &self.impression),
            ("click", &self.click),
            ("conversion", &self.conversion),
        ];
        for (i, (kind, names)) in lists.iter().enumerate() {
            for name in names.iter() {
                if name.is_empty() {
                    return Err(format!(
                        "input.json-fields.event-types.{kind} holds an empty name"
                    ));
                }
                for (other, others) in &lists[i + 1..] {
                    if others.iter().any(|o| o.eq_ignore_ascii_case(name)) {
                        return Err(format!(
                            "input.json-fields.event-types: {name:?} names both {kind}s and {other}s (names are compared without regard to case)"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
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
    fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Milliseconds => "milliseconds",
            TimeUnit::Microseconds => "microseconds",
            TimeUnit::Nanoseconds => "nanoseconds",
        }
    }

    /// Seconds since the epoch and nanoseconds into that second of `count` units, exactly.
    fn split(self, count: i64) -> (i64, i64) {
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
    fn split_decimal(self, text: &str) -> Option<(i64, i64)> {
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
fn numeric_text(s: &str) -> Option<serde_json::Number> {
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

fn default_request_id() -> String {
    "request_id".into()
}
fn default_item_id() -> String {
    "item_id".into()
}
fn default_event_time() -> String {
    "event_time".into()
}
fn default_event_type() -> String {
    "event_type".into()
}

/// Decodes a protobuf `featurelog.v1.Impression`.
pub fn from_protobuf(payload: &[u8]) -> Result<Event, EventError> {
    let payload = unframe(payload, true).map_err(EventError::Protobuf)?;
    let m = Impression::decode(payload).map_err(|e| EventError::Protobuf(e.to_string()))?;
    from_impression(m)
}

/// `payload` without the Confluent Schema Registry header (and, for `protobuf`, the message
/// indexes) that the Registry's serializers put in front of every record, when it has one; else
/// `payload` as it is ([`schema_registry`]), so apps on the Registry need no setting.
fn unframe(payload: &[u8], protobuf: bool) -> Result<&[u8], String> {
    match schema_registry::header(payload)? {
        None => Ok(payload),
        Some((_, rest)) if protobuf => schema_registry::skip_message_indexes(rest),
        Some((_, rest)) => Ok(rest),
    }
}

/// Checks a decoded Impression and turns it into an event.
pub fn from_impression(m: Impression) -> Result<Event, EventError> {
    let missing = |field: &str| EventError::Field {
        field: field.into(),
        problem: "missing or empty".into(),
    };
    if m.request_id.is_empty() {
        return Err(missing("request_id"));
    }
    if m.item_id.is_empty() {
        return Err(missing("item_id"));
    }
    let t = m.event_time.ok_or_else(|| missing("event_time"))?;
    let kind = match EventType::try_from(m.event_type) {
        Ok(EventType::Impression) => EventKind::Impression,
        Ok(EventType::Click) => EventKind::Click,
        Ok(EventType::Conversion) => EventKind::Conversion,
        Ok(EventType::Other) if !m.event_name.is_empty() => EventKind::Other(m.event_name),
        _ => {
            return Err(EventError::EventType(format!(
                "{} {:?}",
                m.event_type, m.event_name
            )));
        }
    };
    let time_us = event_time_us(t.seconds, i64::from(t.nanos)).map_err(|e| match e {
        TimeError::Nanos => EventError::Field {
            field: "event_time".into(),
            problem: format!("nanos {} is outside 0..1000000000", t.nanos),
        },
        TimeError::OutOfRange => EventError::TimeOutOfRange {
            field: "event_time".into(),
            value: format!("{}s {}ns", t.seconds, t.nanos),
        },
    })?;
    Ok(Event {
        request_id: m.request_id,
        item_id: m.item_id,
        time_us,
        kind,
        labels: m.labels.into_iter().collect(),
        event_id: Some(m.event_id).filter(|id| !id.is_empty()),
    })
}

/// Decodes a JSON event with the configured field names.
pub fn from_json(payload: &[u8], fields: &JsonFields) -> Result<Event, EventError> {
    let payload = unframe(payload, false).map_err(EventError::Json)?;
    let picked = Picked::parse(payload, fields)?;
    let missing = |name: &str| EventError::Field {
        field: name.into(),
        problem: "missing".into(),
    };
    let field = |value: Option<serde_json::Value>, name: &str| {
        value.filter(|v| !v.is_null()).ok_or_else(|| missing(name))
    };
    let id = |value: Option<serde_json::Value>, name: &str| -> Result<String, EventError> {
        match field(value, name)? {
            serde_json::Value::String(s) if !s.is_empty() => Ok(s),
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
            other => Err(EventError::Field {
                field: name.into(),
                problem: format!("expected a non-empty string or an integer, got {other}"),
            }),
        }
    };
    let out_of_range = |value: String| EventError::TimeOutOfRange {
        field: fields.event_time.clone(),
        value,
    };
    let unit = fields.event_time_unit;
    let number = |n: &serde_json::Number| -> Result<i64, EventError> {
        let split = match n.as_i64() {
            Some(count) => Some(unit.split(count)),
            // An integer past i64::MAX units.
            None if n.is_u64() => return Err(out_of_range(format!("{n} ({})", unit.name()))),
            // A JSON number with a fraction: serde_json reads it as the double nearest its text
            // (float_roundtrip), whose shortest decimal form is that text again for any time
            // written to the microsecond; its digits are read exactly.
            None => n.as_f64().and_then(|x| unit.split_decimal(&x.to_string())),
        };
        let (seconds, nanos) = split.ok_or_else(|| EventError::Field {
            field: fields.event_time.clone(),
            problem: format!("{n} is not a number of {}", unit.name()),
        })?;
        event_time_us(seconds, nanos).map_err(|_| out_of_range(format!("{n} ({})", unit.name())))
    };
    let time_us = match field(picked.event_time, &fields.event_time)? {
        serde_json::Value::Number(n) => number(&n)?,
        serde_json::Value::String(s) => match numeric_text(&s) {
            // Text holds the digits themselves: read them, not the double nearest them.
            Some(n) if !n.is_i64() && !n.is_u64() => {
                let (seconds, nanos) = unit.split_decimal(&s).ok_or_else(|| EventError::Field {
                    field: fields.event_time.clone(),
                    problem: format!("{s:?} is not a number of {}", unit.name()),
                })?;
                event_time_us(seconds, nanos)
                    .map_err(|_| out_of_range(format!("{s} ({})", unit.name())))?
            }
            Some(n) => number(&n)?,
            None => {
                let (seconds, nanos) =
                    crate::time::parse_rfc3339(&s).ok_or_else(|| EventError::Field {
                        field: fields.event_time.clone(),
                        problem: format!(
                            "{s:?} is neither RFC 3339 (2026-11-29T18:00:00Z) nor a number of {}",
                            unit.name()
                        ),
                    })?;
                event_time_us(seconds, nanos).map_err(|_| out_of_range(format!("{s:?}")))?
            }
        },
        other => {
            return Err(EventError::Field {
                field: fields.event_time.clone(),
                problem: format!(
                    "expected a number of {} or RFC 3339 text, got {other}",
                    unit.name()
                ),
            });
        }
    };
    let event_type = field(picked.event_type, &fields.event_type)?;
    let kind = match event_type.as_str() {
        Some(name) if !name.is_empty() => fields.event_types.kind(name),
        _ => return Err(EventError::EventType(event_type.to_string())),
    };
    let mut labels = BTreeMap::new();
    for (name, value) in fields.labels.iter().zip(picked.labels) {
        // A flag is a label as much as a number is (`"purchased": true` reads as 1).
        let number = |v: &serde_json::Value| v.as_f64().or_else(|| v.as_bool().map(f64::from));
        if let Some(v) = value.as_ref().and_then(number) {
            labels.insert(name.clone(), v);
        }
    }
    let event_id = match (&fields.event_id, picked.event_id) {
        (Some(name), Some(value)) if !value.is_null() && value != "" => {
            Some(id(Some(value), name)?)
        }
        // An event from an app that does not set it yet is counted like any other.
        _ => None,
    };
    Ok(Event {
        request_id: id(picked.request_id, &fields.request_id)?,
        item_id: id(picked.item_id, &fields.item_id)?,
        time_us,
        kind,
        labels,
        event_id,
    })
}

/// The configured fields of a JSON event, each the last occurrence of its name (as a parse
/// into a map keeps). Every other field is skipped without being built, and names are
/// compared where they lie in the payload: parsing whole events into `serde_json::Value`
/// maps allocated every key, and that was most of the cost of reading an event.
///
/// A dotted name is taken from the longest top-level key that reaches it (see [`reach`]): the
/// key that is the name itself, else the longest dotted prefix of it, whatever their order in
/// the event, and from that key's last occurrence even when it lacks the path.
#[derive(Default)]
struct Picked {
    request_id: Option<serde_json::Value>,
    item_id: Option<serde_json::Value>,
    event_time: Option<serde_json::Value>,
    event_type: Option<serde_json::Value>,
    event_id: Option<serde_json::Value>,
    /// By position in `JsonFields::labels`.
    labels: Vec<Option<serde_json::Value>>,
}

impl Picked {
    fn parse(payload: &[u8], fields: &JsonFields) -> Result<Self, EventError> {
        use serde::de::DeserializeSeed as _;
        let json = |e: serde_json::Error| EventError::Json(e.to_string());
        let mut de = serde_json::Deserializer::from_slice(payload);
        let picked = Pick(fields).deserialize(&mut de).map_err(json)?;
        de.end().map_err(json)?;
        Ok(picked)
    }
}

struct Pick<'f>(&'f JsonFields);

impl<'de> serde::de::DeserializeSeed<'de> for Pick<'_> {
    type Value = Picked;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Picked, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Pick<'_> {
    type Value = Picked;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Picked, A::Error> {
        let f = self.0;
        let mut picked = Picked {
            labels: vec![None; f.labels.len()],
            ..Picked::default()
        };
        // Per slot, the length of the key it was taken from: a shorter key that also reaches
        // the name (`a` for `a.b`, after the key `a.b`) does not replace it.
        let mut taken_from = [None::<usize>; 5];
        let mut labels_taken_from = vec![None::<usize>; f.labels.len()];
        let nearest = |taken_from: &mut Option<usize>, k: &str| {
            let nearer = taken_from.is_none_or(|len| k.len() >= len);
            if nearer {
                *taken_from = Some(k.len());
            }
            nearer
        };
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let k = key.0.as_ref();
            let slots = [
                reach(&f.request_id, k),
                reach(&f.item_id, k),
                reach(&f.event_time, k),
                reach(&f.event_type, k),
                f.event_id.as_deref().and_then(|name| reach(name, k)),
            ];
            let label = f.labels.iter().any(|l| reach(l, k).is_some());
            if !label && slots.iter().all(Option::is_none) {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            // A name configured twice (say, one field as two labels) fills every slot.
            let value: serde_json::Value = map.next_value()?;
            let slots = slots.into_iter().zip(&mut taken_from).zip([
                &mut picked.request_id,
                &mut picked.item_id,
                &mut picked.event_time,
                &mut picked.event_type,
                &mut picked.event_id,
            ]);
            for ((path, taken_from), slot) in slots {
                if let Some(path) = path.filter(|_| nearest(taken_from, k)) {
                    *slot = at(&value, path).cloned();
                }
            }
            let labels = f.labels.iter().zip(&mut labels_taken_from);
            for ((name, taken_from), slot) in labels.zip(&mut picked.labels) {
                if let Some(path) = reach(name, k).filter(|_| nearest(taken_from, k)) {
                    *slot = at(&value, path).cloned();
                }
            }
        }
        Ok(picked)
    }
}

/// How the configured field `name` reaches into the value of the top-level key `k`: all of it
/// (`Some("")`, the name is the key), the part under a dotted path (`properties.item_id` in the
/// key `properties`: `Some("item_id")`), or not at all. Analytics events nest their fields
/// (`{"event": ..., "properties": {"product_id": ...}}`); a top-level key that itself holds
/// a dot is still taken as it is.
fn reach<'n>(name: &'n str, k: &str) -> Option<&'n str> {
    if name == k {
        return Some("");
    }
    name.strip_prefix(k).and_then(|rest| rest.strip_prefix('.'))
}

/// The value at the dotted `path` under `value` (object keys, or array positions).
fn at<'v>(value: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    if path.is_empty() {
        return Some(value);
    }
    path.split('.').try_fold(value, |v, segment| match v {
        serde_json::Value::Object(m) => m.get(segment),
        serde_json::Value::Array(a) => segment.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// An object key, borrowed from the payload unless it has escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_with_default_and_custom_field_names() {
        let e = from_json(
            br#"{"request_id":"r1","item_id":42,"event_time":1764439200123,"event_type":"click"}"#,
            &JsonFields::default(),
        )
        .unwrap();
        assert_eq!((e.request_id.as_str(), e.item_id.as_str()), ("r1", "42"));
        assert_eq!(e.time_us, 1_764_439_200_123_000);
        assert_eq!(e.kind, EventKind::Click);

        let fields = JsonFields {
            request_id: "rid".into(),
            item_id: "sku".into(),
            event_time: "ts".into(),
            event_type: "action".into(),
            labels: vec!["dwell".into()],
            ..JsonFields::default()
        };
        let e = from_json(
            br#"{"rid":"r2","sku":"a-1","ts":"2025-11-29T18:00:00.5+01:00","action":"impression","dwell":3.5}"#,
            &fields,
        )
        .unwrap();
        assert_eq!(e.time_us, 1_764_435_600_500_000);
        assert_eq!(e.labels.get("dwell"), Some(&3.5));
    }

    #[test]
    fn json_fields_are_read_as_a_full_parse_would_read_them() {
        let f = JsonFields {
            labels: vec!["dwell".into(), "price".into()],
            ..JsonFields::default()
        };
        // Escaped names, other fields of every kind skipped, the last of a repeated name,
        // null as missing, a label that is not a number ignored.
        let e = from_json(
            br#"{"request_id":"r1","extra":{"a":[1,{"b":null}]},"item_id":"i0","item_id":"i1",
                "event_time":1764439201000,"event_type":"click","dwell":null,"price":"12","x":[true]}"#,
            &f,
        )
        .unwrap();
        assert_eq!((e.request_id.as_str(), e.item_id.as_str()), ("r1", "i1"));
        assert_eq!(
            (e.time_us, &e.kind),
            (1_764_439_201_000_000, &EventKind::Click)
        );
        assert!(e.labels.is_empty(), "{:?}", e.labels);
        // One field named twice in the config fills both.
        let twice = JsonFields {
            labels: vec!["event_time".into()],
            ..JsonFields::default()
        };
        let e = from_json(
            br#"{"request_id":7,"item_id":"i","event_time":1764439200005,"event_type":"impression"}"#,
            &twice,
        )
        .unwrap();
        assert_eq!(e.request_id, "7");
        assert_eq!(e.labels.get("event_time"), Some(&1_764_439_200_005.0));
        // Trailing garbage after the object is not JSON.
        assert_eq!(
            from_json(
                br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"click"} x"#,
                &f
            )
            .unwrap_err()
            .reason(),
            "bad_json"
        );
        let err = from_json(
            br#"{"request_id":"r","item_id":true,"event_time":1764439200123,"event_type":"click"}"#,
            &f,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "field \"item_id\": expected a non-empty string or an integer, got true"
        );
    }

    #[test]
    fn bad_events_say_why() {
        let f = JsonFields::default();
        for (payload, reason) in [
            (&b"{not json"[..], "bad_json"),
            (b"[1,2]", "bad_json"),
            (br#"{"item_id":"i","event_time":1764439200123,"event_type":"click"}"#, "bad_field"),
            (br#"{"request_id":"r","item_id":"i","event_time":"yesterday","event_type":"click"}"#, "bad_field"),
            (br#"{"request_id":"r","item_id":1.5,"event_time":1764439200123,"event_type":"click"}"#, "bad_field"),
            (br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":""}"#, "unknown_event_type"),
        ] {
            assert_eq!(from_json(payload, &f).unwrap_err().reason(), reason, "{:?}", String::from_utf8_lossy(payload));
        }
        assert_eq!(
            from_protobuf(&[0xff, 0xff]).unwrap_err().reason(),
            "bad_protobuf"
        );
    }

    #[test]
    fn protobuf_events_decode() {
        let m = Impression {
            request_id: "r".into(),
            item_id: "i".into(),
            event_time: Some(prost_types::Timestamp {
                seconds: 1_764_439_200,
                nanos: 5_000,
            }),
            event_type: EventType::Conversion as i32,
            event_name: String::new(),
            labels: [("revenue".to_string(), 9.5)].into(),
            event_id: "ev-7".into(),
        };
        let e = from_protobuf(&m.encode_to_vec()).unwrap();
        assert_eq!(e.time_us, 1_764_439_200_000_005);
        assert_eq!(e.kind, EventKind::Conversion);
        assert_eq!(e.labels.get("revenue"), Some(&9.5));
        assert_eq!(e.event_id.as_deref(), Some("ev-7"));
        // Unset, it is no id (proto3 cannot tell an empty string from a missing one).
        let e = from_protobuf(
            &Impression {
                event_id: String::new(),
                ..m
            }
            .encode_to_vec(),
        )
        .unwrap();
        assert_eq!(e.event_id, None);
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        let us = |s: &str| crate::time::parse_rfc3339(s).map(|(s, ns)| s * 1_000_000 + ns / 1000);
        assert_eq!(us("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(us("2000-03-01T00:00:00Z"), Some(951_868_800_000_000));
        assert_eq!(us("2025-11-29T18:00:00.25Z"), Some(1_764_439_200_250_000));
        assert_eq!(
            us("2025-11-29T19:30:00.123456789+01:30"),
            Some(1_764_439_200_123_456)
        );
        assert_eq!(
            us("2025-11-29 16:00:00.0000001-02:00"),
            Some(1_764_439_200_000_000)
        );
        assert_eq!(
            crate::time::parse_rfc3339("2200-01-01T00:00:00Z"),
            Some((END_EVENT_TIME_S, 0))
        );
        assert_eq!(us("2026-13-29T18:00:00Z"), None);
    }

    /// Event times in JSON with a malformed offset or other bytes where digits belong, non-ASCII
    /// characters included: each is refused as a bad field, none panics (slicing text by byte
    /// positions used to panic inside a multi-byte character).
    #[test]
    fn malformed_rfc3339_times_are_bad_fields_not_panics() {
        let f = JsonFields::default();
        for time in [
            "2025-11-29T18:00:00+0é00",
            "2025-11-29T18:00:00+00é0",
            "2025-11-29T18:00:00+é:00",
            "2025-11-29T18:00:00+00:é",
            "2025-11-29T18:00:00é0:00",
            "2025-11-29T18:00:00.5+0é00",
            "2025-11-29T18:00:00.é",
            "2025-11-29T18:00:00+01x00",
            "2025-11-29T18:00:00+1:000",
            "2025-11-29T18:00:00+-1:00",
            "2025-11-29T18:00:00++1:00",
            "2025-11-29T18:00:00+24:00",
            "2025-11-29T18:00:00+01:60",
            "2025-11-29T18:00:00+01:00Z",
            "2025-11-29T18:00:00+01",
            "2025-11-29T18:00:00+",
            "2025-11-29T18:00:00",
            "2025-11-29T18:00:00.Z",
            "2025-11-29T+8:00:00Z",
            "2025-11-29T18x00x00Z",
            "2025-11-29T18:00:0éZ",
            "2025-1é-29T18:00:00Z",
            "é025-11-29T18:00:00Z",
            "2025-11-29T18:00:00ZZ",
            "2025-11-29T18:00:00Zé",
        ] {
            let payload = format!(
                r#"{{"request_id":"r","item_id":"i","event_time":"{time}","event_type":"click"}}"#
            );
            let err = from_json(payload.as_bytes(), &f).unwrap_err();
            assert_eq!(err.reason(), "bad_field", "{time:?}: {err}");
        }
    }

    /// Event times before 2000 or from 2200 on, however they come, are refused with their own
    /// reason: microseconds in an epoch-milliseconds field (the year ~57,000) used to pass and
    /// pin the watermark in the far future, and seconds there (January 1970) joined nothing.
    #[test]
    fn event_times_outside_the_window_are_refused_and_say_so() {
        let f = JsonFields::default();
        let json = |time: &str| {
            from_json(
                format!(
                    r#"{{"request_id":"r","item_id":"i","event_time":{time},"event_type":"click"}}"#
                )
                .as_bytes(),
                &f,
            )
        };
        for time in [
            "1764439200123000",
            "7258118400000",
            "-1",
            "0",
            "1764439200",
            "946684799999",
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
            r#""2200-01-01T00:00:00Z""#,
            r#""9999-12-31T23:59:59.999999Z""#,
            r#""1969-12-31T23:59:59.999999Z""#,
            r#""1970-01-01T00:30:00+01:00""#,
            r#""1999-12-31T23:59:59.999999Z""#,
            r#""1764439200""#,
            r#""0000-01-01T00:00:00Z""#,
        ] {
            let err = json(time).unwrap_err();
            assert_eq!(err.reason(), "event_time_out_of_range", "{time}: {err}");
            assert!(err.to_string().contains(EVENT_TIME_WINDOW), "{err}");
        }
        // The edges of the window.
        assert_eq!(
            json("946684800000").map(|e| e.time_us),
            Ok(946_684_800_000_000)
        );
        assert_eq!(
            json("7258118399999").map(|e| e.time_us),
            Ok(7_258_118_399_999_000)
        );
        assert_eq!(
            json(r#""2199-12-31T23:59:59.999999Z""#).map(|e| e.time_us),
            Ok(7_258_118_399_999_999)
        );

        let impression = |seconds: i64, nanos: i32| {
            from_impression(Impression {
                request_id: "r".into(),
                item_id: "i".into(),
                event_time: Some(prost_types::Timestamp { seconds, nanos }),
                event_type: EventType::Impression as i32,
                event_name: String::new(),
                labels: Default::default(),
                event_id: String::new(),
            })
        };
        for (seconds, nanos) in [
            (i64::MAX, 999_999_999),
            (i64::MIN, 0),
            (-1, 999_999_999),
            (0, 0),
            (MIN_EVENT_TIME_S - 1, 999_999_999),
            (END_EVENT_TIME_S, 0),
            (1_764_439_200_123, 0),
        ] {
            let err = impression(seconds, nanos).unwrap_err();
            assert_eq!(
                err.reason(),
                "event_time_out_of_range",
                "{seconds} {nanos}: {err}"
            );
        }
        for nanos in [-1, i32::MIN, 1_000_000_000, i32::MAX] {
            let err = impression(1_764_439_200, nanos).unwrap_err();
            assert_eq!(err.reason(), "bad_field", "{nanos}: {err}");
            assert!(err.to_string().contains("nanos"), "{err}");
        }
        assert_eq!(
            impression(END_EVENT_TIME_S - 1, 999_999_999).map(|e| e.time_us),
            Ok(7_258_118_399_999_999)
        );
        assert_eq!(
            impression(MIN_EVENT_TIME_S, 0).map(|e| e.time_us),
            Ok(946_684_800_000_000)
        );
    }

    /// The event time of a JSON click whose `event_time` is `time` (JSON text) in `unit`.
    fn time_at(unit: TimeUnit, time: &str) -> Result<i64, EventError> {
        let f = JsonFields {
            event_time_unit: unit,
            ..JsonFields::default()
        };
        from_json(
            format!(
                r#"{{"request_id":"r","item_id":"i","event_time":{time},"event_type":"click"}}"#
            )
            .as_bytes(),
            &f,
        )
        .map(|e| e.time_us)
    }

    /// A fraction is read from the number's decimal digits, not from the double nearest them.
    #[test]
    fn fractional_times_are_read_from_their_digits_to_the_microsecond() {
        let at = time_at;
        // Every microsecond of a millisecond, from numbers and from text: the nearest double
        // of `...547.283` is below it, and read through it the time was 1 us early.
        let ms = 1_796_222_028_547i64;
        for us in 0..1000 {
            let want = Ok(ms * 1000 + us);
            let text = format!("{ms}.{us:03}");
            assert_eq!(at(TimeUnit::Milliseconds, &text), want, "{text}");
            assert_eq!(at(TimeUnit::Milliseconds, &format!("\"{text}\"")), want);
        }
        assert_eq!(
            at(TimeUnit::Milliseconds, "1796222028547.283"),
            Ok(1_796_222_028_547_283)
        );
        // Seconds written to the microsecond, and a fraction past it dropped, not rounded.
        for us in [0, 1, 283, 999_999, 547_283] {
            let want = Ok(1_796_222_028_000_000 + us);
            assert_eq!(at(TimeUnit::Seconds, &format!("1796222028.{us:06}")), want);
            assert_eq!(
                at(TimeUnit::Seconds, &format!("\"1796222028.{us:06}\"")),
                want
            );
        }
        assert_eq!(
            at(TimeUnit::Seconds, r#""1796222028.5472839""#),
            Ok(1_796_222_028_547_283)
        );
        assert_eq!(
            at(TimeUnit::Microseconds, r#""1796222028547283.9""#),
            Ok(1_796_222_028_547_283)
        );
    }

    #[test]
    fn an_rfc3339_day_the_calendar_lacks_is_a_bad_field() {
        let event = br#"{"request_id":"r","item_id":"i","event_time":"2026-02-31T00:00:00Z","event_type":"click"}"#;
        let err = from_json(event, &JsonFields::default()).unwrap_err();
        assert_eq!(err.reason(), "bad_field", "{err}");
        assert!(err.to_string().contains("2026-02-31"), "{err}");
    }

    /// Apps send event times in the unit their language makes easy: each configured unit reads
    /// integers exactly, fractions to the nanosecond, and numbers sent as text; the same instant
    /// comes out of each.
    #[test]
    fn event_times_in_every_unit_read_the_same_instant() {
        let at = time_at;
        let instant = Ok(1_764_439_200_250_000);
        for (unit, times) in [
            (
                TimeUnit::Seconds,
                ["1764439200.25", r#""1764439200.25""#, "1764439200.250000"],
            ),
            (
                TimeUnit::Milliseconds,
                ["1764439200250", r#""1764439200250""#, "1764439200250.0"],
            ),
            (
                TimeUnit::Microseconds,
                [
                    "1764439200250000",
                    r#""1764439200250000""#,
                    "1.76443920025e15",
                ],
            ),
            (
                TimeUnit::Nanoseconds,
                [
                    "1764439200250000000",
                    r#""1764439200250000000""#,
                    r#""1764439200250000000""#,
                ],
            ),
        ] {
            for time in times {
                assert_eq!(at(unit, time), instant, "{unit:?} {time}");
            }
        }
        // A millisecond's fraction is kept to the microsecond.
        assert_eq!(
            at(TimeUnit::Milliseconds, "1764439200250.5"),
            Ok(1_764_439_200_250_500)
        );
        // Seconds where milliseconds are configured: refused, and the message says how to fix it.
        let err = at(TimeUnit::Milliseconds, "1764439200").unwrap_err();
        assert_eq!(err.reason(), "event_time_out_of_range");
        assert!(
            err.to_string().contains("1764439200 (milliseconds)"),
            "{err}"
        );
        assert!(err.to_string().contains("event-time-unit"), "{err}");
        // Milliseconds where seconds are configured: the year ~57,000.
        assert_eq!(
            at(TimeUnit::Seconds, "1764439200250").unwrap_err().reason(),
            "event_time_out_of_range"
        );
        // Text that is neither a number nor RFC 3339, and numbers that are not times.
        for time in [
            r#""1e12""#,
            r#""NaN""#,
            r#""inf""#,
            r#""1.2.3""#,
            r#""-""#,
            r#""""#,
            r#"" 1764439200250""#,
        ] {
            let err = at(TimeUnit::Milliseconds, time).unwrap_err();
            assert_eq!(err.reason(), "bad_field", "{time}: {err}");
        }
        assert_eq!(
            at(TimeUnit::Seconds, "1e300").unwrap_err().reason(),
            "bad_field"
        );
        // Config spelling (the joiner's config tests read it from TOML and the environment).
        let fields: JsonFields = serde_json::from_str(r#"{"event-time-unit":"seconds"}"#).unwrap();
        assert_eq!(fields.event_time_unit, TimeUnit::Seconds);
        assert!(serde_json::from_str::<JsonFields>(r#"{"event-time-unit":"minutes"}"#).is_err());
    }

    /// An app's own names for its events, in any case, are the events they are configured
    /// as; the defaults match in any case too; names that cannot be meant are refused.
    #[test]
    fn event_types_are_the_apps_names_in_any_case() {
        let kind = |fields: &JsonFields, name: &str| {
            from_json(
                format!(
                    r#"{{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"{name}"}}"#
                )
                .as_bytes(),
                fields,
            )
            .map(|e| e.kind)
        };
        let defaults = JsonFields::default();
        for (name, expected) in [
            ("impression", EventKind::Impression),
            ("IMPRESSION", EventKind::Impression),
            ("Click", EventKind::Click),
            ("CONVERSION", EventKind::Conversion),
            ("view", EventKind::Other("view".into())),
            ("Dwell", EventKind::Other("Dwell".into())),
        ] {
            assert_eq!(kind(&defaults, name), Ok(expected), "{name}");
        }
        let app: JsonFields = serde_json::from_str(
            r#"{"event-types":{"impression":["view","exposure"],"conversion":["purchase"]}}"#,
        )
        .unwrap();
        assert!(app.event_types.check().is_ok());
        for (name, expected) in [
            ("VIEW", EventKind::Impression),
            ("exposure", EventKind::Impression),
            // Not an impression any more: only the names given are.
            ("impression", EventKind::Other("impression".into())),
            ("click", EventKind::Click),
            ("Purchase", EventKind::Conversion),
            ("conversion", EventKind::Other("conversion".into())),
        ] {
            assert_eq!(kind(&app, name), Ok(expected), "{name}");
        }
        for (types, says) in [
            (r#"{"impression":[]}"#, "at least one"),
            (r#"{"click":[""]}"#, "empty name"),
            (
                r#"{"impression":["view"],"click":["View"]}"#,
                "names both impressions and clicks",
            ),
            (
                r#"{"click":["tap"],"conversion":["TAP"]}"#,
                "names both clicks and conversions",
            ),
        ] {
            let t: EventTypes = serde_json::from_str(types).unwrap();
            let err = t.check().unwrap_err();
            assert!(err.contains(says), "{types}: {err}");
        }
    }

    /// Apps whose producers use Confluent Schema Registry serializers put a header in front of
    /// every record: the events read as without it, JSON and protobuf (message indexes of every
    /// length); a header cut short is a bad record, not a panic.
    #[test]
    fn schema_registry_framed_events_read_as_plain_ones() {
        let json =
            br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"click"}"#;
        let header = [schema_registry::MAGIC, 0, 0, 0, 42];
        let plain = from_json(json, &JsonFields::default()).unwrap();
        let framed = from_json(&[&header[..], json].concat(), &JsonFields::default()).unwrap();
        assert_eq!(framed, plain);

        let m = Impression {
            request_id: "r".into(),
            item_id: "i".into(),
            event_time: Some(prost_types::Timestamp {
                seconds: 1_764_439_200,
                nanos: 0,
            }),
            event_type: EventType::Impression as i32,
            event_name: String::new(),
            labels: Default::default(),
            event_id: String::new(),
        }
        .encode_to_vec();
        let plain = from_protobuf(&m).unwrap();
        // [0] as its shorthand, [0] spelled out, and [1, 2] (zigzag: count 2 is 4).
        for indexes in [&[0u8][..], &[2, 0], &[4, 1, 2]] {
            let framed = [&header[..], indexes, &m].concat();
            assert_eq!(from_protobuf(&framed).unwrap(), plain, "{indexes:?}");
        }
        for cut in [&[0u8][..], &[0, 0, 0], &[0, 0, 0, 0, 42]] {
            assert_eq!(
                from_protobuf(cut).unwrap_err().reason(),
                "bad_protobuf",
                "{cut:?}"
            );
            assert_eq!(
                from_json(cut, &JsonFields::default()).unwrap_err().reason(),
                "bad_json",
                "{cut:?}"
            );
        }
        let too_many = [&header[..], &[0xff, 0x01]].concat();
        assert!(
            from_protobuf(&too_many)
                .unwrap_err()
                .to_string()
                .contains("indexes"),
            "{:?}",
            from_protobuf(&too_many)
        );
    }

    /// Fields of nested objects (as analytics events nest them) are reached by dotted paths;
    /// a missing one is missing; a top-level key that holds a dot is taken as it is.
    #[test]
    fn dotted_field_names_reach_into_nested_objects() {
        let fields = JsonFields {
            request_id: "context.request.id".into(),
            item_id: "properties.product_id".into(),
            event_time: "timestamp".into(),
            event_type: "event".into(),
            labels: vec!["properties.price".into(), "properties.tags.1".into()],
            ..JsonFields::default()
        };
        let e = from_json(
            br#"{"event":"click","timestamp":"2025-11-29T18:00:00Z",
                "context":{"request":{"id":"r1"},"ip":"10.0.0.1"},
                "properties":{"product_id":42,"price":9.5,"tags":[0,3]}}"#,
            &fields,
        )
        .unwrap();
        assert_eq!((e.request_id.as_str(), e.item_id.as_str()), ("r1", "42"));
        assert_eq!(e.labels.get("properties.price"), Some(&9.5));
        assert_eq!(e.labels.get("properties.tags.1"), Some(&3.0));
        let err = from_json(
            br#"{"event":"click","timestamp":"2025-11-29T18:00:00Z","context":{"request":{}},
                "properties":{"product_id":42}}"#,
            &fields,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "field \"context.request.id\": missing");
        let literal = JsonFields {
            request_id: "meta.rid".into(),
            ..JsonFields::default()
        };
        let e = from_json(
            br#"{"meta.rid":"r2","item_id":"i","event_time":1764439200123,"event_type":"click"}"#,
            &literal,
        )
        .unwrap();
        assert_eq!(e.request_id, "r2");
    }

    #[test]
    fn boolean_labels_read_as_one_and_zero() {
        let f = JsonFields {
            labels: vec!["purchased".into(), "returned".into(), "price".into()],
            ..JsonFields::default()
        };
        let e = from_json(
            br#"{"request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"conversion",
                "purchased":true,"returned":false,"price":"12"}"#,
            &f,
        )
        .unwrap();
        assert_eq!(e.labels.get("purchased"), Some(&1.0));
        assert_eq!(e.labels.get("returned"), Some(&0.0));
        // Text is not a number, even when it spells one.
        assert_eq!(e.labels.get("price"), None);
    }

    #[test]
    fn event_ids_are_read_when_configured_and_absent_ones_are_no_id() {
        let f = JsonFields {
            event_id: Some("meta.event_id".into()),
            ..JsonFields::default()
        };
        let base =
            r#""request_id":"r","item_id":"i","event_time":1764439200123,"event_type":"click""#;
        let read = |extra: &str| from_json(format!("{{{base}{extra}}}").as_bytes(), &f);
        assert_eq!(
            read(r#","meta":{"event_id":"3f1c"}"#)
                .unwrap()
                .event_id
                .as_deref(),
            Some("3f1c")
        );
        assert_eq!(
            read(r#","meta":{"event_id":77}"#)
                .unwrap()
                .event_id
                .as_deref(),
            Some("77")
        );
        // An app that does not send one yet: its events count as they always did.
        for extra in [
            "",
            r#","meta":{}"#,
            r#","meta":{"event_id":null}"#,
            r#","meta":{"event_id":""}"#,
        ] {
            assert_eq!(read(extra).unwrap().event_id, None, "{extra}");
        }
        let err = read(r#","meta":{"event_id":{"a":1}}"#).unwrap_err();
        assert_eq!(err.reason(), "bad_field");
        assert!(err.to_string().contains("meta.event_id"), "{err}");
        // Not configured: never read, even when the event carries one.
        let e = from_json(
            format!(r#"{{{base},"event_id":"x"}}"#).as_bytes(),
            &JsonFields::default(),
        )
        .unwrap();
        assert_eq!(e.event_id, None);
    }

    #[test]
    fn saturating_us_saturates() {
        let t = |seconds, nanos| saturating_us(&prost_types::Timestamp { seconds, nanos });
        assert_eq!(t(10, 5_000), 10_000_005);
        assert_eq!(t(i64::MAX, 999_999_999), i64::MAX);
        assert_eq!(t(i64::MIN, -999_999_999), i64::MIN);
    }
}
