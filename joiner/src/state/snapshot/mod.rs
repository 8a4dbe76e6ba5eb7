//! The state file written beside each checkpoint, and the restore from it: what a restarted
//! task needs to continue exactly where the checkpoint left it.
//!
//! - `format`: the file's header messages and how its feature logs follow them;
//! - `write`: [`JoinState::snapshot`], which writes each log once, into a segment, or names
//!   it by its offset in the feature-log topic;
//! - `held`, `pending`: the header's two large repeated fields, encoded from the table;
//! - `reuse`: their entries that did not change, copied from the previous state file;
//! - `restore`: [`JoinState::restore`].

use super::JoinState;

mod format;
mod held;
mod pending;
mod restore;
mod reuse;
#[cfg(test)]
mod tests;
mod write;

/// A serialised state: the file to write for this epoch, and the earlier state files it reads
/// logs from (which must be kept while this is the newest checkpoint).
#[derive(Debug)]
pub struct Snapshot {
    /// This epoch's state file.
    pub bytes: Vec<u8>,
    /// The epochs of the segments it refers to, this epoch's included when it holds logs.
    pub segments: Vec<u64>,
    /// The files of those segments, in the same order.
    pub files: Vec<String>,
}

impl JoinState {
    /// The epochs of the earlier state files the last snapshot refers to.
    pub fn segments(&self) -> Vec<u64> {
        self.segment_bytes.keys().copied().collect()
    }

    /// The names of the state files the last snapshot (or the restored one) refers to, as
    /// given to [`JoinState::snapshot`] (or resolved by [`JoinState::restore`]).
    pub fn segment_files(&self) -> Vec<String> {
        self.segment_bytes
            .keys()
            .filter_map(|e| self.segment_files.get(e).cloned())
            .collect()
    }
}
