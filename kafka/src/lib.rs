//! Kafka plumbing that the sidecar, the joiner, the demo and the tests share.
//!
//! - [`KafkaConfig`]: how every featurelog part is told where Kafka is, with raw librdkafka
//!   settings passed through.
//! - [`admin`]: creating topics and waiting until they can be used.
//! - [`txn`]: aborting a `BaseProducer`'s transaction without waiting out its timeout.
//! - [`DevBroker`]: librdkafka's in-process mock cluster, for trying featurelog with no Kafka
//!   installed. Never for production, and never the proof that the Kafka path works: the tests
//!   run against a real broker (`scripts/kafka.sh`).

pub mod admin;
mod config;
mod dev_broker;
mod error;
pub mod txn;

pub use config::{KafkaConfig, check_topic_name, mask_secrets};
pub use dev_broker::DevBroker;
pub use error::KafkaError;
