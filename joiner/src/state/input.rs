//! Taking the join's two inputs, a request's feature log or an event of one of its
//! candidates, and matching each against the tables as it comes.

use std::sync::Arc;

use featurelog_schemas::featurelog::v1::FeatureLog;

use super::key::PairKey;
use super::table::{EarlyLabel, FeatureEntry, ID_BYTES, Pending, pending_bytes};
use super::{JoinState, Labels, Row};
use crate::event::{Event, EventKind};
use crate::log::ServedLog;

fn served_at_us(log: &FeatureLog) -> i64 {
    log.served_at
        .as_ref()
        .map(crate::event::saturating_us)
        .unwrap_or(0)
}

impl JoinState {
    /// Takes a request's feature log; returns rows it completes, its own and those of the
    /// events held until the logs reached their time (state/ahead.rs).
    pub fn add_features(&mut self, log: impl Into<ServedLog>) -> Vec<Row> {
        let mut out = Vec::new();
        self.insert_features(log.into(), &mut out);
        // The events it covers join before the watermark moves on its time.
        self.release_due_into(&mut out);
        self.advance_into(&mut out);
        out
    }

    /// Holds a feature log and matches the events that waited for it, without moving the
    /// watermark.
    fn insert_features(&mut self, log: ServedLog, out: &mut Vec<Row>) {
        let served = served_at_us(&log);
        self.max_features_us = self.max_features_us.max(served);
        let request_id = log.request_id.clone();
        if self.features.contains_key(&request_id) {
            self.counts.duplicate_features += 1;
            return;
        }
        let expires_at = served.saturating_add(self.config.features_wait_us);
        if expires_at <= self.watermark_us {
            // Its window closed before it arrived: it can join nothing new.
            self.counts.late += 1;
            return;
        }
        let entry = FeatureEntry::new(Arc::new(log), expires_at);
        self.bytes += entry.bytes;
        self.feature_expiry.insert((expires_at, request_id.clone()));
        self.features.insert(request_id.clone(), entry);
        // Impressions that were waiting for these features.
        for item in self.waiting.remove(&request_id).unwrap_or_default() {
            self.try_match(&(request_id.clone(), item), out);
        }
        self.enforce_bound();
    }

    /// Takes an event now, whether or not the feature logs have been read to its time; returns
    /// rows it completes.
    pub fn add_event(&mut self, event: Event) -> Vec<Row> {
        let mut out = Vec::new();
        self.join_event(event, &mut out);
        self.advance_into(&mut out);
        out
    }

    /// Matches an event against the tables, without moving the watermark.
    pub(super) fn join_event(&mut self, event: Event, out: &mut Vec<Row>) {
        let Event {
            request_id,
            item_id,
            time_us,
            kind,
            labels,
            event_id,
        } = event;
        self.note_event_read(time_us);
        let mut features = self.features.get_mut(&request_id);
        let row = features.as_mut().and_then(|f| f.row_of(&item_id));
        if let (Some(f), Some(row)) = (&features, row)
            && f.emitted.contains(row)
        {
            self.counts.late += 1;
            return;
        }
        // An impression at or after its features' expiry can no longer join them: it waits
        // as if they were gone. Whether they are still held when it is read depends on how far
        // the features input had been read, not on the inputs, and a replay must give the
        // same rows.
        let joinable =
            |f: &&mut FeatureEntry| kind != EventKind::Impression || time_us < f.expires_at;
        if let Some(f) = features.filter(joinable) {
            let Some(row) = row else {
                self.counts.unknown_item += 1;
                return;
            };
            // The common case of a join with no label window: the features are here and
            // nothing of this candidate waits, so the impression is the row. Emitted as the
            // general path below would, without its pending entry and index.
            let waits = || {
                self.pending
                    .contains_key(&(request_id.as_str(), item_id.as_str()) as &dyn PairKey)
            };
            if self.config.label_window_us.is_none() && kind == EventKind::Impression && !waits() {
                if f.impressed.insert(row) {
                    f.encoded = None;
                }
                f.emitted.insert(row);
                self.counts.joined += 1;
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
                return;
            }
        } else if time_us.saturating_add(self.config.impressions_wait_us) <= self.watermark_us {
            // Too old to wait for features any more.
            self.counts.late += 1;
            return;
        }
        let key = (request_id, item_id);
        let retried = |p: &Pending| event_id.as_ref().is_some_and(|id| p.event_ids.contains(id));
        if self.pending.get(&key).is_some_and(retried) {
            self.counts.duplicate_events += 1;
            return;
        }
        let is_new = !self.pending.contains_key(&key);
        let p = self.pending.entry(key.clone()).or_insert_with(|| Pending {
            first_us: time_us,
            ..Pending::default()
        });
        // Every path below changes a field the state file keeps.
        p.encoded = None;
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
        self.try_match(&key, out);
        self.reschedule(&key);
        self.enforce_bound();
    }

    /// Records how far the events have been read, for read-ahead alignment.
    pub(super) fn note_event_read(&mut self, time_us: i64) {
        self.max_event_us = self.max_event_us.max(time_us);
        if self.first_event_us == i64::MIN {
            self.first_event_us = time_us;
        }
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
        if f.impressed.insert(row) {
            f.encoded = None;
        }
        p.matched = Some((f.log.clone(), row));
        p.encoded = None;
        if self.config.label_window_us.is_none() {
            self.emit(key, out);
        } else {
            self.reschedule(key);
        }
    }
}

#[cfg(test)]
mod tests;
