//! The joiner's building blocks (see docs/JOINER.md for the design they implement).
//!
//! - [`event`]: impression, click and conversion events from apps, as protobuf or JSON.
//! - [`state`]: the event-time join of feature logs with those events, per task.
//! - [`rows`]: training rows as Arrow record batches with each feature's real type.
//! - [`sink`]: the Parquet dataset and its commit protocol (checkpoints, roll forward, recovery).
//!
//! The Kafka runtime, state snapshots and `featurelog join` are not built yet.

pub mod event;
pub mod rows;
pub mod sink;
pub mod state;
