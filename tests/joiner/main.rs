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
//! restarted whenever it exits, as a supervisor would, and every row there exactly once. And
//! `output.format = "delta"`: the table read by `deltalake` and Polars, through SIGKILLs.
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

// The tests, by theme; their helpers are shared through these globs.
mod delta;
mod exact;
mod failures;
mod operations;
mod quiet;

use exact::*;
use failures::*;
use quiet::*;

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
        Self::spawn(config, env, Stdio::inherit())
    }

    /// Started with its log written to `log` instead of the test's output.
    fn start_logging_to(config: &Path, log: &Path) -> Self {
        Self::spawn(config, &[], std::fs::File::create(log).unwrap().into())
    }

    fn spawn(config: &Path, env: &[(&str, String)], stderr: Stdio) -> Self {
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
                .stderr(stderr)
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
        // A Delta table's files hold clicks as a signed Int64 (Delta has no unsigned types).
        let clicks = arrow_cast::cast(&col("clicks"), &arrow_schema::DataType::UInt32).unwrap();
        let (req, item) = (col("request_id"), col("item_id"));
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

/// The offset after the last record of each partition of `topic` that a `read_committed`
/// consumer receives (0 for a partition without one): transaction markers and aborted records
/// are past it, so a joiner that read everything stands there.
fn record_ends(kafka: &KafkaConfig, topic: &str) -> Vec<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::{Message as _, Offset, TopicPartitionList};
    let consumer: BaseConsumer = kafka
        .client_config(&[
            ("group.id", "featurelog-test-ends"),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "true"),
            ("isolation.level", "read_committed"),
        ])
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions = metadata.topics()[0].partitions().len();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p as i32, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut ends = vec![0; partitions];
    let mut at_end = vec![false; partitions];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while at_end.contains(&false) {
        assert!(
            std::time::Instant::now() < deadline,
            "reading {topic} to its end"
        );
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => ends[m.partition() as usize] = m.offset() + 1,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => at_end[p as usize] = true,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    ends
}

/// Waits until the joiner has checkpointed every record of its inputs: the latest checkpoint of
/// each task of `features` in the dataset `open` opens reads on from the last record of its
/// feature-log partition and of its partition of `events_input` (the repartition topic, or the
/// co-partitioned events topic). Rows come only from records read and become visible only
/// through a checkpoint, so from then on the dataset stays as it is: a comparison made then
/// would see any stray duplicate.
async fn wait_checkpointed(
    kafka: &KafkaConfig,
    features: &str,
    events_input: &str,
    open: impl Fn() -> featurelog_joiner::sink::Dataset + Send + 'static,
    what: &str,
) {
    let (kafka, features, events_input) =
        (kafka.clone(), features.to_owned(), events_input.to_owned());
    let what = what.to_owned();
    tokio::task::spawn_blocking(move || {
        let dataset = open();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let (feature_ends, event_ends) = (
                record_ends(&kafka, &features),
                record_ends(&kafka, &events_input),
            );
            let behind: Vec<String> = (0..feature_ends.len())
                .filter_map(|p| {
                    let task = format!("{features}-{p}");
                    let read = dataset
                        .latest_checkpoint(&task)
                        .unwrap()
                        .map_or((0, 0), |c| {
                            // `events`, or `events-topic` when co-partitioned.
                            let events = c.offsets.iter().find(|(k, _)| *k != "features");
                            (c.offsets["features"], events.map_or(0, |(_, o)| *o))
                        });
                    let end = (feature_ends[p], event_ends.get(p).copied().unwrap_or(0));
                    (read.0 < end.0 || read.1 < end.1)
                        .then(|| format!("{task} at {read:?} of {end:?}"))
                })
                .collect();
            if behind.is_empty() {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: not every record checkpointed after 120 s: {behind:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    })
    .await
    .unwrap();
}

/// [`wait_checkpointed`] for the joiner of `config`, its dataset in a local directory.
async fn wait_checkpointed_in(kafka: &KafkaConfig, features: &str, config: &Path) {
    let config = featurelog_joiner::config::JoinerConfig::load(config).unwrap();
    let out = config.output.path.clone();
    let open = move || {
        featurelog_joiner::sink::Dataset::open(
            &out,
            featurelog_joiner::sink::SinkOptions::default(),
        )
        .unwrap()
    };
    let events = config.join_events_topic();
    wait_checkpointed(kafka, features, &events, open, "local dataset").await;
}

/// [`wait_checkpointed`] for the routed joiner of `config`, its dataset under `prefix` on `s3`.
async fn wait_checkpointed_on_s3(s: &Setup, s3: &TestS3, prefix: &str, config: &Path) {
    let (store, url, prefix) = (s3.store(), format!("s3://{}", s3.bucket), prefix.to_owned());
    let open = move || {
        featurelog_joiner::sink::Dataset::open_object_store(
            store.clone(),
            &url,
            &prefix,
            featurelog_joiner::sink::SinkOptions::default(),
        )
        .unwrap()
    };
    let events = featurelog_joiner::config::JoinerConfig::load(config)
        .unwrap()
        .join_events_topic();
    wait_checkpointed(&s.kafka.config, &s.features, &events, open, "dataset on S3").await;
}
