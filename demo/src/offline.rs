//! The careless offline pipeline: the training table it recomputes for the impressed
//! candidates, with its own types and the bugs that cause training/serving skew.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::{DemoError, io};
use crate::world::{self, World};

/// The offline pipeline's training table for the impressed candidates: keyed like the served
/// rows, with its own types (item ids as integers, prices in the catalog's f64) and its bugs.
pub(crate) fn write_offline(
    path: &Path,
    world: &World,
    impressed: &[(String, u64, i64)],
) -> Result<(), DemoError> {
    use arrow_array::{ArrayRef, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray};
    let err = |message: String| DemoError::Offline {
        path: path.to_owned(),
        message,
    };
    let mut columns: BTreeMap<&str, ArrayRef> = BTreeMap::new();
    columns.insert(
        "request_id",
        Arc::new(StringArray::from_iter_values(
            impressed.iter().map(|(r, _, _)| r.as_str()),
        )),
    );
    columns.insert(
        "item_id",
        Arc::new(Int64Array::from_iter_values(
            impressed.iter().map(|&(_, _, i)| i),
        )),
    );
    columns.insert(
        "user_locale",
        Arc::new(StringArray::from_iter_values(
            impressed
                .iter()
                .map(|&(_, u, _)| world::offline::locale(world, u)),
        )),
    );
    columns.insert(
        "user_device",
        Arc::new(StringArray::from_iter_values(
            impressed
                .iter()
                .map(|&(_, u, _)| world::offline::device(world, u)),
        )),
    );
    columns.insert(
        "user_age",
        Arc::new(Int64Array::from_iter_values(
            impressed.iter().map(|&(_, u, _)| world.age(u)),
        )),
    );
    columns.insert(
        "item_category",
        Arc::new(StringArray::from_iter_values(
            impressed.iter().map(|&(_, _, i)| world.category(i)),
        )),
    );
    columns.insert(
        "item_price",
        Arc::new(Float64Array::from_iter_values(
            impressed.iter().map(|&(_, _, i)| world.price(i)),
        )),
    );
    columns.insert(
        "item_popularity",
        Arc::new(Float32Array::from_iter_values(
            impressed
                .iter()
                .map(|&(_, _, i)| world::offline::popularity(world, i)),
        )),
    );
    let mut embeddings =
        arrow_array::builder::ListBuilder::new(arrow_array::builder::Float32Builder::new());
    for &(_, _, item) in impressed {
        embeddings.values().append_slice(&world.embedding(item));
        embeddings.append(true);
    }
    columns.insert("item_embedding", Arc::new(embeddings.finish()));
    let order = [
        "request_id",
        "item_id",
        "user_locale",
        "user_device",
        "user_age",
        "item_category",
        "item_price",
        "item_popularity",
        "item_embedding",
    ];
    let batch = RecordBatch::try_from_iter(
        order
            .iter()
            .filter_map(|name| columns.remove(name).map(|c| (*name, c))),
    )
    .map_err(|e| err(e.to_string()))?;
    let file = std::fs::File::create(path).map_err(io(path))?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None)
        .map_err(|e| err(e.to_string()))?;
    writer.write(&batch).map_err(|e| err(e.to_string()))?;
    writer.close().map_err(|e| err(e.to_string()))?;
    Ok(())
}
