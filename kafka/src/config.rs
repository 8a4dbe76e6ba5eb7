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

impl KafkaConfig {
    /// Checks what can be checked without a broker: that there are bootstrap servers, and that
    /// librdkafka knows every raw property and accepts its value. A typo found here is a
    /// configuration error at start-up (and in `--check-config`) instead of a failure when the
    /// first client is created. The message never holds a value that could be a secret.
    pub fn check(&self) -> Result<(), String> {
        if self.bootstrap_servers.trim().is_empty() {
            return Err(
                "kafka.bootstrap-servers is empty: name at least one broker as host:port".into(),
            );
        }
        match self.client_config(&[]).create_native_config() {
            Ok(_) => Ok(()),
            Err(rdkafka::error::KafkaError::ClientConfig(_, description, key, value)) => {
                // librdkafka quotes the value it refused; for a misspelt key the value may be
                // a password, so it is masked whenever the key is unknown or could be secret.
                let unknown = description.starts_with("No such configuration property");
                let description = if (unknown || is_secret(&key)) && !value.is_empty() {
                    description.replace(&value, "***")
                } else {
                    description
                };
                Err(format!(
                    "[kafka.properties] {key:?}: {description} (see librdkafka's CONFIGURATION.md)"
                ))
            }
            Err(e) => Err(format!("[kafka.properties]: {e}")),
        }
    }
}

/// `message` with the values of every setting that could be a secret masked: those given in
/// `text` (a TOML file: a `key = value` line whose key looks secret) and in `env` (a variable
/// whose name looks secret). For the errors of config parsers, which quote the offending line
/// or value.
pub fn mask_secrets(message: &str, text: &str, env: &[(String, String)]) -> String {
    let mut values: Vec<String> = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if is_secret(key.trim().trim_matches('"')) {
            values.push(value.trim().trim_matches('"').to_owned());
            values.push(value.trim().to_owned());
        }
    }
    for (key, value) in env {
        if is_secret(&key.replace("__", ".").replace('_', ".")) {
            values.push(value.clone());
        }
    }
    // Longest first, so that a value containing another is masked whole.
    values.retain(|v| v.len() >= 3);
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut out = message.to_owned();
    for value in values {
        out = out.replace(&value, "***");
    }
    out
}

/// Checks that `name` is a legal Kafka topic name (what the broker would refuse at run time):
/// 1 to 249 of `a-z A-Z 0-9 . _ -`, and neither `.` nor `..`. `what` names the setting.
pub fn check_topic_name(what: &str, name: &str) -> Result<(), String> {
    let legal = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if name.is_empty() || name.len() > 249 || !legal || name == "." || name == ".." {
        return Err(format!(
            "{what} {name:?} is not a legal Kafka topic name: use 1 to 249 of the characters a-z A-Z 0-9 . _ -"
        ));
    }
    Ok(())
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
    fn unknown_or_refused_properties_are_config_errors_that_show_no_secret() {
        let mut kafka = KafkaConfig::new("b:9092");
        assert!(kafka.check().is_ok());
        kafka
            .properties
            .insert("sasl.pasword".into(), "hunter2".into());
        let err = kafka.check().unwrap_err();
        assert!(err.contains("sasl.pasword"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        kafka.properties.clear();
        kafka.properties.insert("acks".into(), "some".into());
        assert!(kafka.check().unwrap_err().contains("acks"));
        assert!(KafkaConfig::new(" ").check().is_err());
    }

    #[test]
    fn config_errors_are_masked_where_they_quote_a_secret() {
        let text = "[kafka.properties]\n\"sasl.password\" = hunter2secret\n\"acks\" = \"all\"\n";
        let env = vec![(
            "FEATURELOG_JOIN__OUTPUT__OBJECT_STORE__OPTIONS__AWS_SECRET_ACCESS_KEY".to_string(),
            "1234567890".to_string(),
        )];
        let message =
            "10 | \"sasl.password\" = hunter2secret\nfound unsigned int `1234567890` at all";
        let masked = mask_secrets(message, text, &env);
        assert!(!masked.contains("hunter2secret"), "{masked}");
        assert!(!masked.contains("1234567890"), "{masked}");
        assert!(masked.contains("at all"), "{masked}");
    }

    #[test]
    fn topic_names_kafka_would_refuse_are_refused() {
        assert!(check_topic_name("t", "featurelog.feature-log.v1").is_ok());
        for bad in ["", "my group", "a/b", ".", "..", &"x".repeat(250)] {
            assert!(check_topic_name("t", bad).is_err(), "{bad:?}");
        }
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
