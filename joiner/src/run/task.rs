//! A join task, one per partition: what it holds between checkpoints, and how it reads app
//! events (their format by topic, the sample they belong to, the checkpoint key of its events
//! offset).

use super::inputs::Inputs;
use crate::config::{EventFormat, EventsPartitioning, JoinerConfig};
use crate::event::{self, Event};
use crate::state::JoinState;

/// The join of one partition of the feature-log topic with the same partition of the events
/// input: its state, the rows it has emitted since its last checkpoint, and where it reads.
pub(super) struct Task {
    pub(super) name: String,
    /// When the task last read a feature log (for the features' idle watermark).
    pub(super) last_features: std::time::Instant,
    /// When the task last read an event of its events-topic partition (co-partitioned events
    /// only: otherwise the router decides when an events partition is idle).
    pub(super) last_events: std::time::Instant,
    /// Events of its events-topic partition that belong to another partition.
    pub(super) misplaced: u64,
    pub(super) state: JoinState,
    /// The next offset to take from each input.
    pub(super) next: Inputs<i64>,
    pub(super) epoch: u64,
    /// The watermark of the task's newest checkpoint (`i64::MIN` before the first): rows
    /// staged for hours it has already declared complete go to the late area.
    pub(super) committed_watermark_us: i64,
    pub(super) rows: crate::buffer::Rows,
    pub(super) dirty: bool,
    /// The state's counts as last added to the metrics.
    pub(super) reported: crate::state::Counts,
    /// State files the last checkpoint reads (its own and its segments), by name: kept through
    /// the next commit for a process that is still restoring from it.
    pub(super) last_state_files: Vec<String>,
    /// Whether its partitions are paused for being read ahead of each other.
    pub(super) alignment: crate::align::Alignment,
}

/// The checkpoint key of a task's events offset. The two settings of
/// `input.events-partitioning` read different topics, so they use different keys: a checkpoint
/// of one is never taken for the other.
pub(super) fn events_key(partitioning: EventsPartitioning) -> &'static str {
    match partitioning {
        EventsPartitioning::Any => "events",
        EventsPartitioning::ByRequestId => "events-topic",
    }
}

/// Whether `e`'s request is in the sidecars' sample (`input.events-sample-rate`). An event of
/// a request outside it would wait `impressions-wait` in the state for features that were never
/// logged, and be counted as an impression without features, hiding real losses among them.
pub(super) fn in_sample(config: &JoinerConfig, e: &Event) -> bool {
    featurelog_schemas::sampling::sampled(&e.request_id, config.input.events_sample_rate)
}

/// An app event of `topic` as the config says apps encode them there.
pub(super) fn decode_event(
    config: &JoinerConfig,
    topic: &str,
    payload: &[u8],
) -> Result<Event, event::EventError> {
    match config.input.format_of(topic) {
        (EventFormat::Protobuf, _) => event::from_protobuf(payload),
        (EventFormat::Json, fields) => event::from_json(payload, fields),
    }
}
