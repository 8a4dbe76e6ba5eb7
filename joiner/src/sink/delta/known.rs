//! What a table handle knows of the table without asking the store: its newest snapshot, and
//! the `txn` of each task at exactly that snapshot.
//!
//! A task's commit is built on the known snapshot and checks the task's `txn` in it. Most
//! commits follow this handle's own previous one, so both are known: the commit writes the next
//! log file with no listing of `_delta_log/` and no replay of the log for the `txn` (on a local
//! table, listing the log reads the whole directory, whose files grow by one per commit). A
//! commit by anyone else makes the next one conflict, and the writer then loads the table.

use std::collections::HashMap;

use delta_kernel::{SnapshotRef, Version};

/// The newest snapshot known and the `txn`s known at it.
#[derive(Default)]
pub(super) struct Known {
    snapshot: Option<SnapshotRef>,
    /// Per task, its `txn` version in `snapshot` (`None`: the task has none there); tasks not
    /// in the map were not looked up at this version.
    txns: HashMap<String, Option<u64>>,
}

impl Known {
    pub(super) fn snapshot(&self) -> Option<SnapshotRef> {
        self.snapshot.clone()
    }

    fn version(&self) -> Option<Version> {
        self.snapshot.as_ref().map(|s| s.version())
    }

    /// The snapshot after a commit built on version `base` (`None`: the commit created the
    /// table) that set `task`'s `txn` to `epoch` when `txn` is given. The `txn`s known at
    /// `base` still hold after it: a commit changes only its own.
    pub(super) fn committed(
        &mut self,
        base: Option<Version>,
        snapshot: SnapshotRef,
        txn: Option<(&str, u64)>,
    ) {
        let follows = base.is_some() && self.version() == base;
        let version = snapshot.version();
        if follows {
            self.snapshot = Some(snapshot);
        } else {
            self.loaded(snapshot);
        }
        if let Some((task, epoch)) = txn
            && self.version() == Some(version)
        {
            self.txns.insert(task.to_owned(), Some(epoch));
        }
    }

    /// A snapshot loaded from the store (or committed on another): kept when newer than the
    /// known one, whose `txn`s then no longer say anything.
    pub(super) fn loaded(&mut self, snapshot: SnapshotRef) {
        if self.version().is_none_or(|v| v < snapshot.version()) {
            self.snapshot = Some(snapshot);
            self.txns.clear();
        }
    }

    /// `task`'s `txn` at `version`, when known: `Some(None)` means known to have none.
    pub(super) fn txn(&self, version: Version, task: &str) -> Option<Option<u64>> {
        (self.version() == Some(version))
            .then(|| self.txns.get(task).copied())
            .flatten()
    }

    /// Records `task`'s `txn` as read from the snapshot at `version`.
    pub(super) fn note_txn(&mut self, version: Version, task: &str, epoch: Option<u64>) {
        if self.version() == Some(version) {
            self.txns.insert(task.to_owned(), epoch);
        }
    }
}
