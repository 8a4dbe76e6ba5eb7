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

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use featurelog_schemas::featurelog::v1::{DataType, FeatureLog, Values};
use prost::Message;

/// A record that is not a valid FeatureLog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed FeatureLog: {0}")]
pub struct MalformedLog(String);

impl From<prost::DecodeError> for MalformedLog {
    fn from(e: prost::DecodeError) -> Self {
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

/// A column as read from a record, before interning: borrows its name from the record.
#[derive(Debug, PartialEq)]
struct ColumnRef<'a> {
    side: Side,
    name: &'a str,
    datatype: i32,
    row_shape: Vec<i64>,
    per_request: bool,
}

impl ColumnRef<'_> {
    fn hash_into(&self, h: &mut impl Hasher) {
        (
            self.side,
            self.name,
            self.datatype,
            &self.row_shape,
            self.per_request,
        )
            .hash(h);
    }

    fn is(&self, c: &Column) -> bool {
        self.side == c.side
            && self.datatype == c.datatype
            && self.per_request == c.per_request
            && self.name == c.name
            // Nearly always two empty shapes: decided without a call to memcmp.
            && (self.row_shape.is_empty() && c.row_shape.is_empty() || self.row_shape == c.row_shape)
    }
}

/// The columns of a log, in order (features, then outputs). Logs with the same columns share
/// one `Layout` through [`Layouts`], so that their metadata is held once, not per record, and
/// building a batch compares two pointers per row instead of every column's name (that
/// comparison was the largest symbol of the profile).
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    columns: Vec<Column>,
}

impl Layout {
    /// The columns, features first.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }
}

/// The distinct layouts of the logs a join state holds: a few per model and allow-list
/// version in practice. Layouts that no log refers to any more are dropped as it grows.
#[derive(Debug, Default)]
pub struct Layouts {
    by_hash: HashMap<u64, Vec<Arc<Layout>>>,
    len: usize,
    prune_at: usize,
    /// Candidates of the last log decoded: the next one of the same model most likely has as
    /// many, so its id list is allocated once at that size instead of grown by doubling
    /// (which also left up to half of it unused, counted against the memory bound).
    last_candidates: usize,
    /// The layout of the last log decoded.
    last: Option<Arc<Layout>>,
}

impl Layouts {
    fn intern(&mut self, columns: &[ColumnRef<'_>]) -> Arc<Layout> {
        // Consecutive logs of a partition are mostly of one model: try its layout first,
        // before hashing every column name.
        if let Some(last) = &self.last {
            if last.columns.len() == columns.len()
                && last.columns.iter().zip(columns).all(|(a, b)| b.is(a))
            {
                return last.clone();
            }
        }
        let layout = self.intern_hashed(columns);
        self.last = Some(layout.clone());
        layout
    }

    fn intern_hashed(&mut self, columns: &[ColumnRef<'_>]) -> Arc<Layout> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for c in columns {
            c.hash_into(&mut h);
        }
        let same = self.by_hash.entry(h.finish()).or_default();
        let found = same.iter().find(|l| {
            l.columns.len() == columns.len() && l.columns.iter().zip(columns).all(|(a, b)| b.is(a))
        });
        if let Some(layout) = found {
            return layout.clone();
        }
        let layout = Arc::new(Layout {
            columns: columns
                .iter()
                .map(|c| Column {
                    side: c.side,
                    name: c.name.to_owned(),
                    datatype: c.datatype,
                    row_shape: c.row_shape.clone(),
                    per_request: c.per_request,
                })
                .collect(),
        });
        same.push(layout.clone());
        self.len += 1;
        if self.len > self.prune_at {
            self.by_hash.retain(|_, same| {
                same.retain(|l| Arc::strong_count(l) > 1);
                !same.is_empty()
            });
            self.len = self.by_hash.values().map(Vec::len).sum();
            self.prune_at = 2 * self.len + 64;
        }
        layout
    }

    /// Distinct layouts held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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

/// Protobuf's `sint64` decoding.
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
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

/// What is wrong with the wire format, as a small value: the walk over every field of every
/// record returns it by value, and a `String` in that `Result` made each step copy a large
/// value through memory (perf showed store-forwarding stalls there). Turned into a
/// [`MalformedLog`] only when a record is refused.
#[derive(Debug, Clone, Copy)]
enum WireError {
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
fn varint(buf: &[u8], at: &mut usize) -> Result<u64, WireError> {
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
struct Field {
    number: u64,
    wire: u8,
    start: usize,
    payload: (usize, usize),
    value: u64,
}

/// Walks the fields of the message in `buf[from..to]`.
fn fields(buf: &[u8], from: usize, to: usize) -> Fields<'_> {
    Fields { buf, at: from, to }
}

/// The iterator of [`fields`]: a plain struct whose steps inline into the caller's loop (a
/// closure-based walk was a call per field that returned its result through memory).
struct Fields<'a> {
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

fn utf8(raw: &[u8], (s, e): (usize, usize)) -> Result<&str, MalformedLog> {
    std::str::from_utf8(&raw[s..e]).map_err(|_| MalformedLog("a string is not UTF-8".into()))
}

/// Checks that `raw[s..e]` is UTF-8 without making a `&str` of it: candidate ids are nearly
/// always ASCII, checked inline instead of with a call per id.
#[inline]
fn check_utf8(raw: &[u8], (s, e): (usize, usize)) -> Result<(), MalformedLog> {
    if raw[s..e].is_ascii() {
        return Ok(());
    }
    utf8(raw, (s, e)).map(|_| ())
}

/// Reads a Feature submessage: its metadata borrowed from `raw`, and where its values are.
fn feature<'a>(
    raw: &'a [u8],
    side: Side,
    (from, to): (usize, usize),
) -> Result<(ColumnRef<'a>, Cells), MalformedLog> {
    let mut column = ColumnRef {
        side,
        name: "",
        datatype: 0,
        row_shape: Vec::new(),
        per_request: false,
    };
    // Nearly always one occurrence of `values`; more are merged (protobuf's rule for an
    // embedded message), and only then is a Vec needed.
    let mut values: Option<(usize, usize)> = None;
    let mut more_values: Vec<(usize, usize)> = Vec::new();
    for field in fields(raw, from, to) {
        let field = field?;
        match (field.number, field.wire) {
            (1, 2) => column.name = utf8(raw, field.payload)?,
            // Enums and int64 arrive as varints; proto3 keeps the last of a repeated scalar.
            (2, 0) => column.datatype = field.value as i32,
            (3, 0) => column.row_shape.push(field.value as i64),
            (3, 2) => {
                let (mut at, e) = field.payload;
                while at < e {
                    column.row_shape.push(varint(&raw[..e], &mut at)? as i64);
                }
            }
            (4, 2) => match values {
                None => values = Some(field.payload),
                Some(_) => more_values.push(field.payload),
            },
            (5, 0) => column.per_request = field.value != 0,
            (1..=5, _) => {
                return Err(MalformedLog(format!(
                    "Feature field {}: wire type {}",
                    field.number, field.wire
                )));
            }
            _ => {} // unknown fields are skipped, as prost does
        }
    }
    let packed = match (values, more_values.is_empty()) {
        (Some((s, e)), true) => {
            let mut inner = fields(raw, s, e);
            match (inner.next(), inner.next()) {
                (Some(Ok(f)), None) if f.wire == 2 && (f.number == 6 || f.number == 7) => {
                    let width: usize = if f.number == 6 { 4 } else { 8 };
                    let (s, e) = f.payload;
                    if (e - s) % width != 0 {
                        return Err(MalformedLog(format!(
                            "column {:?}: packed values of {} bytes are not a multiple of {width}",
                            column.name,
                            e - s
                        )));
                    }
                    Some(Cells::Packed {
                        start: s as u32,
                        len: (e - s) as u32,
                        width: width as u8,
                    })
                }
                _ => None,
            }
        }
        _ => None,
    };
    let cells = match (packed, values) {
        (Some(cells), _) => cells,
        (None, None) => Cells::None,
        (None, Some(first)) => {
            // Occurrences of an embedded message merge, as protobuf specifies.
            let mut decoded = Values::default();
            for (s, e) in std::iter::once(first).chain(more_values) {
                decoded.merge(&raw[s..e])?;
            }
            Cells::Decoded(Box::new(decoded))
        }
    };
    Ok((column, cells))
}

impl ServedLog {
    /// Reads a record, keeping its bytes; its layout is shared through `layouts`.
    pub fn decode(raw: Vec<u8>, layouts: &mut Layouts) -> Result<Self, MalformedLog> {
        if u32::try_from(raw.len()).is_err() {
            return Err(MalformedLog(format!("{} bytes", raw.len())));
        }
        let mut head = Vec::with_capacity(128);
        // Sized on the first id, for the kind of ids the record has.
        let mut ids: Vec<(u32, u32)> = Vec::new();
        let mut int_ids: Vec<i64> = Vec::new();
        let mut columns = (Vec::new(), Vec::new());
        let mut cells = (Vec::new(), Vec::new());
        for field in fields(&raw, 0, raw.len()) {
            let field = field?;
            match (field.number, field.wire) {
                (8, 2) => {
                    if ids.is_empty() {
                        ids.reserve(layouts.last_candidates);
                    }
                    check_utf8(&raw, field.payload)?;
                    let (s, e) = field.payload;
                    ids.push((s as u32, (e - s) as u32));
                }
                (9, 2) => {
                    let (c, v) = feature(&raw, Side::Feature, field.payload)?;
                    columns.0.push(c);
                    cells.0.push(v);
                }
                (10, 2) => {
                    let (c, v) = feature(&raw, Side::Output, field.payload)?;
                    columns.1.push(c);
                    cells.1.push(v);
                }
                (12, 2) => {
                    let (mut at, e) = field.payload;
                    if int_ids.is_empty() {
                        int_ids.reserve(layouts.last_candidates);
                    }
                    while at < e {
                        int_ids.push(unzigzag(varint(&raw[..e], &mut at)?));
                    }
                }
                // Unpacked, as a writer may send a repeated scalar.
                (12, 0) => int_ids.push(unzigzag(field.value)),
                (8..=10 | 12, _) => {
                    return Err(MalformedLog(format!(
                        "FeatureLog field {}: wire type {}",
                        field.number, field.wire
                    )));
                }
                _ => head.extend_from_slice(&raw[field.start..field.payload.1]),
            }
        }
        let head = FeatureLog::decode(head.as_slice())?;
        layouts.last_candidates = ids.len() + int_ids.len();
        ids.shrink_to_fit();
        int_ids.shrink_to_fit();
        let (mut all, outputs) = columns;
        all.extend(outputs);
        let (mut all_cells, output_cells) = cells;
        all_cells.extend(output_cells);
        let layout = layouts.intern(&all);
        drop(all);
        Ok(Self {
            head,
            raw,
            ids,
            int_ids,
            cells: all_cells,
            layout,
            offset: None,
        })
    }

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

    /// Appends values `s..e` of column `i` to `out` from its packed run of `W`-byte values
    /// or from its decoded `field`; false if it has no such values.
    fn floats<T: Copy, const W: usize>(
        &self,
        (i, s, e): (usize, usize, usize),
        out: &mut Vec<T>,
        from_le: fn([u8; W]) -> T,
        field: fn(&Values) -> &[T],
    ) -> bool {
        if let Some(bytes) = self.packed(i, W as u8, s, e) {
            // Mostly one value per call (a scalar feature of one row): a plain loop, where
            // `extend` over a filtering iterator cost ~50 ns a value in the profile.
            out.reserve(bytes.len() / W);
            for chunk in bytes.chunks_exact(W) {
                let mut le = [0u8; W];
                le.copy_from_slice(chunk);
                out.push(from_le(le));
            }
            return true;
        }
        self.values(i)
            .and_then(|v| field(v).get(s..e))
            .is_some_and(|v| {
                out.extend_from_slice(v);
                true
            })
    }

    /// Appends FP32 values `s..e` of column `i` to `out`; false if it has no such values.
    pub fn fp32(&self, i: usize, s: usize, e: usize, out: &mut Vec<f32>) -> bool {
        self.floats((i, s, e), out, f32::from_le_bytes, |v| &v.fp32_values)
    }

    /// Appends FP64 values `s..e` of column `i` to `out`; false if it has no such values.
    pub fn fp64(&self, i: usize, s: usize, e: usize, out: &mut Vec<f64>) -> bool {
        self.floats((i, s, e), out, f64::from_le_bytes, |v| &v.fp64_values)
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
mod tests {
    use super::*;
    use featurelog_schemas::featurelog::v1::Feature;

    fn feature(name: &str, dt: DataType, values: Values) -> Feature {
        Feature::column(name, dt, vec![], values)
    }

    fn sample() -> FeatureLog {
        FeatureLog {
            request_id: "r1".into(),
            model_name: "m".into(),
            row_count: 3,
            candidate_ids: vec!["a".into(), "b".into(), "ccc".into()],
            features: vec![
                feature(
                    "score",
                    DataType::Fp32,
                    Values {
                        fp32_values: vec![1.5, -0.0, f32::from_bits(0x7fc0_0001)],
                        ..Default::default()
                    },
                ),
                Feature {
                    row_shape: vec![1],
                    ..feature(
                        "age",
                        DataType::Int64,
                        Values {
                            int64_values: vec![1, -2, 3],
                            ..Default::default()
                        },
                    )
                },
            ],
            outputs: vec![feature(
                "p",
                DataType::Fp64,
                Values {
                    fp64_values: vec![0.25, 0.5, 1e300],
                    ..Default::default()
                },
            )],
            ..Default::default()
        }
    }

    fn decode(raw: Vec<u8>) -> Result<ServedLog, MalformedLog> {
        ServedLog::decode(raw, &mut Layouts::default())
    }

    #[test]
    fn integer_ids_read_packed_or_not_and_match_only_canonical_text() {
        let ints = FeatureLog {
            candidate_ids: Vec::new(),
            candidate_int_ids: vec![42, -7, 0, i64::MIN, 42],
            row_count: 5,
            ..sample()
        };
        let packed = ints.encode_to_vec();
        // The same ids unpacked (field 12 as varints), as another writer may send them.
        let mut unpacked = FeatureLog {
            candidate_int_ids: Vec::new(),
            ..ints.clone()
        }
        .encode_to_vec();
        for n in &ints.candidate_int_ids {
            prost::encoding::sint64::encode(12, n, &mut unpacked);
        }
        for raw in [packed, unpacked] {
            let served = decode(raw).unwrap();
            assert_eq!(served.candidate_count(), 5);
            assert_eq!(served.candidate_id(1), Some(CandidateId::Int(-7)));
            let index = served.candidate_index();
            for (item, row) in [
                ("42", Some(0)),
                ("-7", Some(1)),
                ("0", Some(2)),
                ("-9223372036854775808", Some(3)),
                ("042", None),
                ("+42", None),
                ("-0", None),
                ("", None),
                ("-", None),
                ("4 2", None),
                ("99999999999999999999", None),
            ] {
                assert_eq!(served.find_candidate(item), row, "{item:?}");
                assert_eq!(index.get(item), row, "{item:?}");
            }
            let mut buf = String::new();
            let texts: Vec<String> = served
                .candidate_ids()
                .map(|c| c.text(&mut buf).to_owned())
                .collect();
            assert_eq!(texts, ["42", "-7", "0", "-9223372036854775808", "42"]);
        }
        let both = FeatureLog {
            candidate_ids: vec!["a".into()],
            ..ints
        };
        let both = decode(both.encode_to_vec()).unwrap();
        assert!(both.has_both_kinds_of_ids());
        assert!(crate::rows::validate(&both).is_err());
    }

    #[test]
    fn packed_floats_and_ids_stay_in_the_bytes_and_read_back_bit_exact() {
        let log = sample();
        let served = decode(log.encode_to_vec()).unwrap();
        assert_eq!(served.raw(), log.encode_to_vec().as_slice());
        assert_eq!(served.request_id, "r1");
        assert_eq!(
            served.candidate_ids().collect::<Vec<_>>(),
            ["a", "b", "ccc"].map(CandidateId::Text)
        );
        assert_eq!(served.find_candidate("ccc"), Some(2));
        assert_eq!(served.find_candidate("cc"), None);
        let columns = served.layout().columns();
        assert_eq!(columns.len(), 3);
        assert_eq!(
            (columns[1].name.as_str(), columns[1].side),
            ("age", Side::Feature)
        );
        assert_eq!(columns[1].row_shape, [1]);
        assert_eq!(
            (columns[2].name.as_str(), columns[2].side),
            ("p", Side::Output)
        );
        // The float columns kept no decoded copy; the INT64 one was decoded.
        assert!(served.values(0).is_none());
        assert_eq!(served.values(1).unwrap().int64_values, [1, -2, 3]);
        assert_eq!(served.values_len(0), 3);
        assert_eq!(served.values_len(2), 3);
        let mut out = Vec::new();
        assert!(served.fp32(0, 1, 3, &mut out));
        let bits: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
        assert_eq!(bits, vec![(-0.0f32).to_bits(), 0x7fc0_0001]);
        let mut out = Vec::new();
        assert!(served.fp64(2, 2, 3, &mut out));
        assert_eq!(out, vec![1e300]);
        assert!(!served.fp32(0, 2, 4, &mut Vec::new()));
        assert!(
            !served.fp64(0, 0, 1, &mut Vec::new()),
            "an FP32 run is not FP64"
        );
        // NaN != NaN: compare encodings.
        assert_eq!(
            FeatureLog::decode(served.raw()).unwrap().encode_to_vec(),
            log.encode_to_vec()
        );
        assert_eq!(ServedLog::from(log.clone()), served);
    }

    #[test]
    fn unusual_encodings_are_decoded_and_read_the_same() {
        // Unpacked floats (wire type 5, as proto2 writers send them), then a second packed run
        // of the same column, in a second `values` field: valid protobuf for three values.
        let mut values = Vec::new();
        for x in [1.0f32, 2.0] {
            values.push(6 << 3 | 5);
            values.extend_from_slice(&x.to_le_bytes());
        }
        let more = [&[6 << 3 | 2, 4][..], &3.0f32.to_le_bytes()].concat();
        let mut feature = vec![0x0a, 1, b'x', 0x10, DataType::Fp32 as u8];
        feature.extend_from_slice(&[4 << 3 | 2, values.len() as u8]);
        feature.extend_from_slice(&values);
        feature.extend_from_slice(&[4 << 3 | 2, more.len() as u8]);
        feature.extend_from_slice(&more);
        // Unpacked shape entries and an unknown field are accepted too.
        feature.extend_from_slice(&[3 << 3, 3, 15 << 3, 1]);
        let mut raw = vec![0x0a, 2, b'r', b'2', 0x38, 3];
        raw.extend_from_slice(&[9 << 3 | 2, feature.len() as u8]);
        raw.extend_from_slice(&feature);
        let served = decode(raw.clone()).unwrap();
        let mut out = Vec::new();
        assert!(served.fp32(0, 0, 3, &mut out));
        assert_eq!(out, vec![1.0, 2.0, 3.0]);
        assert_eq!(served.layout().columns()[0].row_shape, [3]);
        let eager = FeatureLog::decode(raw.as_slice()).unwrap();
        assert_eq!(eager.features[0].values.as_ref().unwrap().fp32_values, out);
        assert_eq!(eager.features[0].row_shape, [3]);
    }

    #[test]
    fn logs_with_the_same_columns_share_one_layout_and_unused_ones_are_dropped() {
        let mut layouts = Layouts::default();
        let a = ServedLog::decode(sample().encode_to_vec(), &mut layouts).unwrap();
        let other = FeatureLog {
            request_id: "other".into(),
            ..sample()
        };
        let b = ServedLog::decode(other.encode_to_vec(), &mut layouts).unwrap();
        assert!(Arc::ptr_eq(a.layout(), b.layout()));
        let mut renamed = sample();
        renamed.features[1].name = "age2".into();
        let c = ServedLog::decode(renamed.encode_to_vec(), &mut layouts).unwrap();
        assert!(!Arc::ptr_eq(a.layout(), c.layout()));
        assert_eq!(layouts.len(), 2);
        drop(c);
        for i in 0..100 {
            let mut log = sample();
            log.features[0].name = format!("f{i}");
            let _ = ServedLog::decode(log.encode_to_vec(), &mut layouts).unwrap();
        }
        assert!(layouts.len() < 100, "{} layouts held", layouts.len());
        let d = ServedLog::decode(sample().encode_to_vec(), &mut layouts).unwrap();
        assert!(Arc::ptr_eq(a.layout(), d.layout()));
    }

    /// Candidate ids, and per column its metadata, float bits and INT64 values.
    type Content = (Vec<String>, Vec<(Column, Vec<u32>, Vec<i64>)>);

    /// What a decoded log says, read through the lazy accessors, in prost's terms.
    fn as_prost(served: &ServedLog) -> Content {
        let ids = served.candidate_ids().map(|c| c.to_string()).collect();
        let columns = served
            .layout()
            .columns()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let n = served.values_len(i);
                let mut bits: Vec<u32> = Vec::new();
                if c.data_type() == DataType::Fp32 {
                    let mut out = Vec::new();
                    served.fp32(i, 0, n, &mut out);
                    bits.extend(out.iter().map(|x| x.to_bits()));
                } else if c.data_type() == DataType::Fp64 {
                    let mut out = Vec::new();
                    served.fp64(i, 0, n, &mut out);
                    bits.extend(out.iter().map(|x| x.to_bits() as u32));
                }
                let ints = served
                    .values(i)
                    .map(|v| v.int64_values.clone())
                    .unwrap_or_default();
                (c.clone(), bits, ints)
            })
            .collect();
        (ids, columns)
    }

    fn expected(log: &FeatureLog) -> Content {
        let columns = log
            .features
            .iter()
            .map(|f| (Side::Feature, f))
            .chain(log.outputs.iter().map(|f| (Side::Output, f)))
            .map(|(side, f)| {
                let column = Column {
                    side,
                    name: f.name.clone(),
                    datatype: f.datatype,
                    row_shape: f.row_shape.clone(),
                    per_request: f.per_request,
                };
                let v = f.values.clone().unwrap_or_default();
                let bits: Vec<u32> = match column.data_type() {
                    DataType::Fp32 => v.fp32_values.iter().map(|x| x.to_bits()).collect(),
                    DataType::Fp64 => v.fp64_values.iter().map(|x| x.to_bits() as u32).collect(),
                    _ => Vec::new(),
                };
                (column, bits, v.int64_values)
            })
            .collect();
        // Integer ids win when a record carries both (which `validate` then refuses).
        let ids = if log.candidate_int_ids.is_empty() {
            log.candidate_ids.clone()
        } else {
            log.candidate_int_ids.iter().map(i64::to_string).collect()
        };
        (ids, columns)
    }

    #[test]
    fn mutated_records_never_panic_and_read_exactly_as_prost_reads_them() {
        let text_ids = sample().encode_to_vec();
        let int_ids = FeatureLog {
            candidate_ids: Vec::new(),
            candidate_int_ids: vec![300, -2, 70_000],
            ..sample()
        }
        .encode_to_vec();
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let mut next = || rng.u64(..);
        let mut both_ok = 0;
        for i in 0..10_000 {
            let mut raw = if i % 2 == 0 { &text_ids } else { &int_ids }.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() % raw.len() as u64) as usize;
                raw[at] = next() as u8;
            }
            let lazy = decode(raw.clone());
            let eager = FeatureLog::decode(raw.as_slice());
            // Refused exactly when prost refuses it: nothing dead-lettered that is valid.
            assert_eq!(lazy.is_ok(), eager.is_ok(), "{raw:?}: {lazy:?}");
            let (Ok(lazy), Ok(eager)) = (lazy, eager) else {
                continue;
            };
            // Where both accept a record, they must read the same thing from it.
            assert_eq!(as_prost(&lazy), expected(&eager), "{raw:?}");
            both_ok += 1;
        }
        assert!(both_ok > 200, "only {both_ok} mutations decoded");
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let good = sample().encode_to_vec();
        for cut in 1..good.len() {
            // Every truncation either fails or decodes as prost decodes it: never a panic.
            let lazy = decode(good[..cut].to_vec());
            let eager = FeatureLog::decode(&good[..cut]);
            assert_eq!(lazy.is_ok(), eager.is_ok(), "cut at {cut}");
        }
        // A packed float run whose length is not a multiple of 4.
        let raw = vec![9 << 3 | 2, 5, 4 << 3 | 2, 3, 6 << 3 | 2, 1, 0];
        assert!(decode(raw.clone()).is_err());
        assert!(FeatureLog::decode(raw.as_slice()).is_err());
        // A candidate id that is not UTF-8.
        let raw = vec![8 << 3 | 2, 1, 0xff];
        assert!(decode(raw.clone()).is_err());
        assert!(FeatureLog::decode(raw.as_slice()).is_err());
        assert!(decode(vec![0xff; 12]).is_err());
    }
}
