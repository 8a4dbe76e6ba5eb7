//! The sidecar's Prometheus metrics. Each sidecar owns its registry (no global recorder), so
//! several sidecars in one process, as in the tests, count separately.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::reason::{DeadLetter, Dropped, Skipped};

/// Label of a call: which RPC and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `model_infer` or `other` (every other method, passed through).
    pub method: &'static str,
    /// `ok`, `error` (the upstream answered with an error status) or `upstream_unavailable`.
    pub outcome: &'static str,
}

/// A reason label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    /// Why.
    pub reason: &'static str,
}

/// An outcome label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// How it ended.
    pub outcome: &'static str,
}

/// An allow-list version label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Version {
    /// The version.
    pub version: String,
}

/// A model label: an allow-listed model's name (the allow list bounds its values).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Model {
    /// The model's name, as its allow-list entry names it.
    pub model: String,
}

/// A model and one of its allow-listed features.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelFeature {
    /// The model's name, as its allow-list entry names it.
    pub model: String,
    /// The feature (input or output tensor) the entry lists.
    pub feature: String,
}

/// The counters of one model's records (see [`Metrics::model`]).
#[derive(Clone, Debug, Default)]
pub struct ModelCounters {
    /// `featurelog_sidecar_records_produced_total{model}`.
    pub records: Counter,
    /// `featurelog_sidecar_rows_produced_total{model}`.
    pub rows: Counter,
    /// `featurelog_sidecar_request_bytes_total{model}`.
    pub request_bytes: Counter,
    /// `featurelog_sidecar_record_bytes_total{model}`.
    pub record_bytes: Counter,
}

/// The record counters of every model together (see [`Metrics::produced`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Produced {
    /// Records handed to the producer.
    pub records: u64,
    /// Candidate rows in them.
    pub rows: u64,
    /// Bytes of the whole requests they were taken from.
    pub request_bytes: u64,
    /// Bytes of the records.
    pub record_bytes: u64,
}

/// Every metric of one sidecar.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// The names of the families registered, without the prefix.
    families: Vec<&'static str>,
    /// Calls forwarded, by method and outcome.
    pub calls: Family<CallLabels, Counter>,
    /// FeatureLog records handed to Kafka and acknowledged.
    pub records_delivered: Counter,
    /// FeatureLog records produced (handed to the producer), by model.
    pub records_produced: Family<Model, Counter>,
    /// Candidate rows in produced records, by model.
    pub rows_produced: Family<Model, Counter>,
    /// Bytes of the full requests of logged calls (before the allow list), by model.
    pub request_bytes: Family<Model, Counter>,
    /// Bytes of the records produced (after the allow list), by model.
    pub record_bytes: Family<Model, Counter>,
    /// Each model's counters in the four families above, by name.
    models: RwLock<HashMap<String, Arc<ModelCounters>>>,
    /// Calls that were to be logged but were not, by reason.
    pub dropped: Family<Reason, Counter>,
    /// Logged calls that lacked a feature their allow-list entry lists, by model and feature.
    pub missing_features: Family<ModelFeature, Counter>,
    /// The largest record the feature-log topic takes (the smaller of its `max.message.bytes`
    /// and `publish.max-message-bytes`).
    pub record_limit_bytes: Gauge,
    /// Calls not logged by design: model not allow-listed, not sampled, failed call.
    pub skipped: Family<Reason, Counter>,
    /// Dead letters (calls not logged because of what the caller sent), by outcome:
    /// `delivered`, `failed`, `rate_limited`.
    pub dead_letters: Family<Outcome, Counter>,
    /// 1 while the brokers say the dead-letter topic does not exist.
    pub dead_letter_topic_missing: Gauge,
    /// Calls waiting for a publisher thread.
    pub queue_depth: Gauge,
    /// Body bytes the queued calls hold.
    pub queue_bytes: Gauge,
    /// Records inside the producer, not yet acknowledged.
    pub producer_in_flight: Gauge,
    /// Bytes sent to the brokers, protocol and compression included (librdkafka statistics).
    pub kafka_tx_bytes: Gauge,
    /// Message bytes with their batch framing sent to brokers (librdkafka `txmsg_bytes`).
    pub kafka_txmsg_bytes: Gauge,
    /// Records the broker did not acknowledge in time.
    pub delivery_errors: Counter,
    /// Time from produce to acknowledgement.
    pub delivery_latency: Histogram,
    /// Time the sidecar adds to a ModelInfer call (its total time minus the upstream's).
    pub added_latency: Histogram,
    /// The fraction of logged calls that the adaptive controller lets through.
    pub logged_fraction: Gauge<f64, AtomicU64>,
    /// Allow-list reloads, by outcome (`applied`, `refused`).
    pub allow_list_reloads: Family<Reason, Counter>,
    /// The allow-list version in force (value 1).
    pub allow_list_version: Family<Version, Gauge>,
    /// TLS certificate loads of the client port, by outcome (`applied`, `refused`).
    pub tls_reloads: Family<Reason, Counter>,
    /// Loads of the `[upstream-tls]` files by outcome.
    pub upstream_tls_reloads: Family<Reason, Counter>,
    /// Client connections whose TLS handshake failed (`error`) or did not finish (`timeout`).
    pub tls_handshake_failures: Family<Reason, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered under `featurelog_sidecar_`.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("featurelog_sidecar");
        let m = Self {
            registry: Registry::default(),
            families: Vec::new(),
            calls: Family::default(),
            records_delivered: Counter::default(),
            records_produced: Family::default(),
            rows_produced: Family::default(),
            request_bytes: Family::default(),
            record_bytes: Family::default(),
            models: RwLock::default(),
            dropped: Family::default(),
            missing_features: Family::default(),
            record_limit_bytes: Gauge::default(),
            skipped: Family::default(),
            dead_letters: Family::default(),
            dead_letter_topic_missing: Gauge::default(),
            queue_depth: Gauge::default(),
            queue_bytes: Gauge::default(),
            producer_in_flight: Gauge::default(),
            delivery_errors: Counter::default(),
            kafka_tx_bytes: Gauge::default(),
            kafka_txmsg_bytes: Gauge::default(),
            delivery_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 18)),
            added_latency: Histogram::new(exponential_buckets(0.00002, 2.0, 18)),
            logged_fraction: Gauge::default(),
            allow_list_reloads: Family::default(),
            allow_list_version: Family::default(),
            tls_reloads: Family::default(),
            upstream_tls_reloads: Family::default(),
            tls_handshake_failures: Family::default(),
        };
        // Registered names are kept, so that a test can tell that it made every family visible.
        let mut families = Vec::new();
        macro_rules! register {
            ($name:literal, $help:literal, $metric:expr $(,)?) => {{
                families.push($name);
                registry.register($name, $help, $metric);
            }};
        }
        register!(
            "calls",
            "Calls forwarded, by method and outcome",
            m.calls.clone(),
        );
        register!(
            "records_delivered",
            "FeatureLog records acknowledged by Kafka",
            m.records_delivered.clone(),
        );
        register!(
            "records_produced",
            "FeatureLog records handed to the producer, by model",
            m.records_produced.clone(),
        );
        register!(
            "rows_produced",
            "Candidate rows in produced records, by model",
            m.rows_produced.clone(),
        );
        register!(
            "request_bytes",
            "Bytes of the full requests of logged calls, before the allow list, by model",
            m.request_bytes.clone(),
        );
        register!(
            "record_bytes",
            "Bytes of produced records, after the allow list, by model",
            m.record_bytes.clone(),
        );
        register!(
            "dropped",
            "Calls that should have been logged but were not, by reason",
            m.dropped.clone(),
        );
        register!(
            "missing_features",
            "Logged calls that lacked a feature their allow-list entry lists, by model and feature",
            m.missing_features.clone(),
        );
        register!(
            "record_limit_bytes",
            "The largest record the feature-log topic takes: the smaller of its max.message.bytes and publish.max-message-bytes",
            m.record_limit_bytes.clone(),
        );
        register!(
            "skipped",
            "Calls not logged by design (not allow-listed, not sampled, failed)",
            m.skipped.clone(),
        );
        register!(
            "dead_letters",
            "Dead letters of calls not logged because of what their caller sent, by outcome",
            m.dead_letters.clone(),
        );
        register!(
            "dead_letter_topic_missing",
            "1 while the brokers say the dead-letter topic does not exist (dead letters are then only counted)",
            m.dead_letter_topic_missing.clone(),
        );
        register!(
            "queue_depth",
            "Calls waiting for a publisher thread",
            m.queue_depth.clone(),
        );
        register!(
            "queue_bytes",
            "Request and response body bytes held by the calls waiting for a publisher thread",
            m.queue_bytes.clone(),
        );
        register!(
            "producer_in_flight",
            "Records in the producer not yet acknowledged",
            m.producer_in_flight.clone(),
        );
        register!(
            "delivery_errors",
            "Records Kafka did not acknowledge",
            m.delivery_errors.clone(),
        );
        register!(
            "kafka_tx_bytes",
            "Bytes sent to Kafka brokers, protocol and compression included",
            m.kafka_tx_bytes.clone(),
        );
        register!(
            "kafka_txmsg_bytes",
            "Message bytes with batch framing sent to Kafka (librdkafka txmsg_bytes)",
            m.kafka_txmsg_bytes.clone(),
        );
        register!(
            "delivery_latency_seconds",
            "Time from produce to acknowledgement",
            m.delivery_latency.clone(),
        );
        register!(
            "added_latency_seconds",
            "Latency the sidecar adds to a ModelInfer call",
            m.added_latency.clone(),
        );
        register!(
            "logged_fraction",
            "Fraction of loggable calls the adaptive controller lets through",
            m.logged_fraction.clone(),
        );
        register!(
            "allow_list_reloads",
            "Allow-list reloads by outcome",
            m.allow_list_reloads.clone(),
        );
        register!(
            "allow_list_version",
            "The allow-list version in force",
            m.allow_list_version.clone(),
        );
        register!(
            "tls_reloads",
            "TLS certificate loads of the client port by outcome",
            m.tls_reloads.clone(),
        );
        register!(
            "upstream_tls_reloads",
            "Loads of the upstream-tls files (model server CA, client certificate) by outcome",
            m.upstream_tls_reloads.clone(),
        );
        register!(
            "tls_handshake_failures",
            "Client connections whose TLS handshake failed, by reason",
            m.tls_handshake_failures.clone(),
        );
        m.logged_fraction.set(1.0);
        Self {
            registry: root,
            families,
            ..m
        }
    }

    /// The record counters of `model`, looked up once per model and process: a record costs
    /// a map lookup by name instead of four label sets built and hashed.
    pub fn model(&self, model: &str) -> Arc<ModelCounters> {
        if let Some(c) = self
            .models
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model)
        {
            return c.clone();
        }
        let label = Model {
            model: model.to_owned(),
        };
        let counters = Arc::new(ModelCounters {
            records: self.records_produced.get_or_create(&label).clone(),
            rows: self.rows_produced.get_or_create(&label).clone(),
            request_bytes: self.request_bytes.get_or_create(&label).clone(),
            record_bytes: self.record_bytes.get_or_create(&label).clone(),
        });
        self.models
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(label.model)
            .or_insert(counters)
            .clone()
    }

    /// The record counters summed over every model.
    pub fn produced(&self) -> Produced {
        let models = self.models.read().unwrap_or_else(PoisonError::into_inner);
        let mut sum = Produced::default();
        for c in models.values() {
            sum.records += c.records.get();
            sum.rows += c.rows.get();
            sum.request_bytes += c.request_bytes.get();
            sum.record_bytes += c.record_bytes.get();
        }
        sum
    }

    /// Counts a call forwarded, by method and outcome (`featurelog_sidecar_calls_total`).
    pub fn count_call(&self, method: &'static str, outcome: &'static str) {
        self.calls
            .get_or_create(&CallLabels { method, outcome })
            .inc();
    }

    /// Counts a call dropped (forwarded, not logged) for `reason`.
    pub fn drop_call(&self, reason: Dropped) {
        let reason = reason.as_str();
        self.dropped.get_or_create(&Reason { reason }).inc();
    }

    /// Counts a logged call of `model` that lacked `feature`.
    pub fn missing_feature(&self, model: &str, feature: &str) {
        self.missing_features
            .get_or_create(&ModelFeature {
                model: model.to_owned(),
                feature: feature.to_owned(),
            })
            .inc();
    }

    /// The count of logged calls of `model` that lacked `feature`.
    pub fn missing_feature_count(&self, model: &str, feature: &str) -> u64 {
        self.missing_features
            .get_or_create(&ModelFeature {
                model: model.to_owned(),
                feature: feature.to_owned(),
            })
            .get()
    }

    /// Counts a call skipped by design.
    pub fn skip_call(&self, reason: Skipped) {
        let reason = reason.as_str();
        self.skipped.get_or_create(&Reason { reason }).inc();
    }

    /// The count of drops for `reason`.
    pub fn dropped_count(&self, reason: &'static str) -> u64 {
        self.dropped.get_or_create(&Reason { reason }).get()
    }

    /// The count of calls skipped for `reason`.
    pub fn skipped_count(&self, reason: &'static str) -> u64 {
        self.skipped.get_or_create(&Reason { reason }).get()
    }

    /// Counts a dead letter's `outcome`: `delivered`, `failed`, `rate_limited` or `no_topic`.
    pub fn dead_letter(&self, outcome: DeadLetter) {
        let outcome = outcome.as_str();
        self.dead_letters.get_or_create(&Outcome { outcome }).inc();
    }

    /// The count of dead letters with `outcome`.
    pub fn dead_letter_count(&self, outcome: &'static str) -> u64 {
        self.dead_letters.get_or_create(&Outcome { outcome }).get()
    }

    /// Records a load of the client port's TLS files (at start-up, or a change).
    pub fn tls_reloaded(&self, applied: bool) {
        let reason = if applied { "applied" } else { "refused" };
        self.tls_reloads.get_or_create(&Reason { reason }).inc();
    }

    /// Records a load of the `[upstream-tls]` files: `applied` or `refused`.
    pub fn upstream_tls_reloaded(&self, applied: bool) {
        let reason = if applied { "applied" } else { "refused" };
        self.upstream_tls_reloads
            .get_or_create(&Reason { reason })
            .inc();
    }

    /// Counts a client connection whose TLS handshake failed (`error`) or timed out.
    pub fn tls_handshake_failed(&self, reason: &'static str) {
        self.tls_handshake_failures
            .get_or_create(&Reason { reason })
            .inc();
    }

    /// Records an allow-list reload attempt.
    pub fn allow_list_reloaded(&self, version: &str, applied: bool) {
        let reason = if applied { "applied" } else { "refused" };
        self.allow_list_reloads
            .get_or_create(&Reason { reason })
            .inc();
        if applied {
            self.allow_list_version.clear();
        }
        self.allow_list_version
            .get_or_create(&Version {
                version: version.to_owned(),
            })
            .set(1);
    }

    /// The names of the metric families registered, without the `featurelog_sidecar_` prefix.
    pub fn families(&self) -> &[&'static str] {
        &self.families
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records are counted per allow-listed model (one series per model, so that a model whose
    /// logging stopped shows), and summed for the demo's figures.
    #[test]
    fn records_are_counted_by_model() {
        let m = Metrics::new();
        for (model, rows, bytes) in [("ranker", 100, 4000), ("ranker", 50, 2000), ("ads", 7, 300)] {
            let c = m.model(model);
            c.records.inc();
            c.rows.inc_by(rows);
            c.request_bytes.inc_by(bytes * 5);
            c.record_bytes.inc_by(bytes);
        }
        let text = m.render();
        for line in [
            "featurelog_sidecar_records_produced_total{model=\"ranker\"} 2",
            "featurelog_sidecar_records_produced_total{model=\"ads\"} 1",
            "featurelog_sidecar_rows_produced_total{model=\"ranker\"} 150",
            "featurelog_sidecar_record_bytes_total{model=\"ads\"} 300",
            "featurelog_sidecar_request_bytes_total{model=\"ads\"} 1500",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in {text}");
        }
        assert_eq!(
            m.produced(),
            Produced {
                records: 3,
                rows: 157,
                request_bytes: 31_500,
                record_bytes: 6300,
            }
        );
    }
}
