//! [`KafkaConfig`]: the `kafka` section that every featurelog config file shares.

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};

/// Where Kafka is and how to talk to it.
///
/// ```toml
/// [kafka]
/// bootstrap-servers = "broker-1:9092,broker-2:9092"
/// [kafka.properties]
/// "security.protocol" = "SASL_SSL"
/// "sasl.mechanism" = "PLAIN"
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list of brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// Raw librdkafka settings (see librdkafka's CONFIGURATION.md), passed through unchanged.
    /// They override featurelog's own defaults, so anything featurelog sets can be tuned here.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

impl KafkaConfig {
    /// A config with just the bootstrap servers.
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        Self {
            bootstrap_servers: bootstrap_servers.into(),
            properties: BTreeMap::new(),
        }
    }

    /// A librdkafka client config: `defaults` first (the caller's choices for its role), then
    /// the bootstrap servers, then the user's raw properties, which win.
    pub fn client_config(&self, defaults: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        config.set("bootstrap.servers", &self.bootstrap_servers);
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }
}

/// Settings whose values must not reach logs.
fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "token",
        "key.pem",
        "oauthbearer.config",
    ]
    .iter()
    .any(|s| key.contains(s))
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masked: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret(k) { "***" } else { v.as_str() }))
            .collect();
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("properties", &masked)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_properties_override_defaults() {
        let mut kafka = KafkaConfig::new("b:9092");
        kafka
            .properties
            .insert("compression.type".into(), "lz4".into());
        let config = kafka.client_config(&[("compression.type", "zstd"), ("acks", "all")]);
        assert_eq!(config.get("compression.type"), Some("lz4"));
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("bootstrap.servers"), Some("b:9092"));
    }

    #[test]
    fn secrets_are_masked_when_printed() {
        let mut kafka = KafkaConfig::new("b:9092");
        kafka
            .properties
            .insert("sasl.password".into(), "hunter2".into());
        kafka
            .properties
            .insert("security.protocol".into(), "SASL_SSL".into());
        let printed = format!("{kafka:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("SASL_SSL"), "{printed}");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<KafkaConfig>(
            r#"{"bootstrap-servers": "b:9092", "bootstrap_servers": "x"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
