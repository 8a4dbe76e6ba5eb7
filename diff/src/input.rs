//! Reading one side of the diff: finds the Parquet and CSV files under a path (hive partitions
//! `name=value/` become string columns), unifies their schemas, and streams record batches of
//! the requested columns in units (a Parquet row group, a CSV file) that worker threads share.
//! CSV key columns are read as text; other CSV column types are inferred per file and merged
//! across the files of a side.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, new_null_array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use crate::DiffError;

/// Rows per batch: large enough that per-batch casts amortize, small enough to stay in cache.
pub(crate) const BATCH_ROWS: usize = 8192;
/// CSV rows read to infer column types.
const CSV_INFER_ROWS: usize = 100_000;

#[derive(Debug)]
enum Format {
    Parquet(ArrowReaderMetadata),
    Csv(SchemaRef),
}

/// A hive partition: `name=value` decoded, `None` for `__HIVE_DEFAULT_PARTITION__` (null).
type Partition = (String, Option<String>);

/// The directory name hive writers (pyarrow, Spark, Hive) give a null partition value.
const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

#[derive(Debug)]
struct InputFile {
    path: PathBuf,
    format: Format,
    partitions: Vec<Partition>,
}

/// One side's files and their unified schema.
#[derive(Debug)]
pub(crate) struct Input {
    pub(crate) root: PathBuf,
    files: Vec<InputFile>,
    /// File columns then partition columns, each once.
    pub(crate) schema: SchemaRef,
    pub(crate) partition_columns: Vec<String>,
    /// Data files skipped because no `_SUCCESS` marks their directory complete
    /// (`complete_only`).
    pub(crate) incomplete_skipped: usize,
}

/// A share of the work: one row group of a Parquet file, or a whole CSV file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unit {
    file: usize,
    row_group: Option<usize>,
}

impl Input {
    /// Finds the files under `root` and reads their schemas (Parquet footers, CSV inference).
    /// `text_columns` (the keys) are read from CSV as text, never inferred: `0123` stays
    /// `0123`, and keys follow the canonical-integer rule of the `keys` module.
    /// With `complete_only`, only files under a directory holding `_SUCCESS` are taken.
    pub(crate) fn open(
        root: &Path,
        text_columns: &[String],
        complete_only: bool,
    ) -> Result<Input, DiffError> {
        let meta = std::fs::metadata(root).map_err(|source| DiffError::Io {
            path: root.to_owned(),
            source,
        })?;
        let mut found = Vec::new();
        let mut walked = Walk {
            complete_only,
            skipped: 0,
        };
        if meta.is_dir() {
            walked.walk(root, &mut Vec::new(), false, &mut found)?;
        } else {
            found.push((root.to_owned(), Vec::new()));
        }
        found.sort();
        let mut files = Vec::new();
        for (path, partitions) in found {
            let is_csv = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
            let format = if is_csv {
                Format::Csv(infer_csv(&path, text_columns)?)
            } else {
                let file = open_file(&path)?;
                let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(
                    |source| DiffError::Parquet {
                        path: path.clone(),
                        source,
                    },
                )?;
                Format::Parquet(meta)
            };
            files.push(InputFile {
                path,
                format,
                partitions,
            });
        }
        if files.is_empty() && walked.skipped > 0 {
            return Err(DiffError::NoCompleteInput {
                path: root.to_owned(),
                skipped: walked.skipped,
            });
        }
        if files.is_empty() {
            return Err(DiffError::NoInput {
                path: root.to_owned(),
            });
        }
        unify_csv_types(&mut files);
        // Union of the files' columns: the joiner writes the features of an hour in order of
        // first appearance, so files of one dataset may order or lack columns differently.
        let mut fields: Vec<Field> = Vec::new();
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        let mut partition_columns: Vec<String> = Vec::new();
        for f in &files {
            for field in f.schema().fields() {
                match index.get(field.name()) {
                    Some(&i) => {
                        if fields[i].data_type() != field.data_type() {
                            return Err(DiffError::SchemaConflict {
                                path: f.path.clone(),
                                column: field.name().clone(),
                                expected: fields[i].data_type().to_string(),
                                found: field.data_type().to_string(),
                            });
                        }
                    }
                    None => {
                        index.insert(field.name().clone(), fields.len());
                        fields.push(Field::new(field.name(), field.data_type().clone(), true));
                    }
                }
            }
            for (name, _) in &f.partitions {
                if !partition_columns.contains(name) {
                    partition_columns.push(name.clone());
                }
            }
        }
        for name in &partition_columns {
            if !index.contains_key(name) {
                index.insert(name.clone(), fields.len());
                fields.push(Field::new(name, DataType::Utf8, true));
            }
        }
        Ok(Input {
            root: root.to_owned(),
            files,
            schema: Arc::new(Schema::new(fields)),
            partition_columns,
            incomplete_skipped: walked.skipped,
        })
    }

    pub(crate) fn file_count(&self) -> usize {
        self.files.len()
    }

    /// The units of work, largest files first so that threads finish together.
    pub(crate) fn units(&self) -> Vec<Unit> {
        let mut units = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            match &f.format {
                Format::Parquet(m) => {
                    for rg in 0..m.metadata().num_row_groups() {
                        units.push(Unit {
                            file: i,
                            row_group: Some(rg),
                        });
                    }
                }
                Format::Csv(_) => units.push(Unit {
                    file: i,
                    row_group: None,
                }),
            }
        }
        units
    }

    /// Streams the batches of `unit` with exactly `columns` in that order (a column a file
    /// lacks is all null), calling `each` on every batch.
    pub(crate) fn read(
        &self,
        unit: Unit,
        columns: &[String],
        mut each: impl FnMut(RecordBatch) -> Result<(), DiffError>,
    ) -> Result<(), DiffError> {
        let Some(f) = self.files.get(unit.file) else {
            return Err(DiffError::Internal(format!("no file {}", unit.file)));
        };
        let file_schema = f.schema();
        let wanted: Vec<usize> = columns
            .iter()
            .filter_map(|c| file_schema.index_of(c).ok())
            .collect();
        let arrow_err = |source| DiffError::Arrow {
            path: f.path.clone(),
            source,
        };
        let mut finish = |batch: RecordBatch| -> Result<(), DiffError> {
            let n = batch.num_rows();
            let mut out: Vec<ArrayRef> = Vec::with_capacity(columns.len());
            let mut fields = Vec::with_capacity(columns.len());
            for c in columns {
                let array = if let Some(col) = batch.column_by_name(c) {
                    col.clone()
                } else if let Some((_, v)) = f.partitions.iter().find(|(k, _)| k == c) {
                    match v {
                        Some(v) => {
                            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(v, n)))
                                as ArrayRef
                        }
                        None => new_null_array(&DataType::Utf8, n),
                    }
                } else {
                    let dt = self
                        .schema
                        .field_with_name(c)
                        .map(|f| f.data_type().clone())
                        .unwrap_or(DataType::Null);
                    new_null_array(&dt, n)
                };
                fields.push(Field::new(c, array.data_type().clone(), true));
                out.push(array);
            }
            let batch =
                RecordBatch::try_new(Arc::new(Schema::new(fields)), out).map_err(|source| {
                    DiffError::Arrow {
                        path: f.path.clone(),
                        source,
                    }
                })?;
            each(batch)
        };
        match &f.format {
            Format::Parquet(meta) => {
                let file = open_file(&f.path)?;
                let mask = ProjectionMask::roots(meta.parquet_schema(), wanted);
                let mut builder =
                    ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
                        .with_projection(mask)
                        .with_batch_size(BATCH_ROWS);
                if let Some(rg) = unit.row_group {
                    builder = builder.with_row_groups(vec![rg]);
                }
                let reader = builder.build().map_err(|source| DiffError::Parquet {
                    path: f.path.clone(),
                    source,
                })?;
                for batch in reader {
                    finish(batch.map_err(arrow_err)?)?;
                }
            }
            Format::Csv(schema) if schema.fields().is_empty() => {
                // An empty file (not even a header): no rows.
            }
            Format::Csv(schema) => {
                let file = open_file(&f.path)?;
                let reader = arrow_csv::ReaderBuilder::new(schema.clone())
                    .with_header(true)
                    .with_batch_size(BATCH_ROWS)
                    .with_projection(wanted)
                    .build(file)
                    .map_err(arrow_err)?;
                for batch in reader {
                    finish(batch.map_err(arrow_err)?)?;
                }
            }
        }
        Ok(())
    }
}

impl InputFile {
    fn schema(&self) -> SchemaRef {
        match &self.format {
            Format::Parquet(m) => m.schema().clone(),
            Format::Csv(s) => s.clone(),
        }
    }
}

fn open_file(path: &Path) -> Result<File, DiffError> {
    File::open(path).map_err(|source| DiffError::Io {
        path: path.to_owned(),
        source,
    })
}

/// A CSV file's schema: types inferred from its first rows, `text_columns` as Utf8. A header
/// without rows gives Null columns (no value says otherwise), an empty file no column.
fn infer_csv(path: &Path, text_columns: &[String]) -> Result<SchemaRef, DiffError> {
    let file = open_file(path)?;
    let (schema, _) = arrow_csv::reader::Format::default()
        .with_header(true)
        .infer_schema(file, Some(CSV_INFER_ROWS))
        .map_err(|source| DiffError::Arrow {
            path: path.to_owned(),
            source,
        })?;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            if text_columns.contains(f.name()) {
                Field::new(f.name(), DataType::Utf8, true)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// Gives every CSV file of a side the same type per column: each file's types are inferred
/// from its own rows, so one file's `1` (Int64) and another's `1.5` (Float64) would otherwise
/// conflict, as would a column empty in one file (Null). Parquet files keep their types.
fn unify_csv_types(files: &mut [InputFile]) {
    let mut merged: BTreeMap<String, DataType> = BTreeMap::new();
    for f in files.iter() {
        if let Format::Csv(schema) = &f.format {
            for field in schema.fields() {
                let t = match merged.get(field.name()) {
                    Some(t) => merge_csv_type(t, field.data_type()),
                    None => field.data_type().clone(),
                };
                merged.insert(field.name().clone(), t);
            }
        }
    }
    for f in files.iter_mut() {
        if let Format::Csv(schema) = &f.format {
            let fields: Vec<Field> = schema
                .fields()
                .iter()
                .map(|field| {
                    let t = merged.get(field.name()).unwrap_or(field.data_type());
                    Field::new(field.name(), t.clone(), true)
                })
                .collect();
            f.format = Format::Csv(Arc::new(Schema::new(fields)));
        }
    }
}

/// The type that reads the values of two inferred CSV types, by the rules arrow-csv applies
/// within one file: Null gives way to anything, Int64 widens to Float64, dates and timestamps
/// to the finest timestamp, anything else is text.
fn merge_csv_type(a: &DataType, b: &DataType) -> DataType {
    // Date32 below every timestamp unit, then the units from seconds to nanoseconds.
    let temporal_rank = |t: &DataType| match t {
        DataType::Date32 => Some(0),
        DataType::Timestamp(TimeUnit::Second, None) => Some(1),
        DataType::Timestamp(TimeUnit::Millisecond, None) => Some(2),
        DataType::Timestamp(TimeUnit::Microsecond, None) => Some(3),
        DataType::Timestamp(TimeUnit::Nanosecond, None) => Some(4),
        _ => None,
    };
    match (a, b) {
        (a, b) if a == b => a.clone(),
        (DataType::Null, t) | (t, DataType::Null) => t.clone(),
        (DataType::Int64, DataType::Float64) | (DataType::Float64, DataType::Int64) => {
            DataType::Float64
        }
        _ => match (temporal_rank(a), temporal_rank(b)) {
            (Some(x), Some(y)) => if x >= y { a } else { b }.clone(),
            _ => DataType::Utf8,
        },
    }
}

/// Decodes a hive path segment's `%XX` escapes (as pyarrow, Spark and Hive write them, e.g.
/// `en%20US`); an escape that is not two hex digits stays as it is.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |k: usize| b.get(k).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `name=value` directory as a partition: both decoded, the default partition as null.
fn partition(name: &str, value: &str) -> Partition {
    let value = (value != HIVE_NULL).then(|| percent_decode(value));
    (percent_decode(name), value)
}

/// The search of a directory side for data files.
struct Walk {
    complete_only: bool,
    /// Data files left out as not complete.
    skipped: usize,
}

impl Walk {
    /// Collects data files under `dir`, with the `name=value` directories above each. Names that
    /// start with `.` or `_` are skipped: the joiner's pending files and `_featurelog/` state, as
    /// every hive reader does. `complete`: a directory above holds `_SUCCESS`.
    fn walk(
        &mut self,
        dir: &Path,
        partitions: &mut Vec<Partition>,
        complete: bool,
        out: &mut Vec<(PathBuf, Vec<Partition>)>,
    ) -> Result<(), DiffError> {
        let complete = complete || dir.join("_SUCCESS").is_file();
        let entries = std::fs::read_dir(dir).map_err(|source| DiffError::Io {
            path: dir.to_owned(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| DiffError::Io {
                path: dir.to_owned(),
                source,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            let path = entry.path();
            let kind = entry.file_type().map_err(|source| DiffError::Io {
                path: path.clone(),
                source,
            })?;
            if kind.is_dir() {
                let pushed = match name.split_once('=') {
                    Some((k, v)) if !k.is_empty() => {
                        partitions.push(partition(k, v));
                        true
                    }
                    _ => false,
                };
                self.walk(&path, partitions, complete, out)?;
                if pushed {
                    partitions.pop();
                }
            } else {
                let lower = name.to_ascii_lowercase();
                if lower.ends_with(".parquet")
                    || lower.ends_with(".parq")
                    || lower.ends_with(".csv")
                {
                    if self.complete_only && !complete {
                        self.skipped += 1;
                    } else {
                        out.push((path, partitions.clone()));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_segments_are_decoded() {
        assert_eq!(percent_decode("en%20US"), "en US");
        assert_eq!(percent_decode("a%2Fb%3Dc%25"), "a/b=c%");
        assert_eq!(percent_decode("%C3%BC"), "ü");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(
            partition("locale", "en%20US"),
            ("locale".into(), Some("en US".into()))
        );
        assert_eq!(partition("my%20dt", HIVE_NULL), ("my dt".into(), None));
    }

    #[test]
    fn csv_types_merge_as_within_a_file() {
        use DataType::*;
        let ts = |u| Timestamp(u, None);
        assert_eq!(merge_csv_type(&Null, &Int64), Int64);
        assert_eq!(merge_csv_type(&Float64, &Null), Float64);
        assert_eq!(merge_csv_type(&Int64, &Float64), Float64);
        assert_eq!(merge_csv_type(&Float64, &Int64), Float64);
        assert_eq!(merge_csv_type(&Boolean, &Boolean), Boolean);
        assert_eq!(merge_csv_type(&Boolean, &Int64), Utf8);
        assert_eq!(merge_csv_type(&Int64, &Utf8), Utf8);
        assert_eq!(
            merge_csv_type(&Date32, &ts(TimeUnit::Second)),
            ts(TimeUnit::Second)
        );
        assert_eq!(
            merge_csv_type(&ts(TimeUnit::Nanosecond), &ts(TimeUnit::Millisecond)),
            ts(TimeUnit::Nanosecond)
        );
        assert_eq!(merge_csv_type(&Date32, &Int64), Utf8);
    }
}
