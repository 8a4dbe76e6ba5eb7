//! Helpers shared by the state's unit tests: a join config, feature logs and events by the
//! minute, state files kept in memory by name, and a check of the due index.

use std::collections::{BTreeMap, BTreeSet};

use featurelog_schemas::featurelog::v1::FeatureLog;

use super::{HashMap, JoinConfig, JoinState, Row};
use crate::event::{Event, EventKind};

pub(super) const MIN: i64 = 60_000_000;

pub(super) fn config(label_window: Option<i64>) -> JoinConfig {
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
    pub(super) fn assert_index(&self) {
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
pub(super) trait Feed {
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

pub(super) fn log(request: &str, at_min: i64, items: &[&str]) -> FeatureLog {
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

pub(super) fn event(request: &str, item: &str, at_min: i64, kind: EventKind) -> Event {
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
pub(super) fn file_of(w: &str, epoch: u64) -> String {
    format!("state/{epoch:020}-{w}.bin")
}

pub(super) fn file(epoch: u64) -> String {
    file_of("w", epoch)
}

/// Reads state files from `files`, by name.
pub(super) fn read(
    files: &HashMap<String, Vec<u8>>,
) -> impl FnMut(&str) -> Result<Vec<u8>, String> + use<> {
    let files = files.clone();
    move |f: &str| files.get(f).cloned().ok_or(format!("no file {f}"))
}

/// A state restored from its first snapshot, as a restart after one checkpoint does.
pub(super) fn restored_from_one_checkpoint(s: &mut JoinState, config: JoinConfig) -> JoinState {
    let snap = s.snapshot(1, &file(1));
    let mut files: HashMap<String, Vec<u8>> = HashMap::default();
    files.insert(file(1), snap.bytes.clone());
    JoinState::restore(config, &snap.bytes, read(&files), no_topic).unwrap()
}

/// For restores of states whose logs are all in state files.
pub(super) fn no_topic(
    _: &BTreeSet<i64>,
) -> Result<std::collections::HashMap<i64, Vec<u8>>, String> {
    Err("no log is held by offset".into())
}

pub(super) fn keys(rows: &[Row]) -> Vec<(String, String)> {
    rows.iter()
        .map(|r| (r.request_id.clone(), r.item_id.clone()))
        .collect()
}
