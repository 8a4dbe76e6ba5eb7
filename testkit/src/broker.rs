//! A Kafka broker of a test's own, for tests that stop and restart the broker in the middle of
//! traffic (which they must not do to the broker that every other test shares), or that need a
//! SASL_SSL listener. It runs the same `scripts/kafka.sh` on free ports.
#![allow(clippy::panic, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use featurelog_kafka::KafkaConfig;

/// A dedicated broker; stopped when dropped.
#[derive(Debug)]
pub struct DedicatedBroker {
    port: u16,
    secure_port: Option<u16>,
    /// How to reach it (plaintext).
    pub config: KafkaConfig,
    /// How to reach its SASL_SSL listener, if it has one: TLS checked against the broker's
    /// certificate, SCRAM-SHA-512 with the user scripts/kafka.sh creates.
    pub secure: Option<KafkaConfig>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka.sh")
}

/// A port whose successor is free too (the controller takes port + 1), both below the
/// ephemeral range: the broker must get them back when it restarts (see [`crate::ports`]).
fn free_port_pair() -> u16 {
    crate::ports::restartable_ports(2)
}

impl DedicatedBroker {
    /// Starts one on fresh storage.
    pub fn start() -> Self {
        let port = free_port_pair();
        let broker = Self {
            port,
            secure_port: None,
            config: KafkaConfig::new(format!("127.0.0.1:{port}")),
            secure: None,
        };
        broker.run("start", false);
        broker
    }

    /// Starts one on fresh storage with a SASL_SSL listener beside the plaintext one.
    pub fn start_secure() -> Self {
        let port = free_port_pair();
        let secure_port = crate::ports::restartable_ports(1);
        let mut secure = KafkaConfig::new(format!("127.0.0.1:{secure_port}"));
        let ca = run_dir(port).join("secure/ca.pem");
        for (key, value) in [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "SCRAM-SHA-512"),
            ("sasl.username", "featurelog"),
            ("sasl.password", "featurelog-secret"),
            ("ssl.ca.location", ca.to_str().expect("utf-8 path")),
        ] {
            secure.properties.insert(key.into(), value.into());
        }
        let broker = Self {
            port,
            secure_port: Some(secure_port),
            config: KafkaConfig::new(format!("127.0.0.1:{port}")),
            secure: Some(secure),
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
            .env(
                "FEATURELOG_KAFKA_SASL_SSL_PORT",
                self.secure_port.map(|p| p.to_string()).unwrap_or_default(),
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
        let _ = std::fs::remove_dir_all(run_dir(self.port));
    }
}

/// Where scripts/kafka.sh keeps the data, log and certificate of the broker on `port`.
fn run_dir(port: u16) -> PathBuf {
    let cache = std::env::var_os("FEATURELOG_KAFKA_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/kafka"));
    cache.join(format!("run-{port}"))
}
