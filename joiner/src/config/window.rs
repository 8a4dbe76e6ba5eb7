//! `[join]`: the join windows and bounds in event time, and where checkpoints keep held logs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// How far (event time) a task reads its feature logs ahead of its events' progress: a
    /// partition further ahead is paused until the events are within half of this, so that a
    /// backlog waits in Kafka rather than in the join state (a joiner catching up, a router
    /// that was down). The events themselves are not read ahead of the feature logs while
    /// feature logs are left to read. The state then holds about
    /// `features-wait + max-read-ahead` of traffic however long the backlog; the rows are the
    /// same.
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
    /// `topic` when the feature-log topic's retention covers
    /// [`JoinerConfig::held_logs_retention`](super::JoinerConfig::held_logs_retention), else
    /// `state-files` (and a log line that says why).
    #[default]
    Auto,
    /// State files name each held log's offset in the feature-log topic; a restore reads the
    /// logs back from there. Refused at start-up when the topic may delete records too soon.
    Topic,
    /// State files hold a copy of each held log's bytes (written once).
    StateFiles,
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
