//! A flush's rows as staged Parquet files: one per hour of impression time (and per model with
//! `partition-by-model`), split past `max-file-rows`, rows of finished hours aside under `late/`,
//! zstd-compressed in bounded row groups.

use std::collections::BTreeMap;

use arrow_schema::ArrowError;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::Dataset;
use super::error::SinkError;
use super::layout::{HOUR_US, model_dir, safe, staged_name};
use super::markers::SUCCESS;
use super::paths;
use crate::rows::{hour_partition, to_record_batch};
use crate::state::Row;

/// What [`Dataset::stage`] wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Staged {
    /// The visible names the files get at the roll forward.
    pub files: Vec<String>,
    /// Rows that went to the late area.
    pub late_rows: usize,
    /// Where they were staged, for [`Checkpoint::staging`].
    pub staging: String,
}

/// The most a column chunk's dictionary holds before the chunk's later pages fall back to
/// plain values. A continuous feature (a score, an embedding) has nearly as many distinct
/// values as rows: parquet-rs's default of 1 MiB (262,144 FP32 values) never falls back within
/// a row group of 65,536 rows, so every value would be hashed into a dictionary as large as
/// the data. In memory, 500,000 rows of 10 continuous FP32 features took a median 0.84 s of
/// Parquet encoding for 29.4 MB with it, 0.60 s for 19.9 MB with 16 KiB (BENCHMARKS.md,
/// "Continuous features"), and 19.1 MB without any dictionary. 16 KiB still holds 4,096
/// distinct FP32 values (2,048 INT64 ones): the codes of a categorical feature keep their
/// dictionary.
const DICTIONARY_PAGE_BYTES: usize = 16 * 1024;

impl Dataset {
    /// Writes `rows` as staged files of `task`'s `epoch`, one per hour of impression time
    /// (negatives, which have none, by served-at), split past `max_file_rows`. Rows of a
    /// finished hour go under `late/` instead, never silently into it: an hour that ends at or
    /// before `complete_before_us`, or that is marked complete (`_SUCCESS`). Returns the
    /// visible names the files will get and how many rows were late.
    ///
    /// `complete_before_us` is the task's committed watermark minus the completeness lag
    /// ([`Dataset::mark_complete`]): past it, the task has already told every marker writer
    /// that the hour can have no more rows. Deciding by the marker alone was a race: a marker
    /// written between this staging and the commit let the rows into an hour already declared
    /// complete. `i64::MIN` when the task has no checkpoint.
    pub fn stage(
        &self,
        task: &str,
        epoch: u64,
        rows: &[Row],
        complete_before_us: i64,
    ) -> Result<Staged, SinkError> {
        let hour_of = |row: &Row| {
            row.impression_time_us
                .unwrap_or_else(|| {
                    row.features
                        .served_at
                        .as_ref()
                        .map(|t| t.seconds.saturating_mul(1_000_000))
                        .unwrap_or(0)
                })
                .div_euclid(HOUR_US)
        };
        let by_model = self.options.partition_by_model;
        // The model of a row, when the dataset is partitioned by model: rows of one model are
        // one group (their names compared, not escaped, per row).
        fn model(by_model: bool, row: &Row) -> Option<&str> {
            by_model.then_some(row.features.model_name.as_str())
        }
        let model_of = |row| model(by_model, row);
        // Rows by model and hour. Usually a commit's rows are all of one group: then they are
        // written as they are, without a copy.
        type Group<'a> = (Option<&'a str>, i64);
        let mut grouped: BTreeMap<Group<'_>, Vec<Row>> = BTreeMap::new();
        let single = rows
            .first()
            .map(|r| (model_of(r), hour_of(r)))
            .filter(|first| {
                rows.iter()
                    .all(|r| hour_of(r) == first.1 && model_of(r) == first.0)
            });
        if single.is_none() {
            for row in rows {
                grouped
                    .entry((model_of(row), hour_of(row)))
                    .or_default()
                    .push(row.clone());
            }
        }
        let groups: Vec<(Group<'_>, &[Row])> = match single {
            Some(key) => vec![(key, rows)],
            None => grouped.iter().map(|(k, r)| (*k, r.as_slice())).collect(),
        };
        let staging = self.storage.staging(task, epoch);
        let mut staged = Staged {
            staging: staging.clone(),
            ..Staged::default()
        };
        let per_file = self.options.max_file_rows.unwrap_or(usize::MAX).max(1);
        let mut n = 0usize;
        for ((model, hour), rows) in groups {
            let (dt, hr) = hour_partition(hour.saturating_mul(HOUR_US));
            let hour_dir = match model {
                Some(model) => format!("{}/dt={dt}/hr={hr}", model_dir(model)),
                None => format!("dt={dt}/hr={hr}"),
            };
            let finished = hour.saturating_add(1).saturating_mul(HOUR_US) <= complete_before_us;
            let dir = if finished || self.storage.exists(&format!("{hour_dir}/{SUCCESS}"))? {
                staged.late_rows += rows.len();
                format!("{}/{hour_dir}", paths::LATE)
            } else {
                hour_dir
            };
            for chunk in rows.chunks(per_file) {
                let visible = format!("{dir}/part-{}-{epoch:010}-{n:04}.parquet", safe(task));
                n += 1;
                let bytes = self.encode(&visible, chunk)?;
                self.storage.put(&staged_name(&staging, &visible), bytes)?;
                staged.files.push(visible);
            }
        }
        Ok(staged)
    }

    pub(super) fn encode(&self, visible: &str, rows: &[Row]) -> Result<Vec<u8>, SinkError> {
        let encode = |e: &dyn std::fmt::Display| SinkError::Encode {
            path: self.storage.describe(visible),
            message: e.to_string(),
        };
        let batch = to_record_batch(rows, self).map_err(|e| match e {
            // The store's own error, with its path and what to do.
            ArrowError::ExternalError(e) => match e.downcast::<SinkError>() {
                Ok(e) => *e,
                Err(e) => encode(&e),
            },
            e => encode(&e),
        })?;
        // Delta has no unsigned integers: the files of a table hold types its schema can say.
        let batch = match &self.delta {
            Some(_) => super::signed::signed(batch).map_err(|e| encode(&e))?,
            None => batch,
        };
        // Before the file can be committed, so that `_common_metadata` never lacks its columns.
        self.common_metadata
            .cover(&*self.storage, visible, batch.schema_ref())?;
        let props = self.writer_properties().map_err(|e| encode(&e))?;
        let mut writer = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(props))
            .map_err(|e| encode(&e))?;
        writer.write(&batch).map_err(|e| encode(&e))?;
        writer.into_inner().map_err(|e| encode(&e))
    }

    /// How every data file of the dataset is encoded: by a flush, and by a Delta table's
    /// compaction.
    pub(super) fn writer_properties(&self) -> Result<WriterProperties, ParquetError> {
        let level = ZstdLevel::try_new(self.options.zstd_level)?;
        // Ids are nearly unique per row: a dictionary of them saves nothing that zstd does not,
        // and costs a hash per id. Other columns keep theirs (categorical values coded as
        // numbers shrink to a few bits each) while it stays under DICTIONARY_PAGE_BYTES.
        Ok(WriterProperties::builder()
            .set_column_dictionary_enabled(ColumnPath::from("request_id"), false)
            .set_column_dictionary_enabled(ColumnPath::from("item_id"), false)
            .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
            .set_compression(Compression::ZSTD(level))
            .set_max_row_group_row_count(Some(self.options.row_group_rows.max(1)))
            .build())
    }
}

#[cfg(test)]
mod tests;
