//! The `_SUCCESS` markers (docs/JOINER.md, "Completeness"): an hour is complete, and gets its
//! marker, once the committed watermark of every task is past its end by the completeness lag, so
//! that a scheduler can start the hour's training job. What this process has seen marked is
//! remembered, so that a flush does not check every hour the dataset ever had.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Dataset;
use super::error::SinkError;
use super::layout::{HOUR_US, MODEL_PARTITION};
use crate::rows::hour_partition;
use crate::time::hour_start_us;

/// The marker of a complete hour.
pub const SUCCESS: &str = "_SUCCESS";

/// What [`Dataset::mark_complete`] knows of the dataset across calls.
#[derive(Debug, Default)]
pub(super) struct Complete {
    /// Per task, the newest checkpoint epoch seen and its watermark: the next look starts
    /// there and probes the following epochs (commits number them consecutively), instead of
    /// listing the task's checkpoints.
    watermarks: HashMap<String, (u64, i64)>,
    /// Per directory above the hours: "" for the dataset's root, `model=.../` for each model
    /// with `partition-by-model`.
    parts: BTreeMap<String, Marks>,
    /// The dataset watermark and the end of completeness (hours ending at or before it are
    /// complete) of the newest pass, in microseconds.
    last: Option<(i64, i64)>,
}

/// What [`Dataset::mark_complete`] knows of the hours under one directory.
#[derive(Debug, Default)]
struct Marks {
    /// `dt=.../hr=...` with a marker (prefixed by the directory), in days not yet complete as
    /// a whole.
    hours: HashSet<String>,
    /// `dt=...` (prefixed) whose every hour has a marker.
    days: HashSet<String>,
    /// The first and the newest hour (epoch hours) with a directory seen by this process.
    span: Option<(i64, i64)>,
    /// Epoch hours `[from, to)` already checked for a marker of an hour without rows.
    gaps_checked: Option<(i64, i64)>,
}

/// Hours without rows checked for a marker at most per [`Dataset::mark_complete`] call (a
/// month), so that a first look at a long dataset with gaps spreads its requests over flushes.
const GAP_HOURS_PER_CALL: i64 = 24 * 31;

impl Dataset {
    /// The watermark of `task`'s newest checkpoint, for completeness. Starts from the newest
    /// epoch this process has seen and probes the next ones; an answer that is behind (a
    /// checkpoint committed in between) only delays a marker, which is why recovery does not
    /// use this but lists.
    fn checkpoint_watermark(
        &self,
        known: &mut Complete,
        task: &str,
    ) -> Result<Option<i64>, SinkError> {
        let Some(&(seen, watermark)) = known.watermarks.get(task) else {
            let newest = self.latest_checkpoint(task)?;
            if let Some(cp) = &newest {
                // A marker vouches for every row of its hour: the files of the commit whose
                // watermark it relies on must be visible first, even if their writer died
                // between its commit and its roll forward.
                self.roll_forward(cp)?;
                known
                    .watermarks
                    .insert(task.to_owned(), (cp.epoch, cp.watermark_us));
            }
            return Ok(newest.map(|cp| cp.watermark_us));
        };
        let mut epoch = seen;
        while self
            .storage
            .exists(&self.checkpoint_name(task, epoch + 1))?
        {
            epoch += 1;
        }
        if epoch == seen {
            if self.storage.exists(&self.checkpoint_name(task, seen))? {
                return Ok(Some(watermark));
            }
            // Pruned: the task moved on by more than the checkpoints kept since this process
            // last looked, so the epochs after it are gone too. Find the newest again.
            known.watermarks.remove(task);
            return self.checkpoint_watermark(known, task);
        }
        let cp = self.read_checkpoint(&self.checkpoint_name(task, epoch))?;
        // Earlier epochs were rolled forward by their writer before it committed the next.
        self.roll_forward(&cp)?;
        known
            .watermarks
            .insert(task.to_owned(), (epoch, cp.watermark_us));
        Ok(Some(cp.watermark_us))
    }

    /// Marks complete every hour that ended at least `lag_us` before the dataset watermark,
    /// the minimum of the newest checkpointed watermark of every one of `tasks`. Returns the
    /// hours marked now (`dt=.../hr=...`). Marks nothing while a task has no checkpoint.
    ///
    /// An hour without rows between the dataset's first and newest hours gets a directory
    /// holding only its marker: a scheduler that waits for each hour's `_SUCCESS` must not
    /// stall on a quiet night. Hours after the newest one with rows wait until a later hour
    /// has rows, so that a watermark pushed far ahead by a clock mistake never writes markers
    /// for years of hours that have no data.
    pub fn mark_complete(&self, tasks: &[String], lag_us: i64) -> Result<Vec<String>, SinkError> {
        let mut known = self
            .complete
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut watermark = i64::MAX;
        for task in tasks {
            match self.checkpoint_watermark(&mut known, task)? {
                Some(w) => watermark = watermark.min(w),
                None => return Ok(Vec::new()),
            }
        }
        if tasks.is_empty() || watermark == i64::MIN {
            return Ok(Vec::new());
        }
        let complete_before = watermark.saturating_sub(lag_us);
        known.last = Some((watermark, complete_before));
        let mut marked = Vec::new();
        let dirs = if self.options.partition_by_model {
            let prefix = format!("{MODEL_PARTITION}=");
            let mut dirs: Vec<String> = (self.storage.children("")?.0.into_iter())
                .filter(|d| d.starts_with(&prefix))
                .map(|d| format!("{d}/"))
                .collect();
            // Models listed before whose listing failed to show now still get their gaps.
            dirs.extend(known.parts.keys().cloned());
            dirs.sort();
            dirs.dedup();
            dirs
        } else {
            vec![String::new()]
        };
        // Per directory, the hours with a directory in this listing, in epoch hours.
        let mut listed = HashMap::new();
        for dir in dirs {
            let marks = known.parts.entry(dir.clone()).or_default();
            let hours = self.mark_listed(&dir, marks, complete_before, &mut marked)?;
            listed.insert(dir, hours);
        }
        // A model's hour without rows is complete once the dataset has rows in a later hour:
        // its scheduler must not wait for traffic to the model itself to come back.
        let newest = (known.parts.values())
            .filter_map(|m| m.span.map(|(_, newest)| newest))
            .max();
        let none = HashSet::new();
        for (dir, marks) in &mut known.parts {
            let listed = listed.get(dir).unwrap_or(&none);
            self.mark_gaps(dir, marks, listed, complete_before, newest, &mut marked)?;
        }
        Ok(marked)
    }

    /// The dataset watermark and the end of completeness that the newest
    /// [`Dataset::mark_complete`] pass of this handle found, in microseconds; `None` before
    /// one found every task's checkpoint.
    pub(super) fn completeness(&self) -> Option<(i64, i64)> {
        let known = self
            .complete
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.last
    }

    /// Marks the complete hours listed under `dir` (see [`Dataset::mark_complete`]); returns
    /// the hours listed, in epoch hours.
    fn mark_listed(
        &self,
        dir: &str,
        known: &mut Marks,
        complete_before: i64,
        marked: &mut Vec<String>,
    ) -> Result<HashSet<i64>, SinkError> {
        let mut listed = HashSet::new();
        for day in self.storage.children(dir.trim_end_matches('/'))?.0 {
            let day_name = format!("{dir}{day}");
            if known.days.contains(&day_name) {
                continue;
            }
            let Some(date) = day.strip_prefix("dt=") else {
                continue;
            };
            // Rows of a complete hour go to late/, so a day that has ended gets no new hours.
            let mut whole_day = hour_start_us(date, "00")
                .is_some_and(|start| start.saturating_add(24 * HOUR_US) <= complete_before);
            for hour_name in self.storage.children(&day_name)?.0 {
                let hour = format!("{day_name}/{hour_name}");
                if known.hours.contains(&hour) {
                    continue;
                }
                let Some(start) = hour_name
                    .strip_prefix("hr=")
                    .and_then(|hh| hour_start_us(date, hh))
                else {
                    continue;
                };
                let epoch_hour = start.div_euclid(HOUR_US);
                listed.insert(epoch_hour);
                known.span = Some(match known.span {
                    Some((first, newest)) => (first.min(epoch_hour), newest.max(epoch_hour)),
                    None => (epoch_hour, epoch_hour),
                });
                if start.saturating_add(HOUR_US) > complete_before {
                    whole_day = false;
                    continue;
                }
                let marker = format!("{hour}/{SUCCESS}");
                if !self.storage.exists(&marker)? {
                    self.storage.put(&marker, Vec::new())?;
                    marked.push(hour.clone());
                }
                known.hours.insert(hour);
            }
            if whole_day {
                let prefix = format!("{day_name}/");
                known.hours.retain(|h| !h.starts_with(&prefix));
                known.days.insert(day_name);
            }
        }
        Ok(listed)
    }

    /// Marks the complete hours without a directory under `dir`, from its first hour with rows
    /// to `newest`, the dataset's newest hour with rows (see [`Dataset::mark_complete`]);
    /// `listed` holds the hours with one in this call's listing.
    fn mark_gaps(
        &self,
        dir: &str,
        known: &mut Marks,
        listed: &HashSet<i64>,
        complete_before: i64,
        newest: Option<i64>,
        marked: &mut Vec<String>,
    ) -> Result<(), SinkError> {
        let (Some((first, _)), Some(newest)) = (known.span, newest) else {
            return Ok(());
        };
        // Hours before `end` are complete and not after the newest hour with rows.
        let end = complete_before.div_euclid(HOUR_US).min(newest);
        if end <= first {
            return Ok(());
        }
        // `[lo, hi)` were checked. The span only grows and `end` only moves forward (the
        // watermark never moves back), so what is left is below `lo` (rows were staged for an
        // hour earlier than any seen so far) and from `hi` on.
        let (lo, hi) = known.gaps_checked.unwrap_or((first, first));
        let below = first.max(lo.saturating_sub(GAP_HOURS_PER_CALL))..lo;
        let above = hi..end.min(hi.saturating_add(GAP_HOURS_PER_CALL));
        let checked = (below.start.min(lo), above.end.max(hi));
        for hour in below.chain(above) {
            let (dt, hr) = hour_partition(hour.saturating_mul(HOUR_US));
            let name = format!("{dir}dt={dt}/hr={hr}");
            if listed.contains(&hour) || known.hours.contains(&name) {
                continue;
            }
            // Not listed now, but its day may have been seen whole before this hour was in
            // the span; or an earlier call marked it and it is not listed again.
            let marker = format!("{name}/{SUCCESS}");
            if !self.storage.exists(&marker)? {
                self.storage.put(&marker, Vec::new())?;
                marked.push(name);
            }
        }
        known.gaps_checked = Some(checked);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
