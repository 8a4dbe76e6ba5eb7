//! Impressions read ahead of the feature logs: each is held back until the feature logs of its
//! time have been read, then joined as if it had been read then.
//!
//! An impression read before its request's log waits in the pending table: an entry keyed by
//! two ids, its place in the due index, the request's waiting list, and a match when the log
//! comes. An impression read after the log is joined on arrival with none of that. Read-ahead
//! alignment stops reading events once they are ahead of the logs, but a record of routed
//! events holds a batch that spans up to a second of event time, so most of a batch read from
//! a backlog used to take the pending path (perf: more than a quarter of the join thread).
//!
//! Holding an impression changes no row that read order does not already decide:
//! - the watermark never passes the features' progress (the newest served time read, or the
//!   quiet time declared), and an impression is held only while its time is after that
//!   progress. When the progress moves, the new log is taken, then the impressions it covers
//!   are joined, earliest first, and only then does the watermark move. So a held impression
//!   is never behind the watermark: with a label window the rows are those of any read order
//!   (proptests/join_order.rs).
//! - clicks and conversions are never held: one read before its impression is in the row
//!   whatever happens to the impression, as on arrival. Without a label window, where a row is
//!   written when its impression joins, one read after the impression joins the row too while
//!   the impression is held, as it would had the impression been read before its log.
//!
//! What is held is not in the state file: every commit joins all held impressions first
//! ([`JoinState::release_held`]), so the checkpoint's offsets never cover an event that is
//! neither in its state nor in its rows. Alignment bounds how many are held: events are not read
//! while the newest one read is ahead of the logs, so at most about one record's batch is.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::{JoinState, Row};
use crate::event::{Event, EventKind};

/// The held impressions, earliest first (in the order read among equal times). They mostly
/// come in time order: those go to the back of a queue, and only one earlier than the queue's
/// last goes to a heap, so that a held impression is moved twice, not once per level of a heap
/// (perf: moving them through a heap alone was 4% of the join thread).
///
/// Routed events interleave the batches of several event partitions, so many do come out of
/// order. The heap orders only their keys, each naming the slot of its event: a move is 24
/// bytes rather than an event's 128 (perf: the heap's moves of whole events were 4.5% of the
/// join thread at 1.8M records).
#[derive(Debug, Default)]
pub(super) struct Ahead {
    in_order: VecDeque<HeldEvent>,
    out_of_order: BinaryHeap<Reverse<HeapKey>>,
    /// The events the heap's keys name; `None` marks a slot listed in `free`.
    slots: Vec<Option<Event>>,
    free: Vec<usize>,
    read: u64,
}

#[derive(Debug)]
struct HeldEvent {
    time_us: i64,
    read: u64,
    event: Event,
}

impl HeldEvent {
    fn key(&self) -> (i64, u64) {
        (self.time_us, self.read)
    }
}

/// Event time, then the order read (unique per event, so the slot never decides), then the
/// slot of the event in [`Ahead::slots`].
type HeapKey = (i64, u64, usize);

impl Ahead {
    fn push(&mut self, event: Event) {
        self.read += 1;
        let (time_us, read) = (event.time_us, self.read);
        if self
            .in_order
            .back()
            .is_none_or(|last| last.time_us <= time_us)
        {
            self.in_order.push_back(HeldEvent {
                time_us,
                read,
                event,
            });
            return;
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                self.slots.len() - 1
            }
        };
        self.out_of_order.push(Reverse((time_us, read, slot)));
    }

    /// The earliest held impression, if it is at or before `up_to_us`.
    fn pop_until(&mut self, up_to_us: i64) -> Option<Event> {
        let queued = self.in_order.front().map(HeldEvent::key);
        let heaped = self
            .out_of_order
            .peek()
            .map(|&Reverse((time_us, read, _))| (time_us, read));
        let from_queue = match (queued, heaped) {
            (Some(q), Some(h)) => q < h,
            (q, _) => q.is_some(),
        };
        let (time_us, _) = if from_queue { queued } else { heaped }?;
        if time_us > up_to_us {
            return None;
        }
        if from_queue {
            return self.in_order.pop_front().map(|h| h.event);
        }
        let Reverse((_, _, slot)) = self.out_of_order.pop()?;
        let event = self.slots[slot].take();
        if self.out_of_order.is_empty() {
            // Every slot is free again: start over rather than keep a list of them.
            self.slots.clear();
            self.free.clear();
        } else {
            self.free.push(slot);
        }
        event
    }

    fn pop(&mut self) -> Option<Event> {
        self.pop_until(i64::MAX)
    }

    fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }
}

impl JoinState {
    /// Takes an event as [`JoinState::add_event`] does, or, when it is an impression ahead of
    /// the feature logs read, holds it until they reach its time (see the module's header);
    /// returns the rows it completes. The runtime reads events with this; the tables' own tests
    /// feed them in a chosen order with `add_event`.
    pub fn take_event(&mut self, event: Event) -> Vec<Row> {
        if event.kind != EventKind::Impression || event.time_us <= self.features_progress() {
            return self.add_event(event);
        }
        // Read, for alignment, although not joined yet.
        self.note_event_read(event.time_us);
        self.ahead.push(event);
        Vec::new()
    }

    /// Joins every held impression whatever its time, before the state is written: a state
    /// file does not hold them. Returns the rows that completes.
    pub fn release_held(&mut self) -> Vec<Row> {
        let mut out = Vec::new();
        while let Some(event) = self.ahead.pop() {
            self.join_event(event, &mut out);
        }
        self.advance_into(&mut out);
        out
    }

    /// Impressions held ahead of the feature logs.
    pub fn held_events(&self) -> usize {
        self.ahead.len()
    }

    /// Joins the held impressions that the features' progress has reached, without moving the
    /// watermark: the caller moves it after.
    pub(super) fn release_due_into(&mut self, out: &mut Vec<Row>) {
        let up_to = self.features_progress();
        while let Some(event) = self.ahead.pop_until(up_to) {
            self.join_event(event, out);
        }
    }

    /// How far the feature logs have been read in event time: the newest served time read, or
    /// the quiet time declared if later. The watermark never passes it.
    pub(super) fn features_progress(&self) -> i64 {
        self.max_features_us.max(self.features_idle_us)
    }
}

#[cfg(test)]
mod tests;
