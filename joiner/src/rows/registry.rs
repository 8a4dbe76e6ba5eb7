//! The kind of column each name holds in a dataset, and the name a column takes when its own
//! is claimed for another kind (the rule is in the `rows` module's docs).

use std::collections::HashMap;

use arrow_schema::ArrowError;
use featurelog_schemas::featurelog::v1::DataType;

use super::ColumnKey;

/// Where a dataset records the kind of column each name holds (module docs). A kind is a
/// stable text: the protocol datatype, the per-row shape if any, and for BYTES the Arrow type,
/// such as `FP32`, `FP32[64]`, `BYTES:utf8` or `BYTES[2x3]:binary`.
pub trait ColumnRegistry {
    /// The kind `name` holds in the dataset, claiming it for `kind` when it holds none yet.
    /// Errors are the store's, as [`ArrowError::ExternalError`].
    fn claim(&self, name: &str, kind: &str) -> Result<String, ArrowError>;
}

/// A registry held in memory: one batch's, or a process's that writes no dataset.
#[derive(Debug, Default)]
pub struct InMemoryColumns(std::sync::Mutex<HashMap<String, String>>);

impl ColumnRegistry for InMemoryColumns {
    fn claim(&self, name: &str, kind: &str) -> Result<String, ArrowError> {
        let mut claimed = self
            .0
            .lock()
            .map_err(|_| ArrowError::ComputeError("column registry poisoned".into()))?;
        Ok(claimed
            .entry(name.to_owned())
            .or_insert_with(|| kind.to_owned())
            .clone())
    }
}

/// The kind text of a column (see [`ColumnRegistry`]).
fn kind_of(key: &ColumnKey, binary: bool) -> String {
    let mut kind = key
        .datatype
        .protocol_name()
        .unwrap_or("UNSPECIFIED")
        .to_owned();
    if !key.row_shape.is_empty() {
        let dims: Vec<String> = key.row_shape.iter().map(i64::to_string).collect();
        kind.push_str(&format!("[{}]", dims.join("x")));
    }
    if key.datatype == DataType::Bytes {
        kind.push_str(if binary { ":binary" } else { ":utf8" });
    }
    kind
}

/// The name a column of `key` takes: `base` if the dataset holds (or now claims) it for an
/// acceptable kind, else the first of `base__<suffix>`, `base__<suffix>_2`, ... that it does.
/// BYTES whose values are all UTF-8 (`binary` false) accept a name claimed for Binary too, and
/// are then written as Binary. Returns the name and whether the column is Binary.
pub(super) fn place(
    registry: &dyn ColumnRegistry,
    used: &mut HashMap<String, ()>,
    base: &str,
    key: &ColumnKey,
    binary: bool,
) -> Result<(String, bool), ArrowError> {
    let kind = kind_of(key, binary);
    let as_binary = kind_of(key, true);
    let datatype = key.datatype.protocol_name().unwrap_or("UNSPECIFIED");
    let mut suffix = datatype.to_owned();
    for dim in &key.row_shape {
        suffix.push_str(&format!("x{dim}"));
    }
    if binary && key.datatype == DataType::Bytes {
        suffix.push_str("_binary");
    }
    for attempt in 0..100 {
        let name = match attempt {
            0 => base.to_owned(),
            1 => format!("{base}__{suffix}"),
            n => format!("{base}__{suffix}_{n}"),
        };
        if used.contains_key(&name) {
            continue;
        }
        let held = registry.claim(&name, &kind)?;
        let fits = if held == kind {
            Some(binary)
        } else if key.datatype == DataType::Bytes && held == as_binary {
            Some(true)
        } else {
            None
        };
        if let Some(binary) = fits {
            used.insert(name.clone(), ());
            return Ok((name, binary));
        }
    }
    Err(ArrowError::InvalidArgumentError(format!(
        "column {base:?}: no free name for kind {kind}"
    )))
}
