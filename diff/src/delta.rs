//! Delta Lake tables as inputs: a side whose directory or `s3://` prefix holds `_delta_log/` is
//! read through the table's log with `delta_kernel`, as the files live at one version (the
//! newest unless one is asked for) with their partition values from the log.
//!
//! A directory listing would be wrong for a table: the files a compaction or an overwrite
//! removed stay on disk until VACUUM deletes them, so a listing reads their rows twice, and it
//! would take files the table never held (the joiner's `late/`). The kernel replays the log
//! (checkpoints included) and yields exactly the live files, paths relative to the root.

use std::fmt::Display;
use std::path::Path;
use std::sync::Arc;

use arrow_schema::DataType;
use delta_kernel::Snapshot;
use delta_kernel::engine::arrow_conversion::TryIntoArrow as _;
use delta_kernel::scan::state::ScanFile;
use delta_kernel::table_features::ColumnMappingMode;
use delta_kernel_default_engine::DefaultEngineBuilder;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use url::Url;

use crate::DiffError;
use crate::input::Input;

/// A table's data at one version: what a side reads instead of a directory listing.
#[derive(Debug)]
pub(crate) struct Table {
    /// The version read.
    pub(crate) version: u64,
    /// The live files, in the order the log gives them.
    pub(crate) files: Vec<TableFile>,
    /// The partition columns in the table's order, with their Arrow types (the table's schema
    /// says `dt` is a date, `hr` an integer: the values are read as such, as Delta readers do).
    pub(crate) partition_types: Vec<(String, DataType)>,
}

/// One live data file of a table.
#[derive(Debug)]
pub(crate) struct TableFile {
    /// Its absolute URL (`file:///...` or `s3://bucket/...`), percent-encoding decoded by
    /// [`Url::to_file_path`] or the object path.
    pub(crate) url: Url,
    /// Its partition values, one per partition column, in [`Table::partition_types`]' order;
    /// `None` for a null value.
    pub(crate) partitions: Vec<(String, Option<String>)>,
}

/// Whether the local directory `path` is the root of a Delta table.
pub(crate) fn is_local_table(path: &Path) -> bool {
    path.join("_delta_log").is_dir()
}

/// The files of the local table at `root` at `version` (the newest when `None`).
pub(crate) fn local(root: &Path, version: Option<u64>) -> Result<Table, DiffError> {
    let shown = root.display().to_string();
    let absolute = root.canonicalize().map_err(|source| DiffError::Io {
        path: root.to_owned(),
        source,
    })?;
    let url = Url::from_directory_path(&absolute)
        .map_err(|()| problem(&shown, version, "not an absolute directory path"))?;
    // Unprefixed: the engine maps a `file://` URL's path to the object path as it is.
    list(Arc::new(LocalFileSystem::new()), &url, &shown, version)
}

/// The files of the table at `root` (ending in `/`) in `store`, at `version` (the newest when
/// `None`). `shown` is the table as the user gave it, for errors.
pub(crate) fn list(
    store: Arc<dyn ObjectStore>,
    root: &Url,
    shown: &str,
    version: Option<u64>,
) -> Result<Table, DiffError> {
    let engine = DefaultEngineBuilder::new(store).build();
    let kernel = |version: Option<u64>, what: &str, e: &dyn Display| {
        problem(shown, version, format!("{what}: {e}"))
    };
    // The newest version first: a version past it is refused naming it, rather than with the
    // kernel's message about a missing log file.
    let latest = Snapshot::builder_for(root.as_str())
        .build(&engine)
        .map_err(|e| kernel(None, "reading the log", &e))?;
    let snapshot = match version {
        None => latest,
        Some(v) if v == latest.version() => latest,
        Some(v) if v > latest.version() => {
            return Err(DiffError::NoSuchVersion {
                table: shown.to_owned(),
                version: v,
                newest: latest.version(),
            });
        }
        Some(v) => Snapshot::builder_for(root.as_str())
            .at_version(v)
            .build(&engine)
            .map_err(|e| kernel(Some(v), "reading the log", &e))?,
    };
    let version = snapshot.version();
    let at = Some(version);
    // With column mapping the files' column names are not the table's: read as they are, every
    // column would be reported missing.
    if let Some(mode @ (ColumnMappingMode::Id | ColumnMappingMode::Name)) =
        &snapshot.table_properties().column_mapping_mode
    {
        return Err(problem(
            shown,
            at,
            format!("column mapping (mode {mode:?}) is not supported"),
        ));
    }
    let schema = snapshot.schema();
    let mut partition_types = Vec::new();
    for name in snapshot
        .table_configuration()
        .metadata()
        .partition_columns()
    {
        let field = schema.field(name).ok_or_else(|| {
            problem(
                shown,
                at,
                format!("partition column {name} is not in the schema"),
            )
        })?;
        let arrow: DataType = field
            .data_type()
            .try_into_arrow()
            .map_err(|e| kernel(at, &format!("the type of partition column {name}"), &e))?;
        partition_types.push((name.clone(), arrow));
    }
    let scan = snapshot
        .scan_builder()
        .build()
        .map_err(|e| kernel(at, "planning the scan", &e))?;
    let mut scanned: Vec<ScanFile> = Vec::new();
    for metadata in scan
        .scan_metadata(&engine)
        .map_err(|e| kernel(at, "replaying the log", &e))?
    {
        let metadata = metadata.map_err(|e| kernel(at, "replaying the log", &e))?;
        scanned = metadata
            .visit_scan_files(scanned, |files, file| files.push(file))
            .map_err(|e| kernel(at, "replaying the log", &e))?;
    }
    let mut files = Vec::with_capacity(scanned.len());
    for file in scanned {
        // Rows a deletion vector removes would be read as if they were still there.
        if file.dv_info.has_vector() {
            return Err(problem(
                shown,
                at,
                format!(
                    "{} has a deletion vector, which the diff does not apply (rewrite the table's files without them, e.g. REORG TABLE ... APPLY (PURGE))",
                    file.path
                ),
            ));
        }
        let url = root
            .join(&file.path)
            .map_err(|e| kernel(at, &format!("the location of {}", file.path), &e))?;
        let partitions = partition_types
            .iter()
            .map(|(name, _)| (name.clone(), file.partition_values.get(name).cloned()))
            .collect();
        files.push(TableFile { url, partitions });
    }
    Ok(Table {
        version,
        files,
        partition_types,
    })
}

/// The side made of the table's files, which are local (the table's directory `root`, or the
/// copies of a remote table's files under it); `shown` is the side as given. With
/// `complete_only`, as for a directory, only files with `_SUCCESS` in their directory or one
/// above it (up to the root) are read.
pub(crate) fn open(
    root: &Path,
    table: Table,
    shown: &str,
    text_columns: &[String],
    complete_only: bool,
) -> Result<Input, DiffError> {
    let at = Some(table.version);
    if table.files.is_empty() {
        return Err(problem(
            shown,
            at,
            "the table holds no data files at this version",
        ));
    }
    let base = root.canonicalize().map_err(|source| DiffError::Io {
        path: root.to_owned(),
        source,
    })?;
    let mut found = Vec::with_capacity(table.files.len());
    let mut skipped = 0;
    for file in table.files {
        let path = file
            .url
            .to_file_path()
            .map_err(|()| problem(shown, at, format!("{} is not a local file", file.url)))?;
        if complete_only && !is_complete(&base, &path) {
            skipped += 1;
        } else {
            found.push((path, file.partitions));
        }
    }
    found.sort();
    let types = table
        .partition_types
        .into_iter()
        .filter(|(_, t)| *t != DataType::Utf8)
        .collect();
    let mut input = Input::from_files(root, found, text_columns, skipped, types)?;
    input.table_version = at;
    Ok(input)
}

/// Whether a directory from `file`'s own up to `root` holds `_SUCCESS`.
fn is_complete(root: &Path, file: &Path) -> bool {
    file.ancestors()
        .skip(1)
        .take_while(|dir| dir.starts_with(root))
        .any(|dir| dir.join("_SUCCESS").is_file())
}

fn problem(table: &str, version: Option<u64>, problem: impl Display) -> DiffError {
    DiffError::Delta {
        table: table.to_owned(),
        version,
        problem: problem.to_string(),
    }
}

#[cfg(test)]
mod tests;
