//! The column registry (docs/JOINER.md, "Column names"): one file per column name under
//! `_featurelog/columns/`, created if absent, so that the first writer of a name, in any process,
//! decides its kind.

use arrow_schema::ArrowError;

use super::Dataset;
use super::error::SinkError;
use super::layout::path_segment;
use crate::rows::ColumnRegistry;

/// A column name as a file name: bytes other than ASCII letters, digits, `_` and `-` are
/// written `.XX` (hex), so that any feature name is one path segment, the same on every store.
/// A name whose escaped form would pass what a local file system takes in one segment (255
/// bytes) is named by its SHA-256 instead, so that no feature name can fail a flush.
fn column_file(name: &str) -> String {
    format!("_featurelog/columns/{}", path_segment(name, b'.'))
}

/// The dataset's column names, one file each under `_featurelog/columns/`, created if absent:
/// the first writer of a name, in any process, decides its kind (docs/JOINER.md, "Column
/// names").
impl ColumnRegistry for Dataset {
    fn claim(&self, name: &str, kind: &str) -> Result<String, ArrowError> {
        let cached = self.columns.lock().ok().and_then(|c| c.get(name).cloned());
        if let Some(held) = cached {
            return Ok(held);
        }
        let external = |e: SinkError| ArrowError::ExternalError(Box::new(e));
        let file = column_file(name);
        let held = if self
            .storage
            .create(&file, kind.as_bytes().to_vec())
            .map_err(external)?
        {
            kind.to_owned()
        } else {
            let bytes = self.storage.get(&file).map_err(external)?;
            String::from_utf8(bytes).map_err(|_| {
                external(SinkError::Checkpoint {
                    path: self.storage.describe(&file),
                    problem: "not a column kind (text such as FP32 or BYTES:utf8)".into(),
                })
            })?
        };
        if let Ok(mut columns) = self.columns.lock() {
            columns.insert(name.to_owned(), held.clone());
        }
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::SinkOptions;
    use crate::sink::fixtures::*;
    use std::sync::Arc;

    #[test]
    fn a_column_name_is_claimed_once_for_every_process_on_either_store() {
        let dir = tempfile::tempdir().unwrap();
        let local = || Dataset::open(dir.path(), SinkOptions::default()).unwrap();
        let store = Arc::new(object_store::memory::InMemory::new());
        let remote = || {
            let options = SinkOptions::default();
            Dataset::open_object_store(store.clone(), "memory://b", "ds/", options).unwrap()
        };
        for (first, second) in [(local(), local()), (remote(), remote())] {
            assert_eq!(first.claim("price", "FP64").unwrap(), "FP64");
            // Another process (its own cache) learns the first one's claim.
            assert_eq!(second.claim("price", "FP32").unwrap(), "FP64");
            assert_eq!(second.claim("price__FP32", "FP32").unwrap(), "FP32");
            // Any name is one file: separators and spaces are escaped.
            assert_eq!(second.claim("a/b c.d", "BYTES:utf8").unwrap(), "BYTES:utf8");
            assert_eq!(first.claim("a/b c.d", "INT64").unwrap(), "BYTES:utf8");
            assert_eq!(first.claim("a", "INT64").unwrap(), "INT64");
            // However long, a name is claimed (its file then named by a digest).
            let long = "x/".repeat(300);
            assert_eq!(first.claim(&long, "FP32").unwrap(), "FP32");
            assert_eq!(second.claim(&long, "FP64").unwrap(), "FP32");
        }
        assert!(
            dir.path()
                .join("_featurelog/columns/a.2Fb.20c.2Ed")
                .exists()
        );
        assert!(
            keys(&store)
                .iter()
                .any(|k| k == "ds/_featurelog/columns/a.2Fb.20c.2Ed")
        );
    }
}
