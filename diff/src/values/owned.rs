//! Values owned, for reports and for classifying a mismatching pair, and the byte encoding
//! that counts pairs without allocating.

use arrow_array::Array;

use super::display::{fmt_exact, fmt_num};
use super::{Unit, Val};

/// An owned value (`None` in a list: a null element).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Owned {
    Null,
    Num(f64),
    Exact(i128, Unit),
    Text(String),
    NumList(Vec<Option<f64>>),
    TextList(Vec<Option<String>>),
}

/// In an encoded text list, the length that marks a null element.
const NULL_ITEM: u32 = u32::MAX;

fn unit_bytes(u: Unit) -> [u8; 2] {
    match u {
        Unit::Int => [0, 0],
        Unit::Bool => [1, 0],
        Unit::Decimal(s) => [2, s.to_le_bytes()[0]],
        Unit::Timestamp => [3, 0],
        Unit::Date => [4, 0],
        Unit::Time => [5, 0],
        Unit::Duration => [6, 0],
    }
}

fn unit_from(b: [u8; 2]) -> Unit {
    match b[0] {
        1 => Unit::Bool,
        2 => Unit::Decimal(i8::from_le_bytes([b[1]])),
        3 => Unit::Timestamp,
        4 => Unit::Date,
        5 => Unit::Time,
        6 => Unit::Duration,
        _ => Unit::Int,
    }
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
            Val::Exact(v, u) => {
                out.push(5);
                out.extend_from_slice(&unit_bytes(u));
                out.extend_from_slice(&v.to_le_bytes());
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
        5 => {
            let (Some(u), Some(v)) = (rest.get(..2), rest.get(2..18)) else {
                return Owned::Null;
            };
            let mut w = [0u8; 16];
            w.copy_from_slice(v);
            Owned::Exact(i128::from_le_bytes(w), unit_from([u[0], u[1]]))
        }
        _ => Owned::Null,
    }
}

impl Owned {
    /// The value as a report prints it (long values are cut): strings quoted, numbers bare,
    /// times as ISO 8601 in UTC.
    pub(crate) fn render(&self) -> String {
        let s = match self {
            Owned::Null => return "null".into(),
            Owned::Num(v) => fmt_num(*v),
            Owned::Exact(v, u) => fmt_exact(*v, *u),
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BinaryArray, Float64Array};

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
            Val::Exact(-12345, Unit::Decimal(-3)),
            Val::Exact(i128::MIN, Unit::Timestamp),
        ] {
            let mut buf = Vec::new();
            v.encode(&mut buf);
            let back = decode(&buf);
            match (v, &back) {
                (Val::Null, Owned::Null) => {}
                (Val::Num(a), Owned::Num(b)) => assert_eq!(a, *b),
                (Val::Exact(a, u), Owned::Exact(b, w)) => assert_eq!((a, u), (*b, *w)),
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
        // Truncated input decodes to something, never panics.
        for cut in 0..18 {
            let mut buf = Vec::new();
            Val::Exact(7, Unit::Int).encode(&mut buf);
            let _ = decode(&buf[..cut.min(buf.len())]);
        }
    }
}
