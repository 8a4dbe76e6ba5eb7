//! The joiner's configuration: a TOML file with `FEATURELOG_JOIN__SECTION__KEY` environment
//! overrides, validated before anything starts (`featurelog join --check-config`).

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// The apps' impression/click/conversion topic.
    pub events_topic: String,
    /// How the events are encoded.
    #[serde(default = "default_format")]
    pub events_format: EventFormat,
    /// Field names of JSON events.
    #[serde(default)]
    pub json_fields: JsonFields,
    /// Undecodable records go here, with the reason in the `featurelog-error` header.
    #[serde(default = "default_dead_letter")]
    pub dead_letter_topic: String,
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
    /// When a task has read nothing for this long, its watermark moves to the wall clock
    /// (minus `max-out-of-orderness`), so windows close and hours complete in quiet periods.
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Fraction of scored, never impressed candidates written as negatives.
    #[serde(default)]
    pub negatives_sample_rate: f64,
    /// Memory bound of each task's state; the oldest features are evicted past it.
    #[serde(default = "default_state_bytes")]
    pub state_max_bytes: usize,
}

/// The dataset.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OutputConfig {
    /// A local directory (relative paths are relative to the config file).
    pub path: PathBuf,
    /// How often each task commits its rows, state and offsets.
    #[serde(default = "default_flush_interval", with = "humantime_serde")]
    pub flush_interval: Duration,
    /// Rows per Parquet row group.
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: usize,
    /// zstd level of the Parquet pages.
    #[serde(default = "default_zstd_level")]
    pub zstd_level: i32,
}

fn default_group() -> String {
    "featurelog-joiner".into()
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
fn default_row_group_rows() -> usize {
    64 * 1024
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
            idle_timeout: default_idle_timeout(),
            negatives_sample_rate: 0.0,
            state_max_bytes: default_state_bytes(),
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
        Self::from_toml_with_env(path, &text, std::env::vars())
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
        let figment = featurelog_ops::layered_config(text, ENV_PREFIX, env);
        let mut config: JoinerConfig = figment.extract().map_err(|e| err(e.to_string()))?;
        if config.output.path.is_relative() {
            let base = path.parent().unwrap_or(Path::new("."));
            config.output.path = base.join(&config.output.path);
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
        if config.group.is_empty() || config.input.events_topic.is_empty() {
            return Err(err("group and input.events-topic must not be empty".into()));
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

    /// The join state's settings.
    pub fn join_config(&self) -> crate::state::JoinConfig {
        let us = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        crate::state::JoinConfig {
            features_wait_us: us(self.join.features_wait),
            impressions_wait_us: us(self.join.impressions_wait),
            label_window_us: self.join.label_window.map(us),
            max_out_of_orderness_us: us(self.join.max_out_of_orderness),
            negatives_rate: self.join.negatives_sample_rate,
            max_bytes: self.join.state_max_bytes,
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
        assert_eq!(c.join_config().features_wait_us, 1_800_000_000);
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
