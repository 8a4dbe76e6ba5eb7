//! Rows, checkpoints, datasets and a storage wrapper that the sink's unit tests share.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
use object_store::ObjectStore as _;

use super::storage::Storage;
use super::{COMMON_METADATA, Checkpoint, Dataset, SUCCESS, SinkError, SinkOptions, Staged};
use crate::state::{Labels, Row};

pub(super) fn rows(hour_offset: i64) -> Vec<Row> {
    rows_of("r1", hour_offset)
}

/// Two rows of `request`, an hour apart from `hour_offset` on.
pub(super) fn rows_of(request: &str, hour_offset: i64) -> Vec<Row> {
    model_rows("m", request, hour_offset)
}

pub(super) fn model_rows(model: &str, request: &str, hour_offset: i64) -> Vec<Row> {
    let log = Arc::new(crate::log::ServedLog::from(FeatureLog {
        request_id: request.into(),
        model_name: model.into(),
        served_at: Some(prost_types::Timestamp {
            seconds: 0,
            nanos: 0,
        }),
        row_count: 2,
        candidate_ids: vec!["a".into(), "b".into()],
        features: vec![Feature {
            name: "x".into(),
            datatype: DataType::Int64 as i32,
            row_shape: vec![],
            values: Some(Values {
                int64_values: vec![10, 20],
                ..Default::default()
            }),
            per_request: false,
        }],
        ..Default::default()
    }));
    (0..2)
        .map(|i| Row {
            request_id: request.into(),
            item_id: log
                .candidate_id(i)
                .map(|c| c.to_string())
                .unwrap_or_default(),
            features: log.clone(),
            row: i,
            impression_time_us: Some((hour_offset + i as i64) * 3_600_000_000),
            labels: Labels::default(),
        })
        .collect()
}

pub(super) fn visible_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                if !name.starts_with('_') {
                    dirs.push(e.path());
                }
            // `_common_metadata` holds no rows (common_metadata.rs has its own tests).
            } else if !name.starts_with('.') && name != COMMON_METADATA {
                out.push(
                    e.path()
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

pub(super) fn checkpoint(task: &str, epoch: u64, files: Vec<String>) -> Checkpoint {
    Checkpoint {
        task: task.into(),
        epoch,
        offsets: [("features".to_string(), 10), ("events".to_string(), 7)].into(),
        watermark_us: 5,
        files,
        state: None,
        staging: format!("_featurelog/staging/{task}/{epoch:020}-test"),
    }
}

/// The checkpoint of what `staged` staged.
pub(super) fn committed(task: &str, epoch: u64, staged: &Staged) -> Checkpoint {
    Checkpoint {
        staging: staged.staging.clone(),
        ..checkpoint(task, epoch, staged.files.clone())
    }
}

/// A dataset on an in-memory object store: the object-store protocol without a server
/// (tests/joiner_s3.rs runs it against a real S3-compatible one).
pub(super) fn in_memory() -> (Arc<object_store::memory::InMemory>, Dataset) {
    let store = Arc::new(object_store::memory::InMemory::new());
    let options = SinkOptions {
        max_file_rows: Some(1),
        ..SinkOptions::default()
    };
    let ds = Dataset::open_object_store(store.clone(), "memory://b", "ds/", options).unwrap();
    (store, ds)
}

/// A handle on the dataset of `store` made by [`memory`]: called again, another process's.
pub(super) fn on_memory(
    store: &Arc<object_store::memory::InMemory>,
    options: SinkOptions,
) -> Dataset {
    Dataset::open_object_store(store.clone(), "memory://b", "ds/", options).unwrap()
}

/// An empty in-memory store, for datasets that [`on_memory`] opens on it.
pub(super) fn memory() -> Arc<object_store::memory::InMemory> {
    Arc::new(object_store::memory::InMemory::new())
}

pub(super) fn keys(store: &object_store::memory::InMemory) -> Vec<String> {
    use futures::TryStreamExt as _;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut keys: Vec<String> = rt
        .block_on(
            store
                .list(None)
                .map_ok(|m| m.location.to_string())
                .try_collect::<Vec<_>>(),
        )
        .unwrap();
    keys.sort();
    keys
}

pub(super) fn visible(keys: &[String]) -> Vec<String> {
    keys.iter()
        .filter_map(|k| k.strip_prefix("ds/"))
        .filter(|k| !k.starts_with('_') && !k.split('/').any(|p| p.starts_with('.')))
        .map(str::to_owned)
        .collect()
}

/// How [`Watched`] answers a create.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Creates {
    /// As the storage under it does.
    AsStored,
    /// The create is applied, its answer lost: the client sends it again and is refused
    /// (object_store retries a request whose connection closed before the answer came).
    AnswerLost,
    /// As a store that ignores `If-None-Match`: every create overwrites and says it created.
    IgnoringCondition,
}

/// A storage for tests over another: counts the listings and marker checks made of it, and
/// answers creates as [`Creates`] says.
#[derive(Debug)]
pub(super) struct Watched {
    pub(super) inner: Arc<dyn Storage>,
    pub(super) creates: Creates,
    pub(super) lists: std::sync::atomic::AtomicUsize,
    pub(super) checks: std::sync::atomic::AtomicUsize,
    pub(super) checkpoint_lists: std::sync::atomic::AtomicUsize,
}

impl Watched {
    pub(super) fn new(inner: Arc<dyn Storage>, creates: Creates) -> Self {
        Self {
            inner,
            creates,
            lists: Default::default(),
            checks: Default::default(),
            checkpoint_lists: Default::default(),
        }
    }
}

impl Storage for Watched {
    fn describe(&self, relative: &str) -> PathBuf {
        self.inner.describe(relative)
    }
    fn staging(&self, task: &str, epoch: u64) -> String {
        self.inner.staging(task, epoch)
    }
    fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), SinkError> {
        self.inner.put(relative, bytes)
    }
    fn create(&self, relative: &str, bytes: Vec<u8>) -> Result<bool, SinkError> {
        match self.creates {
            Creates::AsStored => self.inner.create(relative, bytes),
            Creates::AnswerLost => {
                self.inner.create(relative, bytes)?;
                Ok(false)
            }
            Creates::IgnoringCondition => {
                self.inner.put(relative, bytes)?;
                Ok(true)
            }
        }
    }
    fn get(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        self.inner.get(relative)
    }
    fn exists(&self, relative: &str) -> Result<bool, SinkError> {
        if relative.ends_with(SUCCESS) {
            self.checks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.exists(relative)
    }
    fn children(&self, dir: &str) -> Result<(Vec<String>, Vec<String>), SinkError> {
        if dir.starts_with("dt=") {
            self.lists
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if dir.starts_with("_featurelog/checkpoints") {
            self.checkpoint_lists
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.children(dir)
    }
    fn files_modified(&self, dir: &str) -> Result<Vec<(String, i64)>, SinkError> {
        self.inner.files_modified(dir)
    }
    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError> {
        self.inner.publish(staged, visible)
    }
    fn clean(&self, staging: &str) -> Result<(), SinkError> {
        self.inner.clean(staging)
    }
    fn discard(&self, task: &str, committed: u64) -> Result<(), SinkError> {
        self.inner.discard(task, committed)
    }
    fn remove(&self, relative: &str) -> Result<(), SinkError> {
        self.inner.remove(relative)
    }
}

pub(super) fn checkpoint_epochs_on_disk(ds: &Dataset, task: &str) -> Vec<u64> {
    ds.checkpoint_epochs(task).unwrap()
}
