//! The operator's HTTP endpoint of every featurelog service: `/metrics` (Prometheus text
//! format, rendered by the service), `/healthz` (the process is up) and `/readyz` (the service
//! does its work; 503 while starting or shutting down). Also the layering of every service's
//! configuration: a TOML file under environment overrides.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A TOML config with `PREFIX` + `SECTION__KEY` environment overrides on top: sections are
/// separated by `__` and single underscores stand for dashes, so
/// `FEATURELOG_SIDECAR__PUBLISH__QUEUE_CAPACITY=5` sets `publish.queue-capacity`.
///
/// The free-form tables whose keys are another system's setting names (`[kafka.properties]`,
/// `[output.object-store.options]`) keep that system's spelling: the rest of the variable's
/// name after the table is one key, lower-cased, with underscores kept for object_store
/// (`..._OPTIONS__AWS_ENDPOINT` sets `aws_endpoint`) and turned into dots for librdkafka
/// (`..._PROPERTIES__SASL_PASSWORD` sets `sasl.password`). Such an entry replaces the file's
/// entry of the same key, and its value is always text.
///
/// Other values are typed as TOML-like values here (`5`, `true`, `[a, b]`; `"7"` quoted for
/// the text 7), so a text field refuses an unquoted `7`: [`extract_config`] reads the same
/// layers so that every field takes the value the way it needs it, and is what services should
/// call. Errors about a value from the environment name its variable. The environment is
/// passed in (not read here) so that tests stay hermetic; variables are applied in the order
/// of their names.
pub fn layered_config(
    text: &str,
    prefix: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> figment::Figment {
    layered(text, prefix, env, Values::Typed)
}

/// The process's environment, for [`extract_config`]: `std::env::vars` panics on a variable
/// whose name or value is not UTF-8, and an operator's environment may hold one that has
/// nothing to do with featurelog. Such variables are left out, unless their name starts with
/// `prefix` (one of ours that cannot be read as text): that is an error naming it.
pub fn environment(prefix: &str) -> Result<Vec<(String, String)>, String> {
    environment_from(std::env::vars_os(), prefix)
}

fn environment_from(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    prefix: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (name, value) in vars {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => out.push((name, value)),
            (Ok(name), Err(_)) if name.starts_with(prefix) => {
                return Err(format!(
                    "environment variable {name}: its value is not UTF-8 text"
                ));
            }
            (Err(name), _) if name.to_string_lossy().starts_with(prefix) => {
                return Err(format!(
                    "environment variable {}: its name is not UTF-8 text",
                    name.to_string_lossy()
                ));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Extracts a `T` from `text` under the environment overrides of [`layered_config`], with every
/// environment value taken as the text it is and converted only when its field asks for
/// something else: `FEATURELOG_SIDECAR__INSTANCE=7` is the text "7", while
/// `..._PUBLISH__QUEUE_CAPACITY=5` is the number 5 and `..._ADAPTIVE__ENABLED=true` the
/// boolean (also `false`, `yes`/`no`, `on`/`off`, `1`/`0`). Durations stay humantime text
/// (`30s`), and a value written as a list or table (`[a, b]`, `{k = v}`) is one, with text
/// items. Numbers and booleans in the file are read the same lenient way (`"5"` is 5).
///
/// The error says what is wrong, at which key, and in which environment variable or in "the
/// config file"; callers add the file's path.
pub fn extract_config<T: serde::de::DeserializeOwned>(
    text: &str,
    prefix: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<T, String> {
    layered(text, prefix, env, Values::Text)
        .extract_lossy()
        .map_err(|e| e.to_string())
}

/// How environment values outside the free-form tables are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Values {
    /// As TOML-like values, for a plain `Figment::extract`.
    Typed,
    /// As text, for `Figment::extract_lossy`, which converts text to numbers and booleans.
    Text,
}

/// How the keys of a free-form table are spelt by the system that reads them.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    /// As written, lower-cased: object_store's `aws_endpoint`.
    Snake,
    /// Underscores are dots, except for the names listed: librdkafka's `sasl.password` (and
    /// its few names with underscores, such as `log_level`).
    Dotted(&'static [&'static str]),
}

impl Spelling {
    /// The key that the rest of a variable's name (lower-cased) stands for.
    fn key(self, rest: &str) -> String {
        match self {
            Spelling::Snake => rest.to_owned(),
            Spelling::Dotted(underscored) if underscored.contains(&rest) => rest.to_owned(),
            Spelling::Dotted(_) => rest
                .split('_')
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join("."),
        }
    }
}

/// The tables of featurelog configs whose keys are another system's setting names, and whose
/// values are all text.
const FREE_FORM_TABLES: &[(&[&str], Spelling)] = &[
    // librdkafka's settings (CONFIGURATION.md): dotted, but for these two.
    (
        &["kafka", "properties"],
        Spelling::Dotted(&["log_level", "enabled_events"]),
    ),
    // object_store's `AmazonS3ConfigKey` names.
    (&["output", "object-store", "options"], Spelling::Snake),
];

/// Where the rest of a variable's name (after the prefix) points, and whether that is inside a
/// free-form table (`Some(true)`: an entry; `Some(false)`: the table itself).
fn config_path(rest: &str) -> (Vec<String>, Option<bool>) {
    let lower = rest.to_ascii_lowercase();
    let segments: Vec<&str> = lower.split("__").collect();
    let mut path: Vec<String> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        path.push(segment.replace('_', "-"));
        let table = FREE_FORM_TABLES
            .iter()
            .find(|(table, _)| path.iter().map(String::as_str).eq(table.iter().copied()));
        if let Some((_, spelling)) = table {
            let Some(rest) = segments.get(i + 1..).filter(|r| !r.is_empty()) else {
                return (path, Some(false));
            };
            path.push(spelling.key(&rest.join("__")));
            return (path, Some(true));
        }
    }
    (path, None)
}

/// One environment override: a value at a path, from a variable.
struct Override {
    var: String,
    path: Vec<String>,
    value: figment::value::Value,
    /// Why a text field may refuse the value (typed reading only).
    hint: Option<String>,
}

impl figment::Provider for Override {
    fn metadata(&self) -> figment::Metadata {
        let name = match &self.hint {
            Some(hint) => format!("environment variable {} ({hint})", self.var),
            None => format!("environment variable {}", self.var),
        };
        figment::Metadata::named(name).interpolater(dotted_key)
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        use figment::value::{Dict, Value};
        let Some((first, rest)) = self.path.split_first() else {
            return Err(format!("environment variable {} names no key", self.var).into());
        };
        let value = rest.iter().rev().fold(self.value.clone(), |value, key| {
            Value::from(Dict::from([(key.clone(), value)]))
        });
        let dict = Dict::from([(first.clone(), value)]);
        Ok(figment::value::Map::from([(
            figment::Profile::Global,
            dict,
        )]))
    }
}

/// The TOML file, named as such in errors.
struct File(figment::providers::Data<figment::providers::Toml>);

impl figment::Provider for File {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("the config file").interpolater(dotted_key)
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        self.0.data()
    }

    fn profile(&self) -> Option<figment::Profile> {
        figment::Provider::profile(&self.0)
    }
}

/// A key as the config writes it (`publish.queue-capacity`), without figment's profile.
fn dotted_key(_: &figment::Profile, keys: &[&str]) -> String {
    keys.join(".")
}

fn layered(
    text: &str,
    prefix: &str,
    env: impl IntoIterator<Item = (String, String)>,
    values: Values,
) -> figment::Figment {
    use figment::providers::{Format, Toml};
    let mut overrides: Vec<Override> = env
        .into_iter()
        .filter_map(|(var, value)| {
            let rest = var.strip_prefix(prefix).filter(|rest| !rest.is_empty())?;
            let (path, free_form) = config_path(rest);
            let (value, hint) = match (free_form, values) {
                (Some(true), _) => (value.into(), None),
                (Some(false), _) => (text_leaves(parse(&value)), None),
                (None, Values::Text) => (text_value(&value), None),
                (None, Values::Typed) => typed_value(&var, &value),
            };
            Some(Override {
                var,
                path,
                value,
                hint,
            })
        })
        .collect();
    overrides.sort_by(|a, b| a.var.cmp(&b.var));
    overrides.into_iter().fold(
        figment::Figment::new().merge(File(Toml::string(text))),
        figment::Figment::merge,
    )
}

/// figment's TOML-like reading of an environment value (text when nothing else fits).
fn parse(value: &str) -> figment::value::Value {
    match value.parse::<figment::value::Value>() {
        Ok(parsed) => parsed,
        Err(never) => match never {},
    }
}

/// The typed reading, and what to do when a text field refuses it.
fn typed_value(var: &str, value: &str) -> (figment::value::Value, Option<String>) {
    use figment::value::Value;
    let parsed = parse(value);
    let read_as = match parsed {
        Value::Num(..) => "a number",
        Value::Bool(..) => "a boolean",
        _ => return (parsed, None),
    };
    let hint = format!(
        "whose value was read as {read_as}; where text is wanted, quote it: {var}='\"{}\"'",
        value.trim()
    );
    (parsed, Some(hint))
}

/// The text reading: the value as it is, unless it is written as a list, a table or a quoted
/// string, whose items are text.
fn text_value(value: &str) -> figment::value::Value {
    let trimmed = value.trim();
    let written_as = |open: char, close: char| {
        trimmed.len() >= 2 && trimmed.starts_with(open) && trimmed.ends_with(close)
    };
    if written_as('[', ']') || written_as('{', '}') || written_as('"', '"') {
        text_leaves(parse(value))
    } else {
        value.into()
    }
}

/// `value` with every number, boolean and character turned into its text.
fn text_leaves(value: figment::value::Value) -> figment::value::Value {
    use figment::value::{Num, Value};
    match value {
        Value::Array(tag, items) => Value::Array(tag, items.into_iter().map(text_leaves).collect()),
        Value::Dict(tag, dict) => Value::Dict(
            tag,
            dict.into_iter().map(|(k, v)| (k, text_leaves(v))).collect(),
        ),
        Value::Bool(tag, b) => Value::String(tag, b.to_string()),
        Value::Char(tag, c) => Value::String(tag, c.to_string()),
        Value::Num(tag, n) => Value::String(
            tag,
            match n {
                Num::U8(n) => n.to_string(),
                Num::U16(n) => n.to_string(),
                Num::U32(n) => n.to_string(),
                Num::U64(n) => n.to_string(),
                Num::U128(n) => n.to_string(),
                Num::USize(n) => n.to_string(),
                Num::I8(n) => n.to_string(),
                Num::I16(n) => n.to_string(),
                Num::I32(n) => n.to_string(),
                Num::I64(n) => n.to_string(),
                Num::I128(n) => n.to_string(),
                Num::ISize(n) => n.to_string(),
                Num::F32(n) => n.to_string(),
                Num::F64(n) => n.to_string(),
            },
        ),
        other @ (Value::String(..) | Value::Empty(..)) => other,
    }
}

/// Renders the service's metrics in the text exposition format.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// When `/readyz` answers 200: from the end of the service's start-up until its drain starts.
/// The drain is `draining`, the service's own shutdown token (or a child of it), so that
/// readiness fails the moment a drain starts and no flag has to be kept in step with it.
#[derive(Clone, Debug)]
pub struct Readiness {
    started: Arc<std::sync::atomic::AtomicBool>,
    draining: CancellationToken,
}

impl Readiness {
    /// Not ready until [`Readiness::started`]: the endpoint can answer (and `/healthz` say the
    /// process is alive) while a slow start-up runs.
    pub fn starting(draining: CancellationToken) -> Self {
        Self {
            started: Arc::default(),
            draining,
        }
    }

    /// Ready from now until `draining` is cancelled.
    pub fn ready(draining: CancellationToken) -> Self {
        let readiness = Self::starting(draining);
        readiness.started();
        readiness
    }

    /// The start-up is over.
    pub fn started(&self) {
        self.started
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.started.load(std::sync::atomic::Ordering::Acquire) && !self.draining.is_cancelled()
    }
}

/// Serves the endpoint until `shutdown`; `/readyz` follows `readiness`.
pub async fn serve(
    listener: TcpListener,
    metrics: Render,
    readiness: Readiness,
    shutdown: CancellationToken,
) {
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(err) => {
                    tracing::warn!(%err, "metrics endpoint: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // A scrape's answer goes out at once rather than waiting for a delayed ACK.
        let _ = stream.set_nodelay(true);
        let (metrics, readiness) = (metrics.clone(), readiness.clone());
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let response = route(request.uri().path(), &metrics, &readiness);
            async move { Ok::<_, Infallible>(response) }
        });
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn route(path: &str, metrics: &Render, readiness: &Readiness) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" if readiness.is_ready() => (StatusCode::OK, "text/plain", "ready\n".to_owned()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics, /healthz or /readyz\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        response.headers_mut().insert("content-type", v);
    }
    response
}

#[cfg(test)]
mod tests {

    #[test]
    fn environment_skips_other_programs_variables_that_are_not_text_and_refuses_ours() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || std::ffi::OsString::from_vec(vec![b'a', 0xff]);
        let ok = |s: &str| std::ffi::OsString::from(s);
        let vars = vec![
            (ok("PATH"), ok("/bin")),
            (ok("OTHER"), bad()),
            (bad(), ok("x")),
            (ok("FEATURELOG_JOIN__GROUP"), ok("g")),
        ];
        assert_eq!(
            environment_from(vars.clone(), "FEATURELOG_JOIN__").unwrap(),
            [
                ("PATH".to_string(), "/bin".to_string()),
                ("FEATURELOG_JOIN__GROUP".to_string(), "g".to_string())
            ]
        );
        let mut ours = vars;
        ours.push((ok("FEATURELOG_JOIN__INSTANCE"), bad()));
        let err = environment_from(ours, "FEATURELOG_JOIN__").unwrap_err();
        assert!(err.contains("FEATURELOG_JOIN__INSTANCE"), "{err}");
    }

    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    const PREFIX: &str = "APP__";

    /// Shaped like the services' configs: kebab-case, unknown keys refused.
    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "kebab-case", deny_unknown_fields)]
    struct Config {
        #[serde(default)]
        instance: Option<String>,
        #[serde(default)]
        group: String,
        #[serde(default)]
        static_membership: bool,
        #[serde(default)]
        publish: Publish,
        #[serde(default)]
        kafka: Kafka,
        #[serde(default)]
        output: Output,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "kebab-case", deny_unknown_fields)]
    struct Publish {
        #[serde(default)]
        topic: String,
        #[serde(default)]
        queue_capacity: usize,
        #[serde(default)]
        zstd_level: i32,
        #[serde(default)]
        min_fraction: f64,
        #[serde(default)]
        enabled: bool,
        #[serde(default)]
        max_file_rows: Option<usize>,
        #[serde(default)]
        shutdown_timeout: String,
        #[serde(default)]
        labels: Vec<String>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "kebab-case", deny_unknown_fields)]
    struct Kafka {
        #[serde(default)]
        bootstrap_servers: String,
        #[serde(default)]
        properties: BTreeMap<String, String>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "kebab-case", deny_unknown_fields)]
    struct Output {
        #[serde(default)]
        object_store: ObjectStore,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "kebab-case", deny_unknown_fields)]
    struct ObjectStore {
        #[serde(default)]
        allow_http: Option<bool>,
        #[serde(default)]
        options: BTreeMap<String, String>,
    }

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Both readings: the typed one as the services extract it today, and the text one.
    fn both(text: &str, vars: &[(&str, &str)]) -> [Result<Config, String>; 2] {
        [
            layered_config(text, PREFIX, env(vars))
                .extract()
                .map_err(|e| e.to_string()),
            extract_config(text, PREFIX, env(vars)),
        ]
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn environment_entries_of_free_form_tables_replace_the_files_entry_of_the_same_key() {
        let text = r#"
            [kafka.properties]
            "sasl.password" = "from-file"
            "acks" = "all"
            [output.object-store.options]
            aws_endpoint = "http://file:9000"
            aws_virtual_hosted_style_request = "false"
        "#;
        let vars = [
            (
                "APP__OUTPUT__OBJECT_STORE__OPTIONS__AWS_ENDPOINT",
                "http://env:9000",
            ),
            (
                "APP__OUTPUT__OBJECT_STORE__OPTIONS__AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
                "true",
            ),
            ("APP__KAFKA__PROPERTIES__SASL_PASSWORD", " 12345 "),
            ("APP__KAFKA__PROPERTIES__SESSION_TIMEOUT_MS", "45000"),
            ("APP__KAFKA__PROPERTIES__LOG_LEVEL", "7"),
            // Kubernetes allows dots in variable names.
            ("APP__KAFKA__PROPERTIES__ssl.ca.location", "/ca.pem"),
        ];
        for config in both(text, &vars) {
            let config = config.unwrap();
            assert_eq!(
                config.output.object_store.options,
                map(&[
                    ("aws_endpoint", "http://env:9000"),
                    ("aws_virtual_hosted_style_request", "true"),
                ])
            );
            assert_eq!(
                config.kafka.properties,
                map(&[
                    ("acks", "all"),
                    ("log_level", "7"),
                    // Entries are text as they are: a password keeps its spaces.
                    ("sasl.password", " 12345 "),
                    ("session.timeout.ms", "45000"),
                    ("ssl.ca.location", "/ca.pem"),
                ])
            );
        }
    }

    #[test]
    fn variable_names_map_to_keys() {
        let path = |rest: &str| config_path(rest).0.join("|");
        assert_eq!(path("PUBLISH__QUEUE_CAPACITY"), "publish|queue-capacity");
        assert_eq!(
            path("OUTPUT__OBJECT_STORE__OPTIONS__AWS_ENDPOINT"),
            "output|object-store|options|aws_endpoint"
        );
        assert_eq!(
            path("KAFKA__PROPERTIES__SASL__PASSWORD"),
            "kafka|properties|sasl.password"
        );
        assert_eq!(
            path("KAFKA__PROPERTIES__ENABLED_EVENTS"),
            "kafka|properties|enabled_events"
        );
        assert_eq!(
            config_path("KAFKA__PROPERTIES"),
            (vec!["kafka".into(), "properties".into()], Some(false))
        );
        assert_eq!(config_path("KAFKA__PROPERTIES__ACKS").1, Some(true));
        assert_eq!(config_path("KAFKA__BOOTSTRAP_SERVERS").1, None);
        // Only the tables themselves are free-form, not keys of the same name elsewhere.
        assert_eq!(path("PUBLISH__PROPERTIES__A_B"), "publish|properties|a-b");
    }

    #[test]
    fn a_whole_free_form_table_from_the_environment_has_text_values() {
        let vars = [(
            "APP__KAFKA__PROPERTIES",
            r#"{"linger.ms" = 5, "enable.idempotence" = true}"#,
        )];
        for config in both("[kafka.properties]\nacks = \"all\"", &vars) {
            assert_eq!(
                config.unwrap().kafka.properties,
                map(&[
                    ("acks", "all"),
                    ("enable.idempotence", "true"),
                    ("linger.ms", "5"),
                ])
            );
        }
    }

    #[test]
    fn text_fields_take_values_that_look_like_numbers_or_booleans() {
        let config: Config = extract_config(
            "instance = \"file\"\n[publish]\ntopic = \"file\"",
            PREFIX,
            env(&[
                ("APP__INSTANCE", "7"),
                ("APP__GROUP", "true"),
                ("APP__PUBLISH__TOPIC", "2024"),
                ("APP__KAFKA__BOOTSTRAP_SERVERS", "0.5"),
            ]),
        )
        .unwrap();
        assert_eq!(config.instance.as_deref(), Some("7"));
        assert_eq!(config.group, "true");
        assert_eq!(config.publish.topic, "2024");
        assert_eq!(config.kafka.bootstrap_servers, "0.5");

        // The typed reading takes them quoted, as its refusal says.
        let config: Config = layered_config(
            "",
            PREFIX,
            env(&[("APP__INSTANCE", "\"7\""), ("APP__GROUP", "\"true\"")]),
        )
        .extract()
        .unwrap();
        assert_eq!(config.instance.as_deref(), Some("7"));
        assert_eq!(config.group, "true");
        // So does the text reading, for the same variables.
        let config: Config =
            extract_config("", PREFIX, env(&[("APP__INSTANCE", "\"7\"")])).unwrap();
        assert_eq!(config.instance.as_deref(), Some("7"));
    }

    #[test]
    fn numbers_booleans_durations_and_lists_keep_their_types() {
        let vars = [
            ("APP__STATIC_MEMBERSHIP", "true"),
            ("APP__PUBLISH__QUEUE_CAPACITY", "5"),
            ("APP__PUBLISH__ZSTD_LEVEL", "-1"),
            ("APP__PUBLISH__MIN_FRACTION", "0.25"),
            ("APP__PUBLISH__ENABLED", "true"),
            ("APP__PUBLISH__MAX_FILE_ROWS", "1000"),
            ("APP__PUBLISH__SHUTDOWN_TIMEOUT", "1h 30m"),
            ("APP__PUBLISH__LABELS", "[clicks, dwell_ms]"),
            ("APP__OUTPUT__OBJECT_STORE__ALLOW_HTTP", "false"),
            ("UNRELATED", "x"),
        ];
        for config in both(
            "static-membership = false\n[publish]\nenabled = false",
            &vars,
        ) {
            let config = config.unwrap();
            assert!(config.static_membership);
            let p = &config.publish;
            assert_eq!(p.queue_capacity, 5);
            assert_eq!(p.zstd_level, -1);
            assert!((p.min_fraction - 0.25).abs() < f64::EPSILON);
            assert!(p.enabled);
            assert_eq!(p.max_file_rows, Some(1000));
            assert_eq!(p.shutdown_timeout, "1h 30m");
            assert_eq!(p.labels, ["clicks", "dwell_ms"]);
            assert_eq!(config.output.object_store.allow_http, Some(false));
        }
        // Items of a list are text, whatever they look like.
        let config: Config =
            extract_config("", PREFIX, env(&[("APP__PUBLISH__LABELS", "[7, true]")])).unwrap();
        assert_eq!(config.publish.labels, ["7", "true"]);
    }

    #[test]
    fn errors_name_the_environment_variable_and_the_key() {
        let [typed, text] = both("", &[("APP__PUBLISH__QUEUE_CAPACITY", "lots")]);
        for err in [typed.unwrap_err(), text.unwrap_err()] {
            assert!(
                err.contains("environment variable APP__PUBLISH__QUEUE_CAPACITY")
                    && err.contains("\"publish.queue-capacity\"")
                    && err.contains("usize"),
                "{err}"
            );
        }

        // A misspelt key: the variable that brought it.
        let [typed, text] = both("", &[("APP__PUBLISH__TOPICS", "t")]);
        for err in [typed.unwrap_err(), text.unwrap_err()] {
            assert!(
                err.contains("topics") && err.contains("environment variable APP__PUBLISH__TOPICS"),
                "{err}"
            );
        }

        // The typed reading's refusal of a number for a text field says how to pass it.
        let [typed, text] = both("", &[("APP__INSTANCE", "7")]);
        let err = typed.unwrap_err();
        assert!(
            err.contains("environment variable APP__INSTANCE")
                && err.contains("APP__INSTANCE='\"7\"'"),
            "{err}"
        );
        assert_eq!(text.unwrap().instance.as_deref(), Some("7"));

        // A bad value in the file says so, with the key as the file writes it.
        let [typed, text] = both("[publish]\nqueue-capacity = \"lots\"", &[]);
        for err in [typed.unwrap_err(), text.unwrap_err()] {
            assert!(
                err.contains("\"publish.queue-capacity\" in the config file"),
                "{err}"
            );
        }
    }
}
