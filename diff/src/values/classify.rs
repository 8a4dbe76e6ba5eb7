//! Normalization classes: the smallest set of normalizations that makes a mismatching pair
//! equal, and for structs (JSON objects) which fields differ.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{Owned, exact_f64};

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
        Owned::Exact(v, u) => !u.is_time() && exact_f64(*v, *u) == -1.0,
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
    if mask & NUMBER_FORMAT != 0
        && let Ok(v) = t.trim().parse::<f64>()
    {
        t = format!("{}", v);
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

/// Whether `v` survives a float32 round trip as a number near itself: zero, or a magnitude in
/// float32's normal range. Beyond it (1e39, 1e-50) float32 makes an infinity or a zero or
/// drops most digits, so two values that meet there were not made equal by a round trip.
fn in_f32_range(v: f64) -> bool {
    v == 0.0 || (f64::from(f32::MIN_POSITIVE)..=f64::from(f32::MAX)).contains(&v.abs())
}

fn f32_equal(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (in_f32_range(a) && in_f32_range(b) && (a as f32) == (b as f32))
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
        (Owned::Num(_) | Owned::Exact(..), Owned::Num(_) | Owned::Exact(..)) => {
            let float = |v: &Owned| match v {
                Owned::Num(x) => Some(*x),
                Owned::Exact(x, u) => Some(exact_f64(*x, *u)),
                _ => None,
            };
            // A round trip through float32 needs a float on one side at least.
            let any_float = matches!(s, Owned::Num(_)) || matches!(o, Owned::Num(_));
            match (float(s), float(o)) {
                (Some(a), Some(b)) if any_float && f32_equal(a, b) => FLOAT32,
                _ if is_sentinel(s) && is_sentinel(o) => NULL_SENTINEL,
                _ => OTHER,
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

/// The fields (dotted paths, `address.city`) in which two JSON objects differ, a field one of
/// them lacks included: structs print as such objects, so a struct mismatch names its
/// fields. Empty unless both values are JSON objects.
pub(crate) fn differing_fields(s: &Owned, o: &Owned) -> Vec<String> {
    let (Owned::Text(a), Owned::Text(b)) = (s, o) else {
        return Vec::new();
    };
    if !a.starts_with('{') || !b.starts_with('{') {
        return Vec::new();
    }
    let (Ok(Value::Object(x)), Ok(Value::Object(y))) = (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    diff_objects(&x, &y, "", &mut out);
    out
}

fn diff_objects(
    x: &Map<String, Value>,
    y: &Map<String, Value>,
    prefix: &str,
    out: &mut Vec<String>,
) {
    let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
    for k in keys {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match (x.get(k), y.get(k)) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => diff_objects(a, b, &path, out),
            (a, b) if a == b => {}
            _ => out.push(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Unit;

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
        assert_eq!(
            classify(&Owned::Exact(-1, Unit::Int), &Owned::Null),
            NULL_SENTINEL
        );
        assert_eq!(
            classify(&Owned::Exact(-100, Unit::Decimal(2)), &Owned::Null),
            NULL_SENTINEL
        );
        assert_eq!(classify(&Owned::Num(1.0), &Owned::Num(2.0)), OTHER);
        // Two integers are never a float32 round trip, however close.
        let id = 1i128 << 60;
        assert_eq!(
            classify(
                &Owned::Exact(id, Unit::Int),
                &Owned::Exact(id + 1, Unit::Int)
            ),
            OTHER
        );
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

    /// Beyond float32's range a round trip makes an infinity or a zero: two values that both
    /// overflow (or both underflow) are not explained by it.
    #[test]
    fn floats_beyond_float32_range_are_not_a_round_trip() {
        for (a, b) in [
            (1e39, 2e39),
            (-1e300, -5e300),
            (1e-50, 2e-50),
            (1e39, f64::from(f32::MAX)),
        ] {
            assert_eq!(classify(&Owned::Num(a), &Owned::Num(b)), OTHER, "{a} {b}");
        }
        let big = f64::from(f32::MAX);
        assert_eq!(
            classify(&Owned::Num(big), &Owned::Num(big * (1.0 - 1e-12))),
            FLOAT32
        );
        assert_eq!(
            classify(&Owned::Num(1e-30), &Owned::Num(f64::from(1e-30f32))),
            FLOAT32
        );
    }

    #[test]
    fn struct_mismatches_name_their_fields() {
        let a = t(r#"{"a": 1, "b": "x", "c": {"d": 1, "e": 2}}"#);
        let b = t(r#"{"a": 1, "b": "y", "c": {"d": 1, "e": 3}, "f": null}"#);
        assert_eq!(differing_fields(&a, &b), ["b", "c.e", "f"]);
        assert!(differing_fields(&a, &a).is_empty());
        assert!(differing_fields(&t("{not json"), &a).is_empty());
        assert!(differing_fields(&Owned::Num(1.0), &a).is_empty());
    }
}
