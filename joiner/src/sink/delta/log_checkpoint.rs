//! Checkpoints of the table's log: a Parquet file of the table's state at a version, so that a
//! reader (and this process's own scans) replays the commits after it only, not one JSON file
//! per task flush since the table began.
//!
//! The kernel writes them through its default engine, whose checkpoint writer needs the
//! multi-threaded executor (on its background executor it never returns): an engine of its own,
//! on a one-thread runtime made on first use, beside the one every commit uses.

use std::sync::{Arc, OnceLock};

use delta_kernel::Engine as _;
use delta_kernel_default_engine::DefaultEngineBuilder;
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;

use super::DeltaTable;
use crate::sink::error::SinkError;

/// The engine that writes checkpoints, and the runtime it runs on.
pub(super) struct CheckpointEngine {
    engine: delta_kernel_default_engine::DefaultEngine<TokioMultiThreadExecutor>,
    /// Shut down without blocking when dropped: the table may be dropped inside async code,
    /// where dropping a runtime the ordinary way panics.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for CheckpointEngine {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl CheckpointEngine {
    fn new(store: Arc<dyn object_store::ObjectStore>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("featurelog-delta-checkpoint")
            .enable_all()
            .build()?;
        let executor = TokioMultiThreadExecutor::new(runtime.handle().clone());
        Ok(Self {
            engine: DefaultEngineBuilder::new(store)
                .with_task_executor(Arc::new(executor))
                .build(),
            runtime: Some(runtime),
        })
    }
}

/// The checkpoint engine of a table, made on first use.
pub(super) type CheckpointEngineCell = OnceLock<Result<CheckpointEngine, String>>;

impl DeltaTable {
    /// Writes a checkpoint of the table's newest version when `interval` or more versions
    /// were committed since the newest checkpoint; returns the version checkpointed. A
    /// checkpoint another writer wrote first is no error.
    pub(crate) fn checkpoint_if_due(&self, interval: u64) -> Result<Option<u64>, SinkError> {
        let Some(snapshot) = self.latest()? else {
            return Ok(None);
        };
        let version = snapshot.version();
        let last = match *self.checkpointed.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(last) => last,
            None => self.last_checkpoint_version()?.unwrap_or(0),
        };
        if version < last.saturating_add(interval.max(1)) {
            self.note_checkpoint(last);
            return Ok(None);
        }
        let engine = self
            .checkpoint_engine
            .get_or_init(|| CheckpointEngine::new(self.store.clone()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| self.error(format!("starting the checkpoint writer: {e}")))?;
        snapshot
            .checkpoint(&engine.engine, None)
            .map_err(|e| self.error(format!("writing a checkpoint of version {version}: {e}")))?;
        self.note_checkpoint(version);
        tracing::debug!(version, "Delta log checkpoint written");
        Ok(Some(version))
    }

    fn note_checkpoint(&self, version: u64) {
        let mut known = self.checkpointed.lock().unwrap_or_else(|e| e.into_inner());
        *known = Some(known.map_or(version, |k| k.max(version)));
    }

    /// The version `_delta_log/_last_checkpoint` names; `None` when there is none.
    fn last_checkpoint_version(&self) -> Result<Option<u64>, SinkError> {
        let url = self
            .root
            .join("_delta_log/_last_checkpoint")
            .map_err(|e| self.error(format!("the log's URL: {e}")))?;
        let read = self.engine.storage_handler().read_files(vec![(url, None)]);
        let bytes = match read.map(|mut files| files.next()) {
            Ok(Some(Ok(bytes))) => bytes,
            Ok(None) | Err(delta_kernel::KernelError::FileNotFound(_)) => return Ok(None),
            Ok(Some(Err(delta_kernel::KernelError::FileNotFound(_)))) => return Ok(None),
            Ok(Some(Err(e))) | Err(e) => {
                return Err(self.error(format!("reading _last_checkpoint: {e}")));
            }
        };
        let last: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| self.error(format!("_last_checkpoint is not JSON: {e}")))?;
        Ok(last["version"].as_u64())
    }
}
