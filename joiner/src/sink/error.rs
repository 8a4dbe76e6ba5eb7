//! What can go wrong with the dataset ([`SinkError`]), always with the path concerned.

use std::path::{Path, PathBuf};

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
        /// The object (`s3://bucket/key`; on a local directory, the file's path).
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
    /// created: said once, at start-up, naming the file (see [`super::paths`]).
    #[error(
        "output.path {root}: {file} is a regular file, not a directory, so the dataset cannot be created there; point output.path at a directory (or move the file away)"
    )]
    NotADirectory {
        /// The dataset's root.
        root: PathBuf,
        /// The regular file in the way.
        file: PathBuf,
    },
    /// The dataset's Delta table (`output.format = "delta"`) cannot be read or committed to.
    #[error("Delta table {table}: {problem}")]
    Delta {
        /// The table's root URL.
        table: String,
        /// What failed, with the kernel's message.
        problem: String,
    },
    /// A data file of a complete hour cannot be read or rewritten by the Delta table's
    /// compaction. The hour keeps its files; the next completeness pass tries again.
    #[error("compacting {path}: {problem}")]
    Compact {
        /// The file being read or written.
        path: PathBuf,
        /// What failed.
        problem: String,
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

pub(super) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> SinkError + 'a {
    move |source| SinkError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}
