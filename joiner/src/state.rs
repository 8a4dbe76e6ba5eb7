//! The event-time join of one task (one partition of the feature-log topic with the same
//! partition of the repartitioned events), as docs/JOINER.md specifies.
//!
//! Two tables: feature logs by request id, and pending candidates by (request id, item id) that
//! have seen an impression, a click or a conversion. Each has an ordered index by the event time
//! at which something must happen to an entry (emission or expiry), as mini-redis keeps expiry;
//! [`JoinState::advance`] pops those indexes up to the watermark. Everything runs on event time,
//! so the same input gives the same rows however fast it is read.

use std::collections::{BTreeMap, BTreeSet};

/// The state's maps are keyed by ids that apps send. They hash with foldhash, seeded at random
/// per map (so crafted ids cannot be made to collide); std's SipHash was ~6% of the join
/// threads' time in perf.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
use std::sync::Arc;

use featurelog_schemas::featurelog::v1::FeatureLog;

use crate::event::{Event, EventKind};
use crate::log::{CandidateId, CandidateIndex, Layouts, ServedLog, canonical_int};

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

struct FeatureEntry {
    log: Arc<ServedLog>,
    bytes: usize,
    /// Candidate id -> row, built on the first lookup in a long candidate list: most requests
    /// see a few impressions, and building a map of every candidate for each request cost more
    /// (a clone and a hash per candidate, in the profile) than scanning a short list.
    index: Option<CandidateIndex>,
    /// Items with an impression (joined or pending), for the scored-not-impressed count.
    impressed: HashSet<String>,
    /// When the features stop joining: served-at plus the features wait, as in
    /// `feature_expiry`. An impression from then on never joins them, even while the watermark
    /// still holds them, so that whether it joins does not depend on how far the other input
    /// had been read.
    expires_at: i64,
}

impl FeatureEntry {
    /// Accounts for a record's size: its bytes, what decoding it adds per record and per
    /// candidate (its id's position), and the entry's own tables.
    fn new(log: Arc<ServedLog>, impressed: HashSet<String>, expires_at: i64) -> Self {
        let bytes = log.raw().len() + ENTRY_BYTES + CANDIDATE_BYTES * log.candidate_count();
        Self {
            log,
            bytes,
            index: None,
            impressed,
            expires_at,
        }
    }

    /// The row of a candidate; the first, should a request list an item twice.
    fn row_of(&mut self, item: &str) -> Option<usize> {
        const SCAN: usize = 128;
        let log = &self.log;
        if log.candidate_count() <= SCAN {
            return log.find_candidate(item);
        }
        self.index
            .get_or_insert_with(|| log.candidate_index())
            .get(item)
    }
}

#[derive(Default)]
struct Pending {
    impression_us: Option<i64>,
    first_us: i64,
    labels: Labels,
    /// Set once impression and features have met.
    matched: Option<(Arc<ServedLog>, usize)>,
    /// Index key currently scheduled in `pending_due`.
    due: i64,
    /// Whether `(due, request, item)` is in `pending_due`: known here, so that neither
    /// scheduling nor removal builds the index key (two id copies) only to look for it.
    indexed: bool,
    /// The ids of the events counted in this entry (those that had one): a retry of one of
    /// them must not count a click or add a label value twice. A few per entry, so a list.
    event_ids: Vec<String>,
    /// The entry's label events, held until its row is emitted: whether one falls in the label
    /// window is known only once the earliest impression's time is, which a repeated
    /// impression read later (another partition, another order) may still lower. Deciding it
    /// at the emission makes the row the same whatever the read order.
    early: Vec<EarlyLabel>,
}

/// A click, conversion or other label event held until its impression's time is known.
#[derive(Debug, Clone, PartialEq)]
struct EarlyLabel {
    time_us: i64,
    kind: EventKind,
    values: BTreeMap<String, f64>,
}

impl EarlyLabel {
    fn bytes(&self) -> usize {
        let name = match &self.kind {
            EventKind::Other(name) => name.len(),
            _ => 0,
        };
        EARLY_BYTES + name + self.values.keys().map(|k| k.len() + 48).sum::<usize>()
    }
}

/// An early label event held in a pending entry beyond its names: the event's slot, time and
/// kind.
const EARLY_BYTES: usize = 64;

impl Pending {
    /// What its event ids and early label events add to [`pending_bytes`].
    fn ids_bytes(&self) -> usize {
        self.event_ids
            .iter()
            .map(|id| id.len() + ID_BYTES)
            .sum::<usize>()
            + self.early.iter().map(EarlyLabel::bytes).sum::<usize>()
    }

    /// Folds a label event into the labels, or counts it outside the window (`false`).
    fn fold(&mut self, window_us: Option<i64>, early: EarlyLabel) -> bool {
        if let (Some(impression), Some(window)) = (self.impression_us, window_us) {
            if early.time_us > impression.saturating_add(window) {
                return false;
            }
        }
        match early.kind {
            EventKind::Impression => {}
            EventKind::Click => self.labels.clicks += 1,
            EventKind::Conversion => self.labels.conversions += 1,
            EventKind::Other(name) => *self.labels.other.entry(name).or_default() += 1,
        }
        for (name, v) in early.values {
            *self.labels.values.entry(name).or_default() += v;
        }
        true
    }
}

/// An event id held in a pending entry beyond its text: the string and its slot in the list.
const ID_BYTES: usize = 32;

const PENDING_BYTES: usize = 256;

/// What a pending entry is accounted: the fixed part and its ids, which it holds up to three
/// times (its map key, its due index and the list of items waiting for features). The ids come
/// from apps, so their length must count against the bound.
fn pending_bytes(key: &(String, String)) -> usize {
    PENDING_BYTES + 3 * (key.0.len() + key.1.len())
}
/// A held log beyond its record's bytes: the entry, its map slot, its expiry, the decoded
/// scalar fields and column positions, and the allocator's slack. Set so that the accounting
/// stays above the resident memory the joiner benchmark measures (10 columns, 100 candidates).
const ENTRY_BYTES: usize = 1024;
/// Per candidate: its id's position in the record (8 bytes) and slack for the index of long
/// lists, built on the first lookup.
const CANDIDATE_BYTES: usize = 16;

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
    /// Emitted candidates by request, until the request's features expire: a later event for
    /// one of them is late, never a second row.
    emitted: HashMap<String, HashSet<String>>,
    max_features_us: i64,
    /// The newest time of the events read (not persisted: only read-ahead alignment uses it).
    max_event_us: i64,
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
    /// What happened so far.
    pub counts: Counts,
}

/// Reads one length-delimited feature log of a state file, keeping its bytes.
fn read_log(buf: &mut &[u8], layouts: &mut Layouts) -> Result<ServedLog, String> {
    let len = prost::decode_length_delimiter(&mut *buf).map_err(|e| e.to_string())?;
    let bytes = buf.get(..len).ok_or("truncated feature log")?;
    *buf = &buf[len..];
    ServedLog::decode(bytes.to_vec(), layouts).map_err(|e| e.to_string())
}

fn served_at_us(log: &FeatureLog) -> i64 {
    log.served_at
        .as_ref()
        .map(crate::event::saturating_us)
        .unwrap_or(0)
}

/// Whether a scored, never impressed candidate becomes a negative: FNV-1a of
/// "request id/item id" against the rate, so any system can reproduce the choice.
fn negative_sampled(request_id: &str, item_id: &str, rate: f64) -> bool {
    if rate <= 0.0 {
        return false;
    }
    let h = request_id
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(item_id.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    rate >= 1.0 || h % 1_000_000 < (rate * 1_000_000.0) as u64
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
            emitted: HashMap::default(),
            max_features_us: i64::MIN,
            max_event_us: i64::MIN,
            sources: BTreeMap::new(),
            features_idle_us: i64::MIN,
            watermark_us: i64::MIN,
            bytes: 0,
            written: HashMap::default(),
            segment_bytes: BTreeMap::new(),
            segment_files: BTreeMap::new(),
            layouts: Layouts::default(),
            counts: Counts::default(),
        }
    }

    /// The watermark: no event older than this is expected any more. Never decreases.
    pub fn watermark_us(&self) -> i64 {
        self.watermark_us
    }

    /// Records that the router has moved every event of events-topic partition `source` up to
    /// event time `up_to_us` into this task's input (or that the partition is caught up and
    /// quiet, with `up_to_us` the router's clock); with co-partitioned events, that the task
    /// itself has read its events partition that far. The events' side of the watermark is the
    /// lowest of all partitions' progress: a router that reads one partition ahead of another,
    /// as after a restart with a backlog, must not close windows that the slower partition's
    /// events still fall into. Returns the rows that completes.
    pub fn source_progress(&mut self, source: i32, up_to_us: i64) -> Vec<Row> {
        let at = self.sources.entry(source).or_insert(i64::MIN);
        *at = (*at).max(up_to_us);
        let mut out = Vec::new();
        self.advance_into(&mut out);
        out
    }

    /// The events topic gained partitions (`sources` of them now): the events' side of the
    /// watermark waits until every one of them has reported, so that events in the new ones are
    /// not late for a watermark that moved on without them. Never fewer (Kafka cannot remove
    /// partitions).
    pub fn set_event_sources(&mut self, sources: u32) {
        self.config.event_sources = self.config.event_sources.max(sources);
    }

    /// Moves the features' side of the watermark to `to_us` (if that is later) although no
    /// record has shown it: the runtime calls this when the task has read its whole feature-log
    /// partition and nothing came for the idle timeout, so that windows close in quiet periods.
    /// Returns the rows that completes.
    pub fn features_idle(&mut self, to_us: i64) -> Vec<Row> {
        self.features_idle_us = self.features_idle_us.max(to_us);
        let mut out = Vec::new();
        self.advance_into(&mut out);
        out
    }

    /// How far the inputs have been read, in event time, without the out-of-orderness
    /// allowance: what read-ahead alignment compares (crate::align).
    pub fn input_times(&self) -> InputTimes {
        let known = |t: i64| (t != i64::MIN).then_some(t);
        let events = if self.sources.len() < self.config.event_sources as usize {
            None
        } else {
            self.sources.values().min().copied().and_then(known)
        };
        InputTimes {
            features: known(self.max_features_us.max(self.features_idle_us)),
            events,
            events_read: known(self.max_event_us),
            oldest_held: self
                .feature_expiry
                .first()
                .map(|(at, _)| at.saturating_sub(self.config.features_wait_us)),
        }
    }

    /// Estimated bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The epochs of the earlier state files the last snapshot refers to.
    pub fn segments(&self) -> Vec<u64> {
        self.segment_bytes.keys().copied().collect()
    }

    /// The names of the state files the last snapshot (or the restored one) refers to, as
    /// given to [`JoinState::snapshot`] (or resolved by [`JoinState::restore`]).
    pub fn segment_files(&self) -> Vec<String> {
        self.segment_bytes
            .keys()
            .filter_map(|e| self.segment_files.get(e).cloned())
            .collect()
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

    /// Takes a request's feature log; returns rows it completes.
    pub fn add_features(&mut self, log: impl Into<ServedLog>) -> Vec<Row> {
        let log = log.into();
        let served = served_at_us(&log);
        self.max_features_us = self.max_features_us.max(served);
        let request_id = log.request_id.clone();
        let mut out = Vec::new();
        if self.features.contains_key(&request_id) {
            self.counts.duplicate_features += 1;
            self.advance_into(&mut out);
            return out;
        }
        let expires_at = served.saturating_add(self.config.features_wait_us);
        if expires_at <= self.watermark_us {
            // Its window closed before it arrived: it can join nothing new.
            self.counts.late += 1;
            self.advance_into(&mut out);
            return out;
        }
        let entry = FeatureEntry::new(Arc::new(log), HashSet::default(), expires_at);
        self.bytes += entry.bytes;
        self.feature_expiry.insert((expires_at, request_id.clone()));
        self.features.insert(request_id.clone(), entry);
        // Impressions that were waiting for these features.
        for item in self.waiting.remove(&request_id).unwrap_or_default() {
            self.try_match(&(request_id.clone(), item), &mut out);
        }
        self.enforce_bound();
        self.advance_into(&mut out);
        out
    }

    /// Takes an event; returns rows it completes.
    pub fn add_event(&mut self, event: Event) -> Vec<Row> {
        let mut out = Vec::new();
        let Event {
            request_id,
            item_id,
            time_us,
            kind,
            labels,
            event_id,
        } = event;
        self.max_event_us = self.max_event_us.max(time_us);
        if self
            .emitted
            .get(&request_id)
            .is_some_and(|items| items.contains(&item_id))
        {
            self.counts.late += 1;
            self.advance_into(&mut out);
            return out;
        }
        // An impression at or after its features' expiry can no longer join them: it waits
        // as if they were gone. Whether they are still held when it is read depends on how far
        // the features input had been read, not on the inputs, and a replay must give the
        // same rows.
        let joinable =
            |f: &&mut FeatureEntry| kind != EventKind::Impression || time_us < f.expires_at;
        if let Some(f) = self.features.get_mut(&request_id).filter(joinable) {
            let Some(row) = f.row_of(&item_id) else {
                self.counts.unknown_item += 1;
                self.advance_into(&mut out);
                return out;
            };
            // The common case of a join with no label window: the features are here and
            // nothing of this candidate waits, so the impression is the row. Emitted as the
            // general path below would, without its pending entry and index.
            let waits = || {
                self.pending
                    .contains_key(&(request_id.clone(), item_id.clone()))
            };
            if self.config.label_window_us.is_none() && kind == EventKind::Impression && !waits() {
                f.impressed.insert(item_id.clone());
                self.counts.joined += 1;
                self.emitted
                    .entry(request_id.clone())
                    .or_default()
                    .insert(item_id.clone());
                out.push(Row {
                    request_id,
                    item_id,
                    features: f.log.clone(),
                    row,
                    impression_time_us: Some(time_us),
                    labels: Labels {
                        values: labels,
                        ..Labels::default()
                    },
                });
                self.enforce_bound();
                self.advance_into(&mut out);
                return out;
            }
        } else if time_us.saturating_add(self.config.impressions_wait_us) <= self.watermark_us {
            // Too old to wait for features any more.
            self.counts.late += 1;
            self.advance_into(&mut out);
            return out;
        }
        let key = (request_id, item_id);
        let retried = |p: &Pending| event_id.as_ref().is_some_and(|id| p.event_ids.contains(id));
        if self.pending.get(&key).is_some_and(retried) {
            self.counts.duplicate_events += 1;
            self.advance_into(&mut out);
            return out;
        }
        let is_new = !self.pending.contains_key(&key);
        let p = self.pending.entry(key.clone()).or_insert_with(|| Pending {
            first_us: time_us,
            ..Pending::default()
        });
        if is_new {
            self.bytes += pending_bytes(&key);
            if !self.features.contains_key(&key.0) {
                self.waiting
                    .entry(key.0.clone())
                    .or_default()
                    .push(key.1.clone());
            }
        }
        p.first_us = p.first_us.min(time_us);
        if let Some(id) = event_id {
            self.bytes += id.len() + ID_BYTES;
            p.event_ids.push(id);
        }
        if kind == EventKind::Impression {
            // A repeated impression keeps the earliest: the row's impression, in event time.
            p.impression_us = Some(p.impression_us.map_or(time_us, |t| t.min(time_us)));
            // An impression's own label values (a price, a position) are the row's whatever
            // the window.
            for (name, v) in labels {
                *p.labels.values.entry(name).or_default() += v;
            }
        } else {
            // Folded at the emission, against the earliest impression (see `Pending::early`).
            let event = EarlyLabel {
                time_us,
                kind,
                values: labels,
            };
            self.bytes += event.bytes();
            p.early.push(event);
        }
        self.try_match(&key, &mut out);
        self.reschedule(&key);
        self.enforce_bound();
        self.advance_into(&mut out);
        out
    }

    /// Marks the match between an impressed pending entry and its features, and emits it when
    /// there is no label window to wait for.
    fn try_match(&mut self, key: &(String, String), out: &mut Vec<Row>) {
        let Some(p) = self.pending.get_mut(key) else {
            return;
        };
        if p.impression_us.is_none() || p.matched.is_some() {
            return;
        }
        let Some(f) = self.features.get_mut(&key.0) else {
            return;
        };
        if p.impression_us.is_some_and(|t| t >= f.expires_at) {
            // Past the features' wait (see `add_event`): it stays pending until its own wait
            // ends, and counts as an impression without features.
            return;
        }
        let Some(row) = f.row_of(&key.1) else {
            // The request did not score this item.
            self.counts.unknown_item += 1;
            self.remove_pending(key);
            return;
        };
        f.impressed.insert(key.1.clone());
        p.matched = Some((f.log.clone(), row));
        if self.config.label_window_us.is_none() {
            self.emit(key, out);
        } else {
            self.reschedule(key);
        }
    }

    /// Puts a pending entry in the index at the next time something must happen to it.
    fn reschedule(&mut self, key: &(String, String)) {
        let Some(p) = self.pending.get_mut(key) else {
            return;
        };
        let window = self.config.label_window_us.unwrap_or(0);
        let due = match (p.impression_us, &p.matched) {
            (Some(t), Some(_)) => t.saturating_add(window),
            (Some(t), None) => t.saturating_add(self.config.impressions_wait_us.max(window)),
            (None, _) => p
                .first_us
                .saturating_add(self.config.impressions_wait_us.saturating_add(window)),
        };
        if due != p.due || !p.indexed {
            if p.indexed {
                self.pending_due
                    .remove(&(p.due, key.0.clone(), key.1.clone()));
            }
            p.due = due;
            p.indexed = true;
            self.pending_due.insert((due, key.0.clone(), key.1.clone()));
        }
    }

    fn remove_pending(&mut self, key: &(String, String)) -> Option<Pending> {
        let p = self.pending.remove(key)?;
        if let Some(items) = self.waiting.get_mut(&key.0) {
            items.retain(|i| *i != key.1);
            if items.is_empty() {
                self.waiting.remove(&key.0);
            }
        }
        if p.indexed {
            self.pending_due
                .remove(&(p.due, key.0.clone(), key.1.clone()));
        }
        self.bytes = self
            .bytes
            .saturating_sub(pending_bytes(key) + p.ids_bytes());
        Some(p)
    }

    fn emit(&mut self, key: &(String, String), out: &mut Vec<Row>) {
        let Some(mut p) = self.remove_pending(key) else {
            return;
        };
        if p.matched.is_none() {
            return;
        }
        // Every label event against the entry's earliest impression, now that no earlier one
        // can come (the watermark is past its window).
        let window = self.config.label_window_us;
        for early in std::mem::take(&mut p.early) {
            if !p.fold(window, early) {
                self.counts.labels_outside_window += 1;
            }
        }
        let Some((features, row)) = p.matched else {
            return;
        };
        self.counts.joined += 1;
        self.emitted
            .entry(key.0.clone())
            .or_default()
            .insert(key.1.clone());
        out.push(Row {
            request_id: key.0.clone(),
            item_id: key.1.clone(),
            features,
            row,
            impression_time_us: p.impression_us,
            labels: p.labels,
        });
    }

    /// Evicts entries until the state is within its bound, the oldest by event time first: a
    /// feature log by when it was served, a pending entry (impressions waiting for features,
    /// rows waiting for their label window) by its first event. Each counts as evicted.
    /// Pending entries are taken in the order they are due, which is their event order within
    /// one kind of wait. Feature logs alone are not enough: pending entries can fill the bound
    /// by themselves (impressions whose features never come), and every new log would then be
    /// evicted on arrival.
    fn enforce_bound(&mut self) {
        while self.bytes > self.config.max_bytes {
            // Expiry is serving time plus the one features wait.
            let feature = self
                .feature_expiry
                .first()
                .map(|(at, _)| at.saturating_sub(self.config.features_wait_us));
            let pending = self.pending_due.first().map(|(due, r, i)| {
                // A stale index entry (its entry rescheduled or gone) is popped below as is.
                self.pending
                    .get(&(r.clone(), i.clone()))
                    .filter(|p| p.due == *due)
                    .map_or(i64::MIN, |p| p.first_us)
            });
            let evict_feature = match (feature, pending) {
                (None, None) => break,
                (Some(f), Some(p)) => f <= p,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if evict_feature {
                let Some((_, request_id)) = self.feature_expiry.pop_first() else {
                    break;
                };
                if let Some(f) = self.features.remove(&request_id) {
                    self.bytes = self.bytes.saturating_sub(f.bytes);
                    self.emitted.remove(&request_id);
                    self.counts.evicted += 1;
                }
            } else {
                let Some((due, request_id, item_id)) = self.pending_due.pop_first() else {
                    break;
                };
                let key = (request_id, item_id);
                // An index entry left behind by a rescheduled or removed entry evicts nothing.
                if self.pending.get(&key).is_some_and(|p| p.due == due)
                    && self.remove_pending(&key).is_some()
                {
                    self.counts.evicted += 1;
                }
            }
        }
    }

    /// Moves the watermark to what both inputs have shown and handles everything due.
    pub fn advance(&mut self) -> Vec<Row> {
        let mut out = Vec::new();
        self.advance_into(&mut out);
        out
    }

    fn advance_into(&mut self, out: &mut Vec<Row>) {
        let ooo = self.config.max_out_of_orderness_us;
        let features = if self.max_features_us == i64::MIN {
            self.features_idle_us
        } else {
            self.max_features_us
                .saturating_sub(ooo)
                .max(self.features_idle_us)
        };
        let events = if self.sources.len() < self.config.event_sources as usize {
            i64::MIN
        } else {
            self.sources
                .values()
                .min()
                .map_or(i64::MIN, |&t| t.saturating_sub(ooo))
        };
        let candidate = features.min(events);
        if candidate != i64::MIN {
            self.watermark_us = self.watermark_us.max(candidate);
        }
        let wm = self.watermark_us;
        if wm == i64::MIN {
            return;
        }

        // Peek before cloning: this runs after every input, and almost always finds nothing due.
        while let Some((due, r, i)) = self.pending_due.first() {
            if *due > wm {
                break;
            }
            let key = (r.clone(), i.clone());
            let (impressed, matched) = match self.pending.get(&key) {
                Some(p) => (p.impression_us, p.matched.is_some()),
                None => {
                    self.pending_due.pop_first();
                    continue;
                }
            };
            match (impressed, matched) {
                (Some(_), true) => self.emit(&key, out),
                (Some(_), false) => {
                    self.counts.impression_without_features += 1;
                    self.remove_pending(&key);
                }
                (None, _) => {
                    self.counts.labels_without_impression += 1;
                    self.remove_pending(&key);
                }
            }
        }

        while let Some((expires_at, _)) = self.feature_expiry.first() {
            if *expires_at > wm {
                break;
            }
            let Some((_, request_id)) = self.feature_expiry.pop_first() else {
                break;
            };
            let Some(f) = self.features.remove(&request_id) else {
                continue;
            };
            self.bytes = self.bytes.saturating_sub(f.bytes);
            self.emitted.remove(&request_id);
            // Every candidate of every log passes here once: integer ids are compared as
            // numbers and written as text only for a negative, not formatted 100 times a log.
            let mut impressed_ints: Vec<i64> = match f.log.candidate_id(0) {
                Some(CandidateId::Int(_)) => f
                    .impressed
                    .iter()
                    .filter_map(|i| canonical_int(i))
                    .collect(),
                _ => Vec::new(),
            };
            impressed_ints.sort_unstable();
            let rate = self.config.negatives_rate;
            let mut text = String::new();
            for (i, id) in f.log.candidate_ids().enumerate() {
                let impressed = match id {
                    CandidateId::Int(n) => impressed_ints.binary_search(&n).is_ok(),
                    CandidateId::Text(t) => f.impressed.contains(t),
                };
                if impressed {
                    continue;
                }
                self.counts.scored_not_impressed += 1;
                if rate <= 0.0 {
                    continue;
                }
                let item = id.text(&mut text);
                if negative_sampled(&request_id, item, rate) {
                    self.counts.negatives += 1;
                    out.push(Row {
                        request_id: request_id.clone(),
                        item_id: item.to_owned(),
                        features: f.log.clone(),
                        row: i,
                        impression_time_us: None,
                        labels: Labels::default(),
                    });
                }
            }
        }
    }
}

/// The serialised form of a [`JoinState`], written beside each checkpoint: this header as a
/// length-delimited protobuf message, then each feature log of `features` (in that order) and
/// of `matched_only`, each length-delimited. Feature logs are copied as their protobuf bytes,
/// with no conversion: a snapshot costs about what writing the held records costs.
#[derive(Clone, PartialEq, prost::Message)]
struct SnapshotHeader {
    #[prost(message, repeated, tag = "1")]
    features: Vec<SnapFeature>,
    /// Requests whose features expired while a matched impression still waits for its label
    /// window: their logs follow the held ones.
    #[prost(string, repeated, tag = "2")]
    matched_only: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    pending: Vec<SnapPending>,
    #[prost(message, repeated, tag = "4")]
    emitted: Vec<SnapEmitted>,
    #[prost(int64, tag = "5")]
    max_features_us: i64,
    /// Unused since the events' side of the watermark comes from `sources`; kept so that the
    /// tag is never reused with another meaning.
    #[prost(int64, tag = "6")]
    max_events_us: i64,
    #[prost(int64, tag = "7")]
    watermark_us: i64,
    #[prost(btree_map = "int32, int64", tag = "8")]
    sources: BTreeMap<i32, i64>,
    #[prost(int64, optional, tag = "9")]
    features_idle_us: Option<i64>,
    /// Format 2: the logs are in segments (the state files of earlier epochs and this one);
    /// `SnapFeature::segment` and `matched_only_segments` say where, and the segment of epoch
    /// e is the file named for e alone. Format 1 (0 here): this file holds every log,
    /// `features` then `matched_only`, in order. Format 3 adds offsets, format 4
    /// `segment_files`.
    #[prost(uint32, tag = "10")]
    format: u32,
    #[prost(uint64, repeated, tag = "11")]
    matched_only_segments: Vec<u64>,
    /// Bytes of logs in each segment that this snapshot refers to.
    #[prost(btree_map = "uint64, uint64", tag = "12")]
    segment_bytes: BTreeMap<u64, u64>,
    /// The epoch of this file (its own logs are segment `epoch`).
    #[prost(uint64, tag = "13")]
    epoch: u64,
    /// Format 3: for each of `matched_only`, the offset of its log in the feature-log
    /// partition, or -1 when a segment holds it.
    #[prost(int64, repeated, tag = "14")]
    matched_only_offsets: Vec<i64>,
    /// Format 4: the file of each segment in `segment_bytes` (this one's own included when it
    /// holds logs), as the dataset names it. State files are named per writer: two writers of
    /// one epoch (a zombie and the owner that fenced it) write two files, and only the one
    /// the committed checkpoint names holds the logs this lineage refers to.
    #[prost(btree_map = "uint64, string", tag = "15")]
    segment_files: BTreeMap<u64, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SnapFeature {
    #[prost(string, tag = "1")]
    request_id: String,
    #[prost(int64, tag = "2")]
    expires_at: i64,
    #[prost(string, repeated, tag = "3")]
    impressed: Vec<String>,
    #[prost(uint64, tag = "4")]
    segment: u64,
    /// Format 3: the log is the record at this offset of the feature-log partition, and no
    /// segment holds it.
    #[prost(int64, optional, tag = "5")]
    offset: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SnapPending {
    #[prost(string, tag = "1")]
    request_id: String,
    #[prost(string, tag = "2")]
    item_id: String,
    #[prost(int64, optional, tag = "3")]
    impression_us: Option<i64>,
    #[prost(int64, tag = "4")]
    first_us: i64,
    #[prost(uint32, tag = "5")]
    clicks: u32,
    #[prost(uint32, tag = "6")]
    conversions: u32,
    #[prost(btree_map = "string, uint32", tag = "7")]
    other: BTreeMap<String, u32>,
    #[prost(btree_map = "string, double", tag = "8")]
    values: BTreeMap<String, f64>,
    #[prost(uint64, optional, tag = "9")]
    matched_row: Option<u64>,
    /// The ids of the events counted in the entry (none in files of earlier versions).
    #[prost(string, repeated, tag = "10")]
    event_ids: Vec<String>,
    /// Label events waiting for the entry's impression (none in files of earlier versions).
    #[prost(message, repeated, tag = "11")]
    early: Vec<SnapEarly>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SnapEarly {
    #[prost(int64, tag = "1")]
    time_us: i64,
    /// 1 click, 2 conversion, 3 another event named `name`.
    #[prost(uint32, tag = "2")]
    kind: u32,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(btree_map = "string, double", tag = "4")]
    values: BTreeMap<String, f64>,
}

impl SnapEarly {
    fn of(e: &EarlyLabel) -> Self {
        let (kind, name) = match &e.kind {
            EventKind::Click => (1, String::new()),
            EventKind::Conversion => (2, String::new()),
            // An impression is never held as an early label; kept as a named event if it were.
            EventKind::Impression => (3, "impression".to_owned()),
            EventKind::Other(name) => (3, name.clone()),
        };
        SnapEarly {
            time_us: e.time_us,
            kind,
            name,
            values: e.values.clone(),
        }
    }

    fn restore(self) -> Result<EarlyLabel, String> {
        let kind = match self.kind {
            1 => EventKind::Click,
            2 => EventKind::Conversion,
            3 => EventKind::Other(self.name),
            k => return Err(format!("unknown kind {k} of an early label event")),
        };
        Ok(EarlyLabel {
            time_us: self.time_us,
            kind,
            values: self.values,
        })
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct SnapEmitted {
    #[prost(string, tag = "1")]
    request_id: String,
    #[prost(string, repeated, tag = "2")]
    items: Vec<String>,
}

/// A serialised state: the file to write for this epoch, and the earlier state files it reads
/// logs from (which must be kept while this is the newest checkpoint).
#[derive(Debug)]
pub struct Snapshot {
    /// This epoch's state file.
    pub bytes: Vec<u8>,
    /// The epochs of the segments it refers to, this epoch's included when it holds logs.
    pub segments: Vec<u64>,
    /// The files of those segments, in the same order.
    pub files: Vec<String>,
}

/// Below this many bytes of dead logs in referenced segments, a snapshot never compacts.
const COMPACT_MIN_BYTES: usize = if cfg!(test) { 0 } else { 8 << 20 };

impl JoinState {
    /// Serialises everything the state holds, so that a restarted task continues exactly where
    /// the checkpoint left it, as the state file of `epoch`, to be written under the name
    /// `file` (later snapshots refer to its logs by that name). Counts are not included: they
    /// are per process, for metrics.
    ///
    /// Feature logs dominate the state and never change, so each is written once: into the
    /// state file of the first epoch that holds it (a segment), which later snapshots refer to.
    /// The rest (what waits, what was emitted, watermarks) is small and written whole. When
    /// the referenced segments hold more than twice the live logs' bytes (plus 8 MiB), every
    /// live log is written again into this epoch's file and the old segments are left behind.
    /// A snapshot's cost is thus the new logs plus the small part, not everything held.
    pub fn snapshot(&mut self, epoch: u64, file: &str) -> Snapshot {
        use prost::Message;
        // Logs still needed: the held ones, and those of expired requests whose matched
        // impression still waits for its label window.
        let mut live: HashMap<&str, &Arc<ServedLog>> = self
            .features
            .iter()
            .map(|(r, f)| (r.as_str(), &f.log))
            .collect();
        let mut matched_only: Vec<&str> = Vec::new();
        for ((r, _), p) in &self.pending {
            if let Some((log, _)) = &p.matched {
                if !self.features.contains_key(r) && !live.contains_key(r.as_str()) {
                    live.insert(r.as_str(), log);
                    matched_only.push(r.as_str());
                }
            }
        }
        // A log in a segment whose file is unknown (none can be, but a header without its name
        // could not be restored) is written again.
        let files = &self.segment_files;
        self.written
            .retain(|r, (segment, _)| live.contains_key(r.as_str()) && files.contains_key(segment));
        let mut referenced: BTreeMap<u64, usize> = BTreeMap::new();
        let mut live_bytes = 0usize;
        for &(segment, len) in self.written.values() {
            live_bytes += len;
            referenced.entry(segment).or_default();
        }
        let referenced_bytes: usize = referenced
            .keys()
            .map(|s| self.segment_bytes.get(s).copied().unwrap_or(0))
            .sum();
        if referenced_bytes > 2 * live_bytes + COMPACT_MIN_BYTES {
            self.written.clear();
        }
        let mut new_logs: Vec<&Arc<ServedLog>> = Vec::new();
        let mut new_bytes = 0usize;
        for (r, log) in &live {
            // The feature-log topic keeps it: the snapshot names its offset.
            if log.offset().is_some() {
                continue;
            }
            if !self.written.contains_key(*r) {
                let len = log.raw().len();
                self.written.insert((*r).to_owned(), (epoch, len));
                new_logs.push(log);
                new_bytes += len;
            }
        }
        let mut segment_bytes: BTreeMap<u64, usize> = BTreeMap::new();
        for &(segment, _) in self.written.values() {
            segment_bytes.insert(
                segment,
                if segment == epoch {
                    new_bytes
                } else {
                    self.segment_bytes.get(&segment).copied().unwrap_or(0)
                },
            );
        }
        self.segment_bytes = segment_bytes;
        self.segment_files.insert(epoch, file.to_owned());
        let referenced = &self.segment_bytes;
        self.segment_files.retain(|e, _| referenced.contains_key(e));
        let segment_of = |r: &str| self.written.get(r).map_or(epoch, |&(s, _)| s);
        let offset_of = |r: &str| live.get(r).and_then(|log| log.offset());
        let header = SnapshotHeader {
            features: self
                .features
                .iter()
                .map(|(r, f)| SnapFeature {
                    request_id: r.clone(),
                    expires_at: f.expires_at,
                    impressed: f.impressed.iter().cloned().collect(),
                    segment: segment_of(r),
                    offset: offset_of(r),
                })
                .collect(),
            matched_only: matched_only.iter().map(|r| (*r).to_owned()).collect(),
            matched_only_segments: matched_only.iter().map(|r| segment_of(r)).collect(),
            matched_only_offsets: matched_only
                .iter()
                .map(|r| offset_of(r).unwrap_or(-1))
                .collect(),
            pending: self
                .pending
                .iter()
                .map(|((r, i), p)| SnapPending {
                    request_id: r.clone(),
                    item_id: i.clone(),
                    impression_us: p.impression_us,
                    first_us: p.first_us,
                    clicks: p.labels.clicks,
                    conversions: p.labels.conversions,
                    other: p.labels.other.clone(),
                    values: p.labels.values.clone(),
                    matched_row: p.matched.as_ref().map(|(_, row)| *row as u64),
                    event_ids: p.event_ids.clone(),
                    early: p.early.iter().map(SnapEarly::of).collect(),
                })
                .collect(),
            emitted: self
                .emitted
                .iter()
                .map(|(r, items)| SnapEmitted {
                    request_id: r.clone(),
                    items: items.iter().cloned().collect(),
                })
                .collect(),
            max_features_us: self.max_features_us,
            max_events_us: i64::MIN,
            watermark_us: self.watermark_us,
            sources: self.sources.clone(),
            features_idle_us: Some(self.features_idle_us),
            format: 4,
            epoch,
            segment_files: self.segment_files.clone(),
            segment_bytes: self
                .segment_bytes
                .iter()
                .map(|(s, b)| (*s, *b as u64))
                .collect(),
        };
        let mut out =
            Vec::with_capacity(header.encoded_len() + new_bytes + 16 * new_logs.len() + 16);
        // Writing to a Vec cannot fail.
        let _ = header.encode_length_delimited(&mut out);
        // A log's bytes are its record's, as consumed: written as they are, length-delimited.
        for log in new_logs {
            let _ = prost::encode_length_delimiter(log.raw().len(), &mut out);
            out.extend_from_slice(log.raw());
        }
        Snapshot {
            bytes: out,
            segments: self.segment_bytes.keys().copied().collect(),
            files: self.segment_files(),
        }
    }

    /// Rebuilds a state from the bytes of [`JoinState::snapshot`]'s file; `segment` reads an
    /// earlier state file that it refers to, by name, and `read_back` the records at the given
    /// offsets of the feature-log partition (those it cannot find are left out: their logs are
    /// counted as `lost_on_restore` and the state goes on without them). A snapshot of format 4
    /// names its segments' files; older ones refer to segments by epoch only, and
    /// `legacy_name` gives the name a state file of that epoch had then.
    pub fn restore(
        config: JoinConfig,
        bytes: &[u8],
        legacy_name: impl Fn(u64) -> String,
        mut segment: impl FnMut(&str) -> Result<Vec<u8>, String>,
        read_back: impl FnOnce(
            &BTreeSet<i64>,
        ) -> Result<std::collections::HashMap<i64, Vec<u8>>, String>,
    ) -> Result<Self, String> {
        use prost::Message;
        let mut buf = bytes;
        let header =
            SnapshotHeader::decode_length_delimited(&mut buf).map_err(|e| e.to_string())?;
        let mut logs: HashMap<String, Arc<ServedLog>> = HashMap::default();
        let mut state = JoinState::new(config);
        let mut lost: HashSet<String> = HashSet::default();
        if header.format >= 2 {
            // The file of each segment: named in the header since format 4, by epoch before.
            let file_of = |seg: u64| {
                if header.format >= 4 {
                    header.segment_files.get(&seg).cloned()
                } else {
                    Some(legacy_name(seg))
                }
            };
            // Which logs each segment must provide, and which the topic.
            let mut wanted: BTreeMap<u64, HashSet<&str>> = BTreeMap::new();
            let mut in_topic: BTreeMap<i64, &str> = BTreeMap::new();
            for f in &header.features {
                match f.offset {
                    Some(o) => {
                        in_topic.insert(o, &f.request_id);
                    }
                    None => {
                        wanted.entry(f.segment).or_default().insert(&f.request_id);
                    }
                }
            }
            for (i, (r, seg)) in header
                .matched_only
                .iter()
                .zip(&header.matched_only_segments)
                .enumerate()
            {
                match header.matched_only_offsets.get(i).copied().unwrap_or(-1) {
                    o if o >= 0 => {
                        in_topic.insert(o, r);
                    }
                    _ => {
                        wanted.entry(*seg).or_default().insert(r);
                    }
                }
            }
            if !in_topic.is_empty() {
                let offsets: BTreeSet<i64> = in_topic.keys().copied().collect();
                let mut found = read_back(&offsets)?;
                for (o, r) in &in_topic {
                    let Some(bytes) = found.remove(o) else {
                        lost.insert((*r).to_owned());
                        continue;
                    };
                    let log = ServedLog::decode(bytes, &mut state.layouts)
                        .map_err(|e| format!("feature log at offset {o}: {e}"))?;
                    if log.request_id != *r {
                        return Err(format!(
                            "the feature log at offset {o} is of request {:?}, not {r:?}: was the \
                             feature-log topic deleted and created again since this checkpoint?",
                            log.request_id
                        ));
                    }
                    logs.insert((*r).to_owned(), Arc::new(log.with_offset(*o)));
                }
            }
            for (seg, requests) in &wanted {
                let file;
                let mut rest: &[u8] = if *seg == header.epoch {
                    buf
                } else {
                    let name = file_of(*seg)
                        .ok_or_else(|| format!("segment {seg}: the snapshot names no file"))?;
                    file = segment(&name).map_err(|e| format!("segment {seg} ({name}): {e}"))?;
                    let mut b = file.as_slice();
                    // Skip that file's own header: only its logs are wanted.
                    let len = prost::decode_length_delimiter(&mut b)
                        .map_err(|e| format!("segment {seg}: {e}"))?;
                    b.get(len..)
                        .ok_or_else(|| format!("segment {seg}: truncated header"))?
                };
                while !rest.is_empty() {
                    let log = read_log(&mut rest, &mut state.layouts)
                        .map_err(|e| format!("segment {seg}: {e}"))?;
                    if requests.contains(log.request_id.as_str()) {
                        let len = log.raw().len();
                        state.written.insert(log.request_id.clone(), (*seg, len));
                        logs.insert(log.request_id.clone(), Arc::new(log));
                    }
                }
            }
            state.segment_bytes = header
                .segment_bytes
                .iter()
                .map(|(s, b)| (*s, usize::try_from(*b).unwrap_or(usize::MAX)))
                .collect();
            state.segment_files = state
                .segment_bytes
                .keys()
                .filter_map(|e| Some((*e, file_of(*e)?)))
                .collect();
        } else {
            for f in &header.features {
                let log = read_log(&mut buf, &mut state.layouts)
                    .map_err(|e| format!("log of {:?}: {e}", f.request_id))?;
                logs.insert(f.request_id.clone(), Arc::new(log));
            }
            for r in &header.matched_only {
                let log = read_log(&mut buf, &mut state.layouts)
                    .map_err(|e| format!("log of {r:?}: {e}"))?;
                logs.insert(r.clone(), Arc::new(log));
            }
        }
        state.counts.lost_on_restore = lost.len() as u64;
        for f in header.features {
            if lost.contains(&f.request_id) {
                continue;
            }
            let log = logs
                .get(&f.request_id)
                .cloned()
                .ok_or_else(|| format!("no log for {:?}", f.request_id))?;
            let entry = FeatureEntry::new(log, f.impressed.into_iter().collect(), f.expires_at);
            state.bytes += entry.bytes;
            state
                .feature_expiry
                .insert((f.expires_at, f.request_id.clone()));
            state.features.insert(f.request_id, entry);
        }
        for p in header.pending {
            let matched = match p.matched_row {
                // Its log is gone: the impression waits as one whose features never came.
                Some(_) if lost.contains(&p.request_id) => None,
                Some(row) => Some((
                    logs.get(&p.request_id)
                        .cloned()
                        .ok_or_else(|| format!("no log for {:?}", p.request_id))?,
                    usize::try_from(row).map_err(|e| e.to_string())?,
                )),
                None => None,
            };
            let key = (p.request_id, p.item_id);
            let pending = Pending {
                impression_us: p.impression_us,
                first_us: p.first_us,
                labels: Labels {
                    clicks: p.clicks,
                    conversions: p.conversions,
                    other: p.other,
                    values: p.values,
                },
                matched,
                due: i64::MIN,
                indexed: false,
                event_ids: p.event_ids,
                early: p
                    .early
                    .into_iter()
                    .map(SnapEarly::restore)
                    .collect::<Result<_, _>>()?,
            };
            state.bytes += pending_bytes(&key) + pending.ids_bytes();
            state.pending.insert(key.clone(), pending);
            if !state.features.contains_key(&key.0) {
                state
                    .waiting
                    .entry(key.0.clone())
                    .or_default()
                    .push(key.1.clone());
            }
            state.reschedule(&key);
        }
        state.emitted = header
            .emitted
            .into_iter()
            .map(|e| (e.request_id, e.items.into_iter().collect()))
            .collect();
        state.max_features_us = header.max_features_us;
        state.watermark_us = header.watermark_us;
        state.sources = header.sources;
        state.features_idle_us = header.features_idle_us.unwrap_or(i64::MIN);
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000;

    fn config(label_window: Option<i64>) -> JoinConfig {
        JoinConfig {
            features_wait_us: 30 * MIN,
            impressions_wait_us: 5 * MIN,
            label_window_us: label_window,
            max_out_of_orderness_us: 0,
            negatives_rate: 0.0,
            max_bytes: usize::MAX,
            event_sources: 1,
        }
    }

    impl JoinState {
        /// Every pending entry is in the due index at its due time, and nothing else is.
        fn assert_index(&self) {
            assert!(self.pending.values().all(|p| p.indexed));
            let expected: BTreeSet<(i64, String, String)> = self
                .pending
                .iter()
                .map(|((r, i), p)| (p.due, r.clone(), i.clone()))
                .collect();
            assert_eq!(expected, self.pending_due);
        }
    }

    /// Takes an event as the runtime does when a single events partition is routed in order:
    /// the event, then the router's progress past it.
    trait Feed {
        fn feed(&mut self, e: Event) -> Vec<Row>;
    }

    impl Feed for JoinState {
        fn feed(&mut self, e: Event) -> Vec<Row> {
            let t = e.time_us;
            let mut rows = self.add_event(e);
            rows.extend(self.source_progress(0, t));
            rows
        }
    }

    fn log(request: &str, at_min: i64, items: &[&str]) -> FeatureLog {
        FeatureLog {
            request_id: request.into(),
            served_at: Some(prost_types::Timestamp {
                seconds: at_min * 60,
                nanos: 0,
            }),
            row_count: items.len() as u32,
            candidate_ids: items.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn event(request: &str, item: &str, at_min: i64, kind: EventKind) -> Event {
        Event {
            request_id: request.into(),
            item_id: item.into(),
            time_us: at_min * MIN,
            kind,
            labels: BTreeMap::new(),
            event_id: None,
        }
    }

    /// The name a writer `w` gives its state file of `epoch` in these tests.
    fn file_of(w: &str, epoch: u64) -> String {
        format!("state/{epoch:020}-{w}.bin")
    }

    fn file(epoch: u64) -> String {
        file_of("w", epoch)
    }

    /// Names of state files of snapshot formats before 4 (by epoch only).
    fn legacy(epoch: u64) -> String {
        format!("state/{epoch:020}.bin")
    }

    /// Reads state files from `files`, by name.
    fn read(
        files: &HashMap<String, Vec<u8>>,
    ) -> impl FnMut(&str) -> Result<Vec<u8>, String> + use<> {
        let files = files.clone();
        move |f: &str| files.get(f).cloned().ok_or(format!("no file {f}"))
    }

    /// A state restored from its first snapshot, as a restart after one checkpoint does.
    fn restored_from_one_checkpoint(s: &mut JoinState, config: JoinConfig) -> JoinState {
        let snap = s.snapshot(1, &file(1));
        let mut files: HashMap<String, Vec<u8>> = HashMap::default();
        files.insert(file(1), snap.bytes.clone());
        JoinState::restore(config, &snap.bytes, legacy, read(&files), no_topic).unwrap()
    }

    /// For restores of states whose logs are all in state files.
    fn no_topic(_: &BTreeSet<i64>) -> Result<std::collections::HashMap<i64, Vec<u8>>, String> {
        Err("no log is held by offset".into())
    }

    /// A feature-log partition: the records at their offsets.
    type Partition = BTreeMap<i64, Vec<u8>>;

    /// Takes `log` as the runtime does when the topic keeps the logs: with its offset.
    fn add_at(s: &mut JoinState, topic: &mut Partition, offset: i64, log: FeatureLog) {
        use prost::Message;
        topic.insert(offset, log.encode_to_vec());
        s.add_features(ServedLog::from(log).with_offset(offset));
    }

    /// Serves the records a restore asks for that `topic` has.
    fn read_from(
        topic: &Partition,
    ) -> impl FnOnce(&BTreeSet<i64>) -> Result<std::collections::HashMap<i64, Vec<u8>>, String> + '_
    {
        move |offsets| {
            Ok(offsets
                .iter()
                .filter_map(|o| topic.get(o).map(|b| (*o, b.clone())))
                .collect())
        }
    }

    fn keys(rows: &[Row]) -> Vec<(String, String)> {
        rows.iter()
            .map(|r| (r.request_id.clone(), r.item_id.clone()))
            .collect()
    }

    #[test]
    fn either_side_may_come_first() {
        let mut s = JoinState::new(config(None));
        assert!(s.add_features(log("r1", 0, &["a", "b"])).is_empty());
        let rows = s.feed(event("r1", "b", 1, EventKind::Impression));
        assert_eq!(keys(&rows), [("r1".into(), "b".into())]);
        assert_eq!(rows[0].row, 1);

        assert!(
            s.feed(event("r2", "x", 2, EventKind::Impression))
                .is_empty()
        );
        let rows = s.add_features(log("r2", 2, &["x"]));
        assert_eq!(keys(&rows), [("r2".into(), "x".into())]);
        assert_eq!(s.counts.joined, 2);
    }

    #[test]
    fn clicks_in_the_label_window_fold_in_and_the_row_waits_for_the_window() {
        let mut s = JoinState::new(config(Some(10 * MIN)));
        s.add_features(log("r1", 0, &["a", "b"]));
        assert!(
            s.feed(event("r1", "a", 1, EventKind::Impression))
                .is_empty()
        );
        assert!(s.feed(event("r1", "a", 3, EventKind::Click)).is_empty());
        let mut conv = event("r1", "a", 4, EventKind::Conversion);
        conv.labels.insert("revenue".into(), 12.5);
        assert!(s.feed(conv).is_empty());
        // Time moves on both inputs: the window (1 + 10 min) closes at 11.
        s.add_features(log("r9", 10, &["z"]));
        assert!(s.feed(event("r9", "z", 10, EventKind::Click)).is_empty());
        s.add_features(log("r8", 12, &["y"]));
        let rows = s.feed(event("r8", "y", 12, EventKind::Click));
        assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
        assert_eq!(rows[0].labels.clicks, 1);
        assert_eq!(rows[0].labels.conversions, 1);
        assert_eq!(rows[0].labels.values.get("revenue"), Some(&12.5));
        assert_eq!(rows[0].impression_time_us, Some(MIN));
        // A click after the row was emitted is late, not a second row.
        assert!(s.feed(event("r1", "a", 12, EventKind::Click)).is_empty());
        assert_eq!(s.counts.late, 1);
    }

    #[test]
    fn label_events_past_the_window_are_not_folded_whichever_side_is_read_first() {
        // Window 10 min; impression at minute 1, so the window closes at 11. A click at 3 and a
        // conversion at 11 count; a click at 12 does not, even when it is read before the
        // watermark has passed 11 or before the impression itself.
        let labels = || {
            let mut late_conv = event("r1", "a", 12, EventKind::Conversion);
            late_conv.labels.insert("revenue".into(), 99.0);
            let mut conv = event("r1", "a", 11, EventKind::Conversion);
            conv.labels.insert("revenue".into(), 12.5);
            vec![
                event("r1", "a", 3, EventKind::Click),
                event("r1", "a", 12, EventKind::Click),
                conv,
                late_conv,
                event("r1", "a", 13, EventKind::Other("share".into())),
            ]
        };
        let run = |impression_first: bool| {
            let mut s = JoinState::new(config(Some(10 * MIN)));
            s.add_features(log("r1", 0, &["a", "b"]));
            if impression_first {
                assert!(
                    s.feed(event("r1", "a", 1, EventKind::Impression))
                        .is_empty()
                );
            }
            for e in labels() {
                assert!(s.feed(e).is_empty());
            }
            if !impression_first {
                assert!(
                    s.feed(event("r1", "a", 1, EventKind::Impression))
                        .is_empty()
                );
            }
            // The features pass minute 11 too (the events already have): the window closes.
            let rows = s.add_features(log("r8", 14, &["y"]));
            assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
            let row = &rows[0];
            assert_eq!(
                s.counts.labels_outside_window, 3,
                "impression first: {impression_first}"
            );
            assert_eq!(s.counts.late, 0);
            (row.labels.clone(), row.impression_time_us)
        };
        let (labels_after, at) = run(true);
        assert_eq!(labels_after.clicks, 1);
        assert_eq!(labels_after.conversions, 1);
        assert!(labels_after.other.is_empty(), "{:?}", labels_after.other);
        assert_eq!(labels_after.values.get("revenue"), Some(&12.5));
        assert_eq!(at, Some(MIN));
        assert_eq!(
            run(false),
            (labels_after, at),
            "the row must not depend on which topic was read first"
        );
    }

    #[test]
    fn label_events_waiting_for_their_impression_survive_a_restore() {
        let mut s = JoinState::new(config(Some(10 * MIN)));
        s.add_features(log("r1", 0, &["a"]));
        let mut click = event("r1", "a", 2, EventKind::Click);
        click.labels.insert("dwell".into(), 3.0);
        s.feed(click);
        s.feed(event("r1", "a", 30, EventKind::Other("share".into())));
        let bytes_before = s.bytes;
        let mut r = restored_from_one_checkpoint(&mut s, config(Some(10 * MIN)));
        assert_eq!(
            r.bytes, bytes_before,
            "the early events are accounted as before"
        );
        assert!(
            r.feed(event("r1", "a", 1, EventKind::Impression))
                .is_empty()
        );
        let rows = r.add_features(log("r8", 14, &["y"]));
        assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
        assert_eq!(rows[0].labels.clicks, 1);
        assert_eq!(rows[0].labels.values.get("dwell"), Some(&3.0));
        assert!(rows[0].labels.other.is_empty());
        assert_eq!(
            r.counts.labels_outside_window, 1,
            "the share at 30 is past 1 + 10"
        );
    }

    #[test]
    fn expiries_are_counted_by_outcome_and_negatives_sampled() {
        let mut c = config(None);
        c.negatives_rate = 1.0;
        let mut s = JoinState::new(c);
        s.add_features(log("r1", 0, &["a", "b", "c"]));
        s.feed(event("r1", "a", 1, EventKind::Impression));
        s.feed(event("lost", "q", 1, EventKind::Impression));
        s.feed(event("r1", "zzz", 1, EventKind::Impression));
        // Both inputs reach minute 40: r1's features (30 min) and the lost impression (5 min)
        // have expired.
        s.add_features(log("late-req", 40, &["k"]));
        let rows = s.feed(event("late-req", "k", 40, EventKind::Impression));
        let negatives: Vec<_> = rows
            .iter()
            .filter(|r| r.impression_time_us.is_none())
            .map(|r| r.item_id.as_str())
            .collect();
        let mut negatives = negatives;
        negatives.sort();
        assert_eq!(negatives, ["b", "c"]);
        assert_eq!(s.counts.scored_not_impressed, 2);
        assert_eq!(s.counts.negatives, 2);
        assert_eq!(s.counts.impression_without_features, 1);
        assert_eq!(s.counts.unknown_item, 1);
        assert_eq!(s.counts.joined, 2);
    }

    #[test]
    fn an_impression_waits_the_impressions_wait_of_watermark_for_its_features() {
        // features-wait 30 min, impressions-wait 5 min. An impression at minute 10 whose
        // request was served at 9, but whose features are read only once the inputs have
        // reached minute 10 + `later` (the features stream lagging). `features_side`: whether
        // the features input moved too, or only the events' (the watermark is the lower).
        let run = |later: i64, features_side: bool| {
            let mut s = JoinState::new(config(None));
            assert!(
                s.feed(event("r1", "a", 10, EventKind::Impression))
                    .is_empty()
            );
            if features_side {
                assert!(s.add_features(log("tick", 10 + later, &["z"])).is_empty());
            }
            assert!(s.source_progress(0, (10 + later) * MIN).is_empty());
            let rows = s.add_features(log("r1", 9, &["a", "b"]));
            (keys(&rows), rows, s)
        };
        let (joined, rows, s) = run(4, true);
        assert_eq!(
            joined,
            [("r1".into(), "a".into())],
            "4 min < 5 min: it joins"
        );
        assert_eq!(rows[0].impression_time_us, Some(10 * MIN));
        assert_eq!(s.counts.impression_without_features, 0);

        let (joined, _, mut s) = run(6, true);
        assert!(
            joined.is_empty(),
            "6 min > 5 min: the impression gave up, though features wait 30"
        );
        assert_eq!(s.counts.impression_without_features, 1);
        assert_eq!(s.counts.joined, 0);
        // The features that came too late see no impression of `a`: at their expiry (9 + 30)
        // both candidates are scored but not impressed.
        s.add_features(log("tick2", 40, &["z"]));
        s.source_progress(0, 40 * MIN);
        assert_eq!(s.counts.scored_not_impressed, 2);

        let (joined, _, s) = run(6, false);
        assert_eq!(
            joined,
            [("r1".into(), "a".into())],
            "the events alone at 16 do not close the wait: the features input has not passed 15"
        );
        assert_eq!(s.counts.impression_without_features, 0);
    }

    #[test]
    fn features_wait_the_features_wait_from_served_at_whatever_the_inputs_interleave() {
        // r1 served at 0 (features-wait 30 min): its impression at 29 joins, its impression at
        // 31 never does, however the two inputs were interleaved when it was read.
        #[derive(Debug, Clone, Copy)]
        enum Order {
            /// Both inputs pass 30 (r1's features expire) before the impression at 31.
            WatermarkFirst,
            /// The features input is still at 0 when the impression at 31 is read.
            FeaturesBehind,
            /// Both impressions are read before r1's features.
            EventsFirst,
        }
        let run = |order: Order| {
            let mut s = JoinState::new(config(None));
            let mut rows = Vec::new();
            if !matches!(order, Order::EventsFirst) {
                rows.extend(s.add_features(log("r1", 0, &["a", "b"])));
            }
            rows.extend(s.feed(event("r1", "a", 29, EventKind::Impression)));
            match order {
                Order::WatermarkFirst => {
                    rows.extend(s.add_features(log("tick", 30, &["z"])));
                    rows.extend(s.source_progress(0, 30 * MIN));
                    assert_eq!(s.watermark_us(), 30 * MIN);
                    assert_eq!(s.requests(), 1, "r1's features expired at 0 + 30");
                }
                Order::FeaturesBehind => assert_eq!(s.watermark_us(), 0),
                Order::EventsFirst => {}
            }
            rows.extend(s.feed(event("r1", "b", 31, EventKind::Impression)));
            if matches!(order, Order::EventsFirst) {
                assert_eq!(s.watermark_us(), i64::MIN, "no features read yet");
                rows.extend(s.add_features(log("r1", 0, &["a", "b"])));
            }
            // Both inputs pass the impression's own wait (31 + 5).
            rows.extend(s.add_features(log("tick2", 40, &["z"])));
            rows.extend(s.source_progress(0, 40 * MIN));
            let out: Vec<_> = rows
                .iter()
                .map(|r| {
                    (
                        r.request_id.clone(),
                        r.item_id.clone(),
                        r.impression_time_us,
                    )
                })
                .collect();
            (out, s.counts)
        };
        let (rows, counts) = run(Order::WatermarkFirst);
        assert_eq!(rows, [("r1".into(), "a".into(), Some(29 * MIN))]);
        assert_eq!(counts.joined, 1);
        assert_eq!(
            counts.impression_without_features, 1,
            "the impression at 31"
        );
        assert_eq!(counts.scored_not_impressed, 1, "b, at r1's expiry");
        for order in [Order::FeaturesBehind, Order::EventsFirst] {
            assert_eq!(run(order), (rows.clone(), counts.clone()), "{order:?}");
        }
    }

    #[test]
    fn half_of_the_candidates_become_negatives_chosen_by_fnv_1a_of_request_and_item() {
        let mut c = config(None);
        c.negatives_rate = 0.5;
        let items: Vec<String> = (0..10).map(|j| format!("item-{j}")).collect();
        let items: Vec<&str> = items.iter().map(String::as_str).collect();
        // 200 requests of 10 candidates, `item-0` impressed in each; then both inputs pass
        // every expiry. `reversed`: the same inputs in the opposite order.
        let run = |reversed: bool| {
            let mut s = JoinState::new(c.clone());
            let mut requests: Vec<String> = (0..200).map(|i| format!("req-{i}")).collect();
            if reversed {
                requests.reverse();
            }
            let mut rows = Vec::new();
            for r in &requests {
                rows.extend(s.add_features(log(r, 0, &items)));
                rows.extend(s.feed(event(r, "item-0", 1, EventKind::Impression)));
            }
            rows.extend(s.add_features(log("tick", 40, &["z"])));
            rows.extend(s.source_progress(0, 40 * MIN));
            (rows, s.counts)
        };
        let (rows, counts) = run(false);
        let negatives: Vec<&Row> = rows.iter().filter(|r| r.item_id != "item-0").collect();
        assert_eq!(counts.scored_not_impressed, 200 * 9);
        assert_eq!(counts.negatives, negatives.len() as u64);
        let fraction = negatives.len() as f64 / 1800.0;
        assert!((0.45..=0.55).contains(&fraction), "{fraction}");
        // Computed apart from this code (Python, FNV-1a 64 of "req-N/item-M", whose value
        // mod 10^6 is below 500000): 890 negatives; req-0 and req-1 keep these.
        assert_eq!(negatives.len(), 890);
        let of = |request: &str| {
            let mut kept: Vec<&str> = negatives
                .iter()
                .filter(|r| r.request_id == request)
                .map(|r| r.item_id.as_str())
                .collect();
            kept.sort_unstable();
            kept
        };
        assert_eq!(
            of("req-0"),
            ["item-1", "item-3", "item-5", "item-6", "item-8", "item-9"]
        );
        assert_eq!(
            of("req-1"),
            ["item-1", "item-2", "item-4", "item-7", "item-9"]
        );
        // Next to the threshold: "req-9/item-4" hashes to 499960, "req-65/item-8" to 500398.
        assert!(of("req-9").contains(&"item-4"));
        assert!(!of("req-65").contains(&"item-8"));
        // A lower rate keeps a subset: "req-0/item-6" (374023) is out at 0.25, in at 0.375.
        assert!(!negative_sampled("req-0", "item-6", 0.25));
        assert!(negative_sampled("req-0", "item-6", 0.375));

        for r in &negatives {
            assert_eq!(r.impression_time_us, None, "{}/{}", r.request_id, r.item_id);
            assert_eq!(r.labels, Labels::default());
            assert_eq!(
                r.features.candidate_id(r.row).map(|c| c.to_string()),
                Some(r.item_id.clone()),
                "a negative's row is its candidate's"
            );
        }
        let negative_rows: Vec<Row> = negatives.iter().map(|r| (*r).clone()).collect();
        let batch =
            crate::rows::to_record_batch(&negative_rows, &crate::rows::InMemoryColumns::default())
                .unwrap();
        use arrow_array::cast::AsArray;
        let impressed = batch.column_by_name("impressed").unwrap().as_boolean();
        assert_eq!(
            impressed.true_count(),
            0,
            "negatives are written impressed = false"
        );
        assert_eq!(batch.num_rows(), 890);

        // The same inputs in another order (and other hash seeds) give the same negatives.
        let chosen = |rows: &[Row]| {
            let mut out: Vec<(String, String)> = rows
                .iter()
                .filter(|r| r.impression_time_us.is_none())
                .map(|r| (r.request_id.clone(), r.item_id.clone()))
                .collect();
            out.sort();
            out
        };
        let (again, again_counts) = run(true);
        assert_eq!(chosen(&again), chosen(&rows));
        assert_eq!(again_counts, counts);
    }

    #[test]
    fn integer_candidate_ids_join_by_their_decimal_text_only() {
        let mut c = config(None);
        c.negatives_rate = 1.0;
        let mut s = JoinState::new(c);
        // Over 128 candidates: lookups go through the index rather than a scan.
        let ids: Vec<i64> = (0..200).map(|i| i * 1_000_003 - 7).collect();
        s.add_features(FeatureLog {
            candidate_int_ids: ids.clone(),
            ..log("r1", 0, &[])
        });
        s.add_features(FeatureLog {
            row_count: 3,
            candidate_int_ids: vec![-7, 0, 42],
            ..log("r2", 0, &[])
        });
        let mut joined = Vec::new();
        for (request, item) in [("r1", "-7"), ("r1", "1999999"), ("r2", "42"), ("r2", "0")] {
            joined.extend(s.feed(event(request, item, 1, EventKind::Impression)));
        }
        // Not canonical decimal: no candidate.
        for item in ["042", "+42", "-0", "42.0", " 42"] {
            assert!(
                s.feed(event("r2", item, 1, EventKind::Impression))
                    .is_empty()
            );
        }
        let found: Vec<(&str, &str, usize)> = joined
            .iter()
            .map(|r| (r.request_id.as_str(), r.item_id.as_str(), r.row))
            .collect();
        assert_eq!(
            found,
            [
                ("r1", "-7", 0),
                ("r1", "1999999", 2),
                ("r2", "42", 2),
                ("r2", "0", 1)
            ]
        );
        assert_eq!(s.counts.unknown_item, 5);
        s.add_features(log("late-req", 40, &["k"]));
        let rows = s.feed(event("late-req", "k", 40, EventKind::Impression));
        let mut negatives: Vec<&str> = rows
            .iter()
            .filter(|r| r.request_id == "r2" && r.impression_time_us.is_none())
            .map(|r| r.item_id.as_str())
            .collect();
        negatives.sort();
        assert_eq!(negatives, ["-7"]);
        assert_eq!(s.counts.scored_not_impressed, 198 + 1);

        // Without negatives, the same count and no rows.
        let mut s = JoinState::new(config(None));
        s.add_features(FeatureLog {
            row_count: 3,
            candidate_int_ids: vec![-7, 0, 42],
            ..log("r2", 0, &[])
        });
        s.feed(event("r2", "42", 1, EventKind::Impression));
        s.add_features(log("late-req", 40, &["k"]));
        let rows = s.feed(event("late-req", "k", 40, EventKind::Impression));
        assert!(rows.iter().all(|r| r.impression_time_us.is_some()));
        assert_eq!(s.counts.scored_not_impressed, 2);
        assert_eq!(s.counts.negatives, 0);
    }

    #[test]
    fn the_watermark_never_moves_back() {
        let mut s = JoinState::new(config(None));
        s.add_features(log("r1", 20, &["a"]));
        s.feed(event("r1", "a", 20, EventKind::Impression));
        let wm = s.watermark_us();
        assert_eq!(wm, 20 * MIN);
        s.add_features(log("r2", 3, &["a"]));
        s.feed(event("r2", "a", 3, EventKind::Impression));
        assert_eq!(s.watermark_us(), wm);
    }

    #[test]
    fn the_memory_bound_evicts_the_oldest_features_first() {
        let mut c = config(None);
        let one =
            prost::Message::encoded_len(&log("r0", 0, &["a"])) + ENTRY_BYTES + CANDIDATE_BYTES;
        c.max_bytes = one * 2 + one / 2;
        let mut s = JoinState::new(c);
        for (i, r) in ["r0", "r1", "r2", "r3"].iter().enumerate() {
            s.add_features(log(r, i as i64, &["a"]));
        }
        assert_eq!(s.counts.evicted, 2);
        assert_eq!(s.requests(), 2);
        assert!(s.bytes() <= s.config.max_bytes);
        let mut held: Vec<&str> = s.features.keys().map(String::as_str).collect();
        held.sort_unstable();
        assert_eq!(
            held,
            ["r2", "r3"],
            "the two served first are the ones evicted"
        );
        // The newest survived and still joins.
        assert_eq!(s.feed(event("r3", "a", 3, EventKind::Impression)).len(), 1);
    }

    #[test]
    fn the_memory_bound_evicts_by_event_time_across_logs_and_waiting_impressions() {
        // A log served at minute 0 expires at 30; an impression at 20 waiting for features is
        // due at 25. By event time the log is the older, so it goes first, though the
        // impression would leave the state sooner.
        let mut c = config(None);
        let one =
            prost::Message::encoded_len(&log("r0", 0, &["a"])) + ENTRY_BYTES + CANDIDATE_BYTES;
        let waiting = pending_bytes(&("r2".to_owned(), "b".to_owned()));
        c.max_bytes = one + waiting + waiting / 2;
        let mut s = JoinState::new(c);
        s.add_features(log("r0", 0, &["a"]));
        s.feed(event("r2", "b", 20, EventKind::Impression));
        assert_eq!(s.counts.evicted, 0, "both fit");
        s.feed(event("r3", "c", 21, EventKind::Impression));
        assert_eq!(s.counts.evicted, 1);
        assert!(
            !s.features.contains_key("r0"),
            "the log served at 0 is the oldest"
        );
        let mut waiting: Vec<&str> = s.pending.keys().map(|(r, _)| r.as_str()).collect();
        waiting.sort_unstable();
        assert_eq!(waiting, ["r2", "r3"]);
        // The impression at 20 still joins when its features come.
        assert_eq!(s.add_features(log("r2", 20, &["b"])).len(), 1);
    }

    #[test]
    fn impressions_whose_features_never_come_cannot_fill_the_memory_bound() {
        let mut c = config(None);
        let one =
            prost::Message::encoded_len(&log("r0", 0, &["a"])) + ENTRY_BYTES + CANDIDATE_BYTES;
        c.max_bytes = one * 3;
        let mut s = JoinState::new(c);
        // Long ids from an app: they count against the bound.
        let long = "x".repeat(4096);
        for i in 0..20 {
            s.feed(event(&format!("{long}-{i}"), "a", 1, EventKind::Impression));
        }
        assert!(s.bytes() <= s.config.max_bytes, "{} bytes", s.bytes());
        assert!(s.counts.evicted > 0);
        // A feature log and its impression still join: the bound is not spent on entries
        // that will never join.
        // Each of those entries alone is over the bound: every one was evicted on arrival.
        assert_eq!(s.counts.evicted, 20);
        s.add_features(log("r1", 2, &["a"]));
        assert_eq!(s.feed(event("r1", "a", 2, EventKind::Impression)).len(), 1);
        assert_eq!(
            s.counts.evicted, 20,
            "the log and its row fit without evicting"
        );
    }

    #[test]
    fn a_restored_state_continues_exactly_like_the_original() {
        let run = |restore_midway: bool| {
            let mut s = JoinState::new(config(Some(10 * MIN)));
            let mut rows = Vec::new();
            rows.extend(s.add_features(log("r1", 0, &["a", "b", "c"])));
            rows.extend(s.feed(event("r1", "a", 1, EventKind::Impression)));
            rows.extend(s.feed(event("r1", "b", 2, EventKind::Click)));
            rows.extend(s.feed(event("r2", "x", 2, EventKind::Impression)));
            if restore_midway {
                s = JoinState::restore(
                    config(Some(10 * MIN)),
                    &s.snapshot(1, &file(1)).bytes,
                    legacy,
                    |_: &str| unreachable!("everything is in the one file"),
                    no_topic,
                )
                .unwrap();
            }
            s.assert_index();
            rows.extend(s.feed(event("r1", "a", 3, EventKind::Click)));
            rows.extend(s.feed(event("r1", "b", 3, EventKind::Impression)));
            rows.extend(s.add_features(log("r2", 4, &["x"])));
            rows.extend(s.add_features(log("r9", 40, &["z"])));
            rows.extend(s.feed(event("r9", "z", 40, EventKind::Click)));
            s.assert_index();
            let mut out: Vec<_> = rows
                .into_iter()
                .map(|r| {
                    (
                        r.request_id,
                        r.item_id,
                        r.row,
                        r.impression_time_us,
                        r.labels,
                    )
                })
                .collect();
            out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
            out
        };
        let straight = run(false);
        assert_eq!(straight.len(), 3);
        assert_eq!(run(true), straight);
    }

    #[test]
    fn an_idle_advance_closes_windows_when_traffic_stops() {
        let mut s = JoinState::new(config(Some(10 * MIN)));
        s.add_features(log("r1", 0, &["a"]));
        assert!(
            s.feed(event("r1", "a", 1, EventKind::Impression))
                .is_empty()
        );
        assert!(
            s.advance().is_empty(),
            "no new events: the window stays open"
        );
        assert!(
            s.features_idle(12 * MIN).is_empty(),
            "the events partition has not said it is quiet"
        );
        let rows = s.source_progress(0, 12 * MIN);
        assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
        assert!(s.features_idle(5 * MIN).is_empty());
        assert!(s.source_progress(0, 5 * MIN).is_empty());
        assert_eq!(s.watermark_us(), 12 * MIN, "never back");
    }

    /// The requests whose logs a state file holds.
    fn logs_in(file: &[u8]) -> Vec<String> {
        use prost::Message;
        let mut b = file;
        let len = prost::decode_length_delimiter(&mut b).unwrap();
        b = &b[len..];
        let mut out = Vec::new();
        while !b.is_empty() {
            out.push(
                FeatureLog::decode_length_delimited(&mut b)
                    .unwrap()
                    .request_id,
            );
        }
        out.sort();
        out
    }

    #[test]
    fn snapshots_write_each_log_once_and_restore_from_their_segments() {
        let mut files: HashMap<String, Vec<u8>> = HashMap::default();
        let mut s = JoinState::new(config(Some(10 * MIN)));
        for r in ["r1", "r2", "r3", "r4", "r5"] {
            s.add_features(log(r, 0, &["a", "b"]));
        }
        s.add_features(log("r6", 20, &["a", "b"]));
        let first = s.snapshot(1, &file(1));
        assert_eq!(first.segments, [1]);
        assert_eq!(first.files, [file(1)]);
        files.insert(file(1), first.bytes.clone());

        s.add_features(log("r7", 21, &["c"]));
        s.feed(event("r6", "a", 22, EventKind::Impression));
        let second = s.snapshot(2, &file(2));
        assert_eq!(
            second.segments,
            [1, 2],
            "r7's log is new, the others are in 1"
        );
        assert_eq!(logs_in(&first.bytes).len(), 6);
        assert_eq!(
            logs_in(&second.bytes),
            ["r7"],
            "only the new log is written"
        );
        assert_eq!(second.files, [file(1), file(2)]);
        files.insert(file(2), second.bytes.clone());
        let mut restored = JoinState::restore(
            config(Some(10 * MIN)),
            &second.bytes,
            legacy,
            read(&files),
            no_topic,
        )
        .unwrap();
        assert_eq!(restored.segment_files(), [file(1), file(2)]);

        // Both go on the same way: r1..r5 expire, r6's impression is emitted.
        let later = |s: &mut JoinState| {
            let mut rows = s.feed(event("r7", "c", 35, EventKind::Impression));
            rows.extend(s.add_features(log("r8", 60, &["d"])));
            rows.extend(s.feed(event("x", "y", 60, EventKind::Click)));
            keys(&rows)
        };
        let rows = later(&mut s);
        assert_eq!(rows, [("r6".into(), "a".into()), ("r7".into(), "c".into())]);
        assert_eq!(later(&mut restored), rows);
        assert_eq!(
            restored.counts.scored_not_impressed,
            s.counts.scored_not_impressed
        );

        // Now segment 1 and 2 hold only dead logs and r8 is new: nothing old is referenced.
        let third = s.snapshot(3, &file(3));
        assert_eq!(third.segments, [3]);
        files.clear();
        files.insert(file(3), third.bytes.clone());
        let r = JoinState::restore(
            config(Some(10 * MIN)),
            &third.bytes,
            legacy,
            read(&files),
            no_topic,
        )
        .unwrap();
        assert_eq!(r.requests(), 1);
    }

    #[test]
    fn logs_the_topic_keeps_are_named_by_offset_and_read_back_on_restore() {
        let mut topic = Partition::new();
        let mut s = JoinState::new(config(Some(10 * MIN)));
        add_at(&mut s, &mut topic, 100, log("r1", 0, &["a", "b"]));
        add_at(&mut s, &mut topic, 101, log("r2", 0, &["a", "b"]));
        // A log with no offset (the topic might not keep it) is copied as before.
        s.add_features(log("r3", 1, &["c"]));
        // r1's impression matched and waits for its label window.
        s.feed(event("r1", "a", 1, EventKind::Impression));
        let first = s.snapshot(1, &file(1));
        assert_eq!(logs_in(&first.bytes), ["r3"], "only r3's bytes are copied");
        assert_eq!(first.segments, [1]);

        let mut asked = BTreeSet::new();
        let mut restored = JoinState::restore(
            config(Some(10 * MIN)),
            &first.bytes,
            legacy,
            |f: &str| Err(format!("segment {f} should not be read")),
            |offsets: &BTreeSet<i64>| {
                asked = offsets.clone();
                read_from(&topic)(offsets)
            },
        )
        .unwrap();
        assert_eq!(asked, BTreeSet::from([100, 101]));
        assert_eq!(restored.counts.lost_on_restore, 0);

        let later = |s: &mut JoinState| {
            let mut rows = s.feed(event("r1", "a", 3, EventKind::Click));
            rows.extend(s.feed(event("r2", "b", 3, EventKind::Impression)));
            rows.extend(s.feed(event("r3", "c", 4, EventKind::Impression)));
            rows.extend(s.add_features(log("r9", 40, &["z"])));
            rows.extend(s.feed(event("r9", "z", 40, EventKind::Click)));
            rows.into_iter()
                .map(|r| (r.request_id, r.item_id, r.row, r.labels.clicks))
                .collect::<Vec<_>>()
        };
        let rows = later(&mut s);
        assert_eq!(rows.len(), 3);
        assert_eq!(later(&mut restored), rows);
        assert_eq!(restored.counts.joined, s.counts.joined);
        // The restored logs keep their offsets: the next snapshot copies none of them, only
        // r9's, which came with none.
        add_at(&mut restored, &mut topic, 102, log("r4", 41, &["d"]));
        assert_eq!(logs_in(&restored.snapshot(2, &file(2)).bytes), ["r9"]);
    }

    #[test]
    fn a_log_the_topic_no_longer_has_is_counted_lost_and_its_impressions_find_no_features() {
        let mut topic = Partition::new();
        let mut s = JoinState::new(config(Some(10 * MIN)));
        add_at(&mut s, &mut topic, 5, log("r1", 0, &["a"]));
        add_at(&mut s, &mut topic, 6, log("r2", 0, &["a"]));
        s.feed(event("r1", "a", 1, EventKind::Impression));
        let snapshot = s.snapshot(1, &file(1));
        // Retention deleted offset 5 before the restore.
        topic.remove(&5);
        let mut r = JoinState::restore(
            config(Some(10 * MIN)),
            &snapshot.bytes,
            legacy,
            |_: &str| unreachable!(),
            read_from(&topic),
        )
        .unwrap();
        assert_eq!(r.counts.lost_on_restore, 1);
        assert_eq!(r.requests(), 1);
        let mut rows = r.feed(event("r2", "a", 2, EventKind::Impression));
        rows.extend(r.add_features(log("r9", 40, &["z"])));
        rows.extend(r.feed(event("r9", "z", 40, EventKind::Click)));
        assert_eq!(keys(&rows), [("r2".into(), "a".into())]);
        assert_eq!(r.counts.impression_without_features, 1, "r1's impression");
    }

    #[test]
    fn a_restore_refuses_a_topic_whose_offsets_hold_other_requests() {
        let mut topic = Partition::new();
        let mut s = JoinState::new(config(None));
        add_at(&mut s, &mut topic, 0, log("r1", 0, &["a"]));
        let snapshot = s.snapshot(1, &file(1));
        // The topic was deleted and created again: offset 0 is someone else's record now.
        let mut other = Partition::new();
        add_at(
            &mut JoinState::new(config(None)),
            &mut other,
            0,
            log("q", 0, &["a"]),
        );
        let err = JoinState::restore(
            config(None),
            &snapshot.bytes,
            legacy,
            |_: &str| unreachable!(),
            read_from(&other),
        )
        .err()
        .unwrap();
        assert!(err.contains("created again"), "{err}");
    }

    #[test]
    fn a_snapshot_compacts_segments_that_are_mostly_dead() {
        let mut files: HashMap<String, Vec<u8>> = HashMap::default();
        let mut s = JoinState::new(config(None));
        for r in ["r1", "r2", "r3", "r4", "r5"] {
            s.add_features(log(r, 0, &["a", "b", "c", "d"]));
        }
        s.add_features(log("r6", 20, &["a"]));
        files.insert(file(1), s.snapshot(1, &file(1)).bytes);
        s.add_features(log("r7", 21, &["a"]));
        files.insert(file(2), s.snapshot(2, &file(2)).bytes);
        // r1..r5 expire at 30; r6 lives on, alone in segment 1.
        s.feed(event("x", "y", 31, EventKind::Click));
        s.features_idle(31 * MIN);
        assert_eq!(s.requests(), 2);
        let third = s.snapshot(3, &file(3));
        assert_eq!(
            third.segments,
            [3],
            "the live logs were written again into 3"
        );
        assert_eq!(logs_in(&third.bytes), ["r6", "r7"]);
        let r = JoinState::restore(
            config(None),
            &third.bytes,
            legacy,
            |f: &str| Err(format!("segment {f} should not be read")),
            no_topic,
        )
        .unwrap();
        assert_eq!(r.requests(), 2);
        let rows = {
            let mut r = r;
            r.feed(event("r6", "a", 32, EventKind::Impression))
        };
        assert_eq!(keys(&rows), [("r6".into(), "a".into())]);
    }

    #[test]
    fn an_events_topic_that_gains_a_partition_holds_the_watermark_until_it_reports() {
        let mut s = JoinState::new(config(Some(2 * MIN)));
        s.add_features(log("r1", 0, &["a"]));
        s.add_features(log("r2", 20, &["b"]));
        assert!(s.source_progress(0, MIN).is_empty());
        assert_eq!(s.watermark_us(), MIN);
        // A second partition appears; the first one's progress alone no longer moves it.
        s.set_event_sources(2);
        assert!(s.source_progress(0, 10 * MIN).is_empty());
        assert_eq!(s.watermark_us(), MIN, "partition 1 has not reported");
        // An impression in the new partition, older than partition 0's progress: not late.
        assert!(
            s.add_event(event("r1", "a", 2, EventKind::Impression))
                .is_empty()
        );
        let rows = s.source_progress(1, 10 * MIN);
        assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
        assert_eq!(s.watermark_us(), 10 * MIN);
        // Never fewer.
        s.set_event_sources(1);
        assert!(s.source_progress(0, 12 * MIN).is_empty());
        assert_eq!(s.watermark_us(), 10 * MIN, "partition 1 still counts");
    }

    #[test]
    fn one_events_partition_read_ahead_of_another_does_not_close_windows() {
        let mut c = config(Some(2 * MIN));
        c.event_sources = 2;
        let mut s = JoinState::new(c.clone());
        s.add_features(log("r1", 0, &["a"]));
        s.add_features(log("r2", 30, &["b"]));
        // Partition 0 is routed far ahead (a backlog read first, say); partition 1 has not
        // reported at all yet.
        assert!(
            s.add_event(event("r1", "a", 1, EventKind::Impression))
                .is_empty()
        );
        assert!(s.source_progress(0, 30 * MIN).is_empty());
        assert_eq!(s.watermark_us(), i64::MIN, "partition 1 has not reported");
        // Partition 1's click for r1 comes later in wall time, but within the label window.
        assert!(
            s.add_event(event("r1", "a", 2, EventKind::Click))
                .is_empty()
        );
        let rows = s.source_progress(1, 2 * MIN);
        assert!(rows.is_empty(), "the window closes at minute 3");
        let rows = s.source_progress(1, 4 * MIN);
        assert_eq!(keys(&rows), [("r1".into(), "a".into())]);
        assert_eq!(
            rows[0].labels.clicks, 1,
            "the slower partition's click is in the row"
        );
        assert_eq!(s.watermark_us(), 4 * MIN);
        // The progress survives a snapshot.
        let mut r = JoinState::restore(
            c,
            &s.snapshot(1, &file(1)).bytes,
            legacy,
            |_: &str| unreachable!(),
            no_topic,
        )
        .unwrap();
        assert_eq!(r.watermark_us(), 4 * MIN);
        r.add_event(event("r2", "b", 31, EventKind::Impression));
        assert!(
            r.source_progress(1, 40 * MIN).is_empty(),
            "partition 0 is at 30"
        );
        assert_eq!(r.watermark_us(), 30 * MIN);
    }

    #[test]
    fn quiet_features_let_the_events_side_move_the_watermark() {
        let mut s = JoinState::new(config(None));
        s.add_features(log("r1", 0, &["a"]));
        // Events keep coming but no features do: without the idle signal the features' side
        // holds the watermark at their newest served time.
        s.feed(event("x", "q", 50, EventKind::Click));
        assert_eq!(s.watermark_us(), 0);
        s.features_idle(45 * MIN);
        assert_eq!(s.watermark_us(), 45 * MIN);
        assert_eq!(
            s.counts.scored_not_impressed, 1,
            "r1's features expired at 30"
        );
    }

    #[test]
    fn a_repeated_impression_gives_one_row() {
        let mut s = JoinState::new(config(Some(MIN)));
        s.add_features(log("r1", 0, &["a"]));
        s.feed(event("r1", "a", 1, EventKind::Impression));
        s.feed(event("r1", "a", 1, EventKind::Impression));
        s.add_features(log("r2", 5, &["b"]));
        let rows = s.feed(event("r2", "b", 5, EventKind::Click));
        assert_eq!(rows.len(), 1);
        assert_eq!(s.counts.joined, 1);
    }

    #[test]
    fn retried_events_count_once_per_event_id_even_across_a_restore() {
        let with_id = |mut e: Event, id: &str| {
            e.event_id = Some(id.into());
            e
        };
        let mut s = JoinState::new(config(Some(10 * MIN)));
        s.add_features(log("r1", 0, &["a", "b"]));
        let bytes = s.bytes();
        let mut impression = with_id(event("r1", "a", 1, EventKind::Impression), "imp-1");
        impression.labels.insert("dwell".into(), 4.0);
        s.feed(impression.clone());
        s.feed(with_id(event("r1", "a", 2, EventKind::Click), "click-1"));
        // The app's collector retries both.
        s.feed(impression);
        s.feed(with_id(event("r1", "a", 2, EventKind::Click), "click-1"));
        assert!(s.bytes() > bytes, "the ids count against the bound");
        let mut restored = restored_from_one_checkpoint(&mut s, config(Some(10 * MIN)));
        let later = |s: &mut JoinState| {
            // A retry read after a restart, a second real click, a click whose app gives no
            // ids (counted, as every event without one), and the close of the window.
            let mut rows = s.feed(with_id(event("r1", "a", 3, EventKind::Click), "click-1"));
            rows.extend(s.feed(with_id(event("r1", "a", 4, EventKind::Click), "click-2")));
            rows.extend(s.feed(event("r1", "a", 5, EventKind::Click)));
            rows.extend(s.add_features(log("r9", 12, &["z"])));
            rows.extend(s.feed(event("x", "y", 12, EventKind::Click)));
            rows
        };
        // Counts are this process's (for its metrics): the restored state counts from 0.
        for (s, duplicates) in [(&mut s, 3), (&mut restored, 1)] {
            let rows = later(s);
            assert_eq!(keys(&rows), [("r1".to_string(), "a".to_string())]);
            assert_eq!(
                rows[0].labels.clicks, 3,
                "click-1, click-2 and the one without id"
            );
            assert_eq!(
                rows[0].labels.values["dwell"], 4.0,
                "the retried impression adds nothing"
            );
            assert_eq!(rows[0].impression_time_us, Some(MIN));
            assert_eq!(s.counts.duplicate_events, duplicates);
        }
        // What the ids held is given back with the entry.
        s.feed(event("r1", "b", 13, EventKind::Impression));
        s.features_idle(i64::MAX / 2);
        s.source_progress(0, i64::MAX / 2);
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn without_a_label_window_an_impression_after_its_features_is_the_row_at_once() {
        let mut s = JoinState::new(config(None));
        s.add_features(log("r1", 0, &["a", "b", "c"]));
        let bytes = s.bytes();
        // A click first: it waits, and the impression after it carries it into the row.
        assert!(s.feed(event("r1", "c", 1, EventKind::Click)).is_empty());
        let mut impression = event("r1", "a", 2, EventKind::Impression);
        impression.labels.insert("price".into(), 2.5);
        let rows = s.feed(impression);
        assert_eq!(keys(&rows), [("r1".to_string(), "a".to_string())]);
        assert_eq!(rows[0].row, 0);
        assert_eq!(rows[0].impression_time_us, Some(2 * MIN));
        assert_eq!(rows[0].labels.values["price"], 2.5);
        assert_eq!(rows[0].labels.clicks, 0);
        let rows = s.feed(event("r1", "c", 3, EventKind::Impression));
        assert_eq!(
            (rows[0].row, rows[0].labels.clicks),
            (2, 1),
            "the earlier click folds in"
        );
        // Once written, the same impression again and a later click are late, not rows.
        assert!(
            s.feed(event("r1", "a", 4, EventKind::Impression))
                .is_empty()
        );
        assert!(s.feed(event("r1", "a", 4, EventKind::Click)).is_empty());
        assert_eq!((s.counts.joined, s.counts.late), (2, 2));
        assert_eq!(s.bytes(), bytes, "nothing left pending");
        // What was impressed is not counted as scored-but-not-impressed at expiry.
        s.features_idle(i64::MAX / 2);
        s.source_progress(0, i64::MAX / 2);
        assert_eq!(s.requests(), 0);
        assert_eq!(s.counts.scored_not_impressed, 1);
    }

    #[test]
    fn served_at_at_the_ends_of_the_timestamp_range_saturates() {
        let at = |seconds, nanos| {
            served_at_us(&FeatureLog {
                served_at: Some(prost_types::Timestamp { seconds, nanos }),
                ..FeatureLog::default()
            })
        };
        assert_eq!(at(i64::MAX, 999_999_999), i64::MAX);
        assert_eq!(at(i64::MIN, -999_999_999), i64::MIN);
        assert_eq!(at(1_764_439_200, 123_456_789), 1_764_439_200_123_456);
    }

    #[test]
    fn a_restore_reads_each_segment_from_the_file_the_snapshot_names() {
        let mut files: HashMap<String, Vec<u8>> = HashMap::default();
        // The owner (writer b) committed epoch 1.
        let mut owner = JoinState::new(config(None));
        owner.add_features(log("r0", 0, &["a"]));
        let first = owner.snapshot(1, &file_of("b", 1));
        files.insert(file_of("b", 1), first.bytes.clone());
        // A zombie (writer a) holds the same state; both read different logs for epoch 2.
        let mut zombie =
            JoinState::restore(config(None), &first.bytes, legacy, read(&files), no_topic).unwrap();
        owner.add_features(log("owner", 1, &["o"]));
        zombie.add_features(log("zombie", 1, &["z"]));
        let second = owner.snapshot(2, &file_of("b", 2));
        files.insert(file_of("b", 2), second.bytes.clone());
        // The owner committed epoch 2; the zombie writes its own file of epoch 2 late.
        let late = zombie.snapshot(2, &file_of("a", 2));
        assert_eq!(logs_in(&late.bytes), ["zombie"]);
        files.insert(file_of("a", 2), late.bytes);
        // The owner's next snapshot refers to its own file of epoch 2, by name.
        owner.add_features(log("r3", 2, &["c"]));
        let third = owner.snapshot(3, &file_of("b", 3));
        assert_eq!(
            third.files,
            [file_of("b", 1), file_of("b", 2), file_of("b", 3)]
        );
        files.insert(file_of("b", 3), third.bytes.clone());
        let mut r = JoinState::restore(
            config(None),
            &third.bytes,
            |e| format!("by-epoch/{e}"),
            read(&files),
            no_topic,
        )
        .unwrap();
        assert_eq!(r.requests(), 3);
        assert_eq!(
            keys(&r.feed(event("owner", "o", 3, EventKind::Impression))),
            [("owner".to_string(), "o".to_string())]
        );
        assert!(
            r.feed(event("zombie", "z", 3, EventKind::Impression))
                .is_empty(),
            "the zombie's log is not in the owner's state"
        );
    }

    #[test]
    fn snapshots_of_earlier_formats_restore_from_segments_named_by_epoch() {
        use prost::Message;
        // A state file as joiners before format 4 wrote it: no segment names.
        let old = |bytes: &[u8], format: u32| -> Vec<u8> {
            let mut rest = bytes;
            let mut header = SnapshotHeader::decode_length_delimited(&mut rest).unwrap();
            assert_eq!(header.format, 4);
            header.format = format;
            header.segment_files.clear();
            let mut out = header.encode_length_delimited_to_vec();
            out.extend_from_slice(rest);
            out
        };
        let mut s = JoinState::new(config(None));
        s.add_features(log("r1", 0, &["a"]));
        let first = s.snapshot(1, &file(1));
        s.add_features(log("r2", 0, &["b"]));
        let second = s.snapshot(2, &file(2));
        for format in [2, 3] {
            let mut files: HashMap<String, Vec<u8>> = HashMap::default();
            files.insert(legacy(1), old(&first.bytes, format));
            files.insert(legacy(2), old(&second.bytes, format));
            let mut r = JoinState::restore(
                config(None),
                &files[&legacy(2)],
                legacy,
                read(&files),
                no_topic,
            )
            .unwrap();
            assert_eq!(r.requests(), 2);
            assert_eq!(r.segment_files(), [legacy(1), legacy(2)]);
            // The next snapshot names the old files it still refers to.
            r.add_features(log("r3", 1, &["c"]));
            let next = r.snapshot(3, &file(3));
            assert_eq!(next.files, [legacy(1), legacy(2), file(3)]);
            files.insert(file(3), next.bytes.clone());
            let again = JoinState::restore(
                config(None),
                &next.bytes,
                |e| format!("by-epoch/{e}"),
                read(&files),
                no_topic,
            )
            .unwrap();
            assert_eq!(again.requests(), 3);
        }
    }
}
