//! Join keys: composite keys whose parts may be integers on one side and strings on the other.
//! Each part is reduced to a canonical form (an integer, or bytes when the text is not a
//! canonical integer), so `42` and `"42"` hash and compare equal while `"042"` does not.
//! Integers span i64 and u64: an unsigned id above `i64::MAX` matches its decimal text too.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, UInt64Array};
use arrow_schema::DataType;

use crate::DiffError;

/// One key column, cast once per batch.
#[derive(Debug, Clone)]
pub(crate) enum KeyCol {
    Int(Int64Array),
    /// UInt64 columns, whose values above `i64::MAX` no Int64 holds.
    UInt(UInt64Array),
    Bytes(BinaryArray),
}

/// A key part in canonical form: an integer that fits i64 is always `Int`, so each integer
/// has one form whatever the column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part<'a> {
    Int(i64),
    /// An integer above `i64::MAX`.
    BigUInt(u64),
    Bytes(&'a [u8]),
}

impl Part<'_> {
    #[inline]
    fn from_u64(v: u64) -> Part<'static> {
        match i64::try_from(v) {
            Ok(v) => Part::Int(v),
            Err(_) => Part::BigUInt(v),
        }
    }
}

/// Whether a column of this type can be a key part.
pub(crate) fn key_type_ok(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, v) => key_type_ok(v),
        dt => {
            dt.is_integer()
                || matches!(
                    dt,
                    DataType::Utf8
                        | DataType::LargeUtf8
                        | DataType::Utf8View
                        | DataType::Binary
                        | DataType::LargeBinary
                        | DataType::BinaryView
                )
        }
    }
}

/// The key columns of a batch (or of the whole offline side).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    cols: Vec<KeyCol>,
}

impl Keys {
    pub(crate) fn new(
        arrays: &[ArrayRef],
        names: &[String],
        side: &'static str,
    ) -> Result<Keys, DiffError> {
        let mut cols = Vec::with_capacity(arrays.len());
        for (a, name) in arrays.iter().zip(names) {
            let bad = || DiffError::BadKeyType {
                side,
                column: name.clone(),
                data_type: a.data_type().to_string(),
            };
            if !key_type_ok(a.data_type()) {
                return Err(bad());
            }
            let value_type = match a.data_type() {
                DataType::Dictionary(_, v) => v.as_ref().clone(),
                dt => dt.clone(),
            };
            let col = if value_type == DataType::UInt64 {
                let c = arrow_cast::cast(a, &DataType::UInt64).map_err(|_| bad())?;
                KeyCol::UInt(c.as_primitive::<UInt64Type>().clone())
            } else if value_type.is_integer() {
                // Every other integer type fits i64.
                let c = arrow_cast::cast(a, &DataType::Int64).map_err(|_| bad())?;
                KeyCol::Int(c.as_primitive::<Int64Type>().clone())
            } else {
                let c = arrow_cast::cast(a, &DataType::Binary)
                    .or_else(|_| {
                        arrow_cast::cast(a, &DataType::Utf8)
                            .and_then(|s| arrow_cast::cast(&s, &DataType::Binary))
                    })
                    .map_err(|_| bad())?;
                KeyCol::Bytes(c.as_binary::<i32>().clone())
            };
            cols.push(col);
        }
        Ok(Keys { cols })
    }

    /// The canonical part `c` of row `row`; `None` when null.
    #[inline]
    pub(crate) fn part(&self, c: usize, row: usize) -> Option<Part<'_>> {
        match self.cols.get(c)? {
            KeyCol::Int(a) => a.is_valid(row).then(|| Part::Int(a.value(row))),
            KeyCol::UInt(a) => a.is_valid(row).then(|| Part::from_u64(a.value(row))),
            KeyCol::Bytes(a) => {
                if a.is_null(row) {
                    return None;
                }
                let b = a.value(row);
                Some(canonical_int(b).unwrap_or(Part::Bytes(b)))
            }
        }
    }

    /// The hash of row `row`'s key; `None` when a part is null.
    #[inline]
    pub(crate) fn hash(&self, row: usize) -> Option<u64> {
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        for c in 0..self.cols.len() {
            match self.part(c, row)? {
                Part::Int(v) => h = mix(mix(h, 1), v as u64),
                Part::BigUInt(v) => h = mix(mix(h, 3), v),
                Part::Bytes(b) => {
                    h = mix(mix(h, 2), b.len() as u64);
                    let mut chunks = b.chunks_exact(8);
                    for ch in &mut chunks {
                        let mut w = [0u8; 8];
                        w.copy_from_slice(ch);
                        h = mix(h, u64::from_le_bytes(w));
                    }
                    let mut w = [0u8; 8];
                    let rest = chunks.remainder();
                    w[..rest.len()].copy_from_slice(rest);
                    h = mix(h, u64::from_le_bytes(w));
                }
            }
        }
        Some(fmix(h))
    }

    /// Whether row `row` here and row `orow` of `other` have equal keys.
    #[inline]
    pub(crate) fn eq(&self, row: usize, other: &Keys, orow: usize) -> bool {
        (0..self.cols.len()).all(|c| {
            let a = self.part(c, row);
            a.is_some() && a == other.part(c, orow)
        })
    }

    /// The key as text for examples: parts joined by `|`. A text part that would read
    /// ambiguously is quoted (escaped as in Rust): one that is empty, is `null`, holds a `|` or
    /// starts with `"`, or is not UTF-8. So distinct keys print distinctly: `("a|b", "c")` is
    /// `"a|b"|c`, not the `a|b|c` of `("a", "b|c")`, which is `a|"b|c"`.
    pub(crate) fn render(&self, row: usize) -> String {
        let mut out = String::new();
        for c in 0..self.cols.len() {
            if c > 0 {
                out.push('|');
            }
            match self.part(c, row) {
                None => out.push_str("null"),
                Some(Part::Int(v)) => out.push_str(&v.to_string()),
                Some(Part::BigUInt(v)) => out.push_str(&v.to_string()),
                Some(Part::Bytes(b)) => match std::str::from_utf8(b) {
                    Ok(t)
                        if !t.is_empty()
                            && t != "null"
                            && !t.contains('|')
                            && !t.starts_with('"') =>
                    {
                        out.push_str(t);
                    }
                    Ok(t) => out.push_str(&format!("{t:?}")),
                    Err(_) => out.push_str(&format!("\"{}\"", b.escape_ascii())),
                },
            }
        }
        out
    }
}

#[inline]
fn mix(h: u64, w: u64) -> u64 {
    (h.rotate_left(5) ^ w).wrapping_mul(0xf135_7aea_2e62_a9c5)
}

/// MurmurHash3's finalizer: the hash table reads the top and the bottom bits, the partitions
/// the middle ones, so every bit must depend on every input bit.
#[inline]
fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The integer part `b` is the canonical decimal text of (no sign `+`, no leading zero), from
/// `i64::MIN` to `u64::MAX`; `None` for any other text.
#[inline]
pub(crate) fn canonical_int(b: &[u8]) -> Option<Part<'static>> {
    let (negative, digits) = match b.strip_prefix(b"-") {
        Some(d) => (true, d),
        None => (false, b),
    };
    let first = *digits.first()?;
    if !first.is_ascii_digit() || digits.len() > 20 || (first == b'0' && digits.len() > 1) {
        return None;
    }
    if negative && digits == b"0" {
        return None; // "-0" is not how any integer prints
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if negative {
        // i64::MIN's magnitude is one more than i64::MAX.
        0i64.checked_sub_unsigned(v).map(Part::Int)
    } else {
        Some(Part::from_u64(v))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int32Array, StringArray};

    use super::*;

    #[test]
    fn integers_and_their_text_are_the_same_key() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(42), Some(-7), None]));
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("42"), Some("-7"), Some("a")]));
        let names = vec!["k".to_owned()];
        let a = Keys::new(&[ints], &names, "served").unwrap();
        let b = Keys::new(&[text], &names, "offline").unwrap();
        assert!(a.eq(0, &b, 0));
        assert_eq!(a.hash(0), b.hash(0));
        assert!(a.eq(1, &b, 1));
        assert_eq!(a.hash(2), None);
        assert!(!a.eq(2, &b, 2));
        assert_eq!(b.render(2), "a");
    }

    #[test]
    fn only_canonical_text_is_an_integer() {
        assert_eq!(canonical_int(b"0"), Some(Part::Int(0)));
        assert_eq!(canonical_int(b"-12"), Some(Part::Int(-12)));
        assert_eq!(
            canonical_int(b"-9223372036854775808"),
            Some(Part::Int(i64::MIN))
        );
        assert_eq!(canonical_int(b"-9223372036854775809"), None);
        assert_eq!(
            canonical_int(b"9223372036854775807"),
            Some(Part::Int(i64::MAX))
        );
        assert_eq!(
            canonical_int(b"9223372036854775808"),
            Some(Part::BigUInt(1 << 63))
        );
        assert_eq!(
            canonical_int(b"18446744073709551615"),
            Some(Part::BigUInt(u64::MAX))
        );
        assert_eq!(canonical_int(b"18446744073709551616"), None);
        assert_eq!(canonical_int(b"012"), None);
        assert_eq!(canonical_int(b"-0"), None);
        assert_eq!(canonical_int(b"+1"), None);
        assert_eq!(canonical_int(b"99999999999999999999"), None);
        assert_eq!(canonical_int(b""), None);
        assert_eq!(canonical_int(b"1a"), None);
    }

    /// UInt64 ids above i64::MAX are keys of their own (not null), equal to their text and to
    /// nothing else; below it they equal the same Int64.
    #[test]
    fn u64_keys_span_their_range() {
        let big = u64::MAX - 1;
        let unsigned: ArrayRef = Arc::new(arrow_array::UInt64Array::from(vec![big, 1 << 63, 7]));
        let text: ArrayRef = Arc::new(StringArray::from(vec![
            big.to_string(),
            (1u64 << 63).to_string(),
            "7".into(),
        ]));
        let signed: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![-2, i64::MIN, 7]));
        let names = vec!["k".to_owned()];
        let u = Keys::new(&[unsigned], &names, "served").unwrap();
        let t = Keys::new(&[text], &names, "offline").unwrap();
        let s = Keys::new(&[signed], &names, "offline").unwrap();
        for row in 0..3 {
            assert!(u.hash(row).is_some(), "row {row} is not a null key");
            assert!(u.eq(row, &t, row), "row {row}");
            assert_eq!(u.hash(row), t.hash(row));
        }
        // The same 64 bits as a negative Int64 are another id.
        assert!(!u.eq(0, &s, 0) && !u.eq(1, &s, 1));
        assert!(u.eq(2, &s, 2));
        assert_eq!(u.hash(2), s.hash(2));
        assert_eq!(u.render(0), big.to_string());
    }

    /// Distinct keys print distinctly, however their parts split: examples never show one key
    /// twice for two keys.
    #[test]
    fn rendered_keys_are_unambiguous() {
        let a: ArrayRef = Arc::new(StringArray::from(vec!["a|b", "a", "", "null", "\"q", "x"]));
        let b: ArrayRef = Arc::new(StringArray::from(vec!["c", "b|c", "", "z", "z", "y"]));
        let names = vec!["x".to_owned(), "y".to_owned()];
        let k = Keys::new(&[a, b], &names, "served").unwrap();
        let rendered: Vec<String> = (0..6).map(|r| k.render(r)).collect();
        assert_eq!(
            rendered,
            [
                r#""a|b"|c"#,
                r#"a|"b|c""#,
                r#"""|"""#,
                r#""null"|z"#,
                r#""\"q"|z"#,
                "x|y"
            ]
        );
        let bytes: ArrayRef = Arc::new(arrow_array::BinaryArray::from(vec![
            b"\xff".as_ref(),
            "\u{fffd}".as_bytes(),
        ]));
        let k = Keys::new(&[bytes], &names[..1], "served").unwrap();
        assert_eq!(k.render(0), r#""\xff""#);
        assert_ne!(k.render(0), k.render(1));
    }

    #[test]
    fn composite_keys_hash_by_part() {
        let a: ArrayRef = Arc::new(StringArray::from(vec!["ab", "a"]));
        let b: ArrayRef = Arc::new(StringArray::from(vec!["c", "bc"]));
        let names = vec!["x".to_owned(), "y".to_owned()];
        let k = Keys::new(&[a, b], &names, "served").unwrap();
        assert_ne!(k.hash(0), k.hash(1));
        assert!(!k.eq(0, &k, 1));
    }

    #[test]
    fn floats_are_not_keys() {
        let f: ArrayRef = Arc::new(arrow_array::Float64Array::from(vec![1.0]));
        assert!(Keys::new(&[f], &["k".to_owned()], "served").is_err());
    }
}
