//! Reading a record into a [`ServedLog`]: its scalar fields decoded, its candidate ids and packed
//! float values located in its bytes, its columns interned.

use featurelog_schemas::featurelog::v1::{FeatureLog, Values};
use featurelog_schemas::wire::{self, WireError, WireType, feature, feature_log, values};
use prost::Message;

use super::layout::ColumnRef;
use super::{Cells, Layouts, MalformedLog, ServedLog, Side};

/// Protobuf's `sint64` decoding.
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Checks that a string field is UTF-8 without making a `&str` of it: candidate ids are nearly
/// always ASCII, checked inline instead of with a call per id.
#[inline]
fn check_utf8(raw: &[u8], field: &wire::Field) -> Result<(), WireError> {
    if field.bytes(raw).is_ascii() {
        return Ok(());
    }
    field.str(raw).map(|_| ())
}

/// Reads a Feature submessage: its metadata borrowed from `raw`, and where its values are.
fn read_feature<'a>(
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
    for field in wire::fields_in(raw, from, to) {
        let field = field?;
        match (field.number, field.wire) {
            (feature::NAME, WireType::LengthDelimited) => column.name = field.str(raw)?,
            // Enums and int64 arrive as varints; proto3 keeps the last of a repeated scalar.
            (feature::DATATYPE, WireType::Varint) => column.datatype = field.value as i32,
            (feature::ROW_SHAPE, WireType::Varint) => column.row_shape.push(field.value as i64),
            (feature::ROW_SHAPE, WireType::LengthDelimited) => {
                for dim in wire::packed_varints(field.bytes(raw)) {
                    column.row_shape.push(dim? as i64);
                }
            }
            (feature::VALUES, WireType::LengthDelimited) => match values {
                None => values = Some(field.payload),
                Some(_) => more_values.push(field.payload),
            },
            (feature::PER_REQUEST, WireType::Varint) => column.per_request = field.value != 0,
            (feature::NAME..=feature::PER_REQUEST, _) => {
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
            let mut inner = wire::fields_in(raw, s, e);
            match (inner.next(), inner.next()) {
                (Some(Ok(f)), None)
                    if f.wire == WireType::LengthDelimited
                        && (f.number == values::FP32_VALUES || f.number == values::FP64_VALUES) =>
                {
                    let width: usize = if f.number == values::FP32_VALUES {
                        4
                    } else {
                        8
                    };
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
        let width = layouts.last_width();
        let mut columns = (Vec::with_capacity(width), Vec::new());
        let mut cells = (Vec::with_capacity(width), Vec::new());
        for field in wire::fields(&raw) {
            let field = field?;
            match (field.number, field.wire) {
                (feature_log::CANDIDATE_IDS, WireType::LengthDelimited) => {
                    if ids.is_empty() {
                        ids.reserve(layouts.last_candidates);
                    }
                    check_utf8(&raw, &field)?;
                    let (s, e) = field.payload;
                    ids.push((s as u32, (e - s) as u32));
                }
                (feature_log::FEATURES, WireType::LengthDelimited) => {
                    let (c, v) = read_feature(&raw, Side::Feature, field.payload)?;
                    columns.0.push(c);
                    cells.0.push(v);
                }
                (feature_log::OUTPUTS, WireType::LengthDelimited) => {
                    let (c, v) = read_feature(&raw, Side::Output, field.payload)?;
                    columns.1.push(c);
                    cells.1.push(v);
                }
                (feature_log::CANDIDATE_INT_IDS, WireType::LengthDelimited) => {
                    if int_ids.is_empty() {
                        int_ids.reserve(layouts.last_candidates);
                    }
                    for id in wire::packed_varints(field.bytes(&raw)) {
                        int_ids.push(unzigzag(id?));
                    }
                }
                // Unpacked, as a writer may send a repeated scalar.
                (feature_log::CANDIDATE_INT_IDS, WireType::Varint) => {
                    int_ids.push(unzigzag(field.value))
                }
                (
                    feature_log::CANDIDATE_IDS..=feature_log::OUTPUTS
                    | feature_log::CANDIDATE_INT_IDS,
                    _,
                ) => {
                    return Err(MalformedLog(format!(
                        "FeatureLog field {}: wire type {}",
                        field.number, field.wire
                    )));
                }
                _ => head.extend_from_slice(field.encoded(&raw)),
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
}
