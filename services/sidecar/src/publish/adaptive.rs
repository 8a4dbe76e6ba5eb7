//! The adaptive controller: the fraction of logged calls the sidecar lets through while Kafka
//! deliveries fail, so that a sick broker costs neither memory nor a storm of retries.
//!
//! Only broker and transport failures feed it (`delivery` tells them from records the brokers
//! refuse for what they are): one client sending oversized calls must not switch logging off
//! for every model. The fraction comes back without traffic too: an idle interval in which the
//! brokers answer raises it, so a shed fraction never outlives its outage.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::producer::Producer;
use tokio_util::sync::CancellationToken;

use crate::config::AdaptiveConfig;

use super::Shared;
use super::producer::ask_topic;

/// What one interval showed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Interval {
    /// Records the brokers acknowledged.
    pub delivered: u64,
    /// Records lost to broker or transport failures (never records refused for their content).
    pub failed: u64,
    /// Whether the brokers answered a probe during the interval (asked only while it is idle
    /// and the fraction is below 1).
    pub brokers_answer: bool,
}

/// The AIMD rule of the adaptive controller, apart from time so it can be tested directly.
#[derive(Debug, Clone)]
pub struct AdaptiveController {
    config: AdaptiveConfig,
    fraction: f64,
}

impl AdaptiveController {
    /// Starts at fraction 1.
    pub fn new(config: AdaptiveConfig) -> Self {
        Self {
            config,
            fraction: 1.0,
        }
    }

    /// The fraction now.
    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    /// Whether the next interval should probe the brokers: only an idle controller below 1
    /// has nothing else to learn from.
    pub fn wants_probe(&self, delivered: u64, failed: u64) -> bool {
        self.config.enabled && self.fraction < 1.0 && delivered == 0 && failed == 0
    }

    /// Takes one interval's outcomes and returns the new fraction: multiplied down when
    /// failures are at least as many as deliveries; raised a step when deliveries succeed with
    /// no failure, or when nothing was sent and the brokers answer; left alone otherwise (idle
    /// with no answer, or a mix that is mostly fine).
    pub fn observe(&mut self, interval: Interval) -> f64 {
        if !self.config.enabled {
            return 1.0;
        }
        let Interval {
            delivered,
            failed,
            brokers_answer,
        } = interval;
        if failed > 0 && failed >= delivered {
            self.fraction =
                (self.fraction * self.config.decrease_factor).max(self.config.min_fraction);
        } else if (delivered > 0 && failed == 0)
            || (delivered == 0 && failed == 0 && brokers_answer)
        {
            self.fraction = (self.fraction + self.config.increase_step).min(1.0);
        }
        self.fraction
    }
}

pub(super) async fn control(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn controller() -> AdaptiveController {
        AdaptiveController::new(AdaptiveConfig::default())
    }

    fn outcomes(delivered: u64, failed: u64) -> Interval {
        Interval {
            delivered,
            failed,
            brokers_answer: false,
        }
    }

    #[test]
    fn failures_halve_the_fraction_down_to_the_floor() {
        let mut c = controller();
        assert_eq!(c.observe(outcomes(0, 10)), 0.5);
        assert_eq!(c.observe(outcomes(3, 10)), 0.25);
        for _ in 0..20 {
            c.observe(outcomes(0, 5));
        }
        assert_eq!(c.fraction(), 0.01);
    }

    #[test]
    fn clean_deliveries_raise_it_back_to_one() {
        let mut c = controller();
        for _ in 0..20 {
            c.observe(outcomes(0, 5));
        }
        let mut intervals = 0;
        while c.fraction() < 1.0 {
            c.observe(outcomes(100, 0));
            intervals += 1;
        }
        assert_eq!(intervals, 10);
    }

    #[test]
    fn idle_intervals_without_an_answer_or_mostly_healthy_ones_change_nothing() {
        let mut c = controller();
        c.observe(outcomes(0, 4));
        assert_eq!(c.observe(outcomes(0, 0)), 0.5);
        assert_eq!(c.observe(outcomes(100, 1)), 0.5);
    }

    #[test]
    fn an_idle_sidecar_whose_brokers_answer_climbs_back_to_one_without_traffic() {
        let mut c = controller();
        for _ in 0..10 {
            c.observe(outcomes(0, 5));
        }
        assert!(c.wants_probe(0, 0));
        assert!(!c.wants_probe(1, 0), "traffic says more than a probe");
        let mut intervals = 0;
        while c.fraction() < 1.0 {
            c.observe(Interval {
                brokers_answer: true,
                ..Interval::default()
            });
            intervals += 1;
        }
        assert_eq!(intervals, 10);
        assert!(!c.wants_probe(0, 0), "nothing to learn at 1");
        // An answer never outweighs failed deliveries.
        let failed_with_answer = Interval {
            delivered: 0,
            failed: 3,
            brokers_answer: true,
        };
        assert_eq!(c.observe(failed_with_answer), 0.5);
    }

    #[test]
    fn disabled_stays_at_one() {
        let mut c = AdaptiveController::new(AdaptiveConfig {
            enabled: false,
            ..AdaptiveConfig::default()
        });
        assert_eq!(c.observe(outcomes(0, 100)), 1.0);
        assert!(!c.wants_probe(0, 0));
    }
}
