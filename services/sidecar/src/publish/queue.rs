//! The bounded queue between the proxies and the publisher threads: what a call holds in it,
//! and the hand-over that never waits.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::TrySendError;

use crate::allowlist::AllowList;
use crate::extract::framing::request_model;

use super::{CapturedCall, Publisher, Shared};
use crate::reason::{Dropped, Skipped};

/// A call in the queue, with the allow list in force when it was made: a reload while it waits
/// does not change what is logged of it (nor the version its record carries).
pub(super) struct Queued {
    pub(super) call: CapturedCall,
    pub(super) allow_list: Arc<AllowList>,
    /// The call's body bytes, as counted in `Shared::queue_bytes`.
    pub(super) bytes: u64,
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

impl Publisher {
    /// Queues a call for logging, or drops and counts it when the queue is full (by calls or
    /// by bytes) or the publisher is shutting down. Never waits.
    pub fn submit(&self, mut call: CapturedCall) {
        let shared = &self.shared;
        if shared.closing.load(Ordering::Relaxed) {
            return shared.metrics.drop_call(Dropped::ShuttingDown);
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
                None => return shared.metrics.skip_call(Skipped::NotAllowListed),
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
            return shared.metrics.drop_call(Dropped::QueueFull);
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
                    TrySendError::Full(_) => Dropped::QueueFull,
                    TrySendError::Disconnected(_) => Dropped::ShuttingDown,
                });
            }
        }
    }

    /// Counts a call as in flight until the guard is dropped (see [`CallInFlight`]).
    pub fn call_in_flight(&self) -> CallInFlight {
        self.shared.calls_in_flight.fetch_add(1, Ordering::SeqCst);
        CallInFlight(self.shared.clone())
    }
}

/// The bytes of a call's request and response bodies.
pub(super) fn body_bytes(call: &CapturedCall) -> u64 {
    call.request
        .iter()
        .chain(&call.response)
        .map(|c| c.len() as u64)
        .sum()
}
