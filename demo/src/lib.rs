//! `featurelog demo`: the whole pipeline on one machine, end to end.
//!
//! It starts a broker (librdkafka's embedded mock cluster, or a real one), the reference model
//! server, the sidecar in front of it in logging mode and the joiner; sends recommender traffic
//! through the sidecar while an app publishes impressions and clicks as JSON; waits until the
//! joiner has written every impressed candidate as a Parquet row; recomputes the same features
//! the way a careless offline pipeline would; and runs the diff on the two.
//!
//! Each part runs in this process through its library, with the same configuration files a
//! deployment would use (written into the output folder, so they can be read and reused).

mod configs;
mod error;
mod offline;
mod rows;
mod run;
mod traffic;
pub mod world;

use std::path::PathBuf;
use std::time::Duration;

pub use error::DemoError;
pub use rows::{Counted, count_rows};
pub use run::run;

/// How big a demo to run, and where.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The output folder: configs, the dataset, the offline table and the reports.
    pub out_dir: PathBuf,
    /// A real broker's bootstrap servers; `None` runs the embedded one.
    pub kafka: Option<String>,
    /// Inference requests to send.
    pub requests: u64,
    /// Candidates scored per request.
    pub candidates: usize,
    /// Requests per second.
    pub rate: u32,
    /// Fraction of scored candidates the app shows.
    pub impression_rate: f64,
    /// Fraction of shown candidates clicked.
    pub click_rate: f64,
    /// Seed of the synthetic world.
    pub seed: u64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            out_dir: PathBuf::from("featurelog-demo"),
            kafka: None,
            requests: 2_000,
            candidates: 100,
            rate: 250,
            impression_rate: 0.03,
            click_rate: 0.2,
            seed: 42,
        }
    }
}

/// What the demo is doing, for progress lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Sending traffic.
    Traffic,
    /// Waiting for the joiner to write every row.
    Joining,
}

/// A progress report, about once a second.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// The stage.
    pub stage: Stage,
    /// Inference calls answered.
    pub requests: u64,
    /// FeatureLog records the sidecar produced.
    pub records: u64,
    /// Rows the joiner has committed to the dataset.
    pub rows: u64,
    /// Rows expected when done.
    pub expected_rows: u64,
}

/// What the demo did and found.
#[derive(Debug)]
pub struct Summary {
    /// The output folder.
    pub out_dir: PathBuf,
    /// The joiner's dataset.
    pub dataset: PathBuf,
    /// The offline pipeline's table.
    pub offline: PathBuf,
    /// The HTML report.
    pub html: PathBuf,
    /// Inference calls made.
    pub requests: u64,
    /// Candidates scored.
    pub candidates: u64,
    /// Impressions and clicks the app published.
    pub impressions: u64,
    /// See `impressions`.
    pub clicks: u64,
    /// Bytes of the requests the sidecar saw (gRPC bodies).
    pub request_bytes: u64,
    /// Bytes of the records it produced after the allow list.
    pub record_bytes: u64,
    /// Records produced.
    pub records: u64,
    /// Rows in the dataset.
    pub rows: u64,
    /// Parquet files in the dataset.
    pub files: u64,
    /// The diff report.
    pub report: featurelog_diff::Report,
    /// Wall time.
    pub elapsed: Duration,
}
