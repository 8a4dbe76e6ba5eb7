//! The event-time join of one task (one partition of the feature-log topic with the same
//! partition of the repartitioned events), as docs/JOINER.md specifies.
//!
//! Two tables: feature logs by request id, and pending candidates by (request id, item id) that
//! have seen an impression, a click or a conversion. Each has an ordered index by the event time
//! at which something must happen to an entry (emission or expiry), as mini-redis keeps expiry;
//! [`JoinState::advance`] pops those indexes up to the watermark. Everything runs on event time,
//! so the same input gives the same rows however fast it is read.
//!
//! This module owns the public types and the state's fields; each stage of an entry's life is a
//! submodule:
//!
//! - `ahead`: impressions read ahead of the feature logs, held until the logs reach their time.
//! - `key`: lookups by borrowed ids in the tables keyed by request and item.
//! - `table`: the tables' entries, what each is accounted against the memory bound, and the
//!   upkeep of a pending entry (its place in the due index, its removal, its row).
//! - `input`: taking a feature log or an event and matching it against the tables.
//! - `expiry`: the watermark, and what leaves the state by it (closed windows, expired
//!   features and their negatives) or by the memory bound.
//! - `snapshot`: the state file written beside each checkpoint, and the restore from it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::log::{Layouts, ServedLog};

mod ahead;
mod candidates;
mod expiry;
mod input;
mod key;
mod snapshot;
mod table;
#[cfg(test)]
mod test_support;

pub use snapshot::Snapshot;
use table::{FeatureEntry, Pending};

/// The state's maps are keyed by ids that apps send. They hash with foldhash, seeded at random
/// per map (so crafted ids cannot be made to collide); std's SipHash was ~6% of the join
/// threads' time in perf. The router's maps use it too.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Windows and bounds of the join, in microseconds of event time.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinConfig {
    /// How long a request's features wait for its impressions.
    pub features_wait_us: i64,
    /// How long an impression waits for its request's features.
    pub impressions_wait_us: i64,
    /// Clicks and conversions within this time after the impression fold into its row; the row
    /// is emitted when it closes. `None`: emitted as soon as impression and features meet.
    pub label_window_us: Option<i64>,
    /// How far behind the newest event an input's events may still arrive.
    pub max_out_of_orderness_us: i64,
    /// The fraction of scored-but-never-impressed candidates emitted as negatives.
    pub negatives_rate: f64,
    /// A bound on the estimated bytes held; past it the oldest features are evicted.
    pub max_bytes: usize,
    /// Partitions of the events topic: the events' side of the watermark is the lowest of their
    /// routed progress, and stays unknown until every one of them has reported.
    pub event_sources: u32,
}

/// What the events said about a candidate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels {
    /// Clicks seen.
    pub clicks: u32,
    /// Conversions seen.
    pub conversions: u32,
    /// Other named events seen, by name.
    pub other: BTreeMap<String, u32>,
    /// Label values that came with the events, summed by name.
    pub values: BTreeMap<String, f64>,
}

/// One training row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The request.
    pub request_id: String,
    /// The candidate.
    pub item_id: String,
    /// The request's logged features.
    pub features: Arc<ServedLog>,
    /// The candidate's row in `features`.
    pub row: usize,
    /// When it was impressed; `None` for a negative.
    pub impression_time_us: Option<i64>,
    /// Its labels.
    pub labels: Labels,
}

/// Counts of what happened to entries, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Rows emitted from an impression.
    pub joined: u64,
    /// Candidates scored and never impressed before their features expired.
    pub scored_not_impressed: u64,
    /// Of those, emitted as negatives.
    pub negatives: u64,
    /// Impressions whose features never came.
    pub impression_without_features: u64,
    /// Impressions of items the request did not score.
    pub unknown_item: u64,
    /// Clicks or conversions with no impression.
    pub labels_without_impression: u64,
    /// Events that came after their row was emitted or their request expired.
    pub late: u64,
    /// Feature logs evicted by the memory bound before their time.
    pub evicted: u64,
    /// Feature logs for a request that already had one (the first is kept).
    pub duplicate_features: u64,
    /// Events dropped because an event with the same id was already counted for their
    /// request and item (retries of apps and collectors).
    pub duplicate_events: u64,
    /// Clicks, conversions and other label events later than their impression plus the label
    /// window: not folded into the row.
    pub labels_outside_window: u64,
    /// Held feature logs that a restore could not read back from the feature-log topic (its
    /// retention or compaction deleted them): their impressions find no features.
    pub lost_on_restore: u64,
}

impl Counts {
    /// Each count with its outcome's name, the `name` of `featurelog_join_outcomes_total`.
    pub fn named(&self) -> [(&'static str, u64); 12] {
        // Every field by name: a count added to the struct must be named here too.
        let Counts {
            joined,
            scored_not_impressed,
            negatives,
            impression_without_features,
            unknown_item,
            labels_without_impression,
            late,
            evicted,
            duplicate_features,
            duplicate_events,
            labels_outside_window,
            lost_on_restore,
        } = *self;
        [
            ("joined", joined),
            ("scored_not_impressed", scored_not_impressed),
            ("negatives", negatives),
            ("impression_without_features", impression_without_features),
            ("unknown_item", unknown_item),
            ("labels_without_impression", labels_without_impression),
            ("late", late),
            ("labels_outside_window", labels_outside_window),
            ("evicted", evicted),
            ("duplicate_features", duplicate_features),
            ("duplicate_events", duplicate_events),
            ("lost_on_restore", lost_on_restore),
        ]
    }
}

/// How far a task's inputs have been read, in event time (see [`JoinState::input_times`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputTimes {
    /// The newest served time of the feature logs read, or where the partition was declared
    /// quiet if later; `None` before either.
    pub features: Option<i64>,
    /// The events' progress (the lowest over the events partitions), once each has reported:
    /// what the watermark waits for.
    pub events: Option<i64>,
    /// The newest time of the events read: how far their input has been read.
    pub events_read: Option<i64>,
    /// The time of the first event read since the task started: where the events' read-ahead
    /// is measured from before any feature log is read.
    pub events_first_read: Option<i64>,
    /// The served time of the oldest feature log held.
    pub oldest_held: Option<i64>,
}

/// The join state of one task.
pub struct JoinState {
    config: JoinConfig,
    features: HashMap<String, FeatureEntry>,
    feature_expiry: BTreeSet<(i64, String)>,
    pending: HashMap<(String, String), Pending>,
    pending_due: BTreeSet<(i64, String, String)>,
    /// Items with a pending entry, by request, for requests whose features have not come:
    /// what a request's features must look at when they arrive.
    waiting: HashMap<String, Vec<String>>,
    max_features_us: i64,
    /// The newest time of the events read (not persisted: only read-ahead alignment uses it).
    max_event_us: i64,
    /// The time of the first event read since the task started (not persisted, as above).
    first_event_us: i64,
    /// Event time up to which each events-topic partition has been routed (see
    /// [`JoinState::source_progress`]).
    sources: BTreeMap<i32, i64>,
    /// Where the features input was last declared quiet (see [`JoinState::features_idle`]).
    features_idle_us: i64,
    watermark_us: i64,
    bytes: usize,
    /// For each feature log already in a state file: that file's epoch (a segment) and the
    /// log's encoded length. Logs never change, so each is written once (see
    /// [`JoinState::snapshot`]). Logs with an offset are never written.
    written: HashMap<String, (u64, usize)>,
    /// Bytes of logs in each segment that a snapshot still refers to.
    segment_bytes: BTreeMap<u64, usize>,
    /// The file of each segment in `segment_bytes`: the state file that the committed
    /// checkpoint of that epoch names. Another writer of the same epoch (a zombie that lost its
    /// commit) may have written a file of that epoch too; only this one holds these logs.
    segment_files: BTreeMap<u64, String>,
    /// The column layouts of the held logs, shared (see [`Layouts`]).
    layouts: Layouts,
    /// The pending entries of the last snapshot, as encoded there: unchanged entries are copied
    /// from it (see `Pending::encoded`).
    last_pending: Vec<u8>,
    /// The held logs' entries of the last snapshot, as encoded there (see
    /// `FeatureEntry::encoded`).
    last_features: Vec<u8>,
    /// Impressions read ahead of the feature logs, not joined yet (see `ahead`).
    ahead: ahead::Ahead,
    /// What happened so far.
    pub counts: Counts,
}

impl JoinState {
    /// An empty state.
    pub fn new(config: JoinConfig) -> Self {
        Self {
            config,
            features: HashMap::default(),
            feature_expiry: BTreeSet::new(),
            pending: HashMap::default(),
            pending_due: BTreeSet::new(),
            waiting: HashMap::default(),
            max_features_us: i64::MIN,
            max_event_us: i64::MIN,
            first_event_us: i64::MIN,
            sources: BTreeMap::new(),
            features_idle_us: i64::MIN,
            watermark_us: i64::MIN,
            bytes: 0,
            written: HashMap::default(),
            segment_bytes: BTreeMap::new(),
            segment_files: BTreeMap::new(),
            layouts: Layouts::default(),
            last_pending: Vec::new(),
            last_features: Vec::new(),
            ahead: ahead::Ahead::default(),
            counts: Counts::default(),
        }
    }

    /// Estimated bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The layouts of the logs held: decode records with them (see [`ServedLog::decode`]) so
    /// that logs of one model share their columns' metadata.
    pub fn layouts(&mut self) -> &mut Layouts {
        &mut self.layouts
    }

    /// Requests with features held.
    pub fn requests(&self) -> usize {
        self.features.len()
    }
}
