//! The errors of this crate.

use std::time::Duration;

/// What went wrong talking to Kafka, with the topic or address it concerned.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// librdkafka refused the client settings (an unknown or malformed property).
    #[error("invalid Kafka client settings for {bootstrap}")]
    Client {
        /// The bootstrap servers the client was for.
        bootstrap: String,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The broker refused to create a topic.
    #[error("could not create topic {topic:?} ({partitions} partitions): {reason}")]
    CreateTopic {
        /// The topic.
        topic: String,
        /// The partition count asked for.
        partitions: i32,
        /// The broker's reason.
        reason: String,
    },
    /// A topic did not become usable (leaders for every partition) in time.
    #[error(
        "topic {topic:?} on {bootstrap} was not ready after {waited:?}: is the broker up and reachable, and do the security settings (`kafka.properties`) match its listener? ({last_error})"
    )]
    TopicNotReady {
        /// The topic.
        topic: String,
        /// The bootstrap servers.
        bootstrap: String,
        /// How long we waited.
        waited: Duration,
        /// The last thing that went wrong while waiting.
        last_error: String,
    },
    /// The cluster did not describe a topic's configuration.
    #[error("could not read the configuration of topic {topic:?}: {reason}")]
    DescribeTopic {
        /// The topic.
        topic: String,
        /// The broker's or the client's reason.
        reason: String,
    },
    /// The embedded dev broker could not start.
    #[error("could not start the embedded dev broker")]
    DevBroker(#[source] rdkafka::error::KafkaError),
    /// A blocking Kafka call's task failed to run to completion.
    #[error("a Kafka metadata call was cancelled or panicked")]
    Join(#[from] tokio::task::JoinError),
}
