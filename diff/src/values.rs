//! Feature values in the domain both sides are compared in (numbers, text, lists of either),
//! how two values compare, and which normalization would make a mismatching pair equal.

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, ArrayRef, BinaryArray, Float64Array, GenericListArray, StringArray};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, DataType, Field};
use serde::Serialize;
use std::sync::Arc;

/// How a feature's two columns are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Domain {
    /// Both numeric (integers, floats, booleans, decimals, times): as f64, with tolerances.
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

/// One value in its domain, borrowed from a [`DArr`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'a> {
    Null,
    Num(f64),
    Text(&'a [u8]),
    NumList(&'a [f64]),
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

fn to_num(array: &ArrayRef) -> Result<Float64Array, ArrowError> {
    let dt = array.data_type();
    let array = if dt.is_temporal() {
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
                    // Times go through their integer value, as in the scalar case.
                    let inner =
                        DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true)));
                    arrow_cast::cast(&arrow_cast::cast(array, &inner)?, &target)?
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
                let (s, e) = (o[i] as usize, o[i + 1] as usize);
                Val::NumList(v.values().get(s..e).unwrap_or(&[]))
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
        (Val::NumList(a), Val::NumList(b)) => {
            if a.len() != b.len() {
                return Outcome::Differ(None);
            }
            let mut worst = 0.0f64;
            let mut exact = true;
            for (&x, &y) in a.iter().zip(b) {
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
            if e1 - s1 == e2 - s2 && (0..e1 - s1).all(|k| a.value(s1 + k) == b.value(s2 + k)) {
                Outcome::Equal
            } else {
                Outcome::Differ(None)
            }
        }
        _ => Outcome::Differ(None),
    }
}

/// An owned value, for reports and for classifying a mismatching pair.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Owned {
    Null,
    Num(f64),
    Text(String),
    NumList(Vec<f64>),
    TextList(Vec<String>),
}

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
            Val::NumList(l) => {
                out.push(3);
                for v in l {
                    out.extend_from_slice(&v.to_bits().to_le_bytes());
                }
            }
            Val::TextList(a, s, e) => {
                out.push(4);
                for k in s..e {
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
        3 => Owned::NumList(f64s(rest)),
        4 => {
            let mut items = Vec::new();
            let mut r = rest;
            while r.len() >= 4 {
                let mut w = [0u8; 4];
                w.copy_from_slice(&r[..4]);
                let n = (u32::from_le_bytes(w) as usize).min(r.len() - 4);
                items.push(String::from_utf8_lossy(&r[4..4 + n]).into_owned());
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
                let items: Vec<String> = l.iter().map(|v| fmt_num(*v)).collect();
                format!("[{}]", items.join(", "))
            }
            Owned::TextList(l) => format!("{l:?}"),
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
            let same = |x: &[f64], y: &[f64], f32: bool| {
                x.len() == y.len()
                    && x.iter().zip(y).all(|(p, q)| {
                        if f32 {
                            f32_equal(*p, *q)
                        } else {
                            p == q || (p.is_nan() && q.is_nan())
                        }
                    })
            };
            let sorted = |x: &[f64]| {
                let mut v = x.to_vec();
                v.sort_by(f64::total_cmp);
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
                &Owned::NumList(vec![1.0, 2.0]),
                &Owned::NumList(vec![2.0, 1.0])
            ),
            LIST_ORDER
        );
        assert_eq!(
            classify(
                &Owned::TextList(vec!["a".into(), "b".into()]),
                &Owned::TextList(vec!["b".into(), "a".into()])
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
        let texts = BinaryArray::from_iter_values([b"ab".as_ref(), b"c"]);
        for v in [
            Val::Null,
            Val::Num(1.5),
            Val::Text(b"x y"),
            Val::NumList(&[1.0, 2.0]),
            Val::TextList(&texts, 0, 2),
        ] {
            let mut buf = Vec::new();
            v.encode(&mut buf);
            let back = decode(&buf);
            match (v, &back) {
                (Val::Null, Owned::Null) => {}
                (Val::Num(a), Owned::Num(b)) => assert_eq!(a, *b),
                (Val::Text(a), Owned::Text(b)) => assert_eq!(a, b.as_bytes()),
                (Val::NumList(a), Owned::NumList(b)) => assert_eq!(a, b.as_slice()),
                (Val::TextList(..), Owned::TextList(b)) => assert_eq!(b, &["ab", "c"]),
                other => panic!("{other:?}"),
            }
        }
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
