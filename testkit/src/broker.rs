//! A Kafka broker of a test's own, for tests that stop and restart the broker in the middle of
//! traffic (which they must not do to the broker that every other test shares). It runs the same
//! `scripts/kafka.sh` on a free port pair.
#![allow(clippy::panic, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use featurelog_kafka::KafkaConfig;

/// A dedicated broker; stopped when dropped.
#[derive(Debug)]
pub struct DedicatedBroker {
    port: u16,
    /// How to reach it.
    pub config: KafkaConfig,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka.sh")
}

/// A port whose successor is free too (the controller takes port + 1).
fn free_port_pair() -> u16 {
    for _ in 0..50 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair");
}

impl DedicatedBroker {
    /// Starts one on fresh storage.
    pub fn start() -> Self {
        let port = free_port_pair();
        let broker = Self {
            port,
            config: KafkaConfig::new(format!("127.0.0.1:{port}")),
        };
        broker.run("start", false);
        broker
    }

    fn run(&self, action: &str, keep_data: bool) {
        let status = Command::new("bash")
            .arg(script())
            .arg(action)
            .env("FEATURELOG_KAFKA_PORT", self.port.to_string())
            .env(
                "FEATURELOG_KAFKA_KEEP_DATA",
                if keep_data { "1" } else { "0" },
            )
            .env("KAFKA_HEAP_OPTS", "-Xms128m -Xmx512m")
            .status()
            .expect("running scripts/kafka.sh");
        assert!(
            status.success(),
            "scripts/kafka.sh {action} on port {} failed",
            self.port
        );
    }

    /// Stops it (cleanly).
    pub fn stop(&self) {
        self.run("stop", false);
    }

    /// Starts it again on the data it had.
    pub fn restart(&self) {
        self.run("start", true);
    }
}

impl Drop for DedicatedBroker {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .env("FEATURELOG_KAFKA_PORT", self.port.to_string())
            .status();
        // Its data and log go with it; the jar cache stays for the next test.
        let cache = std::env::var_os("FEATURELOG_KAFKA_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/kafka"));
        let _ = std::fs::remove_dir_all(cache.join(format!("run-{}", self.port)));
    }
}
