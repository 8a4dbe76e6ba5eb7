//! Events that apps publish (impressions, clicks, conversions), decoded from the protobuf
//! `featurelog.v1.Impression` or from JSON whose field names the config gives. Anything that
//! cannot be decoded is an [`EventError`] with a reason for the dead-letter topic.
//!
//! This file owns the decoded event, its errors and the two decoders; beside it,
//! `event_time.rs` reads event times and holds the window they must fall in, `json_fields.rs`
//! holds the configured names of JSON events' fields, and `pick.rs` takes those fields out of
//! a JSON payload.

use crate::reason::Reason;
use std::collections::BTreeMap;

use featurelog_schemas::featurelog::v1::{EventType, Impression};
use featurelog_schemas::schema_registry;
use prost::Message;

mod event_time;
mod json_fields;
mod pick;

pub(crate) use event_time::saturating_us;
pub use event_time::{END_EVENT_TIME_S, EVENT_TIME_WINDOW, MIN_EVENT_TIME_S, TimeUnit};
pub use json_fields::{EventTypes, JsonFields};

use event_time::{TimeError, event_time_us, numeric_text};
use pick::Picked;

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
    pub fn reason(&self) -> Reason {
        match self {
            EventError::Protobuf(_) => Reason::BadProtobuf,
            EventError::Json(_) => Reason::BadJson,
            EventError::Field { .. } => Reason::BadField,
            EventError::EventType(_) => Reason::UnknownEventType,
            EventError::TimeOutOfRange { .. } => Reason::EventTimeOutOfRange,
        }
    }
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

#[cfg(test)]
mod tests;
