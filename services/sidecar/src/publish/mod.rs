//! From captured calls to Kafka records, off the inference path.
//!
//! The proxy hands each finished ModelInfer call to [`Publisher::submit`], which never blocks:
//! the call goes into a bounded queue, or is dropped and counted when the queue is full.
//! Publisher threads decode the call, apply the allow list, sampling and the adaptive fraction,
//! build the FeatureLog and hand it to librdkafka, whose own queue is bounded too (a full queue
//! is another counted drop). Delivery reports feed the [`AdaptiveController`], which lowers the
//! fraction of calls logged while deliveries fail and raises it again when they succeed, so a
//! sick broker costs neither memory nor a storm of retries.
//!
//! - `queue`: the bounded queue and the calls held in it;
//! - `worker`: the publisher threads, from a queued gRPC call to a record; `rest` does the same
//!   for a call of the REST binding;
//! - `record`: what a call of either binding goes through once decoded;
//! - `producer`: librdkafka's settings and the hand-over of one record or dead letter;
//!   `delivery`: what it reports back; [`record_limit`]: the largest record the topic takes;
//! - [`adaptive`]: the fraction logged while the brokers fail;
//! - [`dead_letter`]: what a call that could not be logged is described as.

pub mod adaptive;
pub mod dead_letter;
mod delivery;
mod producer;
mod queue;
mod record;
pub mod record_limit;
mod rest;
#[cfg(test)]
pub(crate) mod tests;
mod worker;

use crate::reason::{Dropped, Skipped};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use featurelog_kafka::KafkaConfig;
use rdkafka::producer::{BaseProducer, Producer, PurgeConfig};
use tokio_util::sync::CancellationToken;

use crate::SidecarError;
use crate::allowlist::AllowListHandle;
use crate::config::PublishConfig;
use crate::metrics::Metrics;

use adaptive::{AdaptiveController, control};
use dead_letter::{Budget, Rejected};
use delivery::{DeliveryContext, Outage, Throttle, Window};
use producer::watch_dead_letters;
use queue::Queued;
use record_limit::RecordLimit;
use worker::worker;

pub use producer::PRODUCER_DEFAULTS;
pub use queue::CallInFlight;

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
                    .saturating_add(record_limit::BATCH_OVERHEAD)
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
        tokio::spawn(record_limit::watch(
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
            if let Some(value) = value
                && !out.iter().any(|(n, _)| n == name)
            {
                out.push((name.clone(), value.to_owned()));
            }
        }
        out
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
            return self.shared.metrics.skip_call(Skipped::NotAllowListed);
        }
        self.shared.reject(rejected);
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
                    shared.metrics.drop_call(Dropped::ShuttingDown);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(err) = shared.producer.flush(left) {
                tracing::warn!(%err, "producer flush did not finish");
            }
            if shared.producer.in_flight_count() <= 0 {
                return 0;
            }
            // Given up: purged now, their delivery reports count each as dropped
            // (`delivery_failed`) before the shutdown returns, rather than whenever the
            // producer happens to be dropped, which a process that exits never sees. The
            // records left are counted from those reports, not from librdkafka's in-flight
            // count, which also holds its own requests and events (an error event not served
            // yet) and so can exceed the records lost.
            let failed_before = shared.metrics.delivery_errors.get();
            shared
                .producer
                .purge(PurgeConfig::default().queue().inflight());
            let _ = shared.producer.flush(PURGE_REPORTS);
            shared
                .metrics
                .delivery_errors
                .get()
                .saturating_sub(failed_before) as usize
        })
        .await;
        joined.unwrap_or(0)
    }
}

/// How long a shutdown serves the delivery reports of the records it purged: they are ready at
/// once, with no broker to wait for.
const PURGE_REPORTS: Duration = Duration::from_millis(500);
