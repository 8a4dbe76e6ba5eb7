//! The entries of the join's two tables (a request's feature log; a candidate's impression and
//! label events, pending until its row), what each is accounted against the memory bound, and
//! the upkeep of a pending entry: its place in the due index, its removal, and its row; and
//! the tables' spare capacity, given back once a backlog has drained.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::candidates::CandidateSet;
use super::key::DueKey;
use super::{HashMap, JoinState, Labels, Row};
use crate::event::EventKind;
use crate::log::{CandidateIndex, ServedLog};

pub(super) struct FeatureEntry {
    pub(super) log: Arc<ServedLog>,
    pub(super) bytes: usize,
    /// Candidate id -> row, built on the first lookup in a long candidate list: most requests
    /// see a few impressions, and building a map of every candidate for each request cost more
    /// (a clone and a hash per candidate, in the profile) than scanning a short list.
    index: Option<CandidateIndex>,
    /// Candidates with an impression (joined or pending), for the scored-not-impressed count.
    pub(super) impressed: CandidateSet,
    /// Candidates whose row was emitted: a later event for one of them is late, never a second
    /// row. Forgotten with the entry, as everything else about the request is: a row emitted
    /// after its features expired (a label window longer than `features-wait`) is not noted,
    /// or the request would be remembered for good.
    pub(super) emitted: CandidateSet,
    /// When the features stop joining: served-at plus the features wait, as in
    /// `feature_expiry`. An impression from then on never joins them, even while the watermark
    /// still holds them, so that whether it joins does not depend on how far the other input
    /// had been read.
    pub(super) expires_at: i64,
    /// Where the entry's encoding sits in [`JoinState`]'s `last_features`, the previous state
    /// file's held logs, and the segment its log was in then, while no field that a state
    /// file keeps has changed since (see `Pending::encoded`). Cleared by a new impressed item.
    pub(super) encoded: Option<((u32, u32), u64)>,
}

impl FeatureEntry {
    /// Accounts for a record's size: its bytes, what decoding it adds per record and per
    /// candidate (its id's position), and the entry's own tables.
    pub(super) fn new(log: Arc<ServedLog>, expires_at: i64) -> Self {
        let bytes = log.raw().len() + ENTRY_BYTES + CANDIDATE_BYTES * log.candidate_count();
        Self {
            log,
            bytes,
            index: None,
            impressed: CandidateSet::default(),
            emitted: CandidateSet::default(),
            expires_at,
            encoded: None,
        }
    }

    /// The ids of `set`'s candidates, as a state file lists them.
    pub(super) fn item_ids<'a>(
        &'a self,
        set: &'a CandidateSet,
    ) -> impl Iterator<Item = String> + 'a {
        let mut text = String::new();
        set.iter()
            .filter_map(move |row| Some(self.log.candidate_id(row)?.text(&mut text).to_owned()))
    }

    /// The candidates a state file lists by id; an id the log does not have is left out.
    pub(super) fn rows_of(&mut self, items: &[String]) -> CandidateSet {
        let mut set = CandidateSet::default();
        for row in items.iter().filter_map(|item| self.row_of(item)) {
            set.insert(row);
        }
        set
    }

    /// The row of a candidate; the first, should a request list an item twice.
    pub(super) fn row_of(&mut self, item: &str) -> Option<usize> {
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
pub(super) struct Pending {
    pub(super) impression_us: Option<i64>,
    pub(super) first_us: i64,
    pub(super) labels: Labels,
    /// Set once impression and features have met.
    pub(super) matched: Option<(Arc<ServedLog>, usize)>,
    /// Index key currently scheduled in `pending_due`.
    pub(super) due: i64,
    /// Whether `(due, request, item)` is in `pending_due`: known here, so that neither
    /// scheduling nor removal builds the index key (two id copies) only to look for it.
    pub(super) indexed: bool,
    /// The ids of the events counted in this entry (those that had one): a retry of one of
    /// them must not count a click or add a label value twice. A few per entry, so a list.
    pub(super) event_ids: Vec<String>,
    /// The entry's label events, held until its row is emitted: whether one falls in the label
    /// window is known only once the earliest impression's time is, which a repeated
    /// impression read later (another partition, another order) may still lower. Deciding it
    /// at the emission makes the row the same whatever the read order.
    pub(super) early: Vec<EarlyLabel>,
    /// Where the entry's encoding sits in [`JoinState`]'s `last_pending`, the previous state
    /// file's pending entries, while no field that a state file keeps has changed since: the
    /// next snapshot copies those bytes instead of encoding the entry again. Most entries wait
    /// unchanged through many commits (an impression for its label window), and encoding each
    /// at every commit was half of a small commit's CPU. Cleared by every change to a kept
    /// field.
    pub(super) encoded: Option<(u32, u32)>,
}

/// A click, conversion or other label event held until its impression's time is known.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EarlyLabel {
    pub(super) time_us: i64,
    pub(super) kind: EventKind,
    pub(super) values: BTreeMap<String, f64>,
}

impl EarlyLabel {
    pub(super) fn bytes(&self) -> usize {
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
    pub(super) fn ids_bytes(&self) -> usize {
        self.event_ids
            .iter()
            .map(|id| id.len() + ID_BYTES)
            .sum::<usize>()
            + self.early.iter().map(EarlyLabel::bytes).sum::<usize>()
    }

    /// Folds a label event into the labels, or counts it outside the window (`false`).
    fn fold(&mut self, window_us: Option<i64>, early: EarlyLabel) -> bool {
        if let (Some(impression), Some(window)) = (self.impression_us, window_us)
            && early.time_us > impression.saturating_add(window)
        {
            return false;
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
pub(super) const ID_BYTES: usize = 32;

const PENDING_BYTES: usize = 256;

/// What a pending entry is accounted: the fixed part and its ids, which it holds up to three
/// times (its map key, its due index and the list of items waiting for features). The ids come
/// from apps, so their length must count against the bound.
pub(super) fn pending_bytes(key: &(String, String)) -> usize {
    PENDING_BYTES + 3 * (key.0.len() + key.1.len())
}
/// A held log beyond its record's bytes: the entry, its map slot, its expiry, the decoded
/// scalar fields and column positions, and the allocator's slack. Set so that the accounting
/// stays above the resident memory the joiner benchmark measures (10 columns, 100 candidates).
pub(super) const ENTRY_BYTES: usize = 1024;
/// Per candidate: its id's position in the record (8 bytes) and slack for the index of long
/// lists, built on the first lookup.
pub(super) const CANDIDATE_BYTES: usize = 16;

impl JoinState {
    /// Puts a pending entry in the index at the next time something must happen to it.
    pub(super) fn reschedule(&mut self, key: &(String, String)) {
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
                    .remove(&(p.due, key.0.as_str(), key.1.as_str()) as &dyn DueKey);
            }
            p.due = due;
            p.indexed = true;
            self.pending_due.insert((due, key.0.clone(), key.1.clone()));
        }
    }

    pub(super) fn remove_pending(&mut self, key: &(String, String)) -> Option<Pending> {
        let p = self.pending.remove(key)?;
        if let Some(items) = self.waiting.get_mut(&key.0) {
            items.retain(|i| *i != key.1);
            if items.is_empty() {
                self.waiting.remove(&key.0);
            }
        }
        if p.indexed {
            self.pending_due
                .remove(&(p.due, key.0.as_str(), key.1.as_str()) as &dyn DueKey);
        }
        self.bytes = self
            .bytes
            .saturating_sub(pending_bytes(key) + p.ids_bytes());
        Some(p)
    }

    pub(super) fn emit(&mut self, key: &(String, String), out: &mut Vec<Row>) {
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
        if let Some(f) = self.features.get_mut(&key.0)
            && Arc::ptr_eq(&f.log, &features)
        {
            f.emitted.insert(row);
        }
        out.push(Row {
            request_id: key.0.clone(),
            item_id: key.1.clone(),
            features,
            row,
            impression_time_us: p.impression_us,
            labels: p.labels,
        });
    }
}

/// A table keeps its slots until it has more than this many and holds fewer than a quarter of
/// them: a small table that grows and drains every commit is not reallocated each time.
const SPARE_SLOTS: usize = if cfg!(test) { 4 } else { 1024 };

/// Gives back most of `table`'s slots when it holds a small part of them, keeping twice its
/// entries. Shrinking costs a pass over the table; it happens only after at least a quarter of
/// the capacity was emptied since the table grew, which pays for it.
fn release_spare<K: Eq + std::hash::Hash, V>(table: &mut HashMap<K, V>) {
    if table.capacity() > (4 * table.len()).max(SPARE_SLOTS) {
        table.shrink_to(2 * table.len());
    }
}

impl JoinState {
    /// Gives back the tables' spare slots. A backlog (impressions read ahead of their feature
    /// logs, a burst of requests) grows the tables to its peak, and a hash table never
    /// shrinks by itself: a long run would hold the slots of its largest backlog for good.
    pub(super) fn release_spare_capacity(&mut self) {
        release_spare(&mut self.features);
        release_spare(&mut self.pending);
        release_spare(&mut self.waiting);
        release_spare(&mut self.written);
    }

    /// The slots the tables hold, entries or not.
    #[cfg(test)]
    pub(super) fn table_capacity(&self) -> usize {
        self.features.capacity()
            + self.pending.capacity()
            + self.waiting.capacity()
            + self.written.capacity()
    }
}
