//! The fast path from a scanned request to an encoded `FeatureLog`, for the shape most
//! recommenders send: raw tensors (Triton's clients always send raw), fixed-width numeric
//! features, integer candidate ids, no outputs, top-K or parameters to log.
//!
//! The general path ([`crate::extract::lazy`] then [`crate::extract`] then prost) decodes each
//! logged tensor into a `Vec`, builds the record and encodes it again; for 100 candidates x 10
//! features that round trip and its allocations were most of the publisher's CPU (perf). Here a
//! little-endian FP32/FP64 tensor's raw bytes are already the wire form of the record's packed
//! `fp32_values`/`fp64_values`, so they are copied as they are, and integers are re-encoded
//! straight into the output buffer.
//!
//! The fast path only ever takes a call it can encode exactly as the general path would (the
//! tests check the two records decode equal); anything else, including every error case,
//! returns `None` and goes the general way, which owns the error reasons.
//!
//! The request's tensors are read, and the record's fields written, by `wire`.

#[cfg(test)]
mod tests;
mod wire;

use featurelog_schemas::featurelog::v1::DataType;
use featurelog_schemas::wire::{WireType, feature_log, infer_input_tensor, timestamp};
use prost::encoding::encode_varint;

use std::sync::Arc;

use crate::allowlist::{AllowList, ModelRule};
use crate::extract::CallContext;
use crate::extract::fields::{NotField, fields};
use crate::extract::lazy::Scanned;

use wire::{
    Column, Head, Kind, bytes_field, bytes_field_len, count, head, key, kind, name, signed,
    varint_len, zigzag,
};

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
        + bytes_field_len(feature_log::CANDIDATE_INT_IDS, ids_len)
        + columns
            .iter()
            .map(|c| 1 + varint_len(c.len as u64) + c.len)
            .sum::<usize>();

    buf.clear();
    buf.reserve(capacity);
    bytes_field(buf, feature_log::REQUEST_ID, ctx.request_id.as_bytes());
    bytes_field(buf, feature_log::MODEL_NAME, scanned.model_name.as_bytes());
    bytes_field(
        buf,
        feature_log::MODEL_VERSION,
        scanned.model_version.as_bytes(),
    );
    if let (Some((seconds, nanos)), Some(len)) = (served_at, timestamp_len) {
        key(buf, feature_log::SERVED_AT, WireType::LengthDelimited);
        encode_varint(len as u64, buf);
        if seconds != 0 {
            key(buf, timestamp::SECONDS, WireType::Varint);
            encode_varint(seconds as u64, buf);
        }
        if nanos != 0 {
            key(buf, timestamp::NANOS, WireType::Varint);
            encode_varint(nanos as i64 as u64, buf);
        }
    }
    bytes_field(buf, feature_log::SIDECAR_INSTANCE, ctx.instance.as_bytes());
    bytes_field(
        buf,
        feature_log::ALLOW_LIST_VERSION,
        ctx.allow_list_version.as_bytes(),
    );
    if row_count != 0 {
        key(buf, feature_log::ROW_COUNT, WireType::Varint);
        encode_varint(u64::from(row_count), buf);
    }
    for c in &columns {
        key(buf, feature_log::FEATURES, WireType::LengthDelimited);
        encode_varint(c.len as u64, buf);
        c.encode(buf);
    }
    // Field 12 after 9 (10 and 11 are never set here), in field order as prost writes it.
    if ids_len > 0 {
        key(
            buf,
            feature_log::CANDIDATE_INT_IDS,
            WireType::LengthDelimited,
        );
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

/// Whether any input carries typed `contents` (`InferInputTensor::contents`), or cannot be
/// read: such a run holds the tensors' values, which differ from call to call, so it is no key.
fn carries_contents(scanned: &Scanned) -> bool {
    (0..scanned.input_count()).any(|i| {
        fields(scanned.input(i)).any(|f| match f {
            Ok(f) => f.number == infer_input_tensor::CONTENTS,
            Err(NotField::Group(number)) => number == infer_input_tensor::CONTENTS,
            Err(NotField::Malformed) => true,
        })
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
