//! Reading one side of the diff: finds the Parquet, CSV and TSV files under a path (text
//! gzipped or not; Hive's extensionless Parquet files when nothing else is there; hive
//! partitions `name=value/` become string columns), unifies their schemas, and streams record
//! batches of the requested columns in units (a Parquet row group, a CSV file) that worker
//! threads share. CSV key columns are read as text; other CSV column types are inferred per
//! file and merged across the files of a side. A Delta table's files come from its log instead
//! of a walk (`crate::delta`), their partition columns in the table's types.

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

/// A hive partition: `name=value` decoded, `None` for `__HIVE_DEFAULT_PARTITION__` (null); or
/// a Delta table's partition value from its log.
pub(crate) type Partition = (String, Option<String>);

/// The directory name hive writers (pyarrow, Spark, Hive) give a null partition value.
const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

#[derive(Debug)]
struct InputFile {
    path: PathBuf,
    format: Format,
    /// How a delimited text file is read (unused for Parquet).
    dialect: Dialect,
    partitions: Vec<Partition>,
}

/// A delimited text file's field separator and compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dialect {
    pub(crate) delimiter: u8,
    pub(crate) gzip: bool,
}

const CSV: Dialect = Dialect {
    delimiter: b',',
    gzip: false,
};

/// What a data file's name says it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataName {
    Parquet,
    Text(Dialect),
}

/// The kind of data a file name announces: `.parquet`/`.parq`, or `.csv`, `.tsv` and either
/// gzipped (`.csv.gz`); `None` for any other name.
pub(crate) fn data_name(name: &str) -> Option<DataName> {
    let lower = name.to_ascii_lowercase();
    let (stem, gzip) = match lower.strip_suffix(".gz") {
        Some(stem) => (stem, true),
        None => (lower.as_str(), false),
    };
    if !gzip && (stem.ends_with(".parquet") || stem.ends_with(".parq")) {
        return Some(DataName::Parquet);
    }
    let delimiter = if stem.ends_with(".csv") {
        b','
    } else if stem.ends_with(".tsv") {
        b'\t'
    } else {
        return None;
    };
    Some(DataName::Text(Dialect { delimiter, gzip }))
}

/// A name with no extension at all, as Hive names its data files (`000000_0`): read as
/// Parquet when a side holds no file of a known kind.
pub(crate) fn is_bare_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('.')
}

/// One side's files and their unified schema.
#[derive(Debug)]
pub(crate) struct Input {
    pub(crate) root: PathBuf,
    files: Vec<InputFile>,
    /// File columns then partition columns, each once.
    pub(crate) schema: SchemaRef,
    pub(crate) partition_columns: Vec<String>,
    /// The types of partition columns that are not strings (a Delta table's, from its schema);
    /// values are cast to them as they are read.
    partition_types: BTreeMap<String, DataType>,
    /// The version read, when the side is a Delta table.
    pub(crate) table_version: Option<u64>,
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
            bare: Vec::new(),
            bare_skipped: 0,
        };
        if meta.is_dir() {
            walked.walk(root, &mut Vec::new(), false, &mut found)?;
            if found.is_empty() && walked.skipped == 0 {
                // Nothing of a known kind: Hive's extensionless files are the data.
                found = std::mem::take(&mut walked.bare);
                walked.skipped = walked.bare_skipped;
            }
        } else {
            found.push((root.to_owned(), Vec::new()));
        }
        found.sort();
        Self::from_files(root, found, text_columns, walked.skipped, BTreeMap::new())
    }

    /// The side made of exactly the files `found`, each with its partition values, whose
    /// partition columns have `partition_types` (strings when not named there); `skipped` files
    /// were left out as incomplete.
    pub(crate) fn from_files(
        root: &Path,
        found: Vec<(PathBuf, Vec<Partition>)>,
        text_columns: &[String],
        skipped: usize,
        partition_types: BTreeMap<String, DataType>,
    ) -> Result<Input, DiffError> {
        let mut files = Vec::new();
        for (path, partitions) in found {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let kind = name.as_deref().and_then(data_name);
            let mut dialect = CSV;
            let format = if let Some(DataName::Text(d)) = kind {
                dialect = d;
                Format::Csv(infer_csv(&path, d, text_columns)?)
            } else {
                if kind.is_none() {
                    check_parquet_magic(&path)?;
                }
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
                dialect,
                partitions,
            });
        }
        if files.is_empty() && skipped > 0 {
            return Err(DiffError::NoCompleteInput {
                path: root.to_owned(),
                skipped,
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
                let data_type = partition_types.get(name).unwrap_or(&DataType::Utf8);
                fields.push(Field::new(name, data_type.clone(), true));
            }
        }
        Ok(Input {
            root: root.to_owned(),
            files,
            schema: Arc::new(Schema::new(fields)),
            partition_columns,
            partition_types,
            table_version: None,
            incomplete_skipped: skipped,
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

    /// The smallest and largest value of integer column `column` over the side, from the
    /// Parquet statistics of every row group; `None` when a file is not Parquet or a row
    /// group holding the column has no such statistics.
    pub(crate) fn int_range(&self, column: &str) -> Option<(i64, i64)> {
        use parquet::file::statistics::Statistics;
        let mut range: Option<(i64, i64)> = None;
        for f in &self.files {
            let Format::Parquet(meta) = &f.format else {
                return None;
            };
            let md = meta.metadata();
            let leaves = md.file_metadata().schema_descr();
            let Some(c) = (0..leaves.num_columns()).find(|&c| {
                let leaf = leaves.column(c);
                let parts = leaf.path().parts();
                parts.len() == 1 && parts[0] == column
            }) else {
                continue; // the column is all null in this file
            };
            for rg in md.row_groups() {
                let (lo, hi) = match rg.column(c).statistics()? {
                    Statistics::Int32(s) => (i64::from(*s.min_opt()?), i64::from(*s.max_opt()?)),
                    Statistics::Int64(s) => (*s.min_opt()?, *s.max_opt()?),
                    _ => return None,
                };
                range = Some(match range {
                    Some((a, b)) => (a.min(lo), b.max(hi)),
                    None => (lo, hi),
                });
            }
        }
        range
    }

    /// The rows of `unit`, when known before reading it (a Parquet row group's).
    pub(crate) fn unit_rows(&self, unit: Unit) -> Option<usize> {
        match (&self.files.get(unit.file)?.format, unit.row_group) {
            (Format::Parquet(m), Some(rg)) => {
                usize::try_from(m.metadata().row_group(rg).num_rows()).ok()
            }
            _ => None,
        }
    }

    /// Streams the batches of `unit` with exactly `columns` in that order (a column a file
    /// lacks is all null), calling `each` on every batch. The text columns named in
    /// `dictionary` come as dictionary arrays (`Dictionary(Int32, _)`) where the Parquet file
    /// stores them dictionary-encoded: decoding then keeps the file's dictionary indices
    /// instead of copying every row's bytes, and the caller compares and counts each distinct
    /// value once per dictionary.
    pub(crate) fn read(
        &self,
        unit: Unit,
        columns: &[String],
        dictionary: &[String],
        mut each: impl FnMut(RecordBatch) -> Result<(), DiffError>,
    ) -> Result<(), DiffError> {
        self.scan(unit, columns, dictionary, |b| each(b).map(|()| true))
    }

    /// The first batch of `unit` (`None` when it has no row), as [`Input::read`] gives it.
    pub(crate) fn first_batch(
        &self,
        unit: Unit,
        columns: &[String],
    ) -> Result<Option<RecordBatch>, DiffError> {
        let mut first = None;
        self.scan(unit, columns, &[], |b| {
            first = Some(b);
            Ok(false)
        })?;
        Ok(first)
    }

    /// [`Input::read`], until `each` returns false.
    fn scan(
        &self,
        unit: Unit,
        columns: &[String],
        dictionary: &[String],
        mut each: impl FnMut(RecordBatch) -> Result<bool, DiffError>,
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
        let mut finish = |batch: RecordBatch| -> Result<bool, DiffError> {
            let n = batch.num_rows();
            let mut out: Vec<ArrayRef> = Vec::with_capacity(columns.len());
            let mut fields = Vec::with_capacity(columns.len());
            for c in columns {
                let array = if let Some(col) = batch.column_by_name(c) {
                    col.clone()
                } else if let Some((_, v)) = f.partitions.iter().find(|(k, _)| k == c) {
                    self.partition_array(c, v.as_deref(), n)
                        .map_err(|source| DiffError::Arrow {
                            path: f.path.clone(),
                            source,
                        })?
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
                let meta =
                    with_dictionaries(meta, unit.row_group, dictionary).map_err(|source| {
                        DiffError::Parquet {
                            path: f.path.clone(),
                            source,
                        }
                    })?;
                let mask = ProjectionMask::roots(meta.parquet_schema(), wanted);
                let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta)
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
                    if !finish(batch.map_err(arrow_err)?)? {
                        break;
                    }
                }
            }
            Format::Csv(schema) if schema.fields().is_empty() => {
                // An empty file (not even a header): no rows.
            }
            Format::Csv(schema) => {
                let file = open_text(&f.path, f.dialect)?;
                let reader = arrow_csv::ReaderBuilder::new(schema.clone())
                    .with_header(true)
                    .with_delimiter(f.dialect.delimiter)
                    .with_batch_size(BATCH_ROWS)
                    .with_projection(wanted)
                    .build(file)
                    .map_err(arrow_err)?;
                for batch in reader {
                    if !finish(batch.map_err(arrow_err)?)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Input {
    /// A partition column's value repeated `n` times, in the column's type.
    fn partition_array(
        &self,
        column: &str,
        value: Option<&str>,
        n: usize,
    ) -> Result<ArrayRef, arrow_schema::ArrowError> {
        let data_type = self.partition_types.get(column);
        let Some(value) = value else {
            return Ok(new_null_array(data_type.unwrap_or(&DataType::Utf8), n));
        };
        let text: ArrayRef = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(value, n)));
        match data_type {
            // The log holds every partition value as text (`2025-11-29`, `7`).
            Some(t) => arrow_cast::cast(&text, t),
            None => Ok(text),
        }
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

/// `meta` reading the text columns named in `dictionary` as dictionary arrays, those whose
/// column chunk in `row_group` (in every row group when `None`) starts with a dictionary page.
/// A chunk whose later pages fell back to plain encoding still reads correctly (the reader
/// builds the dictionary itself), only slower.
fn with_dictionaries(
    meta: &ArrowReaderMetadata,
    row_group: Option<usize>,
    dictionary: &[String],
) -> Result<ArrowReaderMetadata, parquet::errors::ParquetError> {
    if dictionary.is_empty() {
        return Ok(meta.clone());
    }
    let md = meta.metadata();
    let leaves = md.file_metadata().schema_descr();
    let groups: Vec<usize> = match row_group {
        Some(rg) => vec![rg],
        None => (0..md.num_row_groups()).collect(),
    };
    let mut changed = false;
    let fields: Vec<Field> = meta
        .schema()
        .fields()
        .iter()
        .map(|field| {
            let text = matches!(
                field.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
            );
            // The field's leaf: a flat column's path is its name alone.
            let leaf = (0..leaves.num_columns()).find(|&c| {
                let column = leaves.column(c);
                let parts = column.path().parts();
                parts.len() == 1 && parts[0] == *field.name()
            });
            let encoded = leaf.is_some_and(|c| {
                !groups.is_empty()
                    && groups.iter().all(|&rg| {
                        md.row_group(rg)
                            .column(c)
                            .dictionary_page_offset()
                            .is_some()
                    })
            });
            if text && encoded && dictionary.contains(field.name()) {
                changed = true;
                field.as_ref().clone().with_data_type(DataType::Dictionary(
                    Box::new(DataType::Int32),
                    Box::new(field.data_type().clone()),
                ))
            } else {
                field.as_ref().clone()
            }
        })
        .collect();
    if !changed {
        return Ok(meta.clone());
    }
    let schema = Schema::new_with_metadata(fields, meta.schema().metadata().clone());
    ArrowReaderMetadata::try_new(
        md.clone(),
        ArrowReaderOptions::new().with_schema(Arc::new(schema)),
    )
}

fn open_file(path: &Path) -> Result<File, DiffError> {
    File::open(path).map_err(|source| DiffError::Io {
        path: path.to_owned(),
        source,
    })
}

/// A delimited text file for reading, decompressed when gzipped.
fn open_text(path: &Path, dialect: Dialect) -> Result<Box<dyn std::io::Read>, DiffError> {
    let file = open_file(path)?;
    Ok(if dialect.gzip {
        // Multi-member: `cat a.gz b.gz` and block-wise writers make several members.
        Box::new(flate2::read::MultiGzDecoder::new(std::io::BufReader::new(
            file,
        )))
    } else {
        Box::new(file)
    })
}

/// A file whose name does not say what it holds is read as Parquet only if it starts as one,
/// so that anything else is refused with why rather than as a corrupt Parquet footer.
fn check_parquet_magic(path: &Path) -> Result<(), DiffError> {
    use std::io::Read as _;
    let mut head = [0u8; 4];
    let mut file = open_file(path)?;
    let n = file.read(&mut head).map_err(|source| DiffError::Io {
        path: path.to_owned(),
        source,
    })?;
    if n == 4 && &head == b"PAR1" {
        Ok(())
    } else {
        Err(DiffError::UnknownFormat {
            path: path.to_owned(),
        })
    }
}

/// A CSV or TSV file's schema: types inferred from its first rows, `text_columns` as Utf8. A
/// header without rows gives Null columns (no value says otherwise), an empty file no column.
fn infer_csv(
    path: &Path,
    dialect: Dialect,
    text_columns: &[String],
) -> Result<SchemaRef, DiffError> {
    let file = open_text(path, dialect)?;
    let (schema, _) = arrow_csv::reader::Format::default()
        .with_header(true)
        .with_delimiter(dialect.delimiter)
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
    /// Files without an extension (Hive's `000000_0`), the data if nothing else is.
    bare: Vec<(PathBuf, Vec<Partition>)>,
    /// Of those, the ones left out as not complete.
    bare_skipped: usize,
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
            } else if data_name(&name).is_some() {
                if self.complete_only && !complete {
                    self.skipped += 1;
                } else {
                    out.push((path, partitions.clone()));
                }
            } else if is_bare_name(&name) {
                if self.complete_only && !complete {
                    self.bare_skipped += 1;
                } else {
                    self.bare.push((path, partitions.clone()));
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
    fn file_names_say_what_they_hold() {
        let text = |delimiter, gzip| Some(DataName::Text(Dialect { delimiter, gzip }));
        for (name, kind) in [
            ("part-0.parquet", Some(DataName::Parquet)),
            ("x.PARQ", Some(DataName::Parquet)),
            ("x.csv", text(b',', false)),
            ("x.CSV.GZ", text(b',', true)),
            ("x.tsv", text(b'\t', false)),
            ("x.tsv.gz", text(b'\t', true)),
            ("x.parquet.gz", None),
            ("x.gz", None),
            ("000000_0", None),
            ("notes.txt", None),
        ] {
            assert_eq!(data_name(name), kind, "{name}");
        }
        assert!(is_bare_name("000000_0"));
        assert!(!is_bare_name("x.txt"));
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
