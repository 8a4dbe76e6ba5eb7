//! Failures: S3 storage and its outages, TLS and SCRAM, signals during start-up, a feature-log topic that grows, a broker restarted mid-traffic.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn on_s3_the_joiner_writes_exactly_the_expected_rows_and_pyarrow_reads_them() {
    let name = "on_s3_the_joiner_writes_exactly_the_expected_rows_and_pyarrow_reads_them";
    let (Some(kafka), Some(s3)) = (kafka(name), s3(name)) else {
        return;
    };
    let s = setup(kafka, 10, 1).await;
    let prefix = s3.unique_prefix("join");
    let config = s3_joiner_config(&s, &s3, "s3-single", &prefix);
    let joiner = Joiner::start_with_env(&config, &s3.aws_env());
    let d = wait_until_rows(s.expected.len(), "joiner on S3", || {
        read_s3_dataset(&s3, &prefix)
    })
    .await;
    check_exact(&d, &s.expected, "joiner on S3");
    let (_, price, locale) = &d[&("req-3".to_string(), "31002".to_string())][0];
    assert_eq!(f32::from_bits(*price), 2.0 * 1.25 + 3.0);
    assert_eq!(locale, "jp_JA");
    assert!(
        joiner.terminate().success(),
        "the joiner exits 0 on SIGTERM"
    );

    let objects = s3.objects(&prefix).await;
    let keys: Vec<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
    assert!(
        keys.iter()
            .any(|k| k.starts_with("_featurelog/checkpoints/")),
        "checkpoints are in the bucket: {keys:?}"
    );
    assert!(
        !keys.iter().any(|k| k.starts_with("_featurelog/staging/")),
        "nothing is left staged after a clean stop: {keys:?}"
    );
    for (key, bytes) in objects.iter().filter(|(k, _)| k.ends_with(".parquet")) {
        let rows = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .unwrap()
            .metadata()
            .file_metadata()
            .num_rows();
        assert!(rows <= 7, "max-file-rows = 7, but {key} has {rows} rows");
    }

    // pyarrow, with its own S3 client, reads the same rows.
    let endpoint = s3.endpoint.split_once("://").unwrap();
    let uri = format!(
        "{}?endpoint_override={}&scheme={}&region=us-east-1",
        s3.url(&prefix),
        endpoint.1,
        endpoint.0
    );
    let read = featurelog_testkit::python_json("read_dataset.py", &[&uri], &s3.aws_env());
    let rows = read["rows"].as_array().unwrap();
    let got: BTreeMap<(String, String), u32> = rows
        .iter()
        .map(|r| {
            (
                (
                    r["request_id"].as_str().unwrap().to_owned(),
                    r["item_id"].as_str().unwrap().to_owned(),
                ),
                r["clicks"].as_u64().unwrap() as u32,
            )
        })
        .collect();
    assert_eq!(rows.len(), s.expected.len(), "pyarrow sees each row once");
    assert_eq!(got, s.expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn on_s3_sigkill_and_restarts_keep_every_row_exactly_once() {
    let name = "on_s3_sigkill_and_restarts_keep_every_row_exactly_once";
    let (Some(kafka), Some(s3)) = (kafka(name), s3(name)) else {
        return;
    };
    let mut s = setup(kafka, 8, 5).await;
    let prefix = s3.unique_prefix("crash");
    let config = s3_joiner_config(&s, &s3, "s3-crash", &prefix);
    // Restores read the held logs from state files here (the local crash test reads them
    // back from the topic).
    set_held_logs(&config, "state-files");
    // Pruning on the store, through every kill, with only two checkpoints kept per task.
    keep_checkpoints(&config, 2);
    let trickle = trickle_impressions(&mut s, 40, Duration::from_millis(130));
    for wait_ms in [900u64, 1500, 600, 2300, 1100] {
        let j = Joiner::start_with_env(&config, &s3.aws_env());
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        j.kill9();
    }
    trickle.await.unwrap();
    let joiner = Joiner::start_with_env(&config, &s3.aws_env());
    wait_until_rows(s.expected.len(), "killed and restarted on S3", || {
        read_s3_dataset(&s3, &prefix)
    })
    .await;
    wait_checkpointed_on_s3(&s, &s3, &prefix, &config).await;
    check_exact(
        &read_s3_dataset(&s3, &prefix).await,
        &s.expected,
        "killed and restarted on S3",
    );
    let epochs = checkpoint_epochs(s3.objects(&prefix).await.into_iter().map(|(k, _)| k));
    assert_two_kept(&epochs, "on S3");
    assert_some_pruned(&epochs);
    drop(joiner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn over_tls_and_scram_the_sidecar_and_joiner_write_exactly_the_expected_rows() {
    let Some(_shared) =
        kafka("over_tls_and_scram_the_sidecar_and_joiner_write_exactly_the_expected_rows")
    else {
        return;
    };
    // A broker of its own: the shared one has no SASL_SSL listener.
    let broker = DedicatedBroker::start_secure();
    let secure = broker.secure.clone().unwrap();

    // A wrong password is refused, with an error that says so, not a silent hang.
    let mut wrong = secure.clone();
    wrong
        .properties
        .insert("sasl.password".into(), "not-the-password".into());
    let err = featurelog_kafka::admin::ensure_topic(
        &wrong,
        "never-created",
        1,
        1,
        Duration::from_secs(15),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.to_lowercase().contains("auth"), "{err}");

    // Topic admin, the sidecar's producer, the app's producer, and every client of the joiner
    // (consumers, the transactional router, the dead-letter producer) over TLS and SCRAM only.
    let s = setup(TestKafka { config: secure }, 4, 1).await;
    let out = s.dir.path().join("dataset");
    let group = s.kafka.unique_group("joiner-secure");
    let config = s.joiner_config("secure", &group, &out);
    let joiner = Joiner::start(&config);
    let d = wait_for_rows(&out, s.expected.len(), "over SASL_SSL").await;
    check_exact(&d, &s.expected, "over SASL_SSL");
    assert!(joiner.terminate().success());
    let dead = s
        .kafka
        .read(&s.dead_letter, 1, Duration::from_secs(30))
        .await;
    assert_eq!(dead[0].payload, b"{not json");
}

/// A peer that accepts every TCP connection and never answers (a hung broker or store): its
/// address, and a receiver that yields once the first connection has been accepted, which is
/// how a test knows a client is waiting on it.
pub(super) fn silent_peer() -> (std::net::SocketAddr, std::sync::mpsc::Receiver<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (connected, first) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
            let _ = connected.send(());
        }
    });
    (addr, first)
}

/// A joiner still waiting for its brokers at start-up (here: the one it knows takes the
/// connection and never answers) stops at the first SIGTERM with success, instead of finishing
/// its waits and then failing.
#[test]
pub(super) fn sigterm_during_start_up_stops_the_joiner_cleanly() {
    let dir = temp_dir();
    let config = dir.path().join("join.toml");
    let (broker, connected) = silent_peer();
    std::fs::write(
        &config,
        format!("[kafka]\nbootstrap-servers = \"{broker}\"\n[input]\nevents-topic = \"events\"\n[output]\npath = \"data\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n"),
    )
    .unwrap();
    let mut joiner = Joiner::start(&config);
    connected
        .recv_timeout(Duration::from_secs(60))
        .expect("the joiner asks its broker for metadata at start-up");
    assert!(joiner.exited().is_none(), "it waits for the broker");
    let status = joiner.terminate();
    assert!(status.success(), "{status}");
}

/// Gives `topic` `partitions` partitions, as an operator adding some would.
pub(super) async fn grow_topic(kafka: &KafkaConfig, topic: &str, partitions: usize) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = kafka.client_config(&[]).create().unwrap();
    let grown = admin
        .create_partitions(
            &[NewPartitions::new(topic, partitions)],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    assert!(grown.iter().all(Result::is_ok), "{grown:?}");
}

/// A dataset is tied to the feature-log topic's partition count: when the topic gains
/// partitions, a sidecar puts a request's records where no task has its events. A running
/// joiner stops with an error that says so (and what to do) as soon as it reads from a new
/// partition, and a restarted one refuses to start, rather than silently losing the rows of
/// every request that moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_feature_log_topic_that_gains_partitions_stops_the_joiner_with_what_to_do() {
    let Some(kafka) =
        kafka("a_feature_log_topic_that_gains_partitions_stops_the_joiner_with_what_to_do")
    else {
        return;
    };
    let s = setup(kafka, 3, 1).await;
    let out = s.dir.path().join("dataset");
    let group = s.kafka.unique_group("joiner-grown");
    let config = s.joiner_config("j1", &group, &out);
    let running = {
        let config = config.clone();
        tokio::spawn(async move { refused(&config).await })
    };
    let d = wait_for_rows(&out, s.expected.len(), "before the topic grows").await;
    check_exact(&d, &s.expected, "before the topic grows");

    grow_topic(&s.kafka.config, &s.features, 6).await;
    // A sidecar that has seen the new partitions writes to them.
    let producer = s.kafka.producer();
    producer
        .send(
            FutureRecord::to(&s.features)
                .partition(5)
                .key("req-moved")
                .payload(&b"a record of a request that moved"[..]),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let (code, stderr) = running.await.unwrap();
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("has 6 partitions, but the dataset was written with 4")
            && stderr.contains("new `output.path`"),
        "{stderr}"
    );
    // Restarted (by its supervisor), it refuses to start, with the same explanation.
    let (code, stderr) = refused(&config).await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("has 6 partitions, but the dataset was written with 4"),
        "{stderr}"
    );
    // What it had committed is still there, exactly once.
    check_exact(&read_dataset(&out), &s.expected, "after the refusal");
}

/// Waits for `expected` rows as `wait_until_rows` does, restarting the joiner whenever it exits,
/// as its supervisor would (it must never exit 0 on its own: that would tell a supervisor it is
/// done). Returns the rows and how each run ended.
pub(super) async fn supervise_until_rows<F: std::future::Future<Output = Dataset>>(
    joiner: &mut Joiner,
    start: impl Fn() -> Joiner,
    expected: usize,
    what: &str,
    mut read: impl FnMut() -> F,
) -> (Dataset, Vec<std::process::ExitStatus>) {
    let mut exits = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = joiner.exited() {
            assert!(!status.success(), "{what}: the joiner exited 0 on its own");
            eprintln!("{what}: the joiner exited ({status}); restarting it");
            exits.push(status);
            *joiner = start();
        }
        let d = read().await;
        if row_count(&d) >= expected {
            return (d, exits);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {} of {expected} rows after 120 s (exits: {exits:?})",
            row_count(&d)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Keeps the joiner running for `period` as its supervisor would, restarting it whenever it
/// exits (never with success). Returns how each run that ended meanwhile ended.
pub(super) async fn supervise_for(
    joiner: &mut Joiner,
    start: impl Fn() -> Joiner,
    period: Duration,
    what: &str,
) -> Vec<std::process::ExitStatus> {
    let mut exits = Vec::new();
    let until = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < until {
        if let Some(status) = joiner.exited() {
            assert!(!status.success(), "{what}: the joiner exited 0 on its own");
            eprintln!("{what}: the joiner exited ({status}); restarting it");
            exits.push(status);
            *joiner = start();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    exits
}

/// The Kafka broker stops for a while in the middle of the traffic and comes back, on the same
/// data, while the joiner runs (events routed through the repartition topic, in transactions),
/// with impressions still arriving when it stops: the joiner rides through the outage without
/// exiting, and every row, of the requests sent before, during and after it, is in the dataset
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_kafka_broker_restart_mid_traffic_keeps_every_row_exactly_once() {
    let name = "a_kafka_broker_restart_mid_traffic_keeps_every_row_exactly_once";
    let Some(_shared) = kafka(name) else {
        return;
    };
    // A broker of its own: the shared one must never stop.
    let broker = DedicatedBroker::start();
    let mut s = setup(
        TestKafka {
            config: broker.config.clone(),
        },
        6,
        1,
    )
    .await;
    let out = s.dir.path().join("dataset");
    let config = s.joiner_config("restart", &s.kafka.unique_group("restart"), &out);
    // The outage outlasts the consumers' sessions (the broker's minimum): both groups lose
    // their assignments while the broker is down, so the router's revoke must abort a
    // transaction with records in flight to a broker that is not there, and every task is
    // restored when the partitions come back.
    set_kafka_property(&config, "session.timeout.ms", "6000");
    let metrics = serve_metrics_on_a_known_port(&config);
    let start = || Joiner::start(&config);
    let mut joiner = start();
    wait_for_rows(&out, s.expected.len(), "before the broker stops").await;

    // Impressions keep coming (the app's producer holds them while the broker is down), so
    // the broker stops while the router has a transaction open and the join reads.
    let trickle = trickle_impressions(&mut s, 6, Duration::from_millis(300));
    tokio::time::sleep(Duration::from_millis(700)).await;
    broker.stop();
    let mut exits = supervise_for(&mut joiner, start, Duration::from_secs(12), "broker down").await;
    broker.restart();
    // The rest of the traffic, after the broker is back.
    send_wave(&mut s, 6..12).await;
    trickle.await.unwrap();
    let (_, after) = supervise_until_rows(
        &mut joiner,
        start,
        s.expected.len(),
        "after the broker restart",
        || {
            let d = read_dataset(&out);
            async move { d }
        },
    )
    .await;
    exits.extend(after);
    wait_checkpointed_in(&s.kafka.config, &s.features, &config).await;
    check_exact(&read_dataset(&out), &s.expected, "after the broker restart");
    assert_eq!(exits, vec![], "the joiner rides through a broker restart");
    let ready = http_get(metrics, "/readyz").unwrap_or_default();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    // The broker goes down again, and the joiner is killed and started again meanwhile (a
    // deploy, a node lost): a joiner that starts without a broker waits for it, or exits
    // non-zero for its supervisor to start it again; it never hangs.
    broker.stop();
    joiner.kill9_in_place();
    joiner = start();
    let mut exits = supervise_for(
        &mut joiner,
        start,
        Duration::from_secs(8),
        "started without a broker",
    )
    .await;
    broker.restart();
    send_wave(&mut s, 12..16).await;
    let (_, after) = supervise_until_rows(
        &mut joiner,
        start,
        s.expected.len(),
        "started without a broker",
        || {
            let d = read_dataset(&out);
            async move { d }
        },
    )
    .await;
    exits.extend(after);
    eprintln!(
        "started without a broker, the joiner exited {} times",
        exits.len()
    );
    wait_checkpointed_in(&s.kafka.config, &s.features, &config).await;
    check_exact(&read_dataset(&out), &s.expected, "started without a broker");
    assert!(joiner.terminate().success());
}

/// A proxy in front of the test's S3 server, and the server as seen through it.
pub(super) fn behind_a_proxy(s3: &TestS3) -> (featurelog_testkit::proxy::CutProxy, TestS3) {
    let target: std::net::SocketAddr = s3
        .endpoint
        .split_once("://")
        .map_or(s3.endpoint.as_str(), |(_, hostport)| hostport)
        .parse()
        .unwrap();
    let proxy = featurelog_testkit::proxy::CutProxy::start(target);
    let via_proxy = TestS3 {
        endpoint: format!("http://{}", proxy.addr),
        ..s3.clone()
    };
    (proxy, via_proxy)
}

/// The object store is unreachable for a while (connections refused and dropped mid-request,
/// through a proxy in front of the shared test server) while new rows wait to be committed,
/// then comes and goes: nothing can be committed meanwhile, the joiner never exits 0 (a
/// supervisor restarts it whenever it exits non-zero), and afterwards every row is in the
/// dataset exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn on_s3_an_outage_of_the_store_loses_and_duplicates_no_row() {
    let name = "on_s3_an_outage_of_the_store_loses_and_duplicates_no_row";
    let (Some(kafka), Some(s3)) = (kafka(name), s3(name)) else {
        return;
    };
    let mut s = setup(kafka, 6, 1).await;
    let (proxy, via_proxy) = behind_a_proxy(&s3);
    let prefix = s3.unique_prefix("outage");
    let config = s3_joiner_config(&s, &via_proxy, "s3-outage", &prefix);
    let metrics = serve_metrics_on_a_known_port(&config);
    let env = via_proxy.aws_env();
    let start = || Joiner::start_with_env(&config, &env);
    let mut joiner = start();
    wait_until_rows(s.expected.len(), "before the outage", || {
        read_s3_dataset(&s3, &prefix)
    })
    .await;

    proxy.cut();
    // New traffic during the outage: its rows cannot be committed until the store is back.
    send_wave(&mut s, 6..12).await;
    let mut exits = supervise_for(&mut joiner, start, Duration::from_secs(15), "store down").await;
    proxy.restore();
    let (_, after) = supervise_until_rows(
        &mut joiner,
        start,
        s.expected.len(),
        "after the outage",
        || read_s3_dataset(&s3, &prefix),
    )
    .await;
    exits.extend(after);
    // Then a store that comes and goes while rows keep coming, so that outages can land on any
    // step of a commit (staging, the checkpoint's conditional PUT, the roll forward) or of a
    // recovery at start-up.
    let trickle = trickle_impressions(&mut s, 12, Duration::from_millis(150));
    for (down_ms, up_ms) in [
        (700u64, 400u64),
        (300, 900),
        (1500, 250),
        (150, 600),
        (900, 1200),
    ] {
        proxy.cut();
        exits.extend(
            supervise_for(
                &mut joiner,
                start,
                Duration::from_millis(down_ms),
                "store flapping",
            )
            .await,
        );
        proxy.restore();
        exits.extend(
            supervise_for(
                &mut joiner,
                start,
                Duration::from_millis(up_ms),
                "store flapping",
            )
            .await,
        );
    }
    trickle.await.unwrap();
    let (_, after) = supervise_until_rows(
        &mut joiner,
        start,
        s.expected.len(),
        "after the store came and went",
        || read_s3_dataset(&s3, &prefix),
    )
    .await;
    exits.extend(after);
    // Either happens (docs/JOINER.md, "Failures of Kafka and of the object store"): a flush
    // whose request outlasts object_store's retries stops the joiner, otherwise it rides
    // through.
    eprintln!("store outage: the joiner exited {} times", exits.len());
    wait_checkpointed_on_s3(&s, &s3, &prefix, &config).await;
    check_exact(
        &read_s3_dataset(&s3, &prefix).await,
        &s.expected,
        "after the store came and went",
    );
    let ready = http_get(metrics, "/readyz").unwrap_or_default();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(joiner.terminate().success());
}

/// On an object store, an answer lost after the store acted on a request (the connection
/// drops on the way back, as in an outage) makes object_store send a conditional PUT again,
/// which the store refuses: the object exists, because the first one was applied. A lost
/// answer to a checkpoint's PUT is still this joiner's commit (not another owner's: the task
/// goes on, its rows counted once), and a lost answer to the start-up probe of conditional
/// PUTs does not stop the joiner with a claim that the store ignores them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn on_s3_lost_answers_to_conditional_puts_are_taken_for_what_they_did() {
    let name = "on_s3_lost_answers_to_conditional_puts_are_taken_for_what_they_did";
    let (Some(kafka), Some(s3)) = (kafka(name), s3(name)) else {
        return;
    };
    let mut s = setup(kafka, 4, 1).await;
    let (proxy, via_proxy) = behind_a_proxy(&s3);
    let prefix = s3.unique_prefix("lost");
    let config = s3_joiner_config(&s, &via_proxy, "s3-lost", &prefix);
    let metrics = serve_metrics_on_a_known_port(&config);
    let env = via_proxy.aws_env();
    let start = || Joiner::start_with_env(&config, &env);

    // The answer to the start-up probe's first conditional PUT is lost.
    proxy.lose_next_answer("PUT", "/_featurelog/probe/");
    let mut joiner = start();
    let (_, mut exits) = supervise_until_rows(
        &mut joiner,
        start,
        s.expected.len(),
        "probe answer lost",
        || read_s3_dataset(&s3, &prefix),
    )
    .await;
    assert!(!proxy.losing(), "the probe went through the proxy");

    // The answer to the next checkpoint's PUT is lost, with new rows to commit.
    proxy.lose_next_answer("PUT", "/_featurelog/checkpoints/");
    send_wave(&mut s, 4..8).await;
    let (_, after) = supervise_until_rows(
        &mut joiner,
        start,
        s.expected.len(),
        "commit answer lost",
        || read_s3_dataset(&s3, &prefix),
    )
    .await;
    exits.extend(after);
    assert!(!proxy.losing(), "a checkpoint went through the proxy");
    wait_checkpointed_on_s3(&s, &s3, &prefix, &config).await;
    check_exact(
        &read_s3_dataset(&s3, &prefix).await,
        &s.expected,
        "after lost answers",
    );
    assert_eq!(exits, vec![], "the joiner goes on");
    // Each row counted once by the one process that ran: the commit whose answer was lost
    // counts as its own.
    expect_metric(
        metrics,
        &format!(
            "featurelog_join_rows_written_total{{model=\"ranker\"}} {}",
            s.expected.len()
        ),
    )
    .await;
    assert!(joiner.terminate().success());
}

/// A joiner started while the object store does not answer (connections accepted, no reply)
/// waits in its start-up check, each request retried for minutes; SIGTERM meanwhile stops it
/// at once, cleanly (it held nothing yet), rather than when the retries give up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn on_s3_sigterm_while_the_store_does_not_answer_at_start_up_stops_at_once() {
    let name = "on_s3_sigterm_while_the_store_does_not_answer_at_start_up_stops_at_once";
    let (Some(kafka), Some(s3)) = (kafka(name), s3(name)) else {
        return;
    };
    let s = setup(kafka, 1, 1).await;
    let (silent_addr, connected) = silent_peer();
    let via_silent = TestS3 {
        endpoint: format!("http://{silent_addr}"),
        ..s3.clone()
    };
    let prefix = s3.unique_prefix("start-up-silent");
    let config = s3_joiner_config(&s, &via_silent, "s3-start-up-silent", &prefix);
    let mut joiner = Joiner::start_with_env(&config, &via_silent.aws_env());
    // Past the topic checks, into the store's.
    tokio::task::spawn_blocking(move || connected.recv_timeout(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("the joiner checks the store at start-up");
    assert!(joiner.exited().is_none(), "it waits for the store");
    Command::new("kill")
        .args(["-TERM", &joiner.0.id().to_string()])
        .status()
        .unwrap();
    // object_store gives up after minutes; the signal must not wait for that.
    let mut status = None;
    for _ in 0..300 {
        status = joiner.exited();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = status.expect("the joiner still runs 30 s after SIGTERM");
    assert!(status.success(), "{status}");
}
