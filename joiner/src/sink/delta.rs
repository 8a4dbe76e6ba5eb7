//! The dataset's Delta Lake table (docs/JOINER.md, "Delta table output"): the roll forward of a
//! checkpoint adds its files in one Delta commit that carries the task's `txn` (version = the
//! epoch), creating the table on first use and retrying on conflict until the `txn` shows the
//! epoch committed, by this process or any other.
//!
//! The kernel reads and writes through the same object_store release as the dataset: a local
//! table over an unprefixed `LocalFileSystem` with fsync (the engine maps a `file://` URL's path
//! to an object path as it is), an S3 table over the bucket's store. The kernel's API is
//! synchronous and runs its requests on a thread of its own.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delta_kernel::committer::FileSystemCommitter;
use delta_kernel::schema::StructType;
use delta_kernel::transaction::create_table::create_table;
use delta_kernel::transaction::data_layout::DataLayout;
use delta_kernel::transaction::{CommitResult, Transaction, UpdateTableOperation};
use delta_kernel::{Engine, Snapshot, SnapshotRef, Version};
use delta_kernel_default_engine::DefaultEngineBuilder;
use delta_kernel_default_engine::executor::tokio::TokioBackgroundExecutor;
use delta_kernel_default_engine::parquet::DataFileMetadata;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use url::Url;

use super::error::SinkError;
use files::{TableFile, describe, new_columns, partition_values, table_schema};
use known::Known;

mod files;
mod known;
mod log_checkpoint;
mod rewrite;

pub(crate) use rewrite::LiveFile;

/// Recorded as the writer of every commit (`commitInfo.engineInfo`).
const ENGINE_INFO: &str = concat!("featurelog-joiner/", env!("CARGO_PKG_VERSION"));

/// Commits tried before a roll forward fails: each conflict means another commit landed, so
/// this many in a row means the log is contended far beyond a joiner's tasks.
const ATTEMPTS: u32 = 100;

/// The `txn` application id of a task: the task, as the checkpoints are keyed.
pub(crate) fn app_id(task: &str) -> String {
    format!("featurelog:{task}")
}

/// The dataset's Delta table.
pub(crate) struct DeltaTable {
    engine: delta_kernel_default_engine::DefaultEngine<TokioBackgroundExecutor>,
    /// The table's root, ending in `/`.
    root: Url,
    /// The newest snapshot this handle loaded or committed, which the next commit is built on
    /// and the next load reads the log after, and the `txn`s known at it. No snapshot until
    /// the table is found or created.
    known: Mutex<Known>,
    /// Per task, the highest `txn` version this handle has seen or committed.
    done: Mutex<HashMap<String, u64>>,
    /// The store the table is in, for the checkpoint writer's engine.
    store: Arc<dyn ObjectStore>,
    checkpoint_engine: log_checkpoint::CheckpointEngineCell,
    /// The newest log checkpoint version this handle has seen or written.
    checkpointed: Mutex<Option<u64>>,
    /// Whether the table is partitioned by model first (`partition-by-model`).
    by_model: bool,
}

impl std::fmt::Debug for DeltaTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaTable")
            .field("root", &self.root.as_str())
            .finish_non_exhaustive()
    }
}

impl DeltaTable {
    /// The table at the local directory `root`, which exists.
    pub(crate) fn local(root: &Path) -> Result<Self, SinkError> {
        let problem = |problem: String| SinkError::Delta {
            table: root.display().to_string(),
            problem,
        };
        let absolute = root
            .canonicalize()
            .map_err(|e| problem(format!("resolving the directory: {e}")))?;
        let url = Url::from_directory_path(&absolute)
            .map_err(|()| problem("not an absolute directory path".into()))?;
        // Unprefixed: the engine turns a `file://` URL's path into the object path itself.
        let store = LocalFileSystem::new().with_fsync(true);
        Ok(Self::with_store(Arc::new(store), url))
    }

    /// The table at `root` (`s3://bucket/prefix/`, or any URL whose path is the key prefix in
    /// `store`), where `store` is rooted at the bucket.
    pub(crate) fn with_store(store: Arc<dyn ObjectStore>, mut root: Url) -> Self {
        if !root.path().ends_with('/') {
            root.set_path(&format!("{}/", root.path()));
        }
        Self {
            engine: DefaultEngineBuilder::new(store.clone()).build(),
            root,
            known: Mutex::default(),
            done: Mutex::default(),
            store,
            checkpoint_engine: std::sync::OnceLock::new(),
            checkpointed: Mutex::new(None),
            by_model: false,
        }
    }

    /// This table, partitioned by model before the hour when `by_model` (the dataset's
    /// `partition-by-model`).
    pub(crate) fn partitioned_by_model(mut self, by_model: bool) -> Self {
        self.by_model = by_model;
        self
    }

    fn error(&self, problem: impl std::fmt::Display) -> SinkError {
        SinkError::Delta {
            table: self.root.to_string(),
            problem: problem.to_string(),
        }
    }

    /// The epoch of the task's last commit to the table (its `txn` version), from the newest
    /// version of the table; `None` when it has none or there is no table.
    #[cfg(test)]
    pub(crate) fn committed_epoch(&self, task: &str) -> Result<Option<u64>, SinkError> {
        let Some(snapshot) = self.latest()? else {
            return Ok(None);
        };
        self.epoch_in(&snapshot, task)
    }

    fn epoch_in(&self, snapshot: &SnapshotRef, task: &str) -> Result<Option<u64>, SinkError> {
        let at = snapshot.version();
        if let Some(epoch) = self.known().txn(at, task) {
            return Ok(epoch);
        }
        let version = snapshot
            .get_app_id_version(&app_id(task), &self.engine)
            .map_err(|e| self.error(format!("reading the txn of task {task}: {e}")))?;
        let epoch = version.and_then(|v| u64::try_from(v).ok());
        self.known().note_txn(at, task, epoch);
        if let Some(epoch) = epoch {
            self.note_done(task, epoch);
        }
        Ok(epoch)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this handle has seen the task's `txn` at `epoch` or later: a task's `txn` never
    /// goes back, so a roll forward already seen through (the completeness pass rolls every
    /// task's newest checkpoint forward) costs no request.
    fn known_done(&self, task: &str, epoch: u64) -> bool {
        self.done
            .lock()
            .is_ok_and(|done| done.get(task).is_some_and(|&e| e >= epoch))
    }

    fn note_done(&self, task: &str, epoch: u64) {
        if let Ok(mut done) = self.done.lock() {
            let known = done.entry(task.to_owned()).or_insert(epoch);
            *known = (*known).max(epoch);
        }
    }

    /// Adds the files of `task`'s checkpoint `epoch` (visible names, relative to the root) to
    /// the table with the task's `txn` at `epoch`, unless the table's `txn` of the task is
    /// already there. Idempotent, and safe against any number of concurrent callers with the
    /// same arguments (a zombie of the task, another process's completeness pass): the `txn`
    /// is read on the snapshot each commit is built on, and a commit on a stale snapshot is
    /// refused by the log.
    pub(crate) fn commit(
        &self,
        task: &str,
        epoch: u64,
        visible: &[String],
    ) -> Result<(), SinkError> {
        let version =
            i64::try_from(epoch).map_err(|e| self.error(format!("epoch {epoch}: {e}")))?;
        // The txn only guards against adding files twice, so an epoch without files (all rows
        // late) needs no commit.
        if !visible.iter().any(|name| files::in_table(name)) || self.known_done(task, epoch) {
            return Ok(());
        }
        // Described once, by the first attempt that needs them.
        let mut described: Option<Vec<TableFile>> = None;
        // The version an attempt conflicted on: the next one loads the table's newer versions.
        let mut conflicted: Option<Version> = None;
        for attempt in 0..ATTEMPTS {
            let known = self.known().snapshot();
            let snapshot = match known {
                Some(known) if conflicted.is_none_or(|v| known.version() > v) => Some(known),
                _ => self.latest()?,
            };
            if let Some(snapshot) = &snapshot
                && self.epoch_in(snapshot, task)?.is_some_and(|e| e >= epoch)
            {
                return Ok(());
            }
            let files = match &mut described {
                Some(files) => files,
                None => described.insert(
                    describe(&self.engine, &self.root, visible).map_err(|e| self.error(e))?,
                ),
            };
            let base = snapshot.as_ref().map(|s| s.version());
            let result = match snapshot {
                Some(snapshot) => self.append(snapshot, task, version, files)?,
                None => self.create(task, version, files)?,
            };
            match result {
                Outcome::Committed(snapshot) => {
                    self.known().committed(base, snapshot, Some((task, epoch)));
                    self.note_done(task, epoch);
                    tracing::debug!(task, epoch, "added to the Delta table");
                    return Ok(());
                }
                Outcome::Retry(why) => {
                    conflicted = Some(base.unwrap_or(0));
                    tracing::debug!(task, epoch, attempt, why, "Delta commit retried");
                    std::thread::sleep(jitter(attempt));
                }
            }
        }
        Err(self.error(format!(
            "task {task} epoch {epoch}: no Delta commit after {ATTEMPTS} conflicting attempts"
        )))
    }

    /// The table's newest snapshot (read incrementally after the one this handle knows), or
    /// `None` when the table does not exist yet.
    fn latest(&self) -> Result<Option<SnapshotRef>, SinkError> {
        let known = self.known().snapshot();
        let snapshot = match known {
            Some(known) => Snapshot::builder_from(known).build(&self.engine),
            None if !self.exists()? => return Ok(None),
            None => Snapshot::builder_for(self.root.as_str()).build(&self.engine),
        }
        .map_err(|e| self.error(format!("loading the table: {e}")))?;
        self.known().loaded(snapshot.clone());
        Ok(Some(snapshot))
    }

    /// Whether the log has any file: a table with none was never created.
    fn exists(&self) -> Result<bool, SinkError> {
        let log = self
            .root
            .join("_delta_log/")
            .map_err(|e| self.error(format!("the log's URL: {e}")))?;
        match self.engine.storage_handler().list_from(&log) {
            Ok(mut files) => match files.next() {
                None => Ok(false),
                Some(Ok(_)) => Ok(true),
                Some(Err(e)) => Err(self.error(format!("listing the log: {e}"))),
            },
            // A local directory without `_delta_log/` cannot be listed.
            Err(delta_kernel::KernelError::FileNotFound(_)) => Ok(false),
            Err(e) => Err(self.error(format!("listing the log: {e}"))),
        }
    }

    fn create(&self, task: &str, version: i64, files: &[TableFile]) -> Result<Outcome, SinkError> {
        let schema = table_schema(files, self.by_model).map_err(|e| self.error(e))?;
        let built = create_table(self.root.as_str(), Arc::new(schema), ENGINE_INFO, true)
            .with_data_layout(DataLayout::partitioned(files::partitions(self.by_model)))
            .with_transaction_id(app_id(task), version)
            .build(&self.engine, Box::new(FileSystemCommitter::new()));
        let txn = match built {
            Ok(txn) => txn,
            // Another writer created it since this one looked: append to it instead.
            Err(delta_kernel::KernelError::TableAlreadyExistsAtPath(_)) => {
                return Ok(Outcome::Retry("another writer created the table".into()));
            }
            Err(e) => return Err(self.error(format!("creating the table: {e}"))),
        };
        self.finish(txn, files)
    }

    fn append(
        &self,
        snapshot: SnapshotRef,
        task: &str,
        version: i64,
        files: &[TableFile],
    ) -> Result<Outcome, SinkError> {
        let table: StructType = snapshot.schema().as_ref().clone();
        let mut builder = snapshot
            .update_table(UpdateTableOperation::StreamingUpdate, ENGINE_INFO, true)
            .with_transaction_id(app_id(task), version);
        // Columns the allow list gained since: nullable columns of the table from this commit
        // on, in the same commit as the first files that have them.
        for column in new_columns(&table, files) {
            builder = builder.add_column(column);
        }
        let txn = builder
            .build(&self.engine, Box::new(FileSystemCommitter::new()))
            .map_err(|e| self.error(format!("starting a commit: {e}")))?;
        self.finish(txn, files)
    }

    /// Stages `files` as adds of `txn` and commits it.
    fn finish<S>(
        &self,
        mut txn: Transaction<S>,
        files: &[TableFile],
    ) -> Result<Outcome, SinkError> {
        let state = txn
            .write_state()
            .map_err(|e| self.error(format!("the commit's write state: {e}")))?;
        for file in files {
            let context = state
                .write_context_builder()
                .with_partition_values(partition_values(&file.hour))
                .build()
                .map_err(|e| {
                    self.error(format!("{}: partition values: {e}", file.meta.location))
                })?;
            let add = delta_kernel_default_engine::build_add_file_metadata(
                DataFileMetadata::new(file.meta.clone(), stats(file.rows)),
                &context,
            )
            .map_err(|e| self.error(format!("{}: add action: {e}", file.meta.location)))?;
            txn.add_files(add);
        }
        match txn.commit(&self.engine) {
            Ok(CommitResult::Committed(done)) => match done.post_commit_snapshot() {
                Some(snapshot) => Ok(Outcome::Committed(snapshot.clone())),
                // Committed, yet no snapshot to go on from: load it.
                None => self
                    .latest()?
                    .map(Outcome::Committed)
                    .ok_or_else(|| self.error("the table is gone after a commit")),
            },
            Ok(CommitResult::Conflicted(c)) => Ok(Outcome::Retry(format!(
                "version {} was taken",
                c.conflict_version()
            ))),
            Ok(CommitResult::Retryable(_)) => {
                Ok(Outcome::Retry("the store failed retryably".into()))
            }
            Err(e) => Err(self.error(format!("committing: {e}"))),
        }
    }
}

/// What a commit attempt came to.
enum Outcome {
    Committed(SnapshotRef),
    /// Another commit took the version (or the store failed retryably): load and try again.
    Retry(String),
}

/// A file's statistics: its row count only. Delta makes column bounds optional; without them
/// readers read every file of the partitions they select.
fn stats(rows: i64) -> arrow_array::StructArray {
    use arrow_schema::{DataType, Field};
    let rows: arrow_array::ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![rows]));
    arrow_array::StructArray::from(vec![(
        Arc::new(Field::new("numRecords", DataType::Int64, true)),
        rows,
    )])
}

/// How long a writer waits before its next attempt after a conflict: spread, so that the
/// writers that collided do not collide again.
fn jitter(attempt: u32) -> Duration {
    Duration::from_millis(5 + fastrand_below(20 * u64::from(attempt.min(10) + 1)))
}

/// A number below `n` (at least 1), for jitter; not for anything that needs randomness.
fn fastrand_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    nanos % n.max(1)
}

#[cfg(test)]
mod tests;
