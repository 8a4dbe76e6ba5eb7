//! `[input]`: the feature-log and events topics, how each events topic's events are encoded,
//! and how the apps partition them.

use serde::{Deserialize, Serialize};

use crate::event::JsonFields;

/// How apps encode their events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventFormat {
    /// `featurelog.v1.Impression`.
    Protobuf,
    /// JSON objects with the field names of `[input.json-fields]`.
    Json,
}

/// The input topics.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InputConfig {
    /// The sidecars' FeatureLog topic.
    #[serde(default = "default_features_topic")]
    pub features_topic: String,
    /// The apps' impression/click/conversion topic, or several (`["app.impressions",
    /// "app.clicks"]`), all in `events-format`.
    pub events_topic: EventsTopics,
    /// How the events are encoded.
    #[serde(default = "default_format")]
    pub events_format: EventFormat,
    /// Field names of JSON events.
    #[serde(default)]
    pub json_fields: JsonFields,
    /// Per events topic, what differs from `events-format` and `json-fields` (apps that publish
    /// clicks from another service, in another encoding): `[input.per-topic."app.clicks"]`.
    #[serde(default)]
    pub per_topic: std::collections::BTreeMap<String, TopicFormat>,
    /// Undecodable records go here, with the reason in the `featurelog-error` header.
    #[serde(default = "default_dead_letter")]
    pub dead_letter_topic: String,
    /// How the apps partition the events topic (docs/JOINER.md, "Co-partitioned events").
    #[serde(default)]
    pub events_partitioning: EventsPartitioning,
    /// The sidecars' `sample-rate`: events of requests outside that sample (by the same hash
    /// of the request id, `featurelog_schemas::sampling`) are dropped as they are read, since
    /// no features were logged for them.
    #[serde(default = "default_sample_rate")]
    pub events_sample_rate: f64,
}

fn default_sample_rate() -> f64 {
    1.0
}

/// How one events topic's events are encoded, where it differs from the `[input]` defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TopicFormat {
    /// Its encoding; `input.events-format` when omitted.
    #[serde(default)]
    pub events_format: Option<EventFormat>,
    /// Its JSON field names, in full; `input.json-fields` when omitted.
    #[serde(default)]
    pub json_fields: Option<JsonFields>,
}

impl InputConfig {
    /// The encoding and JSON field names of the events of `topic`.
    pub fn format_of(&self, topic: &str) -> (EventFormat, &JsonFields) {
        let own = self.per_topic.get(topic);
        (
            own.and_then(|f| f.events_format)
                .unwrap_or(self.events_format),
            own.and_then(|f| f.json_fields.as_ref())
                .unwrap_or(&self.json_fields),
        )
    }
}

/// The events topics: one name, or a list of them (apps often publish impressions and clicks
/// to topics of their own). Written as a string when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsTopics(Vec<String>);

impl EventsTopics {
    /// The topics, in the order configured: the router numbers its sources by it.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Their names as written in logs and errors: `a`, or `a, b`.
    pub fn joined(&self) -> String {
        self.0.join(", ")
    }
}

impl std::fmt::Display for EventsTopics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.joined())
    }
}

impl From<&str> for EventsTopics {
    fn from(topic: &str) -> Self {
        Self(vec![topic.to_owned()])
    }
}

impl Serialize for EventsTopics {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for EventsTopics {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(topic) => Self(vec![topic]),
            OneOrMany::Many(topics) => Self(topics),
        })
    }
}

/// How the apps partition the events topic, which decides whether the joiner must move every
/// event to the partition of its request's feature logs first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventsPartitioning {
    /// As the apps like: the router moves every event through the repartition topic
    /// (`<group>.impressions-by-request`), inside Kafka transactions.
    #[default]
    Any,
    /// Keyed by request id with Kafka's murmur2 partitioner (the Java client's default for
    /// keyed records; librdkafka clients need `partitioner = "murmur2_random"`) into as many
    /// partitions as the feature-log topic has: each event is already in the partition of its
    /// request's feature logs, so join tasks read the events topic directly, with no router
    /// and no repartition topic. Checked at start-up (partition counts) and for every event
    /// (an event in another partition is dead-lettered as `not_co_partitioned`).
    ByRequestId,
}

impl EventsPartitioning {
    /// The setting as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            EventsPartitioning::Any => "any",
            EventsPartitioning::ByRequestId => "by-request-id",
        }
    }
}

fn default_features_topic() -> String {
    "featurelog.feature-log.v1".into()
}
fn default_format() -> EventFormat {
    EventFormat::Json
}
fn default_dead_letter() -> String {
    "featurelog.dead-letter".into()
}
