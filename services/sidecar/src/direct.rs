//! The fast path from a scanned request to an encoded `FeatureLog`, for the shape most
//! recommenders send: raw tensors (Triton's clients always send raw), fixed-width numeric
//! features, integer candidate ids, no outputs, top-K or parameters to log.
//!
//! The general path ([`crate::lazy`] then [`crate::extract`] then prost) decodes each logged
//! tensor into a `Vec`, builds the record and encodes it again; for 100 candidates x 10
//! features that round trip and its allocations were most of the publisher's CPU (perf). Here a
//! little-endian FP32/FP64 tensor's raw bytes are already the wire form of the record's packed
//! `fp32_values`/`fp64_values`, so they are copied as they are, and integers are re-encoded
//! straight into the output buffer.
//!
//! The fast path only ever takes a call it can encode exactly as the general path would (the
//! tests check the two records decode equal); anything else, including every error case,
//! returns `None` and goes the general way, which owns the error reasons.

use bytes::{Buf, BufMut};
use featurelog_schemas::featurelog::v1::DataType;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, encode_varint};

use std::sync::Arc;

use crate::allowlist::{AllowList, ModelRule};
use crate::extract::CallContext;
use crate::lazy::Scanned;

/// An input tensor's header, borrowed from the request.
struct Head<'a> {
    name: &'a [u8],
    datatype: &'a [u8],
    shape: Vec<i64>,
}

/// Reads name, datatype and shape of an encoded `InferInputTensor`; `None` if it carries typed
/// contents or anything unexpected.
fn head(mut buf: &[u8]) -> Option<Head<'_>> {
    let whole = buf;
    let mut parameters = false;
    let mut head = Head {
        name: &[],
        datatype: &[],
        shape: Vec::new(),
    };
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        match (tag, wire_type) {
            (1, WireType::LengthDelimited) => head.name = slice(&mut buf)?,
            (2, WireType::LengthDelimited) => head.datatype = slice(&mut buf)?,
            // A repeated field may come in several runs, packed or not, in any mix: they
            // concatenate, as in prost's decode (and the model server's).
            (3, WireType::LengthDelimited) => {
                let mut packed = slice(&mut buf)?;
                while packed.has_remaining() {
                    head.shape.push(decode_varint(&mut packed).ok()? as i64);
                }
            }
            (3, WireType::Varint) => head.shape.push(decode_varint(&mut buf).ok()? as i64),
            // Parameters of a tensor are not logged.
            (4, _) => {
                prost::encoding::skip_field(wire_type, tag, &mut buf, DecodeContext::default())
                    .ok()?;
                parameters = true;
            }
            _ => return None,
        }
    }
    // But the general path decodes them, and refuses a tensor whose parameters prost cannot
    // read: so must this, which is to log only what the general path logs. Read when planning
    // only (the plan is kept for these very header bytes), for the tensors a rule logs.
    if parameters {
        use featurelog_schemas::inference::model_infer_request::InferInputTensor;
        <InferInputTensor as prost::Message>::decode(whole).ok()?;
    }
    Some(head)
}

/// The `name` of an encoded tensor (the last occurrence, as a full decode keeps).
fn name(mut buf: &[u8]) -> Option<&[u8]> {
    let mut name: &[u8] = &[];
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        if (tag, wire_type) == (1, WireType::LengthDelimited) {
            name = slice(&mut buf)?;
        } else {
            prost::encoding::skip_field(wire_type, tag, &mut buf, DecodeContext::default()).ok()?;
        }
    }
    Some(name)
}

fn slice<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(decode_varint(buf).ok()?).ok()?;
    if len > buf.len() {
        return None;
    }
    let (field, rest) = buf.split_at(len);
    *buf = rest;
    Some(field)
}

/// How a datatype's raw little-endian elements become the record's values.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Copied as they are into a packed fixed-width field.
    Fixed { field: u32, size: usize },
    /// Zigzag varints (`sint32`/`sint64`) from `size`-byte signed integers.
    Signed { field: u32, size: usize },
}

fn kind(datatype: &[u8]) -> Option<(DataType, Kind)> {
    Some(match datatype {
        b"FP32" => (DataType::Fp32, Kind::Fixed { field: 6, size: 4 }),
        b"FP64" => (DataType::Fp64, Kind::Fixed { field: 7, size: 8 }),
        b"INT32" => (DataType::Int32, Kind::Signed { field: 2, size: 4 }),
        b"INT64" => (DataType::Int64, Kind::Signed { field: 3, size: 8 }),
        _ => return None,
    })
}

fn signed(raw: &[u8], size: usize) -> impl Iterator<Item = i64> + '_ {
    raw.chunks_exact(size).map(move |c| {
        if size == 4 {
            i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        } else {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            i64::from_le_bytes(b)
        }
    })
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn varint_len(v: u64) -> usize {
    prost::encoding::encoded_len_varint(v)
}

fn key(buf: &mut Vec<u8>, field: u32, wire_type: WireType) {
    prost::encoding::encode_key(field, wire_type, buf);
}

fn bytes_field(buf: &mut Vec<u8>, field: u32, value: &[u8]) {
    if !value.is_empty() {
        key(buf, field, WireType::LengthDelimited);
        encode_varint(value.len() as u64, buf);
        buf.put_slice(value);
    }
}

fn bytes_field_len(field: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        prost::encoding::key_len(field) + varint_len(len as u64) + len
    }
}

/// One logged feature, ready to encode, with its lengths worked out once (protobuf prefixes
/// each message with its length, and the record's capacity is their sum).
struct Column<'a> {
    name: &'a [u8],
    datatype: DataType,
    kind: Kind,
    row_shape: &'a [i64],
    per_request: bool,
    raw: &'a [u8],
    /// Bytes of the packed values, of the `Values` message, of the packed row shape, and of
    /// the whole `Feature` message.
    packed: usize,
    values: usize,
    shape: usize,
    len: usize,
}

impl<'a> Column<'a> {
    fn new(
        name: &'a [u8],
        (datatype, kind): (DataType, Kind),
        row_shape: &'a [i64],
        per_request: bool,
        raw: &'a [u8],
    ) -> Self {
        let (field, packed) = match kind {
            Kind::Fixed { field, .. } => (field, raw.len()),
            Kind::Signed { field, size } => (
                field,
                signed(raw, size).map(|v| varint_len(zigzag(v))).sum(),
            ),
        };
        let values = bytes_field_len(field, packed);
        let shape = row_shape.iter().map(|&d| varint_len(d as u64)).sum();
        let len = bytes_field_len(1, name.len())
            + 1
            + varint_len(datatype as u64)
            + bytes_field_len(3, shape)
            // `values` is always present, even when empty.
            + 1
            + varint_len(values as u64)
            + values
            + if per_request { 2 } else { 0 };
        Self {
            name,
            datatype,
            kind,
            row_shape,
            per_request,
            raw,
            packed,
            values,
            shape,
            len,
        }
    }

    fn encode(&self, buf: &mut Vec<u8>) {
        bytes_field(buf, 1, self.name);
        key(buf, 2, WireType::Varint);
        encode_varint(self.datatype as u64, buf);
        if self.shape > 0 {
            key(buf, 3, WireType::LengthDelimited);
            encode_varint(self.shape as u64, buf);
            for &d in self.row_shape {
                encode_varint(d as u64, buf);
            }
        }
        let packed = self.packed;
        key(buf, 4, WireType::LengthDelimited);
        encode_varint(self.values as u64, buf);
        if packed > 0 {
            match self.kind {
                Kind::Fixed { field, .. } => {
                    key(buf, field, WireType::LengthDelimited);
                    encode_varint(packed as u64, buf);
                    buf.put_slice(self.raw);
                }
                Kind::Signed { field, size } => {
                    key(buf, field, WireType::LengthDelimited);
                    encode_varint(packed as u64, buf);
                    for v in signed(self.raw, size) {
                        encode_varint(zigzag(v), buf);
                    }
                }
            }
        }
        if self.per_request {
            key(buf, 5, WireType::Varint);
            buf.put_u8(1);
        }
    }
}

/// Whether `rule` only asks for what this path can encode.
pub fn eligible(rule: &ModelRule) -> bool {
    rule.outputs.is_empty()
        && rule.top_k.is_none()
        && rule.parameters.is_empty()
        && rule.headers.is_empty()
        && rule.candidate_ids_parameter.is_none()
}

/// What a rule reads from one layout of input headers: which inputs, as what. Nothing in it
/// depends on the tensors' contents, so it holds for every request whose input headers are the
/// same bytes.
#[derive(Debug)]
pub struct Plan {
    /// The candidate-id input and its element size, if the rule names one.
    ids: Option<(usize, Vec<i64>, usize)>,
    columns: Vec<Planned>,
}

#[derive(Debug)]
struct Planned {
    input: usize,
    /// Index into the rule's features: the input's name is that feature's.
    feature: usize,
    datatype: DataType,
    kind: Kind,
    shape: Vec<i64>,
}

impl Plan {
    /// The features of `rule` this layout of inputs lacks.
    pub fn missing<'r>(&self, rule: &'r ModelRule) -> impl Iterator<Item = &'r str> {
        rule.features
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.columns.iter().any(|c| c.feature == *i))
            .map(|(_, name)| name.as_str())
    }
}

/// The plan for `rule` on this request's inputs, or `None` when the call must take the
/// general path.
pub fn plan(rule: &ModelRule, scanned: &Scanned) -> Option<Plan> {
    if !eligible(rule) || scanned.input_count() == 0 {
        return None;
    }
    // Names first, without allocating; full headers only for the inputs the rule names. The
    // first input with a name wins, as in the general path.
    let names: Vec<&[u8]> = (0..scanned.input_count())
        .map(|i| name(scanned.input(i)))
        .collect::<Option<_>>()?;
    let find = |wanted: &str| -> Option<Option<(usize, Head<'_>)>> {
        match names.iter().position(|n| *n == wanted.as_bytes()) {
            Some(i) => Some(Some((i, head(scanned.input(i))?))),
            None => Some(None),
        }
    };
    let ids = match &rule.candidate_ids_input {
        Some(id_input) => {
            let (i, h) = find(id_input)??;
            let (_, Kind::Signed { size, .. }) = kind(h.datatype)? else {
                return None;
            };
            Some((i, h.shape, size))
        }
        None => None,
    };
    let mut columns = Vec::with_capacity(rule.features.len());
    for (feature, name) in rule.features.iter().enumerate() {
        if let Some((input, h)) = find(name)? {
            let (datatype, kind) = kind(h.datatype)?;
            columns.push(Planned {
                input,
                feature,
                datatype,
                kind,
                shape: h.shape,
            });
        }
    }
    Some(Plan { ids, columns })
}

/// The encoded record and its row count, or `None` when the call must take the general path.
pub fn encode(rule: &ModelRule, scanned: &Scanned, ctx: CallContext<'_>) -> Option<(Vec<u8>, u32)> {
    let plan = plan(rule, scanned)?;
    let mut out = Vec::new();
    let rows = encode_planned(&plan, rule, scanned, ctx, &mut out)?;
    Some((out, rows))
}

/// Encodes the record into `buf` (cleared first) following `plan`, which must have been made
/// for `rule` on input headers equal to `scanned`'s; returns its row count, or `None` when the
/// call must take the general path.
pub fn encode_planned(
    plan: &Plan,
    rule: &ModelRule,
    scanned: &Scanned,
    ctx: CallContext<'_>,
    buf: &mut Vec<u8>,
) -> Option<u32> {
    if scanned.raw_count() != scanned.input_count() {
        return None;
    }
    let mut ids: &[u8] = &[];
    let mut id_size = 8;
    if let Some((input, shape, size)) = &plan.ids {
        ids = scanned.raw(*input);
        id_size = *size;
        if ids.len() != count(shape)?.checked_mul(*size)? {
            return None;
        }
    }
    let mut raws = Vec::with_capacity(plan.columns.len());
    for p in &plan.columns {
        let raw = scanned.raw(p.input);
        let size = match p.kind {
            Kind::Fixed { size, .. } | Kind::Signed { size, .. } => size,
        };
        if raw.len() != count(&p.shape)?.checked_mul(size)? {
            return None;
        }
        raws.push(raw);
    }
    let rows = if plan.ids.is_some() {
        ids.len() / id_size
    } else {
        plan.columns
            .iter()
            .filter_map(|p| p.shape.first())
            .filter_map(|&n| usize::try_from(n).ok())
            .max()
            .unwrap_or(1)
    };
    let mut columns = Vec::with_capacity(plan.columns.len());
    for (p, raw) in plan.columns.iter().zip(raws) {
        let per_request = match p.shape.first() {
            None => true,
            Some(&n) if usize::try_from(n).is_ok_and(|n| n == rows) => false,
            Some(1) => true,
            Some(_) => return None,
        };
        columns.push(Column::new(
            rule.features.get(p.feature)?.as_bytes(),
            (p.datatype, p.kind),
            p.shape.get(1..).unwrap_or(&[]),
            per_request,
            raw,
        ));
    }
    let row_count = u32::try_from(rows).unwrap_or(u32::MAX);

    let served_at = ctx
        .served_at
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d| (d.as_secs() as i64, d.subsec_nanos() as i32));
    let timestamp_len = served_at.map(|(s, n)| {
        (if s != 0 { 1 + varint_len(s as u64) } else { 0 })
            + if n != 0 {
                1 + varint_len(n as i64 as u64)
            } else {
                0
            }
    });
    // Signed ids are written as numbers, packed (`candidate_int_ids`).
    let ids_len: usize = signed(ids, id_size).map(|id| varint_len(zigzag(id))).sum();
    let capacity = 64
        + ctx.request_id.len()
        + scanned.model_name.len()
        + scanned.model_version.len()
        + ctx.instance.len()
        + ctx.allow_list_version.len()
        + bytes_field_len(12, ids_len)
        + columns
            .iter()
            .map(|c| 1 + varint_len(c.len as u64) + c.len)
            .sum::<usize>();

    buf.clear();
    buf.reserve(capacity);
    bytes_field(buf, 1, ctx.request_id.as_bytes());
    bytes_field(buf, 2, scanned.model_name.as_bytes());
    bytes_field(buf, 3, scanned.model_version.as_bytes());
    if let (Some((seconds, nanos)), Some(len)) = (served_at, timestamp_len) {
        key(buf, 4, WireType::LengthDelimited);
        encode_varint(len as u64, buf);
        if seconds != 0 {
            key(buf, 1, WireType::Varint);
            encode_varint(seconds as u64, buf);
        }
        if nanos != 0 {
            key(buf, 2, WireType::Varint);
            encode_varint(nanos as i64 as u64, buf);
        }
    }
    bytes_field(buf, 5, ctx.instance.as_bytes());
    bytes_field(buf, 6, ctx.allow_list_version.as_bytes());
    if row_count != 0 {
        key(buf, 7, WireType::Varint);
        encode_varint(u64::from(row_count), buf);
    }
    for c in &columns {
        key(buf, 9, WireType::LengthDelimited);
        encode_varint(c.len as u64, buf);
        c.encode(buf);
    }
    // Field 12 after 9 (10 and 11 are never set here), in field order as prost writes it.
    if ids_len > 0 {
        key(buf, 12, WireType::LengthDelimited);
        encode_varint(ids_len as u64, buf);
        for id in signed(ids, id_size) {
            encode_varint(zigzag(id), buf);
        }
    }
    Some(row_count)
}

/// Plans by the bytes of the input headers they were made for, so a request laid out like a
/// recent one skips reading its 51 headers (perf: names and headers were a fifth of the
/// publisher's time). A few entries: a sidecar usually serves one model, sometimes a handful.
#[derive(Default)]
pub struct PlanCache {
    entries: Vec<CachedPlan>,
    next: usize,
    /// The plan of the last request that had no key to cache it by.
    uncached: Option<Plan>,
}

struct CachedPlan {
    /// Held so that the rule's address below stays its own while the entry lives.
    list: Arc<AllowList>,
    rule: usize,
    inputs: Vec<u8>,
    plan: Option<Plan>,
}

const PLAN_CACHE_ENTRIES: usize = 4;

/// The longest run of input fields kept as a key. Headers alone are a few dozen bytes per
/// input; a longer run carries something else (typed contents, tensor parameters), would be
/// copied on every miss and kept per publisher thread, and is planned afresh instead.
const PLAN_KEY_MAX_BYTES: usize = 64 * 1024;

/// Whether any input carries typed `contents` (`InferInputTensor` field 5), or cannot be read:
/// such a run holds the tensors' values, which differ from call to call, so it is no key.
fn carries_contents(scanned: &Scanned) -> bool {
    (0..scanned.input_count()).any(|i| {
        let mut buf = scanned.input(i);
        while buf.has_remaining() {
            let Ok((tag, wire_type)) = decode_key(&mut buf) else {
                return true;
            };
            if tag == 5
                || prost::encoding::skip_field(wire_type, tag, &mut buf, DecodeContext::default())
                    .is_err()
            {
                return true;
            }
        }
        false
    })
}

impl PlanCache {
    /// The plan for `rule` (a rule of `list`) on `scanned`'s inputs, made or reused; `None`
    /// when the call must take the general path. Only calls the fast path could take are
    /// looked up, and only short keys of headers are kept.
    pub fn plan(
        &mut self,
        list: &Arc<AllowList>,
        rule: &ModelRule,
        scanned: &Scanned,
    ) -> Option<&Plan> {
        // `encode_planned` refuses anything without raw contents for every input: no plan is
        // needed, and a typed-contents request's inputs are not even compared.
        if !eligible(rule) || scanned.raw_count() != scanned.input_count() {
            return None;
        }
        let rule_addr = std::ptr::from_ref(rule) as usize;
        let Some(inputs) = scanned
            .inputs_run()
            .filter(|inputs| inputs.len() <= PLAN_KEY_MAX_BYTES)
        else {
            // Interleaved fields or a long run: no key to cache by; plan every time.
            self.uncached = plan(rule, scanned);
            return self.uncached.as_ref();
        };
        let hit = self
            .entries
            .iter()
            .position(|e| e.rule == rule_addr && Arc::ptr_eq(&e.list, list) && e.inputs == inputs);
        match hit {
            Some(i) => self.entries[i].plan.as_ref(),
            // Checked on a miss only: a hit's key was checked when it was kept.
            None if carries_contents(scanned) => {
                self.uncached = plan(rule, scanned);
                self.uncached.as_ref()
            }
            None => {
                let plan = plan(rule, scanned);
                self.insert(list, rule_addr, inputs.to_vec(), plan)
            }
        }
    }

    fn insert(
        &mut self,
        list: &Arc<AllowList>,
        rule: usize,
        inputs: Vec<u8>,
        plan: Option<Plan>,
    ) -> Option<&Plan> {
        let entry = CachedPlan {
            list: list.clone(),
            rule,
            inputs,
            plan,
        };
        let i = if self.entries.len() < PLAN_CACHE_ENTRIES {
            self.entries.push(entry);
            self.entries.len() - 1
        } else {
            let i = self.next;
            self.entries[i] = entry;
            self.next = (i + 1) % PLAN_CACHE_ENTRIES;
            i
        };
        self.entries[i].plan.as_ref()
    }
}

fn count(shape: &[i64]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use bytes::Bytes;
    use featurelog_schemas::featurelog::v1::FeatureLog;
    use featurelog_schemas::inference::ModelInferRequest;
    use featurelog_schemas::inference::model_infer_request::InferInputTensor;
    use featurelog_schemas::tensor::TensorValues;
    use prost::Message;

    use super::*;
    use crate::allowlist::TopK;

    fn rule(features: &[&str], ids: Option<&str>) -> ModelRule {
        ModelRule {
            name: "ranker".into(),
            version: None,
            features: features.iter().map(|s| s.to_string()).collect(),
            outputs: vec![],
            candidate_ids_input: ids.map(str::to_owned),
            candidate_ids_parameter: None,
            parameters: vec![],
            headers: vec![],
            sample_rate: 1.0,
            top_k: None,
        }
    }

    fn request(tensors: &[(&str, &str, &[i64], TensorValues)]) -> ModelInferRequest {
        let mut r = ModelInferRequest {
            model_name: "ranker".into(),
            model_version: "3".into(),
            id: "req-1".into(),
            ..Default::default()
        };
        for (name, datatype, shape, values) in tensors {
            r.inputs.push(InferInputTensor {
                name: name.to_string(),
                datatype: datatype.to_string(),
                shape: shape.to_vec(),
                ..Default::default()
            });
            r.raw_input_contents.push(values.to_raw());
        }
        r
    }

    fn ctx() -> CallContext<'static> {
        CallContext {
            request_id: "req-1",
            served_at: SystemTime::UNIX_EPOCH + Duration::new(1_790_000_000, 123_456_789),
            instance: "sidecar-a",
            allow_list_version: "v7",
            headers: &[],
        }
    }

    /// The general path's record for the same call.
    fn general(rule: &ModelRule, request: &ModelInferRequest) -> FeatureLog {
        general_encoded(rule, &request.encode_to_vec())
    }

    fn general_encoded(rule: &ModelRule, request: &[u8]) -> FeatureLog {
        let scanned = crate::lazy::scan(Bytes::copy_from_slice(request)).unwrap();
        let decoded = scanned.decode_for_rule(rule).unwrap();
        crate::extract::extract(rule, &decoded, None, ctx()).unwrap()
    }

    fn fast(rule: &ModelRule, request: &ModelInferRequest) -> Option<FeatureLog> {
        fast_encoded(rule, &request.encode_to_vec())
    }

    fn fast_encoded(rule: &ModelRule, request: &[u8]) -> Option<FeatureLog> {
        let scanned = crate::lazy::scan(Bytes::copy_from_slice(request)).unwrap();
        let (bytes, rows) = encode(rule, &scanned, ctx())?;
        let record = FeatureLog::decode(&bytes[..]).unwrap();
        assert_eq!(record.row_count, rows);
        Some(record)
    }

    /// One run of a shape field as an encoder may write it.
    enum Run<'a> {
        Packed(&'a [i64]),
        Element(i64),
    }

    /// `request` encoded by hand with the shapes of the inputs named in `split` written as the
    /// given runs instead of prost's one packed field. Protobuf concatenates repeated fields,
    /// so a model server reads the runs' elements in order as the shape.
    fn with_split_shapes(request: &ModelInferRequest, split: &[(&str, &[Run<'_>])]) -> Vec<u8> {
        let mut out = Vec::new();
        for input in &request.inputs {
            let Some((_, runs)) = split.iter().find(|(n, _)| *n == input.name) else {
                prost::encoding::message::encode(5, input, &mut out);
                continue;
            };
            let mut header = input.clone();
            header.shape.clear();
            // Two encodings of one message, concatenated, are their merge.
            let mut tensor = header.encode_to_vec();
            for run in *runs {
                match run {
                    // By hand: prost writes nothing for an empty run, an encoder may.
                    Run::Packed(dims) => {
                        prost::encoding::encode_key(3, WireType::LengthDelimited, &mut tensor);
                        let len: usize = dims.iter().map(|&d| varint_len(d as u64)).sum();
                        encode_varint(len as u64, &mut tensor);
                        dims.iter()
                            .for_each(|&d| encode_varint(d as u64, &mut tensor));
                    }
                    Run::Element(d) => prost::encoding::int64::encode(3, d, &mut tensor),
                }
            }
            prost::encoding::bytes::encode(5, &tensor, &mut out);
        }
        let mut rest = request.clone();
        rest.inputs.clear();
        rest.encode(&mut out).unwrap();
        out
    }

    fn floats(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| match i % 5 {
                0 => f32::NAN,
                1 => -0.0,
                2 => f32::from_bits(1), // subnormal
                _ => seed * i as f32 - 1.5,
            })
            .collect()
    }

    #[test]
    fn records_equal_the_general_paths_for_every_supported_shape() {
        let ids = TensorValues::Int64(vec![9_000_000_001, -4, 0, 17]);
        let req = request(&[
            ("other", "FP32", &[4], TensorValues::Fp32(floats(4, 9.0))),
            ("item_id", "INT64", &[4], ids),
            ("price", "FP32", &[4], TensorValues::Fp32(floats(4, 0.25))),
            (
                "age",
                "INT32",
                &[4, 1],
                TensorValues::Int32(vec![i32::MIN, -1, 0, 70]),
            ),
            ("emb", "FP32", &[4, 3], TensorValues::Fp32(floats(12, 2.0))),
            (
                "ctx",
                "FP64",
                &[1, 2],
                TensorValues::Fp64(vec![1e300, -0.5]),
            ),
            ("clock", "INT64", &[], TensorValues::Int64(vec![i64::MAX])),
            ("empty", "FP32", &[4, 0], TensorValues::Fp32(vec![])),
        ]);
        let with_ids = rule(
            &["price", "missing", "age", "emb", "ctx", "clock", "empty"],
            Some("item_id"),
        );
        let without_ids = rule(&["emb", "ctx", "price"], None);
        for r in [&with_ids, &without_ids] {
            let want = general(r, &req);
            let got = fast(r, &req).expect("eligible");
            // NaN != NaN: compare the encodings of two independently built records.
            assert_eq!(got.encode_to_vec(), want.encode_to_vec());
        }

        // Shapes split across several fields: packed runs, single elements, or a mix (and an
        // empty run). "ctx" is [1, 2] read whole; its last run alone, [2], would also fit its
        // data and make it a per-row feature of two rows.
        let split = with_split_shapes(
            &req,
            &[
                ("ctx", &[Run::Packed(&[1]), Run::Packed(&[2])]),
                ("emb", &[Run::Element(4), Run::Packed(&[3])]),
                ("age", &[Run::Packed(&[4]), Run::Element(1)]),
                ("item_id", &[Run::Packed(&[]), Run::Packed(&[4])]),
                ("price", &[Run::Element(4)]),
            ],
        );
        let no_ctx_rows = rule(&["ctx"], None);
        for r in [&with_ids, &without_ids, &no_ctx_rows] {
            let want = general_encoded(r, &split);
            // The general path reads what the model server reads: the whole shape.
            let ctx = want.features.iter().find(|f| f.name == "ctx").unwrap();
            assert_eq!(ctx.row_shape, [2]);
            assert_eq!(want.encode_to_vec(), general(r, &req).encode_to_vec());
            let got = fast_encoded(r, &split).expect("eligible");
            assert_eq!(got.encode_to_vec(), want.encode_to_vec());
        }
    }

    fn cached(
        cache: &mut PlanCache,
        list: &Arc<AllowList>,
        request: &ModelInferRequest,
    ) -> Option<FeatureLog> {
        let scanned = crate::lazy::scan(Bytes::from(request.encode_to_vec())).unwrap();
        let rule = &list.models[0];
        let plan = cache.plan(list, rule, &scanned)?;
        let mut out = Vec::new();
        encode_planned(plan, rule, &scanned, ctx(), &mut out)?;
        Some(FeatureLog::decode(&out[..]).unwrap())
    }

    #[test]
    fn plans_are_reused_only_for_the_same_input_headers() {
        let list = Arc::new(AllowList {
            version: "v7".into(),
            models: vec![rule(&["price", "emb"], Some("item_id"))],
        });
        let mut cache = PlanCache::default();
        let make = |seed: f32, rows: usize| {
            request(&[
                (
                    "item_id",
                    "INT64",
                    &[rows as i64],
                    TensorValues::Int64((0..rows as i64).map(|i| i * 7 - 3).collect()),
                ),
                (
                    "price",
                    "FP32",
                    &[rows as i64],
                    TensorValues::Fp32(floats(rows, seed)),
                ),
                (
                    "emb",
                    "FP32",
                    &[rows as i64, 2],
                    TensorValues::Fp32(floats(rows * 2, seed)),
                ),
            ])
        };
        // Same layout, other values (a hit); another row count (a miss); then back.
        for req in [make(1.0, 4), make(2.0, 4), make(3.0, 5), make(4.0, 4)] {
            let want = general(&list.models[0], &req);
            let got = cached(&mut cache, &list, &req).expect("eligible");
            assert_eq!(got.encode_to_vec(), want.encode_to_vec());
        }
        assert_eq!(cache.entries.len(), 2);
        // Raw contents that no longer match the cached shape go the general way.
        let mut bad = make(5.0, 4);
        bad.raw_input_contents[1] = Bytes::from_static(&[0; 12]);
        assert!(cached(&mut cache, &list, &bad).is_none());
        // A new allow list does not reuse the old one's plans.
        let other = Arc::new(AllowList {
            version: "v8".into(),
            models: vec![rule(&["emb"], Some("item_id"))],
        });
        let got = cached(&mut cache, &other, &make(6.0, 4)).unwrap();
        assert_eq!(got.features.len(), 1);
    }

    #[test]
    fn plans_are_not_kept_for_typed_contents_long_keys_or_ineligible_rules() {
        let list = Arc::new(AllowList {
            version: "v7".into(),
            models: vec![rule(&["price", "emb"], Some("item_id"))],
        });
        let tensors = |rows: usize| {
            vec![
                (
                    "item_id",
                    "INT64",
                    vec![rows as i64],
                    TensorValues::Int64((0..rows as i64).collect()),
                ),
                (
                    "price",
                    "FP32",
                    vec![rows as i64],
                    TensorValues::Fp32(floats(rows, 3.0)),
                ),
                (
                    "emb",
                    "FP32",
                    vec![rows as i64, 2],
                    TensorValues::Fp32(floats(rows * 2, 5.0)),
                ),
            ]
        };
        let raw = |rows: usize| {
            let t = tensors(rows);
            let t: Vec<_> = t
                .iter()
                .map(|(n, d, s, v)| (*n, *d, &s[..], v.clone()))
                .collect();
            request(&t)
        };
        // Typed contents: every tensor's values sit in the input fields.
        let typed = |rows: usize| {
            let mut r = raw(rows);
            r.raw_input_contents.clear();
            for (input, (_, _, _, values)) in r.inputs.iter_mut().zip(tensors(rows)) {
                input.contents = Some(values.to_contents());
            }
            r
        };
        let mut cache = PlanCache::default();
        for req in [typed(4), typed(1000)] {
            assert!(cached(&mut cache, &list, &req).is_none());
            assert_eq!(cache.entries.len(), 0);
            // The general path still logs the call as the model read it.
            let record = general(&list.models[0], &req);
            assert_eq!(record.row_count, req.inputs[0].shape[0] as u32);
            assert_eq!(
                record.encode_to_vec(),
                general(&list.models[0], &raw(req.inputs[0].shape[0] as usize)).encode_to_vec()
            );
        }
        // Typed contents beside raw contents for every input (the raw ones are read).
        let mut both = raw(4);
        let unlogged = TensorValues::Fp32(vec![7.0; 4]);
        both.inputs.push(InferInputTensor {
            name: "unlogged".into(),
            datatype: "FP32".into(),
            shape: vec![4],
            contents: Some(unlogged.to_contents()),
            ..Default::default()
        });
        both.raw_input_contents.push(unlogged.to_raw());
        let got = cached(&mut cache, &list, &both).expect("eligible");
        assert_eq!(
            got.encode_to_vec(),
            general(&list.models[0], &both).encode_to_vec()
        );
        assert_eq!(cache.entries.len(), 0);
        // A run of headers longer than the limit (here a large tensor parameter, not logged).
        let mut long = raw(4);
        long.inputs[1].parameters.insert(
            "note".into(),
            featurelog_schemas::inference::InferParameter {
                parameter_choice: Some(
                    featurelog_schemas::inference::infer_parameter::ParameterChoice::StringParam(
                        "x".repeat(PLAN_KEY_MAX_BYTES),
                    ),
                ),
            },
        );
        let got = cached(&mut cache, &list, &long).expect("eligible");
        assert_eq!(
            got.encode_to_vec(),
            general(&list.models[0], &long).encode_to_vec()
        );
        assert_eq!(cache.entries.len(), 0);
        // A rule the fast path cannot serve is not looked up, nor kept.
        let mut needs_outputs = rule(&["price"], Some("item_id"));
        needs_outputs.outputs = vec!["score".into()];
        let other = Arc::new(AllowList {
            version: "v8".into(),
            models: vec![needs_outputs],
        });
        assert!(cached(&mut cache, &other, &raw(4)).is_none());
        assert_eq!(cache.entries.len(), 0);
        // Headers alone still are.
        let got = cached(&mut cache, &list, &raw(4)).expect("eligible");
        assert_eq!(
            got.encode_to_vec(),
            general(&list.models[0], &raw(4)).encode_to_vec()
        );
        assert_eq!(cache.entries.len(), 1);
    }

    /// What the model server reads of a logged feature: its raw contents, little-endian.
    fn raw_of(record: &featurelog_schemas::featurelog::v1::Feature) -> Vec<u8> {
        let v = record.values.clone().unwrap_or_default();
        let mut out: Vec<u8> = v.fp32_values.iter().flat_map(|x| x.to_le_bytes()).collect();
        out.extend(v.fp64_values.iter().flat_map(|x| x.to_le_bytes()));
        out.extend(v.int32_values.iter().flat_map(|x| x.to_le_bytes()));
        out.extend(v.int64_values.iter().flat_map(|x| x.to_le_bytes()));
        out
    }

    /// Bytes of a request changed at random (a bit flip on the wire, a client's encoder bug, a
    /// hostile caller): the sidecar never panics on them, its fast path logs exactly the
    /// record the general path logs, and any record it logs holds the bytes the model server
    /// reads from the same request (prost's decoding) for every logged feature.
    #[test]
    fn mutated_requests_never_panic_and_every_path_logs_what_the_model_server_reads() {
        let req = request(&[
            (
                "item_id",
                "INT64",
                &[3],
                TensorValues::Int64(vec![7, -1, 300]),
            ),
            ("price", "FP32", &[3], TensorValues::Fp32(floats(3, 0.25))),
            ("age", "INT32", &[3, 1], TensorValues::Int32(vec![1, -2, 3])),
            ("emb", "FP32", &[3, 2], TensorValues::Fp32(floats(6, 2.0))),
            (
                "ctx",
                "FP64",
                &[1, 2],
                TensorValues::Fp64(vec![1e300, -0.5]),
            ),
        ]);
        let good = req.encode_to_vec();
        let rules = [
            rule(&["price", "age", "emb", "ctx"], Some("item_id")),
            rule(&["emb", "price"], None),
        ];
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let mut next = || rng.u64(..);
        let (mut logged, mut checked) = (0, 0);
        for _ in 0..20_000 {
            let mut raw = good.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() % raw.len() as u64) as usize;
                match next() % 8 {
                    // Mostly small changes to lengths, tags and counts, which move fields.
                    0..=4 => raw[at] = raw[at].wrapping_add(1 + (next() % 3) as u8),
                    5 => raw[at] = next() as u8,
                    6 => raw.truncate(at),
                    _ => raw.insert(at, next() as u8),
                }
                if raw.is_empty() {
                    break;
                }
            }
            let bytes = Bytes::from(raw.clone());
            let server = ModelInferRequest::decode(&raw[..]).ok();
            for r in &rules {
                let Ok(scanned) = crate::lazy::scan(bytes.clone()) else {
                    break;
                };
                let fast = encode(r, &scanned, ctx());
                let general = crate::lazy::scan(bytes.clone())
                    .and_then(|s| s.decode_for_rule(r))
                    .ok()
                    .and_then(|d| crate::extract::extract(r, &d, None, ctx()).ok());
                let record = match (fast, general) {
                    (Some((fast, rows)), Some(general)) => {
                        let fast = FeatureLog::decode(&fast[..]).expect("valid protobuf");
                        assert_eq!(fast.row_count, rows);
                        assert_eq!(fast.encode_to_vec(), general.encode_to_vec(), "{raw:?}");
                        general
                    }
                    (Some(_), None) => {
                        panic!("fast path logged what the general path did not: {raw:?}")
                    }
                    (None, Some(general)) => general,
                    (None, None) => continue,
                };
                logged += 1;
                // A request the model server cannot decode fails the call: not logged then.
                let Some(server) = &server else {
                    continue;
                };
                if server.raw_input_contents.len() != server.inputs.len() {
                    continue;
                }
                for feature in &record.features {
                    let at = server.inputs.iter().position(|i| i.name == feature.name);
                    let at = at.expect("a logged feature is an input");
                    assert_eq!(
                        raw_of(feature),
                        server.raw_input_contents[at].as_ref(),
                        "{}: {raw:?}",
                        feature.name
                    );
                }
                if !record.candidate_int_ids.is_empty() {
                    let at = server
                        .inputs
                        .iter()
                        .position(|i| i.name == "item_id")
                        .unwrap();
                    let ids: Vec<u8> = (record.candidate_int_ids.iter())
                        .flat_map(|x| x.to_le_bytes())
                        .collect();
                    assert_eq!(ids, server.raw_input_contents[at].as_ref(), "{raw:?}");
                }
                checked += 1;
            }
        }
        assert!(
            logged > 1000 && checked > 500,
            "{logged} logged, {checked} checked"
        );
    }

    #[test]
    fn anything_else_takes_the_general_path() {
        let req = request(&[
            ("item_id", "INT64", &[2], TensorValues::Int64(vec![1, 2])),
            (
                "lang",
                "BYTES",
                &[2],
                TensorValues::Bytes(vec![Bytes::from_static(b"en"), Bytes::from_static(b"de")]),
            ),
            (
                "price",
                "FP32",
                &[3],
                TensorValues::Fp32(vec![1.0, 2.0, 3.0]),
            ),
            ("short", "FP32", &[2], TensorValues::Fp32(vec![1.0, 2.0])),
        ]);
        // A datatype it does not copy, a row count that disagrees with the ids.
        assert!(fast(&rule(&["lang"], Some("item_id")), &req).is_none());
        assert!(fast(&rule(&["price"], Some("item_id")), &req).is_none());
        // Rules that need the response or parameters.
        let mut top = rule(&["short"], Some("item_id"));
        top.top_k = Some(TopK {
            by: "score".into(),
            k: 1,
        });
        assert!(fast(&top, &req).is_none());
        // Raw contents that do not match the shape.
        let mut bad = req.clone();
        bad.raw_input_contents[3] = Bytes::from_static(&[0, 0, 128]);
        assert!(fast(&rule(&["short"], Some("item_id")), &bad).is_none());
        // Typed contents.
        let mut typed = req.clone();
        typed.raw_input_contents.clear();
        assert!(fast(&rule(&["short"], Some("item_id")), &typed).is_none());
        // The eligible case still works.
        assert_eq!(
            fast(&rule(&["short"], Some("item_id")), &req).map(|r| r.row_count),
            Some(2)
        );
    }
}
