//! Rows exactly once: the sidecars' sample, the whole path, SIGKILL and two processes, co-partitioned events, held logs read back by offset.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn routed_events_outside_the_sidecars_sample_are_dropped_and_counted() {
    events_outside_the_sidecars_sample(
        "routed_events_outside_the_sidecars_sample_are_dropped_and_counted",
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn co_partitioned_events_outside_the_sidecars_sample_are_dropped_and_counted() {
    events_outside_the_sidecars_sample(
        "co_partitioned_events_outside_the_sidecars_sample_are_dropped_and_counted",
        true,
    )
    .await;
}

/// The lag of `group` on the `partitions` of `topic` as lag tools compute it: each
/// partition's end minus the group's committed offset (the whole partition when nothing is
/// committed). `None` when the broker does not answer.
pub(super) fn group_lag(
    kafka: &KafkaConfig,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Option<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    // Asks for the group's offsets without joining it.
    let consumer: BaseConsumer = kafka.client_config(&[("group.id", group)]).create().ok()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .ok()?;
    let mut lag = 0;
    for e in committed.elements() {
        let (_, high) = consumer
            .fetch_watermarks(topic, e.partition(), Duration::from_secs(10))
            .ok()?;
        lag += high - e.offset().to_raw().filter(|&o| o >= 0).unwrap_or(0);
    }
    Some(lag)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn features_and_app_events_become_exactly_the_expected_parquet_rows() {
    let Some(kafka) = kafka("features_and_app_events_become_exactly_the_expected_parquet_rows")
    else {
        return;
    };
    let s = setup(kafka, 10, 1).await;
    // A record on the feature-log topic that is no FeatureLog: it goes to the dead-letter
    // topic and holds nothing up (the group's lag below reaches 0 past it).
    let producer: FutureProducer = s.kafka.config.client_config(&[]).create().unwrap();
    producer
        .send(
            FutureRecord::to(&s.features)
                .partition(0)
                .key("not-a-log")
                .payload(&b"\xff\xff\xff not protobuf"[..]),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    let out = s.dir.path().join("dataset");
    let group = s.kafka.unique_group("joiner");
    let config = s.joiner_config("j1", &group, &out);
    // The other tests run static members (the default); this one a dynamic member.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("static-membership = false\n{text}")).unwrap();
    let metrics = serve_metrics_on_a_known_port(&config);
    let joiner = Joiner::start(&config);
    let d = wait_for_rows(&out, s.expected.len(), "single joiner").await;
    check_exact(&d, &s.expected, "single joiner");
    // Values are the ones the model received: item 2's price and the per-request locale.
    let (_, price, locale) = &d[&("req-3".to_string(), "31002".to_string())][0];
    assert_eq!(f32::from_bits(*price), 2.0 * 1.25 + 3.0);
    assert_eq!(locale, "jp_JA");
    // Lag tools (kafka-consumer-groups, Burrow) read the group's committed offsets: once the
    // rows are written they show the joiner caught up with the feature logs.
    let partitions = featurelog_kafka::admin::partition_count(
        &s.kafka.config,
        &s.features,
        Duration::from_secs(30),
    )
    .await
    .unwrap()
    .unwrap();
    let lag = || group_lag(&s.kafka.config, &group, &s.features, partitions);
    // The joiner keeps one monitoring commit in flight and sends the next once it is answered,
    // or after 60 s without an answer (librdkafka defers a commit while it looks for the
    // group's coordinator, for up to the 45 s session timeout): on a loaded machine the lag
    // can take that long to reach 0.
    let caught_up =
        featurelog_testkit::eventually(Duration::from_secs(90), || lag() == Some(0)).await;
    assert!(
        caught_up,
        "the group's lag on the feature logs: {:?}",
        lag()
    );
    for reason in ["bad_json", "bad_feature_log"] {
        expect_metric(
            metrics,
            &format!("featurelog_join_dead_letters_total{{name=\"{reason}\"}} 1"),
        )
        .await;
    }
    assert!(
        joiner.terminate().success(),
        "the joiner exits 0 on SIGTERM"
    );

    // The event that was not JSON and the record that was no feature log went to the
    // dead-letter topic as they were, each with its reason and where it came from.
    let dead = s
        .kafka
        .read(&s.dead_letter, 2, Duration::from_secs(30))
        .await;
    let letters: BTreeMap<String, (Vec<u8>, String)> = dead
        .iter()
        .map(|d| {
            (
                d.header("featurelog-error").unwrap_or_default(),
                (
                    d.payload.clone(),
                    d.header("featurelog-source").unwrap_or_default(),
                ),
            )
        })
        .collect();
    // Each says what was wrong with it, for an operator reading the topic.
    for letter in &dead {
        let detail = letter.header("featurelog-detail").unwrap_or_default();
        assert!(!detail.is_empty(), "a dead letter without a detail");
    }
    let (payload, source) = &letters["bad_json"];
    assert_eq!(payload, b"{not json");
    assert!(source.starts_with(&format!("{}/", s.events)), "{source}");
    let (payload, source) = &letters["bad_feature_log"];
    assert_eq!(payload, b"\xff\xff\xff not protobuf");
    assert!(
        source.starts_with(&format!("{}/0/", s.features)),
        "{source}"
    );

    // And an independent reader agrees.
    let read = featurelog_testkit::python_json("read_dataset.py", &[&out], &[]);
    assert_eq!(read["rows"].as_array().unwrap().len(), s.expected.len());
    // The request parameter the allow list logs is in every row.
    for row in read["rows"].as_array().unwrap() {
        assert_eq!(
            row["parameters"],
            serde_json::json!([["surface", "home"]]),
            "{row}"
        );
    }

    // A task commits as soon as it holds `flush-rows` rows: another group whose flush
    // interval is an hour still writes every row, exactly once, without waiting for it.
    let by_rows = s.dir.path().join("dataset-by-rows");
    let group = s.kafka.unique_group("joiner-by-rows");
    let config = s.joiner_config("j2", &group, &by_rows);
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "flush-interval = \"300ms\"\n",
        "flush-interval = \"1h\"\nflush-rows = 1\n",
    );
    std::fs::write(&config, text).unwrap();
    let joiner = Joiner::start(&config);
    let d = wait_for_rows(&by_rows, s.expected.len(), "flush-rows").await;
    check_exact(&d, &s.expected, "flush-rows");
    assert!(joiner.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn sigkill_restarts_and_two_processes_give_the_same_rows_as_one() {
    let Some(kafka) = kafka("sigkill_restarts_and_two_processes_give_the_same_rows_as_one") else {
        return;
    };
    let mut s = setup(kafka, 8, 5).await;
    let (single_out, crash_out, pair_out) = (
        s.dir.path().join("single"),
        s.dir.path().join("crash"),
        s.dir.path().join("pair"),
    );
    // The uninterrupted run copies held feature logs into its state files; the others refer to
    // them by offset in the feature-log topic (the broker keeps records for a week), so the
    // restarts read them back from Kafka.
    let single_group = s.kafka.unique_group("single");
    let single_config = s.joiner_config("single", &single_group, &single_out);
    set_held_logs(&single_config, "state-files");
    let single = Joiner::start(&single_config);
    let pair_group = s.kafka.unique_group("pair");
    let (pair_config_a, pair_config_b) = (
        s.joiner_config("pair-a", &pair_group, &pair_out),
        s.joiner_config("pair-b", &pair_group, &pair_out),
    );
    let crash_group = s.kafka.unique_group("crash");
    let crash_config = s.joiner_config("crash", &crash_group, &crash_out);
    // The restarted run and the pair keep only two checkpoints per task, so that pruning runs
    // through every kill and rebalance (the fence must hold with the old epochs gone).
    for config in [&crash_config, &pair_config_a, &pair_config_b] {
        keep_checkpoints(config, 2);
    }
    let pair_metrics = [
        serve_metrics_on_a_known_port(&pair_config_a),
        serve_metrics_on_a_known_port(&pair_config_b),
    ];
    // The second of the pair joins the group mid-run, while impressions arrive: the first
    // hands over half its tasks in that rebalance.
    let mut pair = vec![Joiner::start(&pair_config_a)];
    // Kill -9 at different moments of the run, restarting each time, while new impressions
    // keep arriving. Static membership gives each restart its partitions back at once, so the
    // kills land while it reads and commits.
    let trickle = trickle_impressions(&mut s, 40, Duration::from_millis(120));
    for (kill, wait_ms) in [700u64, 1300, 400, 2100, 900].into_iter().enumerate() {
        let j = Joiner::start(&crash_config);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        j.kill9();
        if kill == 1 {
            pair.push(Joiner::start(&pair_config_b));
        }
    }
    trickle.await.unwrap();
    // The kills must have hit joiners at work, or the comparison below proves nothing: the
    // killed runs committed checkpoints and rows before the last start.
    let committed = checkpoints_per_task(&crash_out);
    assert!(
        committed.values().any(|epochs| !epochs.is_empty()),
        "the killed runs committed no checkpoint: {committed:?}"
    );
    assert!(
        !read_dataset(&crash_out).is_empty(),
        "the killed runs committed no row"
    );
    let crash = Joiner::start(&crash_config);

    wait_for_rows(&single_out, s.expected.len(), "single").await;
    let crash_rows = wait_for_rows(&crash_out, s.expected.len(), "killed and restarted").await;
    let pair_rows = wait_for_rows(&pair_out, s.expected.len(), "two in one group").await;
    let k = &s.kafka.config;
    for config in [&single_config, &crash_config, &pair_config_a] {
        wait_checkpointed_in(k, &s.features, config).await;
    }
    check_exact(&read_dataset(&single_out), &s.expected, "single");
    check_exact(
        &read_dataset(&crash_out),
        &s.expected,
        "killed and restarted",
    );
    check_exact(&read_dataset(&pair_out), &s.expected, "two in one group");
    assert_eq!(read_dataset(&crash_out), read_dataset(&single_out));
    assert_eq!(read_dataset(&pair_out), read_dataset(&single_out));
    // Every log is still held (features wait an hour): the uninterrupted run's state files
    // hold copies of them (their feature names and values), the restarted run's only name
    // their offsets.
    assert!(state_files_hold(&single_out, b"user_locale"));
    assert!(!state_files_hold(&crash_out, b"user_locale"));
    // Pruned to the newest two per task, consecutive: the restarts committed more than that.
    for out in [&crash_out, &pair_out] {
        assert_two_kept(&checkpoints_per_task(out), &out.display().to_string());
    }
    assert_some_pruned(&checkpoints_per_task(&crash_out));
    // Both of the pair ran tasks after the rebalance: the work was split, not left to one.
    for (name, addr) in ["pair-a", "pair-b"].iter().zip(pair_metrics) {
        let runs_tasks = featurelog_testkit::eventually(Duration::from_secs(30), || {
            http_get(addr, "/metrics").is_some_and(|m| {
                m.lines()
                    .filter_map(|l| l.strip_prefix("featurelog_join_tasks "))
                    .any(|v| v.trim().parse::<f64>().is_ok_and(|n| n > 0.0))
            })
        })
        .await;
        assert!(
            runs_tasks,
            "{name} runs no task: {:?}",
            http_get(addr, "/metrics")
        );
    }
    drop((single, pair, crash, crash_rows, pair_rows));
}

/// Impressions of item 1 of each of `requests` requests (seeds 0..requests of `setup`), sent
/// one at a time every `every` in the background, so that a joiner killed and restarted
/// meanwhile is killed while it reads and commits. Adds their rows to `expected`.
pub(super) fn trickle_impressions(
    s: &mut Setup,
    requests: u32,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    let mut app = Vec::new();
    for seed in 0..requests {
        let id = format!("req-{seed}");
        let item = (1001 + seed * 10_000).to_string();
        let t = 1_764_439_200_000 + i64::from(seed) * 1000 + 50;
        app.push(app_event(&id, &item, t, "impression"));
        s.expected.insert((id, item), 0);
    }
    let (kafka, topic) = (s.kafka.config.clone(), s.events.clone());
    tokio::spawn(async move {
        for e in app {
            produce_events(&kafka, &topic, std::slice::from_ref(&e)).await;
            tokio::time::sleep(every).await;
        }
    })
}

/// Sets `input.events-partitioning` in a config written by `joiner_config`.
pub(super) fn set_events_partitioning(config: &Path, mode: &str) {
    let text: String = std::fs::read_to_string(config)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("events-partitioning"))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = text.replace(
        "events-format = \"json\"\n",
        &format!("events-format = \"json\"\nevents-partitioning = \"{mode}\"\n"),
    );
    std::fs::write(config, text).unwrap();
}

/// Runs `featurelog join` until it exits on its own (a refused start); returns its exit code
/// and what it printed.
pub(super) async fn refused(config: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(["join", "--config", config.to_str().unwrap()])
        .env("FEATURELOG_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the joiner did not refuse {config:?} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

/// Apps that key events by request id with Kafka's murmur2 partitioner, into as many partitions
/// as the feature-log topic, need no repartitioning: with `input.events-partitioning =
/// "by-request-id"` the join tasks read the events topic itself (no repartition topic is
/// created), SIGKILL and restarts and two processes in one group still give every row exactly
/// once, an event in the wrong
/// partition is dead-lettered with its reason and counted, and the joiner refuses an events
/// topic with another partition count and a dataset written with the other setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn co_partitioned_events_join_directly_exactly_once_and_misplaced_ones_are_dead_lettered()
 {
    let Some(kafka) = kafka(
        "co_partitioned_events_join_directly_exactly_once_and_misplaced_ones_are_dead_lettered",
    ) else {
        return;
    };
    let mut s = setup_with(kafka, 8, 2, true).await;
    // An impression of a scored candidate, in a partition its request id does not hash to.
    let home = featurelog_joiner::run::murmur2_partition(b"req-1", 4);
    let misplaced = app_event("req-1", "11001", 1_764_439_201_030, "impression");
    let producer: FutureProducer = s.kafka.config.client_config(&[]).create().unwrap();
    producer
        .send(
            FutureRecord::to(&s.events)
                .partition((home + 1) % 4)
                .key(&misplaced.key)
                .payload(&misplaced.body),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();

    let out = s.dir.path().join("direct");
    let group = s.kafka.unique_group("direct");
    let config = s.joiner_config("direct", &group, &out);
    set_events_partitioning(&config, "by-request-id");
    let metrics = serve_metrics_on_a_known_port(&config);

    let joiner = Joiner::start(&config);
    wait_for_rows(&out, s.expected.len(), "co-partitioned").await;
    expect_metric(
        metrics,
        "featurelog_join_dead_letters_total{name=\"not_co_partitioned\"} 1",
    )
    .await;
    check_exact(&read_dataset(&out), &s.expected, "co-partitioned");
    joiner.kill9();
    let dead = s
        .kafka
        .read(&s.dead_letter, 2, Duration::from_secs(30))
        .await;
    let reasons: BTreeMap<Vec<u8>, String> = dead
        .iter()
        .map(|d| {
            (
                d.payload.clone(),
                d.header("featurelog-error").unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        reasons.get(misplaced.body.as_bytes()).map(String::as_str),
        Some("not_co_partitioned"),
        "{reasons:?}"
    );
    assert_eq!(
        featurelog_kafka::admin::partition_count(
            &s.kafka.config,
            &format!("{group}.impressions-by-request"),
            Duration::from_secs(10),
        )
        .await
        .unwrap(),
        None,
        "no repartition topic"
    );

    // More impressions (item 1 of every request), read by a joiner killed and restarted: the
    // checkpoints' events offsets are the events topic's, so nothing is read twice or skipped.
    let mut app = Vec::new();
    for seed in 0..16u32 {
        let id = format!("req-{seed}");
        let item = (1001 + seed * 10_000).to_string();
        let mut e = app_event(
            &id,
            &item,
            1_764_439_200_000 + i64::from(seed) * 1000 + 40,
            "impression",
        );
        e.key.clone_from(&id);
        app.push(e);
        s.expected.insert((id, item), 0);
    }
    produce_events_with(&s.kafka.config, &s.events, &app, "murmur2_random").await;
    // Meanwhile two processes in a fresh group split the same inputs into another dataset.
    let pair_out = s.dir.path().join("direct-pair");
    let pair_group = s.kafka.unique_group("direct-pair");
    let pair: Vec<Joiner> = ["pair-a", "pair-b"]
        .into_iter()
        .map(|name| {
            let c = s.joiner_config(name, &pair_group, &pair_out);
            set_events_partitioning(&c, "by-request-id");
            Joiner::start(&c)
        })
        .collect();
    for wait_ms in [600u64, 1100, 300] {
        let j = Joiner::start(&config);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        j.kill9();
    }
    let joiner = Joiner::start(&config);
    wait_for_rows(
        &out,
        s.expected.len(),
        "co-partitioned, killed and restarted",
    )
    .await;
    wait_checkpointed_in(&s.kafka.config, &s.features, &config).await;
    check_exact(
        &read_dataset(&out),
        &s.expected,
        "co-partitioned, killed and restarted",
    );
    assert_eq!(joiner.terminate().code(), Some(0));
    wait_for_rows(
        &pair_out,
        s.expected.len(),
        "co-partitioned, two in one group",
    )
    .await;
    check_exact(
        &read_dataset(&pair_out),
        &s.expected,
        "co-partitioned, two in one group",
    );
    drop(pair);

    // The same dataset under the other setting: its events offsets would be another topic's.
    set_events_partitioning(&config, "any");
    let (code, stderr) = refused(&config).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("events-partitioning = \"by-request-id\""),
        "{stderr}"
    );

    // An events topic with another partition count cannot be co-partitioned.
    let three = s.kafka.unique_topic("join-events-3", 3).await;
    let other = joiner_config(
        s.dir.path(),
        "three",
        &s.kafka.config,
        &s.kafka.unique_group("three"),
        &s.features,
        &three,
        &s.dead_letter,
        &s.dir.path().join("three"),
    );
    set_events_partitioning(&other, "by-request-id");
    let (code, stderr) = refused(&other).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("it has 3"), "{stderr}");
}

/// `join.held-logs = "topic"` refuses a feature-log topic that may delete a held log before a
/// restore reads it back, and says what to change; `featurelog_kafka::admin::topic_retention`
/// reads what the broker says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn held_logs_by_offset_are_refused_on_a_topic_with_short_retention() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let Some(kafka) = kafka("held_logs_by_offset_are_refused_on_a_topic_with_short_retention")
    else {
        return;
    };
    let features = kafka.unique_group("short-features");
    let admin: AdminClient<_> = kafka.config.client_config(&[]).create().unwrap();
    let created = admin
        .create_topics(
            [&NewTopic::new(&features, 2, TopicReplication::Fixed(1))
                .set("retention.ms", "3600000")],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    featurelog_kafka::admin::wait_for_leaders(&kafka.config, &features, 2, Duration::from_secs(30))
        .await
        .unwrap();
    let retention =
        featurelog_kafka::admin::topic_retention(&kafka.config, &features, Duration::from_secs(10))
            .await
            .unwrap();
    assert_eq!(retention.retention, Some(Duration::from_secs(3600)));
    assert!(!retention.keeps(Duration::from_secs(2 * 3600)));

    let events = kafka.unique_topic("short-events", 1).await;
    let dead_letter = kafka.unique_topic("short-dlq", 1).await;
    let dir = temp_dir();
    let config = joiner_config(
        dir.path(),
        "short",
        &kafka.config,
        &kafka.unique_group("short"),
        &features,
        &events,
        &dead_letter,
        &dir.path().join("out"),
    );
    set_held_logs(&config, "topic");
    let (code, stderr) = refused(&config).await;
    assert_eq!(code, Some(1), "{stderr}");
    // features-wait 1h + max-out-of-orderness 5s + 1 day.
    assert!(
        stderr.contains("retention.ms >= 90005000") && stderr.contains("retention.ms=3600000"),
        "{stderr}"
    );
}

/// A held log that the topic deleted while the joiner was stopped (retention shorter than the
/// checkpoints need, or records deleted by hand) cannot come back: the restore counts it as
/// `lost_on_restore` and the joiner goes on, joining the logs that are still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn held_logs_the_topic_deleted_are_counted_lost_and_the_others_still_join() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let Some(kafka) =
        kafka("held_logs_the_topic_deleted_are_counted_lost_and_the_others_still_join")
    else {
        return;
    };
    let s = setup(kafka, 8, 1).await;
    let out = s.dir.path().join("lost");
    let group = s.kafka.unique_group("lost");
    let config = s.joiner_config("lost", &group, &out);
    set_held_logs(&config, "topic");
    let metrics = serve_metrics_on_a_known_port(&config);

    // Every row joined and committed; the checkpoints hold the logs (features wait an hour).
    let joiner = Joiner::start(&config);
    wait_for_rows(&out, s.expected.len(), "before the deletion").await;
    assert_eq!(joiner.terminate().code(), Some(0));

    // Delete all but the last feature log of each partition.
    let logs = s.kafka.read(&s.features, 8, Duration::from_secs(30)).await;
    let mut last: BTreeMap<i32, (i64, String)> = BTreeMap::new();
    for log in &logs {
        let newest = last.entry(log.partition).or_insert((-1, String::new()));
        if log.offset > newest.0 {
            *newest = (log.offset, log.key_str());
        }
    }
    let mut before = rdkafka::TopicPartitionList::new();
    for (p, (offset, _)) in &last {
        before
            .add_partition_offset(&s.features, *p, rdkafka::Offset::Offset(*offset))
            .unwrap();
    }
    let admin: AdminClient<_> = s.kafka.config.client_config(&[]).create().unwrap();
    admin
        .delete_records(&before, &AdminOptions::new())
        .await
        .unwrap();
    let kept: Vec<&String> = last.values().map(|(_, request)| request).collect();
    let lost = logs.len() - kept.len();
    assert!(lost >= 4, "8 logs on 4 partitions");

    // A new impression for every request: only the kept logs can give rows.
    let mut expected = s.expected.clone();
    let mut app = Vec::new();
    for seed in 0..8u32 {
        let id = format!("req-{seed}");
        let item = (1001 + seed * 10_000).to_string();
        app.push(app_event(
            &id,
            &item,
            1_764_439_200_000 + i64::from(seed) * 1000 + 30,
            "impression",
        ));
        if kept.contains(&&id) {
            expected.insert((id, item), 0);
        }
    }
    produce_events(&s.kafka.config, &s.events, &app).await;
    let joiner = Joiner::start(&config);
    wait_for_rows(&out, expected.len(), "after the restart").await;
    expect_metric(
        metrics,
        &format!("featurelog_join_outcomes_total{{name=\"lost_on_restore\"}} {lost}"),
    )
    .await;
    wait_checkpointed_in(&s.kafka.config, &s.features, &config).await;
    check_exact(&read_dataset(&out), &expected, "after losing held logs");
    drop(joiner);
}
