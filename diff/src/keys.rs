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

    /// Appends row `row`'s key in its canonical encoding to `out`; false (and `out` as it
    /// was) when a part is null. Per part: tag 1 and the i64 zigzagged, tag 3 and a u64 above
    /// `i64::MAX`, or tag 2, the length and the bytes; integers and lengths in LEB128 (the
    /// shortest form, so one per value: a 10M-row side's keys take eight bytes less each).
    /// The encoding is prefix-free (every part says where it ends), so two keys of the same
    /// columns are equal exactly when their encodings are, and a byte comparison or a hash of
    /// the encoding is the key's.
    #[inline]
    pub(crate) fn encode(&self, row: usize, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        for c in 0..self.cols.len() {
            match self.part(c, row) {
                None => {
                    out.truncate(start);
                    return false;
                }
                Some(Part::Int(v)) => {
                    out.push(TAG_INT);
                    leb128(((v << 1) ^ (v >> 63)) as u64, out);
                }
                Some(Part::BigUInt(v)) => {
                    out.push(TAG_BIG);
                    leb128(v, out);
                }
                Some(Part::Bytes(b)) => {
                    out.push(TAG_BYTES);
                    leb128(b.len() as u64, out);
                    out.extend_from_slice(b);
                }
            }
        }
        true
    }

    /// The hash of row `row`'s key; `None` when a part is null.
    #[cfg(test)]
    pub(crate) fn hash(&self, row: usize) -> Option<u64> {
        let mut b = Vec::new();
        self.encode(row, &mut b).then(|| hash_encoded(&b))
    }

    /// Whether row `row` here and row `orow` of `other` have equal keys.
    #[cfg(test)]
    pub(crate) fn eq(&self, row: usize, other: &Keys, orow: usize) -> bool {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        self.encode(row, &mut a) && other.encode(orow, &mut b) && a == b
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
            render_part(self.part(c, row), &mut out);
        }
        out
    }
}

/// Encoding tags of the key parts (see [`Keys::encode`]).
const TAG_INT: u8 = 1;
const TAG_BYTES: u8 = 2;
const TAG_BIG: u8 = 3;

fn render_part(part: Option<Part<'_>>, out: &mut String) {
    match part {
        None => out.push_str("null"),
        Some(Part::Int(v)) => out.push_str(&v.to_string()),
        Some(Part::BigUInt(v)) => out.push_str(&v.to_string()),
        Some(Part::Bytes(b)) => match std::str::from_utf8(b) {
            Ok(t) if !t.is_empty() && t != "null" && !t.contains('|') && !t.starts_with('"') => {
                out.push_str(t);
            }
            Ok(t) => out.push_str(&format!("{t:?}")),
            Err(_) => out.push_str(&format!("\"{}\"", b.escape_ascii())),
        },
    }
}

/// The parts of an encoded key (see [`Keys::encode`]), in order; stops at a malformed one.
fn decode_parts(mut b: &[u8]) -> Vec<Part<'_>> {
    let mut parts = Vec::new();
    while let Some((&tag, rest)) = b.split_first() {
        let Some((v, n)) = read_leb128(rest) else {
            break;
        };
        let (part, len) = match tag {
            TAG_INT => (Part::Int(((v >> 1) as i64) ^ -((v & 1) as i64)), n),
            TAG_BIG => (Part::BigUInt(v), n),
            TAG_BYTES => match rest.get(n..n + v as usize) {
                Some(bytes) => (Part::Bytes(bytes), n + v as usize),
                None => break,
            },
            _ => break,
        };
        parts.push(part);
        b = rest.get(len..).unwrap_or(&[]);
    }
    parts
}

/// Appends `v` in LEB128: seven bits a byte, low first, the high bit set on all but the last.
#[inline]
fn leb128(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A LEB128 number at the start of `b` and its length in bytes.
fn read_leb128(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// An encoded key as [`Keys::render`] prints it.
pub(crate) fn render_encoded(b: &[u8]) -> String {
    let mut out = String::new();
    for (c, part) in decode_parts(b).into_iter().enumerate() {
        if c > 0 {
            out.push('|');
        }
        render_part(Some(part), &mut out);
    }
    out
}

/// The hash of an encoded key (see [`Keys::encode`]): eight bytes at a time, then
/// [`fmix`], so that every bit depends on every input bit (the index reads the low bits for
/// the slot, the middle ones for the partition and the top ones as the tag).
#[inline]
pub(crate) fn hash_encoded(b: &[u8]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for ch in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(ch);
        h = mix(h, u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(w));
    }
    fmix(h)
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

    /// Encodings decode to the parts they were made of (so offline examples print as served
    /// ones do), and distinct keys encode distinctly, whatever the integers and lengths.
    #[test]
    fn encodings_are_canonical_and_decode() {
        let ints: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![
            0,
            -1,
            1,
            63,
            64,
            -64,
            -65,
            i64::MAX,
            i64::MIN,
        ]));
        let long = "x".repeat(300);
        let text: ArrayRef = Arc::new(StringArray::from(vec![
            "", "a", "12", "012", "-0", &long, "null", "a|b", "\"q",
        ]));
        let big: ArrayRef = Arc::new(arrow_array::UInt64Array::from(vec![
            u64::MAX,
            1 << 63,
            0,
            127,
            128,
            5,
            6,
            7,
            8,
        ]));
        let names = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let k = Keys::new(&[ints, text, big], &names, "served").unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for r in 0..9 {
            let mut enc = Vec::new();
            assert!(k.encode(r, &mut enc));
            assert_eq!(render_encoded(&enc), k.render(r), "row {r}");
            // Zero padding after an encoding (as in a record's key region) is not read.
            let mut padded = enc.clone();
            padded.extend_from_slice(&[0; 8]);
            assert_eq!(render_encoded(&padded), k.render(r));
            assert!(seen.insert(enc), "row {r} encodes as another row");
        }
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
