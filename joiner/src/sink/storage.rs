//! The primitive operations the commit protocol is built from ([`Storage`]): implemented once
//! over object_store (store.rs), and wrapped by the sink's unit tests to count requests and
//! fake a store's faults (fixtures.rs).

use std::path::PathBuf;

use super::error::SinkError;

/// What [`Storage::update`] makes of a file's current content (`None`: there is none): the new
/// content, or `None` to leave it as it is.
pub(super) type Update<'a> = dyn FnMut(Option<&[u8]>) -> Result<Option<Vec<u8>>, SinkError> + 'a;

/// The primitive operations the commit protocol is built from. Names are relative to the
/// dataset root, with `/` separators.
pub(super) trait Storage: std::fmt::Debug + Send + Sync {
    /// The full name of `relative`, for messages.
    fn describe(&self, relative: &str) -> PathBuf;
    /// Where a task's files of `epoch` are staged by this writer.
    fn staging(&self, task: &str, epoch: u64) -> String;
    /// Writes `bytes` durably; the name shows complete content or nothing.
    fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), SinkError>;
    /// Creates `relative` durably unless it exists; false when it does.
    fn create(&self, relative: &str, bytes: Vec<u8>) -> Result<bool, SinkError>;
    /// Reads a whole file.
    fn get(&self, relative: &str) -> Result<Vec<u8>, SinkError>;
    /// Whether a file exists.
    fn exists(&self, relative: &str) -> Result<bool, SinkError>;
    /// The sub-directory and file names directly under `dir` ("" for the root).
    fn children(&self, dir: &str) -> Result<(Vec<String>, Vec<String>), SinkError>;
    /// The files directly under `dir`, each with when it was last modified (milliseconds
    /// since the epoch).
    fn files_modified(&self, dir: &str) -> Result<Vec<(String, i64)>, SinkError>;
    /// Gives a staged file its visible name. Ok(false) when the staged file is gone.
    fn publish(&self, staged: &str, visible: &str) -> Result<bool, SinkError>;
    /// Deletes what is left under a staging prefix whose files were all published.
    fn clean(&self, _staging: &str) -> Result<(), SinkError> {
        Ok(())
    }
    /// Deletes what any writer of `task` staged for epochs at or below `committed`, the newest
    /// committed epoch, whose files are all visible: they can never be committed (again).
    /// Never anything of a later epoch: a live writer may be about to commit it.
    fn discard(&self, task: &str, committed: u64) -> Result<(), SinkError>;
    /// Deletes a file; one that is already gone is no error.
    fn remove(&self, relative: &str) -> Result<(), SinkError>;
    /// Verifies that the storage keeps the guarantees the protocol depends on.
    fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
    /// Replaces `relative` with what `update` makes of its content, with no other writer's
    /// update in between (common_metadata.rs). The default is for storages of one writer.
    fn update(&self, relative: &str, update: &mut Update<'_>) -> Result<(), SinkError> {
        let current = if self.exists(relative)? {
            Some(self.get(relative)?)
        } else {
            None
        };
        match update(current.as_deref())? {
            Some(bytes) => self.put(relative, bytes),
            None => Ok(()),
        }
    }
    /// The last `len` bytes of a file (all of a shorter one).
    fn tail(&self, relative: &str, len: usize) -> Result<Vec<u8>, SinkError> {
        let bytes = self.get(relative)?;
        Ok(bytes[bytes.len().saturating_sub(len)..].to_vec())
    }
}
