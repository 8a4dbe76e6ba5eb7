//! The dataset on a local directory: fsync after every write (and of the directories that name
//! it), hard links for create-if-absent, an `flock` for updates in place.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{SinkError, io};
use super::layout::{path_segment, safe, staging_epoch, staging_prefix};
use super::paths;
use super::storage::{Storage, Update};
use super::{Dataset, SinkOptions, new_writer};

fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync directory", dir))
}

/// Creates `dir` and its missing parents, fsyncing the parent of each directory created so that
/// the new entries survive a crash.
fn create_dirs(dir: &Path) -> Result<(), SinkError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && !d.exists() {
        missing.push(d);
        match d.parent() {
            Some(parent) => d = parent,
            None => break,
        }
    }
    fs::create_dir_all(dir).map_err(io("create", dir))?;
    for created in missing.iter().rev() {
        match created.parent() {
            // A relative path's first component: its parent is the working directory.
            Some(parent) if parent.as_os_str().is_empty() => sync_dir(Path::new("."))?,
            Some(parent) => sync_dir(parent)?,
            None => {}
        }
    }
    Ok(())
}

/// A local directory: fsync after every write, hard links for create-if-absent.
#[derive(Debug)]
pub(super) struct Local {
    pub(super) root: PathBuf,
    /// Unique to this process's dataset handle, as `Remote::writer` (s3.rs): its staging
    /// directories never collide with another owner's.
    pub(super) writer: String,
}

impl Storage for Local {
    fn describe(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    fn update(&self, relative: &str, update: &mut Update<'_>) -> Result<(), SinkError> {
        update_local(self, relative, update)
    }

    fn tail(&self, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
        tail_local(self, relative, len)
    }

    fn staging(&self, task: &str, epoch: u64) -> String {
        staging_prefix(task, epoch, &self.writer)
    }

    fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), SinkError> {
        let path = self.root.join(relative);
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        create_dirs(&dir)?;
        let mut f = File::create(&path).map_err(io("create", &path))?;
        f.write_all(&bytes).map_err(io("write", &path))?;
        f.sync_all().map_err(io("fsync", &path))?;
        sync_dir(&dir)
    }

    fn create(&self, relative: &str, bytes: Vec<u8>) -> Result<bool, SinkError> {
        let path = self.root.join(relative);
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        create_dirs(&dir)?;
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Per writer: two handles in one process never share a temporary file.
        let tmp = dir.join(format!(".{file}.{}.tmp", self.writer));
        let mut f = File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(&bytes).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("fsync", &tmp))?;
        // link() refuses an existing target: only one owner can create an epoch.
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => sync_dir(&dir).map(|()| true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io("link", &path)(e)),
        }
    }

    fn get(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        let path = self.root.join(relative);
        fs::read(&path).map_err(io("read", &path))
    }

    fn exists(&self, relative: &str) -> Result<bool, SinkError> {
        Ok(self.root.join(relative).exists())
    }

    fn children(&self, dir: &str) -> Result<(Vec<String>, Vec<String>), SinkError> {
        let path = self.root.join(dir);
        let (mut dirs, mut files) = (Vec::new(), Vec::new());
        let entries = match fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((dirs, files)),
            Err(e) => return Err(io("list", &path)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io("list", &path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                dirs.push(name);
            } else {
                files.push(name);
            }
        }
        Ok((dirs, files))
    }

    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError> {
        let (from, to) = (self.root.join(staged), self.root.join(visible));
        let dir = to.parent().unwrap_or(&self.root).to_owned();
        if !from.exists() {
            return Ok(false);
        }
        create_dirs(&dir)?;
        match fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io("rename", &from)(e)),
        }
        // The visible name is durable once its directory is. The staged name's directory is not
        // synced: should the staged name come back after a crash, the roll forward skips it (the
        // visible file exists) and the next recovery deletes it (its epoch is committed).
        sync_dir(&dir)?;
        Ok(true)
    }

    fn clean(&self, staging: &str) -> Result<(), SinkError> {
        let path = self.root.join(staging);
        match fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("delete", &path)(e)),
        }
    }

    fn remove(&self, relative: &str) -> Result<(), SinkError> {
        let path = self.root.join(relative);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("delete", &path)(e)),
        }
    }

    fn discard(&self, task: &str, committed: u64) -> Result<(), SinkError> {
        // Staging directories of epochs at or below the newest checkpoint: that epoch exists,
        // so they were either its writer's (and are all visible now) or a loser's. Later ones
        // may belong to a live writer about to commit, and are left to the recovery that
        // follows its commit.
        let dir = self.root.join(format!("{}/{}", paths::STAGING, safe(task)));
        match fs::read_dir(&dir) {
            Ok(entries) => {
                for entry in entries {
                    let entry = entry.map_err(io("list", &dir))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if staging_epoch(&name).is_some_and(|e| e <= committed) {
                        let path = entry.path();
                        match fs::remove_dir_all(&path) {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(io("delete", &path)(e)),
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("list", &dir)(e)),
        }
        Ok(())
    }
}

impl Dataset {
    /// A dataset rooted at the local directory `root` (created if missing).
    pub fn open(root: impl Into<PathBuf>, options: SinkOptions) -> Result<Self, SinkError> {
        let root = root.into();
        fs::create_dir_all(root.join(paths::CHECKPOINTS)).map_err(|e| {
            // ENOTDIR names neither the file nor the setting: say which file is in the way.
            paths::file_in_the_way(&root).unwrap_or_else(|| io("create", &root)(e))
        })?;
        let writer = new_writer();
        Ok(Self {
            storage: Arc::new(Local {
                root: root.clone(),
                writer: writer.clone(),
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

/// [`Storage::update`] on a local directory: under an exclusive `flock` of a lock file of its
/// own, which the kernel releases when the holder exits however it exits (a lock file that is
/// merely created would outlive a `kill -9` and stop every writer). The new content replaces the
/// old by rename, so a reader sees one or the other, whole.
fn update_local(local: &Local, relative: &str, update: &mut Update<'_>) -> Result<(), SinkError> {
    let lock_path = local.root.join(format!(
        "_featurelog/locks/{}",
        path_segment(relative, b'.')
    ));
    if let Some(dir) = lock_path.parent() {
        create_dirs(dir)?;
    }
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io("create", &lock_path))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io("lock", &lock_path)(e.into()))?;
    let path = local.root.join(relative);
    let current = match fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("read", &path)(e)),
    };
    let Some(bytes) = update(current.as_deref())? else {
        return Ok(());
    };
    let dir = path.parent().unwrap_or(&local.root).to_owned();
    create_dirs(&dir)?;
    // Written beside the lock, where no reader looks even if a crash leaves it there, then
    // renamed into place (one file system: the dataset's).
    let mut tmp = lock_path.clone().into_os_string();
    tmp.push(format!(".{}.tmp", local.writer));
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(io("create", &tmp))?;
    f.write_all(&bytes).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("fsync", &tmp))?;
    fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    sync_dir(&dir)?;
    // The lock is released when `lock` is closed, after the new content is durable.
    drop(lock);
    Ok(())
}

/// The last `len` bytes of a local file.
fn tail_local(local: &Local, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let path = local.root.join(relative);
    let mut f = File::open(&path).map_err(io("read", &path))?;
    let size = f.metadata().map_err(io("read", &path))?.len();
    let start = size.saturating_sub(len as u64);
    f.seek(SeekFrom::Start(start)).map_err(io("read", &path))?;
    let mut bytes = Vec::with_capacity((size - start) as usize);
    f.read_to_end(&mut bytes).map_err(io("read", &path))?;
    Ok(bytes)
}
