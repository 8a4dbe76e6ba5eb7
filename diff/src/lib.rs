//! `featurelog-diff`: the skew audit behind `featurelog diff` (docs/DIFF.md). It compares the
//! features a model was served (usually the joiner's Parquet output) with an offline
//! pipeline's, keyed by e.g. `request_id,item_id`, and explains each difference.
//!
//! ```no_run
//! use featurelog_diff::{DiffOptions, run};
//! let opts = DiffOptions::new("served/", "offline.parquet", vec!["request_id".into(), "item_id".into()]);
//! let report = run(&opts)?;
//! print!("{}", report.render_terminal());
//! std::process::exit(i32::from(report.verdict().exit_code()));
//! # Ok::<(), featurelog_diff::DiffError>(())
//! ```
//!
//! Why arrow's kernels and a hash join of our own rather than DataFusion or polars: the diff
//! needs one keyed pass with per-row work no SQL engine offers (classifying each mismatching
//! pair, bounded top-pair counting, distributions binned on the other side's quantiles), the
//! workspace already builds arrow and parquet 59, and either engine would add minutes of
//! compilation on a 2-core machine for a join that is a hundred lines here.
//!
//! Modules: [`input`](crate) reads files (`delta` lists a Delta table's through its log), `keys` canonicalizes join keys, `plan` matches
//! schemas, `values` compares, classifies and prints values, `stats` accumulates, `store`
//! holds the offline side and `index` its keys, `probe` streams the served side through them,
//! `engine` runs the join, `summary` makes each feature's report of what was counted,
//! [`report`] holds the result and `render` prints it.

mod bins;
mod delta;
mod engine;
mod error;
mod index;
mod input;
mod keys;
mod options;
mod plan;
mod probe;
mod remote;
pub mod render;
pub mod report;
mod stats;
mod store;
mod summary;
mod values;

pub use engine::run;
pub use error::DiffError;
pub use options::{
    CoverageLimits, DiffOptions, EffectiveLimits, FeatureLimits, SchemaLimits, Thresholds,
};
pub use plan::CONTEXT_COLUMNS;
pub use report::{Report, Verdict};
pub use values::Domain;
