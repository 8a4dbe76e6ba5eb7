//! The errors of the sidecar crate.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the sidecar could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// The config file is missing, unreadable or invalid.
    #[error("config {path}: {message}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong, in words an operator can act on.
        message: String,
    },
    /// The allow list is missing, unreadable or invalid.
    #[error("allow list {path}: {message}")]
    AllowList {
        /// The allow-list file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A listening address could not be bound.
    #[error("cannot listen on {addr} (is another process using the port?)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The Kafka producer could not be created.
    #[error("cannot create the Kafka producer for topic {topic:?}")]
    Producer {
        /// The topic it was for.
        topic: String,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A worker thread could not be started.
    #[error("cannot start a publisher thread")]
    Thread(#[source] std::io::Error),
}
