//! The dataset's one storage ([`Store`]): an [`ObjectStore`] under a prefix, object_store's
//! `LocalFileSystem` (fsync on) for a local directory, `AmazonS3` for `s3://`, its in-memory
//! store in unit tests. Every step of the commit protocol is one of its calls (docs/JOINER.md,
//! "Exactly once"); the steps are synchronous, so the calls run on a small runtime of the
//! dataset's own.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::{Path as ObjectPath, PathPart};
use object_store::{
    ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload, UpdateVersion,
};

use super::error::{SinkError, io};
use super::layout::{path_segment, safe, staging_epoch, staging_prefix};
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

/// The dataset's storage: an object store under a key prefix. Every write is a single put,
/// visible complete or not at all; create-if-absent is `PutMode::Create`; publishing is a
/// `rename`. The protocol's steps are synchronous, so the requests run on a small runtime of
/// the dataset's own, which works from any plain thread, the joiner's stage threads included.
#[derive(Debug)]
struct Store {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket` (or `memory://...` in tests), for messages; for a local directory, its path.
    url: String,
    /// The dataset's key prefix inside the store, without slashes at either end.
    prefix: String,
    /// The local directory a `LocalFileSystem` store is rooted at: names in messages are its
    /// paths, and the two things an object store has no call for are done there (see
    /// [`Store::update_locked`] and [`Store::remove_local_dir`]). `None` for any other store.
    directory: Option<PathBuf>,
    /// Unique to this process's dataset handle: its staging prefixes never collide with another
    /// owner's.
    writer: String,
    runtime: Runtime,
}

impl Store {
    fn key(&self, relative: &str) -> ObjectPath {
        // Our names are taken as they are: a model partition's hive escapes (`%2F`) must reach
        // the store unchanged, as every hive reader decodes them once. object_store would
        // escape their `%` again. Our names never hold what a store refuses; anything else is
        // escaped by object_store, as the prefix from the config always was. (LocalFileSystem
        // keeps a part's text as the file's name: it escapes it into a `file://` URL and
        // decodes it back.)
        let parts = relative
            .split('/')
            .filter(|part| !part.is_empty())
            .map(|part| PathPart::parse(part).unwrap_or_else(|_| PathPart::from(part)));
        parts.fold(ObjectPath::from(self.prefix.as_str()), ObjectPath::join)
    }

    fn location(&self, key: &ObjectPath) -> String {
        match &self.directory {
            Some(directory) => directory.join(key.as_ref()).display().to_string(),
            None => format!("{}/{key}", self.url),
        }
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

    fn delete_key(&self, key: &ObjectPath) -> Result<(), SinkError> {
        let (store, target) = (self.store.clone(), key.clone());
        self.block("delete", key, async move {
            match store.delete(&target).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }

    /// On a local directory, deletes the directory of `relative` with whatever is left in it.
    /// An object store has no directories: once its objects are deleted a prefix is gone. A
    /// local directory keeps the (empty) directories its files were in, and the temporary
    /// files (`<name>#<n>`) of writes that a crash interrupted, which LocalFileSystem neither
    /// lists nor deletes; without this, every flush would leave a directory tree behind.
    fn remove_local_dir(&self, relative: &str) -> Result<(), SinkError> {
        let Some(directory) = &self.directory else {
            return Ok(());
        };
        let path = directory.join(relative);
        match fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("delete", &path)(e)),
        }
    }

    /// [`Storage::update`] where the store has conditional updates (S3, in-memory): read with
    /// the ETag, then a put only if the object still has that ETag (`PutMode::Update`, S3's
    /// `If-Match`; `PutMode::Create` when it was absent), again from the read when another
    /// writer changed it in between.
    fn update_conditional(&self, relative: &str, update: &mut Update<'_>) -> Result<(), SinkError> {
        let key = self.key(relative);
        for _ in 0..ATTEMPTS {
            let (store, target) = (self.store.clone(), key.clone());
            let current = self.block("read", &key, async move {
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
            let (store, target) = (self.store.clone(), key.clone());
            let written = self.block("update", &key, async move {
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
            url: self.location(&key),
            problem: format!("{ATTEMPTS} conditional updates in a row lost to other writers"),
        })
    }

    /// [`Storage::update`] on a local directory, where LocalFileSystem has no `PutMode::Update`:
    /// the read and the put (a new file renamed over the old, fsynced, so a reader sees one or
    /// the other, whole) run under an exclusive `flock` of a lock file of the name's own under
    /// `_featurelog/locks/`. The kernel releases the lock when its holder exits however it
    /// exits; a lock file that is merely created would outlive a `kill -9` and stop every
    /// writer.
    fn update_locked(
        &self,
        directory: &Path,
        relative: &str,
        update: &mut Update<'_>,
    ) -> Result<(), SinkError> {
        let lock_path = directory.join(format!(
            "_featurelog/locks/{}",
            path_segment(relative, b'.')
        ));
        if let Some(dir) = lock_path.parent() {
            fs::create_dir_all(dir).map_err(io("create", dir))?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("create", &lock_path))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io("lock", &lock_path)(e.into()))?;
        let current = if self.exists(relative)? {
            Some(self.get(relative)?)
        } else {
            None
        };
        if let Some(bytes) = update(current.as_deref())? {
            self.put(relative, bytes)?;
        }
        // Released when `lock` is closed, after the new content is durable.
        drop(lock);
        Ok(())
    }
}

impl Storage for Store {
    /// Refuses a store that ignores conditional puts: the fence between two owners of a task
    /// depends on them (and some S3-compatible servers silently overwrite instead).
    fn check(&self) -> Result<(), SinkError> {
        let probe = format!("_featurelog/probe/{}", self.writer);
        let refused = refuses_overwrite(self, &probe, &self.writer)?;
        self.delete_key(&self.key(&probe))?;
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
        match &self.directory {
            Some(directory) => directory.join(relative),
            None => PathBuf::from(self.location(&self.key(relative))),
        }
    }

    fn update(&self, relative: &str, update: &mut Update<'_>) -> Result<(), SinkError> {
        match &self.directory {
            Some(directory) => self.update_locked(directory, relative, update),
            None => self.update_conditional(relative, update),
        }
    }

    /// One ranged read.
    fn tail(&self, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
        let key = self.key(relative);
        let (store, target) = (self.store.clone(), key.clone());
        self.block("read", &key, async move {
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

    fn files_modified(&self, dir: &str) -> Result<Vec<(String, i64)>, SinkError> {
        let key = self.key(dir);
        let (store, target) = (self.store.clone(), key.clone());
        let listed = self.block("list", &key, async move {
            let prefix = (!target.as_ref().is_empty()).then_some(&target);
            store.list_with_delimiter(prefix).await
        })?;
        Ok((listed.objects.iter())
            .map(|o| {
                let name = o.location.filename().unwrap_or_default().to_owned();
                (name, o.last_modified.timestamp_millis())
            })
            .collect())
    }

    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError> {
        let (from, to) = (self.key(staged), self.key(visible));
        let (store, f, t) = (self.store.clone(), from.clone(), to.clone());
        // The visible name appears complete, or not at all: rename(2) of a local file (with
        // both directories fsynced), a server-side copy then a delete on S3.
        self.block("rename", &from, async move {
            match store.rename(&f, &t).await {
                Ok(()) => Ok(true),
                // Gone from staging: published by a concurrent roll forward, or lost (the
                // caller tells them apart by the visible name).
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn clean(&self, staging: &str) -> Result<(), SinkError> {
        // Every staged file was renamed away: only a local directory's directories are left.
        self.remove_local_dir(staging)
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
        if self.directory.is_some() {
            for name in self.children(&dir)?.0 {
                if staging_epoch(&name).is_some_and(|e| e <= committed) {
                    self.remove_local_dir(&format!("{dir}/{name}"))?;
                }
            }
        }
        Ok(())
    }

    fn remove(&self, relative: &str) -> Result<(), SinkError> {
        self.delete_key(&self.key(relative))
    }
}

/// Conditional puts lost to other writers before giving up: each loss means another writer
/// added columns in between, which happens a few times at most when new columns arrive.
const ATTEMPTS: usize = 100;

fn start_runtime(url: &str) -> Result<Runtime, SinkError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("featurelog-dataset-io")
        .enable_all()
        .build()
        .map_err(io("start the I/O runtime of", Path::new(url)))?;
    Ok(Runtime(Some(runtime)))
}

impl Dataset {
    fn with_store(root: PathBuf, store: Store, options: SinkOptions) -> Self {
        Self {
            writer: store.writer.clone(),
            storage: Arc::new(store),
            root,
            options,
            complete: Arc::default(),
            oldest: Arc::default(),
            columns: Arc::default(),
            common_metadata: Arc::default(),
            delta: None,
            upkept: Arc::default(),
        }
    }

    /// A dataset rooted at the local directory `root` (created if missing), through
    /// object_store's `LocalFileSystem` with fsync on.
    pub fn open(root: impl Into<PathBuf>, options: SinkOptions) -> Result<Self, SinkError> {
        let root = root.into();
        fs::create_dir_all(root.join(paths::CHECKPOINTS)).map_err(|e| {
            // ENOTDIR names neither the file nor the setting: say which file is in the way.
            paths::file_in_the_way(&root).unwrap_or_else(|| io("create", &root)(e))
        })?;
        let local = LocalFileSystem::new_with_prefix(&root)
            .map_err(|source| SinkError::Store {
                action: "open",
                location: root.display().to_string(),
                source,
            })?
            .with_fsync(true);
        let url = root.display().to_string();
        let store = Store {
            store: Arc::new(local),
            runtime: start_runtime(&url)?,
            url,
            prefix: String::new(),
            directory: Some(root.clone()),
            writer: new_writer(),
        };
        Ok(Self::with_store(root, store, options))
    }

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
        let root = if prefix.is_empty() {
            PathBuf::from(&url)
        } else {
            PathBuf::from(format!("{url}/{prefix}"))
        };
        let store = Store {
            store,
            runtime: start_runtime(&url)?,
            url,
            prefix,
            directory: None,
            writer: new_writer(),
        };
        Ok(Self::with_store(root, store, options))
    }
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
    fn on_a_local_directory_a_name_is_the_file_name_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        ds.check().unwrap();
        // A hive-escaped model partition: readers decode it once, so no `%` may be escaped.
        let name = "model=ranker%20b%2F2/dt=2024-01-01/a b#c.parquet";
        ds.storage
            .put(&format!("_x/{name}"), b"v".to_vec())
            .unwrap();
        assert!(ds.storage.publish(&format!("_x/{name}"), name).unwrap());
        assert_eq!(fs::read(dir.path().join(name)).unwrap(), b"v");
        let (dirs, _) = ds.storage.children("").unwrap();
        assert!(
            dirs.contains(&"model=ranker%20b%2F2".to_string()),
            "{dirs:?}"
        );
        let (_, files) = ds
            .storage
            .children("model=ranker%20b%2F2/dt=2024-01-01")
            .unwrap();
        assert_eq!(files, ["a b#c.parquet"]);
        assert!(ds.storage.exists(name).unwrap());
        // Created once; the update in place holds the lock file's directory only.
        assert!(ds.storage.create("_x/once", b"1".to_vec()).unwrap());
        assert!(!ds.storage.create("_x/once", b"2".to_vec()).unwrap());
        assert_eq!(ds.storage.get("_x/once").unwrap(), b"1");
        ds.storage
            .update("_x/once", &mut |old| {
                Ok(Some([old.unwrap(), b"+"].concat()))
            })
            .unwrap();
        assert_eq!(ds.storage.tail("_x/once", 1).unwrap(), b"+");
        // Gone from staging: not published again.
        assert!(!ds.storage.publish(&format!("_x/{name}"), name).unwrap());
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
