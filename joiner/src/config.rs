//! The joiner's configuration: a TOML file with `FEATURELOG_JOIN__SECTION__KEY` environment
//! overrides, validated before anything starts (`featurelog join --check-config`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};

use featurelog_kafka::KafkaConfig;
use serde::{Deserialize, Serialize};

use crate::event::JsonFields;

/// The prefix of environment overrides.
pub const ENV_PREFIX: &str = "FEATURELOG_JOIN__";

/// How apps encode their events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventFormat {
    /// `featurelog.v1.Impression`.
    Protobuf,
    /// JSON objects with the field names of `[input.json-fields]`.
    Json,
}

/// The whole joiner configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JoinerConfig {
    /// The consumer group; joiners with the same group split the work. Also names the
    /// repartition topic (`<group>.impressions-by-request`).
    #[serde(default = "default_group")]
    pub group: String,
    /// This process's name (transactional id suffix); defaults to `$HOSTNAME`, else the pid.
    #[serde(default)]
    pub instance: Option<String>,
    /// Join the consumer groups as static members named after `instance`: a process restarted
    /// with the same instance takes its tasks back without a rebalance, but one that stops
    /// for good (or comes back under another name, like a Deployment's pod) leaves its tasks
    /// unowned until `session.timeout.ms`. Set false where instance names change on restart.
    #[serde(default = "default_static_membership")]
    pub static_membership: bool,
    /// Where Kafka is.
    pub kafka: KafkaConfig,
    /// The input topics.
    pub input: InputConfig,
    /// The join windows.
    #[serde(default)]
    pub join: WindowConfig,
    /// The dataset.
    pub output: OutputConfig,
    /// The operator endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
}

/// `/metrics`, `/healthz` and `/readyz`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address of the endpoint (default 0.0.0.0:9465).
    pub listen: std::net::SocketAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([0, 0, 0, 0], 9465)),
        }
    }
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

/// The join windows, in event time.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WindowConfig {
    /// How long a request's features wait for impressions.
    #[serde(default = "default_features_wait", with = "humantime_serde")]
    pub features_wait: Duration,
    /// How long an impression waits for its features.
    #[serde(default = "default_impressions_wait", with = "humantime_serde")]
    pub impressions_wait: Duration,
    /// Clicks and conversions this long after an impression fold into its row; omit to emit
    /// rows at the impression.
    #[serde(default, with = "humantime_serde")]
    pub label_window: Option<Duration>,
    /// How far behind the newest event of an input older events may still arrive.
    #[serde(default = "default_out_of_orderness", with = "humantime_serde")]
    pub max_out_of_orderness: Duration,
    /// An event dated further than this ahead of the watermark is dead-lettered as
    /// `event_time_in_future` instead of held: a wrong clock or unit would otherwise keep it in
    /// the state until the watermark reaches it, years later.
    #[serde(default = "default_max_event_time_ahead", with = "humantime_serde")]
    pub max_event_time_ahead: Duration,
    /// How far (event time) a task reads one of its inputs ahead of the other: a partition
    /// further ahead is paused until the other input is within half of this, so that a
    /// backlog waits in Kafka rather than in the join state (a joiner catching up, a router
    /// that was down). The state then holds about `features-wait + max-read-ahead` of traffic
    /// however long the backlog; the rows are the same.
    #[serde(default = "default_max_read_ahead", with = "humantime_serde")]
    pub max_read_ahead: Duration,
    /// When an input partition has been read to its end and nothing new came for this long, its
    /// side of the watermark moves to the wall clock (minus `max-out-of-orderness`), so windows
    /// close and hours complete in quiet periods. The router decides it for each events
    /// partition and says so in the repartition topic; a join task decides it for its
    /// feature-log partition.
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Fraction of scored, never impressed candidates written as negatives.
    #[serde(default)]
    pub negatives_sample_rate: f64,
    /// Memory bound of each task's state; the oldest features are evicted past it.
    #[serde(default = "default_state_bytes")]
    pub state_max_bytes: usize,
    /// Where checkpoints keep the feature logs a task holds (docs/JOINER.md, "Held logs by
    /// offset").
    #[serde(default)]
    pub held_logs: HeldLogs,
}

/// Where checkpoints keep the feature logs a task holds while they wait for impressions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeldLogs {
    /// `topic` when the feature-log topic's retention covers [`JoinerConfig::held_logs_retention`],
    /// else `state-files` (and a log line that says why).
    #[default]
    Auto,
    /// State files name each held log's offset in the feature-log topic; a restore reads the
    /// logs back from there. Refused at start-up when the topic may delete records too soon.
    Topic,
    /// State files hold a copy of each held log's bytes (written once).
    StateFiles,
}

/// The dataset.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OutputConfig {
    /// A local directory (relative paths are relative to the config file), or
    /// `s3://bucket/prefix` for S3 and S3-compatible object storage (see `object-store`).
    pub path: PathBuf,
    /// How often each task commits its rows, state and offsets.
    #[serde(default = "default_flush_interval", with = "humantime_serde")]
    pub flush_interval: Duration,
    /// A task also commits as soon as it holds this many rows, before `flush-interval`. Rows
    /// keep their feature logs in memory until they are written: this bounds that memory
    /// when the joiner reads a backlog at full speed (after downtime, or a new consumer
    /// group), where a whole interval's reading would otherwise wait in memory.
    #[serde(default = "default_flush_rows")]
    pub flush_rows: usize,
    /// A task also commits as soon as its rows hold this many bytes (estimated: the rows and
    /// the feature logs they point at, each log once), before `flush-interval` and
    /// `flush-rows`: a row keeps its request's whole feature log in memory until it is
    /// written, and logs of many candidates make a few rows hold a lot.
    #[serde(default = "default_flush_bytes")]
    pub flush_bytes: usize,
    /// Rows per Parquet row group.
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: usize,
    /// At most this many rows per file: a flush's rows of one hour are split into several
    /// files past it. Default: one file per hour per flush.
    #[serde(default)]
    pub max_file_rows: Option<usize>,
    /// Checkpoints kept per task (the newest ones; at least 2). Older ones are deleted after
    /// commits; a process stalled for longer than this many commits of the task's new owner
    /// finds its checkpoint gone and drops the task (docs/JOINER.md, "Checkpoint retention").
    #[serde(default = "default_checkpoints_kept")]
    pub checkpoints_kept: u64,
    /// zstd level of the Parquet pages.
    #[serde(default = "default_zstd_level")]
    pub zstd_level: i32,
    /// Rows go under `model=<model name>/dt=.../hr=...` instead of `dt=.../hr=...`, with an
    /// hour's `_SUCCESS` marker per model, so that a model's training job reads (and waits
    /// for) its own files only. Fixed for a dataset by its first joiner.
    #[serde(default)]
    pub partition_by_model: bool,
    /// How to reach the object store of an `s3://` path.
    #[serde(default)]
    pub object_store: Option<ObjectStoreConfig>,
}

/// How to reach S3 or an S3-compatible store. Whatever is not set here comes from the
/// environment as the AWS tools read it (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, web identity and
/// instance credentials): credentials belong there, not in the file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ObjectStoreConfig {
    /// The endpoint of an S3-compatible store, e.g. `http://minio:9000`; omit for AWS S3.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The bucket's region (S3-compatible stores accept any, conventionally `us-east-1`).
    #[serde(default)]
    pub region: Option<String>,
    /// Allow an `http://` endpoint (local and in-cluster stores only).
    #[serde(default)]
    pub allow_http: Option<bool>,
    /// Any other setting of object_store's S3 client, by its name (`aws_*`, see
    /// `AmazonS3ConfigKey`), e.g. `aws_virtual_hosted_style_request = "true"`.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

/// Where the dataset lives, from [`OutputConfig::location`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputLocation {
    /// A local directory.
    Local(PathBuf),
    /// A bucket of S3 or an S3-compatible store, and the key prefix inside it ("" for the root).
    S3 {
        /// The bucket.
        bucket: String,
        /// The prefix, without slashes at either end.
        prefix: String,
    },
}

impl OutputConfig {
    /// Where `path` points.
    pub fn location(&self) -> Result<OutputLocation, String> {
        let text = self.path.to_string_lossy();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Ok(OutputLocation::Local(self.path.clone()));
        };
        if scheme != "s3" {
            return Err(format!(
                "output.path {text:?}: only local paths and s3:// URLs are supported"
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("output.path {text:?} names no bucket"));
        }
        Ok(OutputLocation::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
        })
    }

    /// The S3 client for `bucket`: the environment's AWS settings, then `[output.object-store]`.
    /// Makes no request.
    pub fn build_s3(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(o) = &self.object_store {
            // object_store takes several names for one setting (`endpoint`, `aws_endpoint`,
            // `aws_endpoint_url`): set twice, one would silently win, by the order of the
            // names. Which one the operator meant is theirs to say.
            let mut set: Vec<(AmazonS3ConfigKey, String)> = Vec::new();
            let mut once = |key: AmazonS3ConfigKey, spelling: String| {
                if let Some((_, first)) = set.iter().find(|(k, _)| *k == key) {
                    return Err(format!(
                        "output.object-store: {} and {spelling} are the same S3 setting ({}); keep one",
                        first,
                        key.as_ref()
                    ));
                }
                set.push((key, spelling));
                Ok(())
            };
            if let Some(endpoint) = &o.endpoint {
                once(AmazonS3ConfigKey::Endpoint, "endpoint".into())?;
                builder = builder.with_endpoint(endpoint);
            }
            if let Some(region) = &o.region {
                once(AmazonS3ConfigKey::Region, "region".into())?;
                builder = builder.with_region(region);
            }
            if let Some(allow) = o.allow_http {
                once(
                    AmazonS3ConfigKey::Client(object_store::ClientConfigKey::AllowHttp),
                    "allow-http".into(),
                )?;
                builder = builder.with_allow_http(allow);
            }
            for (key, value) in &o.options {
                // Written either way in files (aws-x or aws_x); object_store wants underscores.
                let parsed = AmazonS3ConfigKey::from_str(&key.replace('-', "_")).map_err(|_| {
                    format!("output.object-store.options: unknown S3 setting {key:?}")
                })?;
                once(parsed, format!("options.{key}"))?;
                builder = builder.with_config(parsed, value);
            }
        }
        builder
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            .map_err(|e| format!("output.object-store: {e}"))
    }
}

fn default_group() -> String {
    "featurelog-joiner".into()
}
fn default_static_membership() -> bool {
    true
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
fn default_features_wait() -> Duration {
    Duration::from_secs(30 * 60)
}
fn default_impressions_wait() -> Duration {
    Duration::from_secs(5 * 60)
}
fn default_max_event_time_ahead() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_max_read_ahead() -> Duration {
    Duration::from_secs(30)
}
fn default_out_of_orderness() -> Duration {
    Duration::from_secs(5)
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_state_bytes() -> usize {
    1 << 30
}
fn default_flush_interval() -> Duration {
    Duration::from_secs(10)
}
/// `output.flush-rows` when the config does not set it.
pub const DEFAULT_FLUSH_ROWS: usize = 200_000;
fn default_flush_rows() -> usize {
    DEFAULT_FLUSH_ROWS
}
fn default_flush_bytes() -> usize {
    64 << 20
}
fn default_row_group_rows() -> usize {
    64 * 1024
}
fn default_checkpoints_kept() -> u64 {
    crate::sink::DEFAULT_CHECKPOINTS_KEPT
}
fn default_zstd_level() -> i32 {
    3
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            features_wait: default_features_wait(),
            impressions_wait: default_impressions_wait(),
            label_window: None,
            max_out_of_orderness: default_out_of_orderness(),
            max_event_time_ahead: default_max_event_time_ahead(),
            max_read_ahead: default_max_read_ahead(),
            idle_timeout: default_idle_timeout(),
            negatives_sample_rate: 0.0,
            state_max_bytes: default_state_bytes(),
            held_logs: HeldLogs::default(),
        }
    }
}

/// Why a config was refused.
#[derive(Debug, thiserror::Error)]
#[error("config {path}: {message}")]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

impl JoinerConfig {
    /// Reads `path`, applies environment overrides and validates.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_owned(),
            message: format!("cannot read it: {e}"),
        })?;
        let env = featurelog_ops::environment(ENV_PREFIX).map_err(|message| ConfigError {
            path: path.to_owned(),
            message,
        })?;
        Self::from_toml_with_env(path, &text, env)
    }

    /// Parses `text` (the file at `path`) with overrides from `env`, then validates.
    pub fn from_toml_with_env(
        path: &Path,
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError {
            path: path.to_owned(),
            message,
        };
        let env: Vec<(String, String)> = env.into_iter().collect();
        let mut config: JoinerConfig =
            featurelog_ops::extract_config(text, ENV_PREFIX, env.clone())
                .map_err(|e| err(featurelog_kafka::mask_secrets(&e, text, &env)))?;
        match config.output.location().map_err(err)? {
            OutputLocation::Local(local) => {
                if config.output.object_store.is_some() {
                    return Err(err(
                        "output.object-store applies only to an s3:// output.path".into(),
                    ));
                }
                if local.is_relative() {
                    let base = path.parent().unwrap_or(Path::new("."));
                    config.output.path = base.join(local);
                }
            }
            OutputLocation::S3 { bucket, .. } => {
                config.output.build_s3(&bucket).map_err(err)?;
            }
        }
        if config.output.checkpoints_kept < 2 {
            return Err(err(
                "output.checkpoints-kept must be at least 2: a restore may still be reading the one before the newest".into(),
            ));
        }
        if config.output.flush_rows == 0 {
            return Err(err("output.flush-rows must be at least 1".into()));
        }
        if config.output.flush_bytes == 0 {
            return Err(err("output.flush-bytes must be at least 1".into()));
        }
        if let Err(e) = parquet::basic::ZstdLevel::try_new(config.output.zstd_level) {
            return Err(err(format!(
                "output.zstd-level {} is not a level the Parquet writer accepts: {e}",
                config.output.zstd_level
            )));
        }
        if config.output.max_file_rows == Some(0) {
            return Err(err("output.max-file-rows must be at least 1".into()));
        }
        let j = &config.join;
        if !(0.0..=1.0).contains(&j.negatives_sample_rate) {
            return Err(err(
                "join.negatives-sample-rate must be between 0 and 1".into()
            ));
        }
        if config.output.flush_interval.is_zero() {
            return Err(err("output.flush-interval must be longer than zero".into()));
        }
        if j.max_read_ahead.is_zero() {
            return Err(err("join.max-read-ahead must be longer than zero".into()));
        }
        if j.max_event_time_ahead.is_zero() {
            return Err(err(
                "join.max-event-time-ahead must be longer than zero".into()
            ));
        }
        if config.group.is_empty() || config.input.events_topic.names().is_empty() {
            return Err(err("group and input.events-topic must not be empty".into()));
        }
        config.kafka.check().map_err(err)?;
        let i = &config.input;
        i.json_fields.event_types.check().map_err(err)?;
        for (topic, format) in &i.per_topic {
            if !i.events_topic.names().contains(topic) {
                return Err(err(format!(
                    "input.per-topic names {topic:?}, which input.events-topic does not list"
                )));
            }
            if let Some(fields) = &format.json_fields {
                fields.event_types.check().map_err(err)?;
            }
        }
        if !(0.0..=1.0).contains(&i.events_sample_rate) {
            return Err(err(
                "input.events-sample-rate must be between 0 and 1 (the sidecars' sample-rate)"
                    .into(),
            ));
        }
        let events = i.events_topic.names();
        for (what, topic) in [
            ("input.features-topic", &i.features_topic),
            ("input.dead-letter-topic", &i.dead_letter_topic),
        ]
        .into_iter()
        .chain(events.iter().map(|t| ("input.events-topic", t)))
        {
            featurelog_kafka::check_topic_name(what, topic).map_err(err)?;
        }
        // The router numbers its sources `topic index << 20 | partition` (see
        // `run::source_id`): a few topics of up to a million partitions each.
        if events.len() > 64 {
            return Err(err("input.events-topic lists more than 64 topics".into()));
        }
        for (n, topic) in events.iter().enumerate() {
            if events[..n].contains(topic) {
                return Err(err(format!("input.events-topic lists {topic:?} twice")));
            }
        }
        if events.len() > 1 && i.events_partitioning == EventsPartitioning::ByRequestId {
            return Err(err(format!(
                "input.events-partitioning = \"by-request-id\" reads one events topic, co-partitioned with the feature logs, but input.events-topic lists {}: route them (events-partitioning = \"any\", the default)",
                events.len()
            )));
        }
        // The group names the joiner's own repartition topic.
        featurelog_kafka::check_topic_name(
            "group (in its repartition topic)",
            &config.repartition_topic(),
        )
        .map_err(err)?;
        if events.contains(&i.features_topic)
            || i.dead_letter_topic == i.features_topic
            || events.contains(&i.dead_letter_topic)
        {
            return Err(err(
                "input.features-topic, input.events-topic and input.dead-letter-topic must be three different topics".into(),
            ));
        }
        if config.join.state_max_bytes == 0 || config.output.row_group_rows == 0 {
            return Err(err(
                "join.state-max-bytes and output.row-group-rows must be at least 1".into(),
            ));
        }
        Ok(config)
    }

    /// The repartition topic.
    pub fn repartition_topic(&self) -> String {
        format!("{}.impressions-by-request", self.group)
    }

    /// The instance name.
    pub fn instance_name(&self) -> String {
        self.instance
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("pid{}", std::process::id()))
    }

    /// How long the feature-log topic must keep records for checkpoints to refer to held logs
    /// by offset: the longest a log is held (`features-wait` plus the label window, since a
    /// matched impression keeps its log until the window closes, plus the out-of-orderness the
    /// watermark allows), plus a day in which a stopped joiner can still be restarted from its
    /// checkpoints.
    pub fn held_logs_retention(&self) -> Duration {
        self.join.features_wait
            + self.join.label_window.unwrap_or_default()
            + self.join.max_out_of_orderness
            + Duration::from_secs(24 * 3600)
    }

    /// The join's windows and bounds, for an events topic of `event_sources` partitions.
    pub fn join_config(&self, event_sources: u32) -> crate::state::JoinConfig {
        let us = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        crate::state::JoinConfig {
            features_wait_us: us(self.join.features_wait),
            impressions_wait_us: us(self.join.impressions_wait),
            label_window_us: self.join.label_window.map(us),
            max_out_of_orderness_us: us(self.join.max_out_of_orderness),
            negatives_rate: self.join.negatives_sample_rate,
            max_bytes: self.join.state_max_bytes,
            event_sources,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [kafka]
        bootstrap-servers = "k:9092"
        [input]
        events-topic = "app.events"
        [output]
        path = "data"
    "#;

    #[test]
    fn settings_that_could_only_fail_at_run_time_are_refused_at_load() {
        let refused = |env: &[(&str, &str)], expected: &str| {
            let env: Vec<(String, String)> = env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let err = JoinerConfig::from_toml_with_env(Path::new("join.toml"), MINIMAL, env)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err}");
        };
        refused(
            &[("FEATURELOG_JOIN__KAFKA__BOOTSTRAP_SERVERS", "")],
            "bootstrap-servers is empty",
        );
        refused(
            &[("FEATURELOG_JOIN__INPUT__DEAD_LETTER_TOPIC", "dead letters")],
            "not a legal Kafka topic name",
        );
        refused(
            &[("FEATURELOG_JOIN__GROUP", "my group")],
            "repartition topic",
        );
        refused(
            &[(
                "FEATURELOG_JOIN__INPUT__EVENTS_TOPIC",
                "featurelog.feature-log.v1",
            )],
            "three different topics",
        );
        refused(
            &[("FEATURELOG_JOIN__JOIN__STATE_MAX_BYTES", "0")],
            "state-max-bytes",
        );
        // A misspelt librdkafka property, whose value could be a password.
        let text = format!("{MINIMAL}\n[kafka.properties]\n\"sasl.pasword\" = \"hunter2\"\n");
        let text = text.replacen("[kafka]\n        bootstrap-servers = \"k:9092\"", "", 1);
        let text = format!("[kafka]\nbootstrap-servers = \"k:9092\"\n{text}");
        let err = JoinerConfig::from_toml_with_env(Path::new("join.toml"), &text, Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sasl.pasword") && !err.contains("hunter2"),
            "{err}"
        );
    }

    #[test]
    fn events_topics_are_one_name_or_a_list() {
        let load = |topics: &str, env: &[(&str, &str)]| {
            let text = MINIMAL.replace("\"app.events\"", topics);
            let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
            JoinerConfig::from_toml_with_env(Path::new("join.toml"), &text, env.collect::<Vec<_>>())
        };
        let one = load("\"app.events\"", &[]).unwrap();
        assert_eq!(one.input.events_topic.names(), ["app.events"]);
        let two = load("[\"app.impressions\", \"app.clicks\"]", &[]).unwrap();
        assert_eq!(
            two.input.events_topic.names(),
            ["app.impressions", "app.clicks"]
        );
        assert_eq!(
            two.input.events_topic.to_string(),
            "app.impressions, app.clicks"
        );
        // Written back as it was read (the check-config output, the docs).
        assert_eq!(
            serde_json::to_value(&one.input.events_topic).unwrap(),
            serde_json::json!("app.events")
        );
        let env = load(
            "\"x\"",
            &[("FEATURELOG_JOIN__INPUT__EVENTS_TOPIC", "[a, b]")],
        )
        .unwrap();
        assert_eq!(env.input.events_topic.names(), ["a", "b"]);
        let refused = |topics: &str, extra: &[(&str, &str)], expected: &str| {
            let err = load(topics, extra).unwrap_err().to_string();
            assert!(err.contains(expected), "{topics}: {err}");
        };
        refused("[]", &[], "must not be empty");
        refused("[\"a\", \"a\"]", &[], "twice");
        refused("[\"a\", \"bad name\"]", &[], "not a legal Kafka topic name");
        refused(
            "[\"a\", \"featurelog.feature-log.v1\"]",
            &[],
            "three different topics",
        );
        refused(
            "[\"a\", \"b\"]",
            &[(
                "FEATURELOG_JOIN__INPUT__EVENTS_PARTITIONING",
                "by-request-id",
            )],
            "reads one events topic",
        );
    }

    #[test]
    fn a_topic_of_its_own_may_have_its_own_encoding_and_fields() {
        let load = |extra: &str| {
            let text = MINIMAL.replace(
                "events-topic = \"app.events\"",
                "events-topic = [\"app.events\", \"app.clicks\"]",
            );
            JoinerConfig::from_toml_with_env(
                Path::new("join.toml"),
                &format!("{text}\n{extra}"),
                Vec::new(),
            )
        };
        let c = load(
            "[input.per-topic.\"app.clicks\"]\nevents-format = \"protobuf\"\n\
             [input.per-topic.\"app.events\".json-fields]\nitem-id = \"sku\"",
        )
        .unwrap();
        let (format, _) = c.input.format_of("app.clicks");
        assert_eq!(format, EventFormat::Protobuf);
        let (format, fields) = c.input.format_of("app.events");
        assert_eq!(
            (format, fields.item_id.as_str()),
            (EventFormat::Json, "sku")
        );
        // Given in full: the other names are the built-in defaults.
        assert_eq!(fields.request_id, "request_id");
        let err = load("[input.per-topic.\"app.views\"]\nevents-format = \"json\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not list"), "{err}");
        let err = load("[input.per-topic.\"app.clicks\".json-fields.event-types]\nimpression = []")
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least one"), "{err}");
    }

    #[test]
    fn defaults_and_overrides() {
        let c = JoinerConfig::from_toml_with_env(
            Path::new("/etc/fl/join.toml"),
            MINIMAL,
            [(
                "FEATURELOG_JOIN__JOIN__LABEL_WINDOW".to_string(),
                "10m".to_string(),
            )],
        )
        .unwrap();
        assert_eq!(c.output.path, Path::new("/etc/fl/data"));
        assert_eq!(c.input.events_format, EventFormat::Json);
        assert_eq!(c.join.label_window, Some(Duration::from_secs(600)));
        assert_eq!(
            c.repartition_topic(),
            "featurelog-joiner.impressions-by-request"
        );
        assert_eq!(c.join_config(1).features_wait_us, 1_800_000_000);
        assert_eq!(c.input.events_partitioning, EventsPartitioning::Any);
        assert!(c.static_membership);
    }

    #[test]
    fn the_event_time_unit_comes_from_the_file_or_the_environment() {
        let with = |text: &str, env: Vec<(String, String)>| {
            JoinerConfig::from_toml_with_env(Path::new("join.toml"), text, env)
                .map(|c| c.input.json_fields.event_time_unit)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            with(MINIMAL, Vec::new()),
            Ok(crate::event::TimeUnit::Milliseconds)
        );
        let in_file = format!("{MINIMAL}\n[input.json-fields]\nevent-time-unit = \"seconds\"\n");
        assert_eq!(
            with(&in_file, Vec::new()),
            Ok(crate::event::TimeUnit::Seconds)
        );
        let from_env = vec![(
            "FEATURELOG_JOIN__INPUT__JSON_FIELDS__EVENT_TIME_UNIT".to_string(),
            "microseconds".to_string(),
        )];
        assert_eq!(
            with(MINIMAL, from_env),
            Ok(crate::event::TimeUnit::Microseconds)
        );
        let err = with(&in_file.replace("\"seconds\"", "\"minutes\""), Vec::new()).unwrap_err();
        assert!(err.to_string().contains("milliseconds"), "{err}");
    }

    #[test]
    fn an_events_sample_rate_outside_0_to_1_is_refused() {
        for rate in ["-0.1", "1.5", "nan"] {
            let err = JoinerConfig::from_toml_with_env(
                Path::new("join.toml"),
                MINIMAL,
                [(
                    "FEATURELOG_JOIN__INPUT__EVENTS_SAMPLE_RATE".to_string(),
                    rate.to_string(),
                )],
            )
            .unwrap_err();
            assert!(
                err.to_string().contains("events-sample-rate"),
                "{rate}: {err}"
            );
        }
        let c =
            JoinerConfig::from_toml_with_env(Path::new("join.toml"), MINIMAL, Vec::new()).unwrap();
        assert_eq!(c.input.events_sample_rate, 1.0);
    }

    #[test]
    fn events_partitioning_comes_from_the_file_or_the_environment_and_nothing_else() {
        let from_env = JoinerConfig::from_toml_with_env(
            Path::new("join.toml"),
            MINIMAL,
            [(
                "FEATURELOG_JOIN__INPUT__EVENTS_PARTITIONING".to_string(),
                "by-request-id".to_string(),
            )],
        )
        .unwrap();
        assert_eq!(
            from_env.input.events_partitioning,
            EventsPartitioning::ByRequestId
        );
        let err = JoinerConfig::from_toml_with_env(
            Path::new("join.toml"),
            &MINIMAL.replace(
                "events-topic = \"app.events\"",
                "events-topic = \"app.events\"\nevents-partitioning = \"by-item\"",
            ),
            Vec::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("by-request-id"), "{err}");
    }

    #[test]
    fn s3_paths_take_object_store_settings_from_the_file_and_the_environment() {
        let text = MINIMAL.replace(
            "path = \"data\"",
            "path = \"s3://training/joined/v1/\"\n[output.object-store]\nregion = \"us-east-1\"\n\
             [output.object-store.options]\naws_virtual_hosted_style_request = \"false\"",
        );
        let c = JoinerConfig::from_toml_with_env(
            Path::new("/etc/fl/join.toml"),
            &text,
            [
                (
                    "FEATURELOG_JOIN__OUTPUT__OBJECT_STORE__ENDPOINT".to_string(),
                    "http://minio:9000".to_string(),
                ),
                (
                    "FEATURELOG_JOIN__OUTPUT__OBJECT_STORE__ALLOW_HTTP".to_string(),
                    "true".to_string(),
                ),
            ],
        )
        .unwrap();
        assert_eq!(
            c.output.location().unwrap(),
            OutputLocation::S3 {
                bucket: "training".into(),
                prefix: "joined/v1".into()
            }
        );
        let store = c.output.object_store.as_ref().unwrap();
        assert_eq!(store.endpoint.as_deref(), Some("http://minio:9000"));
        assert_eq!(store.allow_http, Some(true));

        for (bad, reason) in [
            ("path = \"gs://b/p\"", "s3://"),
            ("path = \"s3:///p\"", "no bucket"),
            (
                "path = \"s3://b/p\"\n[output.object-store.options]\naws_no_such_thing = \"1\"",
                "aws_no_such_thing",
            ),
            (
                "path = \"data\"\n[output.object-store]\nregion = \"x\"",
                "only to an s3://",
            ),
            ("path = \"data\"\ncheckpoints-kept = 1", "at least 2"),
            (
                "path = \"data\"\nflush-rows = 0",
                "flush-rows must be at least 1",
            ),
            (
                "path = \"data\"\nzstd-level = 0",
                "output.zstd-level 0 is not a level",
            ),
            (
                "path = \"data\"\nzstd-level = 23",
                "output.zstd-level 23 is not a level",
            ),
            ("path = \"data\"\nzstd-level = -1", "output.zstd-level -1"),
            (
                "path = \"s3://b/p\"\n[output.object-store.options]\n\
                 aws_endpoint = \"http://a:9000\"\nendpoint = \"http://b:9000\"",
                "options.aws_endpoint and options.endpoint are the same S3 setting",
            ),
            (
                "path = \"s3://b/p\"\n[output.object-store]\nregion = \"x\"\n\
                 [output.object-store.options]\naws-region = \"y\"",
                "region and options.aws-region are the same S3 setting",
            ),
        ] {
            let err = JoinerConfig::from_toml_with_env(
                Path::new("join.toml"),
                &MINIMAL.replace("path = \"data\"", bad),
                Vec::new(),
            )
            .unwrap_err();
            assert!(err.to_string().contains(reason), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_with_the_file_named() {
        let err = JoinerConfig::from_toml_with_env(
            Path::new("join.toml"),
            &format!("{MINIMAL}\n[join]\nlabel-windw = \"1m\""),
            Vec::new(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("join.toml") && err.to_string().contains("label-windw"),
            "{err}"
        );
    }
}
