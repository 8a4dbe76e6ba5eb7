//! The commit protocol (docs/JOINER.md, "Exactly once"): checkpoints, and the state files they name.
//!
//! A flush of a task stages its rows under `_featurelog/staging/<task>/<epoch>-<writer>/`
//! (`<writer>` is random per [`Dataset`] handle; one put each, durable when it returns) and its
//! state as `_featurelog/state/<task>/<epoch>-<writer>.bin`, then **creates** the task's next
//! checkpoint, which names those files and the input offsets they cover. Creating the
//! checkpoint is the commit: a put in `PutMode::Create` (a hard link of a fsynced temporary file
//! locally, `If-None-Match: *` on S3), which fails if that epoch exists, so a second owner of
//! the task (a zombie after a rebalance) cannot commit over the first. Because every name a
//! writer stages is its own, the loser of such a race never overwrites a file the winner's
//! checkpoint names, however late it writes. After the commit the staged files get their
//! visible names (object_store's `rename`: rename(2) locally, copy then delete on S3).
//! [`Dataset::recover`] finishes an interrupted roll forward and deletes staging of epochs at or
//! below the committed one (never above: a live writer may be about to commit those), so a task
//! restarted after `kill -9` at any point sees each row exactly once.
//!
//! Checkpoints written before staging was per writer have no [`Checkpoint::staging`]: they roll
//! forward from `.<name>.pending` files beside the visible names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Dataset;
use super::error::SinkError;
use super::layout::{safe, staged_name, state_dir};
use super::paths;

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
    /// Where the files were staged: a prefix unique to the writer, so two owners of a task
    /// never overwrite each other's staged files. From
    /// [`Staged::staging`](super::Staged::staging).
    pub staging: String,
}

impl Dataset {
    pub(super) fn checkpoint_dir(&self, task: &str) -> String {
        format!("{}/{}", paths::CHECKPOINTS, safe(task))
    }

    pub(super) fn checkpoint_name(&self, task: &str, epoch: u64) -> String {
        format!("{}/{epoch:020}.json", self.checkpoint_dir(task))
    }

    pub(super) fn read_checkpoint(&self, relative: &str) -> Result<Checkpoint, SinkError> {
        let text = self.storage.get(relative)?;
        serde_json::from_slice(&text).map_err(|e| SinkError::Checkpoint {
            path: self.storage.describe(relative),
            problem: e.to_string(),
        })
    }

    /// The newest checkpoint of a task, read only (no roll forward, no clean-up).
    pub fn latest_checkpoint(&self, task: &str) -> Result<Option<Checkpoint>, SinkError> {
        let epochs = self.checkpoint_epochs(task)?;
        let (Some(&oldest), Some(&newest)) = (epochs.first(), epochs.last()) else {
            return Ok(None);
        };
        if let Ok(mut known) = self.oldest.lock() {
            known.insert(task.to_owned(), oldest);
        }
        self.read_checkpoint(&self.checkpoint_name(task, newest))
            .map(Some)
    }

    /// The epochs of a task's checkpoints, in order (one listing).
    pub(super) fn checkpoint_epochs(&self, task: &str) -> Result<Vec<u64>, SinkError> {
        let (_, files) = self.storage.children(&self.checkpoint_dir(task))?;
        let mut epochs: Vec<u64> = files
            .iter()
            .filter_map(|name| name.strip_suffix(".json")?.parse().ok())
            .collect();
        epochs.sort_unstable();
        Ok(epochs)
    }

    /// The name of this writer's state file of `task`'s `epoch`. Per writer, as staging is: a
    /// zombie and the owner that fenced it both write a state file of the same epoch before
    /// either commits, and the loser's must never replace the one the winner's checkpoint
    /// names (nor one that later snapshots refer to as a segment).
    pub fn state_name(&self, task: &str, epoch: u64) -> String {
        format!("{}/{epoch:020}-{}.bin", state_dir(task), self.writer)
    }

    /// Writes this writer's state snapshot of `task` for `epoch` (under
    /// [`Dataset::state_name`]); returns its name for the checkpoint.
    pub fn stage_state(
        &self,
        task: &str,
        epoch: u64,
        snapshot: Vec<u8>,
    ) -> Result<String, SinkError> {
        let relative = self.state_name(task, epoch);
        self.storage.put(&relative, snapshot)?;
        Ok(relative)
    }

    /// The commit point: creates the checkpoint of `checkpoint.epoch`, or fails with
    /// [`SinkError::Fenced`] if that epoch exists or if the one before it does not (pruned
    /// after another owner moved far ahead: see [`Dataset::prune_checkpoints`]).
    pub fn commit(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        let relative = self.checkpoint_name(&checkpoint.task, checkpoint.epoch);
        if checkpoint.epoch > 1
            && !self
                .storage
                .exists(&self.checkpoint_name(&checkpoint.task, checkpoint.epoch - 1))?
        {
            return Err(SinkError::Fenced {
                task: checkpoint.task.clone(),
                epoch: checkpoint.epoch,
            });
        }
        let json = serde_json::to_vec_pretty(checkpoint).map_err(|e| SinkError::Encode {
            path: self.storage.describe(&relative),
            message: e.to_string(),
        })?;
        if self.storage.create(&relative, json)? {
            Ok(())
        } else {
            Err(SinkError::Fenced {
                task: checkpoint.task.clone(),
                epoch: checkpoint.epoch,
            })
        }
    }

    /// Whether the checkpoint of `checkpoint.epoch` is `checkpoint` itself, as this writer
    /// wrote it: asked after [`Dataset::commit`] found the epoch taken.
    ///
    /// On an object store, a conditional PUT whose answer was lost (the connection dropped
    /// after the store applied it, as in an outage) is sent again by object_store and refused,
    /// since the object now exists: the commit happened, yet it reports `Fenced`. The
    /// checkpoint names this writer's staging prefix, which no other writer ever uses, so a
    /// checkpoint with those very bytes can only be this commit. False when it cannot be read.
    pub fn is_own_commit(&self, checkpoint: &Checkpoint) -> bool {
        let own_staging =
            checkpoint.staging == self.storage.staging(&checkpoint.task, checkpoint.epoch);
        let relative = self.checkpoint_name(&checkpoint.task, checkpoint.epoch);
        own_staging
            && serde_json::to_vec_pretty(checkpoint)
                .is_ok_and(|json| self.storage.get(&relative).is_ok_and(|bytes| bytes == json))
    }

    /// Makes a committed checkpoint's files visible (idempotent), then deletes what is left of
    /// its staging.
    pub fn roll_forward(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        for visible in &checkpoint.files {
            if self.storage.exists(visible)? {
                continue;
            }
            let staged = staged_name(&checkpoint.staging, visible);
            // Gone from staging yet not visible: unless a concurrent roll forward of the same
            // checkpoint just published it, the commit's files were lost.
            if !self.storage.publish(&staged, visible)? && !self.storage.exists(visible)? {
                return Err(SinkError::Checkpoint {
                    path: self
                        .storage
                        .describe(&self.checkpoint_dir(&checkpoint.task)),
                    problem: format!("committed file {visible} is neither visible nor staged"),
                });
            }
        }
        // Last: the files are visible, so every reader of the table version that adds them
        // can read them.
        if let Some(table) = &self.delta {
            table.commit(&checkpoint.task, checkpoint.epoch, &checkpoint.files)?;
        }
        // Only empty directories are left locally: failing to delete them is no reason to
        // fail a commit, and the next recovery deletes them (their epoch is committed).
        if let Err(err) = self.storage.clean(&checkpoint.staging) {
            tracing::warn!(%err, "staging left after the roll forward not deleted");
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
        self.storage.discard(task, committed)?;
        Ok(checkpoint)
    }

    /// Reads a staged state snapshot.
    pub fn read_state(&self, relative: &str) -> Result<Vec<u8>, SinkError> {
        self.storage.get(relative)
    }
}

#[cfg(test)]
mod tests;
