//! VACUUM of the Delta table: deleting the data files of a complete hour that the table no
//! longer holds, once the hour's compaction (its `_COMPACTED` record) is older than the
//! retention, so that a reader of any version committed within the retention still finds
//! every file it names.
//!
//! A file is deleted only when it is a data file of the hour's directory, the newest version
//! does not hold it, and it too is older than the retention: the last guards a compaction of
//! another process between writing its files and committing them. `late/`, the markers and
//! `_featurelog/` are never touched.

use std::collections::HashSet;
use std::time::Duration;

use super::Dataset;
use super::error::SinkError;

impl Dataset {
    /// Vacuums the complete hour `dir` (see the module's header); `live` holds the files of
    /// the table's newest version. Returns whether nothing is left to vacuum there: the hour
    /// was compacted more than `retention` ago and every file it removed is gone.
    pub(super) fn vacuum_hour(
        &self,
        dir: &str,
        live: &HashSet<&str>,
        retention: Duration,
    ) -> Result<bool, SinkError> {
        let Some(compacted_ms) = self.compacted_at(dir)? else {
            return Ok(false);
        };
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let before = chrono::Utc::now()
            .timestamp_millis()
            .saturating_sub(retention_ms);
        if compacted_ms > before {
            return Ok(false);
        }
        let mut done = true;
        let mut deleted = 0;
        for (name, modified_ms) in self.storage.files_modified(dir)? {
            if !name.ends_with(".parquet") || name.starts_with(['_', '.']) {
                continue;
            }
            let path = format!("{dir}/{name}");
            if live.contains(path.as_str()) {
                continue;
            }
            if modified_ms > before {
                done = false;
                continue;
            }
            self.storage.remove(&path)?;
            deleted += 1;
        }
        if deleted > 0 {
            tracing::info!(
                hour = dir,
                deleted,
                "vacuumed files the table no longer holds"
            );
        }
        Ok(done)
    }
}
