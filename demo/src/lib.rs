//! `featurelog demo`: the whole pipeline on one machine, end to end.
//!
//! It starts a broker (librdkafka's embedded mock cluster, or a real one), the reference model
//! server, the sidecar in front of it in logging mode and the joiner; sends recommender traffic
//! through the sidecar while an app publishes impressions and clicks as JSON; waits until the
//! joiner has written every impressed candidate as a Parquet row; recomputes the same features
//! the way a careless offline pipeline would; and runs the diff on the two.
//!
//! Each part runs in this process through its library, with the same configuration files a
//! deployment would use (written into the output folder, so they can be read and reused).

pub mod world;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use featurelog_kafka::{DevBroker, KafkaConfig};
use featurelog_schemas::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use crate::world::World;

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A file of the output folder could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The broker could not be started or reached.
    #[error("kafka ({bootstrap}): {source}")]
    Kafka {
        /// Where the broker is.
        bootstrap: String,
        /// The cause (boxed: it is large and errors are rare).
        source: Box<featurelog_kafka::KafkaError>,
    },
    /// An app event could not be published.
    #[error("publishing app events to {topic}: {source}")]
    Produce {
        /// The topic.
        topic: String,
        /// The cause.
        source: rdkafka::error::KafkaError,
    },
    /// The model server could not be started.
    #[error("model server: {0}")]
    ModelServer(String),
    /// The sidecar could not be started.
    #[error("sidecar: {0}")]
    Sidecar(#[from] featurelog_sidecar::SidecarError),
    /// The joiner's config was refused or the joiner failed.
    #[error("joiner: {0}")]
    Joiner(String),
    /// A call through the sidecar failed.
    #[error("inference call {request_id} through the sidecar: {status}")]
    Call {
        /// The request.
        request_id: String,
        /// What the sidecar returned.
        status: Box<tonic::Status>,
    },
    /// The dataset did not reach the expected rows in time.
    #[error(
        "the joiner wrote {written} of {expected} rows in {waited:?}, and no new row for a minute before giving up; the dataset is in {dataset}, the joiner's log above says why"
    )]
    Incomplete {
        /// Rows found.
        written: u64,
        /// Rows expected (one per impression).
        expected: u64,
        /// How long the demo waited.
        waited: Duration,
        /// Where.
        dataset: PathBuf,
    },
    /// Writing the offline table failed.
    #[error("offline table {path}: {message}")]
    Offline {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The diff failed.
    #[error("diff: {0}")]
    Diff(#[from] featurelog_diff::DiffError),
}

/// How big a demo to run, and where.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The output folder: configs, the dataset, the offline table and the reports.
    pub out_dir: PathBuf,
    /// A real broker's bootstrap servers; `None` runs the embedded one.
    pub kafka: Option<String>,
    /// Inference requests to send.
    pub requests: u64,
    /// Candidates scored per request.
    pub candidates: usize,
    /// Requests per second.
    pub rate: u32,
    /// Fraction of scored candidates the app shows.
    pub impression_rate: f64,
    /// Fraction of shown candidates clicked.
    pub click_rate: f64,
    /// Seed of the synthetic world.
    pub seed: u64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            out_dir: PathBuf::from("featurelog-demo"),
            kafka: None,
            requests: 2_000,
            candidates: 100,
            rate: 250,
            impression_rate: 0.03,
            click_rate: 0.2,
            seed: 42,
        }
    }
}

/// What the demo is doing, for progress lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Sending traffic.
    Traffic,
    /// Waiting for the joiner to write every row.
    Joining,
}

/// A progress report, about once a second.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// The stage.
    pub stage: Stage,
    /// Inference calls answered.
    pub requests: u64,
    /// FeatureLog records the sidecar produced.
    pub records: u64,
    /// Rows the joiner has committed to the dataset.
    pub rows: u64,
    /// Rows expected when done.
    pub expected_rows: u64,
}

/// What the demo did and found.
#[derive(Debug)]
pub struct Summary {
    /// The output folder.
    pub out_dir: PathBuf,
    /// The joiner's dataset.
    pub dataset: PathBuf,
    /// The offline pipeline's table.
    pub offline: PathBuf,
    /// The HTML report.
    pub html: PathBuf,
    /// Inference calls made.
    pub requests: u64,
    /// Candidates scored.
    pub candidates: u64,
    /// Impressions and clicks the app published.
    pub impressions: u64,
    /// See `impressions`.
    pub clicks: u64,
    /// Bytes of the requests the sidecar saw (gRPC bodies).
    pub request_bytes: u64,
    /// Bytes of the records it produced after the allow list.
    pub record_bytes: u64,
    /// Records produced.
    pub records: u64,
    /// Rows in the dataset.
    pub rows: u64,
    /// Parquet files in the dataset.
    pub files: u64,
    /// The diff report.
    pub report: featurelog_diff::Report,
    /// Wall time.
    pub elapsed: Duration,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Io {
        path: path.to_owned(),
        source,
    }
}

fn write(path: &Path, text: &str) -> Result<(), DemoError> {
    std::fs::write(path, text).map_err(io(path))
}

/// Topic names of one run, unique so that runs against a real broker never mix.
struct Topics {
    features: String,
    events: String,
    dead_letter: String,
    group: String,
}

impl Topics {
    fn new(run: &str) -> Self {
        Self {
            features: format!("featurelog.demo.{run}.features"),
            events: format!("featurelog.demo.{run}.events"),
            dead_letter: format!("featurelog.demo.{run}.dead-letter"),
            group: format!("featurelog-demo-{run}"),
        }
    }
}

/// Runs the demo. `progress` is called about once a second while traffic runs and while the
/// joiner catches up. `shutdown` stops it early (with an error, since the figures would be
/// partial).
pub async fn run(
    options: DemoOptions,
    shutdown: CancellationToken,
    mut progress: impl FnMut(Progress),
) -> Result<Summary, DemoError> {
    let started = Instant::now();
    let out = options.out_dir.clone();
    std::fs::create_dir_all(&out).map_err(io(&out))?;
    let out = out.canonicalize().map_err(io(&out))?;
    let dataset = out.join("dataset");
    if dataset.exists() {
        // A previous run's rows would be counted as this run's.
        std::fs::remove_dir_all(&dataset).map_err(io(&dataset))?;
    }
    let run_id = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    );
    let topics = Topics::new(&run_id);

    // The broker.
    let embedded = match &options.kafka {
        Some(_) => None,
        None => Some(DevBroker::start(1).map_err(|source| DemoError::Kafka {
            bootstrap: "embedded".into(),
            source: Box::new(source),
        })?),
    };
    let bootstrap = match (&options.kafka, &embedded) {
        (Some(b), _) => b.clone(),
        (None, Some(broker)) => broker.bootstrap_servers(),
        (None, None) => String::new(),
    };
    let kafka = KafkaConfig::new(bootstrap.clone());
    let kafka_err = |source| DemoError::Kafka {
        bootstrap: bootstrap.clone(),
        source: Box::new(source),
    };
    // The embedded broker implements no CreateTopics request: its topics, the joiner's
    // repartition topic included, are made directly in it.
    let repartition = format!("{}.impressions-by-request", topics.group);
    for (topic, partitions) in [
        (&topics.features, 4),
        (&topics.events, 3),
        (&topics.dead_letter, 1),
        (&repartition, 4),
    ] {
        match &embedded {
            Some(broker) => broker.create_topic(topic, partitions).map_err(kafka_err)?,
            None if *topic != repartition => featurelog_kafka::admin::ensure_topic(
                &kafka,
                topic,
                partitions,
                1,
                Duration::from_secs(30),
            )
            .await
            .map_err(kafka_err)?,
            None => {}
        }
    }

    // The model server.
    let model_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| DemoError::ModelServer(e.to_string()))?;
    let model_addr = model_listener
        .local_addr()
        .map_err(|e| DemoError::ModelServer(e.to_string()))?;
    let stop_model = CancellationToken::new();
    let model_task = tokio::spawn(featurelog_model_server::serve(
        featurelog_model_server::ReferenceModelServer::new([world::MODEL]),
        model_listener,
        stop_model.clone().cancelled_owned(),
    ));

    // The sidecar, from the files a deployment would use.
    let allow_list = out.join("allow-list.toml");
    write(
        &allow_list,
        &format!(
            "# What the demo's sidecar logs: 7 of the request's 9 feature tensors, the ids and\n\
             # the score.\n[[model]]\nname = \"{}\"\nfeatures = [{}]\noutputs = [\"score\"]\n\
             candidate-ids-input = \"item_id\"\n",
            world::MODEL,
            world::LOGGED_FEATURES
                .iter()
                .map(|f| format!("\"{f}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )?;
    let sidecar_toml = out.join("sidecar.toml");
    write(
        &sidecar_toml,
        &format!(
            "listen = \"127.0.0.1:0\"\nupstream = \"http://{model_addr}\"\nmode = \"log\"\n\
             instance = \"demo\"\nallow-list = \"allow-list.toml\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
             [kafka]\nbootstrap-servers = \"{bootstrap}\"\n[publish]\ntopic = \"{}\"\n",
            topics.features
        ),
    )?;
    let sidecar_config = featurelog_sidecar::SidecarConfig::load(&sidecar_toml)?;
    let stop_sidecar = CancellationToken::new();
    let sidecar = featurelog_sidecar::start(sidecar_config, stop_sidecar.clone()).await?;

    // The joiner: a short label window, so that the demo's rows are final seconds after its
    // traffic. The waits stay long: on a fresh broker the router's first transaction can take
    // seconds (the transaction coordinator loads), and with the idle timeout moving the
    // watermark on the wall clock meanwhile, waits shorter than that expired the features
    // before their impressions came through (rows lost to the windows, as configured).
    let join_toml = out.join("join.toml");
    write(
        &join_toml,
        &format!(
            "group = \"{group}\"\ninstance = \"demo\"\n[kafka]\nbootstrap-servers = \"{bootstrap}\"\n\
             [input]\nfeatures-topic = \"{features}\"\nevents-topic = \"{events}\"\n\
             events-format = \"json\"\ndead-letter-topic = \"{dlq}\"\n\
             [input.json-fields]\nevent-id = \"event_id\"\n\
             [join]\nfeatures-wait = \"1m\"\nimpressions-wait = \"1m\"\nlabel-window = \"2s\"\n\
             max-out-of-orderness = \"0s\"\nidle-timeout = \"1s\"\n{held_logs}\
             [output]\npath = \"dataset\"\nflush-interval = \"1s\"\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n",
            group = topics.group,
            features = topics.features,
            events = topics.events,
            dlq = topics.dead_letter,
            // The embedded broker answers no DescribeConfigs: asking it for the topic's
            // retention (`auto`) only waited 10 s for a timeout before choosing this.
            held_logs = if embedded.is_some() {
                "held-logs = \"state-files\"\n"
            } else {
                ""
            },
        ),
    )?;
    let join_config = featurelog_joiner::config::JoinerConfig::load(&join_toml)
        .map_err(|e| DemoError::Joiner(e.to_string()))?;
    let dataset = join_config.output.path.clone();
    let stop_joiner = CancellationToken::new();
    let joiner = tokio::spawn(featurelog_joiner::run::run(
        join_config,
        stop_joiner.clone(),
    ));

    let world = World {
        seed: options.seed,
        candidates: options.candidates,
    };
    let traffic = send_traffic(
        &options,
        &world,
        &run_id,
        sidecar.local_addr,
        &kafka,
        &topics.events,
        &sidecar.metrics,
        &dataset,
        &shutdown,
        &mut progress,
    )
    .await;
    let traffic = match traffic {
        Ok(t) => t,
        Err(e) => {
            stop_joiner.cancel();
            stop_sidecar.cancel();
            stop_model.cancel();
            return Err(e);
        }
    };

    // Wait for the joiner to write a row per impression, for as long as rows keep coming.
    let expected = traffic.impressions;
    let wait_started = Instant::now();
    wait_for_rows(expected, STALL_LIMIT, || {
        let counted = count_rows(&dataset)?;
        progress(Progress {
            stage: Stage::Joining,
            requests: traffic.requests,
            records: sidecar.metrics.produced().records,
            rows: counted.rows,
            expected_rows: expected,
        });
        Ok((
            counted.rows,
            shutdown.is_cancelled() || joiner.is_finished(),
        ))
    })
    .await?;
    stop_joiner.cancel();
    let joined = joiner.await;
    stop_sidecar.cancel();
    let produced = sidecar.metrics.produced();
    let (request_bytes, record_bytes, records) = (
        produced.request_bytes,
        produced.record_bytes,
        produced.records,
    );
    sidecar.wait().await;
    stop_model.cancel();
    let _ = model_task.await;
    match joined {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(DemoError::Joiner(e.to_string())),
        Err(e) => return Err(DemoError::Joiner(e.to_string())),
    }
    let counted = count_rows(&dataset)?;
    if counted.rows < expected {
        return Err(DemoError::Incomplete {
            written: counted.rows,
            expected,
            waited: wait_started.elapsed(),
            dataset,
        });
    }

    // The careless offline pipeline, then the diff.
    let offline = out.join("offline.parquet");
    write_offline(&offline, &world, &traffic.impressed)?;
    let mut diff_options = featurelog_diff::DiffOptions::new(
        &dataset,
        &offline,
        vec!["request_id".into(), "item_id".into()],
    );
    // What the joiner adds around the features (labels, times, the score, the partitions) has
    // no offline counterpart to compare with.
    diff_options.ignore = [
        "model_name",
        "model_version",
        "served_at",
        "impression_time",
        "impressed",
        "clicks",
        "conversions",
        "output_score",
        "labels",
        "parameters",
        "dt",
        "hr",
    ]
    .map(String::from)
    .to_vec();
    let report = featurelog_diff::run(&diff_options)?;
    let html = out.join("report.html");
    write(&html, &report.render_html())?;

    Ok(Summary {
        out_dir: out,
        dataset,
        offline,
        html,
        requests: traffic.requests,
        candidates: traffic.requests * options.candidates as u64,
        impressions: traffic.impressions,
        clicks: traffic.clicks,
        request_bytes,
        record_bytes,
        records,
        rows: counted.rows,
        files: counted.files,
        report,
        elapsed: started.elapsed(),
    })
}

/// What the traffic generator did.
struct Traffic {
    requests: u64,
    impressions: u64,
    clicks: u64,
    /// The impressed (request, user, item) triples, for the offline pipeline.
    impressed: Vec<(String, u64, i64)>,
}

#[allow(clippy::too_many_arguments)]
async fn send_traffic(
    options: &DemoOptions,
    world: &World,
    run_id: &str,
    sidecar: std::net::SocketAddr,
    kafka: &KafkaConfig,
    events_topic: &str,
    metrics: &featurelog_sidecar::metrics::Metrics,
    dataset: &Path,
    shutdown: &CancellationToken,
    progress: &mut impl FnMut(Progress),
) -> Result<Traffic, DemoError> {
    let endpoint = format!("http://{sidecar}");
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .map_err(|e| DemoError::ModelServer(e.to_string()))?
        .connect()
        .await
        .map_err(|e| DemoError::ModelServer(format!("connecting to the sidecar: {e}")))?;
    let client = GrpcInferenceServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    // The app publishes with its own client and partitioner (keyed by item, not request): the
    // joiner must not depend on co-partitioning.
    let producer: FutureProducer = kafka
        .client_config(&[("partitioner", "consistent_random"), ("linger.ms", "20")])
        .create()
        .map_err(|source| DemoError::Produce {
            topic: events_topic.to_owned(),
            source,
        })?;

    let answered = Arc::new(AtomicU64::new(0));
    let mut calls = tokio::task::JoinSet::new();
    let mut traffic = Traffic {
        requests: 0,
        impressions: 0,
        clicks: 0,
        impressed: Vec::new(),
    };
    let period = Duration::from_secs_f64(1.0 / f64::from(options.rate.max(1)));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut last_report = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    for n in 0..options.requests {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let request = world.request(run_id, n);
        let message = world.infer_request(&request);
        let mut outcome = Vec::new();
        for slot in 0..request.items.len() {
            let (shown, clicked) =
                world.outcome(&request, slot, options.impression_rate, options.click_rate);
            if shown {
                outcome.push((request.items[slot], clicked));
                traffic
                    .impressed
                    .push((request.id.clone(), request.user, request.items[slot]));
                traffic.impressions += 1;
                traffic.clicks += u64::from(clicked);
            }
        }
        let permit = limit.clone().acquire_owned().await.ok();
        let mut client = client.clone();
        let answered_calls = answered.clone();
        let producer = producer.clone();
        let topic = events_topic.to_owned();
        let id = request.id.clone();
        calls.spawn(async move {
            let _permit = permit;
            client
                .model_infer(message)
                .await
                .map_err(|status| DemoError::Call {
                    request_id: id.clone(),
                    status: Box::new(status),
                })?;
            answered_calls.fetch_add(1, Ordering::Relaxed);
            // The app shows some candidates right after scoring, and the user clicks a few.
            let now_ms = chrono_ms();
            let mut sends = Vec::new();
            for (item, clicked) in outcome {
                sends.push((item, now_ms, "impression"));
                if clicked {
                    sends.push((item, now_ms + 400, "click"));
                    // Apps retry: some clicks reach the topic twice. Each event has an id
                    // of its own, so the joiner counts them once.
                    if item % 3 == 0 {
                        sends.push((item, now_ms + 400, "click"));
                    }
                }
            }
            for (item, time_ms, kind) in sends {
                let body = format!(
                    r#"{{"request_id":"{id}","item_id":"{item}","event_time":{time_ms},"event_type":"{kind}","event_id":"{id}/{item}/{kind}"}}"#
                );
                let key = item.to_string();
                producer
                    .send(
                        FutureRecord::to(&topic).key(&key).payload(&body),
                        Duration::from_secs(30),
                    )
                    .await
                    .map_err(|(source, _)| DemoError::Produce {
                        topic: topic.clone(),
                        source,
                    })?;
            }
            Ok::<(), DemoError>(())
        });
        traffic.requests += 1;
        while let Some(done) = calls.try_join_next() {
            flatten(done)?;
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            progress(Progress {
                stage: Stage::Traffic,
                requests: answered.load(Ordering::Relaxed),
                records: metrics.produced().records,
                rows: count_rows(dataset)?.rows,
                expected_rows: traffic.impressions,
            });
        }
    }
    while let Some(done) = calls.join_next().await {
        flatten(done)?;
    }
    if shutdown.is_cancelled() {
        return Err(DemoError::Joiner("interrupted".into()));
    }
    Ok(traffic)
}

fn flatten(done: Result<Result<(), DemoError>, tokio::task::JoinError>) -> Result<(), DemoError> {
    match done {
        Ok(r) => r,
        Err(e) => Err(DemoError::Joiner(format!("a traffic task failed: {e}"))),
    }
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// How long the demo waits for the joiner's next row before it gives up.
const STALL_LIMIT: Duration = Duration::from_secs(60);

/// Polls `poll` (rows written so far, and whether to stop waiting) every second until the rows
/// reach `expected`, it says stop, or the rows have not grown for `stall`: a slow machine or a
/// large run takes as long as it needs, and only a joiner that stopped writing is given up on.
/// The rows last seen.
async fn wait_for_rows(
    expected: u64,
    stall: Duration,
    mut poll: impl FnMut() -> Result<(u64, bool), DemoError>,
) -> Result<u64, DemoError> {
    let (mut rows, mut stop) = poll()?;
    let mut grew = tokio::time::Instant::now();
    while rows < expected && !stop && grew.elapsed() <= stall {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = rows;
        (rows, stop) = poll()?;
        if rows > before {
            grew = tokio::time::Instant::now();
        }
    }
    Ok(rows)
}

/// Rows and files the joiner has committed: visible Parquet files only (not pending ones, not
/// the late area, not the joiner's own state).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counted {
    /// Rows.
    pub rows: u64,
    /// Files.
    pub files: u64,
}

/// Counts the committed rows under `dataset`.
pub fn count_rows(dataset: &Path) -> Result<Counted, DemoError> {
    let mut counted = Counted::default();
    let mut stack = vec![dataset.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.starts_with('_') || name == "late" {
                continue;
            }
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".parquet") {
                let file = std::fs::File::open(&path).map_err(io(&path))?;
                let reader =
                    parquet::file::reader::SerializedFileReader::new(file).map_err(|e| {
                        DemoError::Offline {
                            path: path.clone(),
                            message: e.to_string(),
                        }
                    })?;
                use parquet::file::reader::FileReader as _;
                counted.rows += reader.metadata().file_metadata().num_rows() as u64;
                counted.files += 1;
            }
        }
    }
    Ok(counted)
}

/// The offline pipeline's training table for the impressed candidates: keyed like the served
/// rows, with its own types (item ids as integers, prices in the catalog's f64) and its bugs.
fn write_offline(
    path: &Path,
    world: &World,
    impressed: &[(String, u64, i64)],
) -> Result<(), DemoError> {
    use arrow_array::{ArrayRef, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray};
    let err = |message: String| DemoError::Offline {
        path: path.to_owned(),
        message,
    };
    let mut columns: BTreeMap<&str, ArrayRef> = BTreeMap::new();
    columns.insert(
        "request_id",
        Arc::new(StringArray::from_iter_values(
            impressed.iter().map(|(r, _, _)| r.as_str()),
        )),
    );
    columns.insert(
        "item_id",
        Arc::new(Int64Array::from_iter_values(
            impressed.iter().map(|&(_, _, i)| i),
        )),
    );
    columns.insert(
        "user_locale",
        Arc::new(StringArray::from_iter_values(
            impressed
                .iter()
                .map(|&(_, u, _)| world::offline::locale(world, u)),
        )),
    );
    columns.insert(
        "user_device",
        Arc::new(StringArray::from_iter_values(
            impressed
                .iter()
                .map(|&(_, u, _)| world::offline::device(world, u)),
        )),
    );
    columns.insert(
        "user_age",
        Arc::new(Int64Array::from_iter_values(
            impressed.iter().map(|&(_, u, _)| world.age(u)),
        )),
    );
    columns.insert(
        "item_category",
        Arc::new(StringArray::from_iter_values(
            impressed.iter().map(|&(_, _, i)| world.category(i)),
        )),
    );
    columns.insert(
        "item_price",
        Arc::new(Float64Array::from_iter_values(
            impressed.iter().map(|&(_, _, i)| world.price(i)),
        )),
    );
    columns.insert(
        "item_popularity",
        Arc::new(Float32Array::from_iter_values(
            impressed
                .iter()
                .map(|&(_, _, i)| world::offline::popularity(world, i)),
        )),
    );
    let mut embeddings =
        arrow_array::builder::ListBuilder::new(arrow_array::builder::Float32Builder::new());
    for &(_, _, item) in impressed {
        embeddings.values().append_slice(&world.embedding(item));
        embeddings.append(true);
    }
    columns.insert("item_embedding", Arc::new(embeddings.finish()));
    let order = [
        "request_id",
        "item_id",
        "user_locale",
        "user_device",
        "user_age",
        "item_category",
        "item_price",
        "item_popularity",
        "item_embedding",
    ];
    let batch = RecordBatch::try_from_iter(
        order
            .iter()
            .filter_map(|name| columns.remove(name).map(|c| (*name, c))),
    )
    .map_err(|e| err(e.to_string()))?;
    let file = std::fs::File::create(path).map_err(io(path))?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None)
        .map_err(|e| err(e.to_string()))?;
    writer.write(&batch).map_err(|e| err(e.to_string()))?;
    writer.close().map_err(|e| err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `wait_for_rows` over a sequence of counts, one per poll; the rows it returned and the
    /// (paused) time it took.
    async fn wait(counts: &[u64], expected: u64, stop_at: Option<usize>) -> (u64, Duration) {
        let started = tokio::time::Instant::now();
        let mut polls = 0;
        let rows = wait_for_rows(expected, Duration::from_secs(60), || {
            let rows = counts[polls.min(counts.len() - 1)];
            polls += 1;
            Ok((rows, stop_at.is_some_and(|s| polls > s)))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        (rows, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_joiner_is_waited_for_as_long_as_its_rows_grow() {
        // One new row every 50 s: 200 s in all, far past the minute, never a minute without one.
        let counts: Vec<u64> = (0..=200).map(|s| s / 50).collect();
        let (rows, took) = wait(&counts, 4, None).await;
        assert_eq!(rows, 4);
        assert_eq!(took, Duration::from_secs(200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_joiner_that_stops_writing_is_given_up_on_after_a_minute() {
        let counts = [0, 1, 2, 3];
        let (rows, took) = wait(&counts, 10, None).await;
        assert_eq!(rows, 3);
        // The last new row came at 3 s; a minute later (and a poll) it gives up.
        assert_eq!(took, Duration::from_secs(64));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_joiner_or_a_shutdown_ends_the_wait_at_once() {
        let (rows, took) = wait(&[0, 1], 10, Some(1)).await;
        assert_eq!((rows, took), (1, Duration::from_secs(1)));
    }
}
