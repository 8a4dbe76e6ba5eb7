//! The dataset on disk and its commit protocol (docs/JOINER.md, "Exactly once").
//!
//! A flush of a task stages its rows as hidden `.part-*.parquet.pending` files (written, then
//! fsynced), then **creates** the task's next checkpoint, which names those files and the input
//! offsets they cover. Creating the checkpoint is the commit: it is written under a temporary
//! name and hard-linked into place, which fails if that epoch exists, so a second owner of the
//! task (a zombie after a rebalance) cannot commit over the first. After the commit the pending
//! files are renamed to their visible names. [`Dataset::recover`] finishes an interrupted roll
//! forward and deletes whatever was staged and never committed, so a task restarted after
//! `kill -9` at any point sees each row exactly once.
//!
//! Readers (Spark, pyarrow, Polars) skip names that start with `.` or `_`, so pending files and
//! `_featurelog/` are invisible to them.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use crate::rows::{hour_partition, to_record_batch};
use crate::state::Row;

/// What went wrong with the dataset, with the path concerned.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we were doing.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Rows could not be encoded.
    #[error("encoding rows for {path}: {message}")]
    Encode {
        /// The file being written.
        path: PathBuf,
        /// The encoder's message.
        message: String,
    },
    /// Another process committed this epoch of the task first: this one no longer owns it.
    #[error("task {task:?}: epoch {epoch} was already committed by another owner")]
    Fenced {
        /// The task.
        task: String,
        /// The epoch.
        epoch: u64,
    },
    /// A checkpoint cannot be read, or names a file that is gone.
    #[error("checkpoint {path}: {problem}")]
    Checkpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SinkError + 'a {
    move |source| SinkError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// A task's committed progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The task (e.g. `features-topic-3`).
    pub task: String,
    /// Increases by one per commit.
    pub epoch: u64,
    /// The next offset to read, per input (`features`, `events`).
    pub offsets: BTreeMap<String, i64>,
    /// The task's watermark at the commit.
    pub watermark_us: i64,
    /// Data files committed in this epoch, relative to the dataset root, visible names.
    pub files: Vec<String>,
    /// The task's state snapshot at the commit, relative to the root, if any.
    pub state: Option<String>,
}

/// The marker of a complete hour.
pub const SUCCESS: &str = "_SUCCESS";

/// What [`Dataset::stage`] wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Staged {
    /// The visible names the files get at the roll forward.
    pub files: Vec<String>,
    /// Rows that went to the late area.
    pub late_rows: usize,
}

/// The start of the hour `date` (`YYYY-MM-DD`) `hh` in epoch microseconds.
fn hour_start_us(date: &str, hh: &str) -> Option<i64> {
    let y: i64 = date.get(0..4)?.parse().ok()?;
    let m: i64 = date.get(5..7)?.parse().ok()?;
    let d: i64 = date.get(8..10)?.parse().ok()?;
    let h: i64 = hh.parse().ok()?;
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600) * 1_000_000)
}

/// Writer settings.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
    /// zstd level of the Parquet pages.
    pub zstd_level: i32,
}

impl Default for SinkOptions {
    fn default() -> Self {
        Self {
            row_group_rows: 64 * 1024,
            zstd_level: 3,
        }
    }
}

/// A dataset directory.
#[derive(Debug, Clone)]
pub struct Dataset {
    root: PathBuf,
    options: SinkOptions,
}

fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync directory", dir))
}

fn pending_name(visible: &str) -> String {
    match visible.rsplit_once('/') {
        Some((dir, file)) => format!("{dir}/.{file}.pending"),
        None => format!(".{visible}.pending"),
    }
}

/// Task names become file-name parts: anything but letters, digits, `-` and `_` becomes `_`.
fn safe(task: &str) -> String {
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

impl Dataset {
    /// A dataset rooted at `root` (created if missing).
    pub fn open(root: impl Into<PathBuf>, options: SinkOptions) -> Result<Self, SinkError> {
        let root = root.into();
        fs::create_dir_all(root.join("_featurelog/checkpoints")).map_err(io("create", &root))?;
        Ok(Self { root, options })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn checkpoint_dir(&self, task: &str) -> PathBuf {
        self.root.join("_featurelog/checkpoints").join(safe(task))
    }

    /// Writes `rows` as pending files of `task`'s `epoch`, one per hour of impression time
    /// (negatives, which have none, by served-at). Rows of an hour already marked complete
    /// (`_SUCCESS`) go under `late/` instead, never silently into the finished hour. Returns the
    /// visible names the files will get and how many rows were late.
    pub fn stage(&self, task: &str, epoch: u64, rows: &[Row]) -> Result<Staged, SinkError> {
        let mut by_hour: BTreeMap<(String, String), Vec<Row>> = BTreeMap::new();
        for row in rows {
            let t = row.impression_time_us.unwrap_or_else(|| {
                row.features
                    .served_at
                    .as_ref()
                    .map(|t| t.seconds.saturating_mul(1_000_000))
                    .unwrap_or(0)
            });
            by_hour
                .entry(hour_partition(t))
                .or_default()
                .push(row.clone());
        }
        let mut staged = Staged::default();
        for (n, ((dt, hr), rows)) in by_hour.into_iter().enumerate() {
            let hour_dir = format!("dt={dt}/hr={hr}");
            let dir = if self.root.join(&hour_dir).join(SUCCESS).exists() {
                staged.late_rows += rows.len();
                format!("late/{hour_dir}")
            } else {
                hour_dir
            };
            let visible = format!("{dir}/part-{}-{epoch:010}-{n:04}.parquet", safe(task));
            self.write_parquet(&pending_name(&visible), &rows)?;
            staged.files.push(visible);
        }
        Ok(staged)
    }

    /// The newest checkpoint of a task, read only (no roll forward, no clean-up).
    pub fn latest_checkpoint(&self, task: &str) -> Result<Option<Checkpoint>, SinkError> {
        let dir = self.checkpoint_dir(task);
        if !dir.exists() {
            return Ok(None);
        }
        let mut newest: Option<(u64, PathBuf)> = None;
        for entry in fs::read_dir(&dir).map_err(io("list", &dir))? {
            let entry = entry.map_err(io("list", &dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(epoch) = name
                .strip_suffix(".json")
                .and_then(|e| e.parse::<u64>().ok())
            else {
                continue;
            };
            if newest.as_ref().is_none_or(|(e, _)| epoch > *e) {
                newest = Some((epoch, entry.path()));
            }
        }
        let Some((_, path)) = newest else {
            return Ok(None);
        };
        let text = fs::read(&path).map_err(io("read", &path))?;
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| SinkError::Checkpoint {
                path,
                problem: e.to_string(),
            })
    }

    /// Marks complete every hour that ended at least `lag_us` before the dataset watermark,
    /// the minimum of the newest checkpointed watermark of every one of `tasks`. Returns the
    /// hours marked now (`dt=.../hr=...`). Marks nothing while a task has no checkpoint.
    pub fn mark_complete(&self, tasks: &[String], lag_us: i64) -> Result<Vec<String>, SinkError> {
        let mut watermark = i64::MAX;
        for task in tasks {
            match self.latest_checkpoint(task)? {
                Some(cp) => watermark = watermark.min(cp.watermark_us),
                None => return Ok(Vec::new()),
            }
        }
        if tasks.is_empty() || watermark == i64::MIN {
            return Ok(Vec::new());
        }
        let complete_before = watermark.saturating_sub(lag_us);
        let mut marked = Vec::new();
        for day in fs::read_dir(&self.root)
            .map_err(io("list", &self.root))?
            .flatten()
        {
            let day_name = day.file_name().to_string_lossy().into_owned();
            let Some(date) = day_name.strip_prefix("dt=") else {
                continue;
            };
            let day_path = day.path();
            for hour in fs::read_dir(&day_path)
                .map_err(io("list", &day_path))?
                .flatten()
            {
                let hour_name = hour.file_name().to_string_lossy().into_owned();
                let Some(start) = hour_name
                    .strip_prefix("hr=")
                    .and_then(|hh| hour_start_us(date, hh))
                else {
                    continue;
                };
                let marker = hour.path().join(SUCCESS);
                if start.saturating_add(3_600_000_000) <= complete_before && !marker.exists() {
                    File::create(&marker)
                        .and_then(|f| f.sync_all())
                        .map_err(io("create", &marker))?;
                    sync_dir(&hour.path())?;
                    marked.push(format!("{day_name}/{hour_name}"));
                }
            }
        }
        Ok(marked)
    }

    fn write_parquet(&self, relative: &str, rows: &[Row]) -> Result<(), SinkError> {
        let path = self.root.join(relative);
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let encode = |e: &dyn std::fmt::Display| SinkError::Encode {
            path: path.clone(),
            message: e.to_string(),
        };
        let batch = to_record_batch(rows).map_err(|e| encode(&e))?;
        let level = ZstdLevel::try_new(self.options.zstd_level).map_err(|e| encode(&e))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_max_row_group_row_count(Some(self.options.row_group_rows.max(1)))
            .build();
        let file = File::create(&path).map_err(io("create", &path))?;
        let mut writer =
            ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(|e| encode(&e))?;
        writer.write(&batch).map_err(|e| encode(&e))?;
        let file = writer.into_inner().map_err(|e| encode(&e))?;
        file.sync_all().map_err(io("fsync", &path))?;
        sync_dir(&dir)
    }

    /// Writes a task's state snapshot for `epoch`; returns its name for the checkpoint.
    pub fn stage_state(
        &self,
        task: &str,
        epoch: u64,
        snapshot: &[u8],
    ) -> Result<String, SinkError> {
        let relative = format!("_featurelog/state/{}/{epoch:020}.bin", safe(task));
        let path = self.root.join(&relative);
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let mut f = File::create(&path).map_err(io("create", &path))?;
        f.write_all(snapshot).map_err(io("write", &path))?;
        f.sync_all().map_err(io("fsync", &path))?;
        sync_dir(&dir)?;
        Ok(relative)
    }

    /// The commit point: creates the checkpoint of `checkpoint.epoch`, or fails with
    /// [`SinkError::Fenced`] if that epoch exists.
    pub fn commit(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        let dir = self.checkpoint_dir(&checkpoint.task);
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let path = dir.join(format!("{:020}.json", checkpoint.epoch));
        let tmp = dir.join(format!(
            ".{:020}.json.{}.tmp",
            checkpoint.epoch,
            std::process::id()
        ));
        let json = serde_json::to_vec_pretty(checkpoint).map_err(|e| SinkError::Encode {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let mut f = File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(&json).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("fsync", &tmp))?;
        // link() refuses an existing target: only one owner can create an epoch.
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => sync_dir(&dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(SinkError::Fenced {
                task: checkpoint.task.clone(),
                epoch: checkpoint.epoch,
            }),
            Err(e) => Err(io("link", &path)(e)),
        }
    }

    /// Makes a committed checkpoint's files visible (idempotent).
    pub fn roll_forward(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        for visible in &checkpoint.files {
            let to = self.root.join(visible);
            if to.exists() {
                continue;
            }
            let from = self.root.join(pending_name(visible));
            fs::rename(&from, &to).map_err(|source| SinkError::Checkpoint {
                path: self.checkpoint_dir(&checkpoint.task),
                problem: format!(
                    "committed file {visible} is neither visible nor pending: {source}"
                ),
            })?;
            if let Some(dir) = to.parent() {
                sync_dir(dir)?;
            }
        }
        Ok(())
    }

    /// The task's newest checkpoint, after finishing its roll forward and deleting every file
    /// the task staged and never committed. `None` when the task never committed.
    pub fn recover(&self, task: &str) -> Result<Option<Checkpoint>, SinkError> {
        let checkpoint = self.latest_checkpoint(task)?;
        if let Some(cp) = &checkpoint {
            self.roll_forward(cp)?;
        }
        let committed = checkpoint.as_ref().map_or(0, |c| c.epoch);
        self.delete_uncommitted(task, committed)?;
        Ok(checkpoint)
    }

    fn delete_uncommitted(&self, task: &str, committed: u64) -> Result<(), SinkError> {
        let prefix = format!(".part-{}-", safe(task));
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).map_err(io("list", &dir))? {
                let entry = entry.map_err(io("list", &dir))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    if name.starts_with("dt=") || name.starts_with("hr=") || name == "late" {
                        dirs.push(entry.path());
                    }
                    continue;
                }
                let Some(rest) = name.strip_prefix(&prefix) else {
                    continue;
                };
                let epoch = rest.split('-').next().and_then(|e| e.parse::<u64>().ok());
                if name.ends_with(".pending") && epoch.is_some_and(|e| e > committed) {
                    let path = entry.path();
                    fs::remove_file(&path).map_err(io("delete", &path))?;
                }
            }
        }
        Ok(())
    }

    /// Reads a staged state snapshot.
    pub fn read_state(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        let path = self.root.join(relative);
        fs::read(&path).map_err(io("read", &path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Labels;
    use featurelog_schemas::featurelog::v1::{DataType, Feature, FeatureLog, Values};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::Arc;

    fn rows(hour_offset: i64) -> Vec<Row> {
        let log = Arc::new(FeatureLog {
            request_id: "r1".into(),
            model_name: "m".into(),
            served_at: Some(prost_types::Timestamp {
                seconds: 0,
                nanos: 0,
            }),
            row_count: 2,
            candidate_ids: vec!["a".into(), "b".into()],
            features: vec![Feature {
                name: "x".into(),
                datatype: DataType::Int64 as i32,
                row_shape: vec![],
                values: Some(Values {
                    int64_values: vec![10, 20],
                    ..Default::default()
                }),
                per_request: false,
            }],
            ..Default::default()
        });
        (0..2)
            .map(|i| Row {
                request_id: "r1".into(),
                item_id: log.candidate_ids[i].clone(),
                features: log.clone(),
                row: i,
                impression_time_us: Some((hour_offset + i as i64) * 3_600_000_000),
                labels: Labels::default(),
            })
            .collect()
    }

    fn visible_files(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut dirs = vec![root.to_owned()];
        while let Some(d) = dirs.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().unwrap().is_dir() {
                    if !name.starts_with('_') {
                        dirs.push(e.path());
                    }
                } else if !name.starts_with('.') {
                    out.push(
                        e.path()
                            .strip_prefix(root)
                            .unwrap()
                            .to_string_lossy()
                            .into_owned(),
                    );
                }
            }
        }
        out.sort();
        out
    }

    fn checkpoint(task: &str, epoch: u64, files: Vec<String>) -> Checkpoint {
        Checkpoint {
            task: task.into(),
            epoch,
            offsets: [("features".to_string(), 10), ("events".to_string(), 7)].into(),
            watermark_us: 5,
            files,
            state: None,
        }
    }

    #[test]
    fn committed_rows_become_visible_parquet_by_hour() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let files = ds.stage("t-0", 1, &rows(18)).unwrap().files;
        assert_eq!(files.len(), 2, "two impression hours, two files");
        assert!(
            visible_files(dir.path()).is_empty(),
            "nothing visible before the commit"
        );
        let cp = checkpoint("t-0", 1, files.clone());
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        assert_eq!(visible_files(dir.path()), files);
        assert!(files[0].starts_with("dt=1970-01-01/hr=18/"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(
            File::open(dir.path().join(&files[1])).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(batches[0].num_rows(), 1);
        assert!(batches[0].schema().field_with_name("x").is_ok());
    }

    #[test]
    fn recovery_rolls_committed_files_forward_and_drops_uncommitted_ones() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        // Epoch 1 committed but the process died before renaming.
        let files1 = ds.stage("t-0", 1, &rows(1)).unwrap().files;
        ds.commit(&checkpoint("t-0", 1, files1.clone())).unwrap();
        // Epoch 2 staged, never committed.
        ds.stage("t-0", 2, &rows(5)).unwrap();
        // Another task's pending files are not touched.
        let other = ds.stage("t-1", 1, &rows(7)).unwrap().files;

        let cp = ds.recover("t-0").unwrap().unwrap();
        assert_eq!(cp.epoch, 1);
        assert_eq!(cp.offsets["features"], 10);
        assert_eq!(visible_files(dir.path()), files1);
        assert!(dir.path().join(pending_name(&other[0])).exists());
        // Recovering again changes nothing.
        assert_eq!(ds.recover("t-0").unwrap(), Some(cp));
        assert_eq!(visible_files(dir.path()), files1);
        assert_eq!(ds.recover("never").unwrap(), None);
    }

    #[test]
    fn hours_are_marked_complete_by_the_slowest_task_and_late_rows_go_aside() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let tasks = vec!["t-0".to_string(), "t-1".to_string()];
        let staged = ds.stage("t-0", 1, &rows(1)).unwrap();
        let mut cp = checkpoint("t-0", 1, staged.files);
        cp.watermark_us = 10 * 3_600_000_000;
        ds.commit(&cp).unwrap();
        ds.roll_forward(&cp).unwrap();
        assert!(
            ds.mark_complete(&tasks, 0).unwrap().is_empty(),
            "t-1 has no checkpoint yet"
        );
        let mut cp1 = checkpoint("t-1", 1, vec![]);
        cp1.watermark_us = 2 * 3_600_000_000 + 1;
        ds.commit(&cp1).unwrap();
        // The slower task's watermark (02:00) minus a 1 h lag: only hour 00 is complete.
        assert!(ds.mark_complete(&tasks, 3_600_000_000).unwrap().is_empty());
        assert_eq!(
            ds.mark_complete(&tasks, 0).unwrap(),
            ["dt=1970-01-01/hr=01"]
        );
        assert!(dir.path().join("dt=1970-01-01/hr=01/_SUCCESS").exists());
        assert!(!dir.path().join("dt=1970-01-01/hr=02/_SUCCESS").exists());
        // A row for the finished hour arrives later: it goes to late/, counted.
        let late = ds.stage("t-0", 2, &rows(1)[..1]).unwrap();
        assert_eq!(late.late_rows, 1);
        assert!(
            late.files[0].starts_with("late/dt=1970-01-01/hr=01/"),
            "{:?}",
            late.files
        );
    }

    #[test]
    fn a_second_owner_cannot_commit_the_same_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        ds.commit(&checkpoint("t-0", 3, vec![])).unwrap();
        let err = ds.commit(&checkpoint("t-0", 3, vec![])).unwrap_err();
        assert!(matches!(err, SinkError::Fenced { epoch: 3, .. }), "{err}");
    }

    #[test]
    fn state_snapshots_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let name = ds.stage_state("t/0", 4, b"snapshot").unwrap();
        assert!(name.starts_with("_featurelog/state/t_0/"));
        assert_eq!(ds.read_state(&name).unwrap(), b"snapshot");
    }
}
