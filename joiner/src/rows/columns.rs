//! One feature or output column of a batch, built as an Arrow array from the rows' logs: each
//! protocol datatype converted to its Arrow type, vectors as fixed-size lists, a row without
//! the column as null.

use std::sync::Arc;

use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BinaryArray, BooleanArray, FixedSizeListArray,
    PrimitiveArray, StringArray,
};
use arrow_schema::{ArrowError, DataType as ArrowType, Field};
use featurelog_schemas::featurelog::v1::{DataType, Values};

use super::ColumnKey;
use crate::log::{Column, FloatCells, Layout, ServedLog};
use crate::state::Row;

/// FP16 bits to the f32 of the same value.
pub(super) fn f16_to_f32(bits: u16) -> f32 {
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

pub(super) fn bf16_to_f32(bits: u16) -> f32 {
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
        if let Some((last, at)) = self.last
            && last == ptr
        {
            return at.and_then(cell);
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

/// The FP32 columns (nearly every feature of a ranking model), built together, a block of rows
/// at a time. A row's record is long out of cache when its row is written, so reading its
/// cells is a chain of misses (the log, its cells, its bytes), the joiner's largest item in
/// perf. A block's cells are all found first and read after, in a short loop of independent
/// loads that the CPU overlaps.
pub(super) fn fp32_columns(rows: &[Row], keys: &[&ColumnKey]) -> Vec<ArrayRef> {
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
    let mut cells: Vec<Option<FloatCells<'_, f32, 4>>> = Vec::with_capacity(BLOCK * keys.len());
    for block in rows.chunks(BLOCK) {
        cells.clear();
        for (k, finder) in finders.iter_mut().enumerate() {
            let width = widths[k];
            cells.extend(block.iter().map(|row| {
                finder.find(row).and_then(|c| {
                    let (s, e) = range(row, c.column, width);
                    c.log.fp32_cells(c.index, s, e)
                })
            }));
        }
        for (k, column) in cells.chunks(block.len()).enumerate() {
            let (width, out) = (widths[k], &mut values[k]);
            for cell in column {
                match cell {
                    Some(c) => c.append_to(out, f32::from_le_bytes),
                    None => out.extend(std::iter::repeat_n(0.0, width)),
                }
            }
            valid[k].extend(column.iter().map(Option::is_some));
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

/// Rows whose FP32 cells [`fp32_columns`] finds before it reads them: enough loads in flight
/// to cover a miss, few enough that the block's logs stay in cache between the two passes.
const BLOCK: usize = 64;

/// Builds a column; BYTES are Utf8 when every value is UTF-8 and `binary` is false, else Binary.
pub(super) fn column(
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
pub(super) fn is_utf8(dt: &ArrowType) -> bool {
    match dt {
        ArrowType::FixedSizeList(child, _) => child.data_type() == &ArrowType::Utf8,
        other => other == &ArrowType::Utf8,
    }
}
