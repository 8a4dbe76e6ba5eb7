//! The joiner end to end against the real broker: requests through the sidecar, events from an
//! app's own client (JSON, keyed and partitioned its own way), `featurelog join` processes, and
//! the Parquet dataset read back. Also: SIGKILL and restart, and two processes in one group,
//! each compared with an uninterrupted single process. The same on S3-compatible storage
//! (`FEATURELOG_S3`, `scripts/s3.sh`): rows exactly once, read back by pyarrow's S3 client. And
//! the whole path over a SASL_SSL listener (TLS + SCRAM), as managed clusters require. And
//! `join.held-logs`: restores that read held logs back from the topic, a topic whose retention
//! is too short refused, logs the topic deleted counted as lost. And failures: a Kafka broker
//! stopped and restarted mid-traffic, an object store unreachable for a while (through a proxy
//! the test cuts), and answers to conditional PUTs lost after the store applied them; the joiner
//! restarted whenever it exits, as a supervisor would, and every row there exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use featurelog_kafka::KafkaConfig;
use featurelog_testkit::broker::DedicatedBroker;
use featurelog_testkit::serving::{
    client, free_addr, http_get, kafka_toml, model_server, ranker_request, sidecar, sidecar_config,
    temp_dir,
};
use featurelog_testkit::{TestKafka, TestS3, kafka, s3};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};

const ALLOW: &str = r#"
[[model]]
name = "ranker"
features = ["user_locale", "item_price"]
candidate-ids-input = "item_id"
parameters = ["surface"]
"#;

/// One app event: Kafka key and JSON body.
struct AppEvent {
    key: String,
    body: String,
}

/// An app event with an id of its own, as apps give them (`event-id = "event_id"` in every
/// joiner config here): sending the same `AppEvent` twice is a retry, which counts once.
fn app_event(request: &str, item: &str, time_ms: i64, kind: &str) -> AppEvent {
    AppEvent {
        key: item.to_owned(),
        body: format!(
            r#"{{"request_id":"{request}","item_id":"{item}","event_time":{time_ms},"event_type":"{kind}","event_id":"{request}/{item}/{kind}/{time_ms}"}}"#
        ),
    }
}

/// Produces events the way an app with its own client would: keyed by item id, with
/// librdkafka's CRC32 partitioner, so they are not co-partitioned with the feature logs.
async fn produce_events(kafka: &KafkaConfig, topic: &str, events: &[AppEvent]) {
    produce_events_with(kafka, topic, events, "consistent_random").await;
}

async fn produce_events_with(
    kafka: &KafkaConfig,
    topic: &str,
    events: &[AppEvent],
    partitioner: &str,
) {
    let producer: FutureProducer = kafka
        .client_config(&[("partitioner", partitioner)])
        .create()
        .unwrap();
    for e in events {
        producer
            .send(
                FutureRecord::to(topic).key(&e.key).payload(&e.body),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
}

#[allow(clippy::too_many_arguments)]
fn joiner_config(
    dir: &Path,
    name: &str,
    kafka: &KafkaConfig,
    group: &str,
    features: &str,
    events: &str,
    dead_letter: &str,
    output: &Path,
) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "group = \"{group}\"\ninstance = \"{name}\"\n{}\
             [input]\nfeatures-topic = \"{features}\"\nevents-topic = \"{events}\"\nevents-format = \"json\"\n\
             dead-letter-topic = \"{dead_letter}\"\n[input.json-fields]\nevent-id = \"event_id\"\n[join]\nfeatures-wait = \"1h\"\nimpressions-wait = \"1h\"\n\
             idle-timeout = \"1h\"\n\
             [output]\npath = \"{}\"\nflush-interval = \"300ms\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
            kafka_toml(kafka),
            output.display()
        ),
    )
    .unwrap();
    path
}

/// Moves the `/metrics` endpoint of a config written by `joiner_config` from port 0 to a free
/// port, and returns its address.
fn serve_metrics_on_a_known_port(config: &Path) -> std::net::SocketAddr {
    let metrics = free_addr();
    let text = std::fs::read_to_string(config)
        .unwrap()
        .replace("127.0.0.1:0", &metrics.to_string());
    std::fs::write(config, text).unwrap();
    metrics
}

/// Waits up to 30 s for `/metrics` at `addr` to show `line`.
async fn expect_metric(addr: std::net::SocketAddr, line: &str) {
    let shown = featurelog_testkit::eventually(Duration::from_secs(30), || {
        http_get(addr, "/metrics").is_some_and(|m| m.contains(line))
    })
    .await;
    assert!(shown, "{line} not in {:?}", http_get(addr, "/metrics"));
}

/// Sets `join.held-logs` in a config written by `joiner_config`.
fn set_held_logs(config: &Path, mode: &str) {
    let text = std::fs::read_to_string(config).unwrap().replace(
        "idle-timeout = \"1h\"\n",
        &format!("idle-timeout = \"1h\"\nheld-logs = \"{mode}\"\n"),
    );
    std::fs::write(config, text).unwrap();
}

/// Passes a raw librdkafka setting to the clients of a config written by `joiner_config`
/// (which has no `[kafka.properties]` of its own when the test broker needs none).
fn set_kafka_property(config: &Path, key: &str, value: &str) {
    let text = std::fs::read_to_string(config).unwrap().replace(
        "[input]",
        &format!("[kafka.properties]\n{key:?} = {value:?}\n[input]"),
    );
    std::fs::write(config, text).unwrap();
}

/// Sets `output.checkpoints-kept` in a config written by `joiner_config`.
fn keep_checkpoints(config: &Path, kept: u32) {
    let text = std::fs::read_to_string(config).unwrap().replace(
        "flush-interval = \"300ms\"\n",
        &format!("flush-interval = \"300ms\"\ncheckpoints-kept = {kept}\n"),
    );
    std::fs::write(config, text).unwrap();
}

/// The checkpoint epochs of each task, in order, from paths relative to the dataset's root
/// (`_featurelog/checkpoints/<task>/<epoch>.json`; other paths are ignored).
fn checkpoint_epochs(paths: impl IntoIterator<Item = String>) -> BTreeMap<String, Vec<u64>> {
    let mut epochs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for path in paths {
        let Some((task, file)) = path
            .strip_prefix("_featurelog/checkpoints/")
            .and_then(|rest| rest.split_once('/'))
        else {
            continue;
        };
        if let Some(epoch) = file.strip_suffix(".json").and_then(|e| e.parse().ok()) {
            epochs.entry(task.to_owned()).or_default().push(epoch);
        }
    }
    for e in epochs.values_mut() {
        e.sort_unstable();
    }
    epochs
}

/// The checkpoint epochs of each task of a local dataset.
fn checkpoints_per_task(root: &Path) -> BTreeMap<String, Vec<u64>> {
    let dir = root.join("_featurelog").join("checkpoints");
    let paths = std::fs::read_dir(&dir).unwrap().flat_map(|task| {
        let task = task.unwrap().file_name().to_string_lossy().into_owned();
        std::fs::read_dir(dir.join(&task)).unwrap().map(move |f| {
            let file = f.unwrap().file_name().to_string_lossy().into_owned();
            format!("_featurelog/checkpoints/{task}/{file}")
        })
    });
    checkpoint_epochs(paths)
}

/// At most the newest two checkpoints per task, consecutive (`checkpoints-kept = 2`).
fn assert_two_kept(epochs: &BTreeMap<String, Vec<u64>>, what: &str) {
    assert!(
        epochs
            .values()
            .all(|e| e.len() <= 2 && e.windows(2).all(|w| w[1] == w[0] + 1)),
        "{what}: {epochs:?}"
    );
}

/// Some task committed more than twice, so its first epochs were pruned.
fn assert_some_pruned(epochs: &BTreeMap<String, Vec<u64>>) {
    assert!(
        epochs.values().any(|e| e.first().is_some_and(|&e| e > 1)),
        "no task pruned: {epochs:?}"
    );
}

/// Whether any state file of a local dataset holds `needle`.
fn state_files_hold(root: &Path, needle: &[u8]) -> bool {
    let mut dirs = vec![root.join("_featurelog").join("state")];
    let mut found = false;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            } else {
                let bytes = std::fs::read(entry.path()).unwrap();
                found |= bytes.windows(needle.len()).any(|w| w == needle);
            }
        }
    }
    found
}

struct Joiner(Child);

impl Joiner {
    fn start(config: &Path) -> Self {
        Self::start_with_env(config, &[])
    }

    fn start_with_env(config: &Path, env: &[(&str, String)]) -> Self {
        Joiner(
            Command::new(env!("CARGO_BIN_EXE_featurelog"))
                .args(["join", "--config", config.to_str().unwrap()])
                .envs(env.iter().map(|(k, v)| (k, v)))
                // FEATURELOG_TEST_JOINER_LOG (e.g. `info,featurelog_joiner=debug`) shows more
                // of what the joiners of a failing test did.
                .env(
                    "FEATURELOG_LOG",
                    std::env::var("FEATURELOG_TEST_JOINER_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        )
    }

    /// Its exit status, if it has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().unwrap()
    }

    /// SIGKILL, leaving a handle on the dead process (to be replaced).
    fn kill9_in_place(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    fn kill9(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .unwrap();
        self.0.wait().unwrap()
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (request id, item id) -> (clicks, item_price bits, user_locale) for every visible row.
type Dataset = BTreeMap<(String, String), Vec<(u32, u32, String)>>;

fn read_dataset(root: &Path) -> Dataset {
    let mut out = Dataset::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
                continue;
            }
            let Ok(bytes) = std::fs::read(e.path()) else {
                continue;
            };
            add_rows(bytes.into(), &mut out);
        }
    }
    out
}

/// The visible objects of a dataset on S3, as a reader sees them: every name of the key that
/// starts with `_` or `.` hides it.
async fn read_s3_dataset(s3: &TestS3, prefix: &str) -> Dataset {
    let mut out = Dataset::new();
    for (key, bytes) in s3.objects(prefix).await {
        if key
            .split('/')
            .any(|p| p.starts_with('_') || p.starts_with('.'))
        {
            continue;
        }
        add_rows(bytes, &mut out);
    }
    out
}

fn add_rows(bytes: bytes::Bytes, out: &mut Dataset) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .unwrap()
        .build()
        .unwrap();
    for batch in reader {
        let batch = batch.unwrap();
        let col = |n: &str| batch.column_by_name(n).unwrap().clone();
        let (req, item, clicks) = (col("request_id"), col("item_id"), col("clicks"));
        let (price, locale) = (col("item_price"), col("user_locale"));
        for i in 0..batch.num_rows() {
            out.entry((
                req.as_string::<i32>().value(i).to_owned(),
                item.as_string::<i32>().value(i).to_owned(),
            ))
            .or_default()
            .push((
                clicks
                    .as_primitive::<arrow_array::types::UInt32Type>()
                    .value(i),
                price.as_primitive::<Float32Type>().value(i).to_bits(),
                locale.as_string::<i32>().value(i).to_owned(),
            ));
        }
    }
}

fn row_count(d: &Dataset) -> usize {
    d.values().map(Vec::len).sum()
}

async fn wait_for_rows(root: &Path, expected: usize, what: &str) -> Dataset {
    wait_until_rows(expected, what, || {
        let d = read_dataset(root);
        async move { d }
    })
    .await
}

async fn wait_until_rows<F: std::future::Future<Output = Dataset>>(
    expected: usize,
    what: &str,
    mut read: impl FnMut() -> F,
) -> Dataset {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let d = read().await;
        if row_count(&d) >= expected {
            return d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {} of {expected} rows after 120 s",
            row_count(&d)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

struct Setup {
    kafka: TestKafka,
    features: String,
    events: String,
    dead_letter: String,
    dir: tempfile::TempDir,
    /// (request, item) pairs that were impressed, with their click count.
    expected: BTreeMap<(String, String), u32>,
    /// The sidecar's `sample-rate` for the ranker: only requests in the sample are logged and
    /// expected as rows; the app sends events for all of them.
    sample_rate: f64,
    /// App events sent for requests outside the sample.
    unsampled_events: usize,
}

impl Setup {
    /// A joiner config (`joiner_config`) for this setup's topics.
    fn joiner_config(&self, name: &str, group: &str, out: &Path) -> PathBuf {
        joiner_config(
            self.dir.path(),
            name,
            &self.kafka.config,
            group,
            &self.features,
            &self.events,
            &self.dead_letter,
            out,
        )
    }
}

/// Sends `requests` recommender requests through a sidecar, and app events for them: items 0
/// and 2 of each request impressed, item 2 also clicked. Features and events are read from
/// different topics, so either side may come first. Plus one event that is not JSON.
async fn setup(kafka: TestKafka, requests: u32, waves: u32) -> Setup {
    setup_with(kafka, requests, waves, false).await
}

/// `setup`, with the events either partitioned the app's own way (3 partitions, keyed by item
/// id, CRC32) or, `by_request`, co-partitioned with the feature logs: keyed by request id with
/// murmur2 (as Kafka's Java client does) into as many partitions.
async fn setup_with(kafka: TestKafka, requests: u32, waves: u32, by_request: bool) -> Setup {
    setup_sampled(kafka, requests, waves, by_request, 1.0).await
}

/// `setup_with`, the sidecar logging only the requests in a sample of `sample_rate`.
async fn setup_sampled(
    kafka: TestKafka,
    requests: u32,
    waves: u32,
    by_request: bool,
    sample_rate: f64,
) -> Setup {
    let features = kafka.unique_topic("join-features", 4).await;
    let events = kafka
        .unique_topic("join-events", if by_request { 4 } else { 3 })
        .await;
    let dead_letter = kafka.unique_topic("join-dlq", 1).await;
    let dir = temp_dir();
    let mut s = Setup {
        kafka,
        features,
        events,
        dead_letter,
        dir,
        expected: BTreeMap::new(),
        sample_rate,
        unsampled_events: 0,
    };
    let waves: Vec<_> = (0..waves)
        .map(|wave| wave * requests..(wave + 1) * requests)
        .collect();
    send_requests(&mut s, &waves, by_request).await;
    s
}

/// `send_requests` of one wave of seeds, events keyed by item id.
async fn send_wave(s: &mut Setup, seeds: std::ops::Range<u32>) {
    send_requests(s, std::slice::from_ref(&seeds), false).await;
}

/// Sends the recommender requests of each range of seeds in `waves` through a sidecar to
/// `s.features`, and app events for them to `s.events`, one batch of events per wave: items 0
/// and 2 of each request impressed, item 2 also clicked (the click sent twice, a retry that
/// counts once); adds their rows to `s.expected`. A wave that starts at seed 0 also sends one
/// event that is not JSON. Events are keyed by item id (CRC32), or, `by_request`, by request
/// id with murmur2 (see `setup_with`).
async fn send_requests(s: &mut Setup, waves: &[std::ops::Range<u32>], by_request: bool) {
    let kafka = &s.kafka;
    let (model_addr, stop) = model_server(&["ranker"]).await;
    let allow = format!("{ALLOW}sample-rate = {:?}\n", s.sample_rate);
    let config = sidecar_config(
        s.dir.path(),
        model_addr,
        Some(&kafka.config),
        &s.features,
        &allow,
    );
    let sidecar = sidecar(config).await;
    let mut via = client(sidecar.local_addr).await;
    let now_ms = 1_764_439_200_000i64;
    let mut logged = 0u64;
    for seeds in waves {
        let mut app = Vec::new();
        for seed in seeds.clone() {
            let id = format!("req-{seed}");
            let request = ranker_request(&id, 4, 0, seed, seed % 2 == 0);
            via.model_infer(request).await.unwrap();
            let item = |j: u32| (1000 + j + seed * 10_000).to_string();
            let t = now_ms + i64::from(seed) * 1000;
            // With no label window a row is written at its impression, so the click is sent
            // first (same key, same partition, so it is read first) to be part of the row
            // whatever order the two topics are read in.
            app.push(app_event(&id, &item(2), t + 20, "click"));
            // The app's collector sends the click again (a retry): it must count once.
            app.push(app_event(&id, &item(2), t + 20, "click"));
            app.push(app_event(&id, &item(0), t + 10, "impression"));
            app.push(app_event(&id, &item(2), t + 10, "impression"));
            if featurelog_schemas::sampling::sampled(&id, s.sample_rate) {
                logged += 1;
                s.expected.insert((id.clone(), item(0)), 0);
                s.expected.insert((id.clone(), item(2)), 1);
            } else {
                s.unsampled_events += 4;
            }
        }
        if seeds.start == 0 {
            app.push(AppEvent {
                key: "x".into(),
                body: "{not json".into(),
            });
        }
        if by_request {
            for e in &mut app {
                if let Some(request) = e.body.split('"').nth(3) {
                    e.key = request.to_owned();
                }
            }
            produce_events_with(&kafka.config, &s.events, &app, "murmur2_random").await;
        } else {
            produce_events(&kafka.config, &s.events, &app).await;
        }
    }
    sidecar.stop();
    let metrics = sidecar.metrics.clone();
    assert_eq!(sidecar.wait().await, 0);
    // Every row expected needs its request's record: a call the sidecar did not log would
    // otherwise show up only as rows missing from every dataset.
    assert_eq!(
        metrics.records_delivered.get(),
        logged,
        "records the sidecar delivered: {}",
        metrics.render()
    );
    stop.cancel();
}

fn check_exact(d: &Dataset, expected: &BTreeMap<(String, String), u32>, what: &str) {
    let got: BTreeMap<_, _> = d
        .iter()
        .map(|(k, rows)| {
            assert_eq!(rows.len(), 1, "{what}: {k:?} written {} times", rows.len());
            (k.clone(), rows[0].0)
        })
        .collect();
    assert_eq!(&got, expected, "{what}: rows or click labels differ");
}

/// The sidecar logs a sample of the requests, the app sends events for all of them, and the
/// joiner is told the sidecar's rate: the events of requests outside the sample are dropped
/// as they are read and counted, instead of waiting in the state for features that never come
/// (and being counted as impressions without features); the sampled requests' rows are all
/// there, routed or read directly.
async fn events_outside_the_sidecars_sample(name: &str, by_request: bool) {
    let Some(kafka) = kafka(name) else {
        return;
    };
    let s = setup_sampled(kafka, 16, 1, by_request, 0.5).await;
    assert!(
        !s.expected.is_empty() && s.unsampled_events > 0,
        "the sample must split the requests"
    );
    let out = s.dir.path().join("dataset");
    let config = s.joiner_config("sampled", &s.kafka.unique_group("sampled"), &out);
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("[input]\n", "[input]\nevents-sample-rate = 0.5\n");
    std::fs::write(&config, text).unwrap();
    if by_request {
        set_events_partitioning(&config, "by-request-id");
    }
    let metrics = serve_metrics_on_a_known_port(&config);
    let joiner = Joiner::start(&config);
    let d = wait_for_rows(&out, s.expected.len(), "sampled").await;
    check_exact(&d, &s.expected, "sampled");
    expect_metric(
        metrics,
        &format!(
            "featurelog_join_events_not_sampled_total {}\n",
            s.unsampled_events
        ),
    )
    .await;
    // Each sampled request's retried click counted once; the unsampled ones' never reached
    // the state.
    expect_metric(
        metrics,
        &format!(
            "featurelog_join_outcomes_total{{name=\"duplicate_events\"}} {}\n",
            s.expected.len() / 2
        ),
    )
    .await;
    // Nothing of theirs is held: every buffered request is one the sidecar logged.
    expect_metric(
        metrics,
        &format!(
            "featurelog_join_buffered_requests {}\n",
            s.expected.len() / 2
        ),
    )
    .await;
    assert!(joiner.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_events_outside_the_sidecars_sample_are_dropped_and_counted() {
    events_outside_the_sidecars_sample(
        "routed_events_outside_the_sidecars_sample_are_dropped_and_counted",
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn co_partitioned_events_outside_the_sidecars_sample_are_dropped_and_counted() {
    events_outside_the_sidecars_sample(
        "co_partitioned_events_outside_the_sidecars_sample_are_dropped_and_counted",
        true,
    )
    .await;
}

/// The lag of `group` on the `partitions` of `topic` as lag tools compute it: each
/// partition's end minus the group's committed offset (the whole partition when nothing is
/// committed). `None` when the broker does not answer.
fn group_lag(kafka: &KafkaConfig, group: &str, topic: &str, partitions: i32) -> Option<i64> {
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
async fn features_and_app_events_become_exactly_the_expected_parquet_rows() {
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
    let caught_up =
        featurelog_testkit::eventually(Duration::from_secs(30), || lag() == Some(0)).await;
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
async fn sigkill_restarts_and_two_processes_give_the_same_rows_as_one() {
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
    let single_config = s.joiner_config("single", &s.kafka.unique_group("single"), &single_out);
    set_held_logs(&single_config, "state-files");
    let single = Joiner::start(&single_config);
    let pair_group = s.kafka.unique_group("pair");
    let (pair_config_a, pair_config_b) = (
        s.joiner_config("pair-a", &pair_group, &pair_out),
        s.joiner_config("pair-b", &pair_group, &pair_out),
    );
    let crash_config = s.joiner_config("crash", &s.kafka.unique_group("crash"), &crash_out);
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

    let single_rows = wait_for_rows(&single_out, s.expected.len(), "single").await;
    let crash_rows = wait_for_rows(&crash_out, s.expected.len(), "killed and restarted").await;
    let pair_rows = wait_for_rows(&pair_out, s.expected.len(), "two in one group").await;
    // Let any stray duplicate surface before comparing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    check_exact(&single_rows, &s.expected, "single");
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
fn trickle_impressions(
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
fn set_events_partitioning(config: &Path, mode: &str) {
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
async fn refused(config: &Path) -> (Option<i32>, String) {
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
async fn co_partitioned_events_join_directly_exactly_once_and_misplaced_ones_are_dead_lettered() {
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
    tokio::time::sleep(Duration::from_secs(2)).await;
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
async fn held_logs_by_offset_are_refused_on_a_topic_with_short_retention() {
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
async fn held_logs_the_topic_deleted_are_counted_lost_and_the_others_still_join() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let Some(kafka) =
        kafka("held_logs_the_topic_deleted_are_counted_lost_and_the_others_still_join")
    else {
        return;
    };
    let s = setup(kafka, 8, 1).await;
    let out = s.dir.path().join("lost");
    let config = s.joiner_config("lost", &s.kafka.unique_group("lost"), &out);
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
    // Let a stray row surface before comparing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    check_exact(&read_dataset(&out), &expected, "after losing held logs");
    drop(joiner);
}

/// With a label window, rows wait for it to close; when the inputs go quiet the watermark moves
/// on the wall clock, the windows close, and finished hours get their `_SUCCESS` marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_inputs_close_label_windows_and_complete_hours() {
    let Some(kafka) = kafka("quiet_inputs_close_label_windows_and_complete_hours") else {
        return;
    };
    quiet_inputs(kafka, Quiet::Routed).await;
}

/// A dataset partitioned by model (`output.partition-by-model`): each model's rows under its
/// own `model=` directory (its name escaped as hive readers decode it), each model's hours
/// complete on their own, read back by pyarrow; the other layout is refused on that dataset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_by_model_each_model_gets_its_own_complete_hours() {
    let Some(kafka) = kafka("partitioned_by_model_each_model_gets_its_own_complete_hours") else {
        return;
    };
    quiet_inputs(kafka, Quiet::PartitionedByModel).await;
}

/// Apps that publish impressions and clicks to topics of their own, the clicks from another
/// service as protobuf (`input.per-topic`): both are read (the router reads every events
/// topic, each in its own encoding), the clicks fold into their impressions' rows, and an hour
/// is complete only once every partition of both topics is past it (the clicks topic has two
/// partitions, one of them empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impressions_and_clicks_on_topics_of_their_own_make_the_same_rows() {
    let Some(kafka) = kafka("impressions_and_clicks_on_topics_of_their_own") else {
        return;
    };
    quiet_inputs(kafka, Quiet::ClicksOnATopicOfTheirOwn).await;
}

/// Apps that write events in transactions leave a commit marker after their last event, which
/// no consumer receives: a co-partitioned task must still see its events partition as read to
/// its end when it is quiet, or no label window would ever close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_co_partitioned_events_written_in_transactions_close_label_windows() {
    let Some(kafka) = kafka("quiet_co_partitioned_events_written_in_transactions") else {
        return;
    };
    quiet_inputs(kafka, Quiet::CoPartitionedInTransactions).await;
}

/// With `join.negatives-sample-rate = 1`, every candidate scored and never impressed becomes
/// a row once its features expire, marked `impressed = false` with no impression time or
/// label, beside the impressed rows, as pyarrow reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_scored_and_never_impressed_are_written_as_negatives() {
    let Some(kafka) = kafka("candidates_scored_and_never_impressed_are_written_as_negatives")
    else {
        return;
    };
    quiet_inputs(kafka, Quiet::Negatives).await;
}

/// How `quiet_inputs` sends the app's events.
#[derive(Clone, Copy, PartialEq)]
enum Quiet {
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
}

/// The second model of `Quiet::PartitionedByModel`: a name no path segment takes as it is.
const SECOND_MODEL: &str = "ranker b/2";

/// Produces events keyed by request id, murmur2-partitioned (co-partitioned with the feature
/// logs), in one transaction, as an app with a transactional producer would.
async fn produce_events_in_a_transaction(kafka: &KafkaConfig, topic: &str, events: &[AppEvent]) {
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

async fn quiet_inputs(kafka: TestKafka, mode: Quiet) {
    let co_partitioned_in_transactions = mode == Quiet::CoPartitionedInTransactions;
    let features = kafka.unique_topic("done-features", 1).await;
    let events = kafka.unique_topic("done-events", 1).await;
    let clicks = kafka.unique_topic("done-clicks", 2).await;
    let dead_letter = kafka.unique_topic("done-dlq", 1).await;
    let by_model = mode == Quiet::PartitionedByModel;
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
        .replace("impressions-wait = \"1h\"", "impressions-wait = \"3s\"")
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
    std::fs::write(&config, text).unwrap();
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
    if by_model {
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
fn s3_joiner_config(s: &Setup, s3: &TestS3, name: &str, prefix: &str) -> PathBuf {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_the_joiner_writes_exactly_the_expected_rows_and_pyarrow_reads_them() {
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
async fn on_s3_sigkill_and_restarts_keep_every_row_exactly_once() {
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
    // Let any stray duplicate surface before comparing.
    tokio::time::sleep(Duration::from_secs(2)).await;
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
async fn over_tls_and_scram_the_sidecar_and_joiner_write_exactly_the_expected_rows() {
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

/// A joiner still waiting for its brokers at start-up (here: none answers) stops at the first
/// SIGTERM with success, instead of finishing its waits and then failing.
#[test]
fn sigterm_during_start_up_stops_the_joiner_cleanly() {
    let dir = temp_dir();
    let config = dir.path().join("join.toml");
    std::fs::write(
        &config,
        "[kafka]\nbootstrap-servers = \"127.0.0.1:1\"\n[input]\nevents-topic = \"events\"\n[output]\npath = \"data\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let joiner = Joiner::start(&config);
    std::thread::sleep(Duration::from_secs(2));
    let status = joiner.terminate();
    assert!(status.success(), "{status}");
}

/// Gives `topic` `partitions` partitions, as an operator adding some would.
async fn grow_topic(kafka: &KafkaConfig, topic: &str, partitions: usize) {
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
async fn a_feature_log_topic_that_gains_partitions_stops_the_joiner_with_what_to_do() {
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
async fn supervise_until_rows<F: std::future::Future<Output = Dataset>>(
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
async fn supervise_for(
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
async fn a_kafka_broker_restart_mid_traffic_keeps_every_row_exactly_once() {
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
    // Let any stray duplicate surface before comparing.
    tokio::time::sleep(Duration::from_secs(2)).await;
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
    tokio::time::sleep(Duration::from_secs(2)).await;
    check_exact(&read_dataset(&out), &s.expected, "started without a broker");
    assert!(joiner.terminate().success());
}

/// A proxy in front of the test's S3 server, and the server as seen through it.
fn behind_a_proxy(s3: &TestS3) -> (featurelog_testkit::proxy::CutProxy, TestS3) {
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
async fn on_s3_an_outage_of_the_store_loses_and_duplicates_no_row() {
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
    tokio::time::sleep(Duration::from_secs(2)).await;
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
async fn on_s3_lost_answers_to_conditional_puts_are_taken_for_what_they_did() {
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
    tokio::time::sleep(Duration::from_secs(2)).await;
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
async fn on_s3_sigterm_while_the_store_does_not_answer_at_start_up_stops_at_once() {
    let name = "on_s3_sigterm_while_the_store_does_not_answer_at_start_up_stops_at_once";
    let (Some(kafka), Some(s3)) = (kafka(name), s3(name)) else {
        return;
    };
    let s = setup(kafka, 1, 1).await;
    // A store that takes every connection and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming() {
            held.push(conn);
        }
    });
    let via_silent = TestS3 {
        endpoint: format!("http://{silent_addr}"),
        ..s3.clone()
    };
    let prefix = s3.unique_prefix("start-up-silent");
    let config = s3_joiner_config(&s, &via_silent, "s3-start-up-silent", &prefix);
    let mut joiner = Joiner::start_with_env(&config, &via_silent.aws_env());
    // Past the topic checks, into the store's.
    tokio::time::sleep(Duration::from_secs(5)).await;
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

/// Apps may add partitions to their events topic while the joiner runs (the repartitioning
/// router lets them partition as they like): the router reads the new partitions once its
/// metadata shows them, every task's watermark waits for them, and their events are joined
/// like the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_in_partitions_the_apps_add_while_the_joiner_runs_are_joined() {
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
async fn a_joiner_still_starting_is_alive_and_not_ready() {
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
async fn a_missing_events_topic_is_named_with_who_must_create_it() {
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

/// An event dated far ahead of the watermark (an impression in 2150: a wrong clock or unit) is
/// dead-lettered as `event_time_in_future`, saying why, instead of being held until the
/// watermark reaches it; the other rows are written as always.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_dated_far_ahead_of_the_watermark_is_dead_lettered() {
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
async fn an_output_path_under_a_regular_file_is_reported_once() {
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
struct Owed {
    kafka: TestKafka,
    /// Holds the dataset and configs until the test ends.
    _dir: tempfile::TempDir,
    events: String,
    config: PathBuf,
    out: PathBuf,
    expected: BTreeMap<(String, String), u32>,
    marker: PathBuf,
}

async fn owe_an_hour(kafka: TestKafka, idle_timeout: &str) -> Owed {
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
        .replace("impressions-wait = \"1h\"", "impressions-wait = \"3s\"")
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

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Restarts the joiner of `owed` and waits for the hour's `_SUCCESS`, the rows unchanged.
async fn restart_and_expect_the_marker(owed: &Owed) {
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
async fn a_restarted_joiner_marks_the_hours_that_completed_while_it_was_stopped() {
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
async fn a_restarted_joiner_marks_the_hours_it_owes_with_no_new_traffic() {
    let Some(kafka) = kafka("a_restarted_joiner_marks_the_hours_it_owes_with_no_new_traffic")
    else {
        return;
    };
    // Long enough for the first run to write its rows and stop before it is quiet that long.
    let owed = owe_an_hour(kafka, "15s").await;
    restart_and_expect_the_marker(&owed).await;
}
