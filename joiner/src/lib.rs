//! The joiner's building blocks (see docs/JOINER.md for the design they implement).
//!
//! - [`event`]: impression, click and conversion events from apps, as protobuf or JSON.
//! - [`log`]: feature logs held as their records' bytes, decoded but for packed float values.
//! - [`state`]: the event-time join of feature logs with those events, per task.
//! - [`rows`]: training rows as Arrow record batches with each feature's real type.
//! - [`sink`]: the Parquet dataset and its commit protocol (checkpoints, roll forward, recovery).
//! - [`time`]: calendar arithmetic (RFC 3339 event times, the dataset's UTC hours).
//!
//! - [`config`], [`run`]: the configuration and the Kafka runtime (router and join stages);
//!   [`align`] keeps a task's two inputs near each other in event time.

pub mod align;
mod buffer;
pub mod config;
mod dead_letter;
pub mod event;
pub mod log;
pub mod metrics;
#[cfg(test)]
mod proptests;
pub mod reason;
pub mod rows;
pub mod run;
pub mod sink;
pub mod state;
pub mod time;
