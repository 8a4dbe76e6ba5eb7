//! Compaction of a complete hour of the Delta table: its files smaller than the target are
//! read in order and written again as files of about the target size (the dataset's own
//! encoding), which one commit with `dataChange = false` puts in their place; and the hour's
//! `_COMPACTED` record, the time after which the files it removed may be vacuumed.
//!
//! The new files are written under names of this process's own before the commit, so a crash,
//! or another process's compaction of the same hour committing first, leaves files no version
//! holds: the vacuum deletes them. Nothing here deletes a file, since a commit whose answer
//! was lost may have made it part of the table.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaDataReader;

use super::Dataset;
use super::delta::{DeltaTable, LiveFile};
use super::error::SinkError;

/// The record of a complete hour's compaction, in its directory.
pub(super) const RECORD: &str = "_COMPACTED";

/// How much of a file's end the first read of its footer takes.
const FOOTER_READ: usize = 64 * 1024;

/// Rows per batch read from a file being rewritten.
const BATCH_ROWS: usize = 8192;

impl Dataset {
    /// Compacts the complete hour `dir`, whose live files are `files`: when two or more are
    /// smaller than `target` bytes, rewrites them into files of about `target` bytes and
    /// commits those in their place with `parameters`. Then records the hour as compacted.
    /// Returns whether this call's commit replaced files.
    pub(super) fn compact_hour(
        &self,
        table: &DeltaTable,
        dir: &str,
        files: &[&LiveFile],
        target: u64,
        parameters: &[(String, String)],
    ) -> Result<bool, SinkError> {
        let small: Vec<&LiveFile> = files.iter().copied().filter(|f| f.size < target).collect();
        let replaced = if small.len() < 2 {
            false
        } else {
            let written = self.rewrite(dir, &small, target)?;
            let removed: Vec<String> = small.iter().map(|f| f.path.clone()).collect();
            let replaced = table.replace(&removed, &written, parameters)?;
            if replaced {
                tracing::info!(
                    hour = dir,
                    from = removed.len(),
                    to = written.len(),
                    "hour compacted"
                );
            }
            replaced
        };
        // After the commit (this one's, or another process's that removed the same files
        // first), never before: the record's time is at or after every removal in the hour.
        let at_ms = chrono::Utc::now().timestamp_millis();
        let record = serde_json::json!({ "compacted-at-ms": at_ms }).to_string();
        self.storage
            .create(&format!("{dir}/{RECORD}"), record.into_bytes())?;
        Ok(replaced)
    }

    /// When the hour `dir` was recorded compacted, in milliseconds since the epoch.
    pub(super) fn compacted_at(&self, dir: &str) -> Result<Option<i64>, SinkError> {
        let name = format!("{dir}/{RECORD}");
        if !self.storage.exists(&name)? {
            return Ok(None);
        }
        let bytes = self.storage.get(&name)?;
        let record: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| self.compact_error(&name, e))?;
        Ok(record["compacted-at-ms"].as_i64())
    }

    /// Writes the rows of `files`, in order, into new files of about `target` bytes in `dir`;
    /// returns their names.
    pub(super) fn rewrite(
        &self,
        dir: &str,
        files: &[&LiveFile],
        target: u64,
    ) -> Result<Vec<String>, SinkError> {
        let schemas = (files.iter())
            .map(|f| self.footer_schema(&f.path, f.size))
            .collect::<Result<Vec<_>, _>>()?;
        let schema = unified(&schemas);
        let props = self
            .writer_properties()
            .map_err(|e| self.compact_error(dir, e))?;
        let stamp = chrono::Utc::now().timestamp_millis();
        let name = |n: usize| format!("{dir}/compact-{}-{stamp}-{n:04}.parquet", self.writer);
        let target = usize::try_from(target).unwrap_or(usize::MAX);
        let mut written = Vec::new();
        let mut writer: Option<ArrowWriter<Vec<u8>>> = None;
        for file in files {
            let bytes = Bytes::from(self.storage.get(&file.path)?);
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
                .map_err(|e| self.compact_error(&file.path, e))?;
            for batch in reader {
                let batch = batch.map_err(|e| self.compact_error(&file.path, e))?;
                let batch = conform(&batch, &schema).map_err(|e| self.compact_error(dir, e))?;
                let out = match &mut writer {
                    Some(out) => out,
                    None => writer.insert(
                        ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props.clone()))
                            .map_err(|e| self.compact_error(dir, e))?,
                    ),
                };
                out.write(&batch).map_err(|e| self.compact_error(dir, e))?;
                if out.bytes_written() + out.in_progress_size() >= target
                    && let Some(full) = writer.take()
                {
                    written.push(self.finish_file(full, name(written.len()))?);
                }
            }
        }
        if let Some(last) = writer {
            written.push(self.finish_file(last, name(written.len()))?);
        }
        Ok(written)
    }

    fn finish_file(&self, writer: ArrowWriter<Vec<u8>>, name: String) -> Result<String, SinkError> {
        let bytes = writer
            .into_inner()
            .map_err(|e| self.compact_error(&name, e))?;
        self.storage.put(&name, bytes)?;
        Ok(name)
    }

    /// The Arrow schema of the Parquet file `path` of `size` bytes, from its footer.
    fn footer_schema(&self, path: &str, size: u64) -> Result<SchemaRef, SinkError> {
        let size_usize = usize::try_from(size).unwrap_or(usize::MAX);
        let mut want = FOOTER_READ.min(size_usize);
        loop {
            let tail = Bytes::from(self.storage.tail(path, want)?);
            let mut reader = ParquetMetaDataReader::new();
            match reader.try_parse_sized(&tail, size) {
                Ok(()) => {
                    let metadata = reader.finish().map_err(|e| self.compact_error(path, e))?;
                    let arrow =
                        ArrowReaderMetadata::try_new(metadata.into(), ArrowReaderOptions::new())
                            .map_err(|e| self.compact_error(path, e))?;
                    return Ok(arrow.schema().clone());
                }
                Err(ParquetError::NeedMoreData(needed)) if needed > want => {
                    want = needed.min(size_usize);
                }
                Err(e) => return Err(self.compact_error(path, e)),
            }
        }
    }

    fn compact_error(&self, path: &str, e: impl std::fmt::Display) -> SinkError {
        SinkError::Compact {
            path: self.storage.describe(path),
            problem: e.to_string(),
        }
    }
}

/// Every column of `schemas`, each once, in the order they first appear; nullable when any
/// file has it nullable or lacks it (a column the allow list gained within the hour). A name
/// has one type in the whole dataset (the column registry).
fn unified(schemas: &[SchemaRef]) -> SchemaRef {
    let mut fields: Vec<Field> = Vec::new();
    let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
    for schema in schemas {
        for field in schema.fields() {
            match seen.get_mut(field.name()) {
                Some((at, count)) => {
                    *count += 1;
                    if field.is_nullable() {
                        fields[*at].set_nullable(true);
                    }
                }
                None => {
                    seen.insert(field.name().clone(), (fields.len(), 1));
                    fields.push(field.as_ref().clone());
                }
            }
        }
    }
    for (at, count) in seen.values() {
        if *count < schemas.len() {
            fields[*at].set_nullable(true);
        }
    }
    let metadata = schemas
        .first()
        .map(|s| s.metadata().clone())
        .unwrap_or_default();
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

/// `batch` with the columns of `schema`, nulls for those it lacks.
fn conform(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let columns: Vec<ArrayRef> = (schema.fields().iter())
        .map(|f| match batch.column_by_name(f.name()) {
            Some(column) => column.clone(),
            None => new_null_array(f.data_type(), batch.num_rows()),
        })
        .collect();
    RecordBatch::try_new(schema.clone(), columns)
}
