//! Feature values in the domain both sides are compared in (numbers, text, lists of either),
//! how two values compare, which normalization would make a mismatching pair equal, and how a
//! value prints.
//!
//! Numbers come in two forms: floating point (`f64`, compared with tolerances) and exact
//! (integers, booleans, decimals and times as an `i128` with a [`Unit`], compared exactly
//! unless a feature's own threshold sets a tolerance): an id near 1e18, a counter or a
//! timestamp that differs by one unit is a mismatch, whatever the magnitude.

mod classify;
mod compare;
mod convert;
mod display;
mod owned;

use arrow_array::types::Decimal128Type;
use arrow_array::{Array, BinaryArray, Float64Array, GenericListArray, PrimitiveArray};
use arrow_schema::{ArrowError, DataType};
use serde::Serialize;

#[cfg(test)]
pub(crate) use classify::CASE;
pub(crate) use classify::{OTHER, class_action, class_name, classify, differing_fields};
pub(crate) use compare::{Outcome, compare};
pub(crate) use convert::to_domain;
pub(crate) use display::{fmt_decade, fmt_num, fmt_number};
pub(crate) use owned::{Owned, decode};

/// How a feature's two columns are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Domain {
    /// Both numeric (integers, floats, booleans, decimals, times). Floats as f64 with
    /// tolerances; integers, booleans, decimals and times exactly unless the feature's own
    /// threshold sets a tolerance (a time's is a duration). Times are compared in
    /// microseconds whatever their unit.
    Number,
    /// Anything else, as text (numbers rendered as Arrow prints them, e.g. `1.0`; structs as
    /// JSON objects with their fields in name order).
    Text,
    /// Lists of numbers, element by element.
    NumberList,
    /// Lists of anything else, element by element as text.
    TextList,
}

impl Domain {
    /// The name the JSON report gives the domain.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Domain::Number => "number",
            Domain::Text => "text",
            Domain::NumberList => "number_list",
            Domain::TextList => "text_list",
        }
    }
}

/// What an exact number stands for: how many decimal digits its integer holds and how it
/// prints. Times are stored in nanoseconds and compared in microseconds (scale 3), so that an
/// integer against a time reads as microseconds, as floating-point times always have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Int,
    Bool,
    /// A decimal: the integer is the value times 10^scale.
    Decimal(i8),
    /// Nanoseconds since the epoch (UTC).
    Timestamp,
    /// Nanoseconds since the epoch, a midnight UTC.
    Date,
    /// Nanoseconds since midnight.
    Time,
    /// Nanoseconds.
    Duration,
}

impl Unit {
    /// Decimal digits after the point of the stored integer, in comparison units.
    #[inline]
    pub(crate) fn scale(self) -> i32 {
        match self {
            Unit::Int | Unit::Bool => 0,
            Unit::Decimal(s) => i32::from(s),
            Unit::Timestamp | Unit::Date | Unit::Time | Unit::Duration => 3,
        }
    }

    pub(crate) fn is_time(self) -> bool {
        matches!(
            self,
            Unit::Timestamp | Unit::Date | Unit::Time | Unit::Duration
        )
    }
}

/// An exact value in comparison units as f64 (times in microseconds).
#[inline]
pub(crate) fn exact_f64(v: i128, unit: Unit) -> f64 {
    let s = unit.scale();
    if s == 0 {
        v as f64
    } else {
        v as f64 / 10f64.powi(s)
    }
}

/// Which tolerances apply to a feature, from its two types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tolerance {
    /// A floating-point side: the default tolerances apply.
    Float,
    /// Integers, booleans, decimals: exact unless the feature's own threshold says otherwise.
    Exact,
    /// Times (timestamps, dates, times of day, durations): exact unless a `time-tolerance`
    /// (a duration) says otherwise.
    Time,
    /// Text: no tolerance applies.
    None,
}

fn is_numeric(dt: &DataType) -> bool {
    dt.is_numeric()
        || dt.is_temporal()
        || matches!(dt, DataType::Boolean | DataType::Null)
        || matches!(dt, DataType::Dictionary(_, v) if is_numeric(v))
}

/// Types compared as floating point: floats, and what has no exact form here (Decimal256,
/// intervals).
fn is_float(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, v) => is_float(v),
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal256(..)
        | DataType::Interval(_) => true,
        _ => false,
    }
}

fn is_time(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, v) => is_time(v),
        DataType::Timestamp(..)
        | DataType::Date32
        | DataType::Date64
        | DataType::Time32(_)
        | DataType::Time64(_)
        | DataType::Duration(_) => true,
        _ => false,
    }
}

fn list_child(dt: &DataType) -> Option<&DataType> {
    match dt {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
}

/// The tolerances that apply to a feature of served type `a` and offline type `b` compared in
/// `domain` (lists by their elements' types).
pub(crate) fn tolerance_of(a: &DataType, b: &DataType, domain: Domain) -> Tolerance {
    let (a, b) = match domain {
        Domain::Text | Domain::TextList => return Tolerance::None,
        Domain::Number => (a, b),
        Domain::NumberList => (list_child(a).unwrap_or(a), list_child(b).unwrap_or(b)),
    };
    if is_float(a) || is_float(b) {
        Tolerance::Float
    } else if is_time(a) || is_time(b) {
        Tolerance::Time
    } else {
        Tolerance::Exact
    }
}

/// A nested type in the plural, for notes: `structs`, `lists of maps`.
fn plural(dt: &DataType) -> String {
    match dt {
        DataType::Struct(_) => "structs".into(),
        DataType::Map(..) => "maps".into(),
        DataType::Union(..) => "unions".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("lists of {}", plural(f.data_type()))
        }
        dt => format!("{dt} values"),
    }
}

fn has_union(dt: &DataType) -> bool {
    match dt {
        DataType::Union(..) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => has_union(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| has_union(f.data_type())),
        DataType::Dictionary(_, v) => has_union(v),
        _ => false,
    }
}

/// Why a served column of type `a` and an offline one of type `b` cannot be compared in
/// `domain`, or `None` when they can. Structs, maps and lists of lists have a text form and are
/// compared; lists of structs or maps have none per element. Asked of the conversion itself,
/// on an empty column of each type, so that what it refuses is skipped with this note rather
/// than failing the whole diff on the first batch.
pub(crate) fn not_comparable(a: &DataType, b: &DataType, domain: Domain) -> Option<String> {
    for dt in [a, b] {
        if has_union(dt) {
            // No Parquet or CSV reader makes one, and an empty union column cannot always be
            // built to ask.
            return Some("unions are not compared".into());
        }
        let Err(e) = to_domain(&arrow_array::new_empty_array(dt), domain) else {
            continue;
        };
        return Some(match list_child(dt) {
            Some(child) if child.is_nested() => format!(
                "{} are not compared: lists are compared element by element, and only elements that are numbers, text or lists of those are",
                plural(dt)
            ),
            _ => format!("no conversion of {dt} to {} ({e})", domain.name()),
        });
    }
    None
}

/// The domain of a served column of type `a` against an offline column of type `b`.
pub(crate) fn domain_of(a: &DataType, b: &DataType) -> Domain {
    match (list_child(a), list_child(b)) {
        (Some(x), Some(y)) if is_numeric(x) && is_numeric(y) => Domain::NumberList,
        (Some(_), Some(_)) => Domain::TextList,
        _ if is_numeric(a) && is_numeric(b) => Domain::Number,
        _ => Domain::Text,
    }
}

/// The logical type name used to decide whether two columns' types differ: storage variants
/// of one type (Utf8/LargeUtf8, List/FixedSizeList, dictionaries) are the same type, and so
/// are structs whose fields are the same in another order (fields are compared by name).
pub(crate) fn logical_type(dt: &DataType) -> String {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "binary".into(),
        DataType::Dictionary(_, v) => logical_type(v),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("list<{}>", logical_type(f.data_type()))
        }
        DataType::Struct(fields) => {
            let mut parts: Vec<String> = fields
                .iter()
                .map(|f| format!("{}: {}", f.name(), logical_type(f.data_type())))
                .collect();
            parts.sort();
            format!("struct<{}>", parts.join(", "))
        }
        DataType::Timestamp(u, _) => format!("timestamp[{u:?}]"),
        dt => dt.to_string(),
    }
}

/// An `i128` column: arrow's Decimal128 storage, used here for exact numbers whatever their
/// [`Unit`] (its own precision and scale are not read).
pub(crate) type I128Array = PrimitiveArray<Decimal128Type>;

/// A column in its comparison domain.
#[derive(Debug, Clone)]
pub(crate) enum DArr {
    Num(Float64Array),
    Exact(I128Array, Unit),
    Text(BinaryArray),
    NumList(GenericListArray<i32>, Float64Array),
    TextList(GenericListArray<i32>, BinaryArray),
}

/// One value in its domain, borrowed from a [`DArr`]. A list is its elements `start..end` of
/// the list's child array, whose validity says which elements are null.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'a> {
    Null,
    Num(f64),
    Exact(i128, Unit),
    Text(&'a [u8]),
    NumList(&'a Float64Array, usize, usize),
    TextList(&'a BinaryArray, usize, usize),
}

impl DArr {
    /// This array with `other`'s values where this one is null (the same rows, the same
    /// domain); lists are left as they are. Numbers of two forms (a float variant of an
    /// integer feature) meet as floats.
    pub(crate) fn or_else(self, other: &DArr) -> Result<DArr, ArrowError> {
        use arrow_array::cast::AsArray as _;
        use arrow_array::types::Float64Type;
        let mask = |nulls: Option<&arrow_buffer::NullBuffer>| {
            nulls.map(|n| arrow_array::BooleanArray::new(!n.inner(), None))
        };
        Ok(match (self, other) {
            (DArr::Num(a), DArr::Num(b)) => match mask(a.nulls()) {
                Some(m) => DArr::Num(
                    arrow_select::zip::zip(&m, b, &a)?
                        .as_primitive::<Float64Type>()
                        .clone(),
                ),
                None => DArr::Num(a),
            },
            (DArr::Exact(a, u), DArr::Exact(b, v)) if u.scale() == v.scale() => {
                match mask(a.nulls()) {
                    Some(m) => DArr::Exact(
                        arrow_select::zip::zip(&m, b, &a)?
                            .as_primitive::<Decimal128Type>()
                            .clone(),
                        u,
                    ),
                    None => DArr::Exact(a, u),
                }
            }
            (me @ (DArr::Num(_) | DArr::Exact(..)), other @ (DArr::Num(_) | DArr::Exact(..))) => {
                DArr::Num(me.floats()).or_else(&DArr::Num(other.floats()))?
            }
            (DArr::Text(a), DArr::Text(b)) => match mask(a.nulls()) {
                Some(m) => DArr::Text(
                    arrow_select::zip::zip(&m, b, &a)?
                        .as_binary::<i32>()
                        .clone(),
                ),
                None => DArr::Text(a),
            },
            (me, _) => me,
        })
    }

    /// A number column as floats in comparison units (an empty column for other domains).
    fn floats(&self) -> Float64Array {
        match self {
            DArr::Num(a) => a.clone(),
            DArr::Exact(a, u) => a.unary(|v| exact_f64(v, *u)),
            _ => Float64Array::from(Vec::<f64>::new()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            DArr::Num(a) => a.len(),
            DArr::Exact(a, _) => a.len(),
            DArr::Text(a) => a.len(),
            DArr::NumList(l, _) | DArr::TextList(l, _) => l.len(),
        }
    }

    /// Null rows (a list that is null, not one with null elements).
    pub(crate) fn null_count(&self) -> usize {
        match self {
            DArr::Num(a) => a.null_count(),
            DArr::Exact(a, _) => a.null_count(),
            DArr::Text(a) => a.null_count(),
            DArr::NumList(l, _) | DArr::TextList(l, _) => l.null_count(),
        }
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> Val<'_> {
        match self {
            DArr::Num(a) => {
                if a.is_null(i) {
                    Val::Null
                } else {
                    Val::Num(a.value(i))
                }
            }
            DArr::Exact(a, u) => {
                if a.is_null(i) {
                    Val::Null
                } else {
                    Val::Exact(a.value(i), *u)
                }
            }
            DArr::Text(a) => {
                if a.is_null(i) {
                    Val::Null
                } else {
                    Val::Text(a.value(i))
                }
            }
            DArr::NumList(l, v) => {
                if l.is_null(i) {
                    return Val::Null;
                }
                let o = l.value_offsets();
                Val::NumList(v, o[i] as usize, o[i + 1] as usize)
            }
            DArr::TextList(l, v) => {
                if l.is_null(i) {
                    return Val::Null;
                }
                let o = l.value_offsets();
                Val::TextList(v, o[i] as usize, o[i + 1] as usize)
            }
        }
    }
}

#[cfg(test)]
mod tests;
