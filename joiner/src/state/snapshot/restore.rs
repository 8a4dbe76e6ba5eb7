//! Rebuilding a [`JoinState`] from its state file ([`JoinState::restore`]): the logs from the
//! segments and the feature-log topic that the file names, then the tables and watermarks
//! around them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::format::{FORMAT, SnapshotHeader, early_restore, read_log};
use crate::log::ServedLog;
use crate::state::table::{FeatureEntry, Pending, pending_bytes};
use crate::state::{HashMap, HashSet, JoinConfig, JoinState, Labels};

impl JoinState {
    /// Rebuilds a state from the bytes of [`JoinState::snapshot`]'s file; `segment` reads an
    /// earlier state file that it refers to, by name, and `read_back` the records at the given
    /// offsets of the feature-log partition (those it cannot find are left out: their logs are
    /// counted as `lost_on_restore` and the state goes on without them). A file of another
    /// format than [`FORMAT`](super::format::FORMAT) is refused.
    pub fn restore(
        config: JoinConfig,
        bytes: &[u8],
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
        if header.format != FORMAT {
            return Err(format!(
                "state file format {} (this joiner reads format {FORMAT})",
                header.format
            ));
        }
        {
            let file_of = |seg: u64| header.segment_files.get(&seg).cloned();
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
            let mut entry = FeatureEntry::new(log, f.expires_at);
            entry.impressed = entry.rows_of(&f.impressed);
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
                    .map(early_restore)
                    .collect::<Result<_, _>>()?,
                encoded: None,
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
        // A state file names the emitted candidates of requests whose features it holds.
        for e in header.emitted {
            if let Some(f) = state.features.get_mut(&e.request_id) {
                f.emitted = f.rows_of(&e.items);
            }
        }
        state.max_features_us = header.max_features_us;
        state.watermark_us = header.watermark_us;
        state.sources = header.sources;
        state.features_idle_us = header.features_idle_us.unwrap_or(i64::MIN);
        Ok(state)
    }
}
