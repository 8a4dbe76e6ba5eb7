//! A joiner that starts on a backlog, against the real broker: its join state holds about
//! `features-wait + max-read-ahead` of traffic while it catches up, not the backlog, and every
//! row is there. The feature logs and the events are produced before the joiner starts, as
//! after a night of downtime; each fetch then brings far more event time of the small events
//! than of the feature logs, which is what filled the state when nothing held one input back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
use featurelog_testkit::kafka;
use featurelog_testkit::serving::{free_addr, http_get, kafka_toml, temp_dir};
use prost::Message as _;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};

/// Requests in the backlog, one a second of event time.
const REQUESTS: usize = 2000;
/// Candidates per request; items 0 and 2 are impressed.
const CANDIDATES: usize = 20;
const FIRST_SERVED_MS: i64 = 1_764_439_200_000;

fn feature_log(i: usize) -> FeatureLog {
    let served_ms = FIRST_SERVED_MS + i as i64 * 1000;
    FeatureLog {
        request_id: format!("backlog-{i}"),
        model_name: "ranker".into(),
        model_version: "1".into(),
        served_at: Some(prost_types::Timestamp {
            seconds: served_ms / 1000,
            nanos: 0,
        }),
        row_count: CANDIDATES as u32,
        candidate_ids: (0..CANDIDATES).map(|j| j.to_string()).collect(),
        features: vec![Feature {
            name: "item_price".into(),
            datatype: DataType::Fp32 as i32,
            row_shape: vec![],
            values: Some(Values {
                fp32_values: (0..CANDIDATES).map(|j| j as f32).collect(),
                ..Default::default()
            }),
            per_request: false,
        }],
        ..Default::default()
    }
}

fn impression(i: usize, item: usize) -> String {
    format!(
        r#"{{"request_id":"backlog-{i}","item_id":"{item}","event_time":{},"event_type":"impression"}}"#,
        FIRST_SERVED_MS + i as i64 * 1000 + 100
    )
}

/// The rows of every data file of the dataset (late/ included: none are expected there).
fn rows(root: &Path) -> usize {
    let mut count = 0;
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            if e.path().is_dir() {
                dirs.push(e.path());
            } else if name.ends_with(".parquet") {
                let file = std::fs::File::open(e.path()).unwrap();
                let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
                use parquet::file::reader::FileReader as _;
                count += reader.metadata().file_metadata().num_rows() as usize;
            }
        }
    }
    count
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_catching_up_on_a_backlog_holds_a_window_of_it_not_all_of_it() {
    let Some(kafka) = kafka("a_joiner_catching_up_on_a_backlog_holds_a_window_of_it_not_all_of_it")
    else {
        return;
    };
    // One partition each, the events co-partitioned (every key goes to partition 0): the task
    // reads both topics directly, and librdkafka fetches each as fast as it can.
    let features = kafka.unique_topic("backlog-features", 1).await;
    let events = kafka.unique_topic("backlog-events", 1).await;
    let dead_letter = kafka.unique_topic("backlog-dlq", 1).await;
    let producer: FutureProducer = kafka.config.client_config(&[]).create().unwrap();
    for i in 0..REQUESTS {
        let key = format!("backlog-{i}");
        let log = feature_log(i).encode_to_vec();
        producer
            .send_result(FutureRecord::to(&features).key(&key).payload(&log))
            .unwrap();
        for item in [0, 2] {
            let body = impression(i, item);
            producer
                .send_result(FutureRecord::to(&events).key(&key).payload(&body))
                .unwrap();
        }
        if i % 500 == 499 {
            producer.flush(Duration::from_secs(30)).unwrap();
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();

    let dir = temp_dir();
    let out = dir.path().join("dataset");
    let metrics = free_addr();
    let config = dir.path().join("join.toml");
    std::fs::write(
        &config,
        format!(
            "group = \"{}\"\n{}[input]\nfeatures-topic = \"{features}\"\nevents-topic = \"{events}\"\n\
             events-format = \"json\"\nevents-partitioning = \"by-request-id\"\ndead-letter-topic = \"{dead_letter}\"\n\
             [join]\nfeatures-wait = \"10s\"\nimpressions-wait = \"10s\"\nmax-read-ahead = \"20s\"\nidle-timeout = \"1h\"\n\
             [output]\npath = \"{}\"\nflush-interval = \"100ms\"\n[metrics]\nlisten = \"{metrics}\"\n",
            kafka.unique_group("backlog"),
            kafka_toml(&kafka.config),
            out.display()
        ),
    )
    .unwrap();
    let mut joiner = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(["join", "--config", config.to_str().unwrap()])
        .env(
            "FEATURELOG_LOG",
            std::env::var("FEATURELOG_TEST_JOINER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    // The state's size as the joiner reports it at each commit (every 100 ms), until every
    // impression is a row.
    let (mut most_requests, mut most_bytes, mut paused_seen) = (0.0f64, 0.0f64, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let expected = REQUESTS * 2;
    loop {
        if let Some(text) = http_get(metrics, "/metrics") {
            most_requests =
                most_requests.max(gauge(&text, "featurelog_join_buffered_requests").unwrap_or(0.0));
            most_bytes = most_bytes.max(gauge(&text, "featurelog_join_state_bytes").unwrap_or(0.0));
            paused_seen |= gauge(&text, "featurelog_join_paused_partitions").unwrap_or(0.0) > 0.0;
        }
        if rows(&out) >= expected {
            break;
        }
        assert!(joiner.try_wait().unwrap().is_none(), "the joiner exited");
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {expected} rows after 180 s",
            rows(&out)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = joiner.kill();
    let _ = joiner.wait();
    eprintln!(
        "most requests held {most_requests}, most state bytes {most_bytes}, a partition paused: {paused_seen}"
    );
    assert_eq!(rows(&out), expected, "every impression once");
    // A window is features-wait + max-read-ahead + the out-of-orderness allowance: 35 s, 35
    // requests of this backlog; twice that leaves room for a fetch's worth past the bound.
    // Without the bound, a fetch of the events partition brings hundreds of seconds of
    // impressions at once, each waiting in the state for its feature log.
    assert!(
        most_requests <= 70.0,
        "at most {most_requests} requests held at a commit; the backlog is {REQUESTS}"
    );
    let per_request = 3_000.0;
    assert!(
        most_bytes <= 70.0 * per_request,
        "at most {most_bytes} bytes of state at a commit"
    );
}
