//! The sidecar under change and trouble: allow-list reloads, input it cannot decode, oversized
//! calls, and a broker that goes away in the middle of traffic. In every case each inference
//! call still succeeds; what is not logged is counted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::time::Duration;

use featurelog_testkit::broker::DedicatedBroker;
use featurelog_testkit::serving::{
    client, decode_log, float_ids_request, model_server, ranker_request, sidecar, sidecar_config,
    temp_dir,
};
use featurelog_testkit::{eventually, kafka};

fn allow(features: &[&str]) -> String {
    format!(
        "[[model]]\nname = \"ranker\"\nfeatures = {features:?}\ncandidate-ids-input = \"item_id\"\n"
    )
}

/// What every test here starts from: a fresh topic named after `prefix`, the reference model
/// server (the ranker), and the config of a sidecar in front of it logging `features` there.
struct Rig {
    topic: String,
    model_addr: std::net::SocketAddr,
    config: featurelog_sidecar::SidecarConfig,
    /// Holds the allow-list file the config names.
    _dir: tempfile::TempDir,
}

async fn rig(kafka: &featurelog_testkit::TestKafka, prefix: &str, features: &[&str]) -> Rig {
    let topic = kafka.unique_topic(prefix, 1).await;
    let (model_addr, _) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let config = sidecar_config(
        dir.path(),
        model_addr,
        Some(&kafka.config),
        &topic,
        &allow(features),
    );
    Rig {
        topic,
        model_addr,
        config,
        _dir: dir,
    }
}

#[tokio::test]
async fn allow_list_reloads_without_restart_and_a_broken_file_is_refused() {
    let Some(kafka) = kafka("allow_list_reloads_without_restart") else {
        return;
    };
    let Rig {
        topic,
        model_addr: _,
        config,
        _dir,
    } = rig(&kafka, "sidecar-reload", &["user_age"]).await;
    let allow_path = config.allow_list.clone();
    let sidecar = sidecar(config).await;
    let handle = sidecar.allow_list.clone().unwrap();
    let mut via = client(sidecar.local_addr).await;
    let v1 = handle.current().version.clone();

    via.model_infer(ranker_request("before", 4, 0, 1, false))
        .await
        .unwrap();

    std::fs::write(&allow_path, allow(&["item_price", "user_locale"])).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || handle.current().version != v1).await,
        "the new allow list was not picked up"
    );
    let v2 = handle.current().version.clone();
    via.model_infer(ranker_request("after", 4, 0, 2, false))
        .await
        .unwrap();

    std::fs::write(
        &allow_path,
        "[[model]]\nname = \"ranker\"\nsample-rate = 7\n",
    )
    .unwrap();
    let refused = featurelog_sidecar::metrics::Reason { reason: "refused" };
    let metrics = sidecar.metrics.clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            metrics.allow_list_reloads.get_or_create(&refused).get() == 1
        })
        .await,
        "the broken allow list was not refused"
    );
    assert_eq!(
        handle.current().version,
        v2,
        "the previous list stays in force"
    );
    via.model_infer(ranker_request("broken", 4, 0, 3, false))
        .await
        .unwrap();

    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    let records = kafka.read(&topic, 3, Duration::from_secs(60)).await;
    let record = |key: &str| {
        decode_log(
            &records
                .iter()
                .find(|r| r.key_str() == key)
                .unwrap_or_else(|| panic!("no record {key}"))
                .payload,
        )
    };
    let names = |key: &str| {
        record(key)
            .features
            .into_iter()
            .map(|f| f.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names("before"), ["user_age"]);
    assert_eq!(record("before").allow_list_version, v1);
    assert_eq!(names("after"), ["item_price", "user_locale"]);
    assert_eq!(record("after").allow_list_version, v2);
    assert_eq!(names("broken"), ["item_price", "user_locale"]);
}

#[tokio::test]
async fn calls_the_sidecar_cannot_log_still_succeed_and_are_counted() {
    let Some(kafka) = kafka("calls_the_sidecar_cannot_log_still_succeed") else {
        return;
    };
    let Rig {
        topic,
        model_addr,
        mut config,
        _dir,
    } = rig(&kafka, "sidecar-bad-input", &["item_price"]).await;
    let dead = kafka.unique_topic("sidecar-dead-letters", 1).await;
    config.publish.max_message_bytes = 64 * 1024;
    config.publish.dead_letter_topic = dead.clone();
    let sidecar = sidecar(config).await;
    let mut direct = client(model_addr).await;
    let mut via = client(sidecar.local_addr).await;

    let float_ids = float_ids_request("float-ids", 1);
    // Larger than max-message-bytes.
    let oversized = ranker_request("oversized", 2000, 10, 2, true);
    // Fine.
    let good = ranker_request("good", 4, 0, 3, false);
    for request in [float_ids, oversized, good] {
        let want = direct
            .model_infer(request.clone())
            .await
            .unwrap()
            .into_inner();
        let got = via.model_infer(request).await.unwrap().into_inner();
        assert_eq!(got, want);
    }
    // A call the model refuses is passed back as the model said, and not logged.
    let mut bad_shape = ranker_request("bad-shape", 4, 0, 4, false);
    bad_shape.inputs[3].shape = vec![5];
    let want = direct.model_infer(bad_shape.clone()).await.unwrap_err();
    let got = via.model_infer(bad_shape).await.unwrap_err();
    assert_eq!((got.code(), got.message()), (want.code(), want.message()));

    let metrics = sidecar.metrics.clone();
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0);
    assert_eq!(metrics.dropped_count("bad_candidate_ids"), 1);
    assert_eq!(metrics.dropped_count("too_large"), 1);
    let failed = featurelog_sidecar::metrics::Reason {
        reason: "call_failed",
    };
    assert_eq!(metrics.skipped.get_or_create(&failed).get(), 1);
    assert_eq!(metrics.records_delivered.get(), 1);
    let records = kafka.read(&topic, 1, Duration::from_secs(60)).await;
    assert_eq!(records[0].key_str(), "good");

    // Each call not logged because of what its caller sent is described on the dead-letter
    // topic, so that an operator can find the model and the request: not the failed call (the
    // model's answer says it all), not the good one. Never the tensors.
    assert_eq!(metrics.dead_letter_count("delivered"), 2);
    let mut letters = kafka.read(&dead, 2, Duration::from_secs(60)).await;
    letters.sort_by_key(|l| l.key_str());
    let keys: Vec<_> = letters.iter().map(|l| l.key_str()).collect();
    assert_eq!(keys, ["float-ids", "oversized"]);
    for (letter, reason, detail) in [
        (&letters[0], "bad_candidate_ids", "item_id"),
        (&letters[1], "too_large", "65536"),
    ] {
        assert_eq!(letter.header("featurelog-error").as_deref(), Some(reason));
        let source = letter.header("featurelog-source").unwrap();
        assert!(source.starts_with("sidecar/"), "{source}");
        let json: serde_json::Value = serde_json::from_slice(&letter.payload).unwrap();
        assert_eq!(json["reason"], reason);
        assert_eq!(json["model"], "ranker");
        assert_eq!(json["binding"], "grpc");
        assert_eq!(json["request_id"], letter.key_str().as_str());
        let said = json["detail"].as_str().unwrap();
        assert!(said.contains(detail), "{reason}: {said}");
        let mut fields: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                "allow_list_version",
                "binding",
                "detail",
                "model",
                "model_version",
                "reason",
                "request_bytes",
                "request_id",
                "served_at",
                "sidecar"
            ]
        );
    }
    assert!(
        letters[1].payload.len() < 1024,
        "the oversized request stayed in the pod"
    );
}

/// A dead-letter topic that does not exist (on a broker that will not create it) costs neither
/// a call nor the shutdown: its dead letters are counted, not left waiting in the producer for
/// the topic to appear, where the shutdown's flush would wait for them.
#[tokio::test]
async fn a_missing_dead_letter_topic_is_counted_and_holds_nothing_up() {
    let Some(kafka) = kafka("a_missing_dead_letter_topic_is_counted") else {
        return;
    };
    let Rig {
        topic,
        model_addr: _,
        mut config,
        _dir,
    } = rig(&kafka, "sidecar-no-dead-letters", &["item_price"]).await;
    config.publish.dead_letter_topic = format!("{topic}-nowhere");
    // A broker with auto.create.topics.enable would create it when asked: this client does not ask.
    config
        .kafka
        .as_mut()
        .unwrap()
        .properties
        .insert("allow.auto.create.topics".into(), "false".into());
    let sidecar = sidecar(config).await;
    let metrics = sidecar.metrics.clone();
    assert!(
        eventually(Duration::from_secs(30), || {
            metrics.dead_letter_topic_missing.get() == 1
        })
        .await,
        "the missing dead-letter topic was not noticed"
    );
    let mut via = client(sidecar.local_addr).await;
    via.model_infer(float_ids_request("float-ids", 1))
        .await
        .unwrap();
    via.model_infer(ranker_request("good", 4, 0, 2, false))
        .await
        .unwrap();
    sidecar.stop();
    assert_eq!(sidecar.wait().await, 0, "nothing was left in the producer");
    assert_eq!(metrics.dropped_count("bad_candidate_ids"), 1);
    assert_eq!(metrics.dead_letter_count("no_topic"), 1);
    assert_eq!(
        metrics.records_delivered.get(),
        1,
        "the good call is logged"
    );
}

#[tokio::test]
async fn broker_outage_never_fails_a_call_and_logging_resumes() {
    let Some(_shared) = kafka("broker_outage_never_fails_a_call_and_logging_resumes") else {
        return;
    };
    let broker = DedicatedBroker::start();
    let kafka = featurelog_testkit::TestKafka {
        config: broker.config.clone(),
    };
    let Rig {
        topic,
        model_addr: _,
        mut config,
        _dir,
    } = rig(&kafka, "sidecar-outage", &["item_price"]).await;
    let props = &mut config.kafka.as_mut().unwrap().properties;
    // Small bounds so the outage shows within seconds rather than minutes.
    props.insert("queue.buffering.max.messages".into(), "50".into());
    props.insert("message.timeout.ms".into(), "4000".into());
    props.insert("reconnect.backoff.max.ms".into(), "500".into());
    config.publish.adaptive.interval = Duration::from_millis(200);
    let sidecar = sidecar(config).await;
    let metrics = sidecar.metrics.clone();
    let mut via = client(sidecar.local_addr).await;

    for i in 0..20 {
        via.model_infer(ranker_request(&format!("before-{i}"), 4, 0, i, false))
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(30), || metrics.records_delivered.get()
            == 20)
        .await,
        "records before the outage were not delivered"
    );

    broker.stop();
    // Traffic through the outage: every call must succeed, whatever Kafka does.
    let mut i = 0u32;
    let outage_started = tokio::time::Instant::now();
    while outage_started.elapsed() < Duration::from_secs(8) {
        via.model_infer(ranker_request(&format!("during-{i}"), 4, 0, i, false))
            .await
            .expect("an inference call failed during the broker outage");
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let dropped = metrics.dropped_count("producer_queue_full")
        + metrics.dropped_count("delivery_failed")
        + metrics.dropped_count("adaptive_shed");
    assert!(dropped > 0, "no drop was counted during the outage");
    assert!(
        metrics.logged_fraction.get() < 1.0,
        "the adaptive controller did not lower the logged fraction"
    );

    // With no call at all the fraction comes back once the brokers answer: a shed fraction
    // never outlives its outage, whether or not the clients that were shed call again.
    broker.restart();
    assert!(
        eventually(Duration::from_secs(90), || metrics.logged_fraction.get()
            >= 1.0)
        .await,
        "the logged fraction stayed at {} without traffic after the broker came back",
        metrics.logged_fraction.get()
    );
    let delivered_before = metrics.records_delivered.get();
    let mut j = 0u32;
    let resumed = tokio::time::Instant::now();
    // Keep calling until records flow again (bounded: this is the assertion).
    while metrics.records_delivered.get() < delivered_before + 20 {
        assert!(
            resumed.elapsed() < Duration::from_secs(90),
            "logging did not resume within 90 s of the broker's return"
        );
        via.model_infer(ranker_request(&format!("after-{j}"), 4, 0, j, false))
            .await
            .expect("an inference call failed after the broker came back");
        j += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The controller gives back what it shed once deliveries succeed again: the fraction climbs
    // a step per clean interval, which needs calls to deliver, so keep calling (bounded: this is
    // the assertion).
    while metrics.logged_fraction.get() < 1.0 {
        assert!(
            resumed.elapsed() < Duration::from_secs(120),
            "the logged fraction was still {} 120 s after the broker's return ({} delivered, \
             {} failed deliveries since the start)",
            metrics.logged_fraction.get(),
            metrics.records_delivered.get(),
            metrics.dropped_count("delivery_failed"),
        );
        via.model_infer(ranker_request(&format!("after-{j}"), 4, 0, j, false))
            .await
            .expect("an inference call failed after the broker came back");
        j += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Back to logging every call: none shed from here on.
    let shed = metrics.dropped_count("adaptive_shed");
    for k in 0..20 {
        via.model_infer(ranker_request(&format!("whole-{k}"), 4, 0, k, false))
            .await
            .unwrap();
    }
    sidecar.stop();
    sidecar.wait().await;
    assert_eq!(
        metrics.dropped_count("adaptive_shed"),
        shed,
        "calls were shed at a logged fraction of 1"
    );

    // The records of calls made after the return are on the topic.
    let total = metrics.records_delivered.get() as usize;
    let records = kafka.read(&topic, total, Duration::from_secs(60)).await;
    let after = records
        .iter()
        .filter(|r| r.key_str().starts_with("after-"))
        .count();
    assert!(
        after > 0,
        "no record of the calls after the outage reached the topic"
    );
    let whole = records
        .iter()
        .filter(|r| r.key_str().starts_with("whole-"))
        .count();
    assert_eq!(
        whole, 20,
        "every call once the fraction is back to 1 is logged"
    );
}

/// A broker that cannot be reached when the sidecar stops holds the shutdown up no longer than
/// its timeout (the drain and the flush each get it), and the records it never acknowledged are
/// counted as dropped by the time the shutdown returns, not lost without a trace.
#[tokio::test]
async fn a_shutdown_with_the_broker_unreachable_ends_in_time_and_counts_what_was_lost() {
    // Nothing listens on port 1; no topic is ever created, so the name need not be unique.
    let nowhere = featurelog_kafka::KafkaConfig::new("127.0.0.1:1");
    let (model_addr, _stop) = model_server(&["ranker"]).await;
    let dir = temp_dir();
    let mut config = sidecar_config(
        dir.path(),
        model_addr,
        Some(&nowhere),
        "sidecar-unreachable",
        &allow(&["item_price"]),
    );
    let timeout = Duration::from_secs(2);
    config.shutdown_timeout = timeout;
    let sidecar = sidecar(config).await;
    let metrics = sidecar.metrics.clone();
    let mut via = client(sidecar.local_addr).await;
    for i in 0..3 {
        via.model_infer(ranker_request(&format!("lost-{i}"), 4, 0, i, false))
            .await
            .expect("a call failed with the broker unreachable");
    }
    assert!(
        eventually(Duration::from_secs(10), || metrics.produced().records == 3).await,
        "the records were not handed to the producer"
    );

    let started = tokio::time::Instant::now();
    sidecar.stop();
    let left = sidecar.wait().await;
    let took = started.elapsed();
    assert!(
        took < timeout * 2 + Duration::from_secs(5),
        "the shutdown took {took:?} with a shutdown-timeout of {timeout:?}"
    );
    assert_eq!(left, 3, "the records Kafka never acknowledged");
    assert_eq!(metrics.records_delivered.get(), 0);
    assert_eq!(
        metrics.dropped_count("delivery_failed"),
        3,
        "the records given up at shutdown are counted as dropped"
    );
}
