//! Inputs on S3 or an S3-compatible store (`s3://bucket/prefix`), where the joiner writes its
//! dataset once it scales out: the data files under the prefix (or the one object it names) are
//! copied into a temporary directory with their relative paths, hive partitions included, and
//! read from there as local files.
//!
//! Copied rather than read in place: the engine shares row groups between threads with
//! synchronous Parquet readers, and a local copy keeps that path the same for every input. The
//! copy skips what a local read skips (names starting with `.` or `_`: the joiner's
//! `_featurelog/` state and pending files), so only data crosses the network, and the empty
//! `_SUCCESS` markers that `--complete-only` reads.
//! A prefix holding `_delta_log/` is a Delta table: only the files its log holds at the version
//! read are copied (with the `_SUCCESS` markers when `--complete-only` reads them), not the
//! removed files still under the prefix.
//! Settings and credentials come from the environment as the AWS tools read them
//! (`AWS_ACCESS_KEY_ID`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt as _};
use tokio::io::AsyncWriteExt;

use crate::DiffError;
use crate::delta::{self, Table};

/// Objects downloaded at once.
const CONCURRENT_DOWNLOADS: usize = 8;

/// A remote input copied to local disk; the copy goes when this is dropped.
#[derive(Debug)]
pub(crate) struct Fetched {
    /// What to read: the directory, or the one file.
    pub(crate) root: PathBuf,
    /// When the input is a Delta table: its files at the version read, as their local copies.
    pub(crate) table: Option<Table>,
    _dir: tempfile::TempDir,
}

/// The bucket and key prefix of an `s3://` input, or `None` for a local path.
pub(crate) fn s3_url(path: &Path) -> Option<(&str, &str)> {
    let rest = path.to_str()?.strip_prefix("s3://")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    Some((bucket, prefix.trim_matches('/')))
}

/// Whether a key, relative to the input's prefix, is copied: data a local read would take, or
/// a `_SUCCESS` marker (which `--complete-only` reads) in a directory a local read would enter.
fn is_wanted(relative: &str) -> bool {
    match relative.rsplit_once('/') {
        Some((dirs, "_SUCCESS")) => is_data(&format!("{dirs}/x.parquet")),
        None if relative == "_SUCCESS" => true,
        _ => is_data(relative),
    }
}

/// Whether a key, relative to the input's prefix, is data a local read would take by its name
/// (Parquet, CSV, TSV).
fn is_data(relative: &str) -> bool {
    !is_hidden(relative) && crate::input::data_name(last_segment(relative)).is_some()
}

/// Whether a key is an extensionless file (Hive's `000000_0`), which a local read takes when
/// nothing else is data.
fn is_bare(relative: &str) -> bool {
    !is_hidden(relative) && crate::input::is_bare_name(last_segment(relative))
}

fn is_hidden(relative: &str) -> bool {
    relative
        .split('/')
        .any(|segment| segment.starts_with('.') || segment.starts_with('_'))
}

fn last_segment(relative: &str) -> &str {
    relative.rsplit('/').next().unwrap_or(relative)
}

/// The store of `bucket`, set up from the environment.
fn bucket_store(bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
    Ok(Arc::new(
        AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| format!("the S3 settings from the environment: {e}"))?,
    ))
}

/// Copies the data files of `url` (`s3://bucket/prefix`) to a temporary directory: a Delta
/// table's files at `version` (the newest when `None`), with the `_SUCCESS` markers when
/// `markers`; otherwise every data file.
pub(crate) fn fetch(url: &Path, version: Option<u64>, markers: bool) -> Result<Fetched, DiffError> {
    let shown = url.display().to_string();
    let remote = |message: String| DiffError::Remote {
        url: shown.clone(),
        message,
    };
    let (bucket, prefix) = s3_url(url).ok_or_else(|| remote("not an s3:// URL".into()))?;
    if bucket.is_empty() {
        return Err(remote("names no bucket (s3://bucket/prefix)".into()));
    }
    let store = bucket_store(bucket).map_err(remote)?;
    let dir = tempfile::Builder::new()
        .prefix("featurelog-diff-")
        .tempdir()
        .map_err(|source| DiffError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| DiffError::Io {
            path: dir.path().to_owned(),
            source,
        })?;
    if runtime.block_on(has_log(&*store, prefix)).map_err(remote)? {
        let under = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let root = url::Url::parse(&format!("s3://{bucket}/{under}"))
            .map_err(|e| remote(format!("the table's URL: {e}")))?;
        // The kernel runs its requests on a runtime of its own: a store of its own too, so
        // that no connection is shared between the two runtimes.
        let kernel_store = bucket_store(bucket).map_err(remote)?;
        let table = delta::list(kernel_store, &root, &shown, version)?;
        let table = runtime
            .block_on(copy_table(
                store,
                bucket,
                prefix,
                table,
                markers,
                dir.path(),
            ))
            .map_err(remote)?;
        return Ok(Fetched {
            root: dir.path().to_owned(),
            table: Some(table),
            _dir: dir,
        });
    }
    let root = runtime
        .block_on(copy(store, prefix, dir.path()))
        .map_err(remote)?;
    Ok(Fetched {
        root,
        table: None,
        _dir: dir,
    })
}

/// Whether `prefix` holds a Delta log (any object under `_delta_log/`).
async fn has_log(store: &dyn ObjectStore, prefix: &str) -> Result<bool, String> {
    let log = ObjectPath::from(format!("{prefix}/_delta_log"));
    match store.list(Some(&log)).next().await {
        None => Ok(false),
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(format!("listing {log}: {e}")),
    }
}

/// Downloads the files of `table` (in `bucket`, under `prefix`) into `into` with their paths
/// relative to the prefix, and the `_SUCCESS` markers under the prefix when `markers`; returns
/// the table with each file's URL that of its copy.
async fn copy_table(
    store: Arc<dyn ObjectStore>,
    bucket: &str,
    prefix: &str,
    mut table: Table,
    markers: bool,
    into: &Path,
) -> Result<Table, String> {
    let base = ObjectPath::from(prefix);
    let mut keys: Vec<(ObjectPath, String)> = Vec::with_capacity(table.files.len());
    for file in &mut table.files {
        let outside = || format!("{} is outside the table's prefix", file.url);
        if file.url.scheme() != "s3" || file.url.host_str() != Some(bucket) {
            return Err(outside());
        }
        let key =
            ObjectPath::from_url_path(file.url.path()).map_err(|e| format!("{}: {e}", file.url))?;
        let relative = relative_to(&key, &base).ok_or_else(outside)?;
        let local = into.join(&relative);
        file.url = url::Url::from_file_path(&local)
            .map_err(|()| format!("{} is not an absolute path", local.display()))?;
        keys.push((key, relative));
    }
    if markers {
        let listed: Vec<_> = store
            .list(Some(&base))
            .try_collect()
            .await
            .map_err(|e| format!("listing: {e}"))?;
        keys.extend(listed.into_iter().filter_map(|meta| {
            let relative = relative_to(&meta.location, &base)?;
            (last_segment(&relative) == "_SUCCESS" && is_wanted(&relative))
                .then_some((meta.location, relative))
        }));
    }
    download_all(store, keys, into).await?;
    Ok(table)
}

/// `key`'s path below `base`, or `None` when it is not below it.
fn relative_to(key: &ObjectPath, base: &ObjectPath) -> Option<String> {
    Some(
        key.prefix_match(base)?
            .map(|part| part.as_ref().to_owned())
            .collect::<Vec<_>>()
            .join("/"),
    )
}

/// Lists the data under `prefix` and downloads it into `into`; returns what to read.
async fn copy(store: Arc<dyn ObjectStore>, prefix: &str, into: &Path) -> Result<PathBuf, String> {
    let base = ObjectPath::from(prefix);
    let listed: Vec<_> = store
        .list(Some(&base))
        .try_collect()
        .await
        .map_err(|e| format!("listing: {e}"))?;
    let listed: Vec<(ObjectPath, String)> = listed
        .into_iter()
        .filter_map(|meta| Some((relative_to(&meta.location, &base)?, meta.location)))
        .map(|(relative, location)| (location, relative))
        .collect();
    // Extensionless files only when nothing is data by its name, as a local read takes them.
    let named = listed.iter().any(|(_, relative)| is_data(relative));
    let mut keys: Vec<(ObjectPath, String)> = listed
        .into_iter()
        .filter(|(_, relative)| is_wanted(relative) || (!named && is_bare(relative)))
        .collect();
    let root = if keys
        .iter()
        .all(|(_, relative)| !is_data(relative) && !is_bare(relative))
    {
        keys.clear();
        // No data under it as a directory: the prefix may name one object itself.
        let name = prefix.rsplit('/').next().unwrap_or(prefix);
        if !(is_data(name) || is_bare(name)) || store.head(&base).await.is_err() {
            return Err(format!(
                "no .parquet or .csv objects at or under {prefix:?} (nor .csv.gz, .tsv, .tsv.gz, or extensionless ones such as Hive's 000000_0; names starting with . or _ are skipped)"
            ));
        }
        keys.push((base, name.to_owned()));
        into.join(name)
    } else {
        into.to_owned()
    };
    download_all(store, keys, into).await?;
    Ok(root)
}

/// Downloads each key to its relative path under `into`, several at once.
async fn download_all(
    store: Arc<dyn ObjectStore>,
    keys: Vec<(ObjectPath, String)>,
    into: &Path,
) -> Result<(), String> {
    futures::stream::iter(keys.into_iter().map(|(key, relative)| {
        let store = store.clone();
        let local = into.join(&relative);
        async move { download(&*store, &key, &local).await }
    }))
    .buffer_unordered(CONCURRENT_DOWNLOADS)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// Streams one object to a local file.
async fn download(store: &dyn ObjectStore, key: &ObjectPath, local: &Path) -> Result<(), String> {
    let failed = |what: &str, e: &dyn std::fmt::Display| format!("{what} {key}: {e}");
    if let Some(parent) = local.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| failed("creating a directory for", &e))?;
    }
    let mut body = store
        .get(key)
        .await
        .map_err(|e| failed("reading", &e))?
        .into_stream();
    let mut file = tokio::fs::File::create(local)
        .await
        .map_err(|e| failed("writing a local copy of", &e))?;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| failed("reading", &e))?;
        file.write_all(&chunk)
            .await
            .map_err(|e| failed("writing a local copy of", &e))?;
    }
    file.flush()
        .await
        .map_err(|e| failed("writing a local copy of", &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_data_names() {
        assert_eq!(
            s3_url(Path::new("s3://bucket/a/b/")),
            Some(("bucket", "a/b"))
        );
        assert_eq!(s3_url(Path::new("s3://bucket")), Some(("bucket", "")));
        assert_eq!(s3_url(Path::new("/data/s3://x")), None);
        assert!(is_data("dt=2026-11-29/hr=07/part-0.parquet"));
        assert!(is_data("late/dt=2026-11-29/hr=07/part-0.PARQUET"));
        assert!(is_data("offline.csv"));
        assert!(is_data("offline/part-0.csv.gz"));
        assert!(is_data("offline.tsv"));
        assert!(!is_data("warehouse/t/000000_0"));
        assert!(is_bare("warehouse/t/000000_0"));
        assert!(!is_bare("warehouse/.hive-staging/000000_0"));
        assert!(!is_data("_featurelog/state/0/1.state"));
        assert!(!is_data("dt=2026-11-29/hr=07/_SUCCESS"));
        assert!(!is_data("dt=2026-11-29/hr=07/.part-0.parquet.pending"));
        assert!(!is_data("notes.txt"));
        assert!(is_wanted("dt=2026-11-29/hr=07/_SUCCESS"));
        assert!(is_wanted("_SUCCESS"));
        assert!(!is_wanted("_featurelog/_SUCCESS"));
        assert!(is_wanted("dt=2026-11-29/hr=07/part-0.parquet"));
    }
}
