//! Arrow columns into their comparison domain: exact numbers as `i128` with a unit, floats as
//! f64, everything else as bytes (structs as JSON objects with their fields in name order, so
//! that two writers' field orders compare equal), lists as lists of those.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Date64Type, Decimal128Type, DurationMicrosecondType,
    DurationMillisecondType, DurationNanosecondType, DurationSecondType, Float64Type, Int64Type,
    Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt64Type,
};
use arrow_array::{Array, ArrayRef, BinaryArray, Float64Array, ListArray, StringArray};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, DataType, Field, TimeUnit};

use super::display::{fmt_exact, fmt_num};
use super::{DArr, Domain, I128Array, Unit};

const MICROS_PER_SECOND: i128 = 1_000_000;
const MICROS_PER_DAY: i128 = 86_400 * MICROS_PER_SECOND;
const NANOS_PER_SECOND: i128 = 1_000_000_000;
const NANOS_PER_DAY: i128 = 86_400 * NANOS_PER_SECOND;

/// Casts `array` into `domain`.
pub(crate) fn to_domain(array: &ArrayRef, domain: Domain) -> Result<DArr, ArrowError> {
    Ok(match domain {
        Domain::Number => match to_exact(array)? {
            Some(exact) => exact,
            None => DArr::Num(to_num(array)?),
        },
        Domain::Text => DArr::Text(to_text(array)?),
        Domain::NumberList | Domain::TextList => {
            let numeric = domain == Domain::NumberList;
            let child_type = if numeric {
                DataType::Float64
            } else {
                DataType::Utf8
            };
            let target = DataType::List(Arc::new(Field::new_list_field(child_type, true)));
            let list = match array.data_type() {
                DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _)
                    if numeric && f.data_type().is_temporal() =>
                {
                    // Times in microseconds, as in the scalar case: the list in its own child
                    // type first, then its elements converted.
                    let inner = DataType::List(Arc::new(Field::new_list_field(
                        f.data_type().clone(),
                        true,
                    )));
                    let (_, offsets, values, nulls) = arrow_cast::cast(array, &inner)?
                        .as_list::<i32>()
                        .clone()
                        .into_parts();
                    let values = to_num(&values)?;
                    Arc::new(ListArray::try_new(
                        Arc::new(Field::new_list_field(DataType::Float64, true)),
                        offsets,
                        Arc::new(values),
                        nulls,
                    )?)
                }
                _ => arrow_cast::cast(array, &target)?,
            };
            let list = list.as_list::<i32>().clone();
            if numeric {
                let values = list.values().as_primitive::<Float64Type>().clone();
                DArr::NumList(list, values)
            } else {
                let values = to_text(list.values())?;
                DArr::TextList(list, values)
            }
        }
    })
}

/// Integers, booleans, decimals (but Decimal256) and times as exact numbers; `None` for other
/// types. Times in nanoseconds: since the epoch for timestamps and dates (at midnight UTC),
/// since midnight for times of day, durations as they are.
fn to_exact(array: &ArrayRef) -> Result<Option<DArr>, ArrowError> {
    fn scaled<T: ArrowPrimitiveType>(array: &ArrayRef, per_unit: i128) -> I128Array
    where
        T::Native: Into<i128>,
    {
        array
            .as_primitive::<T>()
            .unary(|v| v.into().saturating_mul(per_unit))
    }
    use DataType::*;
    use TimeUnit::*;
    let exact = |a: I128Array, unit: Unit| Ok(Some(DArr::Exact(a, unit)));
    match array.data_type() {
        Dictionary(_, v) => to_exact(&arrow_cast::cast(array, v)?),
        Int8 | Int16 | Int32 | Int64 => exact(
            scaled::<Int64Type>(&arrow_cast::cast(array, &Int64)?, 1),
            Unit::Int,
        ),
        UInt8 | UInt16 | UInt32 | UInt64 => exact(
            scaled::<UInt64Type>(&arrow_cast::cast(array, &UInt64)?, 1),
            Unit::Int,
        ),
        Boolean => exact(
            array
                .as_boolean()
                .iter()
                .map(|v| v.map(i128::from))
                .collect(),
            Unit::Bool,
        ),
        Decimal32(_, s) | Decimal64(_, s) => exact(
            arrow_cast::cast(array, &Decimal128(38, *s))?
                .as_primitive::<Decimal128Type>()
                .clone(),
            Unit::Decimal(*s),
        ),
        Decimal128(_, s) => exact(
            array.as_primitive::<Decimal128Type>().clone(),
            Unit::Decimal(*s),
        ),
        Timestamp(u, _) => {
            let a = match u {
                Second => scaled::<TimestampSecondType>(array, NANOS_PER_SECOND),
                Millisecond => scaled::<TimestampMillisecondType>(array, 1_000_000),
                Microsecond => scaled::<TimestampMicrosecondType>(array, 1000),
                Nanosecond => scaled::<TimestampNanosecondType>(array, 1),
            };
            exact(a, Unit::Timestamp)
        }
        Date32 => exact(scaled::<Date32Type>(array, NANOS_PER_DAY), Unit::Date),
        Date64 => exact(scaled::<Date64Type>(array, 1_000_000), Unit::Date),
        Time32(Second) => exact(
            scaled::<Time32SecondType>(array, NANOS_PER_SECOND),
            Unit::Time,
        ),
        Time32(Millisecond) => exact(
            scaled::<Time32MillisecondType>(array, 1_000_000),
            Unit::Time,
        ),
        Time64(Microsecond) => exact(scaled::<Time64MicrosecondType>(array, 1000), Unit::Time),
        Time64(Nanosecond) => exact(scaled::<Time64NanosecondType>(array, 1), Unit::Time),
        Duration(u) => {
            let a = match u {
                Second => scaled::<DurationSecondType>(array, NANOS_PER_SECOND),
                Millisecond => scaled::<DurationMillisecondType>(array, 1_000_000),
                Microsecond => scaled::<DurationMicrosecondType>(array, 1000),
                Nanosecond => scaled::<DurationNanosecondType>(array, 1),
            };
            exact(a, Unit::Duration)
        }
        _ => Ok(None),
    }
}

/// A temporal column as microseconds (timestamps since the epoch, dates at midnight UTC, times
/// since midnight, durations), so that units compare: 1000 ms is 1000000 us. `None` for other
/// types. Nanoseconds keep their fraction of a microsecond. (List elements: scalars are exact.)
fn temporal_micros(array: &ArrayRef) -> Option<Float64Array> {
    fn scaled<T: ArrowPrimitiveType>(array: &ArrayRef, per_unit: i128) -> Float64Array
    where
        T::Native: Into<i64>,
    {
        array
            .as_primitive::<T>()
            .unary::<_, Float64Type>(|v| (i128::from(v.into()) * per_unit) as f64)
    }
    fn nanos<T: ArrowPrimitiveType<Native = i64>>(array: &ArrayRef) -> Float64Array {
        array
            .as_primitive::<T>()
            .unary::<_, Float64Type>(|v| (v / 1000) as f64 + (v % 1000) as f64 / 1000.0)
    }
    use TimeUnit::*;
    Some(match array.data_type() {
        DataType::Timestamp(Second, _) => scaled::<TimestampSecondType>(array, MICROS_PER_SECOND),
        DataType::Timestamp(Millisecond, _) => scaled::<TimestampMillisecondType>(array, 1000),
        DataType::Timestamp(Microsecond, _) => scaled::<TimestampMicrosecondType>(array, 1),
        DataType::Timestamp(Nanosecond, _) => nanos::<TimestampNanosecondType>(array),
        DataType::Date32 => scaled::<Date32Type>(array, MICROS_PER_DAY),
        DataType::Date64 => scaled::<Date64Type>(array, 1000),
        DataType::Time32(Second) => scaled::<Time32SecondType>(array, MICROS_PER_SECOND),
        DataType::Time32(Millisecond) => scaled::<Time32MillisecondType>(array, 1000),
        DataType::Time64(Microsecond) => scaled::<Time64MicrosecondType>(array, 1),
        DataType::Time64(Nanosecond) => nanos::<Time64NanosecondType>(array),
        DataType::Duration(Second) => scaled::<DurationSecondType>(array, MICROS_PER_SECOND),
        DataType::Duration(Millisecond) => scaled::<DurationMillisecondType>(array, 1000),
        DataType::Duration(Microsecond) => scaled::<DurationMicrosecondType>(array, 1),
        DataType::Duration(Nanosecond) => nanos::<DurationNanosecondType>(array),
        _ => return None,
    })
}

/// A column as f64 (times in microseconds).
fn to_num(array: &ArrayRef) -> Result<Float64Array, ArrowError> {
    if let Some(micros) = temporal_micros(array) {
        return Ok(micros);
    }
    let dt = array.data_type();
    let array = if dt.is_temporal() {
        // Intervals: their integer (no cast to a number exists for most).
        arrow_cast::cast(array, &DataType::Int64)?
    } else {
        array.clone()
    };
    Ok(arrow_cast::cast(&array, &DataType::Float64)?
        .as_primitive::<Float64Type>()
        .clone())
}

fn to_text(array: &ArrayRef) -> Result<BinaryArray, ArrowError> {
    if matches!(array.data_type(), DataType::Struct(_)) {
        let rows = json_values(array)?;
        return Ok(rows
            .iter()
            .enumerate()
            .map(|(i, r)| array.is_valid(i).then_some(r.as_bytes()))
            .collect());
    }
    let text = match array.data_type() {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            arrow_cast::cast(array, &DataType::Binary)?
        }
        _ => match arrow_cast::cast(array, &DataType::Utf8) {
            Ok(s) => arrow_cast::cast(&s, &DataType::Binary)?,
            Err(_) => {
                // Types without a cast to text (maps) print as Arrow displays them.
                let fmt = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())?;
                let strings: StringArray = (0..array.len())
                    .map(|i| array.is_valid(i).then(|| fmt.value(i).to_string()))
                    .collect();
                arrow_cast::cast(&strings, &DataType::Binary)?
            }
        },
    };
    Ok(text.as_binary::<i32>().clone())
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// Each row of `array` as JSON (`null` for a null row): a struct as an object whose fields are
/// in name order (so two writers' orders print alike, and a mismatch can name its field),
/// numbers bare, times as ISO 8601 strings, text and anything else (lists, maps, binary) as
/// strings of their Arrow display.
fn json_values(array: &ArrayRef) -> Result<Vec<String>, ArrowError> {
    let n = array.len();
    let null = |i: usize| array.is_null(i);
    let dt = array.data_type();
    Ok(match dt {
        DataType::Struct(_) => {
            let s = array.as_struct();
            let mut fields = s
                .fields()
                .iter()
                .zip(s.columns())
                .map(|(f, c)| Ok((json_string(f.name()), json_values(c)?)))
                .collect::<Result<Vec<_>, ArrowError>>()?;
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            (0..n)
                .map(|i| {
                    if null(i) {
                        return "null".to_owned();
                    }
                    let parts: Vec<String> = fields
                        .iter()
                        .map(|(name, values)| {
                            format!("{name}: {}", values.get(i).map_or("null", |v| v.as_str()))
                        })
                        .collect();
                    format!("{{{}}}", parts.join(", "))
                })
                .collect()
        }
        DataType::Dictionary(_, v) => json_values(&arrow_cast::cast(array, v)?)?,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let f = to_num(array)?;
            (0..n)
                .map(|i| match f.is_valid(i).then(|| f.value(i)) {
                    None => "null".to_owned(),
                    Some(v) if v.is_finite() => fmt_num(v),
                    Some(v) => json_string(&fmt_num(v)),
                })
                .collect()
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = arrow_cast::cast(array, &DataType::Utf8)?;
            let s = s.as_string::<i32>();
            (0..n)
                .map(|i| {
                    if s.is_null(i) {
                        "null".to_owned()
                    } else {
                        json_string(s.value(i))
                    }
                })
                .collect()
        }
        _ => match to_exact(array)? {
            Some(DArr::Exact(a, unit)) => (0..n)
                .map(|i| {
                    if a.is_null(i) {
                        "null".to_owned()
                    } else if unit.is_time() {
                        json_string(&fmt_exact(a.value(i), unit))
                    } else {
                        fmt_exact(a.value(i), unit)
                    }
                })
                .collect(),
            _ => {
                let fmt = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())?;
                (0..n)
                    .map(|i| {
                        if null(i) {
                            "null".to_owned()
                        } else {
                            json_string(&fmt.value(i).to_string())
                        }
                    })
                    .collect()
            }
        },
    })
}
