//! The join's rows do not depend on read order: the same feature logs and app events, fed in
//! any interleaving (events of one request split over partitions read in any order, repeated
//! impressions, labels before and after their impressions, features before or after both),
//! give the same rows, as long as every event arrives before the watermark passes it.

use std::collections::BTreeMap;

use featurelog_schemas::featurelog::v1::FeatureLog;
use proptest::prelude::*;

use crate::event::{Event, EventKind};
use crate::state::{JoinConfig, JoinState, Row};

const MIN: i64 = 60_000_000;

fn log(request: &str, at_min: i64, items: &[&str]) -> FeatureLog {
    FeatureLog {
        request_id: request.into(),
        served_at: Some(prost_types::Timestamp {
            seconds: at_min * 60,
            nanos: 0,
        }),
        row_count: items.len() as u32,
        candidate_ids: items.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Both waits `wait_us`, a label window, one events partition, no memory bound.
fn join_config(wait_us: i64, label_window_us: i64, out_of_orderness_us: i64) -> JoinConfig {
    JoinConfig {
        features_wait_us: wait_us,
        impressions_wait_us: wait_us,
        label_window_us: Some(label_window_us),
        max_out_of_orderness_us: out_of_orderness_us,
        negatives_rate: 0.0,
        max_bytes: usize::MAX,
        event_sources: 1,
    }
}

/// What is fed: a request's feature log, or an app event.
#[derive(Debug, Clone)]
enum Input {
    Features(String),
    Event(Event),
}

/// Impressions, clicks and conversions of three requests' two items, at whole seconds within
/// the first 40 minutes (the label window is 20): repeats and labels outside the window
/// included.
fn inputs() -> impl Strategy<Value = Vec<Input>> {
    let event = (0..3usize, 0..2usize, 0..3u8, 1..2400i64).prop_map(|(r, i, kind, at_s)| {
        let kind = match kind {
            0 => EventKind::Impression,
            1 => EventKind::Click,
            _ => EventKind::Conversion,
        };
        Input::Event(Event {
            request_id: format!("r{r}"),
            item_id: ["a", "b"][i].into(),
            time_us: at_s * 1_000_000,
            kind,
            labels: BTreeMap::new(),
            event_id: None,
        })
    });
    prop::collection::vec(event, 1..24).prop_map(|mut events| {
        events.extend((0..3).map(|r| Input::Features(format!("r{r}"))));
        events
    })
}

/// The rows of feeding `inputs` in order, then closing every window: what each row holds,
/// by request and item.
fn rows_of(inputs: &[Input]) -> BTreeMap<(String, String), (Option<i64>, u32, u32)> {
    let mut state = JoinState::new(join_config(60 * MIN, 20 * MIN, 0));
    let mut rows: Vec<Row> = Vec::new();
    for input in inputs {
        rows.extend(match input {
            Input::Features(request) => state.add_features(log(request, 0, &["a", "b"])),
            Input::Event(e) => state.add_event(e.clone()),
        });
    }
    // Both inputs move past every window: everything closes.
    rows.extend(state.source_progress(0, 1_000 * MIN));
    rows.extend(state.add_features(log("end", 1_000, &["z"])));
    rows.into_iter()
        .map(|r| {
            let labels = (r.labels.clicks, r.labels.conversions);
            (
                (r.request_id, r.item_id),
                (r.impression_time_us, labels.0, labels.1),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(super::config(512))]

    #[test]
    fn rows_are_the_same_whatever_the_read_order(
        (inputs, shuffled) in inputs().prop_flat_map(|inputs| {
            (Just(inputs.clone()), Just(inputs).prop_shuffle())
        })
    ) {
        let want = rows_of(&inputs);
        prop_assert_eq!(rows_of(&shuffled), want);
    }
}

/// A step of a run as the runtime reads: a request's feature log, an app event, the router's
/// progress to a second, or a commit.
#[derive(Debug, Clone)]
enum Step {
    Features(usize),
    Event(Event),
    Progress(i64),
    Commit,
}

/// Four requests' logs served within ten minutes (each at one time, a repeat being a retry);
/// each of their items' events within two minutes of the item's first, at any time within
/// fifteen (before its log, after the log expired), read in time order but for up to 30 s (the
/// out-of-orderness allowed); progress and commits in between. Outside the property: a
/// candidate's events further apart than its impressions' wait (the earliest one times its
/// entry out, and whether a later one is folded into it before or comes after is read order).
fn steps() -> impl Strategy<Value = ([i64; 4], Vec<Step>)> {
    let step = |first_s: [i64; 8]| {
        prop_oneof![
            3 => (0..8usize, 0..3u8, 0..120i64).prop_map(move |(c, kind, after_s)| {
                let kind = match kind {
                    0 | 1 => EventKind::Impression,
                    _ => EventKind::Click,
                };
                Step::Event(Event {
                    request_id: format!("r{}", c / 2),
                    item_id: ["a", "b"][c % 2].into(),
                    time_us: (first_s[c] + after_s) * 1_000_000,
                    kind,
                    labels: BTreeMap::new(),
                    event_id: None,
                })
            }),
            1 => (0..4usize).prop_map(Step::Features),
            1 => (0..900i64).prop_map(Step::Progress),
            1 => Just(Step::Commit),
        ]
    };
    let read_order = |mut steps: Vec<(Step, i64)>| {
        let mut events: Vec<(i64, Step)> = steps
            .iter()
            .filter_map(|(step, late_s)| match step {
                Step::Event(e) => Some((e.time_us + late_s * 1_000_000, step.clone())),
                _ => None,
            })
            .collect();
        events.sort_by_key(|(at, _)| *at);
        let mut events = events.into_iter().map(|(_, step)| step);
        for (step, _) in &mut steps {
            if matches!(step, Step::Event(_)) {
                *step = events.next().unwrap_or(Step::Commit);
            }
        }
        steps.into_iter().map(|(step, _)| step).collect::<Vec<_>>()
    };
    (
        prop::array::uniform4(0..600i64),
        prop::array::uniform8(0..780i64),
    )
        .prop_flat_map(move |(served, first)| {
            let steps = prop::collection::vec((step(first), 0..30i64), 1..40);
            (Just(served), steps.prop_map(read_order))
        })
}

/// The rows of a run (with repeats), with events taken by `take_event` when `hold` (and held
/// ones joined at each commit), else by `add_event`. With a label window, as the property
/// above: without one a row goes out when impression and features meet, so a click or a second
/// impression read after that is late, and read order decides. Counts are not compared for the
/// same reason (a repeated impression is folded into its pending entry, or counts as late).
fn run(served_s: [i64; 4], steps: &[Step], hold: bool) -> Vec<RowValues> {
    let mut state = JoinState::new(join_config(4 * MIN, 2 * MIN, 30_000_000));
    let mut rows: Vec<Row> = Vec::new();
    let served = |r: usize| {
        let mut log = log(&format!("r{r}"), 0, &["a", "b"]);
        log.served_at = Some(prost_types::Timestamp {
            seconds: served_s[r],
            nanos: 0,
        });
        log
    };
    for step in steps {
        rows.extend(match step {
            Step::Features(r) => state.add_features(served(*r)),
            Step::Event(e) if hold => state.take_event(e.clone()),
            Step::Event(e) => state.add_event(e.clone()),
            Step::Progress(at_s) => state.source_progress(0, at_s * 1_000_000),
            Step::Commit if hold => state.release_held(),
            Step::Commit => Vec::new(),
        });
    }
    rows.extend(state.release_held());
    rows.extend(state.source_progress(0, 1_000 * MIN));
    rows.extend(state.add_features(log("end", 1_000, &["z"])));
    let mut rows: Vec<RowValues> = rows
        .into_iter()
        .map(|r| {
            let t = r.impression_time_us;
            (r.request_id, r.item_id, t, r.labels.clicks)
        })
        .collect();
    rows.sort();
    rows
}

type RowValues = (String, String, Option<i64>, u32);

proptest! {
    #![proptest_config(super::config(512))]

    /// Holding impressions ahead of the feature logs until the logs reach them (state/ahead.rs)
    /// gives the rows of joining each on arrival.
    #[test]
    fn holding_events_ahead_of_the_logs_changes_no_row((served, steps) in steps()) {
        prop_assert_eq!(run(served, &steps, true), run(served, &steps, false));
    }
}

/// The case that found it, in minutes: impressions at t and t + 2.5, a click at t + 21.7 and a
/// 20-minute window. The click is outside the earliest impression's window whichever
/// impression is read first (it was counted when the later one was read first).
#[test]
fn a_click_is_judged_against_the_earliest_impression_in_either_order() {
    let at = |s: f64| (s * 60.0 * 1_000_000.0) as i64;
    let event = |kind, t| {
        Input::Event(Event {
            request_id: "r0".into(),
            item_id: "a".into(),
            time_us: t,
            kind,
            labels: BTreeMap::new(),
            event_id: None,
        })
    };
    let first = event(EventKind::Impression, at(1.0));
    let second = event(EventKind::Impression, at(3.5));
    let click = event(EventKind::Click, at(22.7));
    let features = Input::Features("r0".into());
    let a = rows_of(&[
        features.clone(),
        second.clone(),
        click.clone(),
        first.clone(),
    ]);
    let b = rows_of(&[features, first, click, second]);
    assert_eq!(a, b);
    assert_eq!(a[&("r0".to_owned(), "a".to_owned())], (Some(at(1.0)), 0, 0));
}
