//! The dataset and its commit protocol (docs/JOINER.md, "Exactly once"), on a local directory
//! or on S3-compatible object storage.
//!
//! A flush of a task stages its rows under `_featurelog/staging/<task>/<epoch>-<writer>/`
//! (`<writer>` is random per [`Dataset`] handle; locally written then fsynced, on an object
//! store one PUT each) and its state as `_featurelog/state/<task>/<epoch>-<writer>.bin`, then
//! **creates** the task's next checkpoint, which names those files and the input offsets they
//! cover. Creating the checkpoint is the commit: locally it is written under a temporary name
//! and hard-linked into place, on an object store it is a conditional PUT (`If-None-Match: *`);
//! both fail if that epoch exists, so a second owner of the task (a zombie after a rebalance)
//! cannot commit over the first. Because every name a writer stages is its own, the loser of
//! such a race never overwrites a file the winner's checkpoint names, however late it writes.
//! After the commit the staged files get their visible names (rename; copy then delete).
//! [`Dataset::recover`] finishes an interrupted roll forward and deletes staging of epochs at or
//! below the committed one (never above: a live writer may be about to commit those), so a task
//! restarted after `kill -9` at any point sees each row exactly once.
//!
//! Datasets written before staging was per writer may hold `.part-*.parquet.pending` files beside
//! their visible names, and checkpoints without [`Checkpoint::staging`] that roll forward from
//! them. Readers skip names that start with `.` or `_` (Spark, pyarrow, pandas) or read a
//! `*.parquet` glob (DuckDB, Polars), so staged files (`*.parquet.staged` under `_featurelog/`)
//! and the bookkeeping are invisible to them; on an object store a data object does not exist
//! under its visible name until its copy completes. `_common_metadata` (common_metadata.rs)
//! holds every column of the data files, for readers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::path::{Path as ObjectPath, PathPart};
use object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use serde::{Deserialize, Serialize};

use crate::config::{OutputConfig, OutputLocation};
use crate::paths;
use crate::rows::{ColumnRegistry, hour_partition, to_record_batch};
use crate::state::Row;
use arrow_schema::ArrowError;

mod common_metadata;
pub use common_metadata::COMMON_METADATA;

/// What went wrong with the dataset, with the path concerned.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we were doing.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An object-store request failed.
    #[error("{action} {location}: {source}")]
    Store {
        /// What we were doing.
        action: &'static str,
        /// The object (`s3://bucket/key`).
        location: String,
        /// object_store's error.
        #[source]
        source: object_store::Error,
    },
    /// The object store cannot be used for this dataset.
    #[error("object store {url}: {problem}")]
    Unsupported {
        /// The dataset's URL.
        url: String,
        /// What is wrong.
        problem: String,
    },
    /// Rows could not be encoded.
    #[error("encoding rows for {path}: {message}")]
    Encode {
        /// The file being written.
        path: PathBuf,
        /// The encoder's message.
        message: String,
    },
    /// Another process committed this epoch of the task first: this one no longer owns it.
    #[error(
        "task {task:?}: epoch {epoch} was already committed by another owner (or the epoch before it was pruned by one)"
    )]
    Fenced {
        /// The task.
        task: String,
        /// The epoch.
        epoch: u64,
    },
    /// A local `output.path` lies under (or is) a regular file, so its directory cannot be
    /// created: said once, at start-up, naming the file (see [`crate::paths`]).
    #[error(
        "output.path {root}: {file} is a regular file, not a directory, so the dataset cannot be created there; point output.path at a directory (or move the file away)"
    )]
    NotADirectory {
        /// The dataset's root.
        root: PathBuf,
        /// The regular file in the way.
        file: PathBuf,
    },
    /// A checkpoint cannot be read, or names a file that is gone.
    #[error("checkpoint {path}: {problem}")]
    Checkpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SinkError + 'a {
    move |source| SinkError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// A task's committed progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The task (e.g. `features-topic-3`).
    pub task: String,
    /// Increases by one per commit.
    pub epoch: u64,
    /// The next offset to read, per input (`features`, `events`).
    pub offsets: BTreeMap<String, i64>,
    /// The task's watermark at the commit.
    pub watermark_us: i64,
    /// Data files committed in this epoch, relative to the dataset root, visible names.
    pub files: Vec<String>,
    /// The task's state snapshot at the commit, relative to the root, if any.
    pub state: Option<String>,
    /// Where the files were staged: a prefix unique to the writer, so two owners of a task
    /// never overwrite each other's staged files. From [`Staged::staging`]. `None` in
    /// checkpoints written before local staging was per writer: their files were staged as
    /// `.<name>.pending` beside their visible names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging: Option<String>,
}

/// The marker of a complete hour.
pub const SUCCESS: &str = "_SUCCESS";

/// An hour in microseconds.
const HOUR_US: i64 = 3_600_000_000;

/// What [`Dataset::stage`] wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Staged {
    /// The visible names the files get at the roll forward.
    pub files: Vec<String>,
    /// Rows that went to the late area.
    pub late_rows: usize,
    /// Where they were staged, for [`Checkpoint::staging`].
    pub staging: Option<String>,
}

use crate::time::hour_start_us;

/// Writer settings.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
    /// zstd level of the Parquet pages.
    pub zstd_level: i32,
    /// At most this many rows per file: a flush's rows of one hour are split into several
    /// files past it. `None`: one file per hour per flush.
    pub max_file_rows: Option<usize>,
    /// Checkpoints kept per task, the newest ones (at least 2); older ones are deleted after
    /// commits (docs/JOINER.md, "Checkpoint retention").
    pub checkpoints_kept: u64,
    /// Rows go under `model=<model name>/` before `dt=.../hr=...`, so that a model's training
    /// job reads its own files only (docs/JOINER.md, "Per-model partitions").
    pub partition_by_model: bool,
}

/// Default of [`SinkOptions::checkpoints_kept`]: about 2.8 hours of 10 s flushes.
pub const DEFAULT_CHECKPOINTS_KEPT: u64 = 1000;

/// Old checkpoints deleted at most per [`Dataset::prune_checkpoints`] call, so that a dataset
/// written before checkpoints were pruned sheds its backlog a little at every commit instead of
/// holding up one commit for as long as deleting all of it would take.
const PRUNE_PER_CALL: u64 = 100;

impl Default for SinkOptions {
    fn default() -> Self {
        Self {
            row_group_rows: 64 * 1024,
            zstd_level: 3,
            max_file_rows: None,
            checkpoints_kept: DEFAULT_CHECKPOINTS_KEPT,
            partition_by_model: false,
        }
    }
}

/// A dataset: a local directory or an object-store prefix.
#[derive(Debug, Clone)]
pub struct Dataset {
    root: PathBuf,
    options: SinkOptions,
    storage: Arc<dyn Storage>,
    /// Hours and days this process has seen marked complete: they never change back, so
    /// [`Dataset::mark_complete`] does not list or check them again. Without it, every flush
    /// checked every hour the dataset ever had (a HEAD per hour on object storage).
    complete: Arc<std::sync::Mutex<Complete>>,
    /// Per task, the oldest checkpoint epoch that may still exist, for pruning in order.
    oldest: Arc<std::sync::Mutex<HashMap<String, u64>>>,
    /// Unique to this handle (and its clones): part of every staging prefix and state file name
    /// it writes, so that two owners of a task never write the same name.
    writer: String,
    /// The kinds of the column names this process has claimed or read (`_featurelog/columns/`,
    /// see [`ColumnRegistry`]): a claim never changes, so each name costs one request per process.
    columns: Arc<std::sync::Mutex<HashMap<String, String>>>,
    /// The columns this process has seen in the dataset's `_common_metadata` files.
    common_metadata: Arc<common_metadata::Covered>,
}

#[derive(Debug, Default)]
struct Complete {
    /// Per task, the newest checkpoint epoch seen and its watermark: the next look starts
    /// there and probes the following epochs (commits number them consecutively), instead of
    /// listing the task's checkpoints.
    watermarks: HashMap<String, (u64, i64)>,
    /// Per directory above the hours: "" for the dataset's root, `model=.../` for each model
    /// with `partition-by-model`.
    parts: BTreeMap<String, Marks>,
}

/// What [`Dataset::mark_complete`] knows of the hours under one directory.
#[derive(Debug, Default)]
struct Marks {
    /// `dt=.../hr=...` with a marker (prefixed by the directory), in days not yet complete as
    /// a whole.
    hours: HashSet<String>,
    /// `dt=...` (prefixed) whose every hour has a marker.
    days: HashSet<String>,
    /// The first and the newest hour (epoch hours) with a directory seen by this process.
    span: Option<(i64, i64)>,
    /// Epoch hours `[from, to)` already checked for a marker of an hour without rows.
    gaps_checked: Option<(i64, i64)>,
}

/// Hours without rows checked for a marker at most per [`Dataset::mark_complete`] call (a
/// month), so that a first look at a long dataset with gaps spreads its requests over flushes.
const GAP_HOURS_PER_CALL: i64 = 24 * 31;

/// The primitive operations the commit protocol is built from, on each kind of storage. Names
/// are relative to the dataset root, with `/` separators.
trait Storage: std::fmt::Debug + Send + Sync {
    /// The full name of `relative`, for messages.
    fn describe(&self, relative: &str) -> PathBuf;
    /// Where a task's files of `epoch` are staged by this writer.
    fn staging(&self, task: &str, epoch: u64) -> Option<String>;
    /// Writes `bytes` durably; the name shows complete content or nothing.
    fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), SinkError>;
    /// Creates `relative` durably unless it exists; false when it does.
    fn create(&self, relative: &str, bytes: Vec<u8>) -> Result<bool, SinkError>;
    /// Reads a whole file.
    fn get(&self, relative: &str) -> Result<Vec<u8>, SinkError>;
    /// Whether a file exists.
    fn exists(&self, relative: &str) -> Result<bool, SinkError>;
    /// The sub-directory and file names directly under `dir` ("" for the root).
    fn children(&self, dir: &str) -> Result<(Vec<String>, Vec<String>), SinkError>;
    /// Gives a staged file its visible name. Ok(false) when the staged file is gone.
    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError>;
    /// Deletes what is left under a staging prefix whose files were all published.
    fn clean(&self, _staging: &str) -> Result<(), SinkError> {
        Ok(())
    }
    /// Deletes what any writer of `task` staged for epochs at or below `committed`, the newest
    /// committed epoch, whose files are all visible: they can never be committed (again).
    /// Never anything of a later epoch: a live writer may be about to commit it.
    fn discard(&self, task: &str, committed: u64) -> Result<(), SinkError>;
    /// Deletes a file; one that is already gone is no error.
    fn remove(&self, relative: &str) -> Result<(), SinkError>;
    /// Verifies that the storage keeps the guarantees the protocol depends on.
    fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
    /// Replaces `relative` with what `update` makes of its content, with no other writer's
    /// update in between (common_metadata.rs). The default is for storages of one writer.
    fn update(
        &self,
        relative: &str,
        update: &mut common_metadata::Update<'_>,
    ) -> Result<(), SinkError> {
        let current = if self.exists(relative)? {
            Some(self.get(relative)?)
        } else {
            None
        };
        match update(current.as_deref())? {
            Some(bytes) => self.put(relative, bytes),
            None => Ok(()),
        }
    }
    /// The last `len` bytes of a file (all of a shorter one).
    fn tail(&self, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
        let bytes = self.get(relative)?;
        Ok(bytes[bytes.len().saturating_sub(len)..].to_vec())
    }
}

fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync directory", dir))
}

/// Creates `dir` and its missing parents, fsyncing the parent of each directory created so that
/// the new entries survive a crash.
fn create_dirs(dir: &Path) -> Result<(), SinkError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && !d.exists() {
        missing.push(d);
        match d.parent() {
            Some(parent) => d = parent,
            None => break,
        }
    }
    fs::create_dir_all(dir).map_err(io("create", dir))?;
    for created in missing.iter().rev() {
        match created.parent() {
            // A relative path's first component: its parent is the working directory.
            Some(parent) if parent.as_os_str().is_empty() => sync_dir(Path::new("."))?,
            Some(parent) => sync_dir(parent)?,
            None => {}
        }
    }
    Ok(())
}

/// Where a writer stages a task's files of `epoch`, relative to the root.
fn staging_prefix(task: &str, epoch: u64, writer: &str) -> String {
    format!("{}/{}/{epoch:020}-{writer}", paths::STAGING, safe(task))
}

/// The epoch of a staging directory's name (`<epoch>-<writer>`).
fn staging_epoch(name: &str) -> Option<u64> {
    let (epoch, writer) = name.split_once('-')?;
    if writer.is_empty() {
        return None;
    }
    epoch.parse().ok()
}

/// The epoch of a legacy pending file of `task` (`.part-<task>-<epoch>-<n>.parquet.pending`).
fn legacy_pending_epoch(name: &str, task: &str) -> Option<u64> {
    let rest = name
        .strip_prefix(&format!(".part-{}-", safe(task)))?
        .strip_suffix(".parquet.pending")?;
    let (epoch, n) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(epoch) || !digits(n) {
        return None;
    }
    epoch.parse().ok()
}

/// The epoch of a state file's name: `<epoch>-<writer>.bin`, or `<epoch>.bin` as written
/// before state files were named per writer.
fn state_epoch(file: &str) -> Option<u64> {
    let stem = file.strip_suffix(".bin")?;
    let epoch = match stem.split_once('-') {
        Some((epoch, writer)) if !writer.is_empty() => epoch,
        Some(_) => return None,
        None => stem,
    };
    epoch.parse().ok()
}

fn state_dir(task: &str) -> String {
    format!("{}/{}", paths::STATE, safe(task))
}

fn new_writer() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn pending_name(visible: &str) -> String {
    match visible.rsplit_once('/') {
        Some((dir, file)) => format!("{dir}/.{file}.pending"),
        None => format!(".{visible}.pending"),
    }
}

/// The partition directory of a model's rows (`partition-by-model`): `model=<name>` with every
/// byte but ASCII letters, digits, `.`, `_` and `-` written `%XX`, which Spark, Hive, pyarrow
/// and Polars decode back into the name, so that one directory is one model on every store and
/// file system. An empty name is hive's null partition. A name whose escaped form would pass
/// what a local file system takes in one segment is named by its SHA-256 instead (the rows
/// still carry the name in `model_name`).
pub fn model_dir(name: &str) -> String {
    if name.is_empty() {
        return format!("{MODEL_PARTITION}=__HIVE_DEFAULT_PARTITION__");
    }
    format!("{MODEL_PARTITION}={}", path_segment(name, b'%'))
}

/// `name` as one path segment, the same on every store and file system: ASCII letters, digits,
/// `_` and `-` as they are (and `.` unless it is the `escape`), every other byte written
/// `<escape>XX` (hex); named by its SHA-256 instead when that would pass what a local file
/// system takes in one segment.
fn path_segment(name: &str, escape: u8) -> String {
    let mut segment = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && escape != b'.') {
            segment.push(char::from(b));
        } else {
            segment.push_str(&format!("{}{b:02X}", char::from(escape)));
        }
    }
    if segment.len() > 200 {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(name.as_bytes());
        segment = digest.iter().fold(String::from("sha256."), |mut s, b| {
            s.push_str(&format!("{b:02x}"));
            s
        });
    }
    segment
}

/// The hive partition column of `partition-by-model` (not `model_name`, which every file holds:
/// Spark refuses a partition column that is also a file column).
pub const MODEL_PARTITION: &str = "model";

/// Task names become file-name parts: anything but letters, digits, `-` and `_` becomes `_`.
pub(crate) fn safe(task: &str) -> String {
    task.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A local directory: fsync after every write, hard links for create-if-absent.
#[derive(Debug)]
struct Local {
    root: PathBuf,
    /// Unique to this process's dataset handle, as [`Remote::writer`]: its staging directories
    /// never collide with another owner's.
    writer: String,
}

impl Storage for Local {
    fn describe(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    fn update(
        &self,
        relative: &str,
        update: &mut common_metadata::Update<'_>,
    ) -> Result<(), SinkError> {
        common_metadata::update_local(self, relative, update)
    }

    fn tail(&self, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
        common_metadata::tail_local(self, relative, len)
    }

    fn staging(&self, task: &str, epoch: u64) -> Option<String> {
        Some(staging_prefix(task, epoch, &self.writer))
    }

    fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), SinkError> {
        let path = self.root.join(relative);
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        create_dirs(&dir)?;
        let mut f = File::create(&path).map_err(io("create", &path))?;
        f.write_all(&bytes).map_err(io("write", &path))?;
        f.sync_all().map_err(io("fsync", &path))?;
        sync_dir(&dir)
    }

    fn create(&self, relative: &str, bytes: Vec<u8>) -> Result<bool, SinkError> {
        let path = self.root.join(relative);
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        create_dirs(&dir)?;
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Per writer: two handles in one process never share a temporary file.
        let tmp = dir.join(format!(".{file}.{}.tmp", self.writer));
        let mut f = File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(&bytes).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("fsync", &tmp))?;
        // link() refuses an existing target: only one owner can create an epoch.
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => sync_dir(&dir).map(|()| true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io("link", &path)(e)),
        }
    }

    fn get(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        let path = self.root.join(relative);
        fs::read(&path).map_err(io("read", &path))
    }

    fn exists(&self, relative: &str) -> Result<bool, SinkError> {
        Ok(self.root.join(relative).exists())
    }

    fn children(&self, dir: &str) -> Result<(Vec<String>, Vec<String>), SinkError> {
        let path = self.root.join(dir);
        let (mut dirs, mut files) = (Vec::new(), Vec::new());
        let entries = match fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((dirs, files)),
            Err(e) => return Err(io("list", &path)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io("list", &path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                dirs.push(name);
            } else {
                files.push(name);
            }
        }
        Ok((dirs, files))
    }

    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError> {
        let (from, to) = (self.root.join(staged), self.root.join(visible));
        let dir = to.parent().unwrap_or(&self.root).to_owned();
        if !from.exists() {
            return Ok(false);
        }
        create_dirs(&dir)?;
        match fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io("rename", &from)(e)),
        }
        // The visible name is durable once its directory is. The staged name's directory is not
        // synced: should the staged name come back after a crash, the roll forward skips it (the
        // visible file exists) and the next recovery deletes it (its epoch is committed).
        sync_dir(&dir)?;
        Ok(true)
    }

    fn clean(&self, staging: &str) -> Result<(), SinkError> {
        let path = self.root.join(staging);
        match fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("delete", &path)(e)),
        }
    }

    fn remove(&self, relative: &str) -> Result<(), SinkError> {
        let path = self.root.join(relative);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("delete", &path)(e)),
        }
    }

    fn discard(&self, task: &str, committed: u64) -> Result<(), SinkError> {
        // Staging directories of epochs at or below the newest checkpoint: that epoch exists,
        // so they were either its writer's (and are all visible now) or a loser's. Later ones
        // may belong to a live writer about to commit, and are left to the recovery that
        // follows its commit.
        let dir = self.root.join(format!("{}/{}", paths::STAGING, safe(task)));
        match fs::read_dir(&dir) {
            Ok(entries) => {
                for entry in entries {
                    let entry = entry.map_err(io("list", &dir))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if staging_epoch(&name).is_some_and(|e| e <= committed) {
                        let path = entry.path();
                        match fs::remove_dir_all(&path) {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(io("delete", &path)(e)),
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("list", &dir)(e)),
        }
        // Pending files beside their visible names, as joiners staged before staging was per
        // writer: the same rule, by the epoch in their names.
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).map_err(io("list", &dir))? {
                let entry = entry.map_err(io("list", &dir))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    if name.starts_with("dt=") || name.starts_with("hr=") || name == "late" {
                        dirs.push(entry.path());
                    }
                    continue;
                }
                if legacy_pending_epoch(&name, task).is_some_and(|e| e <= committed) {
                    let path = entry.path();
                    match fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io("delete", &path)(e)),
                    }
                }
            }
        }
        Ok(())
    }
}

/// Creates `probe` (a name only this writer uses) twice; true when the second create is
/// refused, as the commit's fence needs.
///
/// The first create's answer may be lost after the store applied it (a connection dropped
/// during an outage): object_store then sends the conditional PUT again, and the store refuses
/// it because the object exists. So a refused first create is this writer's own when the
/// object holds its content; taken for a failure, it made the joiner stop at start-up saying
/// that the store ignores conditional PUTs. A store that refuses every create still fails.
fn refuses_overwrite(storage: &dyn Storage, probe: &str, content: &str) -> Result<bool, SinkError> {
    let created = storage.create(probe, content.as_bytes().to_vec())?
        || storage
            .get(probe)
            .is_ok_and(|bytes| bytes == content.as_bytes());
    let overwritten = storage.create(probe, content.as_bytes().to_vec())?;
    Ok(created && !overwritten)
}

/// Shuts its runtime down without blocking, so a dataset can be dropped inside async code.
#[derive(Debug)]
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// An object store (S3 and compatible). Every write is a single PUT, visible complete or not at
/// all; create-if-absent is a conditional PUT; the protocol's steps are synchronous like the
/// local ones, so the requests run on a small runtime of the dataset's own, which works from
/// plain threads and from the joiner's `block_in_place` sections alike.
#[derive(Debug)]
struct Remote {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket`, for messages.
    url: String,
    /// The dataset's key prefix inside the bucket, without slashes at either end.
    prefix: String,
    /// Unique to this process's dataset handle: its staging prefixes never collide with another
    /// owner's.
    writer: String,
    runtime: Runtime,
}

impl Remote {
    fn key(&self, relative: &str) -> ObjectPath {
        // Our names are taken as they are: a model partition's hive escapes (`%2F`) must reach
        // the store unchanged, as every hive reader decodes them once. object_store would
        // escape their `%` again. Our names never hold what a store refuses; anything else is
        // escaped by object_store, as the prefix from the config always was.
        let parts = relative
            .split('/')
            .filter(|part| !part.is_empty())
            .map(|part| PathPart::parse(part).unwrap_or_else(|_| PathPart::from(part)));
        parts.fold(ObjectPath::from(self.prefix.as_str()), ObjectPath::join)
    }

    fn location(&self, key: &ObjectPath) -> String {
        format!("{}/{key}", self.url)
    }

    /// Runs one request (or a few) to completion on the dataset's runtime.
    fn block<T: Send + 'static>(
        &self,
        what: &'static str,
        key: &ObjectPath,
        work: impl std::future::Future<Output = Result<T, object_store::Error>> + Send + 'static,
    ) -> Result<T, SinkError> {
        let stopped = || SinkError::Unsupported {
            url: self.url.clone(),
            problem: format!("{what} {key}: the dataset's I/O runtime stopped"),
        };
        let runtime = self.runtime.0.as_ref().ok_or_else(stopped)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .map_err(|_| stopped())?
            .map_err(|source| SinkError::Store {
                action: what,
                location: self.location(key),
                source,
            })
    }

    fn list_all(&self, dir: &str) -> Result<Vec<ObjectPath>, SinkError> {
        use futures::TryStreamExt as _;
        let key = self.key(dir);
        let store = self.store.clone();
        let prefix = key.clone();
        self.block("list", &key, async move {
            store
                .list(Some(&prefix))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await
        })
    }
}

impl Storage for Remote {
    /// Refuses a store that ignores conditional PUTs: the fence between two owners of a task
    /// depends on them (and some S3-compatible servers silently overwrite instead).
    fn check(&self) -> Result<(), SinkError> {
        let probe = format!("_featurelog/probe/{}", self.writer);
        let refused = refuses_overwrite(self, &probe, &self.writer)?;
        let key = self.key(&probe);
        let store = self.store.clone();
        let target = key.clone();
        self.block("delete", &key, async move { store.delete(&target).await })?;
        if refused {
            Ok(())
        } else {
            Err(SinkError::Unsupported {
                url: self.url.clone(),
                problem: "it does not refuse a PUT with If-None-Match: * over an existing \
                          object; the joiner's commit needs conditional PUTs (AWS S3, MinIO, \
                          Cloudflare R2 and Ceph RGW support them)"
                    .into(),
            })
        }
    }

    fn describe(&self, relative: &str) -> PathBuf {
        PathBuf::from(self.location(&self.key(relative)))
    }

    fn update(
        &self,
        relative: &str,
        update: &mut common_metadata::Update<'_>,
    ) -> Result<(), SinkError> {
        common_metadata::update_remote(self, relative, update)
    }

    fn tail(&self, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
        common_metadata::tail_remote(self, relative, len)
    }

    fn staging(&self, task: &str, epoch: u64) -> Option<String> {
        Some(staging_prefix(task, epoch, &self.writer))
    }

    fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("put", &key, async move {
            store.put(&target, PutPayload::from(bytes)).await.map(drop)
        })
    }

    fn create(&self, relative: &str, bytes: Vec<u8>) -> Result<bool, SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("create", &key, async move {
            let options = PutOptions::from(PutMode::Create);
            match store
                .put_opts(&target, PutPayload::from(bytes), options)
                .await
            {
                Ok(_) => Ok(true),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
                // A conditional PUT that loses a race on S3 may answer 409 (conflict) instead.
                Err(object_store::Error::Precondition { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn get(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("read", &key, async move {
            let bytes = store.get(&target).await?.bytes().await?;
            Ok(bytes.to_vec())
        })
    }

    fn exists(&self, relative: &str) -> Result<bool, SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("head", &key, async move {
            match store.head(&target).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn children(&self, dir: &str) -> Result<(Vec<String>, Vec<String>), SinkError> {
        let key = self.key(dir);
        let (store, target) = (self.store.clone(), key.clone());
        let listed = self.block("list", &key, async move {
            let prefix = (!target.as_ref().is_empty()).then_some(&target);
            store.list_with_delimiter(prefix).await
        })?;
        let name = |p: &ObjectPath| p.filename().unwrap_or_default().to_owned();
        Ok((
            listed.common_prefixes.iter().map(name).collect(),
            listed.objects.iter().map(|o| name(&o.location)).collect(),
        ))
    }

    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError> {
        let (from, to) = (self.key(staged), self.key(visible));
        let store = self.store.clone();
        let (f, t) = (from.clone(), to.clone());
        // A server-side copy: the visible object appears complete, or not at all.
        let copied = self.block("copy", &from, async move {
            match store.copy(&f, &t).await {
                Ok(()) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        if copied {
            let (store, f) = (self.store.clone(), from.clone());
            self.block("delete", &from, async move {
                match store.delete(&f).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e),
                }
            })?;
        }
        Ok(copied)
    }

    fn discard(&self, task: &str, committed: u64) -> Result<(), SinkError> {
        // Staged epochs at or below the newest checkpoint can never be committed (that epoch
        // exists); later ones may belong to a live writer about to commit, and are left to the
        // recovery that follows its commit or its death.
        let dir = format!("{}/{}", paths::STAGING, safe(task));
        let base = self.key(&dir);
        for key in self.list_all(&dir)? {
            let epoch = key
                .prefix_match(&base)
                .and_then(|mut parts| parts.next())
                .and_then(|part| staging_epoch(part.as_ref()));
            if epoch.is_some_and(|e| e <= committed) {
                self.delete_key(&key)?;
            }
        }
        Ok(())
    }

    fn remove(&self, relative: &str) -> Result<(), SinkError> {
        self.delete_key(&self.key(relative))
    }
}

impl Remote {
    fn delete_key(&self, key: &ObjectPath) -> Result<(), SinkError> {
        let (store, target) = (self.store.clone(), key.clone());
        self.block("delete", key, async move {
            match store.delete(&target).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }
}

/// A column name as a file name: bytes other than ASCII letters, digits, `_` and `-` are
/// written `.XX` (hex), so that any feature name is one path segment, the same on every store.
/// A name whose escaped form would pass what a local file system takes in one segment (255
/// bytes) is named by its SHA-256 instead, so that no feature name can fail a flush.
fn column_file(name: &str) -> String {
    format!("_featurelog/columns/{}", path_segment(name, b'.'))
}

/// The dataset's column names, one file each under `_featurelog/columns/`, created if absent:
/// the first writer of a name, in any process, decides its kind (docs/JOINER.md, "Column
/// names").
impl ColumnRegistry for Dataset {
    fn claim(&self, name: &str, kind: &str) -> Result<String, ArrowError> {
        let cached = self.columns.lock().ok().and_then(|c| c.get(name).cloned());
        if let Some(held) = cached {
            return Ok(held);
        }
        let external = |e: SinkError| ArrowError::ExternalError(Box::new(e));
        let file = column_file(name);
        let held = if self
            .storage
            .create(&file, kind.as_bytes().to_vec())
            .map_err(external)?
        {
            kind.to_owned()
        } else {
            let bytes = self.storage.get(&file).map_err(external)?;
            String::from_utf8(bytes).map_err(|_| {
                external(SinkError::Checkpoint {
                    path: self.storage.describe(&file),
                    problem: "not a column kind (text such as FP32 or BYTES:utf8)".into(),
                })
            })?
        };
        if let Ok(mut columns) = self.columns.lock() {
            columns.insert(name.to_owned(), held.clone());
        }
        Ok(held)
    }
}

impl Dataset {
    /// A dataset rooted at the local directory `root` (created if missing).
    pub fn open(root: impl Into<PathBuf>, options: SinkOptions) -> Result<Self, SinkError> {
        let root = root.into();
        fs::create_dir_all(root.join(paths::CHECKPOINTS)).map_err(|e| {
            // ENOTDIR names neither the file nor the setting: say which file is in the way.
            paths::file_in_the_way(&root).unwrap_or_else(|| io("create", &root)(e))
        })?;
        let writer = new_writer();
        Ok(Self {
            storage: Arc::new(Local {
                root: root.clone(),
                writer: writer.clone(),
            }),
            root,
            options,
            complete: Arc::default(),
            oldest: Arc::default(),
            writer,
            columns: Arc::default(),
            common_metadata: Arc::default(),
        })
    }

    /// A dataset under `prefix` of `store`; `url` (e.g. `s3://bucket`) names the store in
    /// messages. Makes no request: [`Dataset::check`] verifies the store.
    pub fn open_object_store(
        store: Arc<dyn ObjectStore>,
        url: &str,
        prefix: &str,
        options: SinkOptions,
    ) -> Result<Self, SinkError> {
        let url = url.trim_end_matches('/').to_owned();
        let prefix = prefix.trim_matches('/').to_owned();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("featurelog-dataset-io")
            .enable_all()
            .build()
            .map_err(io("start the I/O runtime of", Path::new(&url)))?;
        let root = if prefix.is_empty() {
            PathBuf::from(&url)
        } else {
            PathBuf::from(format!("{url}/{prefix}"))
        };
        let writer = new_writer();
        Ok(Self {
            storage: Arc::new(Remote {
                store,
                url,
                prefix,
                writer: writer.clone(),
                runtime: Runtime(Some(runtime)),
            }),
            root,
            options,
            complete: Arc::default(),
            oldest: Arc::default(),
            writer,
            columns: Arc::default(),
            common_metadata: Arc::default(),
        })
    }

    /// The dataset `[output]` names: a local directory or an `s3://` prefix.
    pub fn from_config(output: &OutputConfig) -> Result<Self, SinkError> {
        let options = SinkOptions {
            row_group_rows: output.row_group_rows,
            zstd_level: output.zstd_level,
            max_file_rows: output.max_file_rows,
            checkpoints_kept: output.checkpoints_kept,
            partition_by_model: output.partition_by_model,
        };
        let unsupported = |problem: String| SinkError::Unsupported {
            url: output.path.display().to_string(),
            problem,
        };
        // The one resolution of output.path, which `featurelog join --check-config` prints.
        match paths::DatasetPaths::resolve(output)?.location().clone() {
            OutputLocation::Local(path) => Self::open(path, options),
            OutputLocation::S3 { bucket, prefix } => {
                let store = output.build_s3(&bucket).map_err(unsupported)?;
                Self::open_object_store(store, &format!("s3://{bucket}"), &prefix, options)
            }
        }
    }

    /// Verifies, with a few requests, that an object store refuses to overwrite on a
    /// conditional PUT, which the commit's fence depends on. Nothing to check locally.
    pub fn check(&self) -> Result<(), SinkError> {
        self.storage.check()
    }

    /// The root directory, or the store URL and prefix.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn checkpoint_dir(&self, task: &str) -> String {
        format!("{}/{}", paths::CHECKPOINTS, safe(task))
    }

    fn checkpoint_name(&self, task: &str, epoch: u64) -> String {
        format!("{}/{epoch:020}.json", self.checkpoint_dir(task))
    }

    fn read_checkpoint(&self, relative: &str) -> Result<Checkpoint, SinkError> {
        let text = self.storage.get(relative)?;
        serde_json::from_slice(&text).map_err(|e| SinkError::Checkpoint {
            path: self.storage.describe(relative),
            problem: e.to_string(),
        })
    }

    /// The watermark of `task`'s newest checkpoint, for completeness. Starts from the newest
    /// epoch this process has seen and probes the next ones; an answer that is behind (a
    /// checkpoint committed in between) only delays a marker, which is why recovery does not
    /// use this but lists.
    fn checkpoint_watermark(
        &self,
        known: &mut Complete,
        task: &str,
    ) -> Result<Option<i64>, SinkError> {
        let Some(&(seen, watermark)) = known.watermarks.get(task) else {
            let newest = self.latest_checkpoint(task)?;
            if let Some(cp) = &newest {
                // A marker vouches for every row of its hour: the files of the commit whose
                // watermark it relies on must be visible first, even if their writer died
                // between its commit and its roll forward.
                self.roll_forward(cp)?;
                known
                    .watermarks
                    .insert(task.to_owned(), (cp.epoch, cp.watermark_us));
            }
            return Ok(newest.map(|cp| cp.watermark_us));
        };
        let mut epoch = seen;
        while self
            .storage
            .exists(&self.checkpoint_name(task, epoch + 1))?
        {
            epoch += 1;
        }
        if epoch == seen {
            if self.storage.exists(&self.checkpoint_name(task, seen))? {
                return Ok(Some(watermark));
            }
            // Pruned: the task moved on by more than the checkpoints kept since this process
            // last looked, so the epochs after it are gone too. Find the newest again.
            known.watermarks.remove(task);
            return self.checkpoint_watermark(known, task);
        }
        let cp = self.read_checkpoint(&self.checkpoint_name(task, epoch))?;
        // Earlier epochs were rolled forward by their writer before it committed the next.
        self.roll_forward(&cp)?;
        known
            .watermarks
            .insert(task.to_owned(), (epoch, cp.watermark_us));
        Ok(Some(cp.watermark_us))
    }

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
                self.storage
                    .put(&staged_name(staging.as_deref(), &visible), bytes)?;
                staged.files.push(visible);
            }
        }
        Ok(staged)
    }

    /// The partition count of `topic` (the feature-log topic) this dataset is written with,
    /// recorded by the first joiner that ran on it: `partitions` if none was. A dataset is tied
    /// to that count (a task's checkpoint holds offsets of its partitions, and a request's
    /// partition moves when the count changes), so a joiner started after the topic gained
    /// partitions must know, even where nothing else differs (co-partitioned events grown
    /// alike, or a repartition topic deleted).
    pub fn recorded_partition_count(&self, topic: &str, partitions: i32) -> Result<i32, SinkError> {
        let name = format!("_featurelog/topics/{}.json", safe(topic));
        let record = serde_json::json!({ "topic": topic, "partitions": partitions });
        if self
            .storage
            .create(&name, record.to_string().into_bytes())?
        {
            return Ok(partitions);
        }
        let text = self.storage.get(&name)?;
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("partitions")?.as_i64())
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(&name),
                problem: "not a partition count record (`{\"partitions\": N}`)".into(),
            })
    }

    /// Whether this dataset's rows are partitioned by model (`output.partition-by-model`), as
    /// recorded by the first joiner that ran on it: the configured setting if none was. A
    /// dataset written before the setting existed, with checkpoints and no record, was not.
    /// The caller refuses to write a dataset in the other layout: its markers, its late area
    /// and every reader's path would be split between two.
    pub fn recorded_partition_by_model(&self) -> Result<bool, SinkError> {
        let name = "_featurelog/layout.json";
        let record = |by_model: bool| {
            let columns: &[&str] = if by_model {
                &[MODEL_PARTITION, "dt", "hr"]
            } else {
                &["dt", "hr"]
            };
            serde_json::json!({ "partition-columns": columns }).to_string()
        };
        if !self.storage.exists(name)? {
            let written = !self.storage.children(paths::CHECKPOINTS)?.0.is_empty();
            let by_model = self.options.partition_by_model && !written;
            if self.storage.create(name, record(by_model).into_bytes())? {
                return Ok(by_model);
            }
        }
        let text = self.storage.get(name)?;
        serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                let columns = v.get("partition-columns")?.as_array()?;
                Some(columns.first()?.as_str()? == MODEL_PARTITION)
            })
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(name),
                problem: "not a layout record (`{\"partition-columns\": [...]}`)".into(),
            })
    }

    /// The events topics this dataset was written with (`input.events-topic`), recorded at the
    /// first start, and again when `topics` extends them (appended topics): the list as it
    /// was before this start. The caller refuses a list that is not the recorded one followed
    /// by more, since the checkpoints number the watermark's sources by place in the list.
    pub fn recorded_events_topics(&self, topics: &[String]) -> Result<Vec<String>, SinkError> {
        let name = "_featurelog/events-topics.json";
        let record = |topics: &[String]| serde_json::json!({ "topics": topics }).to_string();
        if self.storage.create(name, record(topics).into_bytes())? {
            return Ok(topics.to_vec());
        }
        let text = self.storage.get(name)?;
        let recorded: Vec<String> = serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| serde_json::from_value(v.get("topics")?.clone()).ok())
            .ok_or_else(|| SinkError::Checkpoint {
                path: self.storage.describe(name),
                problem: "not an events topics record (`{\"topics\": [...]}`)".into(),
            })?;
        if topics.len() > recorded.len() && topics.starts_with(&recorded) {
            self.storage.put(name, record(topics).into_bytes())?;
        }
        Ok(recorded)
    }

    /// The newest checkpoint of a task, read only (no roll forward, no clean-up).
    pub fn latest_checkpoint(&self, task: &str) -> Result<Option<Checkpoint>, SinkError> {
        let epochs = self.checkpoint_epochs(task)?;
        let (Some(&oldest), Some(&newest)) = (epochs.first(), epochs.last()) else {
            return Ok(None);
        };
        if let Ok(mut known) = self.oldest.lock() {
            known.insert(task.to_owned(), oldest);
        }
        self.read_checkpoint(&self.checkpoint_name(task, newest))
            .map(Some)
    }

    /// The epochs of a task's checkpoints, in order (one listing).
    fn checkpoint_epochs(&self, task: &str) -> Result<Vec<u64>, SinkError> {
        let (_, files) = self.storage.children(&self.checkpoint_dir(task))?;
        let mut epochs: Vec<u64> = files
            .iter()
            .filter_map(|name| name.strip_suffix(".json")?.parse().ok())
            .collect();
        epochs.sort_unstable();
        Ok(epochs)
    }

    /// Deletes a task's checkpoints older than the newest `checkpoints-kept` after the commit
    /// of `newest`, oldest first and stopping at the first failure, so that whenever an epoch
    /// is missing every epoch before it is missing too: a zombie whose checkpoint was pruned
    /// then finds no predecessor at its next commit ([`Dataset::commit`]) instead of a free
    /// epoch. Deletes at most a hundred per call. Returns how many it deleted.
    pub fn prune_checkpoints(&self, task: &str, newest: u64) -> Result<u64, SinkError> {
        let keep = self.options.checkpoints_kept.max(2);
        // Epochs below `below` go; `newest - keep + 1 ..= newest` stay.
        let below = (newest + 1).saturating_sub(keep);
        let known = self.oldest.lock().ok().and_then(|m| m.get(task).copied());
        let from = match known {
            Some(epoch) => epoch,
            None => self
                .checkpoint_epochs(task)?
                .first()
                .copied()
                .unwrap_or(below),
        };
        let to = below.min(from.saturating_add(PRUNE_PER_CALL));
        let mut epoch = from;
        let result = loop {
            if epoch >= to {
                break Ok(epoch - from);
            }
            if let Err(e) = self.storage.remove(&self.checkpoint_name(task, epoch)) {
                break Err(e);
            }
            epoch += 1;
        };
        if let Ok(mut oldest) = self.oldest.lock() {
            oldest.insert(task.to_owned(), epoch.max(from));
        }
        result
    }

    /// Marks complete every hour that ended at least `lag_us` before the dataset watermark,
    /// the minimum of the newest checkpointed watermark of every one of `tasks`. Returns the
    /// hours marked now (`dt=.../hr=...`). Marks nothing while a task has no checkpoint.
    ///
    /// An hour without rows between the dataset's first and newest hours gets a directory
    /// holding only its marker: a scheduler that waits for each hour's `_SUCCESS` must not
    /// stall on a quiet night. Hours after the newest one with rows wait until a later hour
    /// has rows, so that a watermark pushed far ahead by a clock mistake never writes markers
    /// for years of hours that have no data.
    pub fn mark_complete(&self, tasks: &[String], lag_us: i64) -> Result<Vec<String>, SinkError> {
        let mut known = self
            .complete
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut watermark = i64::MAX;
        for task in tasks {
            match self.checkpoint_watermark(&mut known, task)? {
                Some(w) => watermark = watermark.min(w),
                None => return Ok(Vec::new()),
            }
        }
        if tasks.is_empty() || watermark == i64::MIN {
            return Ok(Vec::new());
        }
        let complete_before = watermark.saturating_sub(lag_us);
        let mut marked = Vec::new();
        let dirs = if self.options.partition_by_model {
            let prefix = format!("{MODEL_PARTITION}=");
            let mut dirs: Vec<String> = (self.storage.children("")?.0.into_iter())
                .filter(|d| d.starts_with(&prefix))
                .map(|d| format!("{d}/"))
                .collect();
            // Models listed before whose listing failed to show now still get their gaps.
            dirs.extend(known.parts.keys().cloned());
            dirs.sort();
            dirs.dedup();
            dirs
        } else {
            vec![String::new()]
        };
        // Per directory, the hours with a directory in this listing, in epoch hours.
        let mut listed = HashMap::new();
        for dir in dirs {
            let marks = known.parts.entry(dir.clone()).or_default();
            let hours = self.mark_listed(&dir, marks, complete_before, &mut marked)?;
            listed.insert(dir, hours);
        }
        // A model's hour without rows is complete once the dataset has rows in a later hour:
        // its scheduler must not wait for traffic to the model itself to come back.
        let newest = (known.parts.values())
            .filter_map(|m| m.span.map(|(_, newest)| newest))
            .max();
        let none = HashSet::new();
        for (dir, marks) in &mut known.parts {
            let listed = listed.get(dir).unwrap_or(&none);
            self.mark_gaps(dir, marks, listed, complete_before, newest, &mut marked)?;
        }
        Ok(marked)
    }

    /// Marks the complete hours listed under `dir` (see [`Dataset::mark_complete`]); returns
    /// the hours listed, in epoch hours.
    fn mark_listed(
        &self,
        dir: &str,
        known: &mut Marks,
        complete_before: i64,
        marked: &mut Vec<String>,
    ) -> Result<HashSet<i64>, SinkError> {
        let mut listed = HashSet::new();
        for day in self.storage.children(dir.trim_end_matches('/'))?.0 {
            let day_name = format!("{dir}{day}");
            if known.days.contains(&day_name) {
                continue;
            }
            let Some(date) = day.strip_prefix("dt=") else {
                continue;
            };
            // Rows of a complete hour go to late/, so a day that has ended gets no new hours.
            let mut whole_day = hour_start_us(date, "00")
                .is_some_and(|start| start.saturating_add(24 * HOUR_US) <= complete_before);
            for hour_name in self.storage.children(&day_name)?.0 {
                let hour = format!("{day_name}/{hour_name}");
                if known.hours.contains(&hour) {
                    continue;
                }
                let Some(start) = hour_name
                    .strip_prefix("hr=")
                    .and_then(|hh| hour_start_us(date, hh))
                else {
                    continue;
                };
                let epoch_hour = start.div_euclid(HOUR_US);
                listed.insert(epoch_hour);
                known.span = Some(match known.span {
                    Some((first, newest)) => (first.min(epoch_hour), newest.max(epoch_hour)),
                    None => (epoch_hour, epoch_hour),
                });
                if start.saturating_add(HOUR_US) > complete_before {
                    whole_day = false;
                    continue;
                }
                let marker = format!("{hour}/{SUCCESS}");
                if !self.storage.exists(&marker)? {
                    self.storage.put(&marker, Vec::new())?;
                    marked.push(hour.clone());
                }
                known.hours.insert(hour);
            }
            if whole_day {
                let prefix = format!("{day_name}/");
                known.hours.retain(|h| !h.starts_with(&prefix));
                known.days.insert(day_name);
            }
        }
        Ok(listed)
    }

    /// Marks the complete hours without a directory under `dir`, from its first hour with rows
    /// to `newest`, the dataset's newest hour with rows (see [`Dataset::mark_complete`]);
    /// `listed` holds the hours with one in this call's listing.
    fn mark_gaps(
        &self,
        dir: &str,
        known: &mut Marks,
        listed: &HashSet<i64>,
        complete_before: i64,
        newest: Option<i64>,
        marked: &mut Vec<String>,
    ) -> Result<(), SinkError> {
        let (Some((first, _)), Some(newest)) = (known.span, newest) else {
            return Ok(());
        };
        // Hours before `end` are complete and not after the newest hour with rows.
        let end = complete_before.div_euclid(HOUR_US).min(newest);
        if end <= first {
            return Ok(());
        }
        // `[lo, hi)` were checked. The span only grows and `end` only moves forward (the
        // watermark never moves back), so what is left is below `lo` (rows were staged for an
        // hour earlier than any seen so far) and from `hi` on.
        let (lo, hi) = known.gaps_checked.unwrap_or((first, first));
        let below = first.max(lo.saturating_sub(GAP_HOURS_PER_CALL))..lo;
        let above = hi..end.min(hi.saturating_add(GAP_HOURS_PER_CALL));
        let checked = (below.start.min(lo), above.end.max(hi));
        for hour in below.chain(above) {
            let (dt, hr) = hour_partition(hour.saturating_mul(HOUR_US));
            let name = format!("{dir}dt={dt}/hr={hr}");
            if listed.contains(&hour) || known.hours.contains(&name) {
                continue;
            }
            // Not listed now, but its day may have been seen whole before this hour was in
            // the span; or an earlier call marked it and it is not listed again.
            let marker = format!("{name}/{SUCCESS}");
            if !self.storage.exists(&marker)? {
                self.storage.put(&marker, Vec::new())?;
                marked.push(name);
            }
        }
        known.gaps_checked = Some(checked);
        Ok(())
    }

    fn encode(&self, visible: &str, rows: &[Row]) -> Result<Vec<u8>, SinkError> {
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
        // Before the file can be committed, so that `_common_metadata` never lacks its columns.
        self.common_metadata
            .cover(&*self.storage, visible, batch.schema_ref())?;
        let level = ZstdLevel::try_new(self.options.zstd_level).map_err(|e| encode(&e))?;
        // Ids are nearly unique per row: a dictionary of them saves nothing that zstd does not,
        // and costs a hash per id. Feature columns keep theirs (categorical values coded as
        // numbers shrink to a few bits each).
        let props = WriterProperties::builder()
            .set_column_dictionary_enabled(ColumnPath::from("request_id"), false)
            .set_column_dictionary_enabled(ColumnPath::from("item_id"), false)
            .set_compression(Compression::ZSTD(level))
            .set_max_row_group_row_count(Some(self.options.row_group_rows.max(1)))
            .build();
        let mut writer = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(props))
            .map_err(|e| encode(&e))?;
        writer.write(&batch).map_err(|e| encode(&e))?;
        writer.into_inner().map_err(|e| encode(&e))
    }

    /// The name of this writer's state file of `task`'s `epoch`. Per writer, as staging is: a
    /// zombie and the owner that fenced it both write a state file of the same epoch before
    /// either commits, and the loser's must never replace the one the winner's checkpoint
    /// names (nor one that later snapshots refer to as a segment).
    pub fn state_name(&self, task: &str, epoch: u64) -> String {
        format!("{}/{epoch:020}-{}.bin", state_dir(task), self.writer)
    }

    /// The name state files had before they were named per writer: the segments that snapshots
    /// of formats up to 3 refer to by epoch only.
    pub fn legacy_state_name(task: &str, epoch: u64) -> String {
        format!("{}/{epoch:020}.bin", state_dir(task))
    }

    /// Writes this writer's state snapshot of `task` for `epoch` (under
    /// [`Dataset::state_name`]); returns its name for the checkpoint.
    pub fn stage_state(
        &self,
        task: &str,
        epoch: u64,
        snapshot: Vec<u8>,
    ) -> Result<String, SinkError> {
        let relative = self.state_name(task, epoch);
        self.storage.put(&relative, snapshot)?;
        Ok(relative)
    }

    /// After the commit of `committed`, deletes a task's state files of epochs at or below it
    /// that are not in `keep` (names as in [`Checkpoint::state`]): what neither that checkpoint
    /// nor the one before it reads (a process still restoring from that one finds its files).
    /// That includes the files of writers that lost an epoch to another. Files of later epochs
    /// are never touched: they may belong to a commit not made yet.
    pub fn prune_state(
        &self,
        task: &str,
        keep: &[String],
        committed: u64,
    ) -> Result<usize, SinkError> {
        let dir = state_dir(task);
        let (_, files) = self.storage.children(&dir)?;
        let mut removed = 0;
        for file in files {
            let Some(epoch) = state_epoch(&file) else {
                continue;
            };
            let name = format!("{dir}/{file}");
            if epoch <= committed && !keep.contains(&name) {
                self.storage.remove(&name)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The commit point: creates the checkpoint of `checkpoint.epoch`, or fails with
    /// [`SinkError::Fenced`] if that epoch exists or if the one before it does not (pruned
    /// after another owner moved far ahead: see [`Dataset::prune_checkpoints`]).
    pub fn commit(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        let relative = self.checkpoint_name(&checkpoint.task, checkpoint.epoch);
        if checkpoint.epoch > 1
            && !self
                .storage
                .exists(&self.checkpoint_name(&checkpoint.task, checkpoint.epoch - 1))?
        {
            return Err(SinkError::Fenced {
                task: checkpoint.task.clone(),
                epoch: checkpoint.epoch,
            });
        }
        let json = serde_json::to_vec_pretty(checkpoint).map_err(|e| SinkError::Encode {
            path: self.storage.describe(&relative),
            message: e.to_string(),
        })?;
        if self.storage.create(&relative, json)? {
            Ok(())
        } else {
            Err(SinkError::Fenced {
                task: checkpoint.task.clone(),
                epoch: checkpoint.epoch,
            })
        }
    }

    /// Whether the checkpoint of `checkpoint.epoch` is `checkpoint` itself, as this writer
    /// wrote it: asked after [`Dataset::commit`] found the epoch taken.
    ///
    /// On an object store, a conditional PUT whose answer was lost (the connection dropped
    /// after the store applied it, as in an outage) is sent again by object_store and refused,
    /// since the object now exists: the commit happened, yet it reports `Fenced`. The
    /// checkpoint names this writer's staging prefix, which no other writer ever uses, so a
    /// checkpoint with those very bytes can only be this commit. False when it cannot be read.
    pub fn is_own_commit(&self, checkpoint: &Checkpoint) -> bool {
        let own_staging = checkpoint.staging.is_some()
            && checkpoint.staging == self.storage.staging(&checkpoint.task, checkpoint.epoch);
        let relative = self.checkpoint_name(&checkpoint.task, checkpoint.epoch);
        own_staging
            && serde_json::to_vec_pretty(checkpoint)
                .is_ok_and(|json| self.storage.get(&relative).is_ok_and(|bytes| bytes == json))
    }

    /// Makes a committed checkpoint's files visible (idempotent), then deletes what is left of
    /// its staging.
    pub fn roll_forward(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        for visible in &checkpoint.files {
            if self.storage.exists(visible)? {
                continue;
            }
            let staged = staged_name(checkpoint.staging.as_deref(), visible);
            // Gone from staging yet not visible: unless a concurrent roll forward of the same
            // checkpoint just published it, the commit's files were lost.
            if !self.storage.publish(&staged, visible)? && !self.storage.exists(visible)? {
                return Err(SinkError::Checkpoint {
                    path: self
                        .storage
                        .describe(&self.checkpoint_dir(&checkpoint.task)),
                    problem: format!("committed file {visible} is neither visible nor staged"),
                });
            }
        }
        if let Some(staging) = &checkpoint.staging {
            // Only empty directories are left locally: failing to delete them is no reason to
            // fail a commit, and the next recovery deletes them (their epoch is committed).
            if let Err(err) = self.storage.clean(staging) {
                tracing::warn!(%err, "staging left after the roll forward not deleted");
            }
        }
        Ok(())
    }

    /// The task's newest checkpoint, after finishing its roll forward and deleting every file
    /// the task staged and never committed. `None` when the task never committed.
    pub fn recover(&self, task: &str) -> Result<Option<Checkpoint>, SinkError> {
        let checkpoint = self.latest_checkpoint(task)?;
        if let Some(cp) = &checkpoint {
            self.roll_forward(cp)?;
        }
        let committed = checkpoint.as_ref().map_or(0, |c| c.epoch);
        self.storage.discard(task, committed)?;
        Ok(checkpoint)
    }

    /// Reads a staged state snapshot.
    pub fn read_state(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        self.storage.get(relative)
    }
}

/// Where a file to be visible as `visible` is staged: under the writer's staging prefix, with
/// a suffix of its own, so that a `**/*.parquet` glob over the dataset (as DuckDB and Polars
/// users write) never reads a file that is not committed.
fn staged_name(staging: Option<&str>, visible: &str) -> String {
    match staging {
        Some(prefix) => format!("{prefix}/{visible}.staged"),
        None => pending_name(visible),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{JoinConfig, JoinState, Labels};
    use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::Arc;

    fn rows(hour_offset: i64) -> Vec<Row> {
        rows_of("r1", hour_offset)
    }

    /// Two rows of `request`, an hour apart from `hour_offset` on.
    fn rows_of(request: &str, hour_offset: i64) -> Vec<Row> {
        model_rows("m", request, hour_offset)
    }

    fn model_rows(model: &str, request: &str, hour_offset: i64) -> Vec<Row> {
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

    fn visible_files(root: &Path) -> Vec<String> {
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

    fn checkpoint(task: &str, epoch: u64, files: Vec<String>) -> Checkpoint {
        Checkpoint {
            task: task.into(),
            epoch,
            offsets: [("features".to_string(), 10), ("events".to_string(), 7)].into(),
            watermark_us: 5,
            files,
            state: None,
            staging: None,
        }
    }

    /// The checkpoint of what `staged` staged.
    fn committed(task: &str, epoch: u64, staged: &Staged) -> Checkpoint {
        Checkpoint {
            staging: staged.staging.clone(),
            ..checkpoint(task, epoch, staged.files.clone())
        }
    }

    /// A dataset on an in-memory object store: the object-store protocol without a server
    /// (tests/joiner_s3.rs runs it against a real S3-compatible one).
    fn in_memory() -> (Arc<object_store::memory::InMemory>, Dataset) {
        let store = Arc::new(object_store::memory::InMemory::new());
        let options = SinkOptions {
            max_file_rows: Some(1),
            ..SinkOptions::default()
        };
        let ds = Dataset::open_object_store(store.clone(), "memory://b", "ds/", options).unwrap();
        (store, ds)
    }

    fn keys(store: &object_store::memory::InMemory) -> Vec<String> {
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

    fn visible(keys: &[String]) -> Vec<String> {
        keys.iter()
            .filter_map(|k| k.strip_prefix("ds/"))
            .filter(|k| !k.starts_with('_') && !k.split('/').any(|p| p.starts_with('.')))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn on_an_object_store_files_appear_only_after_the_commit_and_split_by_rows() {
        let (store, ds) = in_memory();
        ds.check().unwrap();
        let staged = ds
            .stage("t-0", 1, &[rows(18), rows(18)].concat(), i64::MIN)
            .unwrap();
        assert_eq!(
            staged.files.len(),
            4,
            "two rows in each of two hours, one row per file"
        );
        assert!(visible(&keys(&store)).is_empty(), "{:?}", keys(&store));
        // Staged, they are there, and no `*.parquet` glob matches them.
        let staged_keys: Vec<String> = keys(&store)
            .into_iter()
            .filter(|k| k.contains("_featurelog/staging/"))
            .collect();
        assert_eq!(staged_keys.len(), 4, "{staged_keys:?}");
        assert!(
            staged_keys.iter().all(|k| !k.ends_with(".parquet")),
            "{staged_keys:?}"
        );
        let mut cp = checkpoint("t-0", 1, staged.files.clone());
        cp.staging = staged.staging.clone();
        ds.commit(&cp).unwrap();
        assert!(
            visible(&keys(&store)).is_empty(),
            "still staged until the roll forward"
        );
        ds.roll_forward(&cp).unwrap();
        let mut expected = staged.files.clone();
        expected.sort();
        assert_eq!(visible(&keys(&store)), expected);
        assert!(
            !keys(&store)
                .iter()
                .any(|k| k.contains("_featurelog/staging/")),
            "staged objects are deleted once copied"
        );
        let err = ds.commit(&cp).unwrap_err();
        assert!(matches!(err, SinkError::Fenced { epoch: 1, .. }), "{err}");
        assert_eq!(ds.latest_checkpoint("t-0").unwrap(), Some(cp));
    }

    #[test]
    fn on_an_object_store_recovery_finishes_the_roll_forward_and_keeps_a_live_writers_staging() {
        let (store, ds) = in_memory();
        let staged = ds.stage("t-0", 1, &rows(1), i64::MIN).unwrap();
        let mut cp = checkpoint("t-0", 1, staged.files.clone());
        cp.staging = staged.staging.clone();
        ds.commit(&cp).unwrap();
        // Killed before the copies. Another process recovers the task.
        let other =
            Dataset::open_object_store(store.clone(), "memory://b", "ds", SinkOptions::default())
                .unwrap();
        // A stale writer staged epoch 1 too (it lost the commit) and epoch 2 (it may still commit).
        let stale1 = other.stage("t-0", 1, &rows(3), i64::MIN).unwrap();
        let later = other.stage("t-0", 2, &rows(5), i64::MIN).unwrap();
        assert_eq!(other.recover("t-0").unwrap(), Some(cp.clone()));
        let mut expected = staged.files.clone();
        expected.sort();
        assert_eq!(visible(&keys(&store)), expected, "exactly epoch 1's files");
        let all = keys(&store);
        let under = |prefix: &Option<String>| {
            let p = format!("ds/{}/", prefix.as_deref().unwrap());
            all.iter().filter(|k| k.starts_with(&p)).count()
        };
        assert_eq!(
            under(&stale1.staging),
            0,
            "a lost epoch's staging is deleted"
        );
        assert_eq!(
            under(&later.staging),
            later.files.len(),
            "a later epoch may still be committed"
        );
        // Recovering again changes nothing.
        assert_eq!(ds.recover("t-0").unwrap(), Some(cp));
        assert_eq!(visible(&keys(&store)), expected);
    }

    #[test]
    fn committed_rows_become_visible_parquet_by_hour() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let staged = ds.stage("t-0", 1, &rows(18), i64::MIN).unwrap();
        let files = staged.files.clone();
        assert_eq!(files.len(), 2, "two impression hours, two files");
        assert!(
            visible_files(dir.path()).is_empty(),
            "nothing visible before the commit"
        );
        let cp = committed("t-0", 1, &staged);
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        assert_eq!(visible_files(dir.path()), files);
        assert!(
            !dir.path().join(staged.staging.as_deref().unwrap()).exists(),
            "nothing is left of the staging"
        );
        assert!(files[0].starts_with("dt=1970-01-01/hr=18/"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(
            File::open(dir.path().join(&files[1])).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(batches[0].num_rows(), 1);
        assert!(batches[0].schema().field_with_name("x").is_ok());
    }

    fn feature(name: &str, datatype: DataType, row_shape: Vec<i64>, values: Values) -> Feature {
        Feature {
            name: name.into(),
            datatype: datatype as i32,
            row_shape,
            values: Some(values),
            per_request: false,
        }
    }

    /// `n` impressed rows of `request`, whose log holds `features`, all in hour `hour`.
    fn rows_with(request: &str, hour: i64, n: usize, features: Vec<Feature>) -> Vec<Row> {
        let ids: Vec<String> = (0..n).map(|i| format!("{request}-{i}")).collect();
        let log = Arc::new(crate::log::ServedLog::from(FeatureLog {
            request_id: request.into(),
            model_name: "m".into(),
            served_at: Some(prost_types::Timestamp {
                seconds: hour * 3600,
                nanos: 0,
            }),
            row_count: n as u32,
            candidate_ids: ids.clone(),
            features,
            ..Default::default()
        }));
        ids.into_iter()
            .enumerate()
            .map(|(i, item_id)| Row {
                request_id: request.into(),
                item_id,
                features: log.clone(),
                row: i,
                impression_time_us: Some(hour * HOUR_US + i as i64 * 1_000_000),
                labels: Labels::default(),
            })
            .collect()
    }

    /// Stages `rows` as `task`'s `epoch`, commits and rolls them forward: the visible files.
    fn write_epoch(ds: &Dataset, task: &str, epoch: u64, rows: &[Row]) -> Vec<String> {
        let staged = ds.stage(task, epoch, rows, i64::MIN).unwrap();
        let cp = committed(task, epoch, &staged);
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        staged.files
    }

    #[test]
    fn written_files_are_zstd_in_bounded_row_groups_and_hold_each_feature_s_real_type() {
        use arrow_schema::DataType as ArrowType;
        let dir = tempfile::tempdir().unwrap();
        let options = SinkOptions {
            row_group_rows: 4,
            ..SinkOptions::default()
        };
        let ds = Dataset::open(dir.path(), options).unwrap();
        let n = 10;
        let features = vec![
            feature(
                "count",
                DataType::Int64,
                vec![],
                Values {
                    int64_values: (0..n as i64).map(|i| i * 100).collect(),
                    ..Default::default()
                },
            ),
            feature(
                "score",
                DataType::Fp32,
                vec![],
                Values {
                    fp32_values: (0..n).map(|i| i as f32 / 4.0).collect(),
                    ..Default::default()
                },
            ),
            feature(
                "locale",
                DataType::Bytes,
                vec![],
                Values {
                    bytes_values: (0..n)
                        .map(|i| format!("l{i}").into_bytes().into())
                        .collect(),
                    ..Default::default()
                },
            ),
            feature(
                "blob",
                DataType::Bytes,
                vec![],
                Values {
                    bytes_values: (0..n).map(|i| vec![0xff, i as u8].into()).collect(),
                    ..Default::default()
                },
            ),
            feature(
                "emb",
                DataType::Fp32,
                vec![2],
                Values {
                    fp32_values: (0..2 * n).map(|i| i as f32).collect(),
                    ..Default::default()
                },
            ),
        ];
        let files = write_epoch(&ds, "t-0", 1, &rows_with("r1", 5, n, features));
        assert_eq!(files.len(), 1, "one hour, one file");
        let builder = ParquetRecordBatchReaderBuilder::try_new(
            File::open(dir.path().join(&files[0])).unwrap(),
        )
        .unwrap();
        let metadata = builder.metadata().clone();
        let groups: Vec<i64> = metadata.row_groups().iter().map(|g| g.num_rows()).collect();
        assert_eq!(groups, [4, 4, 2], "row groups of at most row-group-rows");
        for group in metadata.row_groups() {
            for chunk in group.columns() {
                assert!(
                    matches!(chunk.compression(), Compression::ZSTD(_)),
                    "{:?}: {:?}",
                    chunk.column_path(),
                    chunk.compression()
                );
            }
        }
        // The types a reader takes from the file: Arrow readers use the schema the writer
        // embeds in it...
        let schema = builder.schema().clone();
        let ty = |schema: &arrow_schema::Schema, name: &str| {
            schema.field_with_name(name).unwrap().data_type().clone()
        };
        assert_eq!(ty(&schema, "count"), ArrowType::Int64);
        assert_eq!(ty(&schema, "score"), ArrowType::Float32);
        assert_eq!(ty(&schema, "locale"), ArrowType::Utf8);
        assert_eq!(ty(&schema, "blob"), ArrowType::Binary);
        assert!(
            matches!(ty(&schema, "emb"), ArrowType::FixedSizeList(item, 2) if item.data_type() == &ArrowType::Float32),
            "{:?}",
            ty(&schema, "emb")
        );
        // ...and others (Spark, engines that ignore that hint) the Parquet types alone.
        let plain =
            parquet::arrow::parquet_to_arrow_schema(metadata.file_metadata().schema_descr(), None)
                .unwrap();
        assert_eq!(ty(&plain, "count"), ArrowType::Int64);
        assert_eq!(ty(&plain, "score"), ArrowType::Float32);
        assert_eq!(ty(&plain, "locale"), ArrowType::Utf8);
        assert_eq!(ty(&plain, "blob"), ArrowType::Binary);
        assert!(
            matches!(ty(&plain, "emb"), ArrowType::List(item) if item.data_type() == &ArrowType::Float32),
            "{:?}",
            ty(&plain, "emb")
        );
        // Every row is there, in order, across the row groups.
        use arrow_array::cast::AsArray;
        let batches: Vec<_> = builder.build().unwrap().collect::<Result<_, _>>().unwrap();
        let counts: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let c = b.column_by_name("count").unwrap();
                c.as_primitive::<arrow_array::types::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(counts, (0..n as i64).map(|i| i * 100).collect::<Vec<_>>());
    }

    #[test]
    fn a_feature_added_to_the_allow_list_is_a_new_column_that_older_files_read_as_null() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::Int64Type;
        use arrow_array::{Array, RecordBatch};
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let int64 = |name: &str, values: Vec<i64>| {
            feature(
                name,
                DataType::Int64,
                vec![],
                Values {
                    int64_values: values,
                    ..Default::default()
                },
            )
        };
        let fp32 = |values: Vec<f32>| {
            feature(
                "b",
                DataType::Fp32,
                vec![],
                Values {
                    fp32_values: values,
                    ..Default::default()
                },
            )
        };
        // The allow list logs a and b, then (from epoch 2 on) c too; rows of the same hour.
        let before = rows_with(
            "r1",
            5,
            2,
            vec![int64("a", vec![1, 2]), fp32(vec![0.5, 1.5])],
        );
        let after = rows_with(
            "r2",
            5,
            3,
            vec![
                int64("a", vec![3, 4, 5]),
                fp32(vec![2.5, 3.5, 4.5]),
                int64("c", vec![70, 80, 90]),
            ],
        );
        let old = write_epoch(&ds, "t-0", 1, &before);
        let new = write_epoch(&ds, "t-0", 2, &after);
        assert_eq!((old.len(), new.len()), (1, 1));
        assert_ne!(old, new);
        let read = |file: &str| {
            let builder = ParquetRecordBatchReaderBuilder::try_new(
                File::open(dir.path().join(file)).unwrap(),
            )
            .unwrap();
            let schema = builder.schema().clone();
            let batches: Vec<RecordBatch> =
                builder.build().unwrap().collect::<Result<_, _>>().unwrap();
            (schema, batches)
        };
        let (old_schema, old_batches) = read(&old[0]);
        let (new_schema, new_batches) = read(&new[0]);
        assert!(old_schema.field_with_name("c").is_err(), "{old_schema:?}");
        assert_eq!(
            new_schema.field_with_name("c").unwrap().data_type(),
            &arrow_schema::DataType::Int64
        );
        // A reader that unifies the files' schemas (pyarrow's datasets, Spark's mergeSchema):
        // this fails if a name has two types; a column a file lacks is null in its rows.
        let unified = Arc::new(
            arrow_schema::Schema::try_merge([
                old_schema.as_ref().clone(),
                new_schema.as_ref().clone(),
            ])
            .unwrap(),
        );
        let conform = |batch: &RecordBatch| {
            let columns = unified
                .fields()
                .iter()
                .map(|f| {
                    batch.column_by_name(f.name()).cloned().unwrap_or_else(|| {
                        arrow_array::new_null_array(f.data_type(), batch.num_rows())
                    })
                })
                .collect();
            RecordBatch::try_new(unified.clone(), columns).unwrap()
        };
        let mut read_back = Vec::new();
        for batch in old_batches.iter().chain(&new_batches).map(conform) {
            let item = batch.column_by_name("item_id").unwrap().as_string::<i32>();
            let a = batch
                .column_by_name("a")
                .unwrap()
                .as_primitive::<Int64Type>();
            let c = batch
                .column_by_name("c")
                .unwrap()
                .as_primitive::<Int64Type>();
            for i in 0..batch.num_rows() {
                read_back.push((
                    item.value(i).to_owned(),
                    a.value(i),
                    c.is_valid(i).then(|| c.value(i)),
                ));
            }
        }
        assert_eq!(
            read_back,
            [
                ("r1-0".to_owned(), 1, None),
                ("r1-1".to_owned(), 2, None),
                ("r2-0".to_owned(), 3, Some(70)),
                ("r2-1".to_owned(), 4, Some(80)),
                ("r2-2".to_owned(), 5, Some(90)),
            ]
        );
    }

    #[test]
    fn recovery_rolls_committed_files_forward_and_drops_uncommitted_ones() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        // Epoch 1 committed but the process died before renaming.
        let staged1 = ds.stage("t-0", 1, &rows(1), i64::MIN).unwrap();
        let files1 = staged1.files.clone();
        ds.commit(&committed("t-0", 1, &staged1)).unwrap();
        // Epoch 1 staged by a writer that lost it: never committed.
        let lost = Dataset::open(dir.path(), SinkOptions::default())
            .unwrap()
            .stage("t-0", 1, &rows(3), i64::MIN)
            .unwrap();
        // Another task's staged files are not touched.
        let other = ds.stage("t-1", 1, &rows(7), i64::MIN).unwrap();

        let cp = ds.recover("t-0").unwrap().unwrap();
        assert_eq!(cp.epoch, 1);
        assert_eq!(cp.offsets["features"], 10);
        assert_eq!(visible_files(dir.path()), files1);
        let staged = |s: &Staged| dir.path().join(s.staging.as_deref().unwrap());
        assert!(!staged(&lost).exists(), "a lost epoch's staging is deleted");
        assert!(
            dir.path()
                .join(staged_name(other.staging.as_deref(), &other.files[0]))
                .exists()
        );
        // Recovering again changes nothing.
        assert_eq!(ds.recover("t-0").unwrap(), Some(cp));
        assert_eq!(visible_files(dir.path()), files1);
        assert_eq!(ds.recover("never").unwrap(), None);
    }

    #[test]
    fn checkpoints_without_staging_roll_forward_from_pending_files_beside_the_visible_ones() {
        // As joiners staged before staging was per writer: `.<name>.pending` in the hour's
        // directory, and checkpoints without `staging`.
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let stage_legacy = |epoch: u64, rows: &[Row], n: usize| {
            let visible = format!("dt=1970-01-01/hr=01/part-t-0-{epoch:010}-{n:04}.parquet");
            let bytes = ds.encode(&visible, rows).unwrap();
            ds.storage.put(&pending_name(&visible), bytes).unwrap();
            visible
        };
        let files1 = vec![stage_legacy(1, &rows(1)[..1], 0)];
        // A loser's file of epoch 1 (not in the checkpoint) and a file of epoch 2, which may
        // still be committed.
        let lost = stage_legacy(1, &rows(1)[..1], 1);
        let later = stage_legacy(2, &rows(1)[..1], 0);
        let cp1 = checkpoint("t-0", 1, files1.clone());
        ds.commit(&cp1).unwrap();
        assert_eq!(ds.recover("t-0").unwrap(), Some(cp1));
        assert_eq!(visible_files(dir.path()), files1);
        assert!(!dir.path().join(pending_name(&lost)).exists());
        assert!(dir.path().join(pending_name(&later)).exists());
        // Epoch 2 commits and rolls forward from its pending file.
        let cp2 = checkpoint("t-0", 2, vec![later.clone()]);
        ds.commit(&cp2).unwrap();
        assert_eq!(ds.recover("t-0").unwrap(), Some(cp2));
        assert_eq!(visible_files(dir.path()), [files1[0].clone(), later]);
    }

    /// A restore of a task's state from `checkpoint`, as the runtime does.
    fn restore(ds: &Dataset, checkpoint: &Checkpoint) -> Result<JoinState, String> {
        let bytes = ds
            .read_state(checkpoint.state.as_deref().ok_or("no state")?)
            .map_err(|e| e.to_string())?;
        JoinState::restore(
            join_config(),
            &bytes,
            |epoch| Dataset::legacy_state_name(&checkpoint.task, epoch),
            |file: &str| ds.read_state(file).map_err(|e| e.to_string()),
            |_| Err("no log is held by offset".into()),
        )
    }

    fn join_config() -> JoinConfig {
        JoinConfig {
            features_wait_us: i64::MAX / 4,
            impressions_wait_us: i64::MAX / 4,
            label_window_us: None,
            max_out_of_orderness_us: 0,
            negatives_rate: 0.0,
            max_bytes: usize::MAX,
            event_sources: 1,
        }
    }

    fn feature_log(request: &str) -> FeatureLog {
        FeatureLog {
            request_id: request.into(),
            row_count: 1,
            candidate_ids: vec!["a".into()],
            ..Default::default()
        }
    }

    /// Whether `state` holds the features of `request` (its impression makes a row at once).
    fn holds(state: &mut JoinState, request: &str) -> bool {
        !state
            .add_event(crate::event::Event {
                request_id: request.into(),
                item_id: "a".into(),
                time_us: 0,
                kind: crate::event::EventKind::Impression,
                labels: BTreeMap::new(),
                event_id: None,
            })
            .is_empty()
    }

    /// Stages `state`'s snapshot and `rows` as `ds`'s epoch `epoch` of `task`: the checkpoint
    /// to commit, and the bytes of its staged files.
    fn stage_epoch(
        ds: &Dataset,
        task: &str,
        epoch: u64,
        state: &mut JoinState,
        rows: &[Row],
    ) -> (Checkpoint, Vec<Vec<u8>>) {
        let staged = ds.stage(task, epoch, rows, i64::MIN).unwrap();
        let snapshot = state.snapshot(epoch, &ds.state_name(task, epoch));
        let name = ds.stage_state(task, epoch, snapshot.bytes).unwrap();
        let bytes = staged
            .files
            .iter()
            .map(|f| {
                ds.storage
                    .get(&staged_name(staged.staging.as_deref(), f))
                    .unwrap()
            })
            .collect();
        let cp = Checkpoint {
            state: Some(name),
            ..committed(task, epoch, &staged)
        };
        (cp, bytes)
    }

    /// Two owners of one task (a zombie `a` stalled on storage, and `b`, which took the task
    /// over) both stage epoch 2: the one that commits keeps every file its checkpoint names,
    /// whatever the other writes late and whatever a recovery deletes.
    fn two_writers_of_one_epoch(a: &Dataset, b: &Dataset, observer: &Dataset) {
        let task = "t-0";
        // Epoch 1: committed by a, with r0's log in its state.
        let mut zombie = JoinState::new(join_config());
        zombie.add_features(feature_log("r0"));
        let (cp1, _) = stage_epoch(a, task, 1, &mut zombie, &rows(0));
        a.commit(&cp1).unwrap();
        a.roll_forward(&cp1).unwrap();
        // b takes the task over from checkpoint 1; a goes on, not knowing.
        let mut owner = restore(b, &cp1).unwrap();
        owner.add_features(feature_log("owner"));
        zombie.add_features(feature_log("zombie"));
        // Both stage epoch 2 in the same hour (the same visible names), b commits first.
        let (cp2, owner_bytes) = stage_epoch(b, task, 2, &mut owner, &rows_of("owner", 3));
        b.commit(&cp2).unwrap();
        let owner_state = b.read_state(cp2.state.as_deref().unwrap()).unwrap();
        // a, late, stages its own epoch 2 (rows and state), then finds it fenced.
        let (lost, zombie_bytes) = stage_epoch(a, task, 2, &mut zombie, &rows_of("zombie", 3));
        assert_eq!(lost.files, cp2.files, "the same visible names");
        assert_ne!(zombie_bytes, owner_bytes);
        let err = a.commit(&lost).unwrap_err();
        assert!(matches!(err, SinkError::Fenced { epoch: 2, .. }), "{err}");
        assert_eq!(
            b.read_state(cp2.state.as_deref().unwrap()).unwrap(),
            owner_state,
            "the committed state file is unchanged"
        );
        // Someone recovers the task (a after a restart, or another process): it finishes b's
        // roll forward and deletes what a staged.
        assert_eq!(observer.recover(task).unwrap(), Some(cp2.clone()));
        b.roll_forward(&cp2).unwrap();
        let visible: Vec<Vec<u8>> = cp2
            .files
            .iter()
            .map(|f| observer.storage.get(f).unwrap())
            .collect();
        assert_eq!(visible, owner_bytes, "exactly b's rows are visible");
        assert!(
            !observer
                .storage
                .exists(&staged_name(lost.staging.as_deref(), &lost.files[0]))
                .unwrap(),
            "the loser's staging of a committed epoch is deleted"
        );
        // A restore from b's checkpoint is b's state.
        let mut restored = restore(observer, &cp2).unwrap();
        assert!(holds(&mut restored, "owner"));
        assert!(!holds(&mut restored, "zombie"));
        // b goes on: epoch 3 refers to b's file of epoch 2 for the owner's log.
        owner.add_features(feature_log("r3"));
        let (cp3, _) = stage_epoch(b, task, 3, &mut owner, &[]);
        b.commit(&cp3).unwrap();
        b.roll_forward(&cp3).unwrap();
        let snapshot_files = |cp: &Checkpoint| {
            let mut files = restore(b, cp).unwrap().segment_files();
            files.extend(cp.state.clone());
            files
        };
        let keep = [snapshot_files(&cp3), snapshot_files(&cp2)].concat();
        b.prune_state(task, &keep, 3).unwrap();
        assert!(
            !observer
                .storage
                .exists(lost.state.as_deref().unwrap())
                .unwrap(),
            "the loser's state file of a committed epoch is pruned"
        );
        let latest = observer.recover(task).unwrap().unwrap();
        assert_eq!(latest, cp3);
        let mut restored = restore(observer, &latest).unwrap();
        assert_eq!(restored.requests(), 3);
        for request in ["r0", "owner", "r3"] {
            assert!(holds(&mut restored, request), "{request}");
        }
        assert!(!holds(&mut restored, "zombie"));
    }

    #[test]
    fn a_zombie_never_changes_or_deletes_what_the_owner_committed() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        two_writers_of_one_epoch(&open(), &open(), &open());
    }

    #[test]
    fn on_an_object_store_a_zombie_never_changes_or_deletes_what_the_owner_committed() {
        let (store, a) = in_memory();
        let open = || {
            Dataset::open_object_store(store.clone(), "memory://b", "ds", SinkOptions::default())
                .unwrap()
        };
        two_writers_of_one_epoch(&a, &open(), &open());
    }

    /// `b` has staged epoch 2 and not committed it yet when someone recovers the task at epoch
    /// 1: that staging stays, and b's commit rolls forward.
    fn recovery_beside_a_writer_about_to_commit(a: &Dataset, b: &Dataset) {
        let task = "t-0";
        let mut state = JoinState::new(join_config());
        state.add_features(feature_log("r0"));
        let (cp1, _) = stage_epoch(a, task, 1, &mut state, &rows(0));
        a.commit(&cp1).unwrap();
        a.roll_forward(&cp1).unwrap();
        let mut owner = restore(b, &cp1).unwrap();
        owner.add_features(feature_log("owner"));
        let (cp2, owner_bytes) = stage_epoch(b, task, 2, &mut owner, &rows_of("owner", 3));
        assert_eq!(a.recover(task).unwrap(), Some(cp1));
        for file in &cp2.files {
            assert!(
                a.storage
                    .exists(&staged_name(cp2.staging.as_deref(), file))
                    .unwrap(),
                "{file} is still staged"
            );
        }
        b.commit(&cp2).unwrap();
        b.roll_forward(&cp2).unwrap();
        assert_eq!(a.recover(task).unwrap(), Some(cp2.clone()));
        let visible: Vec<Vec<u8>> = cp2
            .files
            .iter()
            .map(|f| a.storage.get(f).unwrap())
            .collect();
        assert_eq!(visible, owner_bytes);
        let mut restored = restore(a, &cp2).unwrap();
        assert!(holds(&mut restored, "owner"));
        assert!(holds(&mut restored, "r0"));
    }

    #[test]
    fn a_recovery_keeps_the_staging_of_an_epoch_not_committed_yet() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        recovery_beside_a_writer_about_to_commit(&open(), &open());
    }

    #[test]
    fn on_an_object_store_a_recovery_keeps_the_staging_of_an_epoch_not_committed_yet() {
        let (store, a) = in_memory();
        let b =
            Dataset::open_object_store(store.clone(), "memory://b", "ds", SinkOptions::default())
                .unwrap();
        recovery_beside_a_writer_about_to_commit(&a, &b);
    }

    /// How [`Watched`] answers a create.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Creates {
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
    struct Watched {
        inner: Arc<dyn Storage>,
        creates: Creates,
        lists: std::sync::atomic::AtomicUsize,
        checks: std::sync::atomic::AtomicUsize,
        checkpoint_lists: std::sync::atomic::AtomicUsize,
    }

    impl Watched {
        fn new(inner: Arc<dyn Storage>, creates: Creates) -> Self {
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
        fn staging(&self, task: &str, epoch: u64) -> Option<String> {
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

    #[test]
    fn hours_days_and_checkpoints_once_seen_are_not_listed_or_checked_again() {
        use std::sync::atomic::Ordering::Relaxed;
        const HOUR: i64 = 3_600_000_000;
        let dir = tempfile::tempdir().unwrap();
        let mut ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let counting = Arc::new(Watched::new(
            Arc::new(Local {
                root: dir.path().to_owned(),
                writer: new_writer(),
            }),
            Creates::AsStored,
        ));
        ds.storage = counting.clone();
        let tasks = vec!["t-0".to_string()];
        // Rows in hours 00 and 01 of day one and hour 00 of day two.
        let mut all = rows(0);
        all.extend(rows(24));
        let staged = ds.stage("t-0", 1, &all, i64::MIN).unwrap();
        let mut cp = committed("t-0", 1, &staged);
        cp.watermark_us = 2 * HOUR;
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        assert_eq!(
            ds.mark_complete(&tasks, 0).unwrap(),
            ["dt=1970-01-01/hr=00", "dt=1970-01-01/hr=01"]
        );
        let (lists, checks) = (counting.lists.load(Relaxed), counting.checks.load(Relaxed));
        // Nothing new: the marked hours are not checked again.
        assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
        assert_eq!(counting.checks.load(Relaxed), checks);
        assert_eq!(
            counting.lists.load(Relaxed),
            lists + 2,
            "both days still listed"
        );
        // Day one ends: it is listed one last time, then never again.
        let mut cp2 = checkpoint("t-0", 2, vec![]);
        cp2.watermark_us = 25 * HOUR;
        ds.commit(&cp2).unwrap();
        // Day one's hours without rows (02 to 23) get their markers too.
        let expected: Vec<String> = ["dt=1970-01-02/hr=00".to_string()]
            .into_iter()
            .chain((2..24).map(|h| format!("dt=1970-01-01/hr={h:02}")))
            .collect();
        assert_eq!(ds.mark_complete(&tasks, 0).unwrap(), expected);
        let lists = counting.lists.load(Relaxed);
        assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
        assert_eq!(counting.lists.load(Relaxed), lists + 1, "only day two");
        // The task's checkpoints were listed once; later epochs are found by probing.
        assert_eq!(counting.checkpoint_lists.load(Relaxed), 1);
        // A fresh process (another Dataset) finds the markers and marks nothing twice.
        let again = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert!(again.mark_complete(&tasks, 0).unwrap().is_empty());
    }

    #[test]
    fn an_hour_is_marked_complete_only_once_every_committed_file_of_it_is_visible() {
        const HOUR: i64 = 3_600_000_000;
        let dir = tempfile::tempdir().unwrap();
        let writer = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let tasks = vec!["t-0".to_string()];
        let first = writer.stage("t-0", 1, &rows(0), i64::MIN).unwrap();
        let cp1 = committed("t-0", 1, &first);
        writer.commit(&cp1).unwrap();
        writer.roll_forward(&cp1).unwrap();
        // The writer commits more rows of the same hours and dies before its roll forward.
        let second = writer.stage("t-0", 2, &rows(0), i64::MIN).unwrap();
        let mut cp2 = committed("t-0", 2, &second);
        cp2.watermark_us = 2 * HOUR;
        writer.commit(&cp2).unwrap();
        let observer = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert_eq!(
            observer.mark_complete(&tasks, 0).unwrap(),
            ["dt=1970-01-01/hr=00", "dt=1970-01-01/hr=01"]
        );
        for file in &cp2.files {
            assert!(dir.path().join(file).exists(), "{file} not visible");
        }
    }

    #[test]
    fn partitioned_by_model_each_model_has_its_own_hours_markers_and_late_area() {
        const HOUR: i64 = 3_600_000_000;
        let options = SinkOptions {
            partition_by_model: true,
            ..SinkOptions::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let local = Dataset::open(dir.path(), options.clone()).unwrap();
        let (store, mut remote) = in_memory();
        remote.options = options.clone();
        for ds in [local, remote] {
            let tasks = vec!["t-0".to_string()];
            // The ranker has rows in hours 0-3, a model with a name no path takes as it is
            // in hours 0-1, all in one commit.
            let odd = "a/b c%";
            let mut all = model_rows("ranker", "r1", 0);
            all.extend(model_rows(odd, "r2", 0));
            all.extend(model_rows("ranker", "r3", 2));
            let staged = ds.stage("t-0", 1, &all, i64::MIN).unwrap();
            assert_eq!(staged.late_rows, 0);
            let mut dirs: Vec<&str> = staged
                .files
                .iter()
                .map(|f| f.rsplit_once('/').unwrap().0)
                .collect();
            dirs.dedup();
            assert_eq!(
                dirs,
                [
                    "model=a%2Fb%20c%25/dt=1970-01-01/hr=00",
                    "model=a%2Fb%20c%25/dt=1970-01-01/hr=01",
                    "model=ranker/dt=1970-01-01/hr=00",
                    "model=ranker/dt=1970-01-01/hr=01",
                    "model=ranker/dt=1970-01-01/hr=02",
                    "model=ranker/dt=1970-01-01/hr=03",
                ]
            );
            let mut cp = committed("t-0", 1, &staged);
            cp.watermark_us = 5 * HOUR;
            ds.commit(&cp).unwrap();
            ds.roll_forward(&cp).unwrap();
            for file in &cp.files {
                assert!(ds.storage.exists(file).unwrap(), "{file} not visible");
            }
            // Each model's complete hours, and the other model's hour 2 without rows (the
            // dataset has rows in a later hour); hour 3 waits for a later hour with rows.
            let mut marked = ds.mark_complete(&tasks, 0).unwrap();
            marked.sort();
            assert_eq!(
                marked,
                [
                    "model=a%2Fb%20c%25/dt=1970-01-01/hr=00",
                    "model=a%2Fb%20c%25/dt=1970-01-01/hr=01",
                    "model=a%2Fb%20c%25/dt=1970-01-01/hr=02",
                    "model=ranker/dt=1970-01-01/hr=00",
                    "model=ranker/dt=1970-01-01/hr=01",
                    "model=ranker/dt=1970-01-01/hr=02",
                    "model=ranker/dt=1970-01-01/hr=03",
                ]
            );
            assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
            // Rows of a complete hour go to the late area, under their model.
            let late = ds
                .stage("t-0", 2, &model_rows(odd, "r4", 0), cp.watermark_us)
                .unwrap();
            assert_eq!(late.late_rows, 2);
            assert!(
                late.files
                    .iter()
                    .all(|f| f.starts_with("late/model=a%2Fb%20c%25/dt=1970-01-01/hr=0")),
                "{:?}",
                late.files
            );
        }
        // On the object store the escapes are the keys' own, as hive readers decode them.
        assert!(
            keys(&store)
                .iter()
                .any(|k| k.starts_with("ds/model=a%2Fb%20c%25/dt=1970-01-01/hr=00/part-")),
            "{:?}",
            keys(&store)
        );
    }

    #[test]
    fn a_dataset_keeps_the_layout_it_was_first_written_with() {
        let by_model = SinkOptions {
            partition_by_model: true,
            ..SinkOptions::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let first = Dataset::open(dir.path(), by_model.clone()).unwrap();
        assert!(first.recorded_partition_by_model().unwrap());
        let other = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert!(other.recorded_partition_by_model().unwrap(), "recorded");
        // A dataset written before the setting existed (checkpoints, no record) was by hour.
        let old = tempfile::tempdir().unwrap();
        let ds = Dataset::open(old.path(), SinkOptions::default()).unwrap();
        let staged = ds.stage("t-0", 1, &rows(0), i64::MIN).unwrap();
        ds.commit(&committed("t-0", 1, &staged)).unwrap();
        let now = Dataset::open(old.path(), by_model).unwrap();
        assert!(!now.recorded_partition_by_model().unwrap());
        assert_eq!(model_dir(""), "model=__HIVE_DEFAULT_PARTITION__");
        assert_eq!(model_dir("resnet-50_v1.2"), "model=resnet-50_v1.2");
        assert!(model_dir(&"é".repeat(100)).starts_with("model=sha256."));
    }

    fn checkpoint_epochs_on_disk(ds: &Dataset, task: &str) -> Vec<u64> {
        ds.checkpoint_epochs(task).unwrap()
    }

    #[test]
    fn old_checkpoints_are_pruned_oldest_first_and_a_zombie_behind_them_is_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let options = SinkOptions {
            checkpoints_kept: 3,
            ..SinkOptions::default()
        };
        let local = Dataset::open(dir.path(), options.clone()).unwrap();
        let (_, mut remote) = in_memory();
        remote.options = options.clone();
        for ds in [local, remote] {
            // A process that owned the task at epoch 2, then stalled.
            ds.commit(&checkpoint("t-0", 1, vec![])).unwrap();
            ds.commit(&checkpoint("t-0", 2, vec![])).unwrap();
            // The new owner moves on, pruning after each commit.
            for epoch in 3..=10 {
                ds.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
                ds.prune_checkpoints("t-0", epoch).unwrap();
            }
            assert_eq!(checkpoint_epochs_on_disk(&ds, "t-0"), [8, 9, 10]);
            // The zombie's next epoch is free, but its predecessor is gone: fenced, not
            // committed over the new owner's history.
            let err = ds.commit(&checkpoint("t-0", 3, vec![])).unwrap_err();
            assert!(matches!(err, SinkError::Fenced { epoch: 3, .. }), "{err}");
            assert_eq!(checkpoint_epochs_on_disk(&ds, "t-0"), [8, 9, 10]);
            // The owner goes on; a restart recovers the newest.
            ds.commit(&checkpoint("t-0", 11, vec![])).unwrap();
            assert_eq!(ds.recover("t-0").unwrap().map(|c| c.epoch), Some(11));
        }
    }

    #[test]
    fn a_backlog_of_old_checkpoints_is_shed_a_hundred_per_commit() {
        let dir = tempfile::tempdir().unwrap();
        // Written by a joiner that kept every checkpoint.
        let old = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        for epoch in 1..=250 {
            old.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
        }
        let ds = Dataset::open(
            dir.path(),
            SinkOptions {
                checkpoints_kept: 3,
                ..SinkOptions::default()
            },
        )
        .unwrap();
        assert_eq!(ds.recover("t-0").unwrap().map(|c| c.epoch), Some(250));
        let mut left = Vec::new();
        for epoch in 251..=254 {
            ds.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
            ds.prune_checkpoints("t-0", epoch).unwrap();
            left.push(checkpoint_epochs_on_disk(&ds, "t-0").len());
        }
        // 251 checkpoints less 100, then 152 less 100, then only the newest three.
        assert_eq!(left, [151, 52, 3, 3]);
    }

    #[test]
    fn completeness_finds_the_newest_checkpoint_after_the_one_it_knew_was_pruned() {
        const HOUR: i64 = 3_600_000_000;
        let dir = tempfile::tempdir().unwrap();
        let options = SinkOptions {
            checkpoints_kept: 2,
            ..SinkOptions::default()
        };
        let owner = Dataset::open(dir.path(), options.clone()).unwrap();
        let observer = Dataset::open(dir.path(), options).unwrap();
        let tasks = vec!["t-0".to_string()];
        let staged = owner.stage("t-0", 1, &rows(0), i64::MIN).unwrap();
        let cp = committed("t-0", 1, &staged);
        owner.commit(&cp).unwrap();
        owner.roll_forward(&cp).unwrap();
        // The observer sees epoch 1, whose watermark completes nothing.
        assert!(observer.mark_complete(&tasks, 0).unwrap().is_empty());
        for epoch in 2..=6 {
            let mut cp = checkpoint("t-0", epoch, vec![]);
            cp.watermark_us = 3 * HOUR;
            owner.commit(&cp).unwrap();
            owner.prune_checkpoints("t-0", epoch).unwrap();
        }
        assert_eq!(checkpoint_epochs_on_disk(&owner, "t-0"), [5, 6]);
        // Epochs 1 and 2 are gone: the observer looks again and finds epoch 6's watermark.
        assert_eq!(
            observer.mark_complete(&tasks, 0).unwrap(),
            ["dt=1970-01-01/hr=00", "dt=1970-01-01/hr=01"]
        );
    }

    #[test]
    fn the_first_partition_count_recorded_is_the_datasets() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert_eq!(ds.recorded_partition_count("features", 4).unwrap(), 4);
        assert_eq!(ds.recorded_partition_count("features", 4).unwrap(), 4);
        // The topic gained partitions: the dataset still says 4, in another process too.
        let again = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert_eq!(again.recorded_partition_count("features", 8).unwrap(), 4);
        // Another topic's dataset in the same root is its own.
        assert_eq!(again.recorded_partition_count("other", 2).unwrap(), 2);
    }

    #[test]
    fn a_column_name_is_claimed_once_for_every_process_on_either_store() {
        let dir = tempfile::tempdir().unwrap();
        let local = || Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let store = Arc::new(object_store::memory::InMemory::new());
        let remote = || {
            let options = SinkOptions::default();
            Dataset::open_object_store(store.clone(), "memory://b", "ds/", options).unwrap()
        };
        for (first, second) in [(local(), local()), (remote(), remote())] {
            assert_eq!(first.claim("price", "FP64").unwrap(), "FP64");
            // Another process (its own cache) learns the first one's claim.
            assert_eq!(second.claim("price", "FP32").unwrap(), "FP64");
            assert_eq!(second.claim("price__FP32", "FP32").unwrap(), "FP32");
            // Any name is one file: separators and spaces are escaped.
            assert_eq!(second.claim("a/b c.d", "BYTES:utf8").unwrap(), "BYTES:utf8");
            assert_eq!(first.claim("a/b c.d", "INT64").unwrap(), "BYTES:utf8");
            assert_eq!(first.claim("a", "INT64").unwrap(), "INT64");
            // However long, a name is claimed (its file then named by a digest).
            let long = "x/".repeat(300);
            assert_eq!(first.claim(&long, "FP32").unwrap(), "FP32");
            assert_eq!(second.claim(&long, "FP64").unwrap(), "FP32");
        }
        assert!(
            dir.path()
                .join("_featurelog/columns/a.2Fb.20c.2Ed")
                .exists()
        );
        assert!(
            keys(&store)
                .iter()
                .any(|k| k == "ds/_featurelog/columns/a.2Fb.20c.2Ed")
        );
    }

    #[test]
    fn the_events_topics_recorded_grow_only_by_appending() {
        let dir = tempfile::tempdir().unwrap();
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert_eq!(
            ds.recorded_events_topics(&list(&["a"])).unwrap(),
            list(&["a"])
        );
        // Appended: the list before this start, and the longer one is recorded.
        assert_eq!(
            ds.recorded_events_topics(&list(&["a", "b"])).unwrap(),
            list(&["a"])
        );
        let again = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert_eq!(
            again.recorded_events_topics(&list(&["a", "b"])).unwrap(),
            list(&["a", "b"])
        );
        // Reordered or shortened: the record stays, for the caller to refuse the start.
        assert_eq!(
            again.recorded_events_topics(&list(&["b", "a"])).unwrap(),
            list(&["a", "b"])
        );
        assert_eq!(
            again.recorded_events_topics(&list(&["a"])).unwrap(),
            list(&["a", "b"])
        );
        assert_eq!(
            again.recorded_events_topics(&list(&["a", "b"])).unwrap(),
            list(&["a", "b"])
        );
    }

    #[test]
    fn rows_for_hours_the_task_declared_complete_go_aside_before_any_marker_exists() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        // The task's committed watermark minus the lag is 02:00: hours 00 and 01 are over for
        // it, though no marker writer has looked yet. Hour 02 is still open.
        let staged = ds
            .stage("t-0", 2, &[rows(0), rows(2)].concat(), 2 * HOUR_US)
            .unwrap();
        assert_eq!(staged.late_rows, 2);
        let mut files = staged.files.clone();
        files.sort();
        assert_eq!(files.len(), 4, "{files:?}");
        assert!(files[0].starts_with("dt=1970-01-01/hr=02/"), "{files:?}");
        assert!(files[1].starts_with("dt=1970-01-01/hr=03/"), "{files:?}");
        assert!(
            files[2].starts_with("late/dt=1970-01-01/hr=00/"),
            "{files:?}"
        );
        assert!(
            files[3].starts_with("late/dt=1970-01-01/hr=01/"),
            "{files:?}"
        );
    }

    #[test]
    fn hours_without_rows_are_marked_between_the_first_and_newest_hours_with_rows() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let tasks = vec!["t-0".to_string()];
        let marker = |hour: u32| {
            dir.path()
                .join(format!("dt=1970-01-01/hr={hour:02}/_SUCCESS"))
        };
        // Rows at 00, 01 and at 05, 06; nothing in between.
        let staged = ds
            .stage("t-0", 1, &[rows(0), rows(5)].concat(), i64::MIN)
            .unwrap();
        let mut cp = committed("t-0", 1, &staged);
        cp.watermark_us = 10 * HOUR_US;
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        let mut marked = ds.mark_complete(&tasks, 0).unwrap();
        marked.sort();
        let expected: Vec<String> = (0..=6)
            .map(|h| format!("dt=1970-01-01/hr={h:02}"))
            .collect();
        assert_eq!(marked, expected);
        for hour in 0..=6 {
            assert!(marker(hour).exists(), "hour {hour}");
        }
        // Hours after the newest with rows wait for later rows, however far the watermark.
        assert!(!marker(7).exists());
        assert!(ds.mark_complete(&tasks, 0).unwrap().is_empty());
        // A restarted joiner finds them marked.
        let again = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        assert!(again.mark_complete(&tasks, 0).unwrap().is_empty());
        // Rows at 10 and 11 (the task's committed watermark is 10:00): hours 07 to 09 have
        // none and are complete now.
        let staged = again.stage("t-0", 2, &rows(10), 10 * HOUR_US).unwrap();
        assert_eq!(staged.late_rows, 0);
        let mut cp = committed("t-0", 2, &staged);
        cp.watermark_us = 20 * HOUR_US;
        again.commit(&cp).unwrap();
        again.roll_forward(&cp).unwrap();
        let mut marked = again.mark_complete(&tasks, 0).unwrap();
        marked.sort();
        let expected: Vec<String> = (7..=11)
            .map(|h| format!("dt=1970-01-01/hr={h:02}"))
            .collect();
        assert_eq!(marked, expected);
        // Readers see only the rows: marker-only hours hold no data file.
        let data: Vec<String> = visible_files(dir.path())
            .into_iter()
            .filter(|f| f.ends_with(".parquet"))
            .collect();
        assert_eq!(data.len(), 6, "{data:?}");
    }

    #[test]
    fn hours_are_marked_complete_by_the_slowest_task_and_late_rows_go_aside() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let tasks = vec!["t-0".to_string(), "t-1".to_string()];
        let staged = ds.stage("t-0", 1, &rows(1), i64::MIN).unwrap();
        let mut cp = committed("t-0", 1, &staged);
        cp.watermark_us = 10 * 3_600_000_000;
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        assert!(
            ds.mark_complete(&tasks, 0).unwrap().is_empty(),
            "t-1 has no checkpoint yet"
        );
        let mut cp1 = checkpoint("t-1", 1, vec![]);
        cp1.watermark_us = 2 * 3_600_000_000 + 1;
        ds.commit(&cp1).unwrap();
        // The slower task's watermark (02:00) minus a 1 h lag: only hour 00 is complete.
        assert!(ds.mark_complete(&tasks, 3_600_000_000).unwrap().is_empty());
        assert_eq!(
            ds.mark_complete(&tasks, 0).unwrap(),
            ["dt=1970-01-01/hr=01"]
        );
        assert!(dir.path().join("dt=1970-01-01/hr=01/_SUCCESS").exists());
        assert!(!dir.path().join("dt=1970-01-01/hr=02/_SUCCESS").exists());
        // A row for the finished hour arrives later: it goes to late/, counted.
        let late = ds.stage("t-0", 2, &rows(1)[..1], i64::MIN).unwrap();
        assert_eq!(late.late_rows, 1);
        assert!(
            late.files[0].starts_with("late/dt=1970-01-01/hr=01/"),
            "{:?}",
            late.files
        );
    }

    #[test]
    fn a_second_owner_cannot_commit_the_same_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        for epoch in 1..=3 {
            ds.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
        }
        let err = ds.commit(&checkpoint("t-0", 3, vec![])).unwrap_err();
        assert!(matches!(err, SinkError::Fenced { epoch: 3, .. }), "{err}");
    }

    #[test]
    fn state_files_no_checkpoint_needs_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let loser = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        // Files of a joiner before state files were named per writer.
        for epoch in 1..=2 {
            let name = Dataset::legacy_state_name("t/0", epoch);
            ds.storage.put(&name, vec![epoch as u8]).unwrap();
        }
        let mine: Vec<String> = (3..=7)
            .map(|epoch| ds.stage_state("t/0", epoch, vec![epoch as u8]).unwrap())
            .collect();
        // Another writer lost epochs 5 (committed by ds) and 7 (not committed yet).
        let lost5 = loser.stage_state("t/0", 5, vec![0]).unwrap();
        let lost7 = loser.stage_state("t/0", 7, vec![0]).unwrap();
        assert_ne!(lost5, mine[2]);
        // Checkpoint 6 reads segments 2 and 6, checkpoint 5 read 2, 4 and 5; 7 is not
        // committed.
        let legacy2 = Dataset::legacy_state_name("t/0", 2);
        let keep = [
            legacy2.clone(),
            mine[3].clone(),
            mine[1].clone(),
            mine[2].clone(),
        ];
        assert_eq!(ds.prune_state("t/0", &keep, 6).unwrap(), 3);
        let (_, mut left) = ds.storage.children("_featurelog/state/t_0").unwrap();
        left.sort();
        let mut expected: Vec<String> = [legacy2, mine[1].clone(), mine[2].clone()]
            .into_iter()
            .chain([mine[3].clone(), mine[4].clone(), lost7])
            .map(|n| n.rsplit('/').next().unwrap().to_owned())
            .collect();
        expected.sort();
        assert_eq!(left, expected);
    }

    #[test]
    fn state_snapshots_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let name = ds.stage_state("t/0", 4, b"snapshot".to_vec()).unwrap();
        assert!(name.starts_with("_featurelog/state/t_0/"));
        assert_eq!(ds.read_state(&name).unwrap(), b"snapshot");
    }

    #[test]
    fn a_commit_whose_answer_was_lost_is_recognised_as_this_writer_s_and_another_owner_s_is_not() {
        let (store, a) = in_memory();
        let task = "t-0";
        let mut state = JoinState::new(join_config());
        state.add_features(feature_log("r0"));
        let (cp1, _) = stage_epoch(&a, task, 1, &mut state, &rows(0));
        let lossy = Dataset {
            storage: Arc::new(Watched::new(a.storage.clone(), Creates::AnswerLost)),
            ..a.clone()
        };
        // Its own checkpoint, found there on the retry: refused, but recognised as its own.
        assert!(matches!(
            lossy.commit(&cp1),
            Err(SinkError::Fenced { epoch: 1, .. })
        ));
        assert!(lossy.is_own_commit(&cp1));
        lossy.roll_forward(&cp1).unwrap();
        assert_eq!(a.recover(task).unwrap(), Some(cp1));
        // Another writer's epoch 2 is there first: this writer's epoch 2 is fenced.
        let b =
            Dataset::open_object_store(store.clone(), "memory://b", "ds/", SinkOptions::default())
                .unwrap();
        let (theirs, _) = stage_epoch(&b, task, 2, &mut state, &rows(2));
        b.commit(&theirs).unwrap();
        let (mine, _) = stage_epoch(&lossy, task, 2, &mut state, &rows(2));
        assert!(matches!(
            lossy.commit(&mine),
            Err(SinkError::Fenced { epoch: 2, .. })
        ));
        assert!(!lossy.is_own_commit(&mine));
        assert!(b.is_own_commit(&theirs));
        // A checkpoint that names no staging of this writer is never taken for its own.
        let legacy = checkpoint(task, 2, vec![]);
        assert!(!a.is_own_commit(&legacy));
    }

    #[test]
    fn the_store_check_takes_a_probe_whose_answer_was_lost_for_created() {
        let (_, ds) = in_memory();
        let lost = Watched::new(ds.storage.clone(), Creates::AnswerLost);
        assert!(refuses_overwrite(&lost, "_featurelog/probe/w1", "w1").unwrap());
        // The check still catches a store that overwrites.
        let ignores = Watched::new(ds.storage.clone(), Creates::IgnoringCondition);
        assert!(!refuses_overwrite(&ignores, "_featurelog/probe/w2", "w2").unwrap());
        // And a store that refuses every create.
        assert!(!refuses_overwrite(&lost, "_featurelog/probe/w1", "someone else").unwrap());
    }
}
