//! The schemas crate's field walker ([`featurelog_schemas::wire::fields`]) as prost's
//! `decode_key` then `skip_field` step over a message: the same fields, and groups too.
//!
//! The walker refuses groups (wire types 3 and 4): proto3 has none and no producer of these
//! messages writes them. But the model server decodes with prost, which steps over a group of
//! a field it does not know, and the sidecar logs and forwards exactly what it would accept. So
//! a group is stepped over here by prost's `skip_field`, out of line (no request carries one),
//! and the walk goes on after it; everything else is the walker's, inlined into the caller's
//! loop, copying nothing.

use featurelog_schemas::wire::{self, Field, WireError};
use prost::encoding::{DecodeContext, decode_key, skip_field};

/// What [`fields`] yields instead of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotField {
    /// A group of this field number, stepped over as prost's `skip_field` steps over it: the
    /// walk goes on after it. prost's decode of a message refuses a group in a field it
    /// declares, and skips one in a field it does not.
    Group(u32),
    /// Bytes that prost's `decode_key` or `skip_field` refuses (an end-group key without its
    /// start included): the walk ends.
    Malformed,
}

/// Walks the fields of the message `buf`, offsets into `buf`.
#[inline]
pub(crate) fn fields(buf: &[u8]) -> Fields<'_> {
    Fields {
        buf,
        walk: wire::fields(buf),
    }
}

/// The iterator of [`fields`].
#[derive(Debug, Clone)]
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
    walk: wire::Fields<'a>,
}

impl Iterator for Fields<'_> {
    type Item = Result<Field, NotField>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let start = self.walk.offset();
        Some(match self.walk.next()? {
            Ok(field) => Ok(field),
            Err(WireError::WireType { number, wire: 3 }) => self.skip_group(start, number),
            Err(_) => Err(NotField::Malformed),
        })
    }
}

impl std::iter::FusedIterator for Fields<'_> {}

impl Fields<'_> {
    /// Steps over the group whose key is at `start` with prost's `skip_field` (and its
    /// recursion limit), then walks on after it. The walker has ended on the group's error: it
    /// stays ended if prost refuses the group too.
    #[cold]
    #[inline(never)]
    fn skip_group(&mut self, start: usize, number: u32) -> Result<Field, NotField> {
        let mut rest = &self.buf[start..];
        let skipped = decode_key(&mut rest)
            .and_then(|(tag, wire)| skip_field(wire, tag, &mut rest, DecodeContext::default()));
        if skipped.is_err() {
            return Err(NotField::Malformed);
        }
        let end = self.buf.len();
        self.walk = wire::fields_in(self.buf, end - rest.len(), end);
        Err(NotField::Group(number))
    }
}

#[cfg(test)]
mod tests {
    use featurelog_schemas::wire::WireType;
    use prost::encoding::{DecodeContext, decode_key, skip_field};

    use super::*;

    /// What prost's `decode_key` then `skip_field` step over: each whole field's number and wire
    /// type (as prost numbers them), and whether the bytes are refused.
    fn prost_walk(mut buf: &[u8]) -> (Vec<(u32, u8)>, bool) {
        let mut seen = Vec::new();
        while !buf.is_empty() {
            let Ok((tag, wire)) = decode_key(&mut buf) else {
                return (seen, true);
            };
            if skip_field(wire, tag, &mut buf, DecodeContext::default()).is_err() {
                return (seen, true);
            }
            seen.push((tag, wire as u8));
        }
        (seen, false)
    }

    fn walk(buf: &[u8]) -> (Vec<(u32, u8)>, bool) {
        let mut seen = Vec::new();
        for f in fields(buf) {
            match f {
                Ok(f) => seen.push((f.number, f.wire as u8)),
                Err(NotField::Group(n)) => seen.push((n, 3)),
                Err(NotField::Malformed) => return (seen, true),
            }
        }
        (seen, false)
    }

    #[test]
    fn groups_are_stepped_over_as_prost_steps_over_them() {
        let cases: &[&[u8]] = &[
            // Field 1 "ab", a group 6 holding a varint field, field 3 = 7.
            &[0x0a, 2, b'a', b'b', 0x33, 0x08, 1, 0x34, 0x18, 7],
            // A group first and last, nested groups, an empty group.
            &[0x0b, 0x13, 0x14, 0x0c, 0x10, 5, 0x23, 0x24],
            // A group holding a length-delimited field with an end-group byte in it.
            &[0x0b, 0x12, 1, 0x0c, 0x0c, 0x18, 1],
            // An end-group key alone, or of another group.
            &[0x08, 1, 0x0c],
            &[0x0b, 0x14, 0x0c],
            // A group that never ends, or is cut inside a field.
            &[0x0b, 0x08, 1],
            &[0x0b, 0x12, 5, 1],
            // A group of field number 0 (prost refuses the key).
            &[0x03, 0x04],
        ];
        for &buf in cases {
            assert_eq!(walk(buf), prost_walk(buf), "{buf:02x?}");
        }
        let fields: Vec<_> = fields(cases[0]).collect();
        assert_eq!(fields.len(), 3);
        assert_eq!(fields[1], Err(NotField::Group(6)));
        let last = fields[2].unwrap();
        assert_eq!(
            (last.number, last.wire, last.start, last.value),
            (3, WireType::Varint, 8, 7)
        );
    }

    #[test]
    fn groups_nested_past_prosts_recursion_limit_are_refused() {
        let mut buf = vec![0x0b; 200];
        buf.extend([0x0c; 200]);
        assert_eq!(walk(&buf), prost_walk(&buf));
        assert!(walk(&buf).1);
    }
}
