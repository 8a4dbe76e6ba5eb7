//! Operating the joiner: event partitions the apps add, start-up probes, missing topics, a group used with a new output path, events far in the future, bad output paths, the hours a restarted joiner owes.

use super::*;

/// Apps may add partitions to their events topic while the joiner runs (the repartitioning
/// router lets them partition as they like): the router reads the new partitions once its
/// metadata shows them, every task's watermark waits for them, and their events are joined
/// like the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn events_in_partitions_the_apps_add_while_the_joiner_runs_are_joined() {
    let Some(kafka) = kafka("events_in_partitions_the_apps_add_while_the_joiner_runs_are_joined")
    else {
        return;
    };
    let mut s = setup(kafka, 3, 1).await;
    let out = s.dir.path().join("dataset");
    let group = s.kafka.unique_group("joiner-events-grown");
    let config = s.joiner_config("j1", &group, &out);
    // librdkafka's clients look for new partitions every 5 minutes by default.
    set_kafka_property(&config, "topic.metadata.refresh.interval.ms", "1000");
    let joiner = Joiner::start(&config);
    let d = wait_for_rows(&out, s.expected.len(), "before the events topic grows").await;
    check_exact(&d, &s.expected, "before the events topic grows");

    grow_topic(&s.kafka.config, &s.events, 6).await;
    send_wave(&mut s, 3..12).await;
    let d = wait_for_rows(&out, s.expected.len(), "after the events topic grew").await;
    check_exact(&d, &s.expected, "after the events topic grew");
    // Some of those events were in the new partitions.
    let events = s
        .kafka
        .read(&s.events, 3 * 12 + 1, Duration::from_secs(30))
        .await;
    assert!(
        events.iter().any(|e| e.partition >= 3),
        "no event landed in a new partition"
    );
    assert!(joiner.terminate().success());
}

/// A joiner whose start-up cannot finish (no broker answers) is alive and not ready from its
/// first moment: `/healthz` 200 and `/readyz` 503, so that a liveness probe does not kill a
/// slow recovery and a readiness probe keeps traffic away until it is done. A signal ends the
/// start-up at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_joiner_still_starting_is_alive_and_not_ready() {
    let dir = temp_dir();
    let nowhere = KafkaConfig::new("127.0.0.1:1");
    let config = joiner_config(
        dir.path(),
        "starting",
        &nowhere,
        "starting-group",
        "features",
        "events",
        "dead-letters",
        &dir.path().join("out"),
    );
    let metrics = serve_metrics_on_a_known_port(&config);
    let config = featurelog_joiner::config::JoinerConfig::load(&config).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(featurelog_joiner::run::run(config, shutdown.clone()));
    let alive = featurelog_testkit::eventually(Duration::from_secs(10), || {
        http_get(metrics, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    assert!(alive, "/healthz did not answer during the start-up");
    let ready = http_get(metrics, "/readyz").unwrap_or_default();
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(!run.is_finished(), "the start-up ended: {:?}", run.await);
    shutdown.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("a signal during the start-up ends it at once");
    assert!(ended.unwrap().is_ok());
}

/// An events topic that does not exist stops the start-up with a message that names it and
/// says who creates it: the app, not the sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_missing_events_topic_is_named_with_who_must_create_it() {
    let Some(kafka) = kafka("a_missing_events_topic_is_named_with_who_must_create_it") else {
        return;
    };
    let features = kafka.unique_topic("features-no-events", 1).await;
    let events = format!("no-such-events-{}", kafka.unique_group("t"));
    let dir = temp_dir();
    let config = joiner_config(
        dir.path(),
        "no-events",
        &kafka.config,
        &kafka.unique_group("no-events"),
        &features,
        &events,
        &kafka.unique_group("dead-letters"),
        &dir.path().join("out"),
    );
    let config = featurelog_joiner::config::JoinerConfig::load(&config).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let ended = tokio::time::timeout(
        Duration::from_secs(120),
        featurelog_joiner::run::run(config, shutdown),
    )
    .await
    .expect("the start-up did not end");
    let message = ended.unwrap_err().to_string();
    assert!(message.contains(&events), "{message}");
    assert!(message.contains("events topic"), "{message}");
    assert!(message.contains("the app"), "{message}");
}

/// A group serves one dataset. Started under it with a new `output.path`, the join consumer
/// would begin each partition at the group's offsets (skipping every record before them), the
/// router would resume after every event the old dataset had, or, without their offsets, its
/// tasks would read the old dataset's events and router progress from the repartition topic
/// (the progress closing their windows before their own events came): the joiner refuses each
/// way at start-up, naming the group and what to do, and writes nothing to the new path or to
/// the group. The old dataset goes on under the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_group_used_with_a_new_output_path_is_refused() {
    let Some(kafka) = kafka("a_group_used_with_a_new_output_path_is_refused") else {
        return;
    };
    let mut s = setup(kafka, 4, 1).await;
    let group = s.kafka.unique_group("joiner-one-dataset");
    // Dynamic members leave the group when they stop, so that it can be deleted below.
    let config = |name: &str, out: &Path| {
        let config = s.joiner_config(name, &group, out);
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("static-membership = false\n{text}")).unwrap();
        config
    };
    let first = s.dir.path().join("dataset");
    let log = s.dir.path().join("first.log");
    let joiner = Joiner::start_logging_to(&config("first", &first), &log);
    let d = wait_for_rows(&first, s.expected.len(), "the first dataset").await;
    check_exact(&d, &s.expected, "the first dataset");
    wait_group_offsets(&s.kafka.config, &group, &s.features).await;
    assert!(joiner.terminate().success());
    // Its start-up checks, on a new group and an empty repartition topic, alarm no operator.
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains(" ERROR "), "errors logged: {log}");

    // The group's offsets are ahead of the new dataset's (none).
    let second = s.dir.path().join("dataset-2");
    let says = |(code, stderr): (Option<i32>, String), why: &str| {
        assert_eq!(code, Some(1), "{stderr}");
        for part in [&group, why, "used with another output.path", "new `group`"] {
            assert!(stderr.contains(part), "{part:?} not in {stderr}");
        }
    };
    says(
        refused(&config("second", &second)).await,
        "committed offset",
    );

    // Without them, the router's offsets are the first dataset's.
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        s.kafka.config.client_config(&[]).create().unwrap();
    let delete = |group: String| {
        let admin = &admin;
        async move {
            let deleted = admin
                .delete_groups(&[&group], &rdkafka::admin::AdminOptions::new())
                .await
                .unwrap();
            assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
        }
    };
    delete(group.clone()).await;
    says(
        refused(&config("third", &second)).await,
        "the router of group",
    );

    // The first dataset, under the same group, joins what comes next: its router's offsets
    // carry its id.
    let fourth = config("fourth", &second);
    let joiner = Joiner::start(&config("first", &first));
    send_wave(&mut s, 4..8).await;
    let d = wait_for_rows(&first, s.expected.len(), "the first dataset, resumed").await;
    check_exact(&d, &s.expected, "the first dataset, resumed");
    assert!(joiner.terminate().success());

    // Without either group's offsets, the repartition topic still holds the first dataset's
    // records, though the oldest of each partition have expired.
    delete(group.clone()).await;
    delete(format!("{group}.router")).await;
    let repartition = format!("{group}.impressions-by-request");
    let mut expired = rdkafka::TopicPartitionList::new();
    for p in 0..4 {
        expired
            .add_partition_offset(&repartition, p, rdkafka::Offset::Offset(1))
            .unwrap();
    }
    admin
        .delete_records(&expired, &rdkafka::admin::AdminOptions::new())
        .await
        .unwrap();
    let routed = record_ends(&s.kafka.config, &repartition);
    let (code, stderr) = refused(&fourth).await;
    assert!(!stderr.contains(" ERROR "), "errors logged: {stderr}");
    says((code, stderr), "routed for another dataset");
    assert_eq!(row_count(&read_dataset(&second)), 0, "rows in the new path");
    // Refused before its router started: the first dataset's records are the topic's last.
    assert_eq!(
        record_ends(&s.kafka.config, &repartition),
        routed,
        "events routed for the new path"
    );
}

/// Router offsets committed without a dataset id, as a router that gave none committed them,
/// are accepted: the joiner starts over them and writes every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn router_offsets_without_a_dataset_id_are_accepted() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
    let Some(kafka) = kafka("router_offsets_without_a_dataset_id_are_accepted") else {
        return;
    };
    let s = setup(kafka, 4, 1).await;
    let group = s.kafka.unique_group("joiner-unmarked");
    // Offset 0 of every events partition: nothing is skipped.
    let router: BaseConsumer = s
        .kafka
        .config
        .client_config(&[("group.id", &format!("{group}.router"))])
        .create()
        .unwrap();
    let mut offsets = rdkafka::TopicPartitionList::new();
    for p in 0..3 {
        offsets
            .add_partition_offset(&s.events, p, rdkafka::Offset::Offset(0))
            .unwrap();
    }
    router.commit(&offsets, CommitMode::Sync).unwrap();
    drop(router);
    let out = s.dir.path().join("dataset");
    let joiner = Joiner::start(&s.joiner_config("unmarked", &group, &out));
    let d = wait_for_rows(&out, s.expected.len(), "over unmarked router offsets").await;
    check_exact(&d, &s.expected, "over unmarked router offsets");
    assert!(joiner.terminate().success());
}

/// Waits until `group` has committed an offset of `topic`: its lag is below the topic's length.
async fn wait_group_offsets(kafka: &KafkaConfig, group: &str, topic: &str) {
    let ends = record_ends(kafka, topic);
    let length: i64 = ends.iter().sum();
    let committed = featurelog_testkit::eventually(Duration::from_secs(60), || {
        group_lag(kafka, group, topic, ends.len() as i32).is_some_and(|lag| lag < length)
    })
    .await;
    assert!(committed, "{group} committed no offset of {topic}");
}

/// An event dated far ahead of the watermark (an impression in 2150: a wrong clock or unit) is
/// dead-lettered as `event_time_in_future`, saying why, instead of being held until the
/// watermark reaches it; the other rows are written as always.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn an_event_dated_far_ahead_of_the_watermark_is_dead_lettered() {
    let Some(kafka) = kafka("an_event_dated_far_ahead_of_the_watermark_is_dead_lettered") else {
        return;
    };
    let s = setup(kafka, 4, 1).await;
    let out = s.dir.path().join("dataset");
    let config = s.joiner_config("future", &s.kafka.unique_group("future"), &out);
    let metrics = serve_metrics_on_a_known_port(&config);
    let joiner = Joiner::start(&config);
    let d = wait_for_rows(&out, s.expected.len(), "before the event from the future").await;
    check_exact(&d, &s.expected, "before the event from the future");
    // Rows are written: the watermark is known. 2150-01-01T00:00:00Z, in milliseconds.
    let future = app_event("req-0", "from-the-future", 5_680_281_600_000, "impression");
    produce_events(&s.kafka.config, &s.events, &[future]).await;
    expect_metric(
        metrics,
        "featurelog_join_dead_letters_total{name=\"event_time_in_future\"} 1",
    )
    .await;
    assert!(joiner.terminate().success());
    let dead = s
        .kafka
        .read(&s.dead_letter, 2, Duration::from_secs(30))
        .await;
    let letter = dead
        .iter()
        .find(|d| d.header("featurelog-error").as_deref() == Some("event_time_in_future"))
        .expect("no event_time_in_future dead letter");
    let detail = letter.header("featurelog-detail").unwrap_or_default();
    assert!(detail.contains("2150-01-01T00:00:00"), "{detail}");
    assert!(detail.contains("join.max-event-time-ahead"), "{detail}");
    assert_eq!(letter.key_str(), "req-0");
}

/// An `output.path` under a regular file (a typo, a mount that is not there) stops the start
/// with one error that names the file and says what to do, and a non-zero exit: not an error
/// per task and commit, and not a joiner that looks alive while it writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn an_output_path_under_a_regular_file_is_reported_once() {
    let Some(kafka) = kafka("an_output_path_under_a_regular_file_is_reported_once") else {
        return;
    };
    let features = kafka.unique_topic("file-features", 2).await;
    let events = kafka.unique_topic("file-events", 2).await;
    let dir = temp_dir();
    let file = dir.path().join("file.txt");
    std::fs::write(&file, "not a directory").unwrap();
    let config = joiner_config(
        dir.path(),
        "under-a-file",
        &kafka.config,
        &kafka.unique_group("under-a-file"),
        &features,
        &events,
        &kafka.unique_group("dead-letters"),
        &file.join("dataset"),
    );
    let (code, stderr) = refused(&config).await;
    assert_eq!(code, Some(1), "{stderr}");
    let named = format!("{} is a regular file", file.display());
    assert_eq!(stderr.matches(&named).count(), 1, "{stderr}");
    assert!(stderr.contains("output.path"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// A dataset whose hour of rows is owed its `_SUCCESS`: a joiner with `idle-timeout` wrote the
/// rows of four impressions two hours ago and was stopped before anything showed it an event
/// time past that hour.
pub(super) struct Owed {
    kafka: TestKafka,
    /// Holds the dataset and configs until the test ends.
    _dir: tempfile::TempDir,
    events: String,
    config: PathBuf,
    out: PathBuf,
    expected: BTreeMap<(String, String), u32>,
    marker: PathBuf,
}

pub(super) async fn owe_an_hour(kafka: TestKafka, idle_timeout: &str) -> Owed {
    // One partition each: a partition without feature logs or events would hold the watermark
    // until `idle-timeout`, running or not.
    let features = kafka.unique_topic("owed-features", 1).await;
    let events = kafka.unique_topic("owed-events", 1).await;
    let dead_letter = kafka.unique_topic("owed-dlq", 1).await;
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let sidecar = sidecar(sidecar_config(
        dir.path(),
        model_addr,
        Some(&kafka.config),
        &features,
        ALLOW,
    ))
    .await;
    let mut via = client(sidecar.local_addr).await;
    // Two hours ago: the hour is complete once the watermark is now.
    let t = now_ms() - 2 * 3_600_000;
    let (mut app, mut expected) = (Vec::new(), BTreeMap::new());
    for seed in 0..4u32 {
        let id = format!("owed-{seed}");
        via.model_infer(ranker_request(&id, 3, 0, seed, false))
            .await
            .unwrap();
        let item = (1000 + seed * 10_000).to_string();
        app.push(app_event(&id, &item, t + i64::from(seed), "impression"));
        expected.insert((id, item), 0);
    }
    produce_events(&kafka.config, &events, &app).await;
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);

    let out = dir.path().join("dataset");
    let config = joiner_config(
        dir.path(),
        "owed",
        &kafka.config,
        &kafka.unique_group("owed"),
        &features,
        &events,
        &dead_letter,
        &out,
    );
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            "features-wait = \"1h\"",
            "features-wait = \"3s\"\nmax-out-of-orderness = \"0s\"",
        )
        // Two hours older than their requests' serving, the impressions wait longer than that
        // for their features (docs/JOINER.md, "Join semantics").
        .replace("impressions-wait = \"1h\"", "impressions-wait = \"3h\"")
        .replace(
            "idle-timeout = \"1h\"",
            &format!("idle-timeout = \"{idle_timeout}\""),
        );
    std::fs::write(&config, text).unwrap();
    let marker = {
        let (dt, hr) = featurelog_joiner::time::hour_partition(t * 1000);
        out.join(format!("dt={dt}/hr={hr}/_SUCCESS"))
    };
    let joiner = Joiner::start(&config);
    let rows = wait_for_rows(&out, expected.len(), "before the stop").await;
    check_exact(&rows, &expected, "before the stop");
    assert!(joiner.terminate().success());
    // Its events are all from that hour, and it was not quiet for `idle-timeout`.
    assert!(!marker.exists(), "marked before the joiner could know");
    Owed {
        kafka,
        _dir: dir,
        events,
        config,
        out,
        expected,
        marker,
    }
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Restarts the joiner of `owed` and waits for the hour's `_SUCCESS`, the rows unchanged.
pub(super) async fn restart_and_expect_the_marker(owed: &Owed) {
    let joiner = Joiner::start(&owed.config);
    let marked =
        featurelog_testkit::eventually(Duration::from_secs(60), || owed.marker.exists()).await;
    assert!(
        marked,
        "{} not written after the restart",
        owed.marker.display()
    );
    check_exact(
        &read_dataset(&owed.out),
        &owed.expected,
        "after the restart",
    );
    assert!(joiner.terminate().success());
}

/// `_SUCCESS` is written by a running joiner: while every joiner is stopped no hour gets it.
/// The app's traffic went on while the joiner was stopped (one event of now): the restarted
/// joiner, reading only that, marks the hour it owes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_restarted_joiner_marks_the_hours_that_completed_while_it_was_stopped() {
    let Some(kafka) = kafka("a_restarted_joiner_marks_the_hours_that_completed") else {
        return;
    };
    // Never quiet for long enough here: only the event can complete the hour.
    let owed = owe_an_hour(kafka, "1h").await;
    let later = app_event("owed-later", "later", now_ms(), "impression");
    produce_events(&owed.kafka.config, &owed.events, &[later]).await;
    restart_and_expect_the_marker(&owed).await;
}

/// The same with no traffic at all since the stop: the restarted joiner finds its inputs
/// quiet for `idle-timeout` and marks the hour it owes, with nothing new to read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_restarted_joiner_marks_the_hours_it_owes_with_no_new_traffic() {
    let Some(kafka) = kafka("a_restarted_joiner_marks_the_hours_it_owes_with_no_new_traffic")
    else {
        return;
    };
    // Long enough for the first run to write its rows and stop before it is quiet that long.
    let owed = owe_an_hour(kafka, "15s").await;
    restart_and_expect_the_marker(&owed).await;
}
