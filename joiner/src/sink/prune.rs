//! Retention: deleting the checkpoints and state files that no commit, recovery or restore reads
//! any more (docs/JOINER.md, "Checkpoint retention" and "State files"), so that the bookkeeping of
//! a long-running task stays bounded.

use super::Dataset;
use super::error::SinkError;
use super::layout::{state_dir, state_epoch};

/// Old checkpoints deleted at most per [`Dataset::prune_checkpoints`] call, so that a dataset
/// written before checkpoints were pruned sheds its backlog a little at every commit instead of
/// holding up one commit for as long as deleting all of it would take.
const PRUNE_PER_CALL: u64 = 100;

impl Dataset {
    /// Deletes a task's checkpoints older than the newest `checkpoints-kept` after the commit
    /// of `newest`, oldest first and stopping at the first failure, so that whenever an epoch
    /// is missing every epoch before it is missing too: a zombie whose checkpoint was pruned
    /// then finds no predecessor at its next commit ([`Dataset::commit`]) instead of a free
    /// epoch. Deletes at most a hundred per call. Returns how many it deleted.
    pub fn prune_checkpoints(&self, task: &str, newest: u64) -> Result<u64, SinkError> {
        let keep = self.options.checkpoints_kept.max(2);
        // Epochs below `below` go; `newest - keep + 1 ..= newest` stay.
        let below = (newest + 1).saturating_sub(keep);
        let known = self.oldest.lock().ok().and_then(|m| m.get(task).copied());
        let from = match known {
            Some(epoch) => epoch,
            None => self
                .checkpoint_epochs(task)?
                .first()
                .copied()
                .unwrap_or(below),
        };
        let to = below.min(from.saturating_add(PRUNE_PER_CALL));
        let mut epoch = from;
        let result = loop {
            if epoch >= to {
                break Ok(epoch - from);
            }
            if let Err(e) = self.storage.remove(&self.checkpoint_name(task, epoch)) {
                break Err(e);
            }
            epoch += 1;
        };
        if let Ok(mut oldest) = self.oldest.lock() {
            oldest.insert(task.to_owned(), epoch.max(from));
        }
        result
    }

    /// After the commit of `committed`, deletes a task's state files of epochs at or below it
    /// that are not in `keep` (names as in [`Checkpoint::state`]): what neither that checkpoint
    /// nor the one before it reads (a process still restoring from that one finds its files).
    /// That includes the files of writers that lost an epoch to another. Files of later epochs
    /// are never touched: they may belong to a commit not made yet.
    pub fn prune_state(
        &self,
        task: &str,
        keep: &[String],
        committed: u64,
    ) -> Result<usize, SinkError> {
        let dir = state_dir(task);
        let (_, files) = self.storage.children(&dir)?;
        let mut removed = 0;
        for file in files {
            let Some(epoch) = state_epoch(&file) else {
                continue;
            };
            let name = format!("{dir}/{file}");
            if epoch <= committed && !keep.contains(&name) {
                self.storage.remove(&name)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::fixtures::*;
    use crate::sink::{SinkError, SinkOptions};

    #[test]
    fn old_checkpoints_are_pruned_oldest_first_and_a_zombie_behind_them_is_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let options = SinkOptions {
            checkpoints_kept: 3,
            ..SinkOptions::default()
        };
        let local = Dataset::open(dir.path(), options.clone()).unwrap();
        let (_, mut remote) = in_memory();
        remote.options = options.clone();
        for ds in [local, remote] {
            // A process that owned the task at epoch 2, then stalled.
            ds.commit(&checkpoint("t-0", 1, vec![])).unwrap();
            ds.commit(&checkpoint("t-0", 2, vec![])).unwrap();
            // The new owner moves on, pruning after each commit.
            for epoch in 3..=10 {
                ds.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
                ds.prune_checkpoints("t-0", epoch).unwrap();
            }
            assert_eq!(checkpoint_epochs_on_disk(&ds, "t-0"), [8, 9, 10]);
            // The zombie's next epoch is free, but its predecessor is gone: fenced, not
            // committed over the new owner's history.
            let err = ds.commit(&checkpoint("t-0", 3, vec![])).unwrap_err();
            assert!(matches!(err, SinkError::Fenced { epoch: 3, .. }), "{err}");
            assert_eq!(checkpoint_epochs_on_disk(&ds, "t-0"), [8, 9, 10]);
            // The owner goes on; a restart recovers the newest.
            ds.commit(&checkpoint("t-0", 11, vec![])).unwrap();
            assert_eq!(ds.recover("t-0").unwrap().map(|c| c.epoch), Some(11));
        }
    }

    #[test]
    fn a_backlog_of_old_checkpoints_is_shed_a_hundred_per_commit() {
        let store = memory();
        // Written by a joiner that kept every checkpoint.
        let old = on_memory(&store, SinkOptions::default());
        for epoch in 1..=250 {
            old.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
        }
        let ds = on_memory(
            &store,
            SinkOptions {
                checkpoints_kept: 3,
                ..SinkOptions::default()
            },
        );
        assert_eq!(ds.recover("t-0").unwrap().map(|c| c.epoch), Some(250));
        let mut left = Vec::new();
        for epoch in 251..=254 {
            ds.commit(&checkpoint("t-0", epoch, vec![])).unwrap();
            ds.prune_checkpoints("t-0", epoch).unwrap();
            left.push(checkpoint_epochs_on_disk(&ds, "t-0").len());
        }
        // 251 checkpoints less 100, then 152 less 100, then only the newest three.
        assert_eq!(left, [151, 52, 3, 3]);
    }

    #[test]
    fn state_files_no_checkpoint_needs_are_pruned() {
        let store = memory();
        let ds = on_memory(&store, SinkOptions::default());
        let loser = on_memory(&store, SinkOptions::default());
        // mine[i] is epoch i + 1.
        let mine: Vec<String> = (1..=7)
            .map(|epoch| ds.stage_state("t/0", epoch, vec![epoch as u8]).unwrap())
            .collect();
        // Another writer lost epochs 5 (committed by ds) and 7 (not committed yet).
        let lost5 = loser.stage_state("t/0", 5, vec![0]).unwrap();
        let lost7 = loser.stage_state("t/0", 7, vec![0]).unwrap();
        assert_ne!(lost5, mine[4]);
        // Checkpoint 6 reads segments 2 and 6, checkpoint 5 read 2, 4 and 5; 7 is not
        // committed.
        let keep = [
            mine[1].clone(),
            mine[5].clone(),
            mine[3].clone(),
            mine[4].clone(),
        ];
        assert_eq!(ds.prune_state("t/0", &keep, 6).unwrap(), 3);
        let (_, mut left) = ds.storage.children("_featurelog/state/t_0").unwrap();
        left.sort();
        let mut expected: Vec<String> = [1, 3, 4, 5, 6]
            .map(|i| mine[i].clone())
            .into_iter()
            .chain([lost7])
            .map(|n| n.rsplit('/').next().unwrap().to_owned())
            .collect();
        expected.sort();
        assert_eq!(left, expected);
    }
}
