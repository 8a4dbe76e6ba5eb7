//! The joiner's Prometheus metrics: outcomes of every expired entry, rows and late rows written,
//! dead letters, commits, and the size of the state. Served on `[metrics] listen` by
//! `featurelog-ops`.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::state::Counts;

/// A label with a reason or an outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    /// The outcome or reason.
    pub name: &'static str,
}

/// A model label: the `model_name` of the feature logs a row was joined from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Model {
    /// The model's name.
    pub model: String,
}

/// Every metric of one joiner process.
#[derive(Debug)]
pub struct JoinMetrics {
    registry: Registry,
    /// The names of the families registered, without the prefix.
    families: Vec<&'static str>,
    /// What happened to entries: joined, scored_not_impressed, negatives,
    /// impression_without_features, unknown_item, labels_without_impression, late,
    /// labels_outside_window, evicted, duplicate_features, duplicate_events, lost_on_restore.
    pub outcomes: Family<Label, Counter>,
    /// Rows committed to the dataset, by model.
    pub rows_written: Family<Model, Counter>,
    /// Of those, written under late/.
    pub late_rows: Counter,
    /// Records sent to the dead-letter topic, by reason.
    pub dead_letters: Family<Label, Counter>,
    /// Events moved to the repartition topic.
    pub events_routed: Counter,
    /// Events dropped as they were read: their requests are outside the sidecars' sample.
    pub events_not_sampled: Counter,
    /// Task checkpoints committed.
    pub commits: Counter,
    /// Stages started again with a new consumer after the group coordinator fenced theirs.
    pub stage_restarts: Counter,
    /// Tasks (partitions) this process runs.
    pub tasks: Gauge,
    /// Estimated bytes of join state held.
    pub state_bytes: Gauge,
    /// Requests whose features are held.
    pub buffered_requests: Gauge,
    /// Input partitions whose reading is paused because they are ahead of their task's other
    /// input in event time (see `crate::align`).
    pub paused_partitions: Gauge,
    /// The lowest task watermark, in seconds since the epoch.
    pub watermark_seconds: Gauge<i64, AtomicI64>,
    /// Hours of a Delta table whose files were rewritten into fewer.
    pub hours_compacted: Counter,
}

impl Default for JoinMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl JoinMetrics {
    /// A registry with every metric under `featurelog_join_`.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let r = root.sub_registry_with_prefix("featurelog_join");
        let m = Self {
            registry: Registry::default(),
            families: Vec::new(),
            outcomes: Family::default(),
            rows_written: Family::default(),
            late_rows: Counter::default(),
            dead_letters: Family::default(),
            events_routed: Counter::default(),
            events_not_sampled: Counter::default(),
            commits: Counter::default(),
            stage_restarts: Counter::default(),
            tasks: Gauge::default(),
            state_bytes: Gauge::default(),
            buffered_requests: Gauge::default(),
            paused_partitions: Gauge::default(),
            watermark_seconds: Gauge::default(),
            hours_compacted: Counter::default(),
        };
        // Registered names are kept, so that a test can tell that it made every family visible.
        let mut families = Vec::new();
        macro_rules! register {
            ($name:literal, $help:literal, $metric:expr $(,)?) => {{
                families.push($name);
                r.register($name, $help, $metric);
            }};
        }
        register!(
            "outcomes",
            "What happened to join entries, by outcome",
            m.outcomes.clone(),
        );
        register!(
            "rows_written",
            "Rows committed to the dataset, by model",
            m.rows_written.clone(),
        );
        register!(
            "late_rows",
            "Rows for complete hours, written under late/",
            m.late_rows.clone(),
        );
        register!(
            "dead_letters",
            "Records dead-lettered, by reason",
            m.dead_letters.clone(),
        );
        register!(
            "events_routed",
            "App events moved to the repartition topic",
            m.events_routed.clone(),
        );
        register!(
            "events_not_sampled",
            "App events dropped because their requests are outside input.events-sample-rate",
            m.events_not_sampled.clone(),
        );
        register!("commits", "Task checkpoints committed", m.commits.clone());
        register!(
            "stage_restarts",
            "Stages started again with a new consumer after the group coordinator fenced theirs",
            m.stage_restarts.clone(),
        );
        register!("tasks", "Tasks this process runs", m.tasks.clone());
        register!(
            "state_bytes",
            "Estimated bytes of join state",
            m.state_bytes.clone(),
        );
        register!(
            "buffered_requests",
            "Requests whose features are held",
            m.buffered_requests.clone(),
        );
        register!(
            "paused_partitions",
            "Input partitions whose reading is paused: ahead of their task's other input in event time (join.max-read-ahead)",
            m.paused_partitions.clone(),
        );
        register!(
            "watermark_seconds",
            "The lowest task watermark",
            m.watermark_seconds.clone(),
        );
        register!(
            "hours_compacted",
            "Hours of the Delta table whose files this process rewrote into fewer",
            m.hours_compacted.clone(),
        );
        Self {
            registry: root,
            families,
            ..m
        }
    }

    /// Counts rows committed: `models` gives each row's model, in order.
    pub fn rows_written<'a>(&self, models: impl IntoIterator<Item = &'a str>) {
        // Rows come grouped: a task's rows are nearly always of one model or a few.
        let mut runs: Vec<(&str, u64)> = Vec::new();
        for model in models {
            match runs.iter_mut().find(|(m, _)| *m == model) {
                Some((_, n)) => *n += 1,
                None => runs.push((model, 1)),
            }
        }
        for (model, n) in runs {
            self.rows_written
                .get_or_create(&Model {
                    model: model.to_owned(),
                })
                .inc_by(n);
        }
    }

    /// Adds what `now` counted beyond `reported` (both from one task's state) to the outcome
    /// counters, and returns `now` as the new `reported`.
    pub fn report(&self, reported: &Counts, now: &Counts) -> Counts {
        for ((name, before), (_, after)) in reported.named().into_iter().zip(now.named()) {
            if after > before {
                self.outcomes
                    .get_or_create(&Label { name })
                    .inc_by(after - before);
            }
        }
        now.clone()
    }

    /// The names of the metric families registered, without the `featurelog_join_` prefix.
    pub fn families(&self) -> &[&'static str] {
        &self.families
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_counters_add_only_what_is_new() {
        let m = JoinMetrics::new();
        let mut reported = Counts::default();
        let now = Counts {
            joined: 3,
            late: 1,
            ..Counts::default()
        };
        reported = m.report(&reported, &now);
        let now = Counts {
            joined: 5,
            late: 1,
            ..Counts::default()
        };
        m.report(&reported, &now);
        let text = m.render();
        assert!(
            text.contains("featurelog_join_outcomes_total{name=\"joined\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("featurelog_join_outcomes_total{name=\"late\"} 1"),
            "{text}"
        );
    }

    /// One series per model, so that a model whose rows stopped shows while others go on.
    #[test]
    fn rows_written_are_counted_by_model() {
        let m = JoinMetrics::new();
        m.rows_written(["ranker", "ranker", "ads", "ranker"]);
        m.rows_written(["ads"]);
        let text = m.render();
        for line in [
            "featurelog_join_rows_written_total{model=\"ranker\"} 3",
            "featurelog_join_rows_written_total{model=\"ads\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in {text}");
        }
    }
}
