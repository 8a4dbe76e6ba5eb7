//! The watermark, and what leaves the state by it or by the memory bound: a pending entry's row
//! when its window closes (or the entry, counted, when it never matched), a request's features
//! when their wait ends (with the negatives sampled from them), and the oldest entries while
//! the state is over its bound.

use super::{InputTimes, JoinState, Labels, Row};
use crate::log::CandidateId;

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
        // The impressions held for the logs join before the watermark moves past them.
        self.release_due_into(&mut out);
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
            features: known(self.features_progress()),
            events,
            events_read: known(self.max_event_us),
            events_first_read: known(self.first_event_us),
            oldest_held: self
                .feature_expiry
                .first()
                .map(|(at, _)| at.saturating_sub(self.config.features_wait_us)),
        }
    }

    /// Evicts entries until the state is within its bound, the oldest by event time first: a
    /// feature log by when it was served, a pending entry (impressions waiting for features,
    /// rows waiting for their label window) by its first event. Each counts as evicted.
    /// Pending entries are taken in the order they are due, which is their event order within
    /// one kind of wait. Feature logs alone are not enough: pending entries can fill the bound
    /// by themselves (impressions whose features never come), and every new log would then be
    /// evicted on arrival.
    pub(super) fn enforce_bound(&mut self) {
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

    pub(super) fn advance_into(&mut self, out: &mut Vec<Row>) {
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
            // Every candidate of every log passes here once, against the few impressed ids:
            // an id listed twice is impressed at each of its rows. Integer ids are compared as
            // numbers and written as text only for a negative, not formatted 100 times a log.
            let (mut impressed_ints, mut impressed_texts) = (Vec::new(), Vec::new());
            for row in f.impressed.iter() {
                match f.log.candidate_id(row) {
                    Some(CandidateId::Int(n)) => impressed_ints.push(n),
                    Some(CandidateId::Text(t)) => impressed_texts.push(t),
                    None => {}
                }
            }
            impressed_ints.sort_unstable();
            impressed_ints.dedup();
            impressed_texts.sort_unstable();
            impressed_texts.dedup();
            let rate = self.config.negatives_rate;
            // Without negatives only the count is wanted: every log's every candidate passes
            // here, and a count over the integer ids (a few impressed ids, each against the
            // list) cost a fraction of visiting each candidate in turn.
            if rate <= 0.0
                && let Some(ids) = f.log.int_candidate_ids()
            {
                let impressed: usize = impressed_ints
                    .iter()
                    .map(|&n| ids.iter().filter(|&&id| id == n).count())
                    .sum();
                self.counts.scored_not_impressed += (ids.len() - impressed) as u64;
                continue;
            }
            let mut text = String::new();
            for (i, id) in f.log.candidate_ids().enumerate() {
                let impressed = match id {
                    CandidateId::Int(n) => impressed_ints.binary_search(&n).is_ok(),
                    CandidateId::Text(t) => impressed_texts.binary_search(&t).is_ok(),
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

#[cfg(test)]
mod tests;
