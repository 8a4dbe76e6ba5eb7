//! Unit tests of the joiner config: defaults, environment overrides, and the settings refused
//! at load because they could only fail at run time.

use super::*;

const MINIMAL: &str = r#"
        [kafka]
        bootstrap-servers = "k:9092"
        [input]
        events-topic = "app.events"
        [output]
        path = "data"
    "#;

#[test]
fn settings_that_could_only_fail_at_run_time_are_refused_at_load() {
    let refused = |env: &[(&str, &str)], expected: &str| {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let err = JoinerConfig::from_toml_with_env(Path::new("join.toml"), MINIMAL, env)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{err}");
    };
    refused(
        &[("FEATURELOG_JOIN__KAFKA__BOOTSTRAP_SERVERS", "")],
        "bootstrap-servers is empty",
    );
    refused(
        &[("FEATURELOG_JOIN__INPUT__DEAD_LETTER_TOPIC", "dead letters")],
        "not a legal Kafka topic name",
    );
    refused(
        &[("FEATURELOG_JOIN__GROUP", "my group")],
        "repartition topic",
    );
    refused(
        &[(
            "FEATURELOG_JOIN__INPUT__EVENTS_TOPIC",
            "featurelog.feature-log.v1",
        )],
        "three different topics",
    );
    refused(
        &[("FEATURELOG_JOIN__JOIN__STATE_MAX_BYTES", "0")],
        "state-max-bytes",
    );
    // A misspelt librdkafka property, whose value could be a password.
    let text = format!("{MINIMAL}\n[kafka.properties]\n\"sasl.pasword\" = \"hunter2\"\n");
    let text = text.replacen("[kafka]\n        bootstrap-servers = \"k:9092\"", "", 1);
    let text = format!("[kafka]\nbootstrap-servers = \"k:9092\"\n{text}");
    let err = JoinerConfig::from_toml_with_env(Path::new("join.toml"), &text, Vec::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sasl.pasword") && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn events_topics_are_one_name_or_a_list() {
    let load = |topics: &str, env: &[(&str, &str)]| {
        let text = MINIMAL.replace("\"app.events\"", topics);
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        JoinerConfig::from_toml_with_env(Path::new("join.toml"), &text, env.collect::<Vec<_>>())
    };
    let one = load("\"app.events\"", &[]).unwrap();
    assert_eq!(one.input.events_topic.names(), ["app.events"]);
    let two = load("[\"app.impressions\", \"app.clicks\"]", &[]).unwrap();
    assert_eq!(
        two.input.events_topic.names(),
        ["app.impressions", "app.clicks"]
    );
    assert_eq!(
        two.input.events_topic.to_string(),
        "app.impressions, app.clicks"
    );
    // Written back as it was read (the check-config output, the docs).
    assert_eq!(
        serde_json::to_value(&one.input.events_topic).unwrap(),
        serde_json::json!("app.events")
    );
    let env = load(
        "\"x\"",
        &[("FEATURELOG_JOIN__INPUT__EVENTS_TOPIC", "[a, b]")],
    )
    .unwrap();
    assert_eq!(env.input.events_topic.names(), ["a", "b"]);
    let refused = |topics: &str, extra: &[(&str, &str)], expected: &str| {
        let err = load(topics, extra).unwrap_err().to_string();
        assert!(err.contains(expected), "{topics}: {err}");
    };
    refused("[]", &[], "must not be empty");
    refused("[\"a\", \"a\"]", &[], "twice");
    refused("[\"a\", \"bad name\"]", &[], "not a legal Kafka topic name");
    refused(
        "[\"a\", \"featurelog.feature-log.v1\"]",
        &[],
        "three different topics",
    );
    refused(
        "[\"a\", \"b\"]",
        &[(
            "FEATURELOG_JOIN__INPUT__EVENTS_PARTITIONING",
            "by-request-id",
        )],
        "reads one events topic",
    );
}

#[test]
fn a_topic_of_its_own_may_have_its_own_encoding_and_fields() {
    let load = |extra: &str| {
        let text = MINIMAL.replace(
            "events-topic = \"app.events\"",
            "events-topic = [\"app.events\", \"app.clicks\"]",
        );
        JoinerConfig::from_toml_with_env(
            Path::new("join.toml"),
            &format!("{text}\n{extra}"),
            Vec::new(),
        )
    };
    let c = load(
        "[input.per-topic.\"app.clicks\"]\nevents-format = \"protobuf\"\n\
             [input.per-topic.\"app.events\".json-fields]\nitem-id = \"sku\"",
    )
    .unwrap();
    let (format, _) = c.input.format_of("app.clicks");
    assert_eq!(format, EventFormat::Protobuf);
    let (format, fields) = c.input.format_of("app.events");
    assert_eq!(
        (format, fields.item_id.as_str()),
        (EventFormat::Json, "sku")
    );
    // Given in full: the other names are the built-in defaults.
    assert_eq!(fields.request_id, "request_id");
    let err = load("[input.per-topic.\"app.views\"]\nevents-format = \"json\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not list"), "{err}");
    let err = load("[input.per-topic.\"app.clicks\".json-fields.event-types]\nimpression = []")
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one"), "{err}");
}

#[test]
fn defaults_and_overrides() {
    let c = JoinerConfig::from_toml_with_env(
        Path::new("/etc/fl/join.toml"),
        MINIMAL,
        [(
            "FEATURELOG_JOIN__JOIN__LABEL_WINDOW".to_string(),
            "10m".to_string(),
        )],
    )
    .unwrap();
    assert_eq!(c.output.path, Path::new("/etc/fl/data"));
    assert_eq!(c.input.events_format, EventFormat::Json);
    assert_eq!(c.join.label_window, Some(Duration::from_secs(600)));
    assert_eq!(
        c.repartition_topic(),
        "featurelog-joiner.impressions-by-request"
    );
    assert_eq!(c.join_config(1).features_wait_us, 1_800_000_000);
    assert_eq!(c.input.events_partitioning, EventsPartitioning::Any);
    assert!(c.static_membership);
}

#[test]
fn the_event_time_unit_comes_from_the_file_or_the_environment() {
    let with = |text: &str, env: Vec<(String, String)>| {
        JoinerConfig::from_toml_with_env(Path::new("join.toml"), text, env)
            .map(|c| c.input.json_fields.event_time_unit)
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        with(MINIMAL, Vec::new()),
        Ok(crate::event::TimeUnit::Milliseconds)
    );
    let in_file = format!("{MINIMAL}\n[input.json-fields]\nevent-time-unit = \"seconds\"\n");
    assert_eq!(
        with(&in_file, Vec::new()),
        Ok(crate::event::TimeUnit::Seconds)
    );
    let from_env = vec![(
        "FEATURELOG_JOIN__INPUT__JSON_FIELDS__EVENT_TIME_UNIT".to_string(),
        "microseconds".to_string(),
    )];
    assert_eq!(
        with(MINIMAL, from_env),
        Ok(crate::event::TimeUnit::Microseconds)
    );
    let err = with(&in_file.replace("\"seconds\"", "\"minutes\""), Vec::new()).unwrap_err();
    assert!(err.to_string().contains("milliseconds"), "{err}");
}

#[test]
fn an_events_sample_rate_outside_0_to_1_is_refused() {
    for rate in ["-0.1", "1.5", "nan"] {
        let err = JoinerConfig::from_toml_with_env(
            Path::new("join.toml"),
            MINIMAL,
            [(
                "FEATURELOG_JOIN__INPUT__EVENTS_SAMPLE_RATE".to_string(),
                rate.to_string(),
            )],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("events-sample-rate"),
            "{rate}: {err}"
        );
    }
    let c = JoinerConfig::from_toml_with_env(Path::new("join.toml"), MINIMAL, Vec::new()).unwrap();
    assert_eq!(c.input.events_sample_rate, 1.0);
}

#[test]
fn events_partitioning_comes_from_the_file_or_the_environment_and_nothing_else() {
    let from_env = JoinerConfig::from_toml_with_env(
        Path::new("join.toml"),
        MINIMAL,
        [(
            "FEATURELOG_JOIN__INPUT__EVENTS_PARTITIONING".to_string(),
            "by-request-id".to_string(),
        )],
    )
    .unwrap();
    assert_eq!(
        from_env.input.events_partitioning,
        EventsPartitioning::ByRequestId
    );
    let err = JoinerConfig::from_toml_with_env(
        Path::new("join.toml"),
        &MINIMAL.replace(
            "events-topic = \"app.events\"",
            "events-topic = \"app.events\"\nevents-partitioning = \"by-item\"",
        ),
        Vec::new(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("by-request-id"), "{err}");
}

#[test]
fn s3_paths_take_object_store_settings_from_the_file_and_the_environment() {
    let text = MINIMAL.replace(
        "path = \"data\"",
        "path = \"s3://training/joined/v1/\"\n[output.object-store]\nregion = \"us-east-1\"\n\
             [output.object-store.options]\naws_virtual_hosted_style_request = \"false\"",
    );
    let c = JoinerConfig::from_toml_with_env(
        Path::new("/etc/fl/join.toml"),
        &text,
        [
            (
                "FEATURELOG_JOIN__OUTPUT__OBJECT_STORE__ENDPOINT".to_string(),
                "http://minio:9000".to_string(),
            ),
            (
                "FEATURELOG_JOIN__OUTPUT__OBJECT_STORE__ALLOW_HTTP".to_string(),
                "true".to_string(),
            ),
        ],
    )
    .unwrap();
    assert_eq!(
        c.output.location().unwrap(),
        OutputLocation::S3 {
            bucket: "training".into(),
            prefix: "joined/v1".into()
        }
    );
    let store = c.output.object_store.as_ref().unwrap();
    assert_eq!(store.endpoint.as_deref(), Some("http://minio:9000"));
    assert_eq!(store.allow_http, Some(true));

    for (bad, reason) in [
        ("path = \"gs://b/p\"", "s3://"),
        ("path = \"s3:///p\"", "no bucket"),
        (
            "path = \"s3://b/p\"\n[output.object-store.options]\naws_no_such_thing = \"1\"",
            "aws_no_such_thing",
        ),
        (
            "path = \"data\"\n[output.object-store]\nregion = \"x\"",
            "only to an s3://",
        ),
        ("path = \"data\"\ncheckpoints-kept = 1", "at least 2"),
        (
            "path = \"data\"\nflush-rows = 0",
            "flush-rows must be at least 1",
        ),
        (
            "path = \"data\"\nzstd-level = 0",
            "output.zstd-level 0 is not a level",
        ),
        (
            "path = \"data\"\nzstd-level = 23",
            "output.zstd-level 23 is not a level",
        ),
        ("path = \"data\"\nzstd-level = -1", "output.zstd-level -1"),
        (
            "path = \"s3://b/p\"\n[output.object-store.options]\n\
                 aws_endpoint = \"http://a:9000\"\nendpoint = \"http://b:9000\"",
            "options.aws_endpoint and options.endpoint are the same S3 setting",
        ),
        (
            "path = \"s3://b/p\"\n[output.object-store]\nregion = \"x\"\n\
                 [output.object-store.options]\naws-region = \"y\"",
            "region and options.aws-region are the same S3 setting",
        ),
    ] {
        let err = JoinerConfig::from_toml_with_env(
            Path::new("join.toml"),
            &MINIMAL.replace("path = \"data\"", bad),
            Vec::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains(reason), "{bad}: {err}");
    }
}

#[test]
fn unknown_keys_are_refused_with_the_file_named() {
    let err = JoinerConfig::from_toml_with_env(
        Path::new("join.toml"),
        &format!("{MINIMAL}\n[join]\nlabel-windw = \"1m\""),
        Vec::new(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("join.toml") && err.to_string().contains("label-windw"),
        "{err}"
    );
}

#[test]
fn the_output_format_is_parquet_unless_delta_is_asked_for() {
    let load = |extra: &str, env: Vec<(String, String)>| {
        JoinerConfig::from_toml_with_env(
            Path::new("join.toml"),
            &MINIMAL.replace("path = \"data\"", &format!("path = \"data\"\n{extra}")),
            env,
        )
    };
    assert_eq!(
        load("", Vec::new()).unwrap().output.format,
        OutputFormat::Parquet
    );
    assert_eq!(
        load("format = \"delta\"", Vec::new())
            .unwrap()
            .output
            .format,
        OutputFormat::Delta
    );
    let env = vec![("FEATURELOG_JOIN__OUTPUT__FORMAT".into(), "delta".into())];
    assert_eq!(load("", env).unwrap().output.format, OutputFormat::Delta);
    let err = load("format = \"iceberg\"", Vec::new()).unwrap_err();
    assert!(err.to_string().contains("iceberg"), "{err}");
    let by_model = load("format = \"delta\"\npartition-by-model = true", Vec::new()).unwrap();
    assert!(by_model.output.partition_by_model);
    let err = load(
        "format = \"delta\"\n[output.delta]\nvacuum-retention = \"10m\"",
        Vec::new(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("at least 1h"), "{err}");
}
