//! The deployment files in compose/, kept right without a Docker engine or a cluster: what a
//! user would otherwise find out at `docker compose up` or `kubectl apply`. Every mounted host
//! path exists, every featurelog config passes `featurelog <subcommand> --check-config` with the
//! environment the deployment gives it, every `depends_on` condition can be met, the allow list
//! names the served model's real tensors, the ports the probes use are the ports the configs
//! listen on, and Prometheus scrapes them and loads the alerting rules (whose PromQL
//! tests/docs.rs checks).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use featurelog_joiner::config::JoinerConfig;
use featurelog_sidecar::SidecarConfig;
use featurelog_sidecar::allowlist::AllowList;
use yaml_rust2::{Yaml, YamlLoader};

fn compose_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("compose")
}

fn load(path: &Path) -> Vec<Yaml> {
    let text = std::fs::read_to_string(path).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn compose() -> Yaml {
    load(&compose_dir().join("docker-compose.yml"))
        .into_iter()
        .next()
        .unwrap()
}

fn str_of(y: &Yaml) -> String {
    match y {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn strings(y: &Yaml) -> Vec<String> {
    match y {
        Yaml::Array(items) => items.iter().map(str_of).collect(),
        Yaml::BadValue | Yaml::Null => Vec::new(),
        other => vec![str_of(other)],
    }
}

fn services(doc: &Yaml) -> Vec<(String, Yaml)> {
    doc["services"]
        .as_hash()
        .expect("services")
        .iter()
        .map(|(k, v)| (str_of(k), v.clone()))
        .collect()
}

/// A service's environment, in either of compose's forms (map or `KEY=value` list).
fn environment(service: &Yaml) -> Vec<(String, String)> {
    match &service["environment"] {
        Yaml::Hash(h) => h.iter().map(|(k, v)| (str_of(k), str_of(v))).collect(),
        Yaml::Array(items) => items
            .iter()
            .map(|i| {
                let s = str_of(i);
                let (k, v) = s.split_once('=').unwrap_or((&s, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Runs `featurelog <subcommand> --check-config <file>` with exactly `env` as the deployment's
/// environment (the test process's own FEATURELOG_/AWS_ variables removed).
fn check_config(subcommand: &str, file: &Path, env: &[(String, String)]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_featurelog"));
    cmd.args([subcommand, "--check-config", file.to_str().unwrap()]);
    for (k, _) in std::env::vars() {
        if k.starts_with("FEATURELOG_") || k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "featurelog {subcommand} --check-config {} with {env:?}:\n{}{}",
        file.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `--config` argument of a featurelog service's command.
fn config_arg(args: &[String]) -> Option<(String, String)> {
    let sub = args.first()?.clone();
    let at = args.iter().position(|a| a == "--config")?;
    Some((sub, args.get(at + 1)?.clone()))
}

/// The TCP ports a healthcheck or probe command string dials (`/dev/tcp/host/PORT`, `:PORT`).
fn dialed_ports(test: &str) -> BTreeSet<u16> {
    test.split("/dev/tcp/")
        .skip(1)
        .filter_map(|rest| rest.split('/').nth(1))
        .filter_map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .collect()
}

fn sidecar_config(path: &Path) -> SidecarConfig {
    SidecarConfig::load(path).unwrap()
}

fn join_config(path: &Path) -> JoinerConfig {
    JoinerConfig::load(path).unwrap()
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

#[test]
fn every_mounted_path_exists_and_every_config_passes_check_config_with_its_environment() {
    let doc = compose();
    let declared_volumes: BTreeSet<String> = doc["volumes"]
        .as_hash()
        .map(|h| h.keys().map(str_of).collect())
        .unwrap_or_default();
    let mut checked = BTreeSet::new();
    for (name, service) in services(&doc) {
        // Host paths exist; named volumes are declared.
        let mut mounts: BTreeMap<String, PathBuf> = BTreeMap::new();
        for volume in strings(&service["volumes"]) {
            let mut parts = volume.split(':');
            let (source, target) = (parts.next().unwrap(), parts.next().unwrap_or(""));
            if source.starts_with('.') || source.starts_with('/') {
                let host = compose_dir().join(source);
                assert!(
                    host.exists(),
                    "{name}: mounts {source}, which does not exist"
                );
                mounts.insert(target.to_owned(), host);
            } else {
                assert!(
                    declared_volumes.contains(source),
                    "{name}: named volume {source} is not declared under volumes:"
                );
            }
        }
        if let Yaml::Hash(_) = &service["build"] {
            let context = compose_dir().join(str_of(&service["build"]["context"]));
            let dockerfile = context.join(str_of(&service["build"]["dockerfile"]));
            assert!(
                dockerfile.exists(),
                "{name}: {} is missing",
                dockerfile.display()
            );
        }
        let args = strings(&service["command"]);
        let Some((sub, config)) = config_arg(&args) else {
            continue;
        };
        let host = mounts
            .get(&config)
            .unwrap_or_else(|| panic!("{name}: --config {config} is not mounted"));
        let env = environment(&service);
        check_config(&sub, host, &env);
        let dir = Path::new(&config).parent().unwrap();
        let metrics = if sub == "sidecar" {
            let c = sidecar_config(host);
            // The allow list is resolved next to the config, inside the container too.
            let list = c.allow_list.strip_prefix(host.parent().unwrap()).unwrap();
            let in_container = dir.join(list).to_string_lossy().into_owned();
            assert!(
                mounts.contains_key(&in_container),
                "{name}: the allow list {in_container} is not mounted"
            );
            c.metrics.listen.port()
        } else {
            join_config(host).metrics.listen.port()
        };
        // The healthcheck dials the port the config serves /readyz on, and it is published.
        let health = strings(&service["healthcheck"]["test"]).join(" ");
        assert!(
            dialed_ports(&health).contains(&metrics),
            "{name}: healthcheck {health:?} does not dial the metrics port {metrics}"
        );
        assert!(
            strings(&service["ports"])
                .iter()
                .any(|p| p.ends_with(&format!(":{metrics}"))),
            "{name}: metrics port {metrics} not published"
        );
        checked.insert(sub);
    }
    assert_eq!(
        checked,
        BTreeSet::from(["join".to_string(), "sidecar".to_string()]),
        "the deployment runs a sidecar and a joiner"
    );
}

#[test]
fn depends_on_conditions_can_be_met_and_the_services_point_at_each_other() {
    let doc = compose();
    let all: BTreeMap<String, Yaml> = services(&doc).into_iter().collect();
    for (name, service) in &all {
        let Some(deps) = service["depends_on"].as_hash() else {
            assert!(
                service["depends_on"].is_badvalue(),
                "{name}: use the long depends_on form, with a condition"
            );
            continue;
        };
        for (dep, spec) in deps {
            let dep = str_of(dep);
            let target = all
                .get(&dep)
                .unwrap_or_else(|| panic!("{name} depends on {dep}, which is not a service"));
            match spec["condition"].as_str() {
                Some("service_healthy") => assert!(
                    !target["healthcheck"]["test"].is_badvalue(),
                    "{name} waits for {dep} to be healthy, but {dep} has no healthcheck"
                ),
                Some("service_completed_successfully") => {
                    let restart = target["restart"].as_str().unwrap_or("no");
                    assert!(
                        restart == "no" || restart == "on-failure",
                        "{name} waits for {dep} to complete, but {dep} restarts ({restart})"
                    );
                }
                Some("service_started") => {}
                other => panic!("{name} -> {dep}: condition {other:?}"),
            }
        }
    }

    // The sidecar forwards to Triton's gRPC port; both featurelog services reach Kafka by its
    // advertised name; the joiner's bucket is the one minio-init creates.
    let configs = compose_dir().join("configs");
    let sidecar = sidecar_config(&configs.join("sidecar.toml"));
    let triton_args = strings(&all["triton"]["command"]).join(" ");
    let upstream = sidecar.upstream.as_str();
    let (host, port) = upstream
        .trim_start_matches("http://")
        .split_once(':')
        .unwrap();
    assert_eq!(host, "triton");
    assert!(
        triton_args.contains(&format!("--grpc-port={port}")),
        "{triton_args}"
    );
    // And its REST proxy to Triton's HTTP port.
    let rest = sidecar.rest.as_ref().unwrap().upstream.as_str();
    let (host, port) = rest.trim_start_matches("http://").split_once(':').unwrap();
    assert_eq!(host, "triton");
    assert!(
        triton_args.contains(&format!("--http-port={port}")),
        "{triton_args}"
    );
    let advertised = environment(&all["kafka"])
        .into_iter()
        .find(|(k, _)| k == "KAFKA_ADVERTISED_LISTENERS")
        .unwrap()
        .1;
    let join = join_config(&configs.join("join.toml"));
    for bootstrap in [
        sidecar.kafka.as_ref().unwrap().bootstrap_servers.as_str(),
        join.kafka.bootstrap_servers.as_str(),
    ] {
        assert!(
            advertised.ends_with(&format!("//{bootstrap}")),
            "{bootstrap} vs {advertised}"
        );
    }
    let path = join.output.path.to_string_lossy().into_owned();
    let bucket = path
        .strip_prefix("s3://")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    // The joiner writes to the S3 API of the minio service: its name, and the port MinIO
    // serves the API on (9000 unless `--address` says otherwise; `--console-address` is the
    // web console's).
    let store = join.output.object_store.as_ref().unwrap();
    let endpoint = store.endpoint.as_deref().unwrap();
    let (host, port) = endpoint
        .trim_start_matches("http://")
        .split_once(':')
        .unwrap();
    assert_eq!(host, "minio", "{endpoint}");
    let minio_args = strings(&all["minio"]["command"]);
    let api_port = minio_args
        .iter()
        .position(|a| a == "--address")
        .map_or("9000", |i| minio_args[i + 1].trim_start_matches(':'));
    assert_eq!(port, api_port, "{endpoint} vs minio {minio_args:?}");
    assert_eq!(
        store.allow_http,
        Some(true),
        "an http:// endpoint needs allow-http"
    );
    let init = strings(&all["minio-init"]["command"]).join(" ");
    assert!(
        init.contains(&format!("mb --ignore-existing local/{bucket}")),
        "{init}"
    );
}

/// A service's mounts: path in the container -> path on the host (as written in the file).
fn bind_mounts(service: &Yaml) -> BTreeMap<String, String> {
    strings(&service["volumes"])
        .iter()
        .map(|v| {
            let mut parts = v.split(':');
            let (source, target) = (parts.next().unwrap(), parts.next().unwrap());
            (target.to_owned(), source.to_owned())
        })
        .collect()
}

/// Prometheus scrapes each featurelog service at the port its config serves `/metrics` on and
/// loads the alerting rules from where they are mounted; Grafana reads that Prometheus and
/// loads the dashboard (tests/docs.rs checks the rules' and the dashboard's PromQL).
#[test]
fn prometheus_scrapes_both_services_and_grafana_reads_it() {
    let doc = compose();
    let all: BTreeMap<String, Yaml> = services(&doc).into_iter().collect();
    let prometheus = &all["prometheus"];
    let mounts = bind_mounts(prometheus);
    let config = strings(&prometheus["command"])
        .iter()
        .find_map(|a| a.strip_prefix("--config.file=").map(str::to_owned))
        .expect("--config.file");
    let config = load(&compose_dir().join(&mounts[&config]))
        .into_iter()
        .next()
        .unwrap();
    for rules in strings(&config["rule_files"]) {
        let source = mounts
            .get(&rules)
            .unwrap_or_else(|| panic!("rule file {rules} is not mounted"));
        assert_eq!(source, "./prometheus/alerts.yml");
    }
    let configs = compose_dir().join("configs");
    let expected = BTreeMap::from([
        (
            "featurelog-sidecar".to_string(),
            format!(
                "sidecar:{}",
                sidecar_config(&configs.join("sidecar.toml"))
                    .metrics
                    .listen
                    .port()
            ),
        ),
        (
            "featurelog-joiner".to_string(),
            format!(
                "joiner:{}",
                join_config(&configs.join("join.toml"))
                    .metrics
                    .listen
                    .port()
            ),
        ),
    ]);
    let jobs: BTreeMap<String, String> = config["scrape_configs"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|job| {
            let targets = strings(&job["static_configs"][0]["targets"]);
            (str_of(&job["job_name"]), targets.join(","))
        })
        .collect();
    assert_eq!(jobs, expected);

    // Grafana reads this Prometheus, and loads the dashboards from where they are mounted.
    let grafana = &all["grafana"];
    let grafana_mounts = bind_mounts(grafana);
    let provisioning = compose_dir().join(&grafana_mounts["/etc/grafana/provisioning"]);
    let datasource = load(&provisioning.join("datasources/prometheus.yml"))
        .into_iter()
        .next()
        .unwrap();
    let port = strings(&prometheus["ports"])[0]
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        str_of(&datasource["datasources"][0]["url"]),
        format!("http://prometheus:{port}")
    );
    let providers = load(&provisioning.join("dashboards/featurelog.yml"))
        .into_iter()
        .next()
        .unwrap();
    let path = str_of(&providers["providers"][0]["options"]["path"]);
    let dashboards = compose_dir().join(&grafana_mounts[&path]);
    assert!(dashboards.join("featurelog.json").exists(), "{path}");
}

/// The model's tensor names from a Triton config.pbtxt: (model name, inputs, outputs).
fn triton_model(pbtxt: &str) -> (String, BTreeSet<String>, BTreeSet<String>) {
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.trim().strip_prefix("name:"))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .collect()
    };
    let (head, rest) = pbtxt.split_once("input [").unwrap();
    let (inputs, outputs) = rest.split_once("output [").unwrap();
    (
        names(head).into_iter().next().unwrap(),
        names(inputs).into_iter().collect(),
        names(outputs).into_iter().collect(),
    )
}

fn check_allow_list_matches(allow: &str, pbtxt: &str, what: &str) {
    let (model, inputs, outputs) = triton_model(pbtxt);
    let list = AllowList::parse(allow).unwrap();
    assert_eq!(list.models.len(), 1, "{what}");
    let entry = &list.models[0];
    assert_eq!(entry.name, model, "{what}: model name");
    for feature in &entry.features {
        assert!(
            inputs.contains(feature),
            "{what}: {feature} is not an input of {model}: {inputs:?}"
        );
    }
    for output in &entry.outputs {
        assert!(
            outputs.contains(output),
            "{what}: {output} is not an output of {model}"
        );
    }
    let ids = entry.candidate_ids_input.as_deref().unwrap();
    assert!(
        inputs.contains(ids),
        "{what}: {ids} is not an input of {model}"
    );
}

#[test]
fn the_allow_list_names_the_served_models_real_tensors() {
    let dir = compose_dir();
    let pbtxt = std::fs::read_to_string(dir.join("models/ranker/config.pbtxt")).unwrap();
    assert!(
        dir.join("models/ranker/1/model.py").exists(),
        "Triton's version directory"
    );
    let allow = std::fs::read_to_string(dir.join("configs/allow-list.toml")).unwrap();
    check_allow_list_matches(&allow, &pbtxt, "compose");
}

fn k8s() -> Vec<Yaml> {
    load(&compose_dir().join("k8s/sidecar.yaml"))
}

fn find<'a>(docs: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("the manifest has no {kind} {name}"))
}

/// The ConfigMap a container's `--config` path is mounted from, written out as the pod sees
/// it: the directory and the config file in it.
fn mounted_config(docs: &[Yaml], pod: &Yaml, container: &Yaml) -> (tempfile::TempDir, PathBuf) {
    let (_, config) = config_arg(&strings(&container["args"])).unwrap();
    let config_dir = Path::new(&config)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let mount = container["volumeMounts"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(config_dir.as_str()))
        .unwrap_or_else(|| panic!("nothing mounted at {config_dir}"));
    let volume = pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let map = find(
        docs,
        "ConfigMap",
        volume["configMap"]["name"].as_str().unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in map["data"].as_hash().unwrap() {
        std::fs::write(dir.path().join(str_of(key)), str_of(value)).unwrap();
    }
    let file = dir.path().join(Path::new(&config).file_name().unwrap());
    (dir, file)
}

/// A container's environment; values from the downward API or a Secret stand in as
/// `placeholder`.
fn container_env(container: &Yaml, placeholder: &str) -> Vec<(String, String)> {
    container["env"]
        .as_vec()
        .map(|vars| {
            vars.iter()
                .map(|v| {
                    let value = v["value"].as_str().unwrap_or(placeholder).to_owned();
                    (str_of(&v["name"]), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The container port named `name`.
fn port_named(container: &Yaml, name: &str) -> i64 {
    container["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .and_then(|p| p["containerPort"].as_i64())
        .unwrap_or_else(|| panic!("no port named {name}"))
}

/// Liveness on /healthz and readiness on /readyz, both on `metrics` (the config's port).
fn assert_probes(container: &Yaml, metrics: u16) {
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{probe}");
        let port = match &get["port"] {
            Yaml::Integer(p) => *p,
            named => port_named(container, named.as_str().unwrap()),
        };
        assert_eq!(port, i64::from(metrics), "{probe} port");
    }
}

#[test]
fn the_kubernetes_example_passes_check_config_and_probes_the_sidecar() {
    let docs = k8s();
    let deployment = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .expect("a Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_vec().unwrap();
    let sidecar = containers
        .iter()
        .find(|c| strings(&c["args"]).first().map(String::as_str) == Some("sidecar"))
        .expect("a featurelog sidecar container");
    let model = containers
        .iter()
        .find(|c| c != &sidecar)
        .expect("a model-server container beside it");

    // The ConfigMap mounted where --config points, written out and checked as the pod sees it.
    let (_dir, file) = mounted_config(&docs, pod, sidecar);
    check_config("sidecar", &file, &container_env(sidecar, "ranker-7d9f-0"));

    // Probes on the metrics port the config listens on; the sidecar forwards to the model
    // server's gRPC port; the grace period outlasts the sidecar's shutdown.
    let table = sidecar_config(&file);
    assert_probes(sidecar, table.metrics.listen.port());
    let listen = table.listen.port();
    assert_eq!(port_named(sidecar, "grpc"), i64::from(listen));
    let upstream = table.upstream.as_str();
    let upstream_port = port_of(upstream);
    assert!(
        upstream.contains("127.0.0.1"),
        "{upstream}: the model server is in the same pod"
    );
    assert!(
        strings(&model["args"])
            .iter()
            .any(|a| a == &format!("--grpc-port={upstream_port}")),
        "the model server serves gRPC on {upstream_port}"
    );
    assert_ne!(
        upstream_port, listen,
        "one pod, one network namespace: ports must differ"
    );
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap();
    let shutdown = table.shutdown_timeout.as_secs() as i64;
    assert!(
        grace > 2 * shutdown,
        "grace {grace}s vs shutdown-timeout {shutdown}s"
    );

    // The model repository built from its ConfigMap, and the allow list agree.
    let model_map = find(&docs, "ConfigMap", "featurelog-ranker-model");
    let pbtxt = model_map["data"]["config.pbtxt"].as_str().unwrap();
    check_allow_list_matches(
        &std::fs::read_to_string(file.with_file_name("allow-list.toml")).unwrap(),
        pbtxt,
        "k8s",
    );
    let compose_model =
        std::fs::read_to_string(compose_dir().join("models/ranker/config.pbtxt")).unwrap();
    assert_eq!(
        pbtxt, compose_model,
        "one model, the same in compose and k8s"
    );

    // The Service selects the pod and sends clients to the sidecar.
    let service = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Service"))
        .expect("a Service");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_hash().unwrap() {
        assert_eq!(&labels[str_of(k).as_str()], v, "selector {k:?}");
    }
    assert!(
        service["spec"]["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .any(|p| p["targetPort"].as_str() == Some("grpc")),
        "the Service's gRPC port targets the sidecar"
    );
}

/// The joiner's Kubernetes example: a StatefulSet whose pod names (stable across restarts) are
/// the joiners' instances, so static group membership gives a restarted pod its tasks back; its
/// config passes `--check-config` as the pod sees it; probes on the metrics port; the headless
/// Service that gives the pods their names selects them.
#[test]
fn the_kubernetes_joiner_is_a_statefulset_whose_stable_pod_names_are_its_instances() {
    let docs = load(&compose_dir().join("k8s/joiner.yaml"));
    let set = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("StatefulSet"))
        .expect("a StatefulSet: pod names that survive restarts");
    let pod = &set["spec"]["template"]["spec"];
    let joiner = pod["containers"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|c| strings(&c["args"]).first().map(String::as_str) == Some("join"))
        .expect("a featurelog join container");

    let (_dir, file) = mounted_config(&docs, pod, joiner);
    let env = container_env(joiner, "featurelog-joiner-0");
    check_config("join", &file, &env);
    let table = join_config(&file);
    assert!(
        table.static_membership,
        "static membership is what the StatefulSet is for"
    );
    let instance = joiner["env"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str() == Some("FEATURELOG_JOIN__INSTANCE"))
        .expect("the instance comes from the environment");
    assert_eq!(
        instance["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.name"),
        "the instance is the pod's name"
    );
    assert!(
        env.iter().any(|(k, _)| k == "AWS_ACCESS_KEY_ID"),
        "credentials for the bucket come from the environment"
    );
    assert_probes(joiner, table.metrics.listen.port());

    let service = find(
        &docs,
        "Service",
        set["spec"]["serviceName"].as_str().unwrap(),
    );
    assert_eq!(
        service["spec"]["clusterIP"].as_str(),
        Some("None"),
        "headless"
    );
    let labels = &set["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_hash().unwrap() {
        assert_eq!(&labels[str_of(k).as_str()], v, "selector {k:?}");
    }
}

/// On Kubernetes with prometheus-operator: each ServiceMonitor selects the Service of its
/// example by label, scrapes the port named `metrics` (the config's metrics port) and sets the
/// `job` the rules' `up` alerts name; scripts/prometheus-rule.sh wraps exactly the rule file's
/// groups in a PrometheusRule.
#[test]
fn prometheus_operator_scrapes_both_services_with_the_rules_jobs() {
    let monitors = load(&compose_dir().join("k8s/monitoring.yaml"));
    let rules = std::fs::read_to_string(compose_dir().join("prometheus/alerts.yml")).unwrap();
    for (monitor, manifest, service) in [
        ("featurelog-sidecar", "k8s/sidecar.yaml", "ranker"),
        ("featurelog-joiner", "k8s/joiner.yaml", "featurelog-joiner"),
    ] {
        let monitor = find(&monitors, "ServiceMonitor", monitor);
        let docs = load(&compose_dir().join(manifest));
        let service = find(&docs, "Service", service);
        for (key, value) in monitor["spec"]["selector"]["matchLabels"]
            .as_hash()
            .unwrap()
        {
            assert_eq!(
                &service["metadata"]["labels"][str_of(key).as_str()],
                value,
                "the ServiceMonitor selects the Service"
            );
        }
        let endpoint = &monitor["spec"]["endpoints"][0];
        assert_eq!(endpoint["path"].as_str(), Some("/metrics"));
        let port = endpoint["port"].as_str().unwrap();
        assert!(
            service["spec"]["ports"]
                .as_vec()
                .unwrap()
                .iter()
                .any(|p| p["name"].as_str() == Some(port)),
            "the Service has a port named {port}"
        );
        let job = endpoint["relabelings"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|r| r["targetLabel"].as_str() == Some("job"))
            .and_then(|r| r["replacement"].as_str())
            .expect("a job relabeling");
        assert!(
            rules.contains(&format!("up{{job=\"{job}\"}}")),
            "an up alert for job {job}"
        );
    }

    let output =
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/prometheus-rule.sh"))
            .env(
                "PROMETHEUS_RULE_LABELS",
                "release=kube-prometheus-stack,team=ml",
            )
            .output()
            .unwrap();
    assert!(output.status.success(), "{output:?}");
    let rule = YamlLoader::load_from_str(&String::from_utf8(output.stdout).unwrap()).unwrap();
    let rule = &rule[0];
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(
        rule["metadata"]["labels"]["release"].as_str(),
        Some("kube-prometheus-stack")
    );
    assert_eq!(rule["metadata"]["labels"]["team"].as_str(), Some("ml"));
    let file = YamlLoader::load_from_str(&rules).unwrap();
    assert_eq!(
        rule["spec"]["groups"], file[0]["groups"],
        "the rule file's groups, all of them"
    );
}
