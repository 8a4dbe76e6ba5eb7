//! Quiet inputs: label windows that close and hours that complete on the wall clock, models partitioned apart, events on topics of their own, negatives.

use super::*;

/// With a label window, rows wait for it to close; when the inputs go quiet the watermark moves
/// on the wall clock, the windows close, and finished hours get their `_SUCCESS` marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn quiet_inputs_close_label_windows_and_complete_hours() {
    let Some(kafka) = kafka("quiet_inputs_close_label_windows_and_complete_hours") else {
        return;
    };
    quiet_inputs(kafka, Quiet::Routed).await;
}

/// A dataset partitioned by model (`output.partition-by-model`): each model's rows under its
/// own `model=` directory (its name escaped as hive readers decode it), each model's hours
/// complete on their own, read back by pyarrow; the other layout is refused on that dataset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn partitioned_by_model_each_model_gets_its_own_complete_hours() {
    let Some(kafka) = kafka("partitioned_by_model_each_model_gets_its_own_complete_hours") else {
        return;
    };
    quiet_inputs(kafka, Quiet::PartitionedByModel).await;
}

/// A Delta table partitioned by model: the log names each model as readers decode its
/// directory, and the `deltalake` package, Polars and Spark read every row under its model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_delta_table_partitioned_by_model_names_each_row_s_model() {
    let Some(kafka) = kafka("a_delta_table_partitioned_by_model_names_each_row_s_model") else {
        return;
    };
    quiet_inputs(kafka, Quiet::DeltaPartitionedByModel).await;
}

/// Apps that publish impressions and clicks to topics of their own, the clicks from another
/// service as protobuf (`input.per-topic`): both are read (the router reads every events
/// topic, each in its own encoding), the clicks fold into their impressions' rows, and an hour
/// is complete only once every partition of both topics is past it (the clicks topic has two
/// partitions, one of them empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn impressions_and_clicks_on_topics_of_their_own_make_the_same_rows() {
    let Some(kafka) = kafka("impressions_and_clicks_on_topics_of_their_own") else {
        return;
    };
    quiet_inputs(kafka, Quiet::ClicksOnATopicOfTheirOwn).await;
}

/// Apps that write events in transactions leave a commit marker after their last event, which
/// no consumer receives: a co-partitioned task must still see its events partition as read to
/// its end when it is quiet, or no label window would ever close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn quiet_co_partitioned_events_written_in_transactions_close_label_windows() {
    let Some(kafka) = kafka("quiet_co_partitioned_events_written_in_transactions") else {
        return;
    };
    quiet_inputs(kafka, Quiet::CoPartitionedInTransactions).await;
}

/// With `join.negatives-sample-rate = 1`, every candidate scored and never impressed becomes
/// a row once its features expire, marked `impressed = false` with no impression time or
/// label, beside the impressed rows, as pyarrow reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn candidates_scored_and_never_impressed_are_written_as_negatives() {
    let Some(kafka) = kafka("candidates_scored_and_never_impressed_are_written_as_negatives")
    else {
        return;
    };
    quiet_inputs(kafka, Quiet::Negatives).await;
}

/// How `quiet_inputs` sends the app's events.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Quiet {
    /// To one events topic, keyed by item: routed.
    Routed,
    /// Co-partitioned with the feature logs, in a transaction.
    CoPartitionedInTransactions,
    /// Impressions to the events topic, clicks to another one: both routed.
    ClicksOnATopicOfTheirOwn,
    /// Routed, from two models, into a dataset partitioned by model.
    PartitionedByModel,
    /// Routed, with every candidate that was not impressed written as a negative.
    Negatives,
    /// [`Quiet::PartitionedByModel`] into a Delta table (without compaction, so that the
    /// directories hold each row once, as the checks of the other modes read them).
    DeltaPartitionedByModel,
}

/// The second model of `Quiet::PartitionedByModel`: a name no path segment takes as it is.
pub(super) const SECOND_MODEL: &str = "ranker b/2";

/// Produces events keyed by request id, murmur2-partitioned (co-partitioned with the feature
/// logs), in one transaction, as an app with a transactional producer would.
pub(super) async fn produce_events_in_a_transaction(
    kafka: &KafkaConfig,
    topic: &str,
    events: &[AppEvent],
) {
    let producer: FutureProducer = kafka
        .client_config(&[
            ("partitioner", "murmur2_random"),
            ("transactional.id", &format!("test-app-{topic}")),
        ])
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    for e in events {
        let request = e.body.split('"').nth(3).unwrap();
        producer
            .send(
                FutureRecord::to(topic).key(request).payload(&e.body),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer
        .commit_transaction(Duration::from_secs(30))
        .unwrap();
}

pub(super) async fn quiet_inputs(kafka: TestKafka, mode: Quiet) {
    let co_partitioned_in_transactions = mode == Quiet::CoPartitionedInTransactions;
    let features = kafka.unique_topic("done-features", 1).await;
    let events = kafka.unique_topic("done-events", 1).await;
    let clicks = kafka.unique_topic("done-clicks", 2).await;
    let dead_letter = kafka.unique_topic("done-dlq", 1).await;
    let delta = mode == Quiet::DeltaPartitionedByModel;
    let by_model = mode == Quiet::PartitionedByModel || delta;
    let (model_addr, _stop) = model_server(&["ranker", SECOND_MODEL]).await;
    let dir = temp_dir();
    let allow = format!(
        "{ALLOW}\n[[model]]\nname = \"{SECOND_MODEL}\"\nfeatures = [\"user_locale\", \"item_price\"]\ncandidate-ids-input = \"item_id\"\n"
    );
    let sidecar = sidecar(sidecar_config(
        dir.path(),
        model_addr,
        Some(&kafka.config),
        &features,
        &allow,
    ))
    .await;
    let mut via = client(sidecar.local_addr).await;
    // Impressions two hours ago: their hour can be complete as soon as the watermark is now.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let t = now_ms - 2 * 3_600_000;
    let (mut app, mut app_clicks) = (Vec::new(), Vec::new());
    for seed in 0..4u32 {
        let id = format!("quiet-{seed}");
        let mut request = ranker_request(&id, 3, 0, seed, false);
        if by_model && seed >= 2 {
            request.model_name = SECOND_MODEL.into();
        }
        via.model_infer(request).await.unwrap();
        let item = (1000 + seed * 10_000).to_string();
        app.push(app_event(&id, &item, t + 10, "impression"));
        // After the impression: it folds in because the row waits for the label window.
        let click = app_event(&id, &item, t + 500, "click");
        if mode == Quiet::ClicksOnATopicOfTheirOwn {
            app_clicks.push(click);
        } else {
            app.push(click);
        }
    }
    if co_partitioned_in_transactions {
        produce_events_in_a_transaction(&kafka.config, &events, &app).await;
    } else {
        produce_events(&kafka.config, &events, &app).await;
    }
    if !app_clicks.is_empty() {
        // As featurelog.v1.Impression, keyed alike: all four land in one of the two partitions.
        use prost::Message as _;
        let producer: FutureProducer = kafka.config.client_config(&[]).create().unwrap();
        for c in &app_clicks {
            let json: serde_json::Value = serde_json::from_str(&c.body).unwrap();
            let ms = json["event_time"].as_i64().unwrap();
            let click = featurelog_schemas::featurelog::v1::Impression {
                request_id: json["request_id"].as_str().unwrap().into(),
                item_id: json["item_id"].as_str().unwrap().into(),
                event_time: Some(prost_types::Timestamp {
                    seconds: ms / 1000,
                    nanos: (ms % 1000) as i32 * 1_000_000,
                }),
                event_type: featurelog_schemas::featurelog::v1::EventType::Click as i32,
                event_id: json["event_id"].as_str().unwrap().into(),
                ..Default::default()
            }
            .encode_to_vec();
            producer
                .send(
                    FutureRecord::to(&clicks).key("clicks").payload(&click),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
        }
    }
    sidecar.stop();
    let metrics = sidecar.metrics.clone();
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(
        metrics.records_delivered.get(),
        4,
        "a record for every request"
    );

    let out = dir.path().join("dataset");
    let config = joiner_config(
        dir.path(),
        "quiet",
        &kafka.config,
        &kafka.unique_group("quiet"),
        &features,
        &events,
        &dead_letter,
        &out,
    );
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            "features-wait = \"1h\"",
            "features-wait = \"3s\"\nlabel-window = \"2s\"\nmax-out-of-orderness = \"0s\"",
        )
        // The impressions are two hours older than their requests' serving: they wait longer
        // than that for their features, or they would join only when the feature logs happen
        // to be read before them (docs/JOINER.md, "Join semantics").
        .replace("impressions-wait = \"1h\"", "impressions-wait = \"3h\"")
        .replace("idle-timeout = \"1h\"", "idle-timeout = \"1s\"");
    let text = if mode == Quiet::ClicksOnATopicOfTheirOwn {
        text.replace(
            &format!("events-topic = \"{events}\""),
            &format!("events-topic = [\"{events}\", \"{clicks}\"]"),
        )
        .replace(
            "[join]",
            &format!("[input.per-topic.\"{clicks}\"]\nevents-format = \"protobuf\"\n[join]"),
        )
    } else {
        text
    };
    let text = if by_model {
        text.replace("[output]\n", "[output]\npartition-by-model = true\n")
    } else {
        text
    };
    let negatives = mode == Quiet::Negatives;
    let text = if negatives {
        text.replace("[join]\n", "[join]\nnegatives-sample-rate = 1.0\n")
    } else {
        text
    };
    let text = if delta {
        format!("{text}[output.delta]\ntarget-file-bytes = 0\n")
    } else {
        text
    };
    std::fs::write(&config, text).unwrap();
    if delta {
        super::delta::set_format(&config, "delta");
    }
    if co_partitioned_in_transactions {
        set_events_partitioning(&config, "by-request-id");
    }
    let joiner = Joiner::start(&config);

    // Each request scored three candidates and one was impressed (the first).
    let impressed = |request: &str, item: &str| {
        let seed: u32 = request.strip_prefix("quiet-").unwrap().parse().unwrap();
        item == (1000 + seed * 10_000).to_string()
    };
    let rows = wait_for_rows(
        &out,
        if negatives { 12 } else { 4 },
        "rows after the label window",
    )
    .await;
    assert!(
        rows.iter()
            .all(|((request, item), r)| r.len() == 1
                && r[0].0 == u32::from(impressed(request, item))),
        "each row once, an impression with its click: {rows:?}"
    );
    let (date, hour) = {
        let secs = t / 1000;
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%d %H"])
            .output()
            .unwrap();
        let s = String::from_utf8(out.stdout).unwrap();
        let (d, h) = s.trim().split_once(' ').unwrap();
        (d.to_owned(), h.to_owned())
    };
    // Partitioned by model, each model's hour is complete on its own, under its directory.
    let hours = if by_model {
        vec![
            format!("model=ranker/dt={date}/hr={hour}"),
            format!("model=ranker%20b%2F2/dt={date}/hr={hour}"),
        ]
    } else {
        vec![format!("dt={date}/hr={hour}")]
    };
    for hour in hours {
        let marker = out.join(hour).join("_SUCCESS");
        let complete =
            featurelog_testkit::eventually(Duration::from_secs(60), || marker.exists()).await;
        assert!(complete, "{} was not written", marker.display());
    }
    assert!(joiner.terminate().success());
    if negatives {
        let read = featurelog_testkit::python_json("read_dataset.py", &[&out], &[]);
        let rows = read["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 12, "{read}");
        for r in rows {
            let (request, item) = (
                r["request_id"].as_str().unwrap(),
                r["item_id"].as_str().unwrap(),
            );
            if impressed(request, item) {
                assert_eq!(r["impressed"], true, "{r}");
                assert!(!r["impression_time"].is_null(), "{r}");
                assert_eq!(r["clicks"], 1, "{r}");
            } else {
                assert_eq!(r["impressed"], false, "{r}");
                assert!(r["impression_time"].is_null(), "{r}");
                assert_eq!(r["clicks"], 0, "{r}");
            }
        }
    }
    if delta {
        // Each reader of the table finds every row under its model, the partition value the
        // log gives it, decoded from the directory's escapes.
        let read = featurelog_testkit::python_json(
            "read_delta.py",
            &["--spark", out.to_str().unwrap()],
            &[],
        );
        assert_eq!(
            read["partitions"],
            serde_json::json!(["model", "dt", "hr"]),
            "{read}"
        );
        for reader in ["deltalake", "polars", "spark"] {
            let models: Vec<(&str, &str)> = (read["models"][reader].as_array().unwrap().iter())
                .map(|r| (r[1].as_str().unwrap(), r[2].as_str().unwrap()))
                .collect();
            assert_eq!(
                models,
                [
                    ("ranker", "ranker"),
                    ("ranker", "ranker"),
                    (SECOND_MODEL, SECOND_MODEL),
                    (SECOND_MODEL, SECOND_MODEL)
                ],
                "{reader}: {read}"
            );
        }
    }
    if by_model && !delta {
        // pyarrow (as a training job reads the dataset) decodes each model's directory into
        // its name: the `model` partition column is every row's `model_name`.
        let read = featurelog_testkit::python_json("read_dataset.py", &[&out], &[]);
        let rows = read["rows"].as_array().unwrap();
        let models: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r["model"].as_str().unwrap(),
                    r["model_name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            models,
            [
                ("ranker", "ranker"),
                ("ranker", "ranker"),
                (SECOND_MODEL, SECOND_MODEL),
                (SECOND_MODEL, SECOND_MODEL)
            ],
            "{read}"
        );
        // One model's training job reads its directory alone.
        let second = featurelog_testkit::python_json(
            "read_dataset.py",
            &[&out.join("model=ranker%20b%2F2")],
            &[],
        );
        assert_eq!(second["rows"].as_array().unwrap().len(), 2, "{second}");
        // The layout is the dataset's: a joiner configured with the other one is refused.
        let text = std::fs::read_to_string(&config)
            .unwrap()
            .replace("partition-by-model = true", "partition-by-model = false");
        std::fs::write(&config, text).unwrap();
        let (code, stderr) = refused(&config).await;
        assert_ne!(code, Some(0), "{stderr}");
        assert!(stderr.contains("was written with true"), "{stderr}");
    }
    if mode == Quiet::ClicksOnATopicOfTheirOwn {
        // The list numbers the watermark's sources in the checkpoints: reordered, the start is
        // refused with what to do.
        let text = std::fs::read_to_string(&config).unwrap().replace(
            &format!("[\"{events}\", \"{clicks}\"]"),
            &format!("[\"{clicks}\", \"{events}\"]"),
        );
        std::fs::write(&config, text).unwrap();
        let (code, stderr) = refused(&config).await;
        assert_ne!(code, Some(0), "{stderr}");
        assert!(stderr.contains("may be appended"), "{stderr}");
    }
}

/// A joiner config whose output is a fresh prefix of the test bucket; the joiner process gets
/// its endpoint and credentials from the environment, as from a deployment's secrets.
pub(super) fn s3_joiner_config(s: &Setup, s3: &TestS3, name: &str, prefix: &str) -> PathBuf {
    let config = s.joiner_config(
        name,
        &s.kafka.unique_group(name),
        Path::new(&s3.url(prefix)),
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[metrics]",
        "max-file-rows = 7\n[output.object-store]\nregion = \"us-east-1\"\n[metrics]",
    );
    std::fs::write(&config, text).unwrap();
    config
}
