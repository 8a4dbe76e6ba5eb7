//! Where everything is under the dataset's root, by name: the hive partitions of the rows
//! (`[model=<name>/]dt=<date>/hr=<hour>/`), staged files, state files, and the escaping that makes
//! any model, task or column name one path segment, the same on every store and file system.
//!
//! Readers skip names that start with `.` or `_` (Spark, pyarrow, pandas) or read a `*.parquet`
//! glob (DuckDB, Polars), so staged files (`*.parquet.staged` under `_featurelog/`) and the
//! bookkeeping are invisible to them; on an object store a data object does not exist under its
//! visible name until its copy completes. Datasets written before staging was per writer may hold
//! `.part-*.parquet.pending` files beside their visible names.

use super::paths;

/// An hour in microseconds.
pub(super) const HOUR_US: i64 = 3_600_000_000;

/// Where a writer stages a task's files of `epoch`, relative to the root.
pub(super) fn staging_prefix(task: &str, epoch: u64, writer: &str) -> String {
    format!("{}/{}/{epoch:020}-{writer}", paths::STAGING, safe(task))
}

/// The epoch of a staging directory's name (`<epoch>-<writer>`).
pub(super) fn staging_epoch(name: &str) -> Option<u64> {
    let (epoch, writer) = name.split_once('-')?;
    if writer.is_empty() {
        return None;
    }
    epoch.parse().ok()
}

/// The epoch of a state file's name, `<epoch>-<writer>.bin`.
pub(super) fn state_epoch(file: &str) -> Option<u64> {
    let (epoch, writer) = file.strip_suffix(".bin")?.split_once('-')?;
    if writer.is_empty() {
        return None;
    }
    epoch.parse().ok()
}

pub(super) fn state_dir(task: &str) -> String {
    format!("{}/{}", paths::STATE, safe(task))
}

/// The partition directory of a model's rows (`partition-by-model`): `model=<name>` with every
/// byte but ASCII letters, digits, `.`, `_` and `-` written `%XX`, which Spark, Hive, pyarrow
/// and Polars decode back into the name, so that one directory is one model on every store and
/// file system. An empty name is hive's null partition. A name whose escaped form would pass
/// what a local file system takes in one segment is named by its SHA-256 instead (the rows
/// still carry the name in `model_name`).
pub fn model_dir(name: &str) -> String {
    if name.is_empty() {
        return format!("{MODEL_PARTITION}=__HIVE_DEFAULT_PARTITION__");
    }
    format!("{MODEL_PARTITION}={}", path_segment(name, b'%'))
}

/// `name` as one path segment, the same on every store and file system: ASCII letters, digits,
/// `_` and `-` as they are (and `.` unless it is the `escape`), every other byte written
/// `<escape>XX` (hex); named by its SHA-256 instead when that would pass what a local file
/// system takes in one segment.
pub(super) fn path_segment(name: &str, escape: u8) -> String {
    let mut segment = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && escape != b'.') {
            segment.push(char::from(b));
        } else {
            segment.push_str(&format!("{}{b:02X}", char::from(escape)));
        }
    }
    if segment.len() > 200 {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(name.as_bytes());
        segment = digest.iter().fold(String::from("sha256."), |mut s, b| {
            s.push_str(&format!("{b:02x}"));
            s
        });
    }
    segment
}

/// The hive partition column of `partition-by-model` (not `model_name`, which every file holds:
/// Spark refuses a partition column that is also a file column).
pub const MODEL_PARTITION: &str = "model";

/// Task names become file-name parts: anything but letters, digits, `-` and `_` becomes `_`.
pub(crate) fn safe(task: &str) -> String {
    task.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Where a file to be visible as `visible` is staged: under the writer's staging prefix, with
/// a suffix of its own, so that a `**/*.parquet` glob over the dataset (as DuckDB and Polars
/// users write) never reads a file that is not committed.
pub(super) fn staged_name(staging: &str, visible: &str) -> String {
    format!("{staging}/{visible}.staged")
}
