//! The protobuf wire format, walked field by field over a record's bytes without copying
//! them: varints, keys, lengths and UTF-8 checks, with errors small enough to return by value.

use super::MalformedLog;

/// Protobuf's `sint64` decoding.
pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// What is wrong with the wire format, as a small value: the walk over every field of every
/// record returns it by value, and a `String` in that `Result` made each step copy a large
/// value through memory (perf showed store-forwarding stalls there). Turned into a
/// [`MalformedLog`] only when a record is refused.
#[derive(Debug, Clone, Copy)]
pub(super) enum WireError {
    TruncatedVarint,
    LongVarint,
    FieldZero,
    LongKey,
    LengthOverflows,
    WireType { number: u64, wire: u8 },
    Truncated { number: u64 },
}

impl From<WireError> for MalformedLog {
    fn from(e: WireError) -> Self {
        MalformedLog(match e {
            WireError::TruncatedVarint => "truncated varint".into(),
            WireError::LongVarint => "varint longer than 64 bits".into(),
            WireError::FieldZero => "field number 0".into(),
            // A field number past 2^29 - 1, which prost refuses.
            WireError::LongKey => "key past 32 bits".into(),
            WireError::LengthOverflows => "length overflows".into(),
            WireError::WireType { number, wire } => format!("field {number}: wire type {wire}"),
            WireError::Truncated { number } => format!("field {number}: truncated"),
        })
    }
}

#[inline]
pub(super) fn varint(buf: &[u8], at: &mut usize) -> Result<u64, WireError> {
    // Most varints of a log (keys, lengths of ids and names) are one byte.
    match buf.get(*at) {
        Some(&b) if b < 0x80 => {
            *at += 1;
            return Ok(u64::from(b));
        }
        None => return Err(WireError::TruncatedVarint),
        Some(_) => {}
    }
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or(WireError::TruncatedVarint)?;
        *at += 1;
        // The tenth byte holds the 64th bit only: prost refuses any other, as must this.
        if shift == 63 && b > 1 {
            return Err(WireError::LongVarint);
        }
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(WireError::LongVarint)
}

/// One field of a message: its number, wire type, where it starts (its key) and its payload
/// (for wire type 0, the varint's value is in `value`).
pub(super) struct Field {
    pub(super) number: u64,
    pub(super) wire: u8,
    pub(super) start: usize,
    pub(super) payload: (usize, usize),
    pub(super) value: u64,
}

/// Walks the fields of the message in `buf[from..to]`.
pub(super) fn fields(buf: &[u8], from: usize, to: usize) -> Fields<'_> {
    Fields { buf, at: from, to }
}

/// The iterator of [`fields`]: a plain struct whose steps inline into the caller's loop (a
/// closure-based walk was a call per field that returned its result through memory).
pub(super) struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
    to: usize,
}

impl Iterator for Fields<'_> {
    type Item = Result<Field, WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.to {
            return None;
        }
        let field = self.step();
        if field.is_err() {
            self.at = self.to;
        }
        Some(field)
    }
}

impl Fields<'_> {
    #[inline(always)]
    fn step(&mut self) -> Result<Field, WireError> {
        let (buf, to) = (self.buf, self.to);
        let start = self.at;
        let key = varint(buf, &mut self.at)?;
        let wire = (key & 7) as u8;
        let number = key >> 3;
        if number == 0 {
            return Err(WireError::FieldZero);
        }
        if key > u64::from(u32::MAX) {
            return Err(WireError::LongKey);
        }
        let mut payload_start = self.at;
        let mut value = 0;
        match wire {
            0 => value = varint(buf, &mut self.at)?,
            1 => self.at += 8,
            5 => self.at += 4,
            2 => {
                let len = varint(buf, &mut self.at)?;
                payload_start = self.at;
                self.at = usize::try_from(len)
                    .ok()
                    .and_then(|l| self.at.checked_add(l))
                    .ok_or(WireError::LengthOverflows)?;
            }
            wire => return Err(WireError::WireType { number, wire }),
        }
        if self.at > to {
            return Err(WireError::Truncated { number });
        }
        Ok(Field {
            number,
            wire,
            start,
            payload: (payload_start, self.at),
            value,
        })
    }
}

pub(super) fn utf8(raw: &[u8], (s, e): (usize, usize)) -> Result<&str, MalformedLog> {
    std::str::from_utf8(&raw[s..e]).map_err(|_| MalformedLog("a string is not UTF-8".into()))
}

/// Checks that `raw[s..e]` is UTF-8 without making a `&str` of it: candidate ids are nearly
/// always ASCII, checked inline instead of with a call per id.
#[inline]
pub(super) fn check_utf8(raw: &[u8], (s, e): (usize, usize)) -> Result<(), MalformedLog> {
    if raw[s..e].is_ascii() {
        return Ok(());
    }
    utf8(raw, (s, e)).map(|_| ())
}
