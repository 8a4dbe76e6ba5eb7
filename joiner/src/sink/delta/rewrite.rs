//! What the table's upkeep reads and commits: the files of the newest version, and commits that
//! change no row (`dataChange = false`): a compaction's files replacing the ones they were
//! rewritten from, and a record of how far the dataset is complete.

use std::collections::{BTreeMap, HashSet};

use arrow_array::{Array, StringArray};
use delta_kernel::FilteredEngineData;
use delta_kernel::committer::FileSystemCommitter;
use delta_kernel::engine::arrow_data::ArrowEngineData;
use delta_kernel::scan::state::ScanFile;
use delta_kernel::transaction::UpdateTableOperation;

use super::files::describe;
use super::{ATTEMPTS, DeltaTable, ENGINE_INFO, Outcome, SnapshotRef, jitter};
use crate::sink::error::SinkError;

/// The operation of a commit that records completeness and changes nothing else.
pub(crate) const COMPLETENESS_OPERATION: &str = "FEATURELOG COMPLETENESS";

/// A file of the table's newest version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveFile {
    /// Its visible name, relative to the dataset's root (the log's path, decoded).
    pub(crate) path: String,
    pub(crate) size: u64,
    /// Its partition values (`dt`, `hr`), as the log writes them.
    pub(crate) partition: BTreeMap<String, String>,
}

/// The visible name (relative to the dataset's root) of a file the log names by its relative
/// URL path.
fn visible_name(path: &str) -> String {
    percent_encoding::percent_decode_str(path)
        .decode_utf8_lossy()
        .into_owned()
}

impl DeltaTable {
    /// The files of the table's newest version; `None` when there is no table yet.
    pub(crate) fn live_files(&self) -> Result<Option<Vec<LiveFile>>, SinkError> {
        let Some(snapshot) = self.latest()? else {
            return Ok(None);
        };
        self.files_of(&snapshot).map(Some)
    }

    fn files_of(&self, snapshot: &SnapshotRef) -> Result<Vec<LiveFile>, SinkError> {
        let scan = (snapshot.clone().scan_builder().build())
            .map_err(|e| self.error(format!("scanning version {}: {e}", snapshot.version())))?;
        let mut files = Vec::new();
        let metadata = (scan.scan_metadata(&self.engine))
            .map_err(|e| self.error(format!("reading version {}: {e}", snapshot.version())))?;
        for part in metadata {
            let part = part.map_err(|e| self.error(format!("reading the log: {e}")))?;
            files = (part.visit_scan_files(files, |files: &mut Vec<LiveFile>, f: ScanFile| {
                files.push(LiveFile {
                    path: visible_name(&f.path),
                    size: u64::try_from(f.size).unwrap_or(0),
                    partition: f.partition_values.into_iter().collect(),
                });
            }))
            .map_err(|e| self.error(format!("reading the log's files: {e}")))?;
        }
        Ok(files)
    }

    /// Replaces the live files `removed` by `added` (visible names of files already written,
    /// holding the same rows) in one commit with `dataChange = false`, so that a reader of any
    /// version sees each row once. `parameters` go into the commit's `operationParameters`.
    /// `Ok(false)` when a file of `removed` is no longer live (another process replaced it
    /// first): nothing is committed, and `added` belongs to no version.
    pub(crate) fn replace(
        &self,
        removed: &[String],
        added: &[String],
        parameters: &[(String, String)],
    ) -> Result<bool, SinkError> {
        let operation = if removed.is_empty() && added.is_empty() {
            UpdateTableOperation::Custom(COMPLETENESS_OPERATION.into())
        } else {
            UpdateTableOperation::Optimize
        };
        let described = describe(&self.engine, &self.root, added).map_err(|e| self.error(e))?;
        let wanted: HashSet<&str> = removed.iter().map(String::as_str).collect();
        for attempt in 0..ATTEMPTS {
            let snapshot = self
                .latest()?
                .ok_or_else(|| self.error("there is no table to rewrite files of"))?;
            let mut txn = (snapshot.clone())
                .update_table(operation.clone(), ENGINE_INFO, false)
                .with_operation_parameters(
                    parameters.iter().map(|(k, v)| (k.clone(), Some(v.clone()))),
                )
                .build(&self.engine, Box::new(FileSystemCommitter::new()))
                .map_err(|e| self.error(format!("starting a rewrite: {e}")))?;
            if !wanted.is_empty() {
                let mut found = 0;
                for part in self.removals(&snapshot, &wanted, &mut found)? {
                    txn.remove_files(part);
                }
                if found != wanted.len() {
                    return Ok(false);
                }
            }
            let base = snapshot.version();
            match self.finish(txn, &described)? {
                Outcome::Committed(snapshot) => {
                    self.known().committed(Some(base), snapshot, None);
                    return Ok(true);
                }
                Outcome::Retry(why) => {
                    tracing::debug!(attempt, why, "Delta rewrite retried");
                    std::thread::sleep(jitter(attempt));
                }
            }
        }
        Err(self.error(format!(
            "no rewrite commit after {ATTEMPTS} conflicting attempts"
        )))
    }

    /// The scan rows of `snapshot` whose file is in `wanted`, as remove actions take them;
    /// `found` counts them.
    fn removals(
        &self,
        snapshot: &SnapshotRef,
        wanted: &HashSet<&str>,
        found: &mut usize,
    ) -> Result<Vec<FilteredEngineData>, SinkError> {
        let scan = (snapshot.clone().scan_builder().build())
            .map_err(|e| self.error(format!("scanning version {}: {e}", snapshot.version())))?;
        let metadata = (scan.scan_metadata(&self.engine))
            .map_err(|e| self.error(format!("reading version {}: {e}", snapshot.version())))?;
        let mut parts = Vec::new();
        for part in metadata {
            let part = part.map_err(|e| self.error(format!("reading the log: {e}")))?;
            let (data, mut selected) = part.scan_files.into_parts();
            let data = ArrowEngineData::try_from_engine_data(data)
                .map_err(|e| self.error(format!("the log's files: {e}")))?;
            let batch = data.record_batch();
            let paths = (batch.column_by_name("path"))
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| self.error("the scan's files have no path column"))?;
            // Rows past the selection vector's end are selected.
            selected.resize(batch.num_rows(), true);
            for (row, keep) in selected.iter_mut().enumerate() {
                *keep = *keep
                    && paths.is_valid(row)
                    && wanted.contains(visible_name(paths.value(row)).as_str());
                *found += usize::from(*keep);
            }
            let filtered = FilteredEngineData::try_new(data, selected)
                .map_err(|e| self.error(format!("the files to remove: {e}")))?;
            parts.push(filtered);
        }
        Ok(parts)
    }
}
