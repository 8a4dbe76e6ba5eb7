//! The configured names of JSON events' fields (`[input.json-fields]`), and which values of
//! the event type field mean an impression, a click or a conversion.

use serde::{Deserialize, Serialize};

use super::{EventKind, TimeUnit};

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
    pub(super) fn kind(&self, value: &str) -> EventKind {
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
