//! The sidecar's configuration: a TOML file, overridden by `FEATURELOG_SIDECAR__SECTION__KEY`
//! environment variables, validated before anything starts (`--check-config` runs just this).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use featurelog_kafka::KafkaConfig;
use serde::{Deserialize, Serialize};

use crate::SidecarError;

/// The prefix of environment overrides: `FEATURELOG_SIDECAR__PUBLISH__TOPIC=x` sets
/// `publish.topic`; single underscores stand for dashes (`QUEUE_CAPACITY` = `queue-capacity`).
pub const ENV_PREFIX: &str = "FEATURELOG_SIDECAR__";

/// The SETTINGS_MAX_HEADER_LIST_SIZE the sidecar advertises, to its clients and to the model
/// server: larger than any model server's default (gRPC's and hyper's are 16 KiB), so that
/// whatever the model server sends reaches the client as it is, and a request's oversized
/// metadata is refused for its own stream (`max-request-header-bytes`) instead of by the
/// HTTP/2 layer, which answers 431 over the limit and closes the whole connection at four
/// times it. It bounds what one header block may hold in memory.
pub(crate) const HEADER_LIST_BYTES: u32 = 1 << 20;

/// Whether the sidecar logs or only forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Forward every call and log allow-listed features.
    #[default]
    Log,
    /// Forward every call and log nothing (no Kafka connection is made).
    PassThrough,
}

/// The whole sidecar configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SidecarConfig {
    /// Where clients connect (gRPC over HTTP/2; cleartext unless `[tls]` is set).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// TLS on the client port, for clients that called a model server over TLS.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The model server that calls are forwarded to, as `http://host:port` (or `https://` for
    /// one that serves TLS, see `upstream-tls`).
    pub upstream: String,
    /// TLS to the model server, for `https://` upstreams (gRPC and REST): the CA that signed
    /// its certificate (the system's roots when omitted) and a client certificate if it asks
    /// for one.
    #[serde(default)]
    pub upstream_tls: Option<UpstreamTlsConfig>,
    /// The protocol's HTTP/REST binding beside gRPC, for clients that call the model server's
    /// HTTP port (`tritonclient.http`, KServe's REST client, plain HTTP). Off when omitted.
    #[serde(default)]
    pub rest: Option<RestConfig>,
    /// `log` (default) or `pass-through`.
    #[serde(default)]
    pub mode: Mode,
    /// Threads of the async runtime that proxies the calls (the publisher threads and
    /// librdkafka's are apart). One serves thousands of calls a second, and a call then never
    /// moves between threads: with two, each call was handed over once or more (futex and
    /// eventfd wake-ups), which cost about a quarter more CPU a call on a 2-core machine.
    #[serde(default = "default_worker_threads")]
    pub worker_threads: usize,
    /// A gRPC call whose metadata (its HTTP/2 header list, as RFC 9113 counts it) is larger is
    /// answered RESOURCE_EXHAUSTED by the sidecar, for that call alone, as gRPC servers answer
    /// metadata over their limit (16 KiB by default in gRPC's C core, in Triton and MLServer,
    /// and in hyper/tonic). Raise it with the model server's own limit.
    #[serde(default = "default_max_request_header_bytes")]
    pub max_request_header_bytes: usize,
    /// The name this sidecar writes into every record; defaults to `$HOSTNAME` (the pod name on
    /// Kubernetes), else "sidecar".
    #[serde(default)]
    pub instance: Option<String>,
    /// The allow-list file: which features of which models are logged. Relative paths are
    /// relative to this config file. Reloaded when it changes.
    pub allow_list: PathBuf,
    /// How often the allow-list file is checked for changes.
    #[serde(default = "default_reload_interval", with = "humantime_serde")]
    pub allow_list_reload_interval: Duration,
    /// How long a shutdown waits for calls in flight, then for the producer to flush.
    #[serde(default = "default_shutdown_timeout", with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// The metrics and health endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Where Kafka is. Required in `log` mode. The producer's defaults
    /// (`publish::PRODUCER_DEFAULTS`: idempotent, zstd level 1, 100 ms linger, murmur2
    /// partitioning as the Java client, 30 s message timeout) can all be overridden in
    /// `[kafka.properties]`.
    #[serde(default)]
    pub kafka: Option<KafkaConfig>,
    /// How records are published.
    #[serde(default)]
    pub publish: PublishConfig,
}

/// TLS on the client port. The files are checked for changes as often as the allow list, and
/// a change is taken without a restart once two checks read it unchanged (cert-manager and the
/// like renew certificates in place); one that does not load is refused with a log line and the
/// certificate in force stays.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain, PEM, leaf first. Relative to this config file.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates, PEM: when set, clients must present a certificate signed by one of
    /// them (mutual TLS).
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

/// TLS to an `https://` model server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// CA certificates, PEM, that the model server's certificate must chain to; the system's
    /// roots when omitted. Relative to this config file.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A client certificate chain, PEM, for a model server that requires one (mutual TLS).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// Its private key, PEM.
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// The REST proxy: every HTTP request to `listen` is forwarded to `upstream` unchanged, and
/// `POST /v2/models/{model}[/versions/{version}]/infer` calls are logged under the same allow
/// list as gRPC calls. Served over TLS too when `[tls]` is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RestConfig {
    /// Where REST clients connect (HTTP/1.1, or HTTP/2 with prior knowledge).
    pub listen: SocketAddr,
    /// The model server's HTTP port, as `http://host:port` (HTTP/1.1).
    pub upstream: String,
}

/// The HTTP endpoint for `/metrics`, `/healthz` and `/readyz`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address of the endpoint; omit the section to use 0.0.0.0:9464.
    pub listen: SocketAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 9464)),
        }
    }
}

/// How records reach Kafka.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PublishConfig {
    /// The topic FeatureLog records are published to (key = request id).
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Calls waiting to be turned into records; when full, new ones are dropped and counted.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
    /// Bytes of request and response bodies the queue may hold (the calls keep their bodies
    /// until a publisher thread is done with them); past it, new calls are dropped and counted
    /// like a full queue. Bounds the sidecar's memory when large calls arrive faster than they
    /// are decoded.
    #[serde(default = "default_queue_max_bytes")]
    pub queue_max_bytes: usize,
    /// Threads that decode calls and encode records, off the inference path.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Calls whose request or response body is larger are forwarded but not logged.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Where a call that could not be logged because of what its caller sent (a malformed
    /// body, tensors whose shape and data disagree, a body over `max-message-bytes`, ...) is
    /// described: a JSON record with the reason, the model, the request id and what was wrong,
    /// never the call's tensors or headers. The same default as the joiner's
    /// `input.dead-letter-topic`, so that one topic tells an operator about both. Empty: none.
    #[serde(default = "default_dead_letter_topic")]
    pub dead_letter_topic: String,
    /// At most this many dead letters a second (a burst of twice as many); the others are
    /// counted, not sent: a client sending nothing but bad calls must not turn the sidecar
    /// into a second firehose.
    #[serde(default = "default_dead_letters_per_second")]
    pub dead_letters_per_second: u32,
    /// The controller that lowers the logged fraction while Kafka deliveries fail.
    #[serde(default)]
    pub adaptive: AdaptiveConfig,
}

/// The controller that lowers the logged fraction while deliveries fail.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// Off keeps the fraction at 1.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How often delivery outcomes are looked at.
    #[serde(default = "default_adaptive_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// The lowest fraction the controller goes down to (a trickle that probes the broker).
    #[serde(default = "default_min_fraction")]
    pub min_fraction: f64,
    /// The fraction is multiplied by this after an interval with failures.
    #[serde(default = "default_decrease")]
    pub decrease_factor: f64,
    /// And raised by this after an interval with deliveries and no failures.
    #[serde(default = "default_increase")]
    pub increase_step: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: default_adaptive_interval(),
            min_fraction: default_min_fraction(),
            decrease_factor: default_decrease(),
            increase_step: default_increase(),
        }
    }
}

impl Default for PublishConfig {
    fn default() -> Self {
        Self {
            topic: default_topic(),
            queue_capacity: default_queue_capacity(),
            queue_max_bytes: default_queue_max_bytes(),
            workers: default_workers(),
            max_message_bytes: default_max_message_bytes(),
            dead_letter_topic: default_dead_letter_topic(),
            dead_letters_per_second: default_dead_letters_per_second(),
            adaptive: AdaptiveConfig::default(),
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 8001))
}
fn default_worker_threads() -> usize {
    1
}
fn default_max_request_header_bytes() -> usize {
    16 * 1024
}
fn default_reload_interval() -> Duration {
    Duration::from_secs(2)
}
fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(20)
}
fn default_topic() -> String {
    "featurelog.feature-log.v1".into()
}
fn default_queue_capacity() -> usize {
    10_000
}
fn default_queue_max_bytes() -> usize {
    256 * 1024 * 1024
}
fn default_workers() -> usize {
    1
}
fn default_max_message_bytes() -> usize {
    64 * 1024 * 1024
}
fn default_dead_letter_topic() -> String {
    "featurelog.dead-letter".into()
}
fn default_dead_letters_per_second() -> u32 {
    10
}
fn default_true() -> bool {
    true
}
fn default_adaptive_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_min_fraction() -> f64 {
    0.01
}
fn default_decrease() -> f64 {
    0.5
}
fn default_increase() -> f64 {
    0.1
}

impl SidecarConfig {
    /// Reads `path`, applies environment overrides and validates the result.
    pub fn load(path: &Path) -> Result<Self, SidecarError> {
        let text = std::fs::read_to_string(path).map_err(|e| SidecarError::Config {
            path: path.to_owned(),
            message: format!("cannot read it: {e}"),
        })?;
        let env =
            featurelog_ops::environment(ENV_PREFIX).map_err(|message| SidecarError::Config {
                path: path.to_owned(),
                message,
            })?;
        Self::from_toml_with_env(path, &text, env)
    }

    /// Parses `text` (the file at `path`) with overrides from `env`, then validates.
    pub fn from_toml_with_env(
        path: &Path,
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, SidecarError> {
        let err = |message: String| SidecarError::Config {
            path: path.to_owned(),
            message,
        };
        let env: Vec<(String, String)> = env.into_iter().collect();
        let mut config: SidecarConfig =
            featurelog_ops::extract_config(text, ENV_PREFIX, env.clone())
                .map_err(|e| err(featurelog_kafka::mask_secrets(&e, text, &env)))?;
        let base = path.parent().unwrap_or(Path::new("."));
        if config.allow_list.is_relative() {
            config.allow_list = base.join(&config.allow_list);
        }
        if let Some(tls) = &mut config.tls {
            for file in [
                Some(&mut tls.cert),
                Some(&mut tls.key),
                tls.client_ca.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                if file.is_relative() {
                    *file = base.join(&*file);
                }
            }
        }
        if let Some(tls) = &mut config.upstream_tls {
            for file in [tls.ca.as_mut(), tls.cert.as_mut(), tls.key.as_mut()]
                .into_iter()
                .flatten()
            {
                if file.is_relative() {
                    *file = base.join(&*file);
                }
            }
        }
        config.validate().map_err(err)?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        let http_or_https = |url: &str| {
            let uri: Option<http::Uri> = url.parse().ok();
            uri.is_some_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some()
            })
        };
        if !http_or_https(&self.upstream) {
            return Err(format!(
                "upstream {:?} must look like http://host:port (cleartext HTTP/2, the model server next to the sidecar) or https://host:port (TLS, see [upstream-tls])",
                self.upstream
            ));
        }
        if let Some(t) = &self.upstream_tls
            && t.cert.is_some() != t.key.is_some()
        {
            return Err("upstream-tls.cert and upstream-tls.key go together".into());
        }
        if let Some(rest) = &self.rest {
            if !http_or_https(&rest.upstream) {
                return Err(format!(
                    "rest.upstream {:?} must look like http://host:port or https://host:port (the model server's HTTP port)",
                    rest.upstream
                ));
            }
            if rest.listen.port() != 0
                && (rest.listen == self.listen || rest.listen == self.metrics.listen)
            {
                return Err(format!(
                    "rest.listen {} is also the gRPC or the metrics port: give it a port of its own",
                    rest.listen
                ));
            }
        }
        if self.mode == Mode::Log && self.kafka.is_none() {
            return Err(
                "mode is \"log\" but there is no [kafka] section with bootstrap-servers".into(),
            );
        }
        if let Some(kafka) = &self.kafka {
            kafka.check()?;
        }
        let p = &self.publish;
        featurelog_kafka::check_topic_name("publish.topic", &p.topic)?;
        if !p.dead_letter_topic.is_empty() {
            featurelog_kafka::check_topic_name("publish.dead-letter-topic", &p.dead_letter_topic)?;
            if p.dead_letter_topic == p.topic {
                return Err("publish.dead-letter-topic must differ from publish.topic: dead letters are JSON, and a joiner reading them as feature logs would dead-letter them in turn".into());
            }
        }
        if p.max_message_bytes == 0 {
            return Err("publish.max-message-bytes must be at least 1".into());
        }
        if self.max_request_header_bytes > HEADER_LIST_BYTES as usize {
            return Err(format!(
                "max-request-header-bytes is {}, over the {} bytes of metadata the sidecar takes in at all",
                self.max_request_header_bytes, HEADER_LIST_BYTES
            ));
        }
        if self.worker_threads == 0 {
            return Err("worker-threads must be at least 1".into());
        }
        if self.shutdown_timeout.is_zero() {
            return Err("shutdown-timeout must be longer than zero: calls in flight and the producer's flush need time at shutdown".into());
        }
        if p.queue_capacity == 0 || p.workers == 0 || p.queue_max_bytes == 0 {
            return Err("publish.queue-capacity, publish.queue-max-bytes and publish.workers must be at least 1".into());
        }
        let a = &p.adaptive;
        if !(a.min_fraction > 0.0 && a.min_fraction <= 1.0) {
            return Err("publish.adaptive.min-fraction must be in (0, 1]".into());
        }
        if !(a.decrease_factor > 0.0 && a.decrease_factor < 1.0) {
            return Err("publish.adaptive.decrease-factor must be in (0, 1)".into());
        }
        if !(a.increase_step > 0.0 && a.increase_step <= 1.0) {
            return Err("publish.adaptive.increase-step must be in (0, 1]".into());
        }
        if a.interval.is_zero() || self.allow_list_reload_interval.is_zero() {
            return Err("intervals must be longer than zero".into());
        }
        Ok(())
    }

    /// Whether a model server is reached over TLS (gRPC or REST), which is when
    /// `[upstream-tls]` is read.
    pub fn https_upstreams(&self) -> bool {
        std::iter::once(&self.upstream)
            .chain(self.rest.as_ref().map(|r| &r.upstream))
            .any(|u| u.starts_with("https://"))
    }

    /// The instance name written into records.
    pub fn instance_name(&self) -> String {
        self.instance
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "sidecar".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        upstream = "http://127.0.0.1:9001"
        allow-list = "allow.toml"
        [kafka]
        bootstrap-servers = "127.0.0.1:9092"
    "#;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<SidecarConfig, SidecarError> {
        SidecarConfig::from_toml_with_env(
            Path::new("/etc/featurelog/sidecar.toml"),
            text,
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }

    #[test]
    fn settings_that_could_only_fail_at_run_time_are_refused_at_load() {
        let refused = |text: &str, env: &[(&str, &str)], expected: &str| {
            let err = parse(text, env).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        };
        refused(
            MINIMAL,
            &[("FEATURELOG_SIDECAR__KAFKA__BOOTSTRAP_SERVERS", "")],
            "bootstrap-servers is empty",
        );
        refused(
            MINIMAL,
            &[("FEATURELOG_SIDECAR__SHUTDOWN_TIMEOUT", "0s")],
            "shutdown-timeout",
        );
        refused(
            MINIMAL,
            &[("FEATURELOG_SIDECAR__PUBLISH__MAX_MESSAGE_BYTES", "0")],
            "max-message-bytes",
        );
        refused(
            MINIMAL,
            &[("FEATURELOG_SIDECAR__PUBLISH__TOPIC", "feature logs")],
            "not a legal Kafka topic name",
        );
        refused(
            MINIMAL,
            &[(
                "FEATURELOG_SIDECAR__PUBLISH__DEAD_LETTER_TOPIC",
                "featurelog.feature-log.v1",
            )],
            "must differ from publish.topic",
        );
        refused(
            MINIMAL,
            &[(
                "FEATURELOG_SIDECAR__PUBLISH__DEAD_LETTER_TOPIC",
                "dead letters",
            )],
            "publish.dead-letter-topic",
        );
        let none = [("FEATURELOG_SIDECAR__PUBLISH__DEAD_LETTER_TOPIC", "")];
        assert!(parse(MINIMAL, &none).is_ok(), "an empty topic sends none");
        // A misspelt librdkafka property, and a secret quoted by the TOML parser: neither
        // message shows the value.
        let typo = format!("{MINIMAL}\n[kafka.properties]\n\"sasl.pasword\" = \"hunter2\"\n");
        refused(&typo, &[], "sasl.pasword");
        assert!(
            !parse(&typo, &[])
                .unwrap_err()
                .to_string()
                .contains("hunter2")
        );
        let unquoted =
            format!("{MINIMAL}\n[kafka.properties]\n\"sasl.password\" = hunter2secret\n");
        let err = parse(&unquoted, &[]).unwrap_err().to_string();
        assert!(!err.contains("hunter2secret"), "{err}");
    }

    #[test]
    fn environment_values_are_taken_as_the_field_needs_them() {
        let c = parse(
            MINIMAL,
            &[
                ("FEATURELOG_SIDECAR__INSTANCE", "7"),
                ("FEATURELOG_SIDECAR__PUBLISH__TOPIC", "2024"),
                ("FEATURELOG_SIDECAR__PUBLISH__QUEUE_CAPACITY", "5"),
                ("FEATURELOG_SIDECAR__KAFKA__PROPERTIES__LINGER_MS", "20"),
            ],
        )
        .unwrap();
        assert_eq!(c.instance.as_deref(), Some("7"));
        assert_eq!(c.publish.topic, "2024");
        assert_eq!(c.publish.queue_capacity, 5);
        let kafka = c.kafka.unwrap();
        assert_eq!(
            kafka.properties.get("linger.ms").map(String::as_str),
            Some("20")
        );
        let err = parse(
            MINIMAL,
            &[("FEATURELOG_SIDECAR__PUBLISH__QUEUE_CAPACITY", "lots")],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("FEATURELOG_SIDECAR__PUBLISH__QUEUE_CAPACITY"),
            "{err}"
        );
    }

    #[test]
    fn defaults_fill_what_is_left_out() {
        let c = parse(MINIMAL, &[]).unwrap();
        assert_eq!(c.listen.port(), 8001);
        assert_eq!(c.mode, Mode::Log);
        assert_eq!(c.publish.topic, "featurelog.feature-log.v1");
        assert_eq!(c.shutdown_timeout, Duration::from_secs(20));
        // Relative to the config file, not to wherever the process was started.
        assert_eq!(c.allow_list, Path::new("/etc/featurelog/allow.toml"));
    }

    #[test]
    fn the_rest_port_needs_an_http_upstream_and_a_port_of_its_own() {
        let rest = |listen: &str, upstream: &str| {
            parse(
                &format!("{MINIMAL}\n[rest]\nlisten = \"{listen}\"\nupstream = \"{upstream}\""),
                &[],
            )
        };
        let c = rest("127.0.0.1:8000", "http://127.0.0.1:9000").unwrap();
        assert_eq!(c.rest.unwrap().upstream, "http://127.0.0.1:9000");
        let err = rest("127.0.0.1:8000", "127.0.0.1:9000").unwrap_err();
        assert!(err.to_string().contains("rest.upstream"), "{err}");
        let err = rest("0.0.0.0:8001", "http://127.0.0.1:9000").unwrap_err();
        assert!(err.to_string().contains("port of its own"), "{err}");
        // Port 0 (any free port) is not a clash.
        assert!(rest("0.0.0.0:0", "http://a:1").is_ok());
        assert!(
            parse(MINIMAL, &[]).unwrap().rest.is_none(),
            "off unless set"
        );
    }

    #[test]
    fn environment_overrides_nested_keys_and_durations() {
        let c = parse(
            MINIMAL,
            &[
                ("FEATURELOG_SIDECAR__PUBLISH__TOPIC", "other"),
                ("FEATURELOG_SIDECAR__PUBLISH__QUEUE_CAPACITY", "5"),
                ("FEATURELOG_SIDECAR__SHUTDOWN_TIMEOUT", "3s"),
                ("FEATURELOG_SIDECAR__KAFKA__BOOTSTRAP_SERVERS", "k:1"),
                ("UNRELATED", "x"),
            ],
        )
        .unwrap();
        assert_eq!(c.publish.topic, "other");
        assert_eq!(c.publish.queue_capacity, 5);
        assert_eq!(c.shutdown_timeout, Duration::from_secs(3));
        assert_eq!(c.kafka.unwrap().bootstrap_servers, "k:1");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_with_the_file_named() {
        let err = parse(&format!("{MINIMAL}\nlisten-addr = \"x\""), &[]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("sidecar.toml") && msg.contains("listen-addr"),
            "{msg}"
        );

        let err = parse(&MINIMAL.replace("http://", "grpc://"), &[]).unwrap_err();
        assert!(err.to_string().contains("http://host:port"), "{err}");

        let no_kafka = "upstream = \"http://a:1\"\nallow-list = \"a.toml\"";
        assert!(
            parse(no_kafka, &[])
                .unwrap_err()
                .to_string()
                .contains("[kafka]")
        );
        let pass = format!("{no_kafka}\nmode = \"pass-through\"");
        assert_eq!(parse(&pass, &[]).unwrap().mode, Mode::PassThrough);
    }
}
