//! Reading a record into a [`ServedLog`]: its scalar fields decoded, its candidate ids and packed
//! float values located in its bytes, its columns interned.

use featurelog_schemas::featurelog::v1::{FeatureLog, Values};
use prost::Message;

use super::layout::ColumnRef;
use super::wire::{check_utf8, fields, unzigzag, utf8, varint};
use super::{Cells, Layouts, MalformedLog, ServedLog, Side};

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
}
