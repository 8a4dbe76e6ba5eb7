//! Unit tests of the runtime's pure parts: where held logs are kept, static member ids, stage
//! supervision and threads, the repartition topic's partitioner and records, a checkpoint's events
//! partitioning, and a task's named inputs.

use std::time::{Duration, Instant};

use featurelog_kafka::admin::TopicRetention;
use prost::Message as _;

use super::consumer::static_member_id;
use super::error::JoinError;
use super::inputs::Inputs;
use super::recover::same_partitioning;
use super::repartition::{RoutedEvents, murmur2_partition, to_impression};
use super::start::choose_held_logs;
use super::supervise::{FENCES_ALLOWED, restarting_after_fences};
use super::task::events_key;
use super::thread::{Ticks, on_thread, wait_unless_shutdown};
use crate::align::Input;
use crate::config::{EventsPartitioning, HeldLogs};
use crate::event::{self, Event, EventKind};
use crate::metrics::JoinMetrics;
use crate::sink::Checkpoint;

#[test]
fn held_logs_stay_in_the_topic_only_when_its_retention_covers_a_restore() {
    let hour = Duration::from_secs(3600);
    let keeps = |days: u64| TopicRetention {
        retention: Some(Duration::from_secs(days * 24 * 3600)),
        retention_bytes: None,
        compacted: false,
        deletes: true,
    };
    let unknown = || {
        Err(featurelog_kafka::KafkaError::DescribeTopic {
            topic: "f".into(),
            reason: "not supported".into(),
        })
    };
    let choose = |mode, r| choose_held_logs(mode, "f", r, 26 * hour);
    assert!(choose(HeldLogs::Auto, Ok(keeps(7))).unwrap());
    assert!(choose(HeldLogs::Topic, Ok(keeps(7))).unwrap());
    assert!(!choose(HeldLogs::StateFiles, Ok(keeps(7))).unwrap());
    // A day of retention is less than the 26 hours a restore may need.
    assert!(!choose(HeldLogs::Auto, Ok(keeps(1))).unwrap());
    assert!(!choose(HeldLogs::Auto, unknown()).unwrap());
    let refused = choose(HeldLogs::Topic, Ok(keeps(1)))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("retention.ms >= 93600000") && refused.contains("state-files"),
        "{refused}"
    );
    assert!(choose(HeldLogs::Topic, unknown()).is_err());
}

#[test]
fn static_member_ids_are_legal_and_change_with_the_topics_read() {
    let a = static_member_id("joiner-0", &["f", "r"]);
    assert!(a.starts_with("joiner-0-"), "{a}");
    assert_eq!(a, static_member_id("joiner-0", &["f", "r"]));
    assert_ne!(a, static_member_id("joiner-0", &["f", "e"]));
    assert_ne!(a, static_member_id("joiner-0", &["fr"]));
    let odd = static_member_id("pod 3/ü", &["f"]);
    assert!(
        odd.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
        "{odd}"
    );
}

#[tokio::test]
async fn a_stage_that_panics_on_its_thread_stops_the_joiner_with_an_error() {
    let err = on_thread("test-router", "router", || -> Result<(), JoinError> {
        panic!("poison record")
    })
    .await
    .unwrap_err();
    assert!(
        matches!(&err, JoinError::Panicked { stage: "router", message } if message == "poison record"),
        "{err}"
    );
    let named = on_thread("test-router", "router", || {
        Ok(std::thread::current().name().map(str::to_owned))
    })
    .await;
    assert_eq!(named.unwrap().as_deref(), Some("test-router"));
}

#[tokio::test]
async fn a_retry_wait_ends_at_shutdown_not_at_its_timeout() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let started = Instant::now();
    assert!(!wait_unless_shutdown(&shutdown, Duration::from_millis(50)));
    assert!(started.elapsed() >= Duration::from_millis(50));
    let waiting = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            (
                wait_unless_shutdown(&shutdown, Duration::from_secs(60)),
                started.elapsed(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    shutdown.cancel();
    let (stopped, waited) = waiting.join().unwrap();
    assert!(stopped);
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    // Already cancelled: no wait at all.
    assert!(wait_unless_shutdown(&shutdown, Duration::from_secs(60)));
}

#[test]
fn ticks_are_due_at_once_then_every_interval_without_piling_up() {
    let every = Duration::from_millis(40);
    let mut ticks = Ticks::new(every);
    assert!(ticks.due(Instant::now()));
    assert!(!ticks.due(Instant::now()));
    assert!(ticks.poll_timeout(Instant::now()) <= every);
    std::thread::sleep(every * 4);
    // Four intervals late: one tick, and the next a whole interval on.
    assert!(ticks.due(Instant::now()));
    assert!(!ticks.due(Instant::now()));
    assert!(ticks.poll_timeout(Instant::now()) > every / 2);
}

fn fenced() -> JoinError {
    JoinError::Fenced {
        what: "join consumer",
        reason: "Static consumer fenced by other consumer with same group.instance.id".into(),
    }
}

#[tokio::test]
async fn a_stage_fenced_after_an_outage_starts_again_and_runs_on() {
    let metrics = JoinMetrics::new();
    let mut runs = 0;
    let outcome = restarting_after_fences(&metrics, || {
        runs += 1;
        let result = if runs <= FENCES_ALLOWED {
            Err(fenced())
        } else {
            Ok(())
        };
        async move { result }
    })
    .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(runs, FENCES_ALLOWED + 1);
    assert!(
        metrics.render().contains(&format!(
            "featurelog_join_stage_restarts_total {FENCES_ALLOWED}"
        )),
        "{}",
        metrics.render()
    );
}

#[tokio::test]
async fn a_stage_fenced_again_and_again_stops_the_joiner_with_what_to_do() {
    let metrics = JoinMetrics::new();
    let mut runs = 0;
    let outcome = restarting_after_fences(&metrics, || {
        runs += 1;
        async { Err(fenced()) }
    })
    .await;
    let err = outcome.unwrap_err();
    assert!(matches!(err, JoinError::Fatal { .. }), "{err}");
    assert_eq!(runs, FENCES_ALLOWED + 1);
    let text = err.to_string();
    assert!(
        text.contains("another live process of this group runs with the same `instance`")
            && text.contains("4 times within 600 s"),
        "{text}"
    );
    // Any other error ends the stage at once.
    let mut runs = 0;
    let outcome = restarting_after_fences(&metrics, || {
        runs += 1;
        async { Err(JoinError::NoTopic("features".into())) }
    })
    .await;
    assert!(matches!(outcome, Err(JoinError::NoTopic(_))));
    assert_eq!(runs, 1);
}

#[test]
fn the_router_partitions_as_kafka_s_murmur2_does() {
    // From org.apache.kafka.common.utils.Utils.murmur2 (kafka-clients 4.1.1), through
    // toPositive, modulo 4 and 7 partitions.
    let want = [
        ("a", 0, 5),
        ("ab", 2, 0),
        ("abc", 3, 4),
        ("abcd", 0, 5),
        ("req-7", 0, 4),
        ("21", 0, 3),
        ("a-little-bit-long-string", 0, 1),
        ("request-0123456789abcdef", 3, 2),
    ];
    for (key, four, seven) in want {
        assert_eq!(murmur2_partition(key.as_bytes(), 4), four, "{key:?} of 4");
        assert_eq!(murmur2_partition(key.as_bytes(), 7), seven, "{key:?} of 7");
    }
}

#[test]
fn a_batch_of_routed_events_decodes_to_the_same_events_in_order() {
    let events: Vec<Event> = (0..3)
        .map(|i| Event {
            request_id: format!("r{i}"),
            item_id: format!("item-{i}"),
            time_us: 1_764_439_200_000_000 + i,
            kind: if i == 1 {
                EventKind::Click
            } else {
                EventKind::Other(format!("kind {i}"))
            },
            labels: [("price".to_string(), 1.5 * i as f64)]
                .into_iter()
                .collect(),
            // The router carries the id the app gave, for the task to drop retries.
            event_id: (i != 2).then(|| format!("ev-{i}")),
        })
        .collect();
    let mut buf = Vec::new();
    for e in &events {
        prost::encoding::message::encode(1, &to_impression(e.clone()), &mut buf);
    }
    let batch = RoutedEvents::decode(buf.as_slice()).unwrap();
    let back: Vec<Event> = batch
        .events
        .into_iter()
        .map(|m| event::from_impression(m).unwrap())
        .collect();
    assert_eq!(back, events);
}

#[test]
fn a_checkpoint_of_the_other_events_partitioning_is_refused() {
    let checkpoint = |events_key: &str| Checkpoint {
        task: "features-3".into(),
        epoch: 7,
        offsets: [("features".to_string(), 10), (events_key.to_string(), 20)].into(),
        watermark_us: 0,
        files: Vec::new(),
        state: None,
        staging: String::new(),
    };
    let direct = checkpoint(events_key(EventsPartitioning::ByRequestId));
    assert!(same_partitioning(&direct, EventsPartitioning::ByRequestId).is_ok());
    let err = same_partitioning(&direct, EventsPartitioning::Any).unwrap_err();
    assert!(
        matches!(
            &err,
            JoinError::PartitioningChanged { task, written: "by-request-id", configured: "any" }
                if task == "features-3"
        ),
        "{err}"
    );
    let routed = checkpoint(events_key(EventsPartitioning::Any));
    assert!(same_partitioning(&routed, EventsPartitioning::Any).is_ok());
    assert!(same_partitioning(&routed, EventsPartitioning::ByRequestId).is_err());
}

#[test]
fn a_task_s_inputs_are_named_in_the_order_alignment_numbers_them() {
    let mut next = Inputs {
        features: 1,
        events: 2,
    };
    *next.get_mut(Input::Events) += 1;
    assert_eq!(
        (*next.get(Input::Features), *next.get(Input::Events)),
        (1, 3)
    );
}
