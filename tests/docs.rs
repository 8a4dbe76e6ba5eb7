//! Keeps the README's reference sections honest: every configuration key (of the sample configs
//! and of the config structs themselves), every metric the services register and every reason
//! label value the code counts must be documented there, with the right environment variable
//! and the right metric type; and the reference lists nothing that does not exist. The alerting
//! rules (compose/prometheus/alerts.yml) and the dashboard select only what the services export,
//! as Prometheus parses them, and the rules fire as their
//! unit tests expect under Prometheus's own engine (promtool).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The text under the heading that starts with `heading` (e.g. "## Metrics reference"), up to
/// the next heading of the same or a higher level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .lines()
        .scan(0usize, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.starts_with(heading))
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("README has no heading starting with {heading:?}"));
    let body = &text[start..];
    let mut end = body.len();
    let mut offset = 0;
    for (i, line) in body.lines().enumerate() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if i > 0 && hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            end = offset;
            break;
        }
        offset += line.len() + 1;
    }
    &body[..end]
}

/// The cells of every table row in `text`, trimmed, header and separator rows included.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .map(|l| {
            let l = l.trim().trim_start_matches('|').trim_end_matches('|');
            l.split('|').map(|c| c.trim().to_owned()).collect()
        })
        .collect()
}

/// The rows of the tables in `text` by their first cell with its backticks removed.
fn rows_by_key(text: &str) -> BTreeMap<String, Vec<String>> {
    table_rows(text)
        .into_iter()
        .filter(|cells| cells[0].starts_with('`'))
        .map(|cells| (cells[0].trim_matches('`').to_owned(), cells))
        .collect()
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' || c == '.'
}

/// Whether a commented-out line is a setting (`# key = value`) or a section header
/// (`# [section]`, `# [[array]]`), rather than prose.
fn is_commented_setting(rest: &str) -> bool {
    let key_len = rest.chars().take_while(|c| is_key_char(*c)).count();
    if key_len > 0 {
        return rest[key_len..].starts_with(" = ");
    }
    let inner = rest.trim_start_matches('[');
    let name_len = inner.chars().take_while(|c| is_key_char(*c)).count();
    let after = inner[name_len..].trim_start_matches(']').trim();
    rest.starts_with('[')
        && name_len > 0
        && inner[name_len..].starts_with(']')
        && (after.is_empty() || after.starts_with('#'))
}

/// A sample config with its commented-out settings and sections switched on, so that the
/// optional keys it shows are checked too.
fn sample_with_comments_on(relative: &str) -> toml::Table {
    let text: String = read(relative)
        .lines()
        .map(|line| {
            let rest = line.trim_start_matches('#').trim_start();
            if line.starts_with('#') && is_commented_setting(rest) {
                rest.to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    toml::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Maps whose keys are free-form (librdkafka's and object_store's own setting names): the map
/// is a documented key, its entries are not.
const FREE_FORM: &[&str] = &[
    "kafka.properties",
    "output.object-store.options",
    "input.per-topic",
];

fn toml_keys(table: &toml::Table, prefix: &str, out: &mut BTreeSet<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) if !FREE_FORM.contains(&path.as_str()) => {
                toml_keys(inner, &path, out)
            }
            toml::Value::Array(items) if items.iter().all(toml::Value::is_table) => {
                // An array of tables ([[model]]): its entries' keys, without the array's name.
                for item in items {
                    if let toml::Value::Table(inner) = item {
                        toml_keys(inner, prefix, out);
                    }
                }
            }
            _ => {
                out.insert(path);
            }
        }
    }
}

fn json_keys(value: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    let serde_json::Value::Object(map) = value else {
        return;
    };
    for (key, value) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if value.is_object() && !FREE_FORM.contains(&path.as_str()) {
            json_keys(value, &path, out);
        } else {
            out.insert(path);
        }
    }
}

fn env_name(prefix: &str, key: &str) -> String {
    let parts: Vec<String> = key
        .split('.')
        .map(|p| p.to_ascii_uppercase().replace('-', "_"))
        .collect();
    format!("{prefix}{}", parts.join("__"))
}

/// Checks one config's reference table against `keys`: a row per key, with its environment
/// variable when `env_prefix` is given, and no row for a key that does not exist.
fn check_config_table(readme: &str, heading: &str, keys: &BTreeSet<String>, env_prefix: &str) {
    let rows = rows_by_key(section(readme, heading));
    let mut problems = Vec::new();
    for key in keys {
        match rows.get(key) {
            None => problems.push(format!("`{key}` has no row")),
            // Free-form maps: their entries' names decide whether the environment can set them.
            Some(cells) if !env_prefix.is_empty() && !FREE_FORM.contains(&key.as_str()) => {
                let env = format!("`{}`", env_name(env_prefix, key));
                if !cells.iter().any(|c| c.contains(&env)) {
                    problems.push(format!("`{key}`: its row does not name {env}"));
                }
            }
            Some(_) => {}
        }
    }
    for key in rows.keys() {
        if !keys.contains(key) {
            problems.push(format!("`{key}` is documented but is no field"));
        }
    }
    assert!(
        problems.is_empty(),
        "README {heading}:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn sidecar_config_reference_covers_every_key() {
    let readme = read("README.md");
    let mut keys = BTreeSet::new();
    toml_keys(
        &sample_with_comments_on("services/sidecar/sidecar.example.toml"),
        "",
        &mut keys,
    );
    // Every field of the struct, whether the sample shows it or not.
    // With the optional [tls], [rest] and [upstream-tls] sections, so that their keys are
    // listed too.
    let minimal = "upstream = \"http://127.0.0.1:9001\"\nallow-list = \"a.toml\"\n\
                   [kafka]\nbootstrap-servers = \"k:9092\"\n\
                   [tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nclient-ca = \"ca.pem\"\n\
                   [rest]\nlisten = \"127.0.0.1:8000\"\nupstream = \"http://127.0.0.1:9000\"\n\
                   [upstream-tls]\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"k.pem\"";
    let config = featurelog_sidecar::SidecarConfig::from_toml_with_env(
        Path::new("sidecar.toml"),
        minimal,
        Vec::new(),
    )
    .unwrap();
    let mut fields = BTreeSet::new();
    json_keys(&serde_json::to_value(&config).unwrap(), "", &mut fields);
    assert!(
        keys.is_subset(&fields),
        "the sample has keys the struct lacks: {:?}",
        keys.difference(&fields).collect::<Vec<_>>()
    );
    check_config_table(
        &readme,
        "### Sidecar config",
        &fields,
        featurelog_sidecar::config::ENV_PREFIX,
    );
}

/// The names of a struct's fields as its `Deserialize` reads them: serde hands them to
/// `deserialize_struct`, where this deserializer keeps them and stops.
fn serde_fields<T: serde::de::DeserializeOwned>() -> Vec<String> {
    use serde::de::{Error as _, Visitor, value::Error};
    struct Capture<'a>(&'a mut Vec<&'static str>);
    impl<'de> serde::Deserializer<'de> for Capture<'_> {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Error> {
            self.0.extend(fields);
            Err(Error::custom("fields kept"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut fields = Vec::new();
    let _ = T::deserialize(Capture(&mut fields));
    assert!(
        !fields.is_empty(),
        "{} is no struct",
        std::any::type_name::<T>()
    );
    fields.into_iter().map(str::to_owned).collect()
}

#[test]
fn allow_list_reference_covers_every_key() {
    let readme = read("README.md");
    let mut keys = BTreeSet::new();
    toml_keys(
        &sample_with_comments_on("services/sidecar/allow-list.example.toml"),
        "",
        &mut keys,
    );
    use featurelog_sidecar::allowlist::{ModelRule, TopK};
    let mut fields: BTreeSet<String> = serde_fields::<ModelRule>().into_iter().collect();
    fields.remove("top-k");
    for f in serde_fields::<TopK>() {
        fields.insert(format!("top-k.{f}"));
    }
    assert_eq!(keys, fields, "the sample allow list shows every field");
    check_config_table(&readme, "### Allow list", &fields, "");
}

#[test]
fn joiner_config_reference_covers_every_key() {
    let readme = read("README.md");
    let mut keys = BTreeSet::new();
    toml_keys(
        &sample_with_comments_on("joiner/join.example.toml"),
        "",
        &mut keys,
    );
    // An s3:// dataset, so that the object-store section is there to be listed.
    let minimal = "[kafka]\nbootstrap-servers = \"k:9092\"\n[input]\nevents-topic = \"e\"\n\
                   [output]\npath = \"s3://bucket/prefix\"\n[output.object-store]\n\
                   region = \"us-east-1\"";
    let config = featurelog_joiner::config::JoinerConfig::from_toml_with_env(
        Path::new("join.toml"),
        minimal,
        Vec::new(),
    )
    .unwrap();
    let mut fields = BTreeSet::new();
    json_keys(&serde_json::to_value(&config).unwrap(), "", &mut fields);
    assert!(
        keys.is_subset(&fields),
        "the sample has keys the struct lacks: {:?}",
        keys.difference(&fields).collect::<Vec<_>>()
    );
    check_config_table(
        &readme,
        "### Joiner config",
        &fields,
        featurelog_joiner::config::ENV_PREFIX,
    );
}

/// (name as exposed, type) of every metric family in a text exposition: counters get `_total`.
fn exposed(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            (name, kind.to_owned())
        })
        .collect()
}

fn strip_total(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}

/// Checks one metrics table: every exposed metric has a row with its type, and every row is a
/// metric that exists.
fn check_metrics_table(readme: &str, heading: &str, exposed: &BTreeMap<String, String>) {
    let rows = rows_by_key(section(readme, heading));
    let mut problems = Vec::new();
    for (name, kind) in exposed {
        match rows.get(name) {
            None => problems.push(format!("`{name}` has no row")),
            Some(cells) if cells.get(1).map(String::as_str) != Some(kind.as_str()) => problems
                .push(format!(
                    "`{name}`: type should be {kind}, row says {cells:?}"
                )),
            Some(_) => {}
        }
    }
    for name in rows.keys() {
        if !exposed.contains_key(name) {
            problems.push(format!("`{name}` is documented but not exported"));
        }
    }
    assert!(
        problems.is_empty(),
        "README {heading}:\n  {}",
        problems.join("\n  ")
    );
}

fn check_documented(readme_part: &str, what: &str, values: impl IntoIterator<Item = String>) {
    let missing: BTreeSet<String> = values
        .into_iter()
        .filter(|v| !readme_part.contains(&format!("`{v}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "README does not document these {what}: {missing:?}"
    );
}

/// The sidecar's metrics exposition with every family visible: families show up once they have
/// a child.
fn sidecar_exposition() -> String {
    use featurelog_sidecar::metrics::{CallLabels, Metrics};
    let m = Metrics::new();
    m.calls
        .get_or_create(&CallLabels {
            method: "model_infer",
            outcome: "ok",
        })
        .inc();
    m.drop_call(featurelog_sidecar::reason::Dropped::QueueFull);
    m.skip_call(featurelog_sidecar::reason::Skipped::NotSampled);
    m.allow_list_reloaded("sha256:0", true);
    m.tls_reloaded(true);
    m.upstream_tls_reloaded(true);
    m.tls_handshake_failed("error");
    m.dead_letter(featurelog_sidecar::reason::DeadLetter::Delivered);
    m.model("ranker").records.inc();
    m.missing_feature("ranker", "user_age");
    m.render()
}

/// The joiner's metrics exposition with every family visible.
fn joiner_exposition() -> String {
    use featurelog_joiner::metrics::{JoinMetrics, Label};
    let m = JoinMetrics::new();
    m.outcomes.get_or_create(&Label { name: "joined" }).inc();
    m.dead_letters
        .get_or_create(&Label { name: "bad_json" })
        .inc();
    m.rows_written(["ranker"]);
    m.render()
}

#[test]
fn sidecar_metrics_reference_covers_every_metric_and_reason() {
    use featurelog_sidecar::reason::{DeadLetter, Dropped, Skipped};
    let readme = read("README.md");
    let part = section(&readme, "### Sidecar metrics");

    let exposed = exposed(&sidecar_exposition());
    let names: BTreeSet<String> = exposed.keys().map(|n| strip_total(n).to_owned()).collect();
    let registered: BTreeSet<String> = featurelog_sidecar::metrics::Metrics::new()
        .families()
        .iter()
        .map(|f| format!("featurelog_sidecar_{f}"))
        .collect();
    assert_eq!(
        names, registered,
        "a metric family is registered that this test does not make visible: touch it above"
    );
    check_metrics_table(&readme, "### Sidecar metrics", &exposed);

    let label = |values: &[&str]| values.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
    let dropped: Vec<&str> = Dropped::ALL.iter().map(|r| r.as_str()).collect();
    check_documented(part, "drop reasons", label(&dropped));
    let skipped: Vec<&str> = Skipped::ALL.iter().map(|r| r.as_str()).collect();
    check_documented(part, "skip reasons", label(&skipped));
    let dead_letters: Vec<&str> = DeadLetter::ALL.iter().map(|r| r.as_str()).collect();
    check_documented(part, "dead-letter outcomes", label(&dead_letters));
    check_documented(
        part,
        "call labels",
        [
            "model_infer",
            "other",
            "rest_infer",
            "rest_other",
            "ok",
            "error",
            "upstream_unavailable",
            "applied",
            "refused",
        ]
        .map(String::from),
    );
}

#[test]
fn joiner_metrics_reference_covers_every_metric_and_reason() {
    let readme = read("README.md");
    let part = section(&readme, "### Joiner metrics");

    let exposed = exposed(&joiner_exposition());
    let names: BTreeSet<String> = exposed.keys().map(|n| strip_total(n).to_owned()).collect();
    let registered: BTreeSet<String> = featurelog_joiner::metrics::JoinMetrics::new()
        .families()
        .iter()
        .map(|f| format!("featurelog_join_{f}"))
        .collect();
    assert_eq!(
        names, registered,
        "a metric family is registered that this test does not make visible: touch it above"
    );
    check_metrics_table(&readme, "### Joiner metrics", &exposed);

    let outcomes = featurelog_joiner::state::Counts::default()
        .named()
        .map(|(name, _)| name.to_owned());
    check_documented(part, "outcomes", outcomes);
    let reasons = featurelog_joiner::reason::Reason::ALL
        .iter()
        .map(|r| r.as_str().to_owned());
    check_documented(part, "dead-letter reasons", reasons);
}

/// Series name -> its label names, from an exposition's samples (`name{a="x",b="y"} 1`).
fn series_labels(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let end = line.find(['{', ' ']).unwrap();
        let labels = out.entry(line[..end].to_owned()).or_default();
        let mut rest = line[end..].strip_prefix('{').unwrap_or("");
        // `key="value",...}`: values are quoted, with `\"` and `\\` escapes.
        while let Some((key, after)) = rest.split_once("=\"") {
            labels.insert(key.trim_start_matches(',').to_owned());
            let mut chars = after.char_indices();
            let mut close = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        close = i;
                        break;
                    }
                    _ => {}
                }
            }
            rest = &after[close + 1..];
            if rest.starts_with('}') {
                break;
            }
        }
    }
    out
}

/// A label matcher: (label, value, whether it is `=`).
type Matcher = (String, String, bool);

/// What a PromQL expression selects: (metric, its matchers), and the labels it groups or
/// matches by.
struct Selects {
    selectors: Vec<(String, Vec<Matcher>)>,
    grouping: BTreeSet<String>,
}

/// Parses each `(what, text)` with Prometheus's own parser, through `promql-selects`
/// (scripts/promql-selects/main.go), which scripts/promtool.sh builds beside `promtool` from
/// the same source: the rules and the dashboard are read by the engine that evaluates them.
/// Fails the test naming any expression that does not parse.
fn parse_promql(promtool: &Path, exprs: &[(String, String)]) -> Vec<Selects> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let tool = promtool.with_file_name("promql-selects");
    let mut child = Command::new(&tool)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/promtool.sh --path builds it)",
                tool.display()
            )
        });
    let texts: Vec<&str> = exprs.iter().map(|(_, text)| text.as_str()).collect();
    let input = serde_json::to_vec(&texts).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        tool.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed.len(), exprs.len());
    let strings = |v: &serde_json::Value| -> Vec<String> {
        let items = v.as_array().unwrap().iter();
        items.map(|s| s.as_str().unwrap().to_owned()).collect()
    };
    exprs
        .iter()
        .zip(parsed)
        .map(|((what, text), p)| {
            if let Some(error) = p["error"].as_str() {
                panic!("{what}: {error}\n{text}");
            }
            let selectors = p["selectors"].as_array().unwrap().iter().map(|s| {
                let matchers = s["matchers"].as_array().unwrap().iter().map(|m| {
                    let label = m["label"].as_str().unwrap().to_owned();
                    let value = m["value"].as_str().unwrap().to_owned();
                    (label, value, m["equal"].as_bool().unwrap())
                });
                (s["metric"].as_str().unwrap().to_owned(), matchers.collect())
            });
            Selects {
                selectors: selectors.collect(),
                grouping: strings(&p["grouping"]).into_iter().collect(),
            }
        })
        .collect()
}

/// What the PromQL of compose/ may select: the series the services export, the README that
/// documents their label values, and the jobs compose/prometheus/prometheus.yml scrapes.
struct Exported {
    series: BTreeMap<String, BTreeSet<String>>,
    readme: String,
    jobs: BTreeSet<String>,
}

impl Exported {
    fn load() -> Self {
        let mut series = series_labels(&sidecar_exposition());
        series.extend(series_labels(&joiner_exposition()));
        assert!(series.contains_key("featurelog_sidecar_added_latency_seconds_bucket"));
        let prometheus =
            yaml_rust2::YamlLoader::load_from_str(&read("compose/prometheus/prometheus.yml"))
                .unwrap();
        let jobs = prometheus[0]["scrape_configs"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|j| j["job_name"].as_str().unwrap().to_owned())
            .collect();
        Self {
            series,
            readme: read("README.md"),
            jobs,
        }
    }

    /// Checks what an expression (`what`, for messages) selects; returns the labels its series
    /// can carry, and the `up` jobs it selects. Problems go to `problems`.
    fn check(
        &self,
        what: &str,
        selects: &Selects,
        problems: &mut Vec<String>,
    ) -> (BTreeSet<String>, BTreeSet<String>) {
        let mut labels: BTreeSet<String> = ["instance", "job"].map(String::from).into();
        let mut up_jobs = BTreeSet::new();
        for (metric, matchers) in &selects.selectors {
            if metric == "up" {
                match matchers.iter().find(|(l, _, eq)| l == "job" && *eq) {
                    Some((_, job, _)) if self.jobs.contains(job) => {
                        up_jobs.insert(job.clone());
                    }
                    _ => problems.push(format!("{what}: up without a scraped job: {matchers:?}")),
                }
                continue;
            }
            let Some(has) = self.series.get(metric) else {
                problems.push(format!("{what}: {metric} is not exported"));
                continue;
            };
            labels.extend(has.iter().cloned());
            let documented = if metric.starts_with("featurelog_sidecar_") {
                section(&self.readme, "### Sidecar metrics")
            } else {
                section(&self.readme, "### Joiner metrics")
            };
            for (label, value, equal) in matchers {
                if !has.contains(label) {
                    problems.push(format!("{what}: {metric} has no label {label}"));
                } else if *equal && !documented.contains(&format!("`{value}`")) {
                    problems.push(format!(
                        "{what}: {metric}{{{label}=\"{value}\"}}: `{value}` is not documented"
                    ));
                }
            }
        }
        for label in &selects.grouping {
            if !labels.contains(label) {
                problems.push(format!(
                    "{what}: groups by {label}, which its series do not have"
                ));
            }
        }
        (labels, up_jobs)
    }
}

/// The labels a template names (`{{ $labels.x }}` in alerts, `{{x}}` in legends) that `labels`
/// does not hold.
fn unknown_template_labels(text: &str, marker: &str, labels: &BTreeSet<String>) -> Vec<String> {
    text.split(marker)
        .skip(1)
        .map(|part| {
            part.trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|label| !labels.contains(label))
        .collect()
}

/// The rules of compose/prometheus/alerts.yml, every group's in order.
fn alert_rules() -> Vec<yaml_rust2::Yaml> {
    let file =
        yaml_rust2::YamlLoader::load_from_str(&read("compose/prometheus/alerts.yml")).unwrap();
    file[0]["groups"]
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_vec().unwrap().iter().cloned())
        .collect()
}

/// The dashboard's queries: each panel's title, its target, and the target's expression as
/// Grafana sends it to Prometheus (its own range variable substituted).
fn dashboard_queries() -> Vec<(String, serde_json::Value, String)> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("compose/grafana/dashboards/featurelog.json")).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m");
            queries.push((title.to_owned(), target.clone(), expr));
        }
    }
    queries
}

/// compose/prometheus/alerts.yml, as Prometheus loads it: every expression parses as PromQL and
/// selects only series the sidecar and the joiner export (histograms by their `_bucket`,
/// `_sum` and `_count`), by labels those series have and label values the README documents;
/// `up` by a job compose/prometheus/prometheus.yml scrapes. An alert on a renamed metric or a
/// misspelt reason would never fire, and nothing else would tell.
#[test]
fn alerting_rules_select_only_exported_series_by_documented_labels() {
    let Some(promtool) =
        promtool("alerting_rules_select_only_exported_series_by_documented_labels")
    else {
        return;
    };
    let exported = Exported::load();
    let rules = alert_rules();
    let exprs: Vec<(String, String)> = rules
        .iter()
        .map(|rule| {
            let alert = rule["alert"].as_str().expect("every rule is an alert");
            (alert.to_owned(), rule["expr"].as_str().unwrap().to_owned())
        })
        .collect();
    let parsed = parse_promql(&promtool, &exprs);
    let mut names = BTreeSet::new();
    let mut up_jobs = BTreeSet::new();
    let mut problems = Vec::new();
    for ((rule, (alert, _)), selects) in rules.iter().zip(&exprs).zip(&parsed) {
        assert!(names.insert(alert.clone()), "{alert} twice");
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{alert}: severity {severity:?}"
        );
        let (labels, jobs) = exported.check(alert, selects, &mut problems);
        up_jobs.extend(jobs);
        // `{{ $labels.x }}` in the annotations names a label the alert's series keep.
        for key in ["summary", "description"] {
            let text = rule["annotations"][key].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{alert}: no {key}");
            for label in unknown_template_labels(text, "$labels.", &labels) {
                problems.push(format!("{alert}: {key} uses $labels.{label}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(
        up_jobs, exported.jobs,
        "an `up` alert for every scraped job"
    );
    assert!(names.len() >= 10, "{names:?}");
}

/// compose/grafana: the dashboard's every query parses as PromQL and selects only what the
/// services export (as the alerting rules must), its legends name labels its series have, and
/// it reads from the datasource Grafana is provisioned with.
#[test]
fn the_dashboard_queries_only_exported_series_from_the_provisioned_datasource() {
    let Some(promtool) =
        promtool("the_dashboard_queries_only_exported_series_from_the_provisioned_datasource")
    else {
        return;
    };
    let exported = Exported::load();
    let datasources = yaml_rust2::YamlLoader::load_from_str(&read(
        "compose/grafana/provisioning/datasources/prometheus.yml",
    ))
    .unwrap();
    let uid = datasources[0]["datasources"][0]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let queries = dashboard_queries();
    let exprs: Vec<(String, String)> = queries
        .iter()
        .map(|(title, _, expr)| (title.clone(), expr.clone()))
        .collect();
    let parsed = parse_promql(&promtool, &exprs);
    let mut problems = Vec::new();
    let mut metrics = BTreeSet::new();
    for ((title, target, expr), selects) in queries.iter().zip(&parsed) {
        assert_eq!(target["datasource"]["uid"], uid.as_str(), "{title}");
        let (labels, _) = exported.check(title, selects, &mut problems);
        let legend = target["legendFormat"].as_str().unwrap_or_default();
        for label in unknown_template_labels(legend, "{{", &labels) {
            problems.push(format!("{title}: legend names {label}"));
        }
        metrics.extend(
            expr.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("featurelog_"))
                .map(str::to_owned),
        );
    }
    assert!(problems.is_empty(), "{problems:#?}");
    let queries = queries.len();
    assert!(
        queries >= 20 && metrics.len() >= 20,
        "{queries} queries of {metrics:?}"
    );
}

/// Prometheus's promtool (`FEATURELOG_PROMTOOL`, which scripts/test.sh sets from
/// `scripts/promtool.sh --path`), or `None` (after saying so) outside CI.
fn promtool(test: &str) -> Option<PathBuf> {
    match std::env::var_os("FEATURELOG_PROMTOOL") {
        Some(path) if !path.is_empty() => Some(path.into()),
        _ if featurelog_testkit::in_ci() => {
            panic!("{test} needs promtool but FEATURELOG_PROMTOOL is not set; run scripts/test.sh")
        }
        _ => {
            eprintln!(
                "SKIPPED {test}: it needs Prometheus's promtool. Set \
                 FEATURELOG_PROMTOOL=$(scripts/promtool.sh --path) (scripts/test.sh does)."
            );
            None
        }
    }
}

/// Runs promtool in `dir` and fails the test with its output unless it succeeds.
fn run_promtool(promtool: &Path, dir: &Path, args: &[&str]) {
    let out = std::process::Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", promtool.display()));
    assert!(
        out.status.success(),
        "promtool {}: {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The alerting rules under Prometheus's own rule engine: alerts.yml loads, and its unit tests
/// (compose/prometheus/alerts.test.yml) pass, so each alert fires on series named and labelled as
/// the services export them, with the expected labels and rendered annotations, only once its
/// `for` has passed; and every alert has a case in which it fires. The checks above read the
/// rules with a PromQL parser of our own; this is the engine that will evaluate them.
#[test]
fn alerting_rules_fire_as_their_unit_tests_expect() {
    let Some(promtool) = promtool("alerting_rules_fire_as_their_unit_tests_expect") else {
        return;
    };
    let alerts: BTreeSet<String> = alert_rules()
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_owned())
        .collect();
    let tests =
        yaml_rust2::YamlLoader::load_from_str(&read("compose/prometheus/alerts.test.yml")).unwrap();
    let fired: BTreeSet<String> = tests[0]["tests"]
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_vec().unwrap())
        .filter(|case| case["exp_alerts"].as_vec().is_some_and(|a| !a.is_empty()))
        .map(|case| case["alertname"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(fired, alerts, "a unit test in which each alert fires");

    // The engine the compose deployment runs: Prometheus 3.x's Go module is v0.3xx.y for 3.x.y.
    let compose = read("compose/docker-compose.yml");
    let image = compose
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: prom/prometheus:v3."))
        .expect("compose runs prom/prometheus:v3.x.y");
    let (minor, patch) = image.split_once('.').unwrap();
    let script = read("scripts/promtool.sh");
    let built = script
        .lines()
        .find_map(|l| l.strip_prefix("version="))
        .unwrap();
    assert_eq!(
        built,
        format!("v0.3{:0>2}.{patch}", minor),
        "scripts/promtool.sh builds the Prometheus that compose runs (prom/prometheus:v3.{image})"
    );

    let dir = root().join("compose/prometheus");
    run_promtool(&promtool, &dir, &["check", "rules", "alerts.yml"]);
    run_promtool(&promtool, &dir, &["test", "rules", "alerts.test.yml"]);
}

/// The dashboard's queries under Prometheus's own parser and checks: each one, as Grafana sends
/// it, loads as a recording rule.
#[test]
fn the_dashboard_queries_load_in_prometheus() {
    let Some(promtool) = promtool("the_dashboard_queries_load_in_prometheus") else {
        return;
    };
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, _, expr)) in queries.into_iter().enumerate() {
        // A JSON string is a YAML string: no quoting of our own to get wrong.
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {}\n",
            serde_json::Value::String(expr)
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.rules.yml"), rules).unwrap();
    run_promtool(
        &promtool,
        dir.path(),
        &["check", "rules", "dashboard.rules.yml"],
    );
}
