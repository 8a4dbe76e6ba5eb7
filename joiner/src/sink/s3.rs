//! The dataset on S3-compatible object storage: every write is one PUT, create-if-absent and
//! updates in place are conditional PUTs, publishing is a server-side copy. The protocol's steps
//! are synchronous, so the requests run on a small runtime of the dataset's own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::path::{Path as ObjectPath, PathPart};
use object_store::{
    ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload, UpdateVersion,
};

use super::error::{SinkError, io};
use super::layout::{safe, staging_epoch, staging_prefix};
use super::paths;
use super::storage::{Storage, Update};
use super::{Dataset, SinkOptions, new_writer};

/// Creates `probe` (a name only this writer uses) twice; true when the second create is
/// refused, as the commit's fence needs.
///
/// The first create's answer may be lost after the store applied it (a connection dropped
/// during an outage): object_store then sends the conditional PUT again, and the store refuses
/// it because the object exists. So a refused first create is this writer's own when the
/// object holds its content; taken for a failure, it made the joiner stop at start-up saying
/// that the store ignores conditional PUTs. A store that refuses every create still fails.
fn refuses_overwrite(storage: &dyn Storage, probe: &str, content: &str) -> Result<bool, SinkError> {
    let created = storage.create(probe, content.as_bytes().to_vec())?
        || storage
            .get(probe)
            .is_ok_and(|bytes| bytes == content.as_bytes());
    let overwritten = storage.create(probe, content.as_bytes().to_vec())?;
    Ok(created && !overwritten)
}

/// Shuts its runtime down without blocking, so a dataset can be dropped inside async code.
#[derive(Debug)]
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// An object store (S3 and compatible). Every write is a single PUT, visible complete or not at
/// all; create-if-absent is a conditional PUT; the protocol's steps are synchronous like the
/// local ones, so the requests run on a small runtime of the dataset's own, which works from
/// plain threads and from the joiner's `block_in_place` sections alike.
#[derive(Debug)]
struct Remote {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket`, for messages.
    url: String,
    /// The dataset's key prefix inside the bucket, without slashes at either end.
    prefix: String,
    /// Unique to this process's dataset handle: its staging prefixes never collide with another
    /// owner's.
    writer: String,
    runtime: Runtime,
}

impl Remote {
    fn key(&self, relative: &str) -> ObjectPath {
        // Our names are taken as they are: a model partition's hive escapes (`%2F`) must reach
        // the store unchanged, as every hive reader decodes them once. object_store would
        // escape their `%` again. Our names never hold what a store refuses; anything else is
        // escaped by object_store, as the prefix from the config always was.
        let parts = relative
            .split('/')
            .filter(|part| !part.is_empty())
            .map(|part| PathPart::parse(part).unwrap_or_else(|_| PathPart::from(part)));
        parts.fold(ObjectPath::from(self.prefix.as_str()), ObjectPath::join)
    }

    fn location(&self, key: &ObjectPath) -> String {
        format!("{}/{key}", self.url)
    }

    /// Runs one request (or a few) to completion on the dataset's runtime.
    fn block<T: Send + 'static>(
        &self,
        what: &'static str,
        key: &ObjectPath,
        work: impl std::future::Future<Output = Result<T, object_store::Error>> + Send + 'static,
    ) -> Result<T, SinkError> {
        let stopped = || SinkError::Unsupported {
            url: self.url.clone(),
            problem: format!("{what} {key}: the dataset's I/O runtime stopped"),
        };
        let runtime = self.runtime.0.as_ref().ok_or_else(stopped)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .map_err(|_| stopped())?
            .map_err(|source| SinkError::Store {
                action: what,
                location: self.location(key),
                source,
            })
    }

    fn list_all(&self, dir: &str) -> Result<Vec<ObjectPath>, SinkError> {
        use futures::TryStreamExt as _;
        let key = self.key(dir);
        let store = self.store.clone();
        let prefix = key.clone();
        self.block("list", &key, async move {
            store
                .list(Some(&prefix))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await
        })
    }
}

impl Storage for Remote {
    /// Refuses a store that ignores conditional PUTs: the fence between two owners of a task
    /// depends on them (and some S3-compatible servers silently overwrite instead).
    fn check(&self) -> Result<(), SinkError> {
        let probe = format!("_featurelog/probe/{}", self.writer);
        let refused = refuses_overwrite(self, &probe, &self.writer)?;
        let key = self.key(&probe);
        let store = self.store.clone();
        let target = key.clone();
        self.block("delete", &key, async move { store.delete(&target).await })?;
        if refused {
            Ok(())
        } else {
            Err(SinkError::Unsupported {
                url: self.url.clone(),
                problem: "it does not refuse a PUT with If-None-Match: * over an existing \
                          object; the joiner's commit needs conditional PUTs (AWS S3, MinIO, \
                          Cloudflare R2 and Ceph RGW support them)"
                    .into(),
            })
        }
    }

    fn describe(&self, relative: &str) -> PathBuf {
        PathBuf::from(self.location(&self.key(relative)))
    }

    fn update(&self, relative: &str, update: &mut Update<'_>) -> Result<(), SinkError> {
        update_remote(self, relative, update)
    }

    fn tail(&self, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
        tail_remote(self, relative, len)
    }

    fn staging(&self, task: &str, epoch: u64) -> String {
        staging_prefix(task, epoch, &self.writer)
    }

    fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("put", &key, async move {
            store.put(&target, PutPayload::from(bytes)).await.map(drop)
        })
    }

    fn create(&self, relative: &str, bytes: Vec<u8>) -> Result<bool, SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("create", &key, async move {
            let options = PutOptions::from(PutMode::Create);
            match store
                .put_opts(&target, PutPayload::from(bytes), options)
                .await
            {
                Ok(_) => Ok(true),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
                // A conditional PUT that loses a race on S3 may answer 409 (conflict) instead.
                Err(object_store::Error::Precondition { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn get(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("read", &key, async move {
            let bytes = store.get(&target).await?.bytes().await?;
            Ok(bytes.to_vec())
        })
    }

    fn exists(&self, relative: &str) -> Result<bool, SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("head", &key, async move {
            match store.head(&target).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn children(&self, dir: &str) -> Result<(Vec<String>, Vec<String>), SinkError> {
        let key = self.key(dir);
        let (store, target) = (self.store.clone(), key.clone());
        let listed = self.block("list", &key, async move {
            let prefix = (!target.as_ref().is_empty()).then_some(&target);
            store.list_with_delimiter(prefix).await
        })?;
        let name = |p: &ObjectPath| p.filename().unwrap_or_default().to_owned();
        Ok((
            listed.common_prefixes.iter().map(name).collect(),
            listed.objects.iter().map(|o| name(&o.location)).collect(),
        ))
    }

    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError> {
        let (from, to) = (self.key(staged), self.key(visible));
        let store = self.store.clone();
        let (f, t) = (from.clone(), to.clone());
        // A server-side copy: the visible object appears complete, or not at all.
        let copied = self.block("copy", &from, async move {
            match store.copy(&f, &t).await {
                Ok(()) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        if copied {
            let (store, f) = (self.store.clone(), from.clone());
            self.block("delete", &from, async move {
                match store.delete(&f).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e),
                }
            })?;
        }
        Ok(copied)
    }

    fn discard(&self, task: &str, committed: u64) -> Result<(), SinkError> {
        // Staged epochs at or below the newest checkpoint can never be committed (that epoch
        // exists); later ones may belong to a live writer about to commit, and are left to the
        // recovery that follows its commit or its death.
        let dir = format!("{}/{}", paths::STAGING, safe(task));
        let base = self.key(&dir);
        for key in self.list_all(&dir)? {
            let epoch = key
                .prefix_match(&base)
                .and_then(|mut parts| parts.next())
                .and_then(|part| staging_epoch(part.as_ref()));
            if epoch.is_some_and(|e| e <= committed) {
                self.delete_key(&key)?;
            }
        }
        Ok(())
    }

    fn remove(&self, relative: &str) -> Result<(), SinkError> {
        self.delete_key(&self.key(relative))
    }
}

impl Remote {
    fn delete_key(&self, key: &ObjectPath) -> Result<(), SinkError> {
        let (store, target) = (self.store.clone(), key.clone());
        self.block("delete", key, async move {
            match store.delete(&target).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }
}

impl Dataset {
    /// A dataset under `prefix` of `store`; `url` (e.g. `s3://bucket`) names the store in
    /// messages. Makes no request: [`Dataset::check`] verifies the store.
    pub fn open_object_store(
        store: Arc<dyn ObjectStore>,
        url: &str,
        prefix: &str,
        options: SinkOptions,
    ) -> Result<Self, SinkError> {
        let url = url.trim_end_matches('/').to_owned();
        let prefix = prefix.trim_matches('/').to_owned();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("featurelog-dataset-io")
            .enable_all()
            .build()
            .map_err(io("start the I/O runtime of", Path::new(&url)))?;
        let root = if prefix.is_empty() {
            PathBuf::from(&url)
        } else {
            PathBuf::from(format!("{url}/{prefix}"))
        };
        let writer = new_writer();
        Ok(Self {
            storage: Arc::new(Remote {
                store,
                url,
                prefix,
                writer: writer.clone(),
                runtime: Runtime(Some(runtime)),
            }),
            root,
            options,
            complete: Arc::default(),
            oldest: Arc::default(),
            writer,
            columns: Arc::default(),
            common_metadata: Arc::default(),
        })
    }
}

/// Conditional PUTs lost to other writers before giving up: each loss means another writer
/// added columns in between, which happens a few times at most when new columns arrive.
const ATTEMPTS: usize = 100;

/// [`Storage::update`] on an object store: read with its ETag, then a PUT only if the object
/// still has that ETag (`If-Match`; `If-None-Match: *` when it was absent), again from the read
/// when another writer changed it in between.
fn update_remote(
    remote: &Remote,
    relative: &str,
    update: &mut Update<'_>,
) -> Result<(), SinkError> {
    let key = remote.key(relative);
    for _ in 0..ATTEMPTS {
        let (store, target) = (remote.store.clone(), key.clone());
        let current = remote.block("read", &key, async move {
            match store.get(&target).await {
                Ok(got) => {
                    let version = UpdateVersion {
                        e_tag: got.meta.e_tag.clone(),
                        version: got.meta.version.clone(),
                    };
                    Ok(Some((got.bytes().await?.to_vec(), version)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        let Some(bytes) = update(current.as_ref().map(|(bytes, _)| bytes.as_slice()))? else {
            return Ok(());
        };
        let mode = match current {
            Some((_, version)) => PutMode::Update(version),
            None => PutMode::Create,
        };
        let (store, target) = (remote.store.clone(), key.clone());
        let written = remote.block("update", &key, async move {
            match store
                .put_opts(&target, PutPayload::from(bytes), PutOptions::from(mode))
                .await
            {
                Ok(_) => Ok(true),
                // Another writer changed it since the read: read it again.
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        if written {
            return Ok(());
        }
    }
    Err(SinkError::Unsupported {
        url: remote.location(&key),
        problem: format!("{ATTEMPTS} conditional updates in a row lost to other writers"),
    })
}

/// The last `len` bytes of an object: one ranged GET.
fn tail_remote(remote: &Remote, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
    let key = remote.key(relative);
    let (store, target) = (remote.store.clone(), key.clone());
    remote.block("read", &key, async move {
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Suffix(len as u64)),
            ..Default::default()
        };
        Ok(store
            .get_opts(&target, options)
            .await?
            .bytes()
            .await?
            .to_vec())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::fixtures::*;

    #[test]
    fn on_an_object_store_files_appear_only_after_the_commit_and_split_by_rows() {
        let (store, ds) = in_memory();
        ds.check().unwrap();
        let staged = ds
            .stage("t-0", 1, &[rows(18), rows(18)].concat(), i64::MIN)
            .unwrap();
        assert_eq!(
            staged.files.len(),
            4,
            "two rows in each of two hours, one row per file"
        );
        assert!(visible(&keys(&store)).is_empty(), "{:?}", keys(&store));
        // Staged, they are there, and no `*.parquet` glob matches them.
        let staged_keys: Vec<String> = keys(&store)
            .into_iter()
            .filter(|k| k.contains("_featurelog/staging/"))
            .collect();
        assert_eq!(staged_keys.len(), 4, "{staged_keys:?}");
        assert!(
            staged_keys.iter().all(|k| !k.ends_with(".parquet")),
            "{staged_keys:?}"
        );
        let mut cp = checkpoint("t-0", 1, staged.files.clone());
        cp.staging = staged.staging.clone();
        ds.commit(&cp).unwrap();
        assert!(
            visible(&keys(&store)).is_empty(),
            "still staged until the roll forward"
        );
        ds.roll_forward(&cp).unwrap();
        let mut expected = staged.files.clone();
        expected.sort();
        assert_eq!(visible(&keys(&store)), expected);
        assert!(
            !keys(&store)
                .iter()
                .any(|k| k.contains("_featurelog/staging/")),
            "staged objects are deleted once copied"
        );
        let err = ds.commit(&cp).unwrap_err();
        assert!(matches!(err, SinkError::Fenced { epoch: 1, .. }), "{err}");
        assert_eq!(ds.latest_checkpoint("t-0").unwrap(), Some(cp));
    }

    #[test]
    fn on_an_object_store_recovery_finishes_the_roll_forward_and_keeps_a_live_writers_staging() {
        let (store, ds) = in_memory();
        let staged = ds.stage("t-0", 1, &rows(1), i64::MIN).unwrap();
        let mut cp = checkpoint("t-0", 1, staged.files.clone());
        cp.staging = staged.staging.clone();
        ds.commit(&cp).unwrap();
        // Killed before the copies. Another process recovers the task.
        let other =
            Dataset::open_object_store(store.clone(), "memory://b", "ds", SinkOptions::default())
                .unwrap();
        // A stale writer staged epoch 1 too (it lost the commit) and epoch 2 (it may still commit).
        let stale1 = other.stage("t-0", 1, &rows(3), i64::MIN).unwrap();
        let later = other.stage("t-0", 2, &rows(5), i64::MIN).unwrap();
        assert_eq!(other.recover("t-0").unwrap(), Some(cp.clone()));
        let mut expected = staged.files.clone();
        expected.sort();
        assert_eq!(visible(&keys(&store)), expected, "exactly epoch 1's files");
        let all = keys(&store);
        let under = |prefix: &str| {
            let p = format!("ds/{prefix}/");
            all.iter().filter(|k| k.starts_with(&p)).count()
        };
        assert_eq!(
            under(&stale1.staging),
            0,
            "a lost epoch's staging is deleted"
        );
        assert_eq!(
            under(&later.staging),
            later.files.len(),
            "a later epoch may still be committed"
        );
        // Recovering again changes nothing.
        assert_eq!(ds.recover("t-0").unwrap(), Some(cp));
        assert_eq!(visible(&keys(&store)), expected);
    }

    #[test]
    fn the_store_check_takes_a_probe_whose_answer_was_lost_for_created() {
        let (_, ds) = in_memory();
        let lost = Watched::new(ds.storage.clone(), Creates::AnswerLost);
        assert!(refuses_overwrite(&lost, "_featurelog/probe/w1", "w1").unwrap());
        // The check still catches a store that overwrites.
        let ignores = Watched::new(ds.storage.clone(), Creates::IgnoringCondition);
        assert!(!refuses_overwrite(&ignores, "_featurelog/probe/w2", "w2").unwrap());
        // And a store that refuses every create.
        assert!(!refuses_overwrite(&lost, "_featurelog/probe/w1", "someone else").unwrap());
    }
}
