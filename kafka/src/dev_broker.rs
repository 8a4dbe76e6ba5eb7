//! [`DevBroker`]: librdkafka's in-process mock cluster, reachable over TCP by any Kafka client.
//!
//! It keeps everything in memory, has no durability and forgets all data when dropped. It exists
//! so that `featurelog demo` and `featurelog dev-broker` run on a machine with no Kafka; tests of
//! the Kafka path use a real broker.

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::KafkaError;

/// A running in-process broker. Dropping it stops it.
pub struct DevBroker {
    cluster: MockCluster<'static, DefaultProducerContext>,
}

impl DevBroker {
    /// Starts a mock cluster of `brokers` brokers on loopback ports chosen by the OS.
    pub fn start(brokers: i32) -> Result<Self, KafkaError> {
        let cluster = MockCluster::new(brokers).map_err(KafkaError::DevBroker)?;
        Ok(Self { cluster })
    }

    /// The bootstrap servers, `host:port,...`, to give to clients.
    pub fn bootstrap_servers(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    /// Creates a topic with `partitions` partitions (replication factor 1).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        self.cluster
            .create_topic(topic, partitions, 1)
            .map_err(|source| KafkaError::CreateTopic {
                topic: topic.to_owned(),
                partitions,
                reason: source.to_string(),
            })
    }
}
