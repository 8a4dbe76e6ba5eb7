//! The dataset (docs/JOINER.md, "Output" and "Exactly once"): Parquet files in hive partitions, on
//! a local directory or on S3-compatible object storage, that each task adds to by committing
//! checkpoints. This module owns the [`Dataset`] handle and its options; each part of what the
//! handle does is a file of its own:
//!
//! - `commit.rs`: the commit protocol (stage, commit, roll forward, recover) and the state files;
//! - `stage.rs`: a flush's rows as staged Parquet files;
//! - `paths.rs`: where the dataset, its checkpoints, state and staging are, resolved once;
//! - `layout.rs`: the names of everything under the root (hive partitions, staging, state);
//! - `markers.rs`: the `_SUCCESS` markers of complete hours;
//! - `prune.rs`: deleting the checkpoints and state files that nothing reads any more;
//! - `columns.rs`: the column registry (`_featurelog/columns/`);
//! - `delta.rs`: the Delta table of `output.format = "delta"`, which each roll forward commits
//!   to, and `signed.rs`, the signed column types its files hold;
//! - `upkeep.rs`: the Delta table's upkeep after each completeness pass, with `compact.rs`
//!   (rewriting a complete hour's small files) and `vacuum.rs` (deleting files no reader needs);
//! - `records.rs`: what the first joiner recorded (partition count, layout, events topics, the
//!   dataset's id);
//! - `common_metadata.rs`: `_common_metadata`, every column of the data files, for readers;
//! - `storage.rs`: the primitives the protocol is built from, and `store.rs`, their one
//!   implementation over object_store (a local directory, S3, in-memory in unit tests);
//! - `error.rs`: [`SinkError`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{OutputConfig, OutputFormat, OutputLocation};

mod columns;
mod commit;
mod common_metadata;
mod compact;
mod delta;
mod error;
mod layout;
mod markers;
pub mod paths;
mod prune;
mod records;
mod signed;
mod stage;
mod storage;
mod store;
mod upkeep;
mod vacuum;

#[cfg(test)]
mod fixtures;

pub use commit::Checkpoint;
pub use common_metadata::COMMON_METADATA;
pub use error::SinkError;
pub(crate) use layout::safe;
pub use layout::{MODEL_PARTITION, model_dir};
pub use markers::SUCCESS;
pub use stage::Staged;
pub use upkeep::TableUpkeep;

use storage::Storage;

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

pub use crate::config::DEFAULT_CHECKPOINTS_KEPT;

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
    complete: Arc<std::sync::Mutex<markers::Complete>>,
    /// Per task, the oldest checkpoint epoch that may still exist, for pruning in order.
    oldest: Arc<std::sync::Mutex<HashMap<String, u64>>>,
    /// Unique to this handle (and its clones): part of every staging prefix and state file name
    /// it writes, so that two owners of a task never write the same name.
    writer: String,
    /// The kinds of the column names this process has claimed or read (`_featurelog/columns/`,
    /// see [`ColumnRegistry`](crate::rows::ColumnRegistry)): a claim never changes, so each name
    /// costs one request per process.
    columns: Arc<std::sync::Mutex<HashMap<String, String>>>,
    /// The columns this process has seen in the dataset's `_common_metadata` files.
    common_metadata: Arc<common_metadata::Covered>,
    /// The Delta table each roll forward commits to (`output.format = "delta"`).
    delta: Option<Arc<delta::DeltaTable>>,
    /// What the Delta table's upkeep has done in this process.
    upkept: Arc<std::sync::Mutex<upkeep::Upkept>>,
}

/// The id of a new handle: see [`Dataset::writer`](Dataset).
fn new_writer() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl Dataset {
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
        let delta = output.format == OutputFormat::Delta;
        match paths::DatasetPaths::resolve(output)?.location().clone() {
            OutputLocation::Local(path) => {
                let dataset = Self::open(path, options)?;
                if delta {
                    let table = delta::DeltaTable::local(&dataset.root)?;
                    return Ok(dataset.with_delta(table));
                }
                Ok(dataset)
            }
            OutputLocation::S3 { bucket, prefix } => {
                let store = output.build_s3(&bucket).map_err(unsupported)?;
                let url = format!("s3://{bucket}");
                let dataset = Self::open_object_store(store.clone(), &url, &prefix, options)?;
                if delta {
                    let root = url::Url::parse(&format!("{url}/{prefix}/"))
                        .map_err(|e| unsupported(format!("the table's URL: {e}")))?;
                    return Ok(dataset.with_delta(delta::DeltaTable::with_store(store, root)));
                }
                Ok(dataset)
            }
        }
    }

    /// This dataset as a Delta table too: each roll forward adds its files to `table`, and
    /// files hold signed column types only (docs/JOINER.md, "Delta table output").
    fn with_delta(mut self, table: delta::DeltaTable) -> Self {
        let table = table.partitioned_by_model(self.options.partition_by_model);
        self.delta = Some(Arc::new(table));
        self
    }

    /// Verifies, with a few requests, that the store refuses to overwrite on a conditional
    /// put (`PutMode::Create`), which the commit's fence depends on.
    pub fn check(&self) -> Result<(), SinkError> {
        self.storage.check()
    }

    /// The root directory, or the store URL and prefix.
    pub fn root(&self) -> &Path {
        &self.root
    }
}
