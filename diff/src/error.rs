//! The one error type of the diff: every failure names the path, column or key it concerns, so
//! a CI log says what to fix without a rerun.
//! A variant caused by another error (I/O, Parquet, Arrow) names it as its `source()` and not in
//! its own message, so that printing the chain (`{:#}` with anyhow) shows the cause once.

use std::path::PathBuf;

/// Why a diff could not be computed. Every variant is an error of input or configuration (exit
/// code 2 in the CLI); skew over a threshold is not an error but a [`crate::Verdict`].
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// An `s3://` input could not be listed or copied.
    #[error("{url}: {message}")]
    Remote {
        /// The input as given.
        url: String,
        /// What failed.
        message: String,
    },
    /// A Delta table's log could not be read, or the table holds what the diff cannot read.
    #[error("Delta table {table}{}: {problem}", at_version(*version))]
    Delta {
        /// The table's root, as given.
        table: String,
        /// The version read, when it was known.
        version: Option<u64>,
        /// What failed, with the kernel's message.
        problem: String,
    },
    /// `--version` (or `--offline-version`) names a version the table does not have yet.
    #[error("Delta table {table} has no version {version}; its newest is {newest}")]
    NoSuchVersion {
        /// The table's root, as given.
        table: String,
        /// The version asked for.
        version: u64,
        /// The table's newest version.
        newest: u64,
    },
    /// A file or directory could not be read.
    #[error("reading {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// With `complete_only`, a path holds data files only in directories not marked complete.
    #[error(
        "{path}: no data files in a directory marked complete (_SUCCESS in it or above it); {skipped} elsewhere were skipped (--complete-only)"
    )]
    NoCompleteInput {
        /// The path.
        path: PathBuf,
        /// Data files skipped.
        skipped: usize,
    },
    /// A path holds no data file (directories are searched recursively).
    #[error(
        "{path}: no .parquet or .csv files found (nor .csv.gz, .tsv, .tsv.gz, or extensionless Parquet files such as Hive's 000000_0)"
    )]
    NoInput {
        /// The path given.
        path: PathBuf,
    },
    /// A file whose name says neither Parquet nor CSV/TSV, and that is not Parquet.
    #[error(
        "{path}: not a Parquet file (it does not start with PAR1), and its name says no other format (.csv, .csv.gz, .tsv, .tsv.gz)"
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// A Parquet file could not be decoded.
    #[error("reading Parquet {path}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Arrow failed on a file (CSV parsing, a cast, a batch).
    #[error("reading {path}")]
    Arrow {
        /// The file.
        path: PathBuf,
        /// Arrow's error.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// The files of one side do not share a schema.
    #[error(
        "{path}: column {column} is {found} here but {expected} in the first file of that side"
    )]
    SchemaConflict {
        /// The file that differs.
        path: PathBuf,
        /// The column.
        column: String,
        /// Its type in the first file.
        expected: String,
        /// Its type here.
        found: String,
    },
    /// A key column is absent from one side.
    #[error(
        "key column {column} is missing from the {side} side ({path}); its columns: {available}"
    )]
    MissingKey {
        /// `served` or `offline`.
        side: &'static str,
        /// The path of that side.
        path: PathBuf,
        /// The key column (after renames).
        column: String,
        /// The columns that side has.
        available: String,
    },
    /// A key column has a type that cannot be compared with the other side's.
    #[error(
        "key column {column} on the {side} side is {data_type}: keys must be integers or strings"
    )]
    BadKeyType {
        /// `served` or `offline`.
        side: &'static str,
        /// The key column.
        column: String,
        /// Its Arrow type.
        data_type: String,
    },
    /// The options are inconsistent (no key, ...).
    #[error("{0}")]
    Options(String),
    /// An option or a thresholds entry names a column the side does not have (`--rename`,
    /// `--ignore`, `[feature.NAME]`), or a key column where a feature is meant.
    #[error("{what}: the {side} side has no column {column} (it has: {available})")]
    NoSuchColumn {
        /// The option or entry, as given (`--ignore price`, `thresholds [feature.price]`).
        what: String,
        /// `served` or `offline`.
        side: &'static str,
        /// The column named.
        column: String,
        /// The columns that side has.
        available: String,
    },
    /// A thresholds entry names a key column, or a tolerance that the feature's type does not
    /// take (an `abs-tolerance` for a timestamp, a `time-tolerance` for an integer, any for
    /// text).
    #[error("thresholds [feature.{feature}]: {message}")]
    Threshold {
        /// The feature's served name.
        feature: String,
        /// What is wrong, and what to write instead.
        message: String,
    },
    /// The thresholds file could not be read or parsed.
    #[error("thresholds file {path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column from the TOML parser.
        message: String,
    },
    /// The offline side has more rows than the index can address (u32 row numbers).
    #[error("{path}: {rows} rows on the offline side; the index addresses at most 4294967295")]
    TooManyRows {
        /// The offline path.
        path: PathBuf,
        /// Its row count.
        rows: u64,
    },
    /// Neither side has a row: nothing was compared, which in CI means a broken input.
    #[error(
        "both sides are empty ({served} and {offline} hold no rows): nothing to compare; check the paths and that the pipelines wrote their data"
    )]
    NoRows {
        /// The served input.
        served: std::path::PathBuf,
        /// The offline input.
        offline: std::path::PathBuf,
    },
    /// A worker thread died; a bug, reported instead of a panic.
    #[error("internal error: {0}")]
    Internal(String),
}

/// ` at version N`, or nothing when the version is not known yet.
fn at_version(version: Option<u64>) -> String {
    version
        .map(|v| format!(" at version {v}"))
        .unwrap_or_default()
}
