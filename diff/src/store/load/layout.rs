//! The record layout of the offline side, from the columns' types: how each feature's values
//! are held, how many bytes its exact values and the keys take, and where each part is.

use arrow_array::BinaryArray;

use crate::DiffError;
use crate::input::{Input, Unit as WorkUnit};
use crate::keys::Keys;
use crate::plan::Plan;
use crate::store::{Kind, Layout, Slot, big_marker};
use crate::values::{DArr, Unit, to_domain};

/// How each feature's offline values will be held, from the offline column's type.
pub(super) fn kinds(input: &Input, plan: &Plan) -> Result<Vec<Kind>, DiffError> {
    plan.features
        .iter()
        .map(|f| {
            let dt = input
                .schema
                .field_with_name(&f.offline_name)
                .map(|x| x.data_type().clone())
                .unwrap_or(arrow_schema::DataType::Null);
            let empty = arrow_array::new_empty_array(&dt);
            let d = to_domain(&empty, f.domain).map_err(|source| DiffError::Arrow {
                path: input.root.join(&f.offline_name),
                source,
            })?;
            Ok(match d {
                DArr::Num(_) if dt == arrow_schema::DataType::Float32 => Kind::F32,
                DArr::Num(_) => Kind::F64,
                DArr::Exact(_, u) => Kind::Exact(u, exact_width(input, &f.offline_name, &dt, u)),
                DArr::Text(_) => Kind::Text,
                DArr::NumList(..) | DArr::TextList(..) => Kind::Column,
            })
        })
        .collect()
}

/// Bytes for an exact feature's values: integers of a signed type whose range the Parquet
/// statistics of every row group give are held in as few bytes as hold them (the benchmark's
/// counters, 0 to 999, in two instead of eight); anything else in eight. A value outside the
/// range (statistics that were wrong) is still right, only slower (`Store::big`).
pub(super) fn exact_width(
    input: &Input,
    column: &str,
    dt: &arrow_schema::DataType,
    unit: Unit,
) -> usize {
    use arrow_schema::DataType::*;
    if unit != Unit::Int || !matches!(dt, Int8 | Int16 | Int32 | Int64) {
        return 8;
    }
    let Some((lo, hi)) = input.int_range(column) else {
        return 8;
    };
    // The width's smallest integer is its marker, so the range must stay above it.
    [1usize, 2, 4, 8]
        .into_iter()
        .find(|&w| lo > big_marker(w) && hi <= -(big_marker(w) + 1))
        .unwrap_or(8)
}

/// Bytes of a record's key region: enough for the longest key encoding among the first
/// batch's rows (rounded up to 8), between 16 (an overflow reference) and 64. Longer keys go
/// to the overflow bytes, correct but a cache miss more to compare.
pub(super) fn key_capacity(
    input: &Input,
    units: &[WorkUnit],
    key_columns: &[String],
) -> Result<usize, DiffError> {
    let mut longest = 0;
    if let Some(&unit) = units.first()
        && let Some(batch) = input.first_batch(unit, key_columns)?
    {
        let keys = Keys::new(batch.columns(), key_columns, "offline")?;
        let mut enc = Vec::new();
        for r in 0..batch.num_rows() {
            enc.clear();
            if keys.encode(r, &mut enc) {
                longest = longest.max(enc.len());
            }
        }
    }
    Ok(longest.div_ceil(8).saturating_mul(8).clamp(16, 64))
}

pub(super) fn layout(key_cap: usize, kinds: &[Kind]) -> (Layout, Vec<Slot>, usize) {
    let mut at = key_cap;
    let mut offsets = vec![0usize; kinds.len()];
    let bytes = |kind: &Kind| match *kind {
        Kind::F64 => 8,
        Kind::Exact(_, w) => w,
        Kind::F32 | Kind::Text => 4,
        Kind::Column => 0,
    };
    // Widest values first (eight bytes, then four, two, one), then the null bits.
    for size in [8, 4, 2, 1] {
        for (k, kind) in kinds.iter().enumerate() {
            if bytes(kind) == size {
                offsets[k] = at;
                at += size;
            }
        }
    }
    let null_at = at;
    let width = null_at + kinds.len().div_ceil(8);
    let mut dicts = 0;
    let slots = kinds
        .iter()
        .zip(&offsets)
        .map(|(kind, &off)| match *kind {
            Kind::F64 => Slot::F64(off),
            Kind::F32 => Slot::F32(off),
            Kind::Exact(u, _) => Slot::Exact(off, u),
            Kind::Text => {
                dicts += 1;
                Slot::Code(off, dicts - 1)
            }
            Kind::Column => Slot::Column(Box::new(DArr::Text(BinaryArray::from(Vec::<
                Option<&[u8]>,
            >::new(
            ))))),
        })
        .collect();
    (
        Layout {
            width,
            key_cap,
            null_at,
        },
        slots,
        dicts,
    )
}
