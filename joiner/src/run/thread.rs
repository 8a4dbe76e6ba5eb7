//! The stages' threads: each stage runs on a named thread of its own, which the async entry
//! ([`super::run`]) awaits without blocking the runtime; and how a stage's loop keeps time on
//! it: its ticks, a poll short enough to see a shutdown, a retry's wait that ends at shutdown.
//!
//! The join path calls blocking things only (the dataset's file and object-store requests,
//! librdkafka's metadata, offset and transaction calls): on a thread of its own a stage calls
//! them directly, and the runtime keeps only the metrics endpoint and the supervision.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::error::JoinError;

/// Starts `work` on a thread named `name` that logs where the caller logs (its tracing
/// dispatcher and span).
pub(super) fn spawn_named<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let span = tracing::Span::current();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || tracing::dispatcher::with_default(&dispatch, || span.in_scope(work)))
}

/// Runs stage `stage` on a thread named `name` and waits, without blocking the runtime, for
/// its end: its result, or its panic as [`JoinError::Panicked`].
pub(super) async fn on_thread<T: Send + 'static>(
    name: &str,
    stage: &'static str,
    work: impl FnOnce() -> Result<T, JoinError> + Send + 'static,
) -> Result<T, JoinError> {
    let (done, ended) = tokio::sync::oneshot::channel();
    spawn_named(name, move || {
        let _ = done.send(std::panic::catch_unwind(AssertUnwindSafe(work)));
    })
    .map_err(|source| JoinError::Thread { stage, source })?;
    match ended.await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => Err(JoinError::Panicked {
            stage,
            message: panic_message(panic.as_ref()),
        }),
        // The thread ended without sending: not after `catch_unwind`, short of an abort.
        Err(_) => Err(JoinError::Panicked {
            stage,
            message: "its thread ended without a result".into(),
        }),
    }
}

/// A panic's message, when it has one.
pub(super) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Waits `timeout`, or less if `shutdown` is cancelled meanwhile; true when it is. The token's
/// `cancelled()` future is polled here with a waker that unparks this thread: no runtime.
pub(super) fn wait_unless_shutdown(shutdown: &CancellationToken, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut cancelled = pin!(shutdown.cancelled());
    loop {
        if cancelled.as_mut().poll(&mut cx).is_ready() {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        // Returns early when unparked (or spuriously): the loop asks again.
        std::thread::park_timeout(left);
    }
}

/// Wakes a thread parked in [`wait_unless_shutdown`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The longest a stage's poll of its consumer waits for a record: how soon a quiet stage sees
/// a shutdown (librdkafka's poll cannot be woken from another thread).
pub(super) const POLL_AT_MOST: Duration = Duration::from_millis(100);

/// A stage's tick: due at once, then every `every`. A tick that comes late (the stage was busy
/// past it) runs once, and the next is due `every` after it: missed ticks do not pile up.
pub(super) struct Ticks {
    every: Duration,
    next: Instant,
}

/// How late a tick may run and still keep its schedule.
const LATE: Duration = Duration::from_millis(5);

impl Ticks {
    pub(super) fn new(every: Duration) -> Self {
        Self {
            every,
            next: Instant::now(),
        }
    }

    /// Whether the tick is due at `now`; if it is, the next one is scheduled. A stage's loop
    /// reads the clock once a record and passes it here and to [`Self::poll_timeout`]: a
    /// reading costs about 30 ns on a VM, and the router's loop read it three times an event.
    pub(super) fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = if now > self.next + LATE {
            now + self.every
        } else {
            self.next + self.every
        };
        true
    }

    /// How long a poll may wait: until the next tick, and at most [`POLL_AT_MOST`].
    pub(super) fn poll_timeout(&self, now: Instant) -> Duration {
        self.next.saturating_duration_since(now).min(POLL_AT_MOST)
    }
}
