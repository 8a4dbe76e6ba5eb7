//! The dataset's `_common_metadata`: a Parquet file without rows whose schema is the union of the
//! columns of every data file, so that a reader gets the dataset's whole schema from one small
//! file instead of from every file's footer (README, "Reading the dataset"). With
//! `partition-by-model`, each `model=<name>/` has one too, of that model's files only, so that a
//! model's directory read as a dataset of its own shows only its own columns.
//!
//! It must never lack a column of a data file a reader can see: a reader that takes its schema
//! from it would silently drop that column. Hence:
//! - a writer adds a file's columns to it when it encodes the file, before staging it, so before
//!   the commit that lets anyone publish the file;
//! - it only grows: a change reads it, adds columns and writes it back, and no other writer's
//!   change comes in between (a put conditional on the ETag read, `PutMode::Update`, where the
//!   store has it; on a local directory, whose LocalFileSystem has not, a lock on a file under
//!   `_featurelog/locks/`: `Storage::update` in store.rs). A plain overwrite could put back a smaller schema read before another writer added
//!   a column and committed a file with it;
//! - where it is missing (a dataset that has data files but not it yet), it is made from the
//!   footers of the data files there, then the new file's columns.
//!
//! A writer remembers what it has seen in it, so a flush whose columns are all there costs no
//! request at all. It may list a column that no visible file has (a flush that died before its
//! commit): readers read that column as nulls.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow_schema::{Field, FieldRef, Schema};
use parquet::arrow::{ArrowWriter, parquet_to_arrow_schema};
use parquet::file::metadata::{FooterTail, ParquetMetaDataReader};

use super::error::SinkError;
use super::layout::MODEL_PARTITION;
use super::storage::Storage;

/// The file's name, in the dataset's root (and in each model's directory).
pub const COMMON_METADATA: &str = "_common_metadata";

/// Bytes read from the end of a data file to find its footer: most footers fit, so one request
/// per file.
const FOOTER_GUESS: usize = 64 * 1024;

/// The columns this writer has seen in each `_common_metadata` (by directory: "" for the root,
/// `model=<name>/`). They stay there: it only grows.
#[derive(Debug, Default)]
pub(super) struct Covered(Mutex<HashMap<String, HashSet<String>>>);

impl Covered {
    /// Makes sure that the `_common_metadata` of each directory that the data file `visible`
    /// belongs to lists every column of `schema`, the file's.
    pub(super) fn cover(
        &self,
        storage: &dyn Storage,
        visible: &str,
        schema: &Schema,
    ) -> Result<(), SinkError> {
        for dir in directories(visible) {
            if self.holds(&dir, schema) {
                continue;
            }
            let mut now = None;
            storage.update(&format!("{dir}{COMMON_METADATA}"), &mut |current| {
                let base = match current.map(footer_schema) {
                    Some(Ok(schema)) => schema,
                    None => union_of_files(storage, &dir)?,
                    // Made again from the files: a joiner must not stop flushing over a file
                    // that readers need and that it can rebuild.
                    Some(Err(err)) => {
                        let path = storage.describe(&format!("{dir}{COMMON_METADATA}"));
                        tracing::warn!(%err, ?path, "unreadable; made again from the data files");
                        union_of_files(storage, &dir)?
                    }
                };
                let merged = merged(&base, schema);
                now = Some(names(merged.as_ref().unwrap_or(&base)));
                merged
                    .map(|schema| encode(&schema).map_err(|e| unreadable(storage, &dir, e)))
                    .transpose()
            })?;
            if let Some(names) = now {
                self.0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(dir, names);
            }
        }
        Ok(())
    }

    fn holds(&self, dir: &str, schema: &Schema) -> bool {
        let seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.get(dir)
            .is_some_and(|names| schema.fields().iter().all(|f| names.contains(f.name())))
    }
}

impl super::Dataset {
    /// The schema of the `_common_metadata` in `dir` (`""` for the dataset's root, `model=<name>/`
    /// for a model's directory): every column of the data files there. `None` when it has none.
    pub fn common_metadata(&self, dir: &str) -> Result<Option<Schema>, SinkError> {
        let relative = format!("{dir}{COMMON_METADATA}");
        if !self.storage.exists(&relative)? {
            return Ok(None);
        }
        let bytes = self.storage.get(&relative)?;
        footer_schema(&bytes)
            .map(Some)
            .map_err(|e| unreadable(&*self.storage, dir, e))
    }
}

/// The directories whose `_common_metadata` covers the data file `visible`: the root, and its
/// model's directory when the dataset is partitioned by model (late rows included).
fn directories(visible: &str) -> Vec<String> {
    let rest = visible.strip_prefix("late/").unwrap_or(visible);
    let mut dirs = vec![String::new()];
    let model = rest
        .split_once('/')
        .map(|(first, _)| first)
        .filter(|first| first.starts_with(&format!("{MODEL_PARTITION}=")));
    dirs.extend(model.map(|first| format!("{first}/")));
    dirs
}

fn names(schema: &Schema) -> HashSet<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}

/// `base` with the columns of `add` it lacks (a column that is nullable in either is nullable),
/// or `None` when it lacks none. A name whose type differs keeps `base`'s: the dataset's column
/// registry gives a name one type, and a reader meets a file that disagrees with an error, never
/// with a column dropped.
fn merged(base: &Schema, add: &Schema) -> Option<Schema> {
    let mut fields: Vec<FieldRef> = base.fields().iter().cloned().collect();
    let mut changed = false;
    for field in add.fields() {
        match fields.iter_mut().find(|f| f.name() == field.name()) {
            Some(held) => {
                if field.is_nullable()
                    && !held.is_nullable()
                    && held.data_type() == field.data_type()
                {
                    *held = Arc::new(Field::clone(held).with_nullable(true));
                    changed = true;
                }
            }
            None => {
                fields.push(field.clone());
                changed = true;
            }
        }
    }
    changed.then(|| Schema::new(fields))
}

/// The union of the schemas of the data files under `dir` (of the whole dataset for the root,
/// late rows included; of one model, its late rows included, for `model=<name>/`).
fn union_of_files(storage: &dyn Storage, dir: &str) -> Result<Schema, SinkError> {
    let mut files = Vec::new();
    let tops = match dir {
        "" => vec![String::new()],
        model => vec![model.to_owned(), format!("late/{model}")],
    };
    for top in tops {
        data_files(storage, &top, &mut files)?;
    }
    let mut union = Schema::empty();
    for file in files {
        let schema = file_schema(storage, &file)?;
        if let Some(grown) = merged(&union, &schema) {
            union = grown;
        }
    }
    Ok(union)
}

/// The data files under `dir` (`""` or ending in `/`): `*.parquet` whose path has no hidden
/// segment (`_featurelog/`, `.pending` files of older joiners, temporary files).
fn data_files(storage: &dyn Storage, dir: &str, out: &mut Vec<String>) -> Result<(), SinkError> {
    let hidden = |name: &str| name.starts_with('.') || name.starts_with('_');
    let (dirs, files) = storage.children(dir.trim_end_matches('/'))?;
    for name in dirs {
        if !hidden(&name) {
            data_files(storage, &format!("{dir}{name}/"), out)?;
        }
    }
    out.extend(
        (files.into_iter())
            .filter(|name| !hidden(name) && name.ends_with(".parquet"))
            .map(|name| format!("{dir}{name}")),
    );
    Ok(())
}

/// The Arrow schema of a Parquet file, from its footer only.
fn file_schema(storage: &dyn Storage, relative: &str) -> Result<Schema, SinkError> {
    let unreadable = |e: parquet::errors::ParquetError| SinkError::Io {
        action: "read the schema of",
        path: storage.describe(relative),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
    };
    let mut tail = storage.tail(relative, FOOTER_GUESS)?;
    let needed = footer_len(&tail).map_err(unreadable)?;
    if tail.len() < needed {
        tail = storage.tail(relative, needed)?;
    }
    footer_schema(&tail).map_err(unreadable)
}

/// The length of the footer (metadata and the 8 bytes after it) of a file ending with `tail`.
fn footer_len(tail: &[u8]) -> Result<usize, parquet::errors::ParquetError> {
    let last: &[u8; 8] = tail
        .len()
        .checked_sub(8)
        .and_then(|start| tail[start..].try_into().ok())
        .ok_or_else(|| parquet::errors::ParquetError::EOF("shorter than a footer".into()))?;
    Ok(FooterTail::try_new(last)?.metadata_length() + 8)
}

/// The Arrow schema in the footer at the end of `bytes` (a whole file, or its end).
fn footer_schema(bytes: &[u8]) -> Result<Schema, parquet::errors::ParquetError> {
    let len = footer_len(bytes)?;
    let start = bytes
        .len()
        .checked_sub(len)
        .ok_or_else(|| parquet::errors::ParquetError::EOF("footer cut short".into()))?;
    let metadata = ParquetMetaDataReader::decode_metadata(&bytes[start..bytes.len() - 8])?;
    let file = metadata.file_metadata();
    let schema = parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())?;
    // The fields only: file-level key-value metadata is no column's.
    Ok(Schema::new(schema.fields().clone()))
}

/// A Parquet file without rows, of `schema` (Arrow's own schema embedded, as in the data files,
/// so that time zones and fixed-size lists read back as written).
fn encode(schema: &Schema) -> Result<Vec<u8>, parquet::errors::ParquetError> {
    ArrowWriter::try_new(Vec::new(), Arc::new(schema.clone()), None)?.into_inner()
}

fn unreadable(storage: &dyn Storage, dir: &str, e: parquet::errors::ParquetError) -> SinkError {
    SinkError::Io {
        action: "read or write the schema in",
        path: storage.describe(&format!("{dir}{COMMON_METADATA}")),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Checkpoint, Dataset, SinkOptions};
    use super::*;
    use crate::state::{Labels, Row};
    use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
    use std::fs;
    use std::path::Path;

    const HOUR_US: i64 = 3_600_000_000;

    /// Two impressed rows of `request` for `model` in epoch hour `hour`, with an INT64 column
    /// per name in `columns`.
    fn rows(model: &str, request: &str, hour: i64, columns: &[&str]) -> Vec<Row> {
        let log = Arc::new(crate::log::ServedLog::from(FeatureLog {
            request_id: request.into(),
            model_name: model.into(),
            served_at: Some(prost_types::Timestamp {
                seconds: hour * 3600,
                nanos: 0,
            }),
            row_count: 2,
            candidate_ids: vec!["a".into(), "b".into()],
            features: (columns.iter())
                .map(|name| Feature {
                    name: (*name).into(),
                    datatype: DataType::Int64 as i32,
                    row_shape: vec![],
                    values: Some(Values {
                        int64_values: vec![1],
                        ..Default::default()
                    }),
                    per_request: true,
                })
                .collect(),
            ..Default::default()
        }));
        (0..2)
            .map(|i| Row {
                request_id: request.into(),
                item_id: ["a", "b"][i].into(),
                features: log.clone(),
                row: i,
                impression_time_us: Some(hour * HOUR_US + i as i64),
                labels: Labels::default(),
            })
            .collect()
    }

    fn write(ds: &Dataset, task: &str, epoch: u64, rows: &[Row], complete_before_us: i64) {
        let staged = ds.stage(task, epoch, rows, complete_before_us).unwrap();
        let checkpoint = Checkpoint {
            task: task.into(),
            epoch,
            offsets: Default::default(),
            watermark_us: i64::MIN,
            files: staged.files,
            state: None,
            staging: staged.staging,
        };
        ds.commit(&checkpoint).unwrap();
        ds.roll_forward(&checkpoint).unwrap();
    }

    /// The column names of a local Parquet file (a data file or a `_common_metadata`).
    fn columns(path: &Path) -> Vec<String> {
        let schema = footer_schema(&fs::read(path).unwrap()).unwrap();
        schema.fields().iter().map(|f| f.name().clone()).collect()
    }

    /// The feature columns of a local Parquet file, sorted.
    fn features(path: &Path) -> Vec<String> {
        let fixed = [
            "request_id",
            "item_id",
            "model_name",
            "model_version",
            "served_at",
            "impression_time",
            "impressed",
            "clicks",
            "conversions",
            "labels",
            "parameters",
        ];
        let mut names = columns(path);
        names.retain(|n| !fixed.contains(&n.as_str()));
        names.sort();
        names
    }

    /// The data files under `dir`, as readers see them.
    fn visible(root: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        let mut dirs = vec![root.to_owned()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).unwrap().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with('_') || name.starts_with('.') {
                    continue;
                }
                if entry.file_type().unwrap().is_dir() {
                    dirs.push(entry.path());
                } else if name.ends_with(".parquet") {
                    out.push(entry.path());
                }
            }
        }
        out
    }

    #[test]
    fn it_holds_every_column_of_every_committed_file_and_only_grows() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let common = dir.path().join(COMMON_METADATA);
        write(&ds, "t-0", 1, &rows("m", "r1", 10, &["a"]), i64::MIN);
        assert_eq!(features(&common), ["a"]);
        // The allow list gains `b`; a late row of hour 10 has it too.
        let mut grown = rows("m", "r2", 11, &["a", "b"]);
        grown.extend(rows("m", "r3", 10, &["c"]));
        write(&ds, "t-0", 2, &grown, 11 * HOUR_US);
        assert_eq!(features(&common), ["a", "b", "c"]);
        // A file without `b` and `c` takes nothing away.
        write(&ds, "t-0", 3, &rows("m", "r4", 12, &["a"]), i64::MIN);
        assert_eq!(features(&common), ["a", "b", "c"]);
        let files = visible(dir.path());
        assert_eq!(files.len(), 4, "{files:?}");
        assert!(files.iter().any(|f| f.to_string_lossy().contains("/late/")));
        let all = columns(&common);
        for file in files {
            for column in columns(&file) {
                assert!(
                    all.contains(&column),
                    "{column} of {file:?} missing: {all:?}"
                );
            }
        }
        // Readers read it as the files' types: the fixed columns as written, features nullable.
        let schema = footer_schema(&fs::read(&common).unwrap()).unwrap();
        let served = schema.field_with_name("served_at").unwrap();
        assert_eq!(
            served.data_type(),
            &arrow_schema::DataType::Timestamp(
                arrow_schema::TimeUnit::Microsecond,
                Some("UTC".into())
            )
        );
        assert!(!schema.field_with_name("request_id").unwrap().is_nullable());
        assert!(schema.field_with_name("b").unwrap().is_nullable());
    }

    /// Writers that add columns at the same moment, each its own process (its own handle): none
    /// of their columns is lost, on a local directory and on an object store. A plain overwrite
    /// from each loses all but the last one's.
    #[test]
    fn writers_adding_columns_at_once_never_lose_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(object_store::memory::InMemory::new());
        let locally = || Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let remotely = || {
            Dataset::open_object_store(store.clone(), "memory://b", "ds", SinkOptions::default())
                .unwrap()
        };
        for (open, read) in [
            (
                &locally as &dyn Fn() -> Dataset,
                Box::new(|| fs::read(dir.path().join(COMMON_METADATA)).unwrap())
                    as Box<dyn Fn() -> Vec<u8>>,
            ),
            (
                &remotely,
                Box::new(|| {
                    let ds = remotely();
                    ds.storage.get(COMMON_METADATA).unwrap()
                }),
            ),
        ] {
            const WRITERS: usize = 8;
            let barrier = std::sync::Barrier::new(WRITERS);
            let handles: Vec<Dataset> = (0..WRITERS).map(|_| open()).collect();
            std::thread::scope(|scope| {
                for (i, ds) in handles.iter().enumerate() {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let name = format!("f{i}");
                        let rows = rows("m", &format!("r{i}"), 10, &["shared", &name]);
                        barrier.wait();
                        write(ds, &format!("t-{i}"), 1, &rows, i64::MIN);
                    });
                }
            });
            let schema = footer_schema(&read()).unwrap();
            for i in 0..WRITERS {
                assert!(
                    schema.field_with_name(&format!("f{i}")).is_ok(),
                    "f{i}: {schema:?}"
                );
            }
        }
    }

    #[test]
    fn a_dataset_without_it_gets_one_with_the_columns_of_the_files_it_has() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join(COMMON_METADATA);
        {
            let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
            write(&ds, "t-0", 1, &rows("m", "r1", 10, &["old"]), i64::MIN);
            write(
                &ds,
                "t-0",
                2,
                &rows("m", "r2", 10, &["late_only"]),
                11 * HOUR_US,
            );
        }
        fs::remove_file(&common).unwrap();
        // Bookkeeping and hidden files beside the data are not data.
        fs::write(
            dir.path().join("dt=1970-01-01/.part-x.parquet.pending"),
            b"not parquet",
        )
        .unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        write(&ds, "t-1", 1, &rows("m", "r3", 12, &["new"]), i64::MIN);
        assert_eq!(features(&common), ["late_only", "new", "old"]);
    }

    /// One that cannot be read (cut short by hand, say) is made again rather than stopping the
    /// joiner's flushes.
    #[test]
    fn an_unreadable_one_is_made_again_from_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join(COMMON_METADATA);
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        write(&ds, "t-0", 1, &rows("m", "r1", 10, &["a"]), i64::MIN);
        fs::write(&common, b"PAR1 not a footer").unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        write(&ds, "t-0", 2, &rows("m", "r2", 11, &["b"]), i64::MIN);
        assert_eq!(features(&common), ["a", "b"]);
    }

    #[test]
    fn each_model_directory_has_one_of_its_own_columns() {
        let dir = tempfile::tempdir().unwrap();
        let options = SinkOptions {
            partition_by_model: true,
            ..SinkOptions::default()
        };
        let ds = Dataset::open(dir.path(), options).unwrap();
        let mut both = rows("ranker", "r1", 10, &["price"]);
        both.extend(rows("ads", "r2", 10, &["bid"]));
        write(&ds, "t-0", 1, &both, i64::MIN);
        // A late row of the ranker's, with a column of its own.
        write(
            &ds,
            "t-0",
            2,
            &rows("ranker", "r3", 10, &["age"]),
            11 * HOUR_US,
        );
        let root = dir.path();
        assert_eq!(
            features(&root.join(COMMON_METADATA)),
            ["age", "bid", "price"]
        );
        assert_eq!(
            features(&root.join("model=ranker").join(COMMON_METADATA)),
            ["age", "price"]
        );
        assert_eq!(
            features(&root.join("model=ads").join(COMMON_METADATA)),
            ["bid"]
        );
    }

    /// A flush whose columns this writer has seen in it makes no request for it (a writer flushes
    /// every few seconds; its columns change when the allow list does).
    #[test]
    fn a_flush_of_known_columns_does_not_look_at_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join(COMMON_METADATA);
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        write(&ds, "t-0", 1, &rows("m", "r1", 10, &["a"]), i64::MIN);
        fs::remove_file(&common).unwrap();
        write(&ds, "t-0", 2, &rows("m", "r2", 11, &["a"]), i64::MIN);
        assert!(!common.exists(), "looked at again");
        write(&ds, "t-0", 3, &rows("m", "r3", 12, &["a", "b"]), i64::MIN);
        assert_eq!(features(&common), ["a", "b"]);
    }
}
