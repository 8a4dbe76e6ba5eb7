//! Reading one side of the diff: finds the Parquet and CSV files under a path (hive partitions
//! `name=value/` become string columns), unifies their schemas, and streams record batches of
//! the requested columns in units (a Parquet row group, a CSV file) that worker threads share.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, new_null_array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
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

#[derive(Debug)]
struct InputFile {
    path: PathBuf,
    format: Format,
    partitions: Vec<(String, String)>,
}

/// One side's files and their unified schema.
#[derive(Debug)]
pub(crate) struct Input {
    pub(crate) root: PathBuf,
    files: Vec<InputFile>,
    /// File columns then partition columns, each once.
    pub(crate) schema: SchemaRef,
    pub(crate) partition_columns: Vec<String>,
}

/// A share of the work: one row group of a Parquet file, or a whole CSV file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unit {
    file: usize,
    row_group: Option<usize>,
}

impl Input {
    /// Finds the files under `root` and reads their schemas (Parquet footers, CSV inference).
    pub(crate) fn open(root: &Path) -> Result<Input, DiffError> {
        let meta = std::fs::metadata(root).map_err(|source| DiffError::Io {
            path: root.to_owned(),
            source,
        })?;
        let mut found = Vec::new();
        if meta.is_dir() {
            walk(root, &mut Vec::new(), &mut found)?;
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
                Format::Csv(infer_csv(&path)?)
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
        if files.is_empty() {
            return Err(DiffError::NoInput {
                path: root.to_owned(),
            });
        }
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
                    Arc::new(StringArray::from_iter_values(std::iter::repeat_n(v, n))) as ArrayRef
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

fn infer_csv(path: &Path) -> Result<SchemaRef, DiffError> {
    let file = open_file(path)?;
    let (schema, _) = arrow_csv::reader::Format::default()
        .with_header(true)
        .infer_schema(file, Some(CSV_INFER_ROWS))
        .map_err(|source| DiffError::Arrow {
            path: path.to_owned(),
            source,
        })?;
    Ok(Arc::new(schema))
}

/// Collects data files under `dir`, with the `name=value` directories above each. Names that
/// start with `.` or `_` are skipped: the joiner's pending files and `_featurelog/` state, as
/// every hive reader does.
fn walk(
    dir: &Path,
    partitions: &mut Vec<(String, String)>,
    out: &mut Vec<(PathBuf, Vec<(String, String)>)>,
) -> Result<(), DiffError> {
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
                    partitions.push((k.to_owned(), v.to_owned()));
                    true
                }
                _ => false,
            };
            walk(&path, partitions, out)?;
            if pushed {
                partitions.pop();
            }
        } else {
            let lower = name.to_ascii_lowercase();
            if lower.ends_with(".parquet") || lower.ends_with(".parq") || lower.ends_with(".csv") {
                out.push((path, partitions.clone()));
            }
        }
    }
    Ok(())
}
