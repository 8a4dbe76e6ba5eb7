//! Why the joiner stops: [`JoinError`], the one error of both stages and of start-up, each
//! variant's message saying what to do about it.

use rdkafka::error::KafkaError as RdKafkaError;

use crate::sink::SinkError;

/// Why the joiner stopped.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// Topic administration failed.
    #[error(transparent)]
    Kafka(#[from] featurelog_kafka::KafkaError),
    /// A Kafka client failed.
    #[error("{what}: {source}")]
    Client {
        /// What the client was doing.
        what: &'static str,
        /// librdkafka's error.
        #[source]
        source: RdKafkaError,
    },
    /// The feature-log topic is missing.
    #[error(
        "the feature-log topic {0:?} (input.features-topic) does not exist; create it with as many partitions as the load needs: the sidecar publishes to it but does not create it"
    )]
    NoTopic(String),
    /// An events topic is missing.
    #[error(
        "the events topic {0:?} (input.events-topic) does not exist; the app that publishes impressions and clicks owns it and must create it (neither the sidecar nor the joiner does), or fix the name"
    )]
    NoEventsTopic(String),
    /// The feature-log topic's partition count is not the dataset's.
    #[error(
        "topic {topic:?} has {found} partitions, but the dataset was written with {recorded}: a dataset is tied to its partition count (every task's checkpoint holds offsets of its partitions, and requests move between partitions when the count changes), so joining on would silently lose the rows of every request that moved. To use the new count, run a new `group` into a new `output.path` (README, \"Scaling out\")"
    )]
    PartitionsChanged {
        /// The feature-log topic.
        topic: String,
        /// The count the dataset was written with.
        recorded: i32,
        /// The topic's count now.
        found: i32,
    },
    /// `input.events-topic` is not the list the dataset was written with, followed by more.
    #[error(
        "input.events-topic is [{configured}], but this dataset's checkpoints were written with [{recorded}]: topics may be appended to the list, never removed or reordered (their places in it number the sources of the events' watermark in every checkpoint, and a source that no longer reports would hold every window open). Restore the list (append new topics at its end), or run a new `group` into a new `output.path`"
    )]
    EventsTopicsChanged {
        /// The list recorded, joined by ", ".
        recorded: String,
        /// The list configured, joined by ", ".
        configured: String,
    },
    /// `output.partition-by-model` is not the setting the dataset was written with.
    #[error(
        "output.partition-by-model is {}, but the dataset {path} was written with {recorded}: one dataset has one layout (its completeness markers, late area and every reader's paths follow it). Set `output.partition-by-model = {recorded}`, or write the other layout into a new `output.path` with a new `group`",
        !recorded
    )]
    LayoutChanged {
        /// The dataset.
        path: String,
        /// The setting it was written with.
        recorded: bool,
    },
    /// The dataset was written in the other `output.format`.
    #[error(
        "output.format is not {recorded:?}, but the dataset {path} was written as {recorded:?}: one dataset has one format (a Delta table begun on a Parquet dataset would lack every row written before it; one no longer committed to would silently stop growing). Set `output.format = {recorded:?}`, or write the other format into a new `output.path` with a new `group`"
    )]
    FormatChanged {
        /// The dataset.
        path: String,
        /// The format it was written in.
        recorded: &'static str,
    },
    /// The repartition topic disagrees with the feature-log topic.
    #[error(
        "topic {topic:?} has {found} partitions but {features:?} has {expected}: if this group has never written a dataset, delete {topic:?} (the joiner recreates it); otherwise use another group"
    )]
    Partitions {
        /// The repartition topic.
        topic: String,
        /// The feature-log topic.
        features: String,
        /// Its partitions.
        expected: i32,
        /// The repartition topic's.
        found: i32,
    },
    /// The repartition topic holds records routed for another dataset: the group was used
    /// with another `output.path` (or the dataset was deleted and begun again).
    #[error(
        "partition {} of the repartition topic {:?} holds, at offset {}, events routed for another dataset (id {}), but this joiner writes the dataset at {} (id {}): group {:?} was used with another output.path. A group serves one dataset: its repartition topic holds that dataset's events and progress, and its router resumes where that dataset's left off, so joining on would lose rows. To begin a new dataset, give it a new `group`; to go on with the old one, set `output.path` back to it",
        .0.partition, .0.topic, .0.offset, .0.found, .0.path, .0.expected, .0.group
    )]
    OtherDataset(Box<OtherDataset>),
    /// The router's group has committed an offset for another dataset: the group was used
    /// with another `output.path`, and the router would resume where that dataset's left off.
    #[error(
        "the router of group {:?} has committed offset {} of partition {} of the events topic {:?} for another dataset (id {}), but this joiner writes the dataset at {} (id {}): the group was used with another output.path. The router would resume reading events where that dataset's left off, so the new dataset would lack every event before them. To begin a new dataset, give it a new `group`; to go on with the old one, set `output.path` back to it",
        .0.group, .0.offset, .0.partition, .0.topic, .0.found, .0.path, .0.expected
    )]
    RouterOtherDataset(Box<OtherDataset>),
    /// The group has committed an offset beyond the dataset's checkpoint: it was used with
    /// another `output.path` (or the dataset was deleted, or restored from an older copy).
    #[error(
        "group {group:?} has committed offset {committed} of partition {partition} of {topic:?}, but the dataset at {path} is checkpointed only to {checkpoint} there: the group was used with another output.path (or this dataset was deleted, or restored from an older copy). The joiner starts each partition at the group's offset, so joining on would skip every record before it. To begin a new dataset, give it a new `group`; to go on with the old one, set `output.path` back to it"
    )]
    GroupAhead {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The group's committed offset.
        committed: i64,
        /// The dataset's checkpointed offset (0 without a checkpoint).
        checkpoint: i64,
        /// The dataset.
        path: String,
    },
    /// `input.events-partitioning = "by-request-id"`, but the events topic cannot be
    /// partitioned like the feature-log topic.
    #[error(
        "`input.events-partitioning = \"by-request-id\"` needs the events topic {events:?} to have as many partitions as the feature-log topic {features:?} ({expected}), but it has {found}: give the topics the same partition count (apps must key events by request id with the murmur2 partitioner), or set `input.events-partitioning = \"any\"` so that the joiner repartitions the events itself"
    )]
    NotCoPartitioned {
        /// The events topic.
        events: String,
        /// The feature-log topic.
        features: String,
        /// Its partitions.
        expected: i32,
        /// The events topic's.
        found: i32,
    },
    /// A task's checkpoint was written with the other `input.events-partitioning`: its events
    /// offset belongs to another topic.
    #[error(
        "task {task}: the dataset's checkpoints were written with `input.events-partitioning = \"{written}\"`, this process runs with \"{configured}\": their events offsets are in different topics. Keep the setting the dataset was written with, or start a new dataset (another output.path and group)"
    )]
    PartitioningChanged {
        /// The task.
        task: String,
        /// The setting the checkpoint was written with.
        written: &'static str,
        /// The configured one.
        configured: &'static str,
    },
    /// librdkafka gave no queue of its own for a partition the join stage reads.
    #[error(
        "librdkafka gave the join consumer no queue of its own for partition {partition} of topic {topic:?}; a topic name must not hold a NUL byte"
    )]
    PartitionQueue {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// A consumer hit an error librdkafka cannot recover from.
    #[error(
        "{what}: fatal Kafka error: {reason}. If it says the instance id was fenced, another live process of this group runs with the same `instance`: give each process its own"
    )]
    Fatal {
        /// Which consumer.
        what: &'static str,
        /// librdkafka's reason.
        reason: String,
    },
    /// The group coordinator fenced a static member's consumer (FENCED_INSTANCE_ID, fatal to
    /// librdkafka). Another live process with the same `instance` does that, but so does
    /// librdkafka itself around a broker outage: an offset commit queued before a session
    /// timeout goes out afterwards with the reset member id (librdkafka's PR 5585), or a
    /// JoinGroup retried after its answer was lost registers the instance twice. The stage
    /// starts again with a new consumer; fenced again and again, the process stops with
    /// [`JoinError::Fatal`].
    #[error("{what}: fenced by the group coordinator ({reason}); starting the stage again")]
    Fenced {
        /// Which consumer.
        what: &'static str,
        /// librdkafka's reason.
        reason: String,
    },
    /// The dataset failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// A stage panicked: a bug. The process stops (the join stage committed what it had) so that
    /// a supervisor restarts it instead of it running on with that stage gone.
    #[error("the {stage} stopped on a bug (please report it): {message}")]
    Panicked {
        /// Which stage.
        stage: &'static str,
        /// The panic's message.
        message: String,
    },
    /// A stage's thread could not be started (the process is out of threads or memory).
    #[error("the {stage} could not start its thread: {source}")]
    Thread {
        /// Which stage.
        stage: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The metrics endpoint could not listen.
    #[error("cannot listen on {addr} for /metrics (is another process using the port?)")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `join.held-logs = "topic"`, but the feature-log topic may delete a held log before a
    /// restore reads it back.
    #[error(
        "feature-log topic {topic:?} may delete a held log before a restore reads it back ({found}): `join.held-logs = \"topic\"` needs retention.ms >= {needed_ms} (features-wait + label-window + max-out-of-orderness + 1 day), retention.bytes = -1 and no compaction. Raise the topic's retention (kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config retention.ms={needed_ms}), or set `join.held-logs` to \"state-files\" or \"auto\""
    )]
    Retention {
        /// The feature-log topic.
        topic: String,
        /// Its retention settings.
        found: String,
        /// The retention needed, in milliseconds.
        needed_ms: u128,
    },
    /// A task's state snapshot could not be read.
    #[error("task {task}: state snapshot {path}: {message}")]
    Restore {
        /// The task.
        task: String,
        /// The snapshot.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Wraps a librdkafka error as [`JoinError::Client`], saying what the client was doing.
pub(super) fn client(what: &'static str) -> impl FnOnce(RdKafkaError) -> JoinError {
    move |source| JoinError::Client { what, source }
}

/// Where another dataset's id was found: on a record of the repartition topic
/// ([`JoinError::OtherDataset`]), or on an offset the router's group committed
/// ([`JoinError::RouterOtherDataset`]).
#[derive(Debug)]
pub struct OtherDataset {
    /// The group.
    pub group: String,
    /// The repartition topic, or the events topic of a router offset.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record's offset, or the committed offset.
    pub offset: i64,
    /// The other dataset's id.
    pub found: String,
    /// The dataset this joiner writes.
    pub path: String,
    /// Its id.
    pub expected: String,
}
