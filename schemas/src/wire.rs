//! The protobuf wire format, walked by hand: one walker of a message's fields, and the field
//! numbers of the messages read that way, by name.
//!
//! Why by hand at all: the hot paths read a few fields of large messages. The sidecar needs a
//! request's model, id and the names of its input tensors, not the megabytes of tensor data
//! around them; the joiner keeps a record's bytes and reads its packed values in place. A
//! prost decode of the whole message allocates every string, vector and tensor it holds, and
//! prost's `decode_key`/`skip_field` go through `Buf`'s generic methods. [`fields`] is a plain
//! iterator over a `&[u8]` that yields each field's number, wire type and where its payload
//! lies, copying nothing; its steps inline into the caller's loop.
//!
//! It accepts exactly what prost's `decode_key` then `skip_field` accept, except groups (wire
//! types 3 and 4), which it refuses: proto3 has none and no producer of these messages writes
//! them. The tests hold it to prost on random and mutated encodings.
//!
//! The field numbers are constants in a module per message (`model_infer_request::INPUTS`,
//! `feature::VALUES`, ...), named as the fields are in the `.proto` files, in upper case. They
//! are declared through one macro that also lists them for the test that compares every one
//! with the descriptors protoc makes of the protos ([`crate::FILE_DESCRIPTOR_SET`]), and that
//! checks every field of each message has one: a number typed wrong, or a field renumbered in
//! a `.proto`, fails the build's tests instead of misreading records.

use std::iter::FusedIterator;

/// What a field's payload is on the wire. Only the four kinds [`fields`] accepts: groups
/// (3 and 4) and the unassigned 6 and 7 are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WireType {
    /// 0: a varint (int32, int64, uint32, uint64, sint32, sint64, bool, enum).
    Varint = 0,
    /// 1: eight bytes (fixed64, sfixed64, double).
    SixtyFourBit = 1,
    /// 2: a varint length, then that many bytes (string, bytes, messages, packed repeated).
    LengthDelimited = 2,
    /// 5: four bytes (fixed32, sfixed32, float).
    ThirtyTwoBit = 5,
}

impl WireType {
    /// The wire type of a key's low three bits; `None` for a group or an unassigned type.
    #[inline]
    pub const fn from_bits(bits: u8) -> Option<Self> {
        match bits {
            0 => Some(Self::Varint),
            1 => Some(Self::SixtyFourBit),
            2 => Some(Self::LengthDelimited),
            5 => Some(Self::ThirtyTwoBit),
            _ => None,
        }
    }
}

/// As a number, as protobuf's documentation and error messages name wire types.
impl std::fmt::Display for WireType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", *self as u8)
    }
}

/// For writing keys with prost's `encode_key`.
impl From<WireType> for prost::encoding::WireType {
    fn from(wire: WireType) -> Self {
        match wire {
            WireType::Varint => Self::Varint,
            WireType::SixtyFourBit => Self::SixtyFourBit,
            WireType::LengthDelimited => Self::LengthDelimited,
            WireType::ThirtyTwoBit => Self::ThirtyTwoBit,
        }
    }
}

/// What is wrong with the wire format, as a small `Copy` value: the walk over every field of
/// every record returns it by value, and a `String` in that `Result` made each step copy a
/// large value through memory (perf showed store-forwarding stalls in the joiner). Texts are
/// the joiner's, which puts them in its `MalformedLog` as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes end inside a varint.
    #[error("truncated varint")]
    TruncatedVarint,
    /// A varint of more than ten bytes, or whose tenth byte holds more than the 64th bit.
    #[error("varint longer than 64 bits")]
    LongVarint,
    /// A key of field number 0, which does not exist.
    #[error("field number 0")]
    FieldZero,
    /// A key past 32 bits (a field number past 2^29 - 1), which prost refuses.
    #[error("key past 32 bits")]
    LongKey,
    /// A length that does not fit in memory, or (from [`length_delimited`], which does not
    /// know the field) that runs past the end of the bytes.
    #[error("length overflows")]
    LengthOverflows,
    /// A group, or an unassigned wire type.
    #[error("field {number}: wire type {wire}")]
    WireType {
        /// The field's number.
        number: u32,
        /// Its wire type, 3, 4, 6 or 7.
        wire: u8,
    },
    /// A payload that runs past the end of the message.
    #[error("field {number}: truncated")]
    Truncated {
        /// The field's number.
        number: u32,
    },
    /// A string field that is not UTF-8 ([`Field::str`]).
    #[error("a string is not UTF-8")]
    NotUtf8,
}

/// The varint at `buf[*at..]`, moving `at` past it.
///
/// Refuses what prost's `decode_varint` refuses: more than ten bytes, or a tenth byte above 1.
/// Longer encodings than needed (`0x80 0x00` for 0) are accepted, as prost accepts them.
#[inline]
pub fn varint(buf: &[u8], at: &mut usize) -> Result<u64, WireError> {
    // Most varints of a message (keys, lengths of ids and names) are one byte.
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

/// A key's field number and wire type, checked as prost's `decode_key` checks them (but for
/// groups, which are refused): for walkers over something else than a slice, such as the
/// sidecar's chunked bodies.
#[inline]
pub const fn split_key(key: u64) -> Result<(u32, WireType), WireError> {
    let number = key >> 3;
    if number == 0 {
        return Err(WireError::FieldZero);
    }
    if key > u32::MAX as u64 {
        return Err(WireError::LongKey);
    }
    // Below 2^29 now.
    let number = number as u32;
    let bits = (key & 7) as u8;
    match WireType::from_bits(bits) {
        Some(wire) => Ok((number, wire)),
        None => Err(WireError::WireType { number, wire: bits }),
    }
}

/// The key of field `number` of type `wire`, as a varint's value: for matching keys as bytes
/// (`key(model_infer_request::MODEL_NAME, WireType::LengthDelimited)` is `0x0a`).
#[inline]
pub const fn key(number: u32, wire: WireType) -> u64 {
    ((number as u64) << 3) | wire as u64
}

/// One field of a message: its number, wire type, where it starts (its key) and its payload
/// (for wire type 0, the varint's value is in `value`). Offsets are into the buffer walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The field number, 1 to 2^29 - 1.
    pub number: u32,
    /// The wire type.
    pub wire: WireType,
    /// Where the field's key starts.
    pub start: usize,
    /// Where the payload starts and ends: a varint's bytes, the fixed-width bytes, or a
    /// length-delimited field's bytes after its length. The field ends where it ends.
    pub payload: (usize, usize),
    /// A varint field's value (0 for the other wire types).
    pub value: u64,
}

impl Field {
    /// Where the field ends: the end of its payload.
    #[inline]
    pub fn end(&self) -> usize {
        self.payload.1
    }

    /// The payload's range, for slicing `Bytes` (`message.slice(field.range())`).
    #[inline]
    pub fn range(&self) -> std::ops::Range<usize> {
        self.payload.0..self.payload.1
    }

    /// The payload's bytes in `buf`, the buffer walked (panics on a shorter one).
    #[inline]
    pub fn bytes<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.payload.0..self.payload.1]
    }

    /// The payload as a string, as prost reads a `string` field: UTF-8 or an error.
    #[inline]
    pub fn str<'a>(&self, buf: &'a [u8]) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes(buf)).map_err(|_| WireError::NotUtf8)
    }

    /// The whole field, key included, in `buf`: to copy a field over as it is.
    #[inline]
    pub fn encoded<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.start..self.payload.1]
    }
}

/// Walks the fields of the message `buf`.
#[inline]
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf, at: 0 }
}

/// Walks the fields of the message in `buf[from..to]` (an embedded message), with offsets into
/// the whole `buf` (so a field's place in a record can be kept). A `to` past the end of `buf`
/// is its end.
#[inline]
pub fn fields_in(buf: &[u8], from: usize, to: usize) -> Fields<'_> {
    // Cut at `to`, so that nothing is read past it; offsets stay those of `buf`.
    let buf = buf.get(..to).unwrap_or(buf);
    Fields { buf, at: from }
}

/// The iterator of [`fields`]: a plain struct whose steps inline into the caller's loop (a
/// closure-based walk was a call per field that returned its result through memory). After an
/// error it ends.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Fields<'_> {
    /// Where the next field starts (the end of the message once walked).
    #[inline]
    pub fn offset(&self) -> usize {
        self.at
    }

    #[inline(always)]
    fn step(&mut self) -> Result<Field, WireError> {
        let buf = self.buf;
        let start = self.at;
        let (number, wire) = split_key(varint(buf, &mut self.at)?)?;
        let mut payload_start = self.at;
        let mut value = 0;
        match wire {
            WireType::Varint => value = varint(buf, &mut self.at)?,
            WireType::SixtyFourBit => self.at += 8,
            WireType::ThirtyTwoBit => self.at += 4,
            WireType::LengthDelimited => {
                let len = varint(buf, &mut self.at)?;
                payload_start = self.at;
                self.at = usize::try_from(len)
                    .ok()
                    .and_then(|l| self.at.checked_add(l))
                    .ok_or(WireError::LengthOverflows)?;
            }
        }
        if self.at > buf.len() {
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

impl Iterator for Fields<'_> {
    type Item = Result<Field, WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.buf.len() {
            return None;
        }
        let field = self.step();
        if field.is_err() {
            self.at = self.buf.len();
        }
        Some(field)
    }
}

impl FusedIterator for Fields<'_> {}

/// The values of a packed repeated varint field (`int64`, `sint64`, enums, ...) from its
/// payload, raw (a `sint` is still zigzagged). After an error it ends.
#[inline]
pub fn packed_varints(payload: &[u8]) -> PackedVarints<'_> {
    PackedVarints {
        buf: payload,
        at: 0,
    }
}

/// The iterator of [`packed_varints`].
#[derive(Debug, Clone)]
pub struct PackedVarints<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Iterator for PackedVarints<'_> {
    type Item = Result<u64, WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.buf.len() {
            return None;
        }
        let value = varint(self.buf, &mut self.at);
        if value.is_err() {
            self.at = self.buf.len();
        }
        Some(value)
    }
}

impl FusedIterator for PackedVarints<'_> {}

// Cursor-style helpers, for code that reads a message as a shrinking `&[u8]` (the sidecar's
// style with prost's functions). Each accepts what its step of [`fields`] accepts.

/// Reads a varint from the front of `buf`.
#[inline]
pub fn read_varint(buf: &mut &[u8]) -> Result<u64, WireError> {
    let mut at = 0;
    let value = varint(buf, &mut at)?;
    *buf = &buf[at..];
    Ok(value)
}

/// Reads a key from the front of `buf`: its field number and wire type.
#[inline]
pub fn read_key(buf: &mut &[u8]) -> Result<(u32, WireType), WireError> {
    split_key(read_varint(buf)?)
}

/// Reads a length-delimited payload (its length, then its bytes) from the front of `buf`,
/// borrowed from it. A length past the end is [`WireError::LengthOverflows`].
#[inline]
pub fn length_delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], WireError> {
    let mut rest: &'a [u8] = buf;
    let len = read_varint(&mut rest)?;
    let len = usize::try_from(len).map_err(|_| WireError::LengthOverflows)?;
    let payload = rest.get(..len).ok_or(WireError::LengthOverflows)?;
    *buf = &rest[len..];
    Ok(payload)
}

/// Skips the payload of field `number` of type `wire` (its key already read) at the front of
/// `buf`, as prost's `skip_field` does.
#[inline]
pub fn skip(buf: &mut &[u8], number: u32, wire: WireType) -> Result<(), WireError> {
    let mut at = 0;
    let end = match wire {
        WireType::Varint => {
            varint(buf, &mut at)?;
            at
        }
        WireType::SixtyFourBit => 8,
        WireType::ThirtyTwoBit => 4,
        WireType::LengthDelimited => {
            let len = varint(buf, &mut at)?;
            usize::try_from(len)
                .ok()
                .and_then(|l| at.checked_add(l))
                .ok_or(WireError::LengthOverflows)?
        }
    };
    *buf = buf.get(end..).ok_or(WireError::Truncated { number })?;
    Ok(())
}

/// Declares a module of field-number constants per message, and the table of them that the
/// tests compare with the descriptors: a constant cannot be declared without being checked.
macro_rules! field_numbers {
    ($(
        $(#[$doc:meta])*
        $module:ident for [$($message:literal),+ $(,)?] {
            $($name:ident = $number:literal,)+
        }
    )+) => {
        $(
            $(#[$doc])*
            pub mod $module {
                $(
                    #[doc = concat!("Field ", stringify!($number), ".")]
                    pub const $name: u32 = $number;
                )+

                /// The messages (full names) these are the numbers of.
                #[cfg(test)]
                pub(super) const MESSAGES: &[&str] = &[$($message),+];

                /// Every constant, by its name.
                #[cfg(test)]
                pub(super) const NUMBERS: &[(&str, u32)] = &[$((stringify!($name), $name)),+];
            }
        )+

        /// Every module above: its messages and its constants.
        #[cfg(test)]
        const TABLES: &[(&str, &[&str], &[(&str, u32)])] =
            &[$((stringify!($module), $module::MESSAGES, $module::NUMBERS)),+];
    };
}

field_numbers! {
    /// `inference.ModelInferRequest`: what the sidecar scans on every call (`lazy`, `proxy`,
    /// `publisher`).
    model_infer_request for ["inference.ModelInferRequest"] {
        MODEL_NAME = 1,
        MODEL_VERSION = 2,
        ID = 3,
        PARAMETERS = 4,
        INPUTS = 5,
        OUTPUTS = 6,
        RAW_INPUT_CONTENTS = 7,
    }

    /// `inference.ModelInferRequest.InferInputTensor`: an input's header and typed contents.
    infer_input_tensor for ["inference.ModelInferRequest.InferInputTensor"] {
        NAME = 1,
        DATATYPE = 2,
        SHAPE = 3,
        PARAMETERS = 4,
        CONTENTS = 5,
    }

    /// `inference.ModelInferRequest.InferRequestedOutputTensor`.
    infer_requested_output_tensor for ["inference.ModelInferRequest.InferRequestedOutputTensor"] {
        NAME = 1,
        PARAMETERS = 2,
    }

    /// `inference.ModelInferResponse`.
    model_infer_response for ["inference.ModelInferResponse"] {
        MODEL_NAME = 1,
        MODEL_VERSION = 2,
        ID = 3,
        PARAMETERS = 4,
        OUTPUTS = 5,
        RAW_OUTPUT_CONTENTS = 6,
    }

    /// `inference.ModelInferResponse.InferOutputTensor`.
    infer_output_tensor for ["inference.ModelInferResponse.InferOutputTensor"] {
        NAME = 1,
        DATATYPE = 2,
        SHAPE = 3,
        PARAMETERS = 4,
        CONTENTS = 5,
    }

    /// `inference.ModelStreamInferResponse`: one message of a streamed response.
    model_stream_infer_response for ["inference.ModelStreamInferResponse"] {
        ERROR_MESSAGE = 1,
        INFER_RESPONSE = 2,
    }

    /// `inference.InferTensorContents`: a tensor's typed elements, one field per kind.
    infer_tensor_contents for ["inference.InferTensorContents"] {
        BOOL_CONTENTS = 1,
        INT_CONTENTS = 2,
        INT64_CONTENTS = 3,
        UINT_CONTENTS = 4,
        UINT64_CONTENTS = 5,
        FP32_CONTENTS = 6,
        FP64_CONTENTS = 7,
        BYTES_CONTENTS = 8,
    }

    /// `inference.InferParameter`: a parameter's value, one field of its oneof.
    infer_parameter for ["inference.InferParameter"] {
        BOOL_PARAM = 1,
        INT64_PARAM = 2,
        STRING_PARAM = 3,
        DOUBLE_PARAM = 4,
        UINT64_PARAM = 5,
    }

    /// An entry of a `map` field, which protobuf encodes as a message of a key and a value:
    /// the same numbers for every map (checked for each map of the protos).
    map_entry for [
        "inference.ModelInferRequest.ParametersEntry",
        "inference.ModelInferRequest.InferInputTensor.ParametersEntry",
        "inference.ModelInferRequest.InferRequestedOutputTensor.ParametersEntry",
        "inference.ModelInferResponse.ParametersEntry",
        "inference.ModelInferResponse.InferOutputTensor.ParametersEntry",
        "featurelog.v1.FeatureLog.ParametersEntry",
        "featurelog.v1.Impression.LabelsEntry",
    ] {
        KEY = 1,
        VALUE = 2,
    }

    /// `featurelog.v1.FeatureLog`: the record the sidecar writes and the joiner reads in place.
    feature_log for ["featurelog.v1.FeatureLog"] {
        REQUEST_ID = 1,
        MODEL_NAME = 2,
        MODEL_VERSION = 3,
        SERVED_AT = 4,
        SIDECAR_INSTANCE = 5,
        ALLOW_LIST_VERSION = 6,
        ROW_COUNT = 7,
        CANDIDATE_IDS = 8,
        FEATURES = 9,
        OUTPUTS = 10,
        PARAMETERS = 11,
        CANDIDATE_INT_IDS = 12,
    }

    /// `featurelog.v1.Feature`: one column of a record.
    feature for ["featurelog.v1.Feature"] {
        NAME = 1,
        DATATYPE = 2,
        ROW_SHAPE = 3,
        VALUES = 4,
        PER_REQUEST = 5,
    }

    /// `featurelog.v1.Values`: a column's values, one packed field per kind.
    values for ["featurelog.v1.Values"] {
        BOOL_VALUES = 1,
        INT32_VALUES = 2,
        INT64_VALUES = 3,
        UINT32_VALUES = 4,
        UINT64_VALUES = 5,
        FP32_VALUES = 6,
        FP64_VALUES = 7,
        BYTES_VALUES = 8,
        HALF_BITS = 9,
    }

    /// `featurelog.v1.Impression`: what the app showed and what the user did.
    impression for ["featurelog.v1.Impression"] {
        REQUEST_ID = 1,
        ITEM_ID = 2,
        EVENT_TIME = 3,
        EVENT_TYPE = 4,
        EVENT_NAME = 5,
        LABELS = 6,
        EVENT_ID = 7,
    }

    /// `google.protobuf.Timestamp`: `FeatureLog.served_at`, `Impression.event_time`.
    timestamp for ["google.protobuf.Timestamp"] {
        SECONDS = 1,
        NANOS = 2,
    }
}

#[cfg(test)]
mod tests;
