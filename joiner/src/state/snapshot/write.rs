//! Writing a [`JoinState`] as its state file ([`JoinState::snapshot`]): each feature log once,
//! into the file of the first epoch that holds it (or only its offset, when the feature-log
//! topic keeps it), and the rest of the state whole.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Snapshot;
use super::format::{SnapEmitted, SnapshotHeader};
use super::held::encode_features;
use super::pending::encode_pending;
use crate::log::ServedLog;
use crate::state::{HashMap, JoinState};

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
    /// A snapshot's cost is thus the new logs plus the small part, not everything held. The
    /// tables then give back the spare slots of a drained backlog.
    ///
    /// Impressions held ahead of the feature logs are not in it: join them first
    /// ([`JoinState::release_held`]).
    pub fn snapshot(&mut self, epoch: u64, file: &str) -> Snapshot {
        use prost::Message;
        debug_assert_eq!(self.held_events(), 0, "held impressions would be lost");
        // Logs still needed: the held ones, and those of expired requests whose matched
        // impression still waits for its label window.
        let mut live: HashMap<&str, &Arc<ServedLog>> = self
            .features
            .iter()
            .map(|(r, f)| (r.as_str(), &f.log))
            .collect();
        let mut matched_only: Vec<&str> = Vec::new();
        for ((r, _), p) in &self.pending {
            if let Some((log, _)) = &p.matched
                && !self.features.contains_key(r)
                && !live.contains_key(r.as_str())
            {
                live.insert(r.as_str(), log);
                matched_only.push(r.as_str());
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
        // Owned (a count each), so that the pending entries can be borrowed mutably below.
        let mut new_logs: Vec<Arc<ServedLog>> = Vec::new();
        let mut new_bytes = 0usize;
        for (r, log) in &live {
            // The feature-log topic keeps it: the snapshot names its offset.
            if log.offset().is_some() {
                continue;
            }
            if !self.written.contains_key(*r) {
                let len = log.raw().len();
                self.written.insert((*r).to_owned(), (epoch, len));
                new_logs.push(Arc::clone(log));
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
        // A log the topic keeps is in no segment: a restore reads it by its offset.
        let written = &self.written;
        let segment_of = |r: &str, offset: Option<i64>| match offset {
            Some(_) => 0,
            None => written.get(r).map_or(epoch, |&(s, _)| s),
        };
        let offset_of = |r: &str| live.get(r).and_then(|log| log.offset());
        let header = SnapshotHeader {
            // Encoded below, straight from the table, as the pending entries are.
            features: Vec::new(),
            matched_only: matched_only.iter().map(|r| (*r).to_owned()).collect(),
            matched_only_segments: matched_only
                .iter()
                .map(|r| segment_of(r, offset_of(r)))
                .collect(),
            matched_only_offsets: matched_only
                .iter()
                .map(|r| offset_of(r).unwrap_or(-1))
                .collect(),
            // Encoded below, straight from the table.
            pending: Vec::new(),
            emitted: self
                .features
                .iter()
                .filter(|(_, f)| !f.emitted.is_empty())
                .map(|(r, f)| SnapEmitted {
                    request_id: r.clone(),
                    items: f.item_ids(&f.emitted).collect(),
                })
                .collect(),
            max_features_us: self.max_features_us,
            watermark_us: self.watermark_us,
            sources: self.sources.clone(),
            features_idle_us: Some(self.features_idle_us),
            format: super::format::FORMAT,
            epoch,
            segment_files: self.segment_files.clone(),
            segment_bytes: self
                .segment_bytes
                .iter()
                .map(|(s, b)| (*s, *b as u64))
                .collect(),
        };
        // The header is the fields above, then the held logs' and the pending entries: a
        // message's fields may come in any order, and a repeated field's entries concatenate.
        let mut features = Vec::with_capacity(self.last_features.len());
        encode_features(
            self.features.iter_mut(),
            &self.last_features,
            segment_of,
            &mut features,
        );
        let mut pending = Vec::with_capacity(self.last_pending.len());
        encode_pending(self.pending.iter_mut(), &self.last_pending, &mut pending);
        let header_len = header.encoded_len() + features.len() + pending.len();
        let mut out = Vec::with_capacity(header_len + new_bytes + 16 * new_logs.len() + 32);
        let _ = prost::encode_length_delimiter(header_len, &mut out);
        // Writing to a Vec cannot fail.
        let _ = header.encode(&mut out);
        out.extend_from_slice(&features);
        out.extend_from_slice(&pending);
        self.last_features = features;
        self.last_pending = pending;
        // Once per commit, where a pass over the tables is already paid for.
        self.release_spare_capacity();
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
}
