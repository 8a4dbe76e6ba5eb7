//! Feature values in the domain both sides are compared in (numbers, text, lists of either),
//! how two values compare, and which normalization would make a mismatching pair equal.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Date64Type, DurationMicrosecondType, DurationMillisecondType,
    DurationNanosecondType, DurationSecondType, Float64Type, Time32MillisecondType,
    Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use arrow_array::{
    Array, ArrayRef, BinaryArray, Float64Array, GenericListArray, ListArray, StringArray,
};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, DataType, Field, TimeUnit};
use serde::Serialize;
use std::sync::Arc;

/// How a feature's two columns are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Domain {
    /// Both numeric (integers, floats, booleans, decimals, times): as f64, with tolerances;
    /// timestamps, dates, times and durations in microseconds whatever their unit.
    Number,
    /// Anything else, as text (numbers rendered as Arrow prints them, e.g. `1.0`).
    Text,
    /// Lists of numbers, element by element.
    NumberList,
    /// Lists of anything else, element by element as text.
    TextList,
}

fn is_numeric(dt: &DataType) -> bool {
    dt.is_numeric()
        || dt.is_temporal()
        || matches!(dt, DataType::Boolean | DataType::Null)
        || matches!(dt, DataType::Dictionary(_, v) if is_numeric(v))
}

fn list_child(dt: &DataType) -> Option<&DataType> {
    match dt {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
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
/// `domain`, or `None` when they can. Structs, maps and lists of lists have a text form (as
/// Arrow prints them) and are compared; lists of structs or maps have none per element. Asked
/// of the conversion itself, on an empty column of each type, so that what it refuses is
/// skipped with this note rather than failing the whole diff on the first batch.
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
/// of one type (Utf8/LargeUtf8, List/FixedSizeList, dictionaries) are the same type.
pub(crate) fn logical_type(dt: &DataType) -> String {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "binary".into(),
        DataType::Dictionary(_, v) => logical_type(v),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("list<{}>", logical_type(f.data_type()))
        }
        DataType::Timestamp(u, _) => format!("timestamp[{u:?}]"),
        dt => dt.to_string(),
    }
}

/// A column in its comparison domain.
#[derive(Debug, Clone)]
pub(crate) enum DArr {
    Num(Float64Array),
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
    Text(&'a [u8]),
    NumList(&'a Float64Array, usize, usize),
    TextList(&'a BinaryArray, usize, usize),
}

fn to_text(array: &ArrayRef) -> Result<BinaryArray, ArrowError> {
    let text = match array.data_type() {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            arrow_cast::cast(array, &DataType::Binary)?
        }
        _ => match arrow_cast::cast(array, &DataType::Utf8) {
            Ok(s) => arrow_cast::cast(&s, &DataType::Binary)?,
            Err(_) => {
                // Types without a cast to text (structs, maps) print as Arrow displays them.
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

/// Microseconds per unit of a temporal type's integer.
const MICROS_PER_SECOND: i128 = 1_000_000;
const MICROS_PER_DAY: i128 = 86_400 * MICROS_PER_SECOND;

/// A temporal column as microseconds (timestamps since the epoch, dates at midnight UTC, times
/// since midnight, durations), so that units compare: 1000 ms is 1000000 us. `None` for other
/// types. Nanoseconds keep their fraction of a microsecond.
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

fn to_num(array: &ArrayRef) -> Result<Float64Array, ArrowError> {
    if let Some(micros) = temporal_micros(array) {
        return Ok(micros);
    }
    let dt = array.data_type();
    let array = if dt.is_temporal() {
        // Intervals: their integer, as before (no cast to a number exists for most).
        arrow_cast::cast(array, &DataType::Int64)?
    } else {
        array.clone()
    };
    Ok(arrow_cast::cast(&array, &DataType::Float64)?
        .as_primitive::<Float64Type>()
        .clone())
}

/// Casts `array` into `domain`.
pub(crate) fn to_domain(array: &ArrayRef, domain: Domain) -> Result<DArr, ArrowError> {
    Ok(match domain {
        Domain::Number => DArr::Num(to_num(array)?),
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

impl DArr {
    /// This array with `other`'s values where this one is null (the same rows, the same
    /// domain); lists are left as they are.
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

    pub(crate) fn len(&self) -> usize {
        match self {
            DArr::Num(a) => a.len(),
            DArr::Text(a) => a.len(),
            DArr::NumList(l, _) | DArr::TextList(l, _) => l.len(),
        }
    }

    /// Null rows (a list that is null, not one with null elements).
    pub(crate) fn null_count(&self) -> usize {
        match self {
            DArr::Num(a) => a.null_count(),
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

/// How one pair of values compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Outcome {
    BothNull,
    Equal,
    /// Numbers that differ by this much but within tolerance.
    WithinTolerance(f64),
    /// Only the served value is null.
    ServedNull,
    /// Only the offline value is null.
    OfflineNull,
    /// Both present and different; the absolute difference for numbers.
    Differ(Option<f64>),
}

#[inline]
fn num_close(a: f64, b: f64, abs: f64, rel: f64) -> Result<(), f64> {
    if a == b || (a.is_nan() && b.is_nan()) {
        return Ok(());
    }
    if a.is_infinite() || b.is_infinite() {
        // No tolerance reaches an infinity (`rel * max(|a|, |b|)` would be infinite too).
        return Err(f64::INFINITY);
    }
    let d = (a - b).abs();
    if d <= abs || d <= rel * a.abs().max(b.abs()) {
        Ok(())
    } else {
        Err(d)
    }
}

/// Compares a served value with an offline one.
#[inline]
pub(crate) fn compare(s: Val<'_>, o: Val<'_>, abs: f64, rel: f64) -> Outcome {
    match (s, o) {
        (Val::Null, Val::Null) => Outcome::BothNull,
        (Val::Null, _) => Outcome::ServedNull,
        (_, Val::Null) => Outcome::OfflineNull,
        (Val::Num(a), Val::Num(b)) => {
            if a == b || (a.is_nan() && b.is_nan()) {
                Outcome::Equal
            } else {
                match num_close(a, b, abs, rel) {
                    Ok(()) => Outcome::WithinTolerance((a - b).abs()),
                    Err(d) => Outcome::Differ(Some(if d.is_nan() { f64::INFINITY } else { d })),
                }
            }
        }
        (Val::Text(a), Val::Text(b)) => {
            if a == b {
                Outcome::Equal
            } else {
                Outcome::Differ(None)
            }
        }
        (Val::NumList(a, s1, e1), Val::NumList(b, s2, e2)) => {
            if e1 - s1 != e2 - s2 {
                return Outcome::Differ(None);
            }
            let (Some(xs), Some(ys)) = (a.values().get(s1..e1), b.values().get(s2..e2)) else {
                return Outcome::Differ(None);
            };
            // A null element equals only a null element (its slot holds an arbitrary number).
            let nulls = a.null_count() > 0 || b.null_count() > 0;
            let mut worst = 0.0f64;
            let mut exact = true;
            for (k, (&x, &y)) in xs.iter().zip(ys).enumerate() {
                if nulls {
                    match (a.is_null(s1 + k), b.is_null(s2 + k)) {
                        (true, true) => continue,
                        (false, false) => {}
                        _ => return Outcome::Differ(None),
                    }
                }
                if x == y || (x.is_nan() && y.is_nan()) {
                    continue;
                }
                exact = false;
                match num_close(x, y, abs, rel) {
                    Ok(()) => worst = worst.max((x - y).abs()),
                    Err(d) => {
                        return Outcome::Differ(Some(if d.is_nan() { f64::INFINITY } else { d }));
                    }
                }
            }
            if exact {
                Outcome::Equal
            } else {
                Outcome::WithinTolerance(worst)
            }
        }
        (Val::TextList(a, s1, e1), Val::TextList(b, s2, e2)) => {
            let same = |k: usize| match (a.is_null(s1 + k), b.is_null(s2 + k)) {
                (true, true) => true,
                (false, false) => a.value(s1 + k) == b.value(s2 + k),
                _ => false,
            };
            if e1 - s1 == e2 - s2 && (0..e1 - s1).all(same) {
                Outcome::Equal
            } else {
                Outcome::Differ(None)
            }
        }
        _ => Outcome::Differ(None),
    }
}

/// An owned value, for reports and for classifying a mismatching pair (`None`: a null list
/// element).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Owned {
    Null,
    Num(f64),
    Text(String),
    NumList(Vec<Option<f64>>),
    TextList(Vec<Option<String>>),
}

/// In an encoded text list, the length that marks a null element.
const NULL_ITEM: u32 = u32::MAX;

impl Val<'_> {
    /// Appends an encoding that identifies the value (for counting pairs without allocating).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Val::Null => out.push(0),
            Val::Num(v) => {
                out.push(1);
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            Val::Text(b) => {
                out.push(2);
                out.extend_from_slice(b);
            }
            Val::NumList(a, s, e) => {
                // Per element: 0 for null, or 1 and the number.
                out.push(3);
                for k in s..e {
                    if a.is_null(k) {
                        out.push(0);
                    } else {
                        out.push(1);
                        out.extend_from_slice(&a.value(k).to_bits().to_le_bytes());
                    }
                }
            }
            Val::TextList(a, s, e) => {
                out.push(4);
                for k in s..e {
                    if a.is_null(k) {
                        out.extend_from_slice(&NULL_ITEM.to_le_bytes());
                        continue;
                    }
                    let b = a.value(k);
                    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    out.extend_from_slice(b);
                }
            }
        }
    }
}

/// Decodes what [`Val::encode`] wrote.
pub(crate) fn decode(b: &[u8]) -> Owned {
    let (tag, rest) = match b.split_first() {
        Some((t, r)) => (*t, r),
        None => return Owned::Null,
    };
    let f64s = |r: &[u8]| -> Vec<f64> {
        r.chunks_exact(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w.copy_from_slice(c);
                f64::from_bits(u64::from_le_bytes(w))
            })
            .collect()
    };
    match tag {
        1 => Owned::Num(f64s(rest).first().copied().unwrap_or(f64::NAN)),
        2 => Owned::Text(String::from_utf8_lossy(rest).into_owned()),
        3 => {
            let mut items = Vec::new();
            let mut r = rest;
            while let Some((&tag, after)) = r.split_first() {
                if tag == 0 {
                    items.push(None);
                    r = after;
                } else {
                    let (v, after) = after.split_at(after.len().min(8));
                    items.push(f64s(v).first().copied());
                    r = after;
                }
            }
            Owned::NumList(items)
        }
        4 => {
            let mut items = Vec::new();
            let mut r = rest;
            while r.len() >= 4 {
                let mut w = [0u8; 4];
                w.copy_from_slice(&r[..4]);
                let n = u32::from_le_bytes(w);
                if n == NULL_ITEM {
                    items.push(None);
                    r = &r[4..];
                    continue;
                }
                let n = (n as usize).min(r.len() - 4);
                items.push(Some(String::from_utf8_lossy(&r[4..4 + n]).into_owned()));
                r = &r[4 + n..];
            }
            Owned::TextList(items)
        }
        _ => Owned::Null,
    }
}

impl Owned {
    /// The value as a report prints it (long values are cut).
    pub(crate) fn render(&self) -> String {
        let s = match self {
            Owned::Null => return "null".into(),
            Owned::Num(v) => fmt_num(*v),
            Owned::Text(s) => format!("{s:?}"),
            Owned::NumList(l) => {
                let items: Vec<String> = l
                    .iter()
                    .map(|v| v.map_or_else(|| "null".into(), fmt_num))
                    .collect();
                format!("[{}]", items.join(", "))
            }
            Owned::TextList(l) => {
                let items: Vec<String> = l
                    .iter()
                    .map(|v| {
                        v.as_ref()
                            .map_or_else(|| "null".into(), |s| format!("{s:?}"))
                    })
                    .collect();
                format!("[{}]", items.join(", "))
            }
        };
        if s.chars().count() > 80 {
            let cut: String = s.chars().take(77).collect();
            format!("{cut}...")
        } else {
            s
        }
    }
}

/// Shortest text that reads back as the same f64 (`1`, `0.1`, `1e-7`).
pub(crate) fn fmt_num(v: f64) -> String {
    if v.is_finite() && v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

// Normalization classes, as bits: a pair's class is the smallest set of normalizations that
// makes its two values equal.
pub(crate) const CASE: u16 = 1;
pub(crate) const WHITESPACE: u16 = 2;
pub(crate) const SEPARATOR: u16 = 4;
pub(crate) const LOCALE: u16 = 8;
pub(crate) const NUMBER_FORMAT: u16 = 16;
pub(crate) const FLOAT32: u16 = 32;
pub(crate) const NULL_SENTINEL: u16 = 64;
pub(crate) const LIST_ORDER: u16 = 128;
/// No normalization explains the pair.
pub(crate) const OTHER: u16 = 0x8000;

const TEXT_FLAGS: [u16; 6] = [
    CASE,
    WHITESPACE,
    SEPARATOR,
    LOCALE,
    NUMBER_FORMAT,
    NULL_SENTINEL,
];

/// The names of a class's normalizations, joined by `+`.
pub(crate) fn class_name(class: u16) -> String {
    if class == OTHER || class == 0 {
        return "other".into();
    }
    let names = [
        (CASE, "case"),
        (WHITESPACE, "whitespace"),
        (SEPARATOR, "separator"),
        (LOCALE, "locale-truncation"),
        (NUMBER_FORMAT, "number-format"),
        (FLOAT32, "float32-round-trip"),
        (NULL_SENTINEL, "null-sentinel"),
        (LIST_ORDER, "list-order"),
    ];
    names
        .iter()
        .filter(|(b, _)| class & b != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join("+")
}

/// What applying a class's normalizations means, for the explanation line.
pub(crate) fn class_action(class: u16) -> String {
    if class == OTHER || class == 0 {
        return "no normalization explains these".into();
    }
    let names = [
        (CASE, "lowercasing"),
        (WHITESPACE, "trimming and collapsing whitespace"),
        (SEPARATOR, "`_` and `.` to `-`"),
        (LOCALE, "keeping the primary language subtag"),
        (NUMBER_FORMAT, "parsing numbers"),
        (FLOAT32, "rounding to float32"),
        (NULL_SENTINEL, "reading \"\", \"null\", NaN and -1 as null"),
        (LIST_ORDER, "sorting lists"),
    ];
    names
        .iter()
        .filter(|(b, _)| class & b != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(" and ")
}

fn is_sentinel_text(s: &str) -> bool {
    matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "" | "null" | "none" | "nan" | "-1" | "n/a" | "\\n"
    )
}

fn is_sentinel(v: &Owned) -> bool {
    match v {
        Owned::Null => true,
        Owned::Num(x) => x.is_nan() || *x == -1.0,
        Owned::Text(s) => is_sentinel_text(s),
        Owned::NumList(l) => l.is_empty(),
        Owned::TextList(l) => l.is_empty(),
    }
}

fn norm_text(s: &str, mask: u16) -> Option<String> {
    if mask & NULL_SENTINEL != 0 && is_sentinel_text(s) {
        return None;
    }
    let mut t = s.to_owned();
    if mask & WHITESPACE != 0 {
        t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    if mask & CASE != 0 {
        t = t.to_lowercase();
    }
    if mask & SEPARATOR != 0 {
        t = t.replace(['_', '.'], "-");
    }
    if mask & NUMBER_FORMAT != 0 {
        if let Ok(v) = t.trim().parse::<f64>() {
            t = format!("{}", v);
        }
    }
    Some(t)
}

/// A locale truncation: one value is the other's primary subtag (`en` and `en-US`).
fn is_truncation(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() < b.len() { (a, b) } else { (b, a) };
    let tag =
        |s: &str| !s.is_empty() && s.len() <= 8 && s.chars().all(|c| c.is_ascii_alphanumeric());
    tag(short)
        && long.len() > short.len() + 1
        && long.starts_with(short)
        && matches!(long.as_bytes().get(short.len()), Some(b'-' | b'_'))
        && long
            .split(['-', '_'])
            .all(|p| !p.is_empty() && p.len() <= 8 && p.chars().all(|c| c.is_ascii_alphanumeric()))
}

fn text_equal_under(a: &str, b: &str, mask: u16) -> bool {
    let (x, y) = (norm_text(a, mask), norm_text(b, mask));
    match (x, y) {
        (None, None) => true,
        (Some(x), Some(y)) => x == y || (mask & LOCALE != 0 && is_truncation(&x, &y)),
        _ => false,
    }
}

fn f32_equal(a: f64, b: f64) -> bool {
    (a as f32) == (b as f32) || (a.is_nan() && b.is_nan())
}

/// The class of a mismatching pair (served value, offline value).
pub(crate) fn classify(s: &Owned, o: &Owned) -> u16 {
    match (s, o) {
        (Owned::Null, v) | (v, Owned::Null) => {
            if is_sentinel(v) {
                NULL_SENTINEL
            } else {
                OTHER
            }
        }
        (Owned::Num(a), Owned::Num(b)) => {
            if f32_equal(*a, *b) {
                FLOAT32
            } else if is_sentinel(s) && is_sentinel(o) {
                NULL_SENTINEL
            } else {
                OTHER
            }
        }
        (Owned::Text(a), Owned::Text(b)) => {
            let all = TEXT_FLAGS.iter().fold(0, |m, f| m | f);
            if !text_equal_under(a, b, all) {
                return OTHER;
            }
            // The smallest set that explains the pair: fewest normalizations first.
            let mut masks: Vec<u16> = (1u16..64)
                .map(|bits| {
                    TEXT_FLAGS
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| bits & (1 << i) != 0)
                        .fold(0, |m, (_, f)| m | f)
                })
                .collect();
            masks.sort_by_key(|m| (m.count_ones(), *m));
            masks
                .into_iter()
                .find(|&m| text_equal_under(a, b, m))
                .unwrap_or(all)
        }
        (Owned::NumList(a), Owned::NumList(b)) => {
            let same = |x: &[Option<f64>], y: &[Option<f64>], f32: bool| {
                x.len() == y.len()
                    && x.iter().zip(y).all(|(p, q)| match (p, q) {
                        (None, None) => true,
                        (Some(p), Some(q)) => {
                            if f32 {
                                f32_equal(*p, *q)
                            } else {
                                p == q || (p.is_nan() && q.is_nan())
                            }
                        }
                        _ => false,
                    })
            };
            // Nulls first, then numbers in total order.
            let sorted = |x: &[Option<f64>]| {
                let mut v = x.to_vec();
                v.sort_by(|p, q| match (p, q) {
                    (Some(p), Some(q)) => p.total_cmp(q),
                    _ => p.is_some().cmp(&q.is_some()),
                });
                v
            };
            if same(a, b, true) {
                FLOAT32
            } else if same(&sorted(a), &sorted(b), false) {
                LIST_ORDER
            } else if same(&sorted(a), &sorted(b), true) {
                LIST_ORDER | FLOAT32
            } else {
                OTHER
            }
        }
        (Owned::TextList(a), Owned::TextList(b)) => {
            let mut x = a.clone();
            let mut y = b.clone();
            x.sort();
            y.sort();
            if x == y { LIST_ORDER } else { OTHER }
        }
        _ => OTHER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Owned {
        Owned::Text(s.into())
    }

    #[test]
    fn text_classes_are_the_smallest_explanation() {
        assert_eq!(classify(&t("jp-JA"), &t("jp_JA")), SEPARATOR);
        assert_eq!(classify(&t("en-US"), &t("en")), LOCALE);
        assert_eq!(classify(&t("en_US"), &t("en")), LOCALE);
        assert_eq!(classify(&t("EN-us"), &t("en-us")), CASE);
        assert_eq!(classify(&t("jp-JA"), &t("JP_ja")), CASE | SEPARATOR);
        assert_eq!(classify(&t(" a  b"), &t("a b")), WHITESPACE);
        assert_eq!(classify(&t("1"), &t("1.0")), NUMBER_FORMAT);
        assert_eq!(classify(&t(""), &Owned::Null), NULL_SENTINEL);
        assert_eq!(classify(&t("NaN"), &t("")), NULL_SENTINEL);
        assert_eq!(classify(&t("de"), &t("fr")), OTHER);
        // Not a locale: a truncated free-text value.
        assert_eq!(classify(&t("red"), &t("red-wine and cheese")), OTHER);
    }

    #[test]
    fn number_classes() {
        let x = 0.1f32;
        assert_eq!(
            classify(&Owned::Num(f64::from(x)), &Owned::Num(0.1)),
            FLOAT32
        );
        assert_eq!(
            classify(&Owned::Num(-1.0), &Owned::Num(f64::NAN)),
            NULL_SENTINEL
        );
        assert_eq!(classify(&Owned::Num(1.0), &Owned::Num(2.0)), OTHER);
        assert_eq!(
            classify(
                &Owned::NumList(vec![Some(1.0), Some(2.0)]),
                &Owned::NumList(vec![Some(2.0), Some(1.0)])
            ),
            LIST_ORDER
        );
        assert_eq!(
            classify(
                &Owned::TextList(vec![Some("a".into()), Some("b".into())]),
                &Owned::TextList(vec![Some("b".into()), Some("a".into())])
            ),
            LIST_ORDER
        );
    }

    #[test]
    fn tolerance_is_absolute_or_relative() {
        assert_eq!(
            compare(Val::Num(1.0), Val::Num(1.0), 0.0, 0.0),
            Outcome::Equal
        );
        assert!(matches!(
            compare(Val::Num(1.0), Val::Num(1.005), 0.01, 0.0),
            Outcome::WithinTolerance(_)
        ));
        assert!(matches!(
            compare(Val::Num(1000.0), Val::Num(1000.5), 0.0, 1e-3),
            Outcome::WithinTolerance(_)
        ));
        assert!(matches!(
            compare(Val::Num(1.0), Val::Num(1.5), 0.01, 1e-3),
            Outcome::Differ(Some(_))
        ));
        assert_eq!(
            compare(Val::Num(f64::NAN), Val::Num(f64::NAN), 0.0, 0.0),
            Outcome::Equal
        );
        assert_eq!(
            compare(Val::Null, Val::Num(1.0), 0.0, 0.0),
            Outcome::ServedNull
        );
        assert_eq!(compare(Val::Null, Val::Null, 0.0, 0.0), Outcome::BothNull);
    }

    #[test]
    fn encoding_round_trips() {
        let texts = BinaryArray::from(vec![Some(b"ab".as_ref()), None, Some(b"c")]);
        let nums = Float64Array::from(vec![Some(1.0), None, Some(2.0)]);
        for v in [
            Val::Null,
            Val::Num(1.5),
            Val::Text(b"x y"),
            Val::NumList(&nums, 0, 3),
            Val::TextList(&texts, 0, 3),
        ] {
            let mut buf = Vec::new();
            v.encode(&mut buf);
            let back = decode(&buf);
            match (v, &back) {
                (Val::Null, Owned::Null) => {}
                (Val::Num(a), Owned::Num(b)) => assert_eq!(a, *b),
                (Val::Text(a), Owned::Text(b)) => assert_eq!(a, b.as_bytes()),
                (Val::NumList(..), Owned::NumList(b)) => {
                    assert_eq!(b, &[Some(1.0), None, Some(2.0)]);
                    assert_eq!(back.render(), "[1, null, 2]");
                }
                (Val::TextList(..), Owned::TextList(b)) => {
                    assert_eq!(b, &[Some("ab".into()), None, Some("c".into())]);
                    assert_eq!(back.render(), r#"["ab", null, "c"]"#);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// Values of a one-column list array in the given domain.
    fn list_of(array: ArrayRef, domain: Domain) -> DArr {
        to_domain(&array, domain).unwrap()
    }

    /// A null inside a list equals only a null: not 0.0, not "", whatever its slot holds.
    #[test]
    fn null_list_elements_equal_only_nulls() {
        use arrow_array::builder::{ListBuilder, StringBuilder};
        use arrow_array::types::Float32Type;
        let nums = |rows: Vec<Option<Vec<Option<f32>>>>| {
            let a: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Float32Type, _, _>(rows));
            list_of(a, Domain::NumberList)
        };
        let served = nums(vec![Some(vec![None]), Some(vec![Some(1.0), None])]);
        let offline = nums(vec![Some(vec![Some(0.0)]), Some(vec![Some(1.0), None])]);
        assert_eq!(
            compare(served.get(0), offline.get(0), 0.0, 1e-6),
            Outcome::Differ(None)
        );
        assert_eq!(
            compare(offline.get(0), served.get(0), 0.0, 1e-6),
            Outcome::Differ(None)
        );
        assert_eq!(
            compare(served.get(1), offline.get(1), 0.0, 1e-6),
            Outcome::Equal
        );
        let mut buf = Vec::new();
        served.get(1).encode(&mut buf);
        assert_eq!(decode(&buf).render(), "[1, null]");

        let texts = |rows: &[&[Option<&str>]]| {
            let mut b = ListBuilder::new(StringBuilder::new());
            for row in rows {
                for v in *row {
                    b.values().append_option(*v);
                }
                b.append(true);
            }
            let a: ArrayRef = Arc::new(b.finish());
            list_of(a, Domain::TextList)
        };
        let served = texts(&[&[Some("a"), None], &[None, Some("b")]]);
        let offline = texts(&[&[Some("a"), Some("")], &[None, Some("b")]]);
        assert_eq!(
            compare(served.get(0), offline.get(0), 0.0, 0.0),
            Outcome::Differ(None)
        );
        assert_eq!(
            compare(served.get(1), offline.get(1), 0.0, 0.0),
            Outcome::Equal
        );
        let (mut s, mut o) = (Vec::new(), Vec::new());
        served.get(0).encode(&mut s);
        offline.get(0).encode(&mut o);
        assert_ne!(s, o, "distinct pairs");
        assert_eq!(decode(&s).render(), r#"["a", null]"#);
        assert_eq!(decode(&o).render(), r#"["a", ""]"#);
        // Sorting a list with nulls explains an order swap.
        assert_eq!(
            classify(
                &Owned::NumList(vec![None, Some(1.0)]),
                &Owned::NumList(vec![Some(1.0), None])
            ),
            LIST_ORDER
        );
        assert_eq!(
            classify(
                &Owned::NumList(vec![None]),
                &Owned::NumList(vec![Some(0.0)])
            ),
            OTHER
        );
    }

    /// An infinity matches only the same infinity: the relative tolerance of an infinite
    /// magnitude is infinite and must not apply.
    #[test]
    fn infinities_match_only_themselves() {
        let (inf, ninf) = (f64::INFINITY, f64::NEG_INFINITY);
        for (a, b) in [
            (inf, 0.0),
            (0.0, inf),
            (ninf, inf),
            (inf, 1e308),
            (ninf, f64::NAN),
        ] {
            assert_eq!(
                compare(Val::Num(a), Val::Num(b), 1.0, 1e-6),
                Outcome::Differ(Some(inf)),
                "{a} vs {b}"
            );
        }
        assert_eq!(
            compare(Val::Num(inf), Val::Num(inf), 0.0, 1e-6),
            Outcome::Equal
        );
        assert_eq!(
            compare(Val::Num(ninf), Val::Num(ninf), 0.0, 1e-6),
            Outcome::Equal
        );
        let l = |v: Vec<f64>| Float64Array::from(v);
        let (a, b) = (l(vec![1.0, inf]), l(vec![1.0, 0.0]));
        assert_eq!(
            compare(Val::NumList(&a, 0, 2), Val::NumList(&b, 0, 2), 0.0, 1e-6),
            Outcome::Differ(Some(inf))
        );
    }

    /// Temporal values compare in microseconds whatever their unit: 1000 ms is 1000000 us, a
    /// date is its midnight UTC, also inside lists.
    #[test]
    fn temporal_units_are_normalised() {
        use arrow_array::types::{TimestampMicrosecondType, TimestampMillisecondType};
        use arrow_array::{
            Date32Array, Date64Array, Time32SecondArray, Time64NanosecondArray,
            TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
            TimestampSecondArray,
        };
        let num = |a: ArrayRef| match to_domain(&a, Domain::Number).unwrap() {
            DArr::Num(v) => v.value(0),
            other => panic!("{other:?}"),
        };
        let us = 1_700_000_000_000_000i64;
        assert_eq!(
            num(Arc::new(TimestampSecondArray::from(vec![us / 1_000_000]))),
            us as f64
        );
        assert_eq!(
            num(Arc::new(TimestampMillisecondArray::from(vec![us / 1000]))),
            us as f64
        );
        assert_eq!(
            num(Arc::new(
                TimestampMicrosecondArray::from(vec![us]).with_timezone("UTC")
            )),
            us as f64
        );
        assert_eq!(
            num(Arc::new(TimestampNanosecondArray::from(vec![
                us * 1000 + 500
            ]))),
            us as f64 + 0.5
        );
        assert_eq!(
            num(Arc::new(TimestampMillisecondArray::from(vec![1000]))),
            1e6
        );
        // 2023-11-14 as a date, as milliseconds and as its midnight in microseconds.
        let day = 19_675i32;
        let midnight = i64::from(day) * 86_400_000_000;
        assert_eq!(num(Arc::new(Date32Array::from(vec![day]))), midnight as f64);
        assert_eq!(
            num(Arc::new(Date64Array::from(vec![midnight / 1000]))),
            midnight as f64
        );
        assert_eq!(num(Arc::new(Time32SecondArray::from(vec![2]))), 2e6);
        assert_eq!(num(Arc::new(Time64NanosecondArray::from(vec![2000]))), 2.0);

        let ms: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
            TimestampMillisecondType,
            _,
            _,
        >(vec![Some(vec![Some(1000), None])]));
        let micros: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
            TimestampMicrosecondType,
            _,
            _,
        >(vec![Some(vec![Some(1_000_000), None])]));
        let (a, b) = (
            list_of(ms, Domain::NumberList),
            list_of(micros, Domain::NumberList),
        );
        assert_eq!(compare(a.get(0), b.get(0), 0.0, 0.0), Outcome::Equal);
    }

    /// Structs, maps and lists of lists compare as text (each as Arrow prints it); lists whose
    /// elements are structs or maps are refused with why, at planning, not mid-diff.
    #[test]
    fn nested_types_compare_as_text_or_say_why_not() {
        let item = |dt: DataType| Arc::new(Field::new_list_field(dt, true));
        let list = |dt: DataType| DataType::List(item(dt));
        let st = DataType::Struct(
            vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b", DataType::Utf8, true),
            ]
            .into(),
        );
        let entries = Field::new(
            "entries",
            DataType::Struct(
                vec![
                    Field::new("keys", DataType::Utf8, false),
                    Field::new("values", DataType::Float64, true),
                ]
                .into(),
            ),
            false,
        );
        let map = DataType::Map(Arc::new(entries), false);
        for (dt, domain) in [
            (st.clone(), Domain::Text),
            (map.clone(), Domain::Text),
            (list(list(DataType::Float32)), Domain::TextList),
            (
                DataType::FixedSizeList(item(list(DataType::Utf8)), 2),
                Domain::TextList,
            ),
            // Inner lists print as text, structs in them too.
            (
                DataType::LargeList(item(list(st.clone()))),
                Domain::TextList,
            ),
        ] {
            assert_eq!(domain_of(&dt, &dt), domain, "{dt}");
            assert_eq!(not_comparable(&dt, &dt, domain), None, "{dt}");
        }
        for (dt, why) in [
            (list(st.clone()), "lists of structs are not compared"),
            (list(map.clone()), "lists of maps are not compared"),
            (
                DataType::FixedSizeList(item(map.clone()), 2),
                "lists of maps are not compared",
            ),
        ] {
            let domain = domain_of(&dt, &dt);
            let reason = not_comparable(&dt, &dt, domain).unwrap_or_default();
            assert!(reason.starts_with(why), "{dt}: {reason}");
            // One side is enough.
            let other = list(DataType::Utf8);
            assert!(not_comparable(&other, &dt, domain_of(&other, &dt)).is_some());
        }
        // Against text, a list of structs prints as text like any value.
        assert_eq!(
            not_comparable(&list(st.clone()), &DataType::Utf8, Domain::Text),
            None
        );
    }

    #[test]
    fn domains() {
        assert_eq!(
            domain_of(&DataType::Float32, &DataType::Int64),
            Domain::Number
        );
        assert_eq!(domain_of(&DataType::Utf8, &DataType::Int64), Domain::Text);
        let l = DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true)));
        let f =
            DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Float32, false)), 2);
        assert_eq!(domain_of(&l, &f), Domain::NumberList);
        assert_eq!(logical_type(&l), logical_type(&f));
        let arr: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![1]));
        match to_domain(&arr, Domain::Text).unwrap() {
            DArr::Text(b) => assert_eq!(b.value(0), b"1"),
            other => panic!("{other:?}"),
        }
    }
}
