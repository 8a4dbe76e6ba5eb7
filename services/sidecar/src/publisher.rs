//! From captured calls to Kafka records, off the inference path.
//!
//! The proxy hands each finished ModelInfer call to [`Publisher::submit`], which never blocks:
//! the call goes into a bounded queue, or is dropped and counted when the queue is full.
//! Publisher threads decode the call, apply the allow list, sampling and the adaptive fraction,
//! build the FeatureLog and hand it to librdkafka, whose own queue is bounded too (a full queue
//! is another counted drop). Delivery reports feed the [`AdaptiveController`], which lowers the
//! fraction of calls logged while deliveries fail and raises it again when they succeed, so a
//! sick broker costs neither memory nor a storm of retries.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use featurelog_kafka::KafkaConfig;
use featurelog_schemas::inference::ModelInferResponse;
use prost::Message;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, PurgeConfig};
use tokio_util::sync::CancellationToken;

use crate::SidecarError;
use crate::adaptive::{AdaptiveController, Interval};
use crate::allowlist::{AllowList, AllowListHandle};
use crate::config::PublishConfig;
use crate::dead_letter::{Budget, Rejected};
use crate::delivery::{
    DeliveryContext, Failure, Outage, Produced, Sent, Throttle, Window, classify,
};
use crate::direct::PlanCache;
use crate::extract::{CallContext, extract};
use crate::metrics::Metrics;
use crate::record_limit::RecordLimit;
use featurelog_schemas::sampling;

/// librdkafka settings the sidecar starts from; `[kafka.properties]` overrides any of them.
pub const PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("compression.type", "zstd"),
    // zstd's fastest level: compressing was the largest cost of the producer's thread at the
    // default level 3 (perf), for a few percent more bytes on the wire.
    ("compression.level", "1"),
    // Records are not latency-sensitive; larger batches cut per-batch costs (a zstd context
    // reset, a request) that dominated the producer's CPU at 5 ms.
    ("linger.ms", "100"),
    // The Java client's default partitioner hashes keys with murmur2. Apps that publish
    // impressions keyed by request id with a Java client then land a request's impressions on
    // the same partition number as its features (given equal partition counts).
    ("partitioner", "murmur2_random"),
    ("message.timeout.ms", "30000"),
    ("queue.buffering.max.messages", "100000"),
    ("queue.buffering.max.kbytes", "65536"),
    // Feeds the wire-bytes gauges; parsing one JSON document every 5 s costs nothing.
    ("statistics.interval.ms", "5000"),
];

/// One finished ModelInfer call, as the proxy captured it.
#[derive(Debug)]
pub struct CapturedCall {
    /// The request body (gRPC-framed), in the chunks it arrived in.
    pub request: Vec<Bytes>,
    /// The response body (gRPC-framed).
    pub response: Vec<Bytes>,
    /// `grpc-encoding` of the request and the response, if any.
    pub request_encoding: Option<String>,
    /// See `request_encoding`.
    pub response_encoding: Option<String>,
    /// The id to use when the request carries none in its `id` field: the `x-request-id`
    /// metadata, or the one the proxy generated and returned.
    pub fallback_request_id: String,
    /// When the call arrived.
    pub served_at: SystemTime,
    /// The request headers some allow-list rule logs ([`Publisher::capture_headers`]).
    pub headers: Vec<(String, String)>,
    /// Set for a call of the REST binding: the bodies are then HTTP bodies (the protocol's JSON,
    /// with the binary extension's data after it) instead of gRPC-framed messages, and the
    /// encodings are `Content-Encoding`s.
    pub rest: Option<RestCall>,
}

/// What a REST call says outside its bodies.
#[derive(Debug, Clone)]
pub struct RestCall {
    /// The model, from the URL path.
    pub model: String,
    /// Its version, from the URL path; empty when the path names none.
    pub version: String,
    /// `Inference-Header-Content-Length` of the request: its JSON part's length.
    pub request_header_length: Option<usize>,
    /// The same of the response.
    pub response_header_length: Option<usize>,
}

/// A call in the queue, with the allow list in force when it was made: a reload while it waits
/// does not change what is logged of it (nor the version its record carries).
struct Queued {
    call: CapturedCall,
    allow_list: Arc<AllowList>,
    /// The call's body bytes, as counted in `Shared::queue_bytes`.
    bytes: u64,
}

struct Shared {
    metrics: Arc<Metrics>,
    allow_list: AllowListHandle,
    producer: BaseProducer<DeliveryContext>,
    topic: String,
    instance: String,
    max_message_bytes: usize,
    window: Arc<Window>,
    /// A run of broker failures, logged as one (shared with the producer's context).
    outage: Arc<Outage>,
    /// The largest record the topic takes.
    record_limit: Arc<RecordLimit>,
    /// The adaptive fraction, as f64 bits.
    fraction: AtomicU64,
    closing: AtomicBool,
    queue_len: AtomicU64,
    /// Body bytes of the queued calls, held until a publisher thread takes them.
    queue_bytes: AtomicU64,
    queue_max_bytes: u64,
    /// Calls that may still be handed over (see [`CallInFlight`]).
    calls_in_flight: AtomicU64,
    /// `publish.dead-letter-topic`, unless empty.
    dead_letter_topic: Option<String>,
    /// `publish.dead-letters-per-second`.
    dead_letter_budget: Mutex<Budget>,
    /// Set while the brokers say the dead-letter topic does not exist ([`watch_dead_letters`]):
    /// a record for a missing topic would wait in librdkafka's queue for the topic's metadata
    /// (30 s), and a shutdown's flush with it.
    dead_letter_topic_missing: AtomicBool,
}

impl Shared {
    /// Counts a call that was not logged because of what its caller sent, and describes it on
    /// the dead-letter topic (within the budget). Never waits: a full producer queue counts
    /// the dead letter as failed.
    fn reject(&self, rejected: Rejected) {
        self.metrics.drop_call(rejected.reason);
        tracing::debug!(reason = rejected.reason, model = %rejected.model, request_id = %rejected.request_id, "not logged: {}", rejected.detail);
        self.dead_letter(&rejected);
    }

    /// Describes a call that was not logged (and counted already) on the dead-letter topic,
    /// within the budget.
    fn dead_letter(&self, rejected: &Rejected) {
        let Some(topic) = &self.dead_letter_topic else {
            return;
        };
        let admitted = self
            .dead_letter_budget
            .lock()
            .is_ok_and(|mut b| b.take(Instant::now()));
        if !admitted {
            return self.metrics.dead_letter("rate_limited");
        }
        if self.dead_letter_topic_missing.load(Ordering::Relaxed) {
            return self.metrics.dead_letter("no_topic");
        }
        let payload = rejected.to_json(&self.instance, &self.allow_list.peek().version);
        let source = format!("sidecar/{}", self.instance);
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: crate::dead_letter::ERROR_HEADER,
                value: Some(rejected.reason),
            })
            .insert(Header {
                key: crate::dead_letter::SOURCE_HEADER,
                value: Some(&source),
            });
        let mut record = BaseRecord::with_opaque_to(topic, Box::new(Sent::DeadLetter))
            .payload(&payload)
            .headers(headers);
        if !rejected.request_id.is_empty() {
            record = record.key(rejected.request_id.as_bytes());
        }
        if let Err((err, _)) = self.producer.send(record) {
            tracing::debug!(%err, "dead letter not produced");
            self.metrics.dead_letter("failed");
        }
    }
}

/// A proxied call that may still reach [`Publisher::submit`], held by the call until it is
/// handed over or given up. A call is handed over when its response body is dropped, in the
/// server's task for the call, a moment after the caller has received its last frame; at a
/// shutdown the connection can be done first. [`Publisher::shutdown`] waits for these
/// (briefly), so that a call whose caller got its answer is not counted as `shutting_down`.
pub struct CallInFlight(Arc<Shared>);

impl Drop for CallInFlight {
    fn drop(&mut self) {
        self.0.calls_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The queue, the publisher threads and the producer.
pub struct Publisher {
    tx: SyncSender<Queued>,
    rx: Arc<Mutex<Receiver<Queued>>>,
    shared: Arc<Shared>,
    /// Taken by [`Publisher::shutdown`].
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Publisher {
    /// Creates the producer and starts the threads and the controller (which stops on `shutdown`).
    pub fn start(
        kafka: &KafkaConfig,
        config: &PublishConfig,
        allow_list: AllowListHandle,
        metrics: Arc<Metrics>,
        instance: String,
        shutdown: CancellationToken,
    ) -> Result<Self, SidecarError> {
        let window = Arc::new(Window::default());
        let outage = Arc::new(Outage::default());
        let mut client = kafka.client_config(PRODUCER_DEFAULTS);
        // librdkafka refuses records over its message.max.bytes (1,000,000 unless set) before
        // any broker sees them; the topic's limit, learned below, is the one that matters.
        let producer_max = match client.get("message.max.bytes") {
            Some(set) => set.parse::<usize>().unwrap_or(usize::MAX),
            None => {
                let max = config
                    .max_message_bytes
                    .saturating_add(crate::record_limit::BATCH_OVERHEAD)
                    .min(1_000_000_000);
                client.set("message.max.bytes", max.to_string());
                max
            }
        };
        let record_limit = Arc::new(RecordLimit::new(config.max_message_bytes.min(producer_max)));
        let producer: BaseProducer<DeliveryContext> = client
            .create_with_context(DeliveryContext {
                metrics: metrics.clone(),
                window: window.clone(),
                outage: outage.clone(),
                refused: Arc::default(),
                dead_letter_failed: AtomicBool::new(false),
                refused_log: Throttle::default(),
            })
            .map_err(|source| SidecarError::Producer {
                topic: config.topic.clone(),
                source,
            })?;
        metrics
            .record_limit_bytes
            .set(record_limit.effective() as i64);
        tokio::spawn(crate::record_limit::watch(
            kafka.clone(),
            config.topic.clone(),
            record_limit.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        let shared = Arc::new(Shared {
            metrics,
            allow_list,
            producer,
            topic: config.topic.clone(),
            instance,
            max_message_bytes: config.max_message_bytes,
            window,
            outage,
            record_limit,
            fraction: AtomicU64::new(1.0f64.to_bits()),
            closing: AtomicBool::new(false),
            calls_in_flight: AtomicU64::new(0),
            queue_len: AtomicU64::new(0),
            queue_bytes: AtomicU64::new(0),
            queue_max_bytes: config.queue_max_bytes as u64,
            dead_letter_topic: Some(config.dead_letter_topic.clone()).filter(|t| !t.is_empty()),
            dead_letter_budget: Mutex::new(Budget::new(config.dead_letters_per_second)),
            dead_letter_topic_missing: AtomicBool::new(false),
        });
        let (tx, rx) = std::sync::mpsc::sync_channel(config.queue_capacity);
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::with_capacity(config.workers);
        for i in 0..config.workers {
            let (shared, rx) = (shared.clone(), rx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("featurelog-publish-{i}"))
                .spawn(move || worker(&shared, &rx))
                .map_err(SidecarError::Thread)?;
            threads.push(thread);
        }
        tokio::spawn(watch_dead_letters(shared.clone(), shutdown.clone()));
        tokio::spawn(control(
            shared.clone(),
            AdaptiveController::new(config.adaptive.clone()),
            config.adaptive.interval,
            shutdown,
        ));
        Ok(Self {
            tx,
            rx,
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// The request headers (gRPC metadata) that some rule of the allow list in force logs
    /// (`headers`), as (lower-case name, value): all a call keeps of its headers for the
    /// publisher. Nothing is looked up when no rule names a header.
    pub fn capture_headers(&self, headers: &http::HeaderMap) -> Vec<(String, String)> {
        let list = self.shared.allow_list.peek();
        let mut out: Vec<(String, String)> = Vec::new();
        for name in list.models.iter().flat_map(|r| &r.headers) {
            let value = headers.get(name.as_str()).and_then(|v| v.to_str().ok());
            if let Some(value) = value {
                if !out.iter().any(|(n, _)| n == name) {
                    out.push((name.clone(), value.to_owned()));
                }
            }
        }
        out
    }

    /// Queues a call for logging, or drops and counts it when the queue is full (by calls or
    /// by bytes) or the publisher is shutting down. Never waits.
    pub fn submit(&self, mut call: CapturedCall) {
        let shared = &self.shared;
        if shared.closing.load(Ordering::Relaxed) {
            return shared.metrics.drop_call("shutting_down");
        }
        let allow_list = shared.allow_list.current();
        // Decided here when the request says at once which model it is for, so that calls that
        // will not be logged neither wait in the queue nor hold their bodies in it.
        let named = match &call.rest {
            Some(rest) => Some((rest.model.as_str(), rest.version.as_str())),
            None => request_model(&call.request),
        };
        if let Some((model, version)) = named {
            match allow_list.rule(model, version) {
                None => return shared.metrics.skip_call("not_allow_listed"),
                Some(rule) if rule.outputs.is_empty() && rule.top_k.is_none() => {
                    call.response = Vec::new();
                }
                Some(_) => {}
            }
        }
        let bytes = body_bytes(&call);
        // Reserve the bytes first, so that concurrent submits cannot together pass the bound.
        let before = shared.queue_bytes.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > shared.queue_max_bytes {
            shared.queue_bytes.fetch_sub(bytes, Ordering::Relaxed);
            return shared.metrics.drop_call("queue_full");
        }
        let queued = Queued {
            call,
            allow_list,
            bytes,
        };
        match self.tx.try_send(queued) {
            Ok(()) => {
                let depth = shared.queue_len.fetch_add(1, Ordering::Relaxed) + 1;
                shared.metrics.queue_depth.set(depth as i64);
                shared.metrics.queue_bytes.set((before + bytes) as i64);
            }
            Err(err) => {
                shared.queue_bytes.fetch_sub(bytes, Ordering::Relaxed);
                shared.metrics.drop_call(match err {
                    TrySendError::Full(_) => "queue_full",
                    TrySendError::Disconnected(_) => "shutting_down",
                });
            }
        }
    }

    /// `publish.max-message-bytes`.
    pub(crate) fn max_message_bytes(&self) -> usize {
        self.shared.max_message_bytes
    }

    /// Counts a call that the proxy found it cannot log because of what its caller sent, and
    /// describes it on the dead-letter topic, unless it names a model the allow list does not
    /// log (which is no loss).
    pub(crate) fn reject(&self, rejected: Rejected) {
        if !rejected.model.is_empty()
            && self
                .shared
                .allow_list
                .peek()
                .rule(&rejected.model, &rejected.model_version)
                .is_none()
        {
            return self.shared.metrics.skip_call("not_allow_listed");
        }
        self.shared.reject(rejected);
    }

    /// Counts a call as in flight until the guard is dropped (see [`CallInFlight`]).
    pub fn call_in_flight(&self) -> CallInFlight {
        self.shared.calls_in_flight.fetch_add(1, Ordering::SeqCst);
        CallInFlight(self.shared.clone())
    }

    /// Stops taking calls, drains the queue, then waits up to `timeout` for Kafka to acknowledge
    /// what is in flight. Returns how many records were still unacknowledged when it gave up;
    /// those are purged and counted as dropped (`delivery_failed`) before it returns.
    ///
    /// Takes `&self`: connections that outlived the proxy's drain still hold the publisher, and
    /// what is already queued must be flushed all the same. Calls they submit from now on are
    /// counted as `shutting_down`.
    pub async fn shutdown(&self, timeout: Duration) -> usize {
        // Calls answered just before the proxy's drain ended may not be handed over yet (see
        // `CallInFlight`): that takes a moment, not the timeout, unless a connection outlived
        // the drain, whose calls then count as `shutting_down` after this wait.
        let settle = Instant::now() + (timeout / 4).min(Duration::from_secs(1));
        while self.shared.calls_in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < settle {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.shared.closing.store(true, Ordering::SeqCst);
        let threads = self
            .threads
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let deadline = Instant::now() + timeout;
        let (shared, rx) = (self.shared.clone(), self.rx.clone());
        let joined = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
            // A submit that raced with `closing` may have queued a call after the threads'
            // last look: count it rather than lose it silently.
            if let Ok(rx) = rx.lock() {
                while let Ok(queued) = rx.try_recv() {
                    shared
                        .queue_bytes
                        .fetch_sub(queued.bytes, Ordering::Relaxed);
                    shared.metrics.drop_call("shutting_down");
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(err) = shared.producer.flush(left) {
                tracing::warn!(%err, "producer flush did not finish");
            }
            let unacknowledged = shared.producer.in_flight_count().max(0) as usize;
            if unacknowledged > 0 {
                // Given up: purged now, their delivery reports count each as dropped
                // (`delivery_failed`) before the shutdown returns, rather than whenever the
                // producer happens to be dropped, which a process that exits never sees.
                shared
                    .producer
                    .purge(PurgeConfig::default().queue().inflight());
                let _ = shared.producer.flush(PURGE_REPORTS);
            }
            unacknowledged
        })
        .await;
        joined.unwrap_or(0)
    }
}

/// How long a shutdown serves the delivery reports of the records it purged: they are ready at
/// once, with no broker to wait for.
const PURGE_REPORTS: Duration = Duration::from_millis(500);

/// How often a missing dead-letter topic is looked for again.
const DEAD_LETTER_TOPIC_CHECK: Duration = Duration::from_secs(30);

/// Asks the brokers whether the dead-letter topic exists, at start and every
/// [`DEAD_LETTER_TOPIC_CHECK`] until it does: while it does not, dead letters are counted
/// (`no_topic`) instead of produced. A broker that does not answer changes nothing.
async fn watch_dead_letters(shared: Arc<Shared>, shutdown: CancellationToken) {
    let Some(topic) = shared.dead_letter_topic.clone() else {
        return;
    };
    let mut warned = false;
    loop {
        let Some(answer) = ask_topic(&shared, &topic, Duration::from_secs(10), &shutdown).await
        else {
            return;
        };
        match answer {
            Some(true) => {
                shared
                    .dead_letter_topic_missing
                    .store(false, Ordering::Relaxed);
                shared.metrics.dead_letter_topic_missing.set(0);
                if warned {
                    tracing::info!(%topic, "the dead-letter topic exists now: dead letters are sent");
                }
                return;
            }
            Some(false) => {
                shared
                    .dead_letter_topic_missing
                    .store(true, Ordering::Relaxed);
                shared.metrics.dead_letter_topic_missing.set(1);
                if !warned {
                    tracing::warn!(
                        %topic,
                        "the dead-letter topic does not exist: dead letters are only counted (featurelog_sidecar_dead_letters_total{{outcome=\"no_topic\"}}) until it does. The joiner creates it at start-up; or create it, or set publish.dead-letter-topic = \"\""
                    );
                    warned = true;
                }
            }
            None => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(DEAD_LETTER_TOPIC_CHECK) => {}
        }
    }
}

/// Asks the brokers for `topic`'s metadata, on a thread of its own rather than the runtime's
/// blocking pool: a shutdown must not wait for a metadata request to a broker that does not
/// answer. `None` on shutdown (or when no thread can be had); else `Some` of the answer:
/// whether the topic exists with partitions, `None` when the brokers did not answer.
async fn ask_topic(
    shared: &Arc<Shared>,
    topic: &str,
    timeout: Duration,
    shutdown: &CancellationToken,
) -> Option<Option<bool>> {
    let (asking, name) = (shared.clone(), topic.to_owned());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("featurelog-metadata".into())
        .spawn(move || {
            let metadata = asking
                .producer
                .client()
                .fetch_metadata(Some(&name), timeout);
            let exists = metadata.ok().and_then(|m| {
                let found = m.topics().iter().find(|t| t.name() == name)?;
                Some(found.error().is_none() && !found.partitions().is_empty())
            });
            let _ = tx.send(exists);
        })
        .ok()?;
    tokio::select! {
        _ = shutdown.cancelled() => None,
        answer = rx => Some(answer.ok().flatten()),
    }
}

async fn control(
    shared: Arc<Shared>,
    mut controller: AdaptiveController,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let delivered = shared.window.delivered.swap(0, Ordering::Relaxed);
        let failed = shared.window.failed.swap(0, Ordering::Relaxed);
        // Idle and shedding: nothing is delivered to say the brokers are back, so ask them.
        let mut brokers_answer = false;
        if controller.wants_probe(delivered, failed) {
            let timeout = interval.clamp(Duration::from_millis(100), Duration::from_secs(5));
            match ask_topic(&shared, &shared.topic, timeout, &shutdown).await {
                None => return,
                Some(answer) => brokers_answer = answer.is_some(),
            }
            if brokers_answer {
                shared.outage.healthy();
            }
        }
        let before = controller.fraction();
        let after = controller.observe(Interval {
            delivered,
            failed,
            brokers_answer,
        });
        shared.fraction.store(after.to_bits(), Ordering::Relaxed);
        shared.metrics.logged_fraction.set(after);
        shared
            .metrics
            .producer_in_flight
            .set(i64::from(shared.producer.in_flight_count()));
        if (after - before).abs() > f64::EPSILON {
            tracing::info!(
                delivered,
                failed,
                fraction = after,
                "adaptive logging fraction changed"
            );
        }
    }
}

/// How long a publisher thread sleeps when the queue is empty. A call waits at most this long
/// before it is worked on; in exchange no thread is ever blocked on the queue, so handing a call
/// over costs the proxy no wake-up system call, and each wake-up here serves a whole batch.
const DRAIN_INTERVAL: Duration = Duration::from_millis(50);

/// The largest record buffer a publisher thread keeps between calls.
const RECORD_BUFFER_KEPT: usize = 1 << 20;

/// Calls taken from the queue at a time (under its lock).
const BATCH: usize = 256;

/// What a publisher thread keeps from one call to the next.
#[derive(Default)]
struct Local {
    /// For joining a body's chunks (see [`concat`]).
    scratch: BytesMut,
    /// The fast path's plans by request layout.
    plans: PlanCache,
    /// The encoded record; librdkafka copies it, so one buffer serves every call.
    record: Vec<u8>,
    /// REST binary-data request headers read before.
    headers: crate::rest_json::HeaderCache,
}

fn worker(shared: &Shared, rx: &Mutex<Receiver<Queued>>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut local = Local::default();
    loop {
        let mut disconnected = false;
        match rx.lock() {
            Ok(rx) => {
                while batch.len() < BATCH {
                    match rx.try_recv() {
                        Ok(call) => batch.push(call),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => {
                            disconnected = true;
                            break;
                        }
                    }
                }
            }
            Err(_) => return,
        }
        let worked = !batch.is_empty();
        for call in batch.drain(..) {
            let depth = shared
                .queue_len
                .fetch_sub(1, Ordering::Relaxed)
                .saturating_sub(1);
            shared.metrics.queue_depth.set(depth as i64);
            let bytes = call.bytes;
            publish(shared, call, &mut local);
            // Counted until the call's bodies are let go (publish consumes them).
            let left = shared
                .queue_bytes
                .fetch_sub(bytes, Ordering::Relaxed)
                .saturating_sub(bytes);
            shared.metrics.queue_bytes.set(left as i64);
        }
        // The publisher threads also serve librdkafka's delivery reports and statistics
        // (BaseProducer rather than ThreadedProducer: no extra thread waking on its own). Each
        // poll serves at most one event; a few per round keep up with a batch's reports.
        for _ in 0..4 {
            shared.producer.poll(Duration::ZERO);
        }
        dead_letter_refused(shared);
        if !worked {
            if disconnected || shared.closing.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(DRAIN_INTERVAL);
        }
    }
}

/// Dead-letters the records the producer refused (counted when they were refused): a delivery
/// report cannot produce, so they wait for a publisher thread.
fn dead_letter_refused(shared: &Shared) {
    let refused = match shared.producer.context().refused.lock() {
        Ok(mut refused) if !refused.is_empty() => std::mem::take(&mut *refused),
        _ => return,
    };
    for rejected in &refused {
        shared.dead_letter(rejected);
    }
}

/// The model name and version of an uncompressed request whose message starts with them, as
/// encoders write fields in order, read from its first chunk (nearly always the whole body);
/// `None` when it does not, or when the chunk ends before the message does and right after
/// those fields (the next chunk may name the version), and the publisher thread's full decode
/// decides. A message that names another model again further on (no encoder does) is judged
/// by its first name here.
pub(crate) fn request_model(chunks: &[Bytes]) -> Option<(&str, &str)> {
    let (0, len, rest) = crate::proxy::frame_head(chunks)? else {
        return None;
    };
    // Only the message's own bytes.
    let whole = rest.len() >= len;
    let mut rest = rest.get(..len).unwrap_or(rest);
    let (mut name, mut version) = (None, "");
    // model_name (field 1) and model_version (field 2), both length-delimited.
    while let Some(&key @ (0x0a | 0x12)) = rest.first() {
        rest = &rest[1..];
        let len = usize::try_from(prost::encoding::decode_varint(&mut rest).ok()?).ok()?;
        let text = std::str::from_utf8(rest.get(..len)?).ok()?;
        rest = &rest[len..];
        if key == 0x0a {
            name = Some(text);
        } else {
            version = text;
        }
    }
    if rest.is_empty() && !whole {
        return None;
    }
    Some((name?, version))
}

/// The bytes of a call's request and response bodies.
fn body_bytes(call: &CapturedCall) -> u64 {
    call.request
        .iter()
        .chain(&call.response)
        .map(|c| c.len() as u64)
        .sum()
}

/// Why a gRPC body could not be turned into one message.
#[derive(Debug)]
pub(crate) enum Unframe {
    Malformed,
    TooLarge,
    Compression,
}

impl Unframe {
    /// The drop reason and what was wrong, for a body of `binding` (`grpc`, `rest`) in
    /// `encoding`, read up to `limit` bytes.
    pub(crate) fn rejected(
        &self,
        binding: &'static str,
        encoding: Option<&str>,
        limit: usize,
    ) -> Rejected {
        let rest = binding == "rest";
        let (reason, detail) = match self {
            Unframe::Malformed if rest => (
                "malformed_json",
                format!(
                    "the body does not inflate as its Content-Encoding {encoding:?} says (or has bytes after the compressed stream)"
                ),
            ),
            Unframe::Malformed => (
                "malformed_grpc_frame",
                "the body is not gRPC's length-prefixed messages, or a message's gzip does not inflate (or has bytes after it)".to_owned(),
            ),
            Unframe::TooLarge => (
                "too_large",
                format!("a body larger than publish.max-message-bytes ({limit} bytes) once inflated"),
            ),
            Unframe::Compression if rest => (
                "unsupported_compression",
                format!("Content-Encoding {encoding:?} is not read (identity, gzip and deflate are)"),
            ),
            Unframe::Compression => (
                "unsupported_compression",
                format!("grpc-encoding {encoding:?} is not read (identity and gzip are)"),
            ),
        };
        Rejected::new(reason, binding, detail)
    }
}

/// The chunks as one buffer. `scratch` is the thread's reusable buffer: once the previous
/// call's slices are dropped, `reserve` reclaims it, so a large request does not cost a fresh
/// allocation (and its page faults: perf showed them at a tenth of the publisher's time).
fn concat(chunks: Vec<Bytes>, scratch: &mut BytesMut) -> Bytes {
    if chunks.len() == 1 {
        return chunks.into_iter().next().unwrap_or_default();
    }
    scratch.clear();
    scratch.reserve(chunks.iter().map(Bytes::len).sum());
    for c in chunks {
        scratch.extend_from_slice(&c);
    }
    scratch.split().freeze()
}

/// The one message of a unary gRPC body: a 5-byte prefix (compressed flag, big-endian length)
/// and the message, gzip-inflated when flagged.
pub(crate) fn unframe(
    chunks: Vec<Bytes>,
    encoding: Option<&str>,
    limit: usize,
    scratch: &mut BytesMut,
) -> Result<Bytes, Unframe> {
    let mut body = concat(chunks, scratch);
    if body.len() < 5 {
        return Err(Unframe::Malformed);
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if body.len() != len {
        return Err(Unframe::Malformed);
    }
    match (compressed, encoding) {
        (0, _) => Ok(body),
        (1, Some("gzip")) => {
            let mut out = Vec::new();
            let mut decoder = flate2::bufread::GzDecoder::new(&body[..]).take(limit as u64 + 1);
            decoder
                .read_to_end(&mut out)
                .map_err(|_| Unframe::Malformed)?;
            if out.len() > limit {
                return Err(Unframe::TooLarge);
            }
            // Bytes after the first gzip member: some servers read them as more of the message
            // (a second member), some refuse the call, so what the model read is unknown.
            if !decoder.into_inner().into_inner().is_empty() {
                return Err(Unframe::Malformed);
            }
            Ok(Bytes::from(out))
        }
        _ => Err(Unframe::Compression),
    }
}

/// An HTTP body as the model server read it: inflated per its `Content-Encoding` (gzip and
/// deflate, as Triton's HTTP clients send), at most `limit` bytes.
pub(crate) fn inflate_http(
    chunks: Vec<Bytes>,
    encoding: Option<&str>,
    limit: usize,
    scratch: &mut BytesMut,
) -> Result<Bytes, Unframe> {
    let body = concat(chunks, scratch);
    let mut out = Vec::new();
    // Whether the compressed stream is all of the body.
    let read = match encoding.map(str::trim) {
        None | Some("" | "identity") => return Ok(body),
        Some(e) if e.eq_ignore_ascii_case("gzip") => {
            let mut decoder = flate2::bufread::GzDecoder::new(&body[..]).take(limit as u64 + 1);
            (decoder.read_to_end(&mut out)).map(|_| decoder.into_inner().into_inner().is_empty())
        }
        Some(e) if e.eq_ignore_ascii_case("deflate") => {
            let mut decoder = flate2::bufread::ZlibDecoder::new(&body[..]).take(limit as u64 + 1);
            (decoder.read_to_end(&mut out)).map(|_| decoder.into_inner().into_inner().is_empty())
        }
        Some(_) => return Err(Unframe::Compression),
    };
    let whole = read.map_err(|_| Unframe::Malformed)?;
    if out.len() > limit {
        return Err(Unframe::TooLarge);
    }
    // Bytes after the first gzip member or the zlib stream: as for a gRPC message (`unframe`),
    // servers differ on them (more members, or an error), so what the model read is unknown.
    if !whole {
        return Err(Unframe::Malformed);
    }
    Ok(Bytes::from(out))
}

/// The id a call of `rule` is logged under (its own, else `fallback`), if it is logged: the
/// allow list's sample, then what the adaptive controller lets through. Counts the ones that
/// are not.
fn admit(
    shared: &Shared,
    rule: &crate::allowlist::ModelRule,
    own: String,
    fallback: String,
) -> Option<String> {
    // The request's own id, else the one the proxy decided on (header or generated).
    let request_id = if own.is_empty() { fallback } else { own };
    if !sampling::sampled(&request_id, rule.sample_rate) {
        shared.metrics.skip_call("not_sampled");
        return None;
    }
    let fraction = f64::from_bits(shared.fraction.load(Ordering::Relaxed));
    // A different hash input than sampling, so shedding does not select the same requests.
    if fraction < 1.0 && !sampling::sampled(&format!("shed:{request_id}"), fraction) {
        shared.metrics.drop_call("adaptive_shed");
        return None;
    }
    Some(request_id)
}

/// A REST call: its JSON (and binary data) read into the gRPC messages, then the same
/// extraction as a gRPC call's decoded path.
fn publish_rest(
    shared: &Shared,
    call: CapturedCall,
    rest: RestCall,
    list: &Arc<AllowList>,
    local: &mut Local,
) {
    let metrics = &shared.metrics;
    let limit = shared.max_message_bytes;
    let request_size: usize = call.request.iter().map(Bytes::len).sum();
    let inflated = |chunks, encoding: &Option<String>, scratch: &mut BytesMut| {
        inflate_http(chunks, encoding.as_deref(), limit, scratch)
    };
    // What a dead letter says of this call, besides what went wrong.
    let about = |rejected: Rejected, request_id: &str| {
        rejected
            .model(&rest.model, &rest.version)
            .call(request_id, request_size, call.served_at)
    };
    let body = match inflated(call.request, &call.request_encoding, &mut local.scratch) {
        Ok(b) => b,
        Err(e) => {
            let rejected = e.rejected("rest", call.request_encoding.as_deref(), limit);
            return shared.reject(about(rejected, &call.fallback_request_id));
        }
    };
    let Some(rule) = list.rule(&rest.model, &rest.version) else {
        return metrics.skip_call("not_allow_listed");
    };
    // Only the tensors the rule logs are read, as the gRPC path decodes only those.
    let inputs = |name: &str| {
        rule.features.iter().any(|f| f == name) || rule.candidate_ids_input.as_deref() == Some(name)
    };
    let outputs = |name: &str| {
        rule.outputs.iter().any(|o| o == name) || rule.top_k.as_ref().is_some_and(|t| t.by == name)
    };
    let request = match crate::rest_json::request(
        &body,
        rest.request_header_length,
        &rest.model,
        &rest.version,
        &inputs,
        Some(&mut local.headers),
    ) {
        Ok(r) => r,
        Err(err) => {
            let rejected = Rejected::new(err.reason(), "rest", err.to_string());
            let id = body_id(&body, rest.request_header_length).unwrap_or(call.fallback_request_id);
            return shared.reject(about(rejected, &id));
        }
    };
    let Some(request_id) = admit(shared, rule, request.id.clone(), call.fallback_request_id) else {
        return;
    };
    let ctx = CallContext {
        request_id: &request_id,
        served_at: call.served_at,
        instance: &shared.instance,
        allow_list_version: &list.version,
        headers: &call.headers,
    };
    let of = RecordOf {
        model: &rule.name,
        request_id: &request_id,
        binding: "rest",
        request_size,
        served_at: call.served_at,
    };
    // The gRPC path's fast encoder, on the request as gRPC would have carried it (only the
    // rule's tensors, a few kB): the generic extraction below decodes every value into vectors
    // first, which cost the publisher more than reading the JSON.
    if let Ok(scanned) = crate::lazy::scan(Bytes::from(request.encode_to_vec())) {
        if produce_planned(shared, local, list, rule, scanned, ctx, of).is_none() {
            return;
        }
    }
    let response = if !rule.outputs.is_empty() || rule.top_k.is_some() {
        let read = inflated(call.response, &call.response_encoding, &mut BytesMut::new())
            .map_err(|e| {
                format!(
                    "the model server's response: {}",
                    e.rejected("rest", call.response_encoding.as_deref(), limit)
                        .detail
                )
            })
            .and_then(|body| {
                crate::rest_json::response(&body, rest.response_header_length, &outputs)
                    .map_err(|e| format!("the model server's response: {e}"))
            });
        match read {
            Ok(r) => Some(r),
            Err(detail) => {
                let rejected = Rejected::new("malformed_response", "rest", detail);
                return shared.reject(about(rejected, &request_id));
            }
        }
    } else {
        None
    };
    match extract(rule, &request, response.as_ref(), ctx) {
        Ok(record) => {
            count_missing(shared, rule, &record);
            produce(shared, of, &record.encode_to_vec(), record.row_count);
        }
        Err(err) => {
            let rejected = Rejected::new(err.reason(), "rest", err.to_string());
            shared.reject(about(rejected, &request_id));
        }
    }
}

/// The `id` of a REST request's JSON, read for a dead letter when the body as a whole could
/// not be: the id the app knows the call by, if it can be found.
fn body_id(body: &Bytes, header_length: Option<usize>) -> Option<String> {
    crate::rest_json::peek_id(body, header_length).filter(|id| !id.is_empty())
}

/// The fast path: the record encoded straight from the request's bytes by the rule's plan
/// (`direct`), and produced. Gives the request back when the plan does not apply (outputs,
/// top-k, encodings it does not take), for the general path.
fn produce_planned(
    shared: &Shared,
    local: &mut Local,
    list: &Arc<AllowList>,
    rule: &crate::allowlist::ModelRule,
    scanned: crate::lazy::Scanned,
    ctx: CallContext<'_>,
    of: RecordOf<'_>,
) -> Option<crate::lazy::Scanned> {
    let Some(plan) = local.plans.plan(list, rule, &scanned) else {
        return Some(scanned);
    };
    let record = &mut local.record;
    let Some(rows) = crate::direct::encode_planned(plan, rule, &scanned, ctx, record) else {
        return Some(scanned);
    };
    drop(scanned);
    for feature in plan.missing(rule) {
        shared.metrics.missing_feature(&rule.name, feature);
    }
    produce(shared, of, record, rows);
    // A rare huge record should not pin its memory for the thread's lifetime.
    if record.capacity() > RECORD_BUFFER_KEPT {
        *record = Vec::new();
    }
    None
}

fn publish(shared: &Shared, queued: Queued, local: &mut Local) {
    let Queued {
        mut call,
        allow_list: list,
        bytes: _,
    } = queued;
    if let Some(rest) = call.rest.take() {
        return publish_rest(shared, call, rest, &list, local);
    }
    let request_size: usize = call.request.iter().map(Bytes::len).sum();
    let limit = shared.max_message_bytes;
    // What a dead letter says of this call, besides what went wrong.
    let about = |rejected: Rejected, request_id: &str| {
        rejected.call(request_id, request_size, call.served_at)
    };
    // Its first chunk (a reference), so that a dead letter can name the model of a request
    // that does not decode.
    let first = call.request.first().cloned().unwrap_or_default();
    let named = || {
        request_model(std::slice::from_ref(&first))
            .map(|(m, v)| (m.to_owned(), v.to_owned()))
            .unwrap_or_default()
    };
    let unframed = unframe(
        call.request,
        call.request_encoding.as_deref(),
        limit,
        &mut local.scratch,
    );
    let request_bytes = match unframed {
        Ok(b) => b,
        Err(e) => {
            let (model, version) = named();
            let rejected = e.rejected("grpc", call.request_encoding.as_deref(), limit);
            return shared.reject(about(
                rejected.model(&model, &version),
                &call.fallback_request_id,
            ));
        }
    };
    // One pass over the request: the head picks the rule, the rest is decoded only if logged.
    let mut scanned = match crate::lazy::scan(request_bytes) {
        Ok(s) => s,
        Err(_) => {
            let (model, version) = named();
            let rejected = Rejected::new("malformed_protobuf", "grpc", MALFORMED_REQUEST);
            return shared.reject(about(
                rejected.model(&model, &version),
                &call.fallback_request_id,
            ));
        }
    };
    let Some(rule) = list.rule(&scanned.model_name, &scanned.model_version) else {
        return shared.metrics.skip_call("not_allow_listed");
    };
    let own = std::mem::take(&mut scanned.id);
    let Some(request_id) = admit(shared, rule, own, call.fallback_request_id) else {
        return;
    };
    let ctx = CallContext {
        request_id: &request_id,
        served_at: call.served_at,
        instance: &shared.instance,
        allow_list_version: &list.version,
        headers: &call.headers,
    };
    let of = RecordOf {
        model: &rule.name,
        request_id: &request_id,
        binding: "grpc",
        request_size,
        served_at: call.served_at,
    };
    let Some(scanned) = produce_planned(shared, local, &list, rule, scanned, ctx, of) else {
        return;
    };
    let version = scanned.model_version.clone();
    let request = match scanned.decode_for_rule(rule) {
        Ok(r) => r,
        Err(err) => {
            let rejected = match err {
                crate::lazy::LazyError::Malformed => {
                    Rejected::new("malformed_protobuf", "grpc", MALFORMED_REQUEST)
                }
                crate::lazy::LazyError::RawCount(err) => {
                    Rejected::new(err.reason(), "grpc", err.to_string())
                }
            };
            return shared.reject(about(rejected.model(&rule.name, &version), &request_id));
        }
    };
    let needs_response = !rule.outputs.is_empty() || rule.top_k.is_some();
    let response = if needs_response {
        let framed = unframe(
            call.response,
            call.response_encoding.as_deref(),
            shared.max_message_bytes,
            &mut BytesMut::new(),
        );
        let rejected = match framed.map(ModelInferResponse::decode) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) | Err(Unframe::Malformed) => Err(Rejected::new(
                "malformed_response",
                "grpc",
                "the model server's response is not a valid ModelInferResponse",
            )),
            Err(e) => Err(e.rejected("grpc", call.response_encoding.as_deref(), limit)),
        };
        match rejected {
            Ok(r) => Some(r),
            Err(rejected) => {
                let rejected = rejected.model(&request.model_name, &request.model_version);
                return shared.reject(about(rejected, &request_id));
            }
        }
    } else {
        None
    };
    let record = match extract(rule, &request, response.as_ref(), ctx) {
        Ok(r) => r,
        Err(err) => {
            let rejected = Rejected::new(err.reason(), "grpc", err.to_string())
                .model(&request.model_name, &request.model_version);
            return shared.reject(about(rejected, &request_id));
        }
    };
    count_missing(shared, rule, &record);
    produce(shared, of, &record.encode_to_vec(), record.row_count);
}

/// Counts each input and output the rule lists that the call's record lacks: a client that
/// stops sending a feature shows in the metrics before the training data goes bad.
fn count_missing(
    shared: &Shared,
    rule: &crate::allowlist::ModelRule,
    record: &featurelog_schemas::featurelog::v1::FeatureLog,
) {
    let lacks = |wanted: &[String], got: &[featurelog_schemas::featurelog::v1::Feature]| {
        for name in wanted {
            if !got.iter().any(|f| &f.name == name) {
                shared.metrics.missing_feature(&rule.name, name);
            }
        }
    };
    lacks(&rule.features, &record.features);
    lacks(&rule.outputs, &record.outputs);
}

/// The detail of a request that is not a `ModelInferRequest`.
const MALFORMED_REQUEST: &str = "the request is not a valid ModelInferRequest (protobuf)";

/// What the counters, a dead letter and a delivery report say of a record besides its bytes.
#[derive(Clone, Copy)]
struct RecordOf<'a> {
    /// The allow-list entry's model name.
    model: &'a str,
    request_id: &'a str,
    binding: &'static str,
    /// The size of the request it was taken from.
    request_size: usize,
    served_at: SystemTime,
}

/// Hands one encoded record to librdkafka (which copies it), counting the outcome. A record the
/// topic cannot take, or one librdkafka refuses for what it is, is dead-lettered; only a full
/// queue or a broker failure tells the adaptive controller that Kafka is struggling.
fn produce(shared: &Shared, of: RecordOf<'_>, payload: &[u8], rows: u32) {
    let metrics = &shared.metrics;
    let refuse = |reason: &'static str, detail: String| {
        Rejected::new(reason, of.binding, detail)
            .model(of.model, "")
            .call(of.request_id, of.request_size, of.served_at)
            .record_bytes(payload.len())
    };
    if let Some(limit) = shared
        .record_limit
        .exceeded(of.request_id.len(), payload.len())
    {
        let detail = format!(
            "the record is {} bytes, over the {limit} bytes topic {:?} takes (the smaller of its max.message.bytes and publish.max-message-bytes); log fewer features or fewer candidates for this model, or raise both",
            crate::record_limit::batch_bytes(of.request_id.len(), payload.len()),
            shared.topic,
        );
        let rejected = refuse("too_large", detail).limit_bytes(limit);
        return shared.producer.context().refused(rejected);
    }
    let sent = Sent::Record(Produced {
        at: Instant::now(),
        model: of.model.to_owned(),
        binding: of.binding,
        request_bytes: of.request_size,
        served_at: of.served_at,
    });
    let produced = shared.producer.send(
        BaseRecord::with_opaque_to(&shared.topic, Box::new(sent))
            .key(of.request_id.as_bytes())
            .payload(payload),
    );
    let err = match produced {
        Ok(()) => {
            let counters = metrics.model(of.model);
            counters.records.inc();
            counters.rows.inc_by(u64::from(rows));
            counters.request_bytes.inc_by(of.request_size as u64);
            counters.record_bytes.inc_by(payload.len() as u64);
            return;
        }
        Err((err, _)) => err,
    };
    match classify(&err) {
        Failure::Record(reason) => {
            let detail = format!(
                "the producer refused the record on topic {:?}: {err}",
                shared.topic
            );
            shared.producer.context().refused(refuse(reason, detail));
        }
        Failure::Broker => {
            let reason = match err {
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::QueueFull,
                ) => "producer_queue_full",
                _ => "produce_error",
            };
            metrics.drop_call(reason);
            shared.window.failed.fetch_add(1, Ordering::Relaxed);
            if reason == "produce_error" {
                shared.outage.failure(
                    &format!(
                        "a record of model {:?} (request {:?}, {} bytes) was not produced to {:?}: {err}",
                        of.model,
                        of.request_id,
                        payload.len(),
                        shared.topic
                    ),
                    true,
                );
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rdkafka::Message as _;

    /// A publisher with a ranker rule and no broker behind it: nothing is produced, the
    /// queue and the shutdown are what is tested.
    pub(crate) fn unconnected(
        config: &PublishConfig,
    ) -> (Publisher, Arc<Metrics>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("allow-list.toml");
        std::fs::write(&list, "[[model]]\nname = \"ranker\"\nfeatures = [\"f\"]\n").unwrap();
        let metrics = Arc::new(Metrics::new());
        let publisher = Publisher::start(
            &KafkaConfig::new("127.0.0.1:1"),
            config,
            AllowListHandle::load(&list).unwrap(),
            metrics.clone(),
            "test".into(),
            CancellationToken::new(),
        )
        .unwrap();
        (publisher, metrics, dir)
    }

    #[test]
    fn http_bodies_are_inflated_as_their_content_encoding_says() {
        use std::io::Write;
        let body = br#"{"inputs":[]}"#.repeat(50);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&body).unwrap();
        let gz = gz.finish().unwrap();
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(&body).unwrap();
        let zlib = zlib.finish().unwrap();
        let read = |bytes: &[u8], encoding, limit| {
            // In two chunks, as a body arrives.
            let (a, b) = bytes.split_at(bytes.len() / 2);
            let chunks = vec![Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)];
            inflate_http(chunks, encoding, limit, &mut BytesMut::new())
        };
        for (bytes, encoding) in [
            (&body[..], None),
            (&body[..], Some("identity")),
            (&gz[..], Some("gzip")),
            (&gz[..], Some("GZIP")),
            (&zlib[..], Some("deflate")),
        ] {
            assert_eq!(
                &read(bytes, encoding, 1 << 20).unwrap()[..],
                &body[..],
                "{encoding:?}"
            );
        }
        assert!(matches!(
            read(&gz, Some("gzip"), 100),
            Err(Unframe::TooLarge)
        ));
        assert!(matches!(
            read(&gz, Some("br"), 1 << 20),
            Err(Unframe::Compression)
        ));
        assert!(matches!(
            read(&body, Some("gzip"), 1 << 20),
            Err(Unframe::Malformed)
        ));
    }

    fn frame(message: &[u8]) -> Vec<Bytes> {
        let mut out = vec![0u8];
        out.extend((message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        // Split across chunks, as HTTP/2 data frames may be.
        let (a, b) = out.split_at(3);
        vec![Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)]
    }

    #[test]
    fn split_bodies_are_joined_and_the_buffer_reused() {
        let mut scratch = BytesMut::new();
        for _ in 0..3 {
            let whole = frame(&[7u8; 1000]).concat();
            let chunks: Vec<Bytes> = whole.chunks(300).map(Bytes::copy_from_slice).collect();
            let body = unframe(chunks, None, 2000, &mut scratch).unwrap();
            assert_eq!(&body[..], &[7u8; 1000][..]);
        }
    }

    #[test]
    fn unframing_checks_the_length_and_inflates_gzip() {
        assert_eq!(
            unframe(frame(b"hello"), None, 100, &mut BytesMut::new()).unwrap(),
            "hello"
        );
        let mut short = frame(b"hello");
        short.pop();
        assert!(matches!(
            unframe(short, None, 100, &mut BytesMut::new()),
            Err(Unframe::Malformed)
        ));

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"hello").unwrap();
        let gz = gz.finish().unwrap();
        let mut framed = vec![1u8];
        framed.extend((gz.len() as u32).to_be_bytes());
        framed.extend(gz);
        let framed = vec![Bytes::from(framed)];
        assert_eq!(
            unframe(framed.clone(), Some("gzip"), 100, &mut BytesMut::new()).unwrap(),
            "hello"
        );
        assert!(matches!(
            unframe(framed.clone(), Some("gzip"), 3, &mut BytesMut::new()),
            Err(Unframe::TooLarge)
        ));
        assert!(matches!(
            unframe(framed, Some("snappy"), 100, &mut BytesMut::new()),
            Err(Unframe::Compression)
        ));
    }

    /// A call of `bytes` body bytes (zeros), half request, half response.
    pub(crate) fn sized_call(bytes: usize) -> CapturedCall {
        CapturedCall {
            request: vec![Bytes::from(vec![0u8; bytes / 2])],
            response: vec![Bytes::from(vec![0u8; bytes - bytes / 2])],
            request_encoding: None,
            response_encoding: None,
            fallback_request_id: "r".into(),
            served_at: SystemTime::now(),
            headers: Vec::new(),
            rest: None,
        }
    }

    /// At a shutdown the connection of a call can be done before the call is handed over (its
    /// response body is dropped a moment after the caller got its last frame): the call is
    /// still taken, not counted as `shutting_down` (an end-to-end test lost a request's
    /// record that way on a loaded machine).
    #[tokio::test]
    async fn a_call_answered_as_the_drain_ends_is_handed_over_not_dropped() {
        let (publisher, metrics, _dir) = unconnected(&PublishConfig::default());
        let publisher = Arc::new(publisher);
        let in_flight = publisher.call_in_flight();
        let late = publisher.clone();
        let handing_over = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            late.submit(sized_call(10));
            drop(in_flight);
        });
        publisher.shutdown(Duration::from_secs(2)).await;
        handing_over.await.unwrap();
        let dropped = |reason| metrics.dropped_count(reason);
        assert_eq!(dropped("shutting_down"), 0);
        assert_eq!(publisher.shared.calls_in_flight.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn the_queue_holds_at_most_its_byte_budget_of_bodies() {
        use featurelog_schemas::inference::infer_parameter::ParameterChoice;
        use featurelog_schemas::inference::{InferParameter, ModelInferRequest};

        let config = PublishConfig {
            queue_max_bytes: 1000,
            ..PublishConfig::default()
        };
        let (publisher, metrics, _dir) = unconnected(&config);
        let call = sized_call;
        let dropped = |reason| metrics.dropped_count(reason);
        publisher.submit(call(1001));
        assert_eq!(dropped("queue_full"), 1, "a call larger than the budget");

        // A request that names its model first is judged at once: not listed, it is not
        // queued at all; listed with a rule that reads no outputs, its response is let go.
        // `padding` is a request parameter the rule does not log, to size the request.
        let named = |model: &str, padding: usize, response: usize| {
            let padding = InferParameter {
                parameter_choice: Some(ParameterChoice::StringParam("p".repeat(padding))),
            };
            let message = ModelInferRequest {
                model_name: model.into(),
                id: "r".into(),
                parameters: [("padding".to_string(), padding)].into(),
                ..Default::default()
            }
            .encode_to_vec();
            let mut body = vec![0u8];
            body.extend((message.len() as u32).to_be_bytes());
            body.extend(message);
            CapturedCall {
                request: vec![Bytes::from(body)],
                response: vec![Bytes::from(vec![0u8; response])],
                ..call(0)
            }
        };
        let within = named("ranker", 580, 0);
        assert!((500..1000).contains(&body_bytes(&within)));
        publisher.submit(within);
        assert_eq!(dropped("queue_full"), 1, "a call within the budget");
        let skipped = || metrics.skipped_count("not_allow_listed");
        publisher.submit(named("other", 0, 10));
        assert_eq!(skipped(), 1);
        // Its response alone is twice the budget: kept, the call could never be queued.
        publisher.submit(named("ranker", 0, 2000));
        assert_eq!(dropped("queue_full"), 1);
        // Shutting down through a shared handle, as when connections outlive the drain.
        let shared = Arc::new(publisher);
        let held = shared.clone();
        shared.shutdown(Duration::from_millis(100)).await;
        // The shutdown drains the queue: both calls that were let in became records (handed to
        // the producer; no broker is behind it), so neither was queued only to be lost.
        assert_eq!(
            metrics.produced().records,
            2,
            "the calls within the budget are published"
        );
        held.submit(call(10));
        assert_eq!(dropped("shutting_down"), 1);
        assert_eq!(shared.shared.queue_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_gzip_body_with_a_second_member_is_not_read_as_its_first() {
        // Servers differ on what follows the first member (grpc-go reads it as more of the
        // message, grpc-core refuses the call): what the model read is unknown, so no record.
        let member = |text: &[u8]| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, text).unwrap();
            gz.finish().unwrap()
        };
        let mut two = member(b"model a");
        two.extend(member(b"model b"));
        let mut framed = vec![1u8];
        framed.extend((two.len() as u32).to_be_bytes());
        framed.extend(two);
        assert!(matches!(
            unframe(
                vec![Bytes::from(framed)],
                Some("gzip"),
                100,
                &mut BytesMut::new()
            ),
            Err(Unframe::Malformed)
        ));
    }

    /// Calls whose request does not decode are described on the dead-letter topic (the model
    /// and the id the app knows, never the body), at most the budget's burst at once; the
    /// others are counted. The embedded broker stands in for Kafka: what is tested is what
    /// the publisher hands the producer (tests/sidecar_faults.rs does it on a real broker).
    #[tokio::test]
    async fn calls_it_cannot_decode_are_dead_lettered_within_the_budget() {
        use rdkafka::Message as _;
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::message::Headers;

        let broker = featurelog_kafka::DevBroker::start(1).unwrap();
        broker.create_topic("dead", 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("allow-list.toml");
        std::fs::write(&list, "[[model]]\nname = \"ranker\"\nfeatures = [\"f\"]\n").unwrap();
        let metrics = Arc::new(Metrics::new());
        let config = PublishConfig {
            dead_letter_topic: "dead".into(),
            dead_letters_per_second: 2,
            ..PublishConfig::default()
        };
        let kafka = KafkaConfig::new(broker.bootstrap_servers());
        let handle = AllowListHandle::load(&list).unwrap();
        let publisher = Publisher::start(
            &kafka,
            &config,
            handle,
            metrics.clone(),
            "pod-a".into(),
            CancellationToken::new(),
        )
        .unwrap();
        // Names its model, then is not protobuf. The tensor bytes must not leave.
        let mut message = featurelog_schemas::inference::ModelInferRequest {
            model_name: "ranker".into(),
            ..Default::default()
        }
        .encode_to_vec();
        message.extend([0xff, 0xff, 0xff, b'S', b'E', b'C', b'R', b'E', b'T']);
        let mut body = vec![0u8];
        body.extend((message.len() as u32).to_be_bytes());
        body.extend(message);
        for i in 0..10 {
            publisher.submit(CapturedCall {
                request: vec![Bytes::from(body.clone())],
                fallback_request_id: format!("req-{i}"),
                ..sized_call(0)
            });
        }
        assert_eq!(publisher.shutdown(Duration::from_secs(10)).await, 0);
        assert_eq!(metrics.dropped_count("malformed_protobuf"), 10);
        let delivered = metrics.dead_letter_count("delivered");
        // A burst of twice the rate; one more if the ten took over half a second.
        assert!((4..=5).contains(&delivered), "{delivered} delivered");
        assert_eq!(metrics.dead_letter_count("rate_limited"), 10 - delivered);

        let consumer: BaseConsumer = kafka
            .client_config(&[("group.id", "t"), ("auto.offset.reset", "earliest")])
            .create()
            .unwrap();
        let mut assignment = rdkafka::TopicPartitionList::new();
        assignment
            .add_partition_offset("dead", 0, rdkafka::Offset::Beginning)
            .unwrap();
        consumer.assign(&assignment).unwrap();
        let mut letters = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while (letters.len() as u64) < delivered && Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                letters.push(m.detach());
            }
        }
        assert_eq!(letters.len() as u64, delivered);
        for (i, letter) in letters.iter().enumerate() {
            assert_eq!(letter.key(), Some(format!("req-{i}").as_bytes()));
            let headers = letter.headers().unwrap();
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|h| h.key == name)
                    .and_then(|h| h.value)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            };
            assert_eq!(
                header("featurelog-error").as_deref(),
                Some("malformed_protobuf")
            );
            assert_eq!(
                header("featurelog-source").as_deref(),
                Some("sidecar/pod-a")
            );
            let payload = letter.payload().unwrap();
            assert!(
                !payload.windows(6).any(|w| w == b"SECRET"),
                "the body left the pod"
            );
            let json: serde_json::Value = serde_json::from_slice(payload).unwrap();
            assert_eq!(json["reason"], "malformed_protobuf");
            assert_eq!(json["model"], "ranker");
            assert_eq!(json["request_id"], format!("req-{i}").as_str());
            assert_eq!(json["request_bytes"], body.len());
            assert_eq!(json["sidecar"], "pod-a");
        }
    }

    /// A call whose tensor does not decode is dropped under the reason that says why, and
    /// nothing of it reaches the topic; a good call among them is still logged. The fast path
    /// (`direct`) must hand each of them to the general path, which owns the reasons. The
    /// embedded broker stands in for Kafka, to read what was produced.
    #[tokio::test]
    async fn each_undecodable_tensor_is_counted_under_its_reason_and_never_published() {
        use featurelog_schemas::inference::ModelInferRequest;
        use featurelog_schemas::inference::model_infer_request::InferInputTensor;
        use featurelog_schemas::tensor::TensorValues;
        use rdkafka::consumer::{BaseConsumer, Consumer};

        let broker = featurelog_kafka::DevBroker::start(1).unwrap();
        broker.create_topic("features", 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("allow-list.toml");
        std::fs::write(&list, "[[model]]\nname = \"ranker\"\nfeatures = [\"f\"]\n").unwrap();
        let metrics = Arc::new(Metrics::new());
        let config = PublishConfig {
            topic: "features".into(),
            dead_letter_topic: String::new(),
            ..PublishConfig::default()
        };
        let kafka = KafkaConfig::new(broker.bootstrap_servers());
        let publisher = Publisher::start(
            &kafka,
            &config,
            AllowListHandle::load(&list).unwrap(),
            metrics.clone(),
            "pod-a".into(),
            CancellationToken::new(),
        )
        .unwrap();
        // The logged input `f`, in raw contents as Triton's clients send it.
        let call = |id: &str, datatype: &str, shape: &[i64], raw: Bytes| {
            let message = ModelInferRequest {
                model_name: "ranker".into(),
                id: id.into(),
                inputs: vec![InferInputTensor {
                    name: "f".into(),
                    datatype: datatype.into(),
                    shape: shape.to_vec(),
                    ..Default::default()
                }],
                raw_input_contents: vec![raw],
                ..Default::default()
            }
            .encode_to_vec();
            CapturedCall {
                request: frame(&message),
                ..sized_call(0)
            }
        };
        let six_floats = TensorValues::Fp32(vec![1.0; 6]).to_raw();
        publisher.submit(call("shape", "FP32", &[2, 4], six_floats.clone()));
        publisher.submit(call("datatype", "FP8", &[6], six_floats.clone()));
        // A length prefix of 10 before one byte.
        let bad_bytes = Bytes::from_static(&[10, 0, 0, 0, b'a']);
        publisher.submit(call("bytes", "BYTES", &[1], bad_bytes));
        publisher.submit(call("good", "FP32", &[6], six_floats));
        assert_eq!(publisher.shutdown(Duration::from_secs(10)).await, 0);

        for reason in ["shape_mismatch", "unknown_datatype", "bad_bytes"] {
            assert_eq!(metrics.dropped_count(reason), 1, "{reason}");
        }
        assert_eq!(metrics.produced().records, 1);
        let consumer: BaseConsumer = kafka
            .client_config(&[("group.id", "t"), ("auto.offset.reset", "earliest")])
            .create()
            .unwrap();
        let (_, end) = consumer
            .fetch_watermarks("features", 0, Duration::from_secs(10))
            .unwrap();
        assert_eq!(end, 1, "records on the topic");
        let mut assignment = rdkafka::TopicPartitionList::new();
        assignment
            .add_partition_offset("features", 0, rdkafka::Offset::Beginning)
            .unwrap();
        consumer.assign(&assignment).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let record = loop {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                break m.detach();
            }
            assert!(
                Instant::now() < deadline,
                "the good call's record never came"
            );
        };
        assert_eq!(record.key(), Some(&b"good"[..]));
        let log = featurelog_schemas::featurelog::v1::FeatureLog::decode(record.payload().unwrap())
            .unwrap();
        assert_eq!(log.row_count, 6);
        assert_eq!(
            log.features[0].values.as_ref().unwrap().fp32_values,
            [1.0; 6]
        );
    }
}
