//! Read-ahead alignment: keeps a task's two inputs, its feature-log partition and its events
//! partition, within `join.max-read-ahead` of each other in event time.
//!
//! A task holds each feature log until the events' side of the watermark passes its window.
//! When one input is read far ahead of the other (a joiner catching up on a backlog, where the
//! router still has to move the events while the feature logs are there to read; a router
//! that was down), everything read ahead waits in memory: the state grows with the backlog,
//! not with the traffic, and its churn costs CPU per record. Kafka is the better buffer. So a
//! partition that runs more than `max-read-ahead` ahead of the other input is paused (the
//! join loop leaves its queue unread; librdkafka stops fetching it once the queue is full),
//! and resumed once the other input is within half of that (the gap keeps a partition from
//! being paused and resumed on every record), and only while that other input has records
//! left to read, so that it catches up by reading them. The inputs never both pause. The rows
//! do not change: the join runs on event time, whatever the order in which records are read.

use crate::state::InputTimes;

/// The two inputs of a task, in the order of `Task::next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The feature-log partition.
    Features = 0,
    /// The events partition (the repartition topic's, or the co-partitioned events topic's).
    Events = 1,
}

/// A change to whether one of a task's inputs is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Stop reading it.
    Pause(Input),
    /// Read it again.
    Resume(Input),
}

/// How far the events may be read ahead of the feature logs, in microseconds of event time,
/// whatever `max-read-ahead` allows (while feature logs are left to read). An impression read
/// before its request's feature log waits in the pending table and is matched when the log
/// comes, which costs more than joining it as it is read; and holding an input back costs
/// nothing, as the join loop only leaves its queue unread.
const EVENTS_AHEAD_US: i64 = 0;

/// How often [`Alignment::decide_at`] may ask whether an input has records left: `now_us`
/// on a monotonic clock, at most once every `us`.
#[derive(Debug, Clone, Copy)]
pub struct Every {
    /// Now, in microseconds of a monotonic clock.
    pub now_us: i64,
    /// The least time between two questions about one input.
    pub us: i64,
}

/// Whether a task's inputs are paused.
#[derive(Debug, Clone, Default)]
pub struct Alignment {
    /// `None` until the first decision, which is reported as a change whatever it is.
    paused: [Option<bool>; 2],
    /// When each input last asked whether the other has records left (see
    /// [`Alignment::decide_at`]): a paused input, whether to go on; a running one, the last
    /// time the answer was no.
    asked_us: [Option<i64>; 2],
}

impl Alignment {
    /// The changes that keep the inputs within `max_ahead_us` of each other, given where they
    /// are; records them as made. `features_wait_us` places the events' side while it is not
    /// known yet (see [`behind`]).
    pub fn decide(
        &mut self,
        times: &InputTimes,
        max_ahead_us: i64,
        features_wait_us: i64,
        has_unread: impl Fn(Input) -> bool,
    ) -> Vec<Change> {
        let every = Every { now_us: 0, us: 0 };
        self.decide_at(times, max_ahead_us, features_wait_us, every, has_unread)
    }

    /// [`Alignment::decide`], asking `has_unread` about an input at most once every
    /// `every.us`. The question is the consumer's position against the partition's end, a
    /// call into librdkafka that costs more than the join of a record; and its answer flips
    /// each time the other input reaches its end between two of the router's transactions.
    /// A pause and resume on every flip would hold an input back and release it record by
    /// record. So an input past the bound pauses
    /// as soon as the other has records left; paused, it asks again only after `every.us`;
    /// running because the other was read to its end, likewise.
    pub fn decide_at(
        &mut self,
        times: &InputTimes,
        max_ahead_us: i64,
        features_wait_us: i64,
        every: Every,
        has_unread: impl Fn(Input) -> bool,
    ) -> Vec<Change> {
        // Feature logs are measured against the events' progress, which decides when they
        // leave the state; events against the feature logs read, which they wait for.
        let features = self.next(
            Input::Features,
            lead(times.features, behind(times, features_wait_us)),
            max_ahead_us,
            every,
            || has_unread(Input::Events),
        );
        // The events' progress can only move while their input is read: with the feature logs
        // paused for it, the events never pause. Before any feature log is read (a task
        // starting on a backlog, whose first fetch of events came before its first feature
        // log), the events read ahead of the first one read: otherwise that fetch, and every
        // one after it until a feature log came, would all wait in the state.
        let events_lead = if features {
            None
        } else {
            lead(
                times.events_read,
                times.features.or(times.events_first_read),
            )
        };
        let events_ahead_us = EVENTS_AHEAD_US.min(max_ahead_us);
        let events = self.next(Input::Events, events_lead, events_ahead_us, every, || {
            has_unread(Input::Features)
        });
        let mut changes = Vec::new();
        for (input, pause) in [(Input::Features, features), (Input::Events, events)] {
            if self.paused[input as usize] != Some(pause) {
                self.paused[input as usize] = Some(pause);
                changes.push(if pause {
                    Change::Pause(input)
                } else {
                    Change::Resume(input)
                });
            }
        }
        changes
    }

    /// Whether `input` should be paused, `lead` ahead of the other input: past the bound it is,
    /// within half of it it is not, and in between it stays as it is. Only while the other
    /// input has records left to read (`other_unread`, asked only then, and only as often as
    /// `every` allows): it catches up by reading them. An input read to its end moves by its
    /// idle timeout or by new records, which may be long in coming; pausing against it would
    /// hold back rows that could be joined now (an impression whose click, minutes of event
    /// time later, is already read).
    fn next(
        &mut self,
        input: Input,
        lead: Option<i64>,
        max_ahead_us: i64,
        every: Every,
        other_unread: impl FnOnce() -> bool,
    ) -> bool {
        let i = input as usize;
        let paused = self.paused[i].unwrap_or(false);
        let wanted = match lead {
            Some(lead) if lead > max_ahead_us => true,
            Some(lead) if lead > max_ahead_us / 2 => paused,
            _ => false,
        };
        if !wanted {
            self.asked_us[i] = None;
            return false;
        }
        if self.asked_us[i].is_some_and(|at| every.now_us.saturating_sub(at) < every.us) {
            return paused;
        }
        self.asked_us[i] = Some(every.now_us);
        other_unread()
    }

    /// Whether the input is paused.
    pub fn is_paused(&self, input: Input) -> bool {
        self.paused[input as usize] == Some(true)
    }
}

fn lead(ahead: Option<i64>, other: Option<i64>) -> Option<i64> {
    Some(ahead?.saturating_sub(other?))
}

/// The events' side that feature logs are measured against: how far the events have been read,
/// or, before every events partition has reported, where it would have to be for the oldest
/// feature log held to be due (its served time plus `features-wait`): a task starting on a
/// backlog then reads `max-read-ahead` of feature logs past that, not the whole backlog, while
/// the router catches up.
fn behind(times: &InputTimes, features_wait_us: i64) -> Option<i64> {
    times.events.or_else(|| {
        times
            .oldest_held
            .map(|served| served.saturating_add(features_wait_us))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    /// Events read as far as their progress.
    fn times(features: Option<i64>, events: Option<i64>, oldest_held: Option<i64>) -> InputTimes {
        InputTimes {
            features,
            events,
            events_read: events,
            events_first_read: events,
            oldest_held,
        }
    }

    #[test]
    fn a_new_task_says_where_both_partitions_stand() {
        let mut a = Alignment::default();
        let changes = a.decide(&times(None, None, None), 30 * S, 600 * S, |_| true);
        assert_eq!(
            changes,
            vec![
                Change::Resume(Input::Features),
                Change::Resume(Input::Events)
            ]
        );
        assert!(
            a.decide(&times(None, None, None), 30 * S, 600 * S, |_| true)
                .is_empty()
        );
    }

    #[test]
    fn feature_logs_far_ahead_of_the_events_pause_until_half_the_bound() {
        let mut a = Alignment::default();
        a.decide(&times(None, None, None), 30 * S, 600 * S, |_| true);
        assert_eq!(
            a.decide(
                &times(Some(131 * S), Some(100 * S), None),
                30 * S,
                600 * S,
                |_| true
            ),
            vec![Change::Pause(Input::Features)]
        );
        assert!(a.is_paused(Input::Features));
        // Within the bound but not yet within half of it: still paused.
        assert!(
            a.decide(
                &times(Some(131 * S), Some(110 * S), None),
                30 * S,
                600 * S,
                |_| true
            )
            .is_empty()
        );
        assert_eq!(
            a.decide(
                &times(Some(131 * S), Some(117 * S), None),
                30 * S,
                600 * S,
                |_| true
            ),
            vec![Change::Resume(Input::Features)]
        );
    }

    #[test]
    fn whether_the_other_input_has_records_is_asked_at_most_once_a_period() {
        let at = |now_us: i64| Every { now_us, us: S };
        let mut a = Alignment::default();
        a.decide(&times(None, None, None), 30 * S, 600 * S, |_| true);
        let far = times(Some(131 * S), Some(100 * S), None);
        // Past the bound with the events read to their end: it runs, and asks again only a
        // period later.
        let asked = std::cell::Cell::new(0);
        let ends = |_| {
            asked.set(asked.get() + 1);
            false
        };
        assert!(a.decide_at(&far, 30 * S, 600 * S, at(0), ends).is_empty());
        assert!(
            a.decide_at(&far, 30 * S, 600 * S, at(S / 2), ends)
                .is_empty()
        );
        assert_eq!(asked.get(), 1);
        // A period later the events have records again: it pauses at once.
        assert_eq!(
            a.decide_at(&far, 30 * S, 600 * S, at(S), |_| true),
            vec![Change::Pause(Input::Features)]
        );
        // Paused, the events read to their end: it stays paused until a period has passed.
        assert!(
            a.decide_at(&far, 30 * S, 600 * S, at(S + S / 2), ends)
                .is_empty()
        );
        assert_eq!(asked.get(), 1);
        assert_eq!(
            a.decide_at(&far, 30 * S, 600 * S, at(2 * S), ends),
            vec![Change::Resume(Input::Features)]
        );
        // Within half the bound it runs without asking; past the bound again it asks at once.
        let near = times(Some(131 * S), Some(117 * S), None);
        let never = |_| -> bool { unreachable!("asked within half the bound") };
        assert!(
            a.decide_at(&near, 30 * S, 600 * S, at(2 * S), never)
                .is_empty()
        );
        assert_eq!(
            a.decide_at(&far, 30 * S, 600 * S, at(2 * S), |_| true),
            vec![Change::Pause(Input::Features)]
        );
    }

    #[test]
    fn events_far_ahead_of_the_feature_logs_pause() {
        let mut a = Alignment::default();
        a.decide(&times(None, None, None), 30 * S, 600 * S, |_| true);
        assert_eq!(
            a.decide(
                &times(Some(100 * S), Some(140 * S), None),
                30 * S,
                600 * S,
                |_| true
            ),
            vec![Change::Pause(Input::Events)]
        );
        assert!(!a.is_paused(Input::Features));
    }

    #[test]
    fn before_the_events_report_feature_logs_are_read_a_window_and_the_bound_ahead() {
        let mut a = Alignment::default();
        a.decide(&times(None, None, None), 30 * S, 600 * S, |_| true);
        // Oldest held served at 0: due at 600 s; read up to 630 s.
        assert!(
            a.decide(
                &times(Some(620 * S), None, Some(0)),
                30 * S,
                600 * S,
                |_| true
            )
            .is_empty()
        );
        assert_eq!(
            a.decide(
                &times(Some(640 * S), None, Some(0)),
                30 * S,
                600 * S,
                |_| true
            ),
            vec![Change::Pause(Input::Features)]
        );
    }

    #[test]
    fn events_read_ahead_of_their_progress_pause_only_while_the_feature_logs_read() {
        let mut a = Alignment::default();
        // One events partition's progress lags: the events read are 100 s ahead of the
        // feature logs, which are 50 s ahead of the progress.
        let lagging = InputTimes {
            features: Some(150 * S),
            events: Some(100 * S),
            events_read: Some(250 * S),
            events_first_read: Some(0),
            oldest_held: None,
        };
        a.decide(&lagging, 30 * S, 600 * S, |_| true);
        assert!(a.is_paused(Input::Features));
        assert!(
            !a.is_paused(Input::Events),
            "the progress needs the events read"
        );
    }

    #[test]
    fn an_input_read_to_its_end_holds_nothing_back() {
        let mut a = Alignment::default();
        a.decide(&times(None, None, None), 30 * S, 600 * S, |_| true);
        // An impression and its click ten minutes later, both read; no more feature logs.
        let far = times(Some(0), Some(600 * S), None);
        assert!(
            a.decide(&far, 30 * S, 600 * S, |i| i == Input::Events)
                .is_empty()
        );
        assert!(!a.is_paused(Input::Events));
        // While feature logs are left to read, the events wait for them.
        assert_eq!(
            a.decide(&far, 30 * S, 600 * S, |_| true),
            vec![Change::Pause(Input::Events)]
        );
        // Once they are all read, the events go on.
        assert_eq!(
            a.decide(&far, 30 * S, 600 * S, |i| i == Input::Events),
            vec![Change::Resume(Input::Events)]
        );
    }

    #[test]
    fn events_read_before_any_feature_log_wait_past_the_first() {
        let mut a = Alignment::default();
        let before = |read: i64| InputTimes {
            features: None,
            events: None,
            events_read: Some(read * S),
            events_first_read: Some(100 * S),
            oldest_held: None,
        };
        a.decide(&before(100), 30 * S, 600 * S, |_| true);
        assert!(!a.is_paused(Input::Events), "the first is read");
        // Past the first while feature logs are left to read: they wait, whatever the bound.
        assert_eq!(
            a.decide(&before(101), 30 * S, 600 * S, |_| true),
            vec![Change::Pause(Input::Events)]
        );
        // A feature-log partition read to its end (none came) holds nothing back.
        let mut b = Alignment::default();
        b.decide(&before(131), 30 * S, 600 * S, |i| i == Input::Events);
        assert!(!b.is_paused(Input::Events));
        // The first feature log, 10 s behind the events read: they still wait.
        let first_log = |features: i64| InputTimes {
            features: Some(features * S),
            ..before(131)
        };
        assert!(
            a.decide(&first_log(121), 30 * S, 600 * S, |_| true)
                .is_empty()
        );
        // Feature logs read up to the events: they resume.
        assert_eq!(
            a.decide(&first_log(131), 30 * S, 600 * S, |_| true),
            vec![Change::Resume(Input::Events)]
        );
    }

    #[test]
    fn events_wait_for_the_feature_logs_of_their_time_whatever_the_bound() {
        let mut a = Alignment::default();
        a.decide(
            &times(Some(100 * S), Some(100 * S), None),
            30 * S,
            600 * S,
            |_| true,
        );
        // An impression a second past the newest feature log read, while more are left: its
        // log is likely among them, so the events wait for them.
        assert_eq!(
            a.decide(
                &times(Some(100 * S), Some(101 * S), None),
                30 * S,
                600 * S,
                |_| true
            ),
            vec![Change::Pause(Input::Events)]
        );
        // No feature logs left to read (asked again once the period has passed): they go on.
        assert_eq!(
            a.decide_at(
                &times(Some(100 * S), Some(101 * S), None),
                30 * S,
                600 * S,
                Every { now_us: 0, us: 0 },
                |i| i == Input::Events
            ),
            vec![Change::Resume(Input::Events)]
        );
    }

    #[test]
    fn the_inputs_never_both_pause() {
        let mut a = Alignment::default();
        for f in (0..200).step_by(7) {
            for e in (0..200).step_by(11) {
                for read in [0, 40, 90] {
                    for oldest in [None, Some(0), Some(150 * S)] {
                        let t = InputTimes {
                            features: Some(f * S),
                            events: Some(e * S),
                            events_read: Some((e + read) * S),
                            events_first_read: Some(0),
                            oldest_held: oldest,
                        };
                        a.decide(&t, 10 * S, 60 * S, |_| true);
                        assert!(!(a.is_paused(Input::Features) && a.is_paused(Input::Events)));
                    }
                }
            }
        }
    }
}
