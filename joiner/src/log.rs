//! A feature log as the joiner holds it: the record's bytes exactly as they came from Kafka,
//! with everything decoded except the packed values of FP32 and FP64 columns.
//!
//! Those values are nearly all of a record (100 candidates x 10 FP32 features are 4 kB of a
//! 5 kB record), and a few percent of the candidates are ever impressed: decoding every value
//! into vectors was a fifth of the joiner's CPU in the profile, and encoding the logs again for
//! the state files another few percent. Keeping the bytes makes both unnecessary: a row's values
//! are read from them when the row is emitted, and a state file stores the bytes as they are.
//!
//! The values stay in the bytes only in the encoding the sidecar writes (one packed run of
//! field 6 or 7 in a feature's `values`); anything else a producer may send (unpacked floats,
//! several runs, other fields) is decoded with prost as before, so every valid record reads
//! the same either way.
//!
//! This file owns the log and what is read from it; beside it, `decode.rs` reads a record into
//! a log (walking the protobuf wire format with `featurelog_schemas::wire`), and `layout.rs`
//! shares the columns' metadata between logs of the same layout.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use featurelog_schemas::featurelog::v1::{DataType, FeatureLog, Values};
use featurelog_schemas::wire::WireError;
use prost::Message;

mod decode;
mod layout;

pub use layout::{Layout, Layouts};

/// A record that is not a valid FeatureLog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed FeatureLog: {0}")]
pub struct MalformedLog(String);

impl From<prost::DecodeError> for MalformedLog {
    fn from(e: prost::DecodeError) -> Self {
        Self(e.to_string())
    }
}

/// A wire-format error of the walk over a record, made a `String` only when it is refused.
impl From<WireError> for MalformedLog {
    fn from(e: WireError) -> Self {
        Self(e.to_string())
    }
}

/// Which list of a log a column comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// `features`.
    Feature,
    /// `outputs`.
    Output,
}

/// What a column is, apart from its values: the same for every log of a model and allow list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Column {
    /// The list it comes from.
    pub side: Side,
    /// Its name.
    pub name: String,
    /// Its protocol datatype (the raw enum value, as sent).
    pub datatype: i32,
    /// Its shape per row (empty for a scalar).
    pub row_shape: Vec<i64>,
    /// One value for the whole request instead of one per row.
    pub per_request: bool,
}

impl Column {
    /// The datatype, `Unspecified` for a value this build does not know.
    pub fn data_type(&self) -> DataType {
        DataType::try_from(self.datatype).unwrap_or(DataType::Unspecified)
    }

    /// Values per row: the product of the shape; `None` for a negative or overflowing shape.
    pub fn width(&self) -> Option<usize> {
        self.row_shape.iter().try_fold(1usize, |acc, &d| {
            usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        })
    }
}

/// Where a column's values are.
#[derive(Debug, Clone, PartialEq)]
enum Cells {
    /// One packed run of FP32 (`width` 4) or FP64 (8) values in the record's bytes.
    Packed { start: u32, len: u32, width: u8 },
    /// Decoded (any other datatype or encoding).
    Decoded(Box<Values>),
    /// The column sent no values.
    None,
}

/// A feature log: the record's bytes, its scalar fields decoded (through `Deref`), its
/// candidate ids and packed float values read from the bytes on demand, and its columns'
/// metadata shared with every log of the same layout.
///
/// The `Deref` target holds the record's scalar fields (request id, model, served-at time,
/// parameters, ...); its `candidate_ids`, `features` and `outputs` are left empty: use
/// [`ServedLog::candidate_id`], [`ServedLog::layout`] and the value readers.
#[derive(Debug, Clone)]
pub struct ServedLog {
    head: FeatureLog,
    raw: Vec<u8>,
    /// Text candidate ids: where each is in `raw`.
    ids: Vec<(u32, u32)>,
    /// Integer candidate ids (`candidate_int_ids`); at most one of the two is non-empty.
    int_ids: Vec<i64>,
    cells: Vec<Cells>,
    layout: Arc<Layout>,
    /// Where the record is in its feature-log partition, when checkpoints may refer to it
    /// there instead of copying its bytes (see [`ServedLog::with_offset`]).
    offset: Option<i64>,
}

impl PartialEq for ServedLog {
    /// The same record.
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Deref for ServedLog {
    type Target = FeatureLog;

    fn deref(&self) -> &FeatureLog {
        &self.head
    }
}

/// A candidate's id as its record holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateId<'a> {
    /// From `candidate_ids`.
    Text(&'a str),
    /// From `candidate_int_ids`.
    Int(i64),
}

impl<'a> CandidateId<'a> {
    /// Its text: the id itself, or the number in decimal (written into `buf`).
    pub fn text<'b>(&self, buf: &'b mut String) -> &'b str
    where
        'a: 'b,
    {
        match *self {
            CandidateId::Text(t) => t,
            CandidateId::Int(n) => {
                use std::fmt::Write;
                buf.clear();
                let _ = write!(buf, "{n}");
                buf
            }
        }
    }
}

impl std::fmt::Display for CandidateId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CandidateId::Text(t) => f.write_str(t),
            CandidateId::Int(n) => write!(f, "{n}"),
        }
    }
}

/// A log's candidate ids by value, see [`ServedLog::candidate_index`].
#[derive(Debug)]
pub enum CandidateIndex {
    /// Text ids.
    Text(HashMap<Box<str>, u32, foldhash::fast::RandomState>),
    /// Integer ids.
    Int(HashMap<i64, u32, foldhash::fast::RandomState>),
}

impl CandidateIndex {
    /// The first row whose id is `item` (an event's item id).
    pub fn get(&self, item: &str) -> Option<usize> {
        match self {
            CandidateIndex::Text(m) => m.get(item),
            CandidateIndex::Int(m) => m.get(&canonical_int(item)?),
        }
        .map(|&i| i as usize)
    }
}

/// The number an event's item id names when it is the canonical decimal text of an integer
/// candidate id: an optional `-` and digits, no leading zero, no `+`, no `-0`. Any other text
/// names no integer candidate, so that "042" never joins the candidate 42.
pub fn canonical_int(item: &str) -> Option<i64> {
    let negative = item.starts_with('-');
    let digits = &item.as_bytes()[usize::from(negative)..];
    match digits {
        [] => None,
        [b'0'] if negative => None,
        [b'0', _, ..] => None,
        _ if !digits.iter().all(u8::is_ascii_digit) => None,
        _ => item.parse().ok(),
    }
}

impl From<FeatureLog> for ServedLog {
    /// Encodes a decoded log (tests, and producers that hand over structs).
    fn from(log: FeatureLog) -> Self {
        let raw = log.encode_to_vec();
        match Self::decode(raw, &mut Layouts::default()) {
            Ok(served) => served,
            Err(e) => {
                // prost's own encoding always reads back; keep the scalar fields regardless.
                tracing::error!(%e, "a FeatureLog did not read back from its own encoding");
                Self {
                    head: FeatureLog {
                        candidate_ids: Vec::new(),
                        candidate_int_ids: Vec::new(),
                        features: Vec::new(),
                        outputs: Vec::new(),
                        ..log
                    },
                    raw: Vec::new(),
                    ids: Vec::new(),
                    int_ids: Vec::new(),
                    cells: Vec::new(),
                    layout: Arc::new(Layout {
                        columns: Vec::new(),
                    }),
                    offset: None,
                }
            }
        }
    }
}

impl ServedLog {
    /// Marks the log as the record at `offset` of the task's feature-log partition, which will
    /// still be there when a restore needs it: snapshots then name the offset and copy nothing.
    pub fn with_offset(mut self, offset: i64) -> Self {
        self.offset = Some(offset);
        self
    }

    /// See [`ServedLog::with_offset`].
    pub fn offset(&self) -> Option<i64> {
        self.offset
    }

    /// The record's bytes: a valid encoding of the log.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// Its columns, shared with every log of the same layout: two logs whose layouts are the
    /// same `Arc` have the same columns in the same order.
    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// Whether the record sets both `candidate_ids` and `candidate_int_ids` (which the
    /// schema forbids: it is refused by [`crate::rows::validate`]; the integer ids win here).
    pub fn has_both_kinds_of_ids(&self) -> bool {
        !self.ids.is_empty() && !self.int_ids.is_empty()
    }

    /// Candidate ids listed (0 when the model logs no ids).
    pub fn candidate_count(&self) -> usize {
        if !self.int_ids.is_empty() {
            return self.int_ids.len();
        }
        self.ids.len()
    }

    /// The id of candidate `i`.
    pub fn candidate_id(&self, i: usize) -> Option<CandidateId<'_>> {
        if !self.int_ids.is_empty() {
            return self.int_ids.get(i).map(|&n| CandidateId::Int(n));
        }
        let &(s, len) = self.ids.get(i)?;
        let (s, e) = (s as usize, s as usize + len as usize);
        // Checked to be UTF-8 when decoded; an empty id is never returned for a valid one.
        std::str::from_utf8(self.raw.get(s..e)?)
            .ok()
            .map(CandidateId::Text)
    }

    /// The integer candidate ids in row order, when the log lists its ids as integers.
    pub fn int_candidate_ids(&self) -> Option<&[i64]> {
        (!self.int_ids.is_empty()).then_some(self.int_ids.as_slice())
    }

    /// The candidate ids in row order.
    pub fn candidate_ids(&self) -> impl Iterator<Item = CandidateId<'_>> {
        (0..self.candidate_count()).map(|i| self.candidate_id(i).unwrap_or(CandidateId::Text("")))
    }

    /// Candidate id -> first row, for logs with many candidates.
    pub fn candidate_index(&self) -> CandidateIndex {
        if !self.int_ids.is_empty() {
            let mut map = HashMap::with_capacity_and_hasher(self.int_ids.len(), Default::default());
            for (i, &n) in self.int_ids.iter().enumerate() {
                map.entry(n).or_insert(i as u32);
            }
            return CandidateIndex::Int(map);
        }
        let mut map = HashMap::with_capacity_and_hasher(self.ids.len(), Default::default());
        for (i, id) in self.candidate_ids().enumerate() {
            if let CandidateId::Text(t) = id {
                map.entry(t.into()).or_insert(i as u32);
            }
        }
        CandidateIndex::Text(map)
    }

    /// The first row whose candidate id is `item`, by scanning.
    pub fn find_candidate(&self, item: &str) -> Option<usize> {
        if !self.int_ids.is_empty() {
            let n = canonical_int(item)?;
            return self.int_ids.iter().position(|&id| id == n);
        }
        let item = item.as_bytes();
        let last = item.last().copied();
        self.ids.iter().position(|&(s, len)| {
            let (s, e) = (s as usize, s as usize + len as usize);
            // Ids of one request tend to share a prefix and a length (`item-000123`): their
            // last byte tells most of them apart without a call to memcmp, which a linear
            // scan of every candidate per impression made a top symbol.
            len as usize == item.len()
                && (e == s || self.raw.get(e - 1).copied() == last)
                && self.raw.get(s..e) == Some(item)
        })
    }

    /// The decoded values of column `i` (`None` for a packed float column or one without).
    pub fn values(&self, i: usize) -> Option<&Values> {
        match self.cells.get(i)? {
            Cells::Decoded(v) => Some(v),
            _ => None,
        }
    }

    /// The number of values column `i` holds (all rows), for its datatype.
    pub fn values_len(&self, i: usize) -> usize {
        let Some(column) = self.layout.columns.get(i) else {
            return 0;
        };
        match self.cells.get(i) {
            Some(Cells::Packed { len, width, .. }) => {
                let packed_as = if *width == 4 {
                    DataType::Fp32
                } else {
                    DataType::Fp64
                };
                if column.data_type() == packed_as {
                    *len as usize / usize::from(*width)
                } else {
                    0
                }
            }
            Some(Cells::Decoded(v)) => decoded_len(column.data_type(), v),
            _ => 0,
        }
    }

    fn packed(&self, i: usize, width: u8, s: usize, e: usize) -> Option<&[u8]> {
        match self.cells.get(i)? {
            Cells::Packed {
                start,
                len,
                width: w,
            } if *w == width => {
                let w = usize::from(width);
                let run = self.raw.get(*start as usize..(*start + *len) as usize)?;
                run.get(s.checked_mul(w)?..e.checked_mul(w)?)
            }
            _ => None,
        }
    }

    /// Where values `s..e` of column `i` are, from its packed run of `W`-byte values or its
    /// decoded `field`, without reading them; `None` if it has no such values.
    fn float_cells<T, const W: usize>(
        &self,
        i: usize,
        s: usize,
        e: usize,
        field: fn(&Values) -> &[T],
    ) -> Option<FloatCells<'_, T, W>> {
        if let Some(bytes) = self.packed(i, W as u8, s, e) {
            return Some(FloatCells::Packed(bytes));
        }
        self.values(i)
            .and_then(|v| field(v).get(s..e))
            .map(FloatCells::Decoded)
    }

    /// Where FP32 values `s..e` of column `i` are; `None` if it has no such values.
    pub fn fp32_cells(&self, i: usize, s: usize, e: usize) -> Option<FloatCells<'_, f32, 4>> {
        self.float_cells(i, s, e, |v| &v.fp32_values)
    }

    /// Appends FP32 values `s..e` of column `i` to `out`; false if it has no such values.
    pub fn fp32(&self, i: usize, s: usize, e: usize, out: &mut Vec<f32>) -> bool {
        self.fp32_cells(i, s, e)
            .map(|c| c.append_to(out, f32::from_le_bytes))
            .is_some()
    }

    /// Appends FP64 values `s..e` of column `i` to `out`; false if it has no such values.
    pub fn fp64(&self, i: usize, s: usize, e: usize, out: &mut Vec<f64>) -> bool {
        self.float_cells(i, s, e, |v| &v.fp64_values)
            .map(|c| c.append_to(out, f64::from_le_bytes))
            .is_some()
    }
}

/// Where some values of a float column are: a slice of a packed run of `W`-byte little-endian
/// values in the record, or of its decoded values. Finding them and reading them are apart so
/// that a reader of many rows can find every row's cells first and then read them in one
/// tight loop, where the loads of cold records overlap (see `rows::columns::fp32_columns`).
#[derive(Debug, Clone, Copy)]
pub enum FloatCells<'a, T, const W: usize> {
    /// In the record's bytes.
    Packed(&'a [u8]),
    /// Decoded.
    Decoded(&'a [T]),
}

impl<T: Copy, const W: usize> FloatCells<'_, T, W> {
    /// Appends the values to `out`.
    pub fn append_to(self, out: &mut Vec<T>, from_le: fn([u8; W]) -> T) {
        match self {
            FloatCells::Packed(bytes) => {
                // Mostly one value per call (a scalar feature of one row): a plain loop, where
                // `extend` over a filtering iterator cost ~50 ns a value in the profile.
                out.reserve(bytes.len() / W);
                for chunk in bytes.chunks_exact(W) {
                    let mut le = [0u8; W];
                    le.copy_from_slice(chunk);
                    out.push(from_le(le));
                }
            }
            FloatCells::Decoded(values) => out.extend_from_slice(values),
        }
    }
}

/// Values held for a datatype in a decoded `Values`.
fn decoded_len(dt: DataType, v: &Values) -> usize {
    match dt {
        DataType::Bool => v.bool_values.len(),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => v.int32_values.len(),
        DataType::Int64 => v.int64_values.len(),
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => v.uint32_values.len(),
        DataType::Uint64 => v.uint64_values.len(),
        DataType::Fp16 | DataType::Bf16 => v.half_bits.len(),
        DataType::Fp32 => v.fp32_values.len(),
        DataType::Fp64 => v.fp64_values.len(),
        DataType::Bytes => v.bytes_values.len(),
        DataType::Unspecified => 0,
    }
}

#[cfg(test)]
mod tests;
