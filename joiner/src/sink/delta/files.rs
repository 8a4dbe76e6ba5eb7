//! A checkpoint's data files as a Delta table sees them: which of them the table holds, their
//! partition values from their hive names, and their size and schema from the store.

use std::collections::HashMap;

use chrono::NaiveDate;
use delta_kernel::schema::{DataType, SchemaRef, StructField, StructType};
use delta_kernel::{Engine, FileMeta};
use url::Url;

use super::super::paths;
use crate::sink::MODEL_PARTITION;

/// The table's partition columns, in order: with `partition-by-model` the model (a string),
/// then the hour's day (a date) and hour (an integer), as the files' hive directories
/// `[model=<name>/]dt=YYYY-MM-DD/hr=HH` name them.
pub(super) fn partitions(by_model: bool) -> Vec<&'static str> {
    let hour = [DT, HR].into_iter();
    if by_model {
        std::iter::once(MODEL_PARTITION).chain(hour).collect()
    } else {
        hour.collect()
    }
}

const DT: &str = "dt";
const HR: &str = "hr";

/// The partition values of a file, from its visible name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hour {
    /// With `partition-by-model`, the model's name as hive readers decode its directory
    /// (`None` inside: hive's null partition, the empty name).
    pub(super) model: Option<Option<String>>,
    /// Days since 1970-01-01 (Delta's date).
    pub(super) days: i32,
    /// 0-23.
    pub(super) hour: i32,
}

/// A data file to add to the table.
#[derive(Debug, Clone)]
pub(super) struct TableFile {
    /// The file's absolute URL, under the table's root.
    pub(super) meta: FileMeta,
    pub(super) hour: Hour,
    /// The columns its Parquet footer holds, as Delta types.
    pub(super) schema: SchemaRef,
    /// Its rows (the add action's `numRecords`, which readers count and plan with).
    pub(super) rows: i64,
}

/// How much of a file's end the first read of its footer takes: most footers fit, so most files
/// cost one ranged read after the head.
const FOOTER_READ: u64 = 64 * 1024;

/// Whether the table holds a file of this visible name: rows for finished hours (under `late/`)
/// stay out of it, as they stay out of a finished hour's directory.
pub(super) fn in_table(visible: &str) -> bool {
    visible
        .split('/')
        .next()
        .is_some_and(|first| first != paths::LATE)
}

/// The partition values of `visible` (`[model=<name>/]dt=YYYY-MM-DD/hr=HH/<file>`); `None` for
/// any other name.
pub(super) fn hour_of(visible: &str) -> Option<Hour> {
    let mut parts = visible.split('/').peekable();
    let model_prefix = format!("{MODEL_PARTITION}=");
    let model = match parts.peek()?.strip_prefix(&model_prefix) {
        Some(dir) => {
            parts.next();
            Some(model_of(dir)?)
        }
        None => None,
    };
    let dt = parts.next()?.strip_prefix("dt=")?;
    let hr = parts.next()?.strip_prefix("hr=")?;
    parts.next()?;
    let day = NaiveDate::parse_from_str(dt, "%Y-%m-%d").ok()?;
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    let days = i32::try_from(day.signed_duration_since(epoch).num_days()).ok()?;
    let hour: i32 = hr.parse().ok().filter(|h| (0..24).contains(h))?;
    Some(Hour { model, days, hour })
}

/// The model a `model=` directory names, as hive readers decode it: `%XX` escapes decoded,
/// `__HIVE_DEFAULT_PARTITION__` the null partition. `None` when the escapes are not UTF-8.
fn model_of(dir: &str) -> Option<Option<String>> {
    if dir == "__HIVE_DEFAULT_PARTITION__" {
        return Some(None);
    }
    let name = percent_encoding::percent_decode_str(dir)
        .decode_utf8()
        .ok()?;
    Some(Some(name.into_owned()))
}

/// A visible name as a URL path under the table's root: a `%` the name holds (an escaped
/// model directory) is a character of the name, not an escape.
pub(super) fn url_path(visible: &str) -> String {
    visible.replace('%', "%25")
}

/// Heads each file and reads its footer's schema (two requests per file). Names outside the
/// table (`late/`) are skipped; a name without an hour is an error, with the name.
pub(super) fn describe(
    engine: &dyn Engine,
    root: &Url,
    visible: &[String],
) -> Result<Vec<TableFile>, String> {
    let mut files = Vec::new();
    for name in visible.iter().filter(|name| in_table(name)) {
        let hour =
            hour_of(name).ok_or_else(|| format!("file {name} is in no dt=/hr= partition"))?;
        let location = root
            .join(&url_path(name))
            .map_err(|e| format!("file {name}: not a name under the table: {e}"))?;
        let meta = engine
            .storage_handler()
            .head(&location)
            .map_err(|e| format!("head {location}: {e}"))?;
        let (schema, rows) =
            footer(engine, &meta, FOOTER_READ).map_err(|e| format!("footer of {location}: {e}"))?;
        files.push(TableFile {
            meta,
            hour,
            schema,
            rows,
        });
    }
    Ok(files)
}

/// The columns (as Delta types) and row count a file's Parquet footer holds: a ranged read of
/// the file's last `first` bytes, and a second, larger one only when the footer is longer.
fn footer(engine: &dyn Engine, meta: &FileMeta, first: u64) -> Result<(SchemaRef, i64), String> {
    use delta_kernel::engine::arrow_conversion::TryFromArrow as _;
    use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
    use parquet::errors::ParquetError;
    use parquet::file::metadata::ParquetMetaDataReader;

    let size = meta.size;
    let mut want = first.min(size);
    loop {
        let slice = (meta.location.clone(), Some(size - want..size));
        let bytes = engine
            .storage_handler()
            .read_files(vec![slice])
            .map_err(|e| e.to_string())?
            .next()
            .ok_or("the store returned nothing")?
            .map_err(|e| e.to_string())?;
        let mut reader = ParquetMetaDataReader::new();
        match reader.try_parse_sized(&bytes, size) {
            Ok(()) => {
                let metadata = reader.finish().map_err(|e| e.to_string())?;
                let rows = metadata.file_metadata().num_rows();
                let arrow =
                    ArrowReaderMetadata::try_new(metadata.into(), ArrowReaderOptions::new())
                        .map_err(|e| e.to_string())?;
                let schema = StructType::try_from_arrow(arrow.schema().as_ref())
                    .map_err(|e| e.to_string())?;
                return Ok((std::sync::Arc::new(schema), rows));
            }
            Err(ParquetError::NeedMoreData(needed)) if (needed as u64) > want => {
                want = (needed as u64).min(size);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Every column of `files`, each once, in the order they first appear: the table's data
/// columns at its creation, or the candidates for new columns. A name has one type in the
/// whole dataset (the column registry), so the first file's field stands for all.
pub(super) fn columns(files: &[TableFile]) -> Vec<StructField> {
    let mut seen = std::collections::HashSet::new();
    files
        .iter()
        .flat_map(|f| f.schema.fields())
        .filter(|field| seen.insert(field.name().to_ascii_lowercase()))
        .cloned()
        .collect()
}

/// The schema of a new table holding `files`: their columns, then the partition columns.
pub(super) fn table_schema(files: &[TableFile], by_model: bool) -> Result<StructType, String> {
    let model = by_model.then(|| StructField::nullable(MODEL_PARTITION, DataType::STRING));
    let partitions = [
        StructField::nullable(DT, DataType::DATE),
        StructField::nullable(HR, DataType::INTEGER),
    ];
    StructType::try_new(columns(files).into_iter().chain(model).chain(partitions))
        .map_err(|e| format!("table schema: {e}"))
}

/// The columns of `files` that `table` lacks (compared as Delta compares names, ignoring
/// case), as nullable fields: older files do not have them.
pub(super) fn new_columns(table: &StructType, files: &[TableFile]) -> Vec<StructField> {
    let known: std::collections::HashSet<String> = table
        .fields()
        .map(|f| f.name().to_ascii_lowercase())
        .collect();
    columns(files)
        .into_iter()
        .filter(|f| !known.contains(&f.name().to_ascii_lowercase()))
        .map(|f| StructField::nullable(f.name().clone(), f.data_type().clone()))
        .collect()
}

/// The partition values of `hour`, keyed as the kernel's write context takes them.
pub(super) fn partition_values(hour: &Hour) -> HashMap<String, delta_kernel::expressions::Scalar> {
    use delta_kernel::expressions::Scalar;
    let mut values = HashMap::from([
        (DT.to_string(), Scalar::Date(hour.days)),
        (HR.to_string(), Scalar::Integer(hour.hour)),
    ]);
    if let Some(model) = &hour.model {
        let value = match model {
            Some(name) => Scalar::String(name.clone()),
            None => Scalar::Null(DataType::STRING),
        };
        values.insert(MODEL_PARTITION.to_string(), value);
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_come_from_hive_names_and_late_files_stay_out() {
        assert_eq!(
            hour_of("dt=1970-01-02/hr=05/part-t-0000000001-0000.parquet"),
            Some(Hour {
                model: None,
                days: 1,
                hour: 5
            })
        );
        assert_eq!(
            hour_of("dt=1969-12-31/hr=23/x.parquet"),
            Some(Hour {
                model: None,
                days: -1,
                hour: 23
            })
        );
        assert_eq!(hour_of("dt=2024-01-01/hr=24/x.parquet"), None);
        assert_eq!(hour_of("dt=2024-01-01/x.parquet"), None);
        let model = |name: Option<&str>| Hour {
            model: Some(name.map(str::to_owned)),
            days: 19723,
            hour: 1,
        };
        assert_eq!(
            hour_of("model=a/dt=2024-01-01/hr=01/x.parquet"),
            Some(model(Some("a")))
        );
        assert_eq!(
            hour_of("model=ranker%20b%2F2/dt=2024-01-01/hr=01/x.parquet"),
            Some(model(Some("ranker b/2")))
        );
        assert_eq!(
            hour_of("model=__HIVE_DEFAULT_PARTITION__/dt=2024-01-01/hr=01/x.parquet"),
            Some(model(None))
        );
        assert_eq!(hour_of("model=a/x.parquet"), None);
        assert_eq!(url_path("model=a%2F/dt=x"), "model=a%252F/dt=x");
        assert!(in_table("dt=2024-01-01/hr=01/x.parquet"));
        assert!(!in_table("late/dt=2024-01-01/hr=01/x.parquet"));
    }

    #[test]
    fn a_footer_longer_than_the_first_read_is_read_whole() {
        use std::sync::Arc;

        use arrow_array::{Int64Array, RecordBatch, StringArray};
        use arrow_schema::{DataType as ArrowType, Field, Schema};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let schema = Arc::new(Schema::new(vec![
            Field::new("request_id", ArrowType::Utf8, false),
            Field::new("n", ArrowType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
            ],
        )
        .unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            schema,
            None,
        )
        .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let engine = delta_kernel_default_engine::DefaultEngineBuilder::new(Arc::new(
            object_store::local::LocalFileSystem::new(),
        ))
        .build();
        let url = Url::from_file_path(&path).unwrap();
        let meta = engine.storage_handler().head(&url).unwrap();
        for first in [8, 100, FOOTER_READ] {
            let (schema, rows) = footer(&engine, &meta, first).unwrap();
            assert_eq!(rows, 3);
            let names: Vec<_> = schema.fields().map(|f| f.name().clone()).collect();
            assert_eq!(names, ["request_id", "n"]);
            assert_eq!(schema.fields().nth(1).unwrap().data_type(), &DataType::LONG);
        }
    }

    #[test]
    fn new_columns_are_those_the_table_lacks_and_nullable() {
        let file = |fields: Vec<StructField>| TableFile {
            meta: FileMeta {
                location: Url::parse("file:///t/x.parquet").unwrap(),
                last_modified: 0,
                size: 1,
            },
            hour: Hour {
                model: None,
                days: 0,
                hour: 0,
            },
            schema: std::sync::Arc::new(StructType::try_new(fields).unwrap()),
            rows: 2,
        };
        let files = [
            file(vec![
                StructField::not_null("request_id", DataType::STRING),
                StructField::nullable("a", DataType::FLOAT),
            ]),
            file(vec![
                StructField::not_null("request_id", DataType::STRING),
                StructField::not_null("B", DataType::LONG),
            ]),
        ];
        let table = table_schema(&files[..1], false).unwrap();
        let names: Vec<_> = table.fields().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["request_id", "a", "dt", "hr"]);
        let added = new_columns(&table, &files);
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].name(), "B");
        assert!(added[0].is_nullable());
        let with_b = StructType::try_new(table.fields().cloned().chain(added)).unwrap();
        assert!(new_columns(&with_b, &files).is_empty());
        // A name differing only in case is the same column to Delta.
        let lower = [file(vec![StructField::nullable("b", DataType::LONG)])];
        assert!(new_columns(&with_b, &lower).is_empty());
    }
}
