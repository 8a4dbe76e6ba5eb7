//! `[output]`: the dataset, how often it is committed and how its files are written, and how to
//! reach the object store of an `s3://` path.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use serde::{Deserialize, Serialize};

/// The dataset.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OutputConfig {
    /// A local directory (relative paths are relative to the config file), or
    /// `s3://bucket/prefix` for S3 and S3-compatible object storage (see `object-store`).
    pub path: PathBuf,
    /// How often each task commits its rows, state and offsets.
    #[serde(default = "default_flush_interval", with = "humantime_serde")]
    pub flush_interval: Duration,
    /// A task also commits as soon as it holds this many rows, before `flush-interval`. Rows
    /// keep their feature logs in memory until they are written: this bounds that memory
    /// when the joiner reads a backlog at full speed (after downtime, or a new consumer
    /// group), where a whole interval's reading would otherwise wait in memory.
    #[serde(default = "default_flush_rows")]
    pub flush_rows: usize,
    /// A task also commits as soon as its rows hold this many bytes (estimated: the rows and
    /// the feature logs they point at, each log once), before `flush-interval` and
    /// `flush-rows`: a row keeps its request's whole feature log in memory until it is
    /// written, and logs of many candidates make a few rows hold a lot.
    #[serde(default = "default_flush_bytes")]
    pub flush_bytes: usize,
    /// Rows per Parquet row group.
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: usize,
    /// At most this many rows per file: a flush's rows of one hour are split into several
    /// files past it. Default: one file per hour per flush.
    #[serde(default)]
    pub max_file_rows: Option<usize>,
    /// Checkpoints kept per task (the newest ones; at least 2). Older ones are deleted after
    /// commits; a process stalled for longer than this many commits of the task's new owner
    /// finds its checkpoint gone and drops the task (docs/JOINER.md, "Checkpoint retention").
    #[serde(default = "default_checkpoints_kept")]
    pub checkpoints_kept: u64,
    /// zstd level of the Parquet pages.
    #[serde(default = "default_zstd_level")]
    pub zstd_level: i32,
    /// Rows go under `model=<model name>/dt=.../hr=...` instead of `dt=.../hr=...`, with an
    /// hour's `_SUCCESS` marker per model, so that a model's training job reads (and waits
    /// for) its own files only. Fixed for a dataset by its first joiner.
    #[serde(default)]
    pub partition_by_model: bool,
    /// How to reach the object store of an `s3://` path.
    #[serde(default)]
    pub object_store: Option<ObjectStoreConfig>,
    /// What readers see: hive-partitioned Parquet files, or the same files as a Delta Lake
    /// table (docs/JOINER.md, "Delta table output").
    #[serde(default)]
    pub format: OutputFormat,
    /// The Delta table's compaction and VACUUM (`format = "delta"` only).
    #[serde(default)]
    pub delta: DeltaConfig,
}

/// `[output.delta]`: what the joiner does to its Delta table once hours are complete
/// (docs/JOINER.md, "Compaction, VACUUM and completeness in the table").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DeltaConfig {
    /// Once an hour is complete, its files smaller than this many bytes are rewritten into
    /// files of about this size, in one commit that changes no row. 0 turns compaction off.
    #[serde(default = "default_target_file_bytes")]
    pub target_file_bytes: u64,
    /// Delete the files a compaction removed from the table, `vacuum-retention` after it.
    #[serde(default = "default_vacuum")]
    pub vacuum: bool,
    /// How long a compaction's removed files stay: a reader of an older version of the table
    /// (a training job that started before the compaction, a time-travel read) finds them
    /// until then. At least 1 hour.
    #[serde(default = "default_vacuum_retention", with = "humantime_serde")]
    pub vacuum_retention: Duration,
    /// A checkpoint of the table's log is written once this many versions were committed
    /// since the last one (each task flush is one), so that readers replay few commits.
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: u64,
}

impl Default for DeltaConfig {
    fn default() -> Self {
        Self {
            target_file_bytes: default_target_file_bytes(),
            vacuum: default_vacuum(),
            vacuum_retention: default_vacuum_retention(),
            checkpoint_interval: default_checkpoint_interval(),
        }
    }
}

fn default_target_file_bytes() -> u64 {
    256 << 20
}
fn default_checkpoint_interval() -> u64 {
    100
}
fn default_vacuum() -> bool {
    true
}
/// Delta's own default (`delta.deletedFileRetentionDuration`).
fn default_vacuum_retention() -> Duration {
    Duration::from_secs(7 * 24 * 3600)
}

/// The dataset's format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputFormat {
    /// Hive-partitioned Parquet files, `_SUCCESS` markers and `_common_metadata`.
    #[default]
    Parquet,
    /// The same files and markers, and a Delta Lake table (`_delta_log/`) that each commit
    /// adds its files to.
    Delta,
}

/// How to reach S3 or an S3-compatible store. Whatever is not set here comes from the
/// environment as the AWS tools read it (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, web identity and
/// instance credentials): credentials belong there, not in the file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ObjectStoreConfig {
    /// The endpoint of an S3-compatible store, e.g. `http://minio:9000`; omit for AWS S3.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The bucket's region (S3-compatible stores accept any, conventionally `us-east-1`).
    #[serde(default)]
    pub region: Option<String>,
    /// Allow an `http://` endpoint (local and in-cluster stores only).
    #[serde(default)]
    pub allow_http: Option<bool>,
    /// Any other setting of object_store's S3 client, by its name (`aws_*`, see
    /// `AmazonS3ConfigKey`), e.g. `aws_virtual_hosted_style_request = "true"`.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

/// Where the dataset lives, from [`OutputConfig::location`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputLocation {
    /// A local directory.
    Local(PathBuf),
    /// A bucket of S3 or an S3-compatible store, and the key prefix inside it ("" for the root).
    S3 {
        /// The bucket.
        bucket: String,
        /// The prefix, without slashes at either end.
        prefix: String,
    },
}

impl OutputConfig {
    /// Where `path` points.
    pub fn location(&self) -> Result<OutputLocation, String> {
        let text = self.path.to_string_lossy();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Ok(OutputLocation::Local(self.path.clone()));
        };
        if scheme != "s3" {
            return Err(format!(
                "output.path {text:?}: only local paths and s3:// URLs are supported"
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("output.path {text:?} names no bucket"));
        }
        Ok(OutputLocation::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
        })
    }

    /// The S3 client for `bucket`: the environment's AWS settings, then `[output.object-store]`.
    /// Makes no request.
    pub fn build_s3(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(o) = &self.object_store {
            // object_store takes several names for one setting (`endpoint`, `aws_endpoint`,
            // `aws_endpoint_url`): set twice, one would silently win, by the order of the
            // names. Which one the operator meant is theirs to say.
            let mut set: Vec<(AmazonS3ConfigKey, String)> = Vec::new();
            let mut once = |key: AmazonS3ConfigKey, spelling: String| {
                if let Some((_, first)) = set.iter().find(|(k, _)| *k == key) {
                    return Err(format!(
                        "output.object-store: {} and {spelling} are the same S3 setting ({}); keep one",
                        first,
                        key.as_ref()
                    ));
                }
                set.push((key, spelling));
                Ok(())
            };
            if let Some(endpoint) = &o.endpoint {
                once(AmazonS3ConfigKey::Endpoint, "endpoint".into())?;
                builder = builder.with_endpoint(endpoint);
            }
            if let Some(region) = &o.region {
                once(AmazonS3ConfigKey::Region, "region".into())?;
                builder = builder.with_region(region);
            }
            if let Some(allow) = o.allow_http {
                once(
                    AmazonS3ConfigKey::Client(object_store::ClientConfigKey::AllowHttp),
                    "allow-http".into(),
                )?;
                builder = builder.with_allow_http(allow);
            }
            for (key, value) in &o.options {
                // Written either way in files (aws-x or aws_x); object_store wants underscores.
                let parsed = AmazonS3ConfigKey::from_str(&key.replace('-', "_")).map_err(|_| {
                    format!("output.object-store.options: unknown S3 setting {key:?}")
                })?;
                once(parsed, format!("options.{key}"))?;
                builder = builder.with_config(parsed, value);
            }
        }
        builder
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            .map_err(|e| format!("output.object-store: {e}"))
    }
}

fn default_flush_interval() -> Duration {
    Duration::from_secs(10)
}
/// `output.flush-rows` when the config does not set it.
pub const DEFAULT_FLUSH_ROWS: usize = 200_000;
fn default_flush_rows() -> usize {
    DEFAULT_FLUSH_ROWS
}
fn default_flush_bytes() -> usize {
    64 << 20
}
fn default_row_group_rows() -> usize {
    64 * 1024
}
/// Default of `output.checkpoints-kept`: about 2.8 hours of 10 s flushes.
pub const DEFAULT_CHECKPOINTS_KEPT: u64 = 1000;

fn default_checkpoints_kept() -> u64 {
    DEFAULT_CHECKPOINTS_KEPT
}
fn default_zstd_level() -> i32 {
    3
}
