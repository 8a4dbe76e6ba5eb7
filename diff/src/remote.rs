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

/// Objects downloaded at once.
const CONCURRENT_DOWNLOADS: usize = 8;

/// A remote input copied to local disk; the copy goes when this is dropped.
#[derive(Debug)]
pub(crate) struct Fetched {
    /// What to read: the directory, or the one file.
    pub(crate) root: PathBuf,
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

/// Copies the data files of `url` (`s3://bucket/prefix`) to a temporary directory.
pub(crate) fn fetch(url: &Path) -> Result<Fetched, DiffError> {
    let shown = url.display().to_string();
    let remote = |message: String| DiffError::Remote {
        url: shown.clone(),
        message,
    };
    let (bucket, prefix) = s3_url(url).ok_or_else(|| remote("not an s3:// URL".into()))?;
    if bucket.is_empty() {
        return Err(remote("names no bucket (s3://bucket/prefix)".into()));
    }
    let store: Arc<dyn ObjectStore> = Arc::new(
        AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| remote(format!("the S3 settings from the environment: {e}")))?,
    );
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
    let root = runtime
        .block_on(copy(store, prefix, dir.path()))
        .map_err(remote)?;
    Ok(Fetched { root, _dir: dir })
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
        .filter_map(|meta| {
            let relative = meta
                .location
                .prefix_match(&base)?
                .map(|part| part.as_ref().to_owned())
                .collect::<Vec<_>>()
                .join("/");
            Some((meta.location, relative))
        })
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
    futures::stream::iter(keys.into_iter().map(|(key, relative)| {
        let store = store.clone();
        let local = into.join(&relative);
        async move { download(&*store, &key, &local).await }
    }))
    .buffer_unordered(CONCURRENT_DOWNLOADS)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(root)
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
