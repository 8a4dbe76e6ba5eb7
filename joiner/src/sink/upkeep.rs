//! The Delta table's upkeep after each completeness pass (docs/JOINER.md, "Compaction, VACUUM
//! and completeness in the table"): how far the dataset is complete, recorded in the table;
//! each complete hour's small files rewritten into files of the target size by one commit that
//! changes no row; and, after the retention, the files that commit removed deleted.
//!
//! Only complete hours are touched: no flush adds to them (their rows go to `late/`), and the
//! completeness pass rolled every task's newest checkpoint into the table before it called
//! an hour complete, so the hour's files in the table are all it will ever hold.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use super::Dataset;
use super::delta::LiveFile;
use super::error::SinkError;
use super::layout::HOUR_US;
use crate::config::DeltaConfig;
use crate::time::hour_start_us;

/// What the upkeep does (`[output.delta]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableUpkeep {
    /// A complete hour's files smaller than this are rewritten into files of about this size;
    /// `None`: hours keep the files their flushes wrote.
    pub target_file_bytes: Option<u64>,
    /// Files a compaction removed from the table are deleted this long after it; `None`: they
    /// stay.
    pub vacuum_retention: Option<Duration>,
    /// A log checkpoint is written once this many versions followed the last one.
    pub checkpoint_interval: u64,
}

impl TableUpkeep {
    /// What `[output.delta]` asks for.
    pub fn from_config(delta: &DeltaConfig) -> Self {
        Self {
            target_file_bytes: (delta.target_file_bytes > 0).then_some(delta.target_file_bytes),
            vacuum_retention: delta.vacuum.then_some(delta.vacuum_retention),
            checkpoint_interval: delta.checkpoint_interval,
        }
    }
}

impl Default for TableUpkeep {
    fn default() -> Self {
        Self {
            target_file_bytes: Some(256 * 1024 * 1024),
            vacuum_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            checkpoint_interval: 100,
        }
    }
}

/// Hours compacted at most per pass: a pass after a long outage spreads its work over passes,
/// so that the completeness markers keep coming.
const HOURS_PER_PASS: usize = 8;

/// How often a process looks for files to vacuum.
const VACUUM_EVERY: Duration = Duration::from_secs(600);

/// What the upkeep has done in this process.
#[derive(Debug, Default)]
pub(super) struct Upkept {
    /// The end of completeness this process last recorded in the table.
    recorded: Option<i64>,
    /// The end of completeness of this process's last look at the table's files, and whether
    /// it left complete hours to compact: until a new hour completes, the next pass has
    /// nothing to look for (a look replays the log after its last checkpoint).
    looked: Option<(i64, bool)>,
    /// Hour directories compacted, or found to need no compaction.
    pub(super) compacted: HashSet<String>,
    /// Hour directories with nothing left to vacuum.
    pub(super) vacuumed: HashSet<String>,
    last_vacuum: Option<Instant>,
}

/// The operation parameters that say how far the dataset is complete: every hour that ends at
/// or before `featurelog.completeThrough` is complete, as its `_SUCCESS` marker says.
pub(super) fn completeness_parameters(watermark_us: i64, through_us: i64) -> Vec<(String, String)> {
    let time = |us: i64| {
        chrono::DateTime::from_timestamp_micros(us).map_or_else(
            || us.to_string(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
    };
    vec![
        ("featurelog.completeThrough".into(), time(through_us)),
        ("featurelog.watermark".into(), time(watermark_us)),
    ]
}

/// The start of the hour of a directory `dt=YYYY-MM-DD/hr=HH` (after any `model=` directory),
/// in microseconds.
pub(super) fn hour_of_dir(dir: &str) -> Option<i64> {
    let mut parts = dir.rsplit('/');
    let hr = parts.next()?.strip_prefix("hr=")?;
    let dt = parts.next()?.strip_prefix("dt=")?;
    hour_start_us(dt, hr)
}

/// The directory of a file's visible name.
fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

impl Dataset {
    /// The Delta table's upkeep, after a completeness pass ([`Dataset::mark_complete`]):
    /// records the end of completeness in the table when a new hour completed, compacts
    /// complete hours, and vacuums. Returns the hours compacted. Nothing without a Delta table
    /// or before a completeness pass found every task's checkpoint.
    pub fn upkeep(&self, upkeep: &TableUpkeep) -> Result<Vec<String>, SinkError> {
        let (Some(table), Some((watermark, complete_before))) =
            (self.delta.as_ref(), self.completeness())
        else {
            return Ok(Vec::new());
        };
        let mut upkept = self
            .upkept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let through = complete_before.div_euclid(HOUR_US).saturating_mul(HOUR_US);
        let vacuum_due = upkeep.vacuum_retention.is_some()
            && upkept
                .last_vacuum
                .is_none_or(|t| t.elapsed() >= VACUUM_EVERY);
        let compacted = if vacuum_due || upkept.looked != Some((through, false)) {
            self.look(&mut upkept, upkeep, watermark, complete_before)?
        } else {
            Vec::new()
        };
        // Last, so that it holds this pass's commits.
        table.checkpoint_if_due(upkeep.checkpoint_interval)?;
        Ok(compacted)
    }

    /// The part of [`Dataset::upkeep`] that reads the table's files: recording completeness,
    /// compaction and VACUUM.
    fn look(
        &self,
        upkept: &mut Upkept,
        upkeep: &TableUpkeep,
        watermark: i64,
        complete_before: i64,
    ) -> Result<Vec<String>, SinkError> {
        let Some(table) = self.delta.as_ref() else {
            return Ok(Vec::new());
        };
        let Some(files) = table.live_files()? else {
            return Ok(Vec::new());
        };
        let through = complete_before.div_euclid(HOUR_US).saturating_mul(HOUR_US);
        let parameters = completeness_parameters(watermark, through);
        if upkept.recorded.is_none_or(|r| r < through) {
            table.replace(&[], &[], &parameters)?;
            upkept.recorded = Some(through);
        }
        let mut hours: BTreeMap<&str, Vec<&LiveFile>> = BTreeMap::new();
        for file in &files {
            hours.entry(dir_of(&file.path)).or_default().push(file);
        }
        let complete = |dir: &str| {
            hour_of_dir(dir).is_some_and(|start| start.saturating_add(HOUR_US) <= complete_before)
        };
        let mut compacted = Vec::new();
        let mut more = false;
        if let Some(target) = upkeep.target_file_bytes {
            let mut due: Vec<_> = (hours.iter())
                .filter(|(dir, _)| complete(dir) && !upkept.compacted.contains(**dir))
                .take(HOURS_PER_PASS + 1)
                .collect();
            more = due.len() > HOURS_PER_PASS;
            due.truncate(HOURS_PER_PASS);
            for (dir, files) in due {
                if self.compact_hour(table, dir, files, target, &parameters)? {
                    compacted.push((*dir).to_owned());
                }
                upkept.compacted.insert((*dir).to_owned());
            }
        }
        if let Some(retention) = upkeep.vacuum_retention
            && upkept
                .last_vacuum
                .is_none_or(|t| t.elapsed() >= VACUUM_EVERY)
        {
            let live: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
            let dirs: Vec<&str> = (hours.keys().copied())
                .filter(|dir| complete(dir) && !upkept.vacuumed.contains(*dir))
                .collect();
            for dir in dirs {
                if self.vacuum_hour(dir, &live, retention)? {
                    upkept.vacuumed.insert(dir.to_owned());
                }
            }
            upkept.last_vacuum = Some(Instant::now());
        }
        upkept.looked = Some((through, more));
        Ok(compacted)
    }
}

#[cfg(test)]
mod tests;
