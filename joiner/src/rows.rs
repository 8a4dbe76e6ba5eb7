//! Training rows as Arrow record batches: fixed columns (ids, model, times, labels) and one
//! column per logged feature and output with its real type.
//!
//! | protocol datatype | Arrow type |
//! | --- | --- |
//! | BOOL | Boolean |
//! | INT8..INT64, UINT8..UINT64 | Int8..Int64, UInt8..UInt64 |
//! | FP16, BF16 | Float32 (every half value is exactly representable) |
//! | FP32, FP64 | Float32, Float64 |
//! | BYTES | Utf8 when every value is UTF-8, else Binary (the first file decides, see below) |
//! | any, with a per-row shape such as [64] | FixedSizeList of the above, 64 wide |
//!
//! A per-request feature is repeated on every row of its request. A feature missing from a
//! row's record (the allow list changed) is null. Outputs are named `output_<name>`.
//!
//! A column name has one type in the whole dataset, across files, tasks and processes, so that
//! readers that merge the files' schemas (Spark, pyarrow datasets, Polars) never meet two types
//! under one name: the first file that writes a name claims it for its kind (datatype, shape,
//! and for BYTES Utf8 or Binary) in a [`ColumnRegistry`]. A feature that arrives under a claimed
//! name with another kind (two models, or a model whose feature changed type) gets its own
//! column, `<name>__<DATATYPE>[x<dims>]` (`__BYTES_binary` for bytes that are not all UTF-8
//! under a name claimed for Utf8).
//!
//! This file owns validation and the assembly of a batch; beside it, `columns.rs` builds each
//! feature's Arrow array from the rows, and `registry.rs` names columns by the kinds the dataset
//! has claimed.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, MapBuilder, MapFieldNames, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array,
};
use arrow_schema::{ArrowError, DataType as ArrowType, Field, Schema};
use featurelog_schemas::featurelog::v1::DataType;

use crate::log::{Layout, ServedLog, Side};
use crate::state::Row;

mod columns;
mod registry;

pub use registry::{ColumnRegistry, InMemoryColumns};

use columns::{column, fp32_columns, is_utf8};
use registry::place;

/// A FeatureLog whose columns do not hold what their shapes say.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("feature log of request {request_id:?}: column {column:?}: {problem}")]
pub struct InvalidFeatureLog {
    /// The request.
    pub request_id: String,
    /// The column.
    pub column: String,
    /// What is wrong.
    pub problem: String,
}

/// Checks that every column of a record holds `row_count` rows (one if per request) of its
/// shape, that candidate ids match the row count, and that every datatype is known. Records
/// that fail are dead-lettered rather than joined.
pub fn validate(log: &ServedLog) -> Result<(), InvalidFeatureLog> {
    let err = |column: &str, problem: String| InvalidFeatureLog {
        request_id: log.request_id.clone(),
        column: column.to_owned(),
        problem,
    };
    let rows = log.row_count as usize;
    if log.has_both_kinds_of_ids() {
        let problem = "both candidate_ids and candidate_int_ids are set".to_owned();
        return Err(err("candidate_int_ids", problem));
    }
    let ids = log.candidate_count();
    if ids != 0 && ids != rows {
        return Err(err("candidate_ids", format!("{ids} ids for {rows} rows")));
    }
    for (i, c) in log.layout().columns().iter().enumerate() {
        if c.data_type() == DataType::Unspecified {
            return Err(err(&c.name, format!("unknown datatype {}", c.datatype)));
        }
        let width = c
            .width()
            .ok_or_else(|| err(&c.name, format!("bad shape {:?}", c.row_shape)))?;
        let want = if c.per_request {
            width
        } else {
            width.saturating_mul(rows)
        };
        let got = log.values_len(i);
        if got != want {
            return Err(err(
                &c.name,
                format!("{got} values, the shape needs {want}"),
            ));
        }
    }
    Ok(())
}

/// Where a column's values come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ColumnKey {
    source: Side,
    name: String,
    datatype: DataType,
    row_shape: Vec<i64>,
}

fn micros(t: Option<&prost_types::Timestamp>) -> Option<i64> {
    t.map(crate::event::saturating_us)
}

/// Builds one record batch from rows (typically those of one hour), naming feature columns
/// through `registry`.
pub fn to_record_batch(
    rows: &[Row],
    registry: &dyn ColumnRegistry,
) -> Result<RecordBatch, ArrowError> {
    let utc: Arc<str> = Arc::from("UTC");
    let ts = ArrowType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some(utc.clone()));
    let mut fields = vec![
        Field::new("request_id", ArrowType::Utf8, false),
        Field::new("item_id", ArrowType::Utf8, false),
        Field::new("model_name", ArrowType::Utf8, false),
        Field::new("model_version", ArrowType::Utf8, false),
        Field::new("served_at", ts.clone(), true),
        Field::new("impression_time", ts, true),
        Field::new("impressed", ArrowType::Boolean, false),
        Field::new("clicks", ArrowType::UInt32, false),
        Field::new("conversions", ArrowType::UInt32, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.request_id.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.item_id.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.features.model_name.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.features.model_version.as_str()),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter(
                rows.iter().map(|r| micros(r.features.served_at.as_ref())),
            )
            .with_timezone(utc.clone()),
        ),
        Arc::new(
            TimestampMicrosecondArray::from_iter(rows.iter().map(|r| r.impression_time_us))
                .with_timezone(utc),
        ),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.impression_time_us.is_some())),
        )),
        Arc::new(UInt32Array::from_iter_values(
            rows.iter().map(|r| r.labels.clicks),
        )),
        Arc::new(UInt32Array::from_iter_values(
            rows.iter().map(|r| r.labels.conversions),
        )),
    ];

    // label values as a map column: names vary by app.
    let names = MapFieldNames {
        entry: "entries".into(),
        key: "key".into(),
        value: "value".into(),
    };
    let mut labels = MapBuilder::new(Some(names), StringBuilder::new(), Float64Builder::new());
    for r in rows {
        for (k, v) in &r.labels.values {
            labels.keys().append_value(k);
            labels.values().append_value(*v);
        }
        for (k, n) in &r.labels.other {
            labels.keys().append_value(k);
            labels.values().append_value(f64::from(*n));
        }
        labels.append(true)?;
    }
    let labels = labels.finish();
    fields.push(Field::new("labels", labels.data_type().clone(), false));
    columns.push(Arc::new(labels));

    // The request parameters the allow list logs (`parameters`), as a map column too: they
    // are per request, and vary by model.
    let names = MapFieldNames {
        entry: "entries".into(),
        key: "key".into(),
        value: "value".into(),
    };
    let mut parameters = MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
    for r in rows {
        // In name order, so that a row reads the same whatever order the record held them in.
        let mut sorted: Vec<(&String, &String)> = r.features.parameters.iter().collect();
        sorted.sort_unstable();
        for (k, v) in sorted {
            parameters.keys().append_value(k);
            parameters.values().append_value(v);
        }
        parameters.append(true)?;
    }
    let parameters = parameters.finish();
    fields.push(Field::new(
        "parameters",
        parameters.data_type().clone(),
        false,
    ));
    columns.push(Arc::new(parameters));

    // Feature and output columns, in order of first appearance.
    let mut keys: Vec<ColumnKey> = Vec::new();
    let mut seen: HashMap<ColumnKey, ()> = HashMap::new();
    // Many rows share a log, and a model's logs list the same columns: only a log whose columns
    // differ from the last one looked at can add a key.
    let mut last: Option<&Arc<Layout>> = None;
    for r in rows {
        let layout = r.features.layout();
        if last.is_some_and(|l| Arc::ptr_eq(l, layout) || l.columns() == layout.columns()) {
            continue;
        }
        last = Some(layout);
        for c in layout.columns() {
            let key = ColumnKey {
                source: c.side,
                name: c.name.clone(),
                datatype: c.data_type(),
                row_shape: c.row_shape.clone(),
            };
            if seen.insert(key.clone(), ()).is_none() {
                keys.push(key);
            }
        }
    }
    let fp32: Vec<&ColumnKey> = keys
        .iter()
        .filter(|k| k.datatype == DataType::Fp32)
        .collect();
    let mut fp32 = fp32_columns(rows, &fp32).into_iter();
    // The fixed columns' names are never a feature's.
    let mut used: HashMap<String, ()> = fields.iter().map(|f| (f.name().clone(), ())).collect();
    for key in &keys {
        let base = match key.source {
            Side::Feature => key.name.clone(),
            Side::Output => format!("output_{}", key.name),
        };
        let ready = if key.datatype == DataType::Fp32 {
            fp32.next()
        } else {
            None
        };
        let (dt, array) = match ready {
            Some(array) => (array.data_type().clone(), array),
            None => column(rows, key, false)?,
        };
        let binary = key.datatype == DataType::Bytes && !is_utf8(&dt);
        let (name, as_binary) = place(registry, &mut used, &base, key, binary)?;
        let (dt, array) = if as_binary == binary {
            (dt, array)
        } else {
            column(rows, key, true)?
        };
        fields.push(Field::new(name, dt, true));
        columns.push(array);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

pub use crate::time::hour_partition;

#[cfg(test)]
mod tests;
