//! The joiner's configuration: a TOML file with `FEATURELOG_JOIN__SECTION__KEY` environment
//! overrides, validated before anything starts (`featurelog join --check-config`).
//!
//! This file owns the whole config, its loading and its validation; beside it, `input.rs`
//! holds the input topics and how their events are encoded, `window.rs` the join windows and
//! bounds, and `output.rs` the dataset and its object store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use featurelog_kafka::KafkaConfig;
use serde::{Deserialize, Serialize};

mod input;
mod output;
mod window;

pub use input::{EventFormat, EventsPartitioning, EventsTopics, InputConfig, TopicFormat};
pub use output::{
    DEFAULT_CHECKPOINTS_KEPT, DEFAULT_FLUSH_ROWS, DeltaConfig, ObjectStoreConfig, OutputConfig,
    OutputFormat, OutputLocation,
};
pub use window::{HeldLogs, WindowConfig};

/// The prefix of environment overrides.
pub const ENV_PREFIX: &str = "FEATURELOG_JOIN__";

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

fn default_group() -> String {
    "featurelog-joiner".into()
}
fn default_static_membership() -> bool {
    true
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
        if config.output.format == OutputFormat::Delta
            && config.output.delta.vacuum
            && config.output.delta.vacuum_retention < std::time::Duration::from_secs(3600)
        {
            return Err(err(format!(
                "output.delta.vacuum-retention is {}; it must be at least 1h, longer than any read of the table and any commit in flight (or set output.delta.vacuum = false)",
                humantime::format_duration(config.output.delta.vacuum_retention)
            )));
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
        // The documented levels: parquet also takes zstd's negative (fast) levels and 0 (its
        // default, 3), which would make one level read as two settings.
        if !(1..=22).contains(&config.output.zstd_level) {
            return Err(err(format!(
                "output.zstd-level {} is not a level: 1 to 22",
                config.output.zstd_level
            )));
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

    /// The consumer group of the router, which reads the events topics and commits its
    /// offsets in its transactions.
    pub fn router_group(&self) -> String {
        format!("{}.router", self.group)
    }

    /// The repartition topic.
    pub fn repartition_topic(&self) -> String {
        format!("{}.impressions-by-request", self.group)
    }

    /// The topic the join tasks read events from: the router's repartition topic, or the
    /// events topic itself when it is co-partitioned with the feature logs.
    pub fn join_events_topic(&self) -> String {
        match self.input.events_partitioning {
            // One topic: validation refuses several with co-partitioned events.
            EventsPartitioning::ByRequestId => self.input.events_topic.names().concat(),
            EventsPartitioning::Any => self.repartition_topic(),
        }
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
mod tests;
