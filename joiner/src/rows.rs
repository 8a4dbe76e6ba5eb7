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

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, MapBuilder, MapFieldNames, StringBuilder};
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BinaryArray, BooleanArray, FixedSizeListArray,
    PrimitiveArray, RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array,
};
use arrow_schema::{ArrowError, DataType as ArrowType, Field, Schema};
use featurelog_schemas::featurelog::v1::{DataType, Values};

use crate::log::{Column, Layout, ServedLog, Side};
use crate::state::Row;

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

/// FP16 bits to the f32 of the same value.
fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exp = u32::from((bits >> 10) & 0x1f);
    let frac = u32::from(bits & 0x3ff);
    let out = match (exp, frac) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise.
            let shift = frac.leading_zeros() - 21;
            let frac = (frac << shift) & 0x3ff;
            sign | ((127 - 15 + 1 - shift) << 23) | (frac << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (frac << 13),
    };
    f32::from_bits(out)
}

fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

fn find<'a>(row: &'a Row, key: &ColumnKey) -> Option<&'a Column> {
    Finder::new(key).find(row).map(|c| c.column)
}

/// One row's column: its metadata, and where to read its values.
#[derive(Clone, Copy)]
struct Cell<'a> {
    log: &'a ServedLog,
    index: usize,
    column: &'a Column,
}

impl<'a> Cell<'a> {
    fn values(&self) -> Option<&'a Values> {
        self.log.values(self.index)
    }
}

/// Finds one column in row after row. Logs of one model and allow list share a layout, so it
/// remembers the last layout and the column's position in it instead of comparing names
/// through the list for every row.
struct Finder<'k> {
    key: &'k ColumnKey,
    last: Option<(*const Layout, Option<usize>)>,
    hint: usize,
}

impl<'k> Finder<'k> {
    fn new(key: &'k ColumnKey) -> Self {
        Self {
            key,
            last: None,
            hint: 0,
        }
    }

    fn find<'a>(&mut self, row: &'a Row) -> Option<Cell<'a>> {
        let key = self.key;
        let log: &ServedLog = &row.features;
        let columns = log.layout().columns();
        let cell = |index: usize| columns.get(index).map(|column| Cell { log, index, column });
        // The rows' logs keep their layouts alive, so a pointer seen is never reused here.
        let ptr = Arc::as_ptr(log.layout());
        if let Some((last, at)) = self.last {
            if last == ptr {
                return at.and_then(cell);
            }
        }
        let matches = |c: &Column| {
            c.side == key.source
                && c.name == key.name
                && c.datatype == key.datatype as i32
                && c.row_shape == key.row_shape
        };
        let at = if columns.get(self.hint).is_some_and(matches) {
            Some(self.hint)
        } else {
            columns.iter().position(matches)
        };
        if let Some(i) = at {
            self.hint = i;
        }
        self.last = Some((ptr, at));
        at.and_then(cell)
    }
}

/// The element range of `row`'s value in a column.
fn range(row: &Row, f: &Column, width: usize) -> (usize, usize) {
    let start = if f.per_request { 0 } else { row.row * width };
    (start, start + width)
}

fn primitive<T: ArrowPrimitiveType>(
    rows: &[Row],
    key: &ColumnKey,
    width: usize,
    extend: impl Fn(Cell<'_>, usize, usize, &mut Vec<T::Native>) -> bool,
) -> ArrayRef {
    let mut values: Vec<T::Native> = Vec::with_capacity(rows.len() * width);
    let mut valid = Vec::with_capacity(rows.len());
    let mut finder = Finder::new(key);
    for row in rows {
        let ok = finder.find(row).is_some_and(|c| {
            let (s, e) = range(row, c.column, width);
            extend(c, s, e, &mut values)
        });
        if !ok {
            values.extend(std::iter::repeat_n(T::Native::default(), width));
        }
        valid.push(ok);
    }
    // The Vec becomes the array's buffer as it is, without a copy.
    let array = PrimitiveArray::<T>::new(values.into(), None);
    wrap(Arc::new(array), T::DATA_TYPE, key, width, valid)
}

fn wrap(
    child: ArrayRef,
    child_type: ArrowType,
    key: &ColumnKey,
    width: usize,
    valid: Vec<bool>,
) -> ArrayRef {
    let nulls = Some(arrow_buffer_nulls(valid));
    if key.row_shape.is_empty() {
        // Re-apply validity to the flat array.
        let data = child.to_data().into_builder().nulls(nulls).build();
        return match data {
            Ok(d) => arrow_array::make_array(d),
            Err(_) => child,
        };
    }
    let field = Arc::new(Field::new_list_field(child_type, false));
    Arc::new(FixedSizeListArray::new(field, width as i32, child, nulls))
}

fn arrow_buffer_nulls(valid: Vec<bool>) -> arrow_buffer::NullBuffer {
    arrow_buffer::NullBuffer::from(valid)
}

/// Reads a column's values from one field of its decoded `Values`, converted by `f`.
fn decoded<S: Copy, N>(
    field: fn(&Values) -> &[S],
    f: fn(S) -> N,
) -> impl Fn(Cell<'_>, usize, usize, &mut Vec<N>) -> bool {
    move |c, s, e, out| {
        c.values()
            .is_some_and(|v| extend_slice(field(v), s, e, out, f))
    }
}

fn extend_slice<S: Copy, N>(
    src: &[S],
    s: usize,
    e: usize,
    out: &mut Vec<N>,
    f: impl Fn(S) -> N,
) -> bool {
    match src.get(s..e) {
        Some(slice) => {
            out.extend(slice.iter().map(|&x| f(x)));
            true
        }
        None => false,
    }
}

/// Elements per row of a column: from the first row that has it.
fn width_of(rows: &[Row], key: &ColumnKey) -> usize {
    rows.iter()
        .find_map(|r| find(r, key))
        .and_then(Column::width)
        .unwrap_or(1)
}

/// The FP32 columns (nearly every feature of a ranking model), read row by row rather than
/// column by column. A row's record is long out of cache when its row is written; column by
/// column, each of its cells waited on the same chain of misses (the log, its cells, the
/// bytes) again, which made reading cells the joiner's largest item in perf. Row by row, the
/// chain is walked once and the cells' own loads overlap.
fn fp32_columns(rows: &[Row], keys: &[&ColumnKey]) -> Vec<ArrayRef> {
    let widths: Vec<usize> = keys.iter().map(|k| width_of(rows, k)).collect();
    let mut finders: Vec<Finder<'_>> = keys.iter().map(|k| Finder::new(k)).collect();
    let mut values: Vec<Vec<f32>> = widths
        .iter()
        .map(|w| Vec::with_capacity(rows.len() * w))
        .collect();
    let mut valid: Vec<Vec<bool>> = keys
        .iter()
        .map(|_| Vec::with_capacity(rows.len()))
        .collect();
    for row in rows {
        for (k, finder) in finders.iter_mut().enumerate() {
            let (width, out) = (widths[k], &mut values[k]);
            let ok = finder.find(row).is_some_and(|c| {
                let (s, e) = range(row, c.column, width);
                c.log.fp32(c.index, s, e, out)
            });
            if !ok {
                out.extend(std::iter::repeat_n(0.0, width));
            }
            valid[k].push(ok);
        }
    }
    values
        .into_iter()
        .zip(valid)
        .zip(keys.iter().zip(widths))
        .map(|((values, valid), (key, width))| {
            let array = PrimitiveArray::<Float32Type>::new(values.into(), None);
            wrap(Arc::new(array), ArrowType::Float32, key, width, valid)
        })
        .collect()
}

/// Builds a column; BYTES are Utf8 when every value is UTF-8 and `binary` is false, else Binary.
fn column(
    rows: &[Row],
    key: &ColumnKey,
    binary: bool,
) -> Result<(ArrowType, ArrayRef), ArrowError> {
    let width = width_of(rows, key);
    let array: ArrayRef = match key.datatype {
        DataType::Bool => {
            let mut values = Vec::with_capacity(rows.len() * width);
            let mut valid = Vec::with_capacity(rows.len());
            let mut finder = Finder::new(key);
            for row in rows {
                let ok = finder.find(row).is_some_and(|c| {
                    let (s, e) = range(row, c.column, width);
                    c.values()
                        .is_some_and(|v| extend_slice(&v.bool_values, s, e, &mut values, |x| x))
                });
                if !ok {
                    values.extend(std::iter::repeat_n(false, width));
                }
                valid.push(ok);
            }
            wrap(
                Arc::new(BooleanArray::from(values)),
                ArrowType::Boolean,
                key,
                width,
                valid,
            )
        }
        DataType::Int8 => {
            primitive::<Int8Type>(rows, key, width, decoded(|v| &v.int32_values, |x| x as i8))
        }
        DataType::Int16 => {
            primitive::<Int16Type>(rows, key, width, decoded(|v| &v.int32_values, |x| x as i16))
        }
        DataType::Int32 => {
            primitive::<Int32Type>(rows, key, width, decoded(|v| &v.int32_values, |x| x))
        }
        DataType::Int64 => {
            primitive::<Int64Type>(rows, key, width, decoded(|v| &v.int64_values, |x| x))
        }
        DataType::Uint8 => {
            primitive::<UInt8Type>(rows, key, width, decoded(|v| &v.uint32_values, |x| x as u8))
        }
        DataType::Uint16 => primitive::<UInt16Type>(
            rows,
            key,
            width,
            decoded(|v| &v.uint32_values, |x| x as u16),
        ),
        DataType::Uint32 => {
            primitive::<UInt32Type>(rows, key, width, decoded(|v| &v.uint32_values, |x| x))
        }
        DataType::Uint64 => {
            primitive::<UInt64Type>(rows, key, width, decoded(|v| &v.uint64_values, |x| x))
        }
        DataType::Fp16 => primitive::<Float32Type>(
            rows,
            key,
            width,
            decoded(|v| &v.half_bits, |x| f16_to_f32(x as u16)),
        ),
        DataType::Bf16 => primitive::<Float32Type>(
            rows,
            key,
            width,
            decoded(|v| &v.half_bits, |x| bf16_to_f32(x as u16)),
        ),
        DataType::Fp32 => match fp32_columns(rows, &[key]).pop() {
            Some(array) => array,
            None => Arc::new(PrimitiveArray::<Float32Type>::new(Vec::new().into(), None)),
        },
        DataType::Fp64 => {
            primitive::<Float64Type>(rows, key, width, |c, s, e, o| c.log.fp64(c.index, s, e, o))
        }
        DataType::Bytes => {
            let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(rows.len() * width);
            let mut valid = Vec::with_capacity(rows.len());
            let mut finder = Finder::new(key);
            for row in rows {
                let cell = finder.find(row).and_then(|c| {
                    let (s, e) = range(row, c.column, width);
                    c.values()?.bytes_values.get(s..e)
                });
                match cell {
                    Some(cell) => values.extend(cell.iter().map(|b| Some(b.as_ref()))),
                    None => values.extend(std::iter::repeat_n(None, width)),
                }
                valid.push(cell.is_some());
            }
            let utf8 = !binary
                && values
                    .iter()
                    .flatten()
                    .all(|b| std::str::from_utf8(b).is_ok());
            let (child, child_type): (ArrayRef, ArrowType) = if utf8 {
                let strings = values
                    .iter()
                    .map(|b| b.and_then(|b| std::str::from_utf8(b).ok()));
                (Arc::new(StringArray::from_iter(strings)), ArrowType::Utf8)
            } else {
                (
                    Arc::new(BinaryArray::from_iter(values.iter().copied())),
                    ArrowType::Binary,
                )
            };
            if key.row_shape.is_empty() {
                child
            } else {
                // Elements of a present vector are never null; the vector itself may be.
                let child =
                    arrow_array::make_array(child.to_data().into_builder().nulls(None).build()?);
                wrap(child, child_type, key, width, valid)
            }
        }
        DataType::Unspecified => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "column {:?} has no datatype",
                key.name
            )));
        }
    };
    Ok((array.data_type().clone(), array))
}

/// Whether a BYTES column was built as Utf8 (itself or as a vector's elements).
fn is_utf8(dt: &ArrowType) -> bool {
    match dt {
        ArrowType::FixedSizeList(child, _) => child.data_type() == &ArrowType::Utf8,
        other => other == &ArrowType::Utf8,
    }
}

fn micros(t: Option<&prost_types::Timestamp>) -> Option<i64> {
    t.map(crate::event::saturating_us)
}

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
fn place(
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
mod tests {
    use super::*;
    use featurelog_schemas::featurelog::v1::{Feature, FeatureLog};
    use prost::Message;

    /// A log as the joiner reads it from Kafka: packed float values left in the bytes.
    fn served(log: FeatureLog) -> ServedLog {
        ServedLog::decode(log.encode_to_vec(), &mut crate::log::Layouts::default()).unwrap()
    }
    use crate::state::Labels;
    use arrow_array::cast::AsArray;

    fn log() -> FeatureLog {
        let feature =
            |name: &str, dt: DataType, shape: Vec<i64>, per_request: bool, v: Values| Feature {
                name: name.into(),
                datatype: dt as i32,
                row_shape: shape,
                values: Some(v),
                per_request,
            };
        FeatureLog {
            request_id: "r1".into(),
            model_name: "ranker".into(),
            model_version: "3".into(),
            served_at: Some(prost_types::Timestamp {
                seconds: 3600,
                nanos: 0,
            }),
            row_count: 2,
            candidate_ids: vec!["a".into(), "b".into()],
            parameters: [("surface", "home"), ("experiment", "b7")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            features: vec![
                feature(
                    "age",
                    DataType::Int8,
                    vec![],
                    true,
                    Values {
                        int32_values: vec![33],
                        ..Default::default()
                    },
                ),
                feature(
                    "price",
                    DataType::Fp32,
                    vec![],
                    false,
                    Values {
                        fp32_values: vec![1.5, -0.0],
                        ..Default::default()
                    },
                ),
                feature(
                    "emb",
                    DataType::Fp32,
                    vec![2],
                    false,
                    Values {
                        fp32_values: vec![0.1, 0.2, 1.1, 1.2],
                        ..Default::default()
                    },
                ),
                feature(
                    "locale",
                    DataType::Bytes,
                    vec![],
                    false,
                    Values {
                        bytes_values: vec!["en-US".into(), "jp_JA".into()],
                        ..Default::default()
                    },
                ),
                feature(
                    "half",
                    DataType::Fp16,
                    vec![],
                    false,
                    Values {
                        half_bits: vec![0x3c00, 0xc000],
                        ..Default::default()
                    },
                ),
            ],
            outputs: vec![feature(
                "score",
                DataType::Fp32,
                vec![],
                false,
                Values {
                    fp32_values: vec![0.9, 0.1],
                    ..Default::default()
                },
            )],
            ..Default::default()
        }
    }

    fn rows() -> Vec<Row> {
        let features = Arc::new(served(log()));
        vec![
            Row {
                request_id: "r1".into(),
                item_id: "b".into(),
                features: features.clone(),
                row: 1,
                impression_time_us: Some(3_700_000_000),
                labels: Labels {
                    clicks: 1,
                    ..Labels::default()
                },
            },
            Row {
                request_id: "r1".into(),
                item_id: "a".into(),
                features,
                row: 0,
                impression_time_us: None,
                labels: Labels::default(),
            },
        ]
    }

    #[test]
    fn every_column_gets_its_real_type_and_the_rows_values() {
        assert_eq!(validate(&served(log())), Ok(()));
        let batch = to_record_batch(&rows(), &InMemoryColumns::default()).unwrap();
        let schema = batch.schema();
        let ty = |n: &str| schema.field_with_name(n).unwrap().data_type().clone();
        assert_eq!(ty("age"), ArrowType::Int8);
        assert_eq!(ty("price"), ArrowType::Float32);
        assert!(matches!(ty("emb"), ArrowType::FixedSizeList(_, 2)));
        assert_eq!(ty("locale"), ArrowType::Utf8);
        assert_eq!(ty("half"), ArrowType::Float32);
        assert_eq!(ty("output_score"), ArrowType::Float32);

        let col = |n: &str| batch.column_by_name(n).unwrap().clone();
        assert_eq!(
            col("age").as_primitive::<Int8Type>().values().to_vec(),
            [33, 33],
            "broadcast"
        );
        let price = col("price");
        let price = price.as_primitive::<Float32Type>();
        assert_eq!(price.value(0), -0.0);
        assert!(
            price.value(0).is_sign_negative(),
            "the row of item b, bit-exact"
        );
        assert_eq!(price.value(1), 1.5);
        let emb = col("emb");
        let emb = emb.as_fixed_size_list();
        assert_eq!(
            emb.value(0).as_primitive::<Float32Type>().values().to_vec(),
            [1.1, 1.2]
        );
        assert_eq!(col("locale").as_string::<i32>().value(0), "jp_JA");
        assert_eq!(
            col("half").as_primitive::<Float32Type>().values().to_vec(),
            [-2.0, 1.0]
        );
        assert!(
            !col("impressed").as_boolean().value(1),
            "a negative is not impressed"
        );
        assert_eq!(col("clicks").as_primitive::<UInt32Type>().value(0), 1);
        assert!(col("impression_time").is_null(1));
        // The logged request parameters, per row, in name order.
        let parameters = col("parameters");
        let entries = parameters.as_map().value(1);
        let (keys, values) = (entries.column(0), entries.column(1));
        let pairs: Vec<(&str, &str)> = (0..entries.len())
            .map(|i| {
                (
                    keys.as_string::<i32>().value(i),
                    values.as_string::<i32>().value(i),
                )
            })
            .collect();
        assert_eq!(pairs, [("experiment", "b7"), ("surface", "home")]);
    }

    #[test]
    fn a_feature_missing_from_some_records_is_null_there_and_type_changes_get_their_own_column() {
        let mut other = log();
        other.request_id = "r2".into();
        other.features.retain(|f| f.name != "locale");
        other.features[1].datatype = DataType::Fp64 as i32;
        other.features[1].values = Some(Values {
            fp64_values: vec![7.0, 8.0],
            ..Default::default()
        });
        let mut rows = rows();
        rows.push(Row {
            request_id: "r2".into(),
            item_id: "a".into(),
            features: Arc::new(served(other)),
            row: 0,
            impression_time_us: Some(1),
            labels: Labels::default(),
        });
        let batch = to_record_batch(&rows, &InMemoryColumns::default()).unwrap();
        assert!(batch.column_by_name("locale").unwrap().is_null(2));
        let price64 = batch.column_by_name("price__FP64").unwrap();
        assert_eq!(price64.as_primitive::<Float64Type>().value(2), 7.0);
        assert!(price64.is_null(0));
    }

    #[test]
    fn a_name_keeps_the_kind_its_first_file_gave_it_in_every_later_file() {
        let registry = InMemoryColumns::default();
        let row = |log: FeatureLog| Row {
            request_id: log.request_id.clone(),
            item_id: "a".into(),
            features: Arc::new(served(log)),
            row: 0,
            impression_time_us: Some(1),
            labels: Labels::default(),
        };
        let type_of = |batch: &RecordBatch, n: &str| {
            batch
                .schema()
                .field_with_name(n)
                .map(|f| f.data_type().clone())
                .ok()
        };
        // The first file: `price` as FP64 (another model's, say) and `locale` as UTF-8.
        let mut first = log();
        first.features[1].datatype = DataType::Fp64 as i32;
        first.features[1].values = Some(Values {
            fp64_values: vec![7.0, 8.0],
            ..Default::default()
        });
        let batch = to_record_batch(&[row(first)], &registry).unwrap();
        assert_eq!(type_of(&batch, "price"), Some(ArrowType::Float64));
        assert_eq!(type_of(&batch, "locale"), Some(ArrowType::Utf8));
        // A later file of FP32 prices and a locale that is not UTF-8: each gets a column of
        // its own instead of a second type under the first file's names.
        let mut later = log();
        later.features[3].values = Some(Values {
            bytes_values: vec![vec![0xff, 0xfe].into(), "en".into()],
            ..Default::default()
        });
        let batch = to_record_batch(&[row(later)], &registry).unwrap();
        assert_eq!(type_of(&batch, "price"), None);
        assert_eq!(type_of(&batch, "price__FP32"), Some(ArrowType::Float32));
        assert_eq!(type_of(&batch, "locale"), None);
        assert_eq!(
            type_of(&batch, "locale__BYTES_binary"),
            Some(ArrowType::Binary)
        );
        let locale = batch.column_by_name("locale__BYTES_binary").unwrap();
        assert_eq!(locale.as_binary::<i32>().value(0), [0xff, 0xfe]);
        // And UTF-8 bytes under a name claimed for Binary are written as Binary.
        let binary = InMemoryColumns::default();
        binary.claim("locale", "BYTES:binary").unwrap();
        let batch = to_record_batch(&rows(), &binary).unwrap();
        assert_eq!(type_of(&batch, "locale"), Some(ArrowType::Binary));
        assert_eq!(
            batch
                .column_by_name("locale")
                .unwrap()
                .as_binary::<i32>()
                .value(0),
            b"jp_JA"
        );
    }

    #[test]
    fn malformed_records_are_refused_before_they_reach_a_file() {
        let mut bad = log();
        bad.features[1].values = Some(Values {
            fp32_values: vec![1.0],
            ..Default::default()
        });
        assert_eq!(validate(&served(bad.clone())).unwrap_err().column, "price");
        let mut bad = log();
        bad.candidate_ids.pop();
        assert_eq!(
            validate(&served(bad.clone())).unwrap_err().column,
            "candidate_ids"
        );
    }

    #[test]
    fn rows_whose_logs_have_equal_but_unshared_layouts_give_the_same_batch() {
        // `ServedLog::from` gives each log a layout of its own: the columns are then matched
        // by comparing them, not by the shared pointer.
        let decoded: Vec<Row> = rows()
            .into_iter()
            .map(|mut r| {
                r.features = Arc::new(ServedLog::from(log()));
                r
            })
            .collect();
        assert_eq!(
            to_record_batch(&decoded, &InMemoryColumns::default()).unwrap(),
            to_record_batch(&rows(), &InMemoryColumns::default()).unwrap()
        );
    }

    #[test]
    fn half_floats_convert_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
    }
}
