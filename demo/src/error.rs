//! Why the demo stops, and the output folder's file errors in one form.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A file of the output folder could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The broker could not be started or reached.
    #[error("kafka ({bootstrap}): {source}")]
    Kafka {
        /// Where the broker is.
        bootstrap: String,
        /// The cause (boxed: it is large and errors are rare).
        source: Box<featurelog_kafka::KafkaError>,
    },
    /// An app event could not be published.
    #[error("publishing app events to {topic}: {source}")]
    Produce {
        /// The topic.
        topic: String,
        /// The cause.
        source: rdkafka::error::KafkaError,
    },
    /// The model server could not be started.
    #[error("model server: {0}")]
    ModelServer(String),
    /// The sidecar could not be started.
    #[error("sidecar: {0}")]
    Sidecar(#[from] featurelog_sidecar::SidecarError),
    /// The joiner's config was refused or the joiner failed.
    #[error("joiner: {0}")]
    Joiner(String),
    /// A call through the sidecar failed.
    #[error("inference call {request_id} through the sidecar: {status}")]
    Call {
        /// The request.
        request_id: String,
        /// What the sidecar returned.
        status: Box<tonic::Status>,
    },
    /// The dataset did not reach the expected rows in time.
    #[error(
        "the joiner wrote {written} of {expected} rows in {waited:?}, and no new row for a minute before giving up; the dataset is in {dataset}, the joiner's log above says why"
    )]
    Incomplete {
        /// Rows found.
        written: u64,
        /// Rows expected (one per impression).
        expected: u64,
        /// How long the demo waited.
        waited: Duration,
        /// Where.
        dataset: PathBuf,
    },
    /// Writing the offline table failed.
    #[error("offline table {path}: {message}")]
    Offline {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The diff failed.
    #[error("diff: {0}")]
    Diff(#[from] featurelog_diff::DiffError),
}

/// An I/O error on `path` as a [`DemoError::Io`].
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes a file of the output folder.
pub(crate) fn write(path: &Path, text: &str) -> Result<(), DemoError> {
    std::fs::write(path, text).map_err(io(path))
}
