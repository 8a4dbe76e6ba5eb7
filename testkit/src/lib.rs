//! Helpers for tests that need a real Kafka broker.
//!
//! The broker comes from `FEATURELOG_KAFKA` (bootstrap servers), which `scripts/test.sh` sets
//! after starting one with `scripts/kafka.sh`. Without it a test is skipped with a loud message,
//! except under `CI=true`, where it fails: CI must never pass by skipping the Kafka path.
//!
//! Every test creates its own topics with [`TestKafka::unique_topic`], so tests run in parallel
//! and can be rerun against the same broker.
#![allow(clippy::panic, clippy::expect_used)] // A failed precondition is a failed test here.

pub mod broker;
pub mod ports;
pub mod proxy;
pub mod s3;
pub mod serving;

use std::time::Duration;

use featurelog_kafka::KafkaConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureProducer;
pub use s3::{TestS3, s3};

/// The environment variable that names the test broker.
pub const KAFKA_ENV: &str = "FEATURELOG_KAFKA";

/// A handle on the test broker.
#[derive(Debug, Clone)]
pub struct TestKafka {
    /// How to reach it.
    pub config: KafkaConfig,
}

/// A message read by [`TestKafka::read`].
#[derive(Debug, Clone)]
pub struct Received {
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Received {
    /// The key as text.
    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(self.key.as_deref().unwrap_or_default()).into_owned()
    }

    /// The value of the first header named `key`, as text.
    pub fn header(&self, key: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes; returns its last answer.
/// For waiting on an observable state, never as a stand-in for one.
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True when running under CI, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The test broker, or `None` (after saying so on stderr) when none is configured outside CI.
///
/// # Panics
/// Under `CI=true` when `FEATURELOG_KAFKA` is not set.
pub fn kafka(test: &str) -> Option<TestKafka> {
    match std::env::var(KAFKA_ENV) {
        Ok(bootstrap) if !bootstrap.trim().is_empty() => Some(TestKafka {
            config: KafkaConfig::new(bootstrap.trim()),
        }),
        _ if in_ci() => panic!(
            "{test} needs a Kafka broker but {KAFKA_ENV} is not set; run the tests with scripts/test.sh"
        ),
        _ => {
            eprintln!(
                "SKIPPED {test}: it needs a real Kafka broker. Start one with `scripts/kafka.sh start` \
                 and set {KAFKA_ENV}=127.0.0.1:9092 (scripts/test.sh does both)."
            );
            None
        }
    }
}

impl TestKafka {
    /// Creates a topic named `<prefix>-<random>` and waits until it can be used.
    ///
    /// # Panics
    /// When the broker cannot be reached or refuses: the test cannot run.
    pub async fn unique_topic(&self, prefix: &str, partitions: i32) -> String {
        let topic = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        featurelog_kafka::admin::ensure_topic(
            &self.config,
            &topic,
            partitions,
            1,
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|err| panic!("test broker {:?}: {err}", self.config.bootstrap_servers));
        topic
    }

    /// A unique consumer group id.
    pub fn unique_group(&self, prefix: &str) -> String {
        format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
    }

    /// A producer that waits for the full ISR, as the sidecar's does.
    pub fn producer(&self) -> FutureProducer {
        self.config
            .client_config(&[("acks", "all"), ("message.timeout.ms", "30000")])
            .create()
            .expect("producer for the test broker")
    }

    /// Reads `count` messages from `topic` (from the beginning), waiting up to `timeout` for them.
    ///
    /// # Panics
    /// When fewer arrive in time.
    pub async fn read(&self, topic: &str, count: usize, timeout: Duration) -> Vec<Received> {
        use rdkafka::Message as _;
        use rdkafka::message::Headers as _;
        let consumer = self.consumer(topic);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let message = tokio::time::timeout_at(deadline, consumer.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "only {} of {count} messages on {topic} within {timeout:?}",
                        out.len()
                    )
                })
                .expect("consuming");
            out.push(Received {
                key: message.key().map(<[u8]>::to_vec),
                payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                partition: message.partition(),
                offset: message.offset(),
                headers: message.headers().map_or_else(Vec::new, |h| {
                    h.iter()
                        .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                }),
            });
        }
        out
    }

    /// A consumer in a fresh group, reading `topic` from the beginning.
    pub fn consumer(&self, topic: &str) -> StreamConsumer {
        let consumer: StreamConsumer = self
            .config
            .client_config(&[
                ("group.id", &self.unique_group("test")),
                ("auto.offset.reset", "earliest"),
                ("enable.auto.commit", "false"),
            ])
            .create()
            .expect("consumer for the test broker");
        consumer.subscribe(&[topic]).expect("subscribe");
        consumer
    }
}

/// Runs the test client `tests/clients/<script>` with `python3`, `args` and `env`, and reads
/// what it printed as JSON; a run that fails fails the test with its stderr.
/// (`scripts/test.sh` installs `tests/requirements.txt`.)
pub fn python_json<S: AsRef<std::ffi::OsStr>>(
    script: &str,
    args: &[S],
    env: &[(&str, String)],
) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/clients")
        .join(script);
    let out = std::process::Command::new("python3")
        .arg(&path)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("python3 runs (scripts/test.sh installs tests/requirements.txt)");
    assert!(
        out.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// [`python_json`] from async code, off the runtime's threads.
pub async fn python_json_async(script: &str, args: Vec<String>) -> serde_json::Value {
    let script = script.to_owned();
    tokio::task::spawn_blocking(move || python_json(&script, &args, &[]))
        .await
        .expect("the python client's thread")
}
