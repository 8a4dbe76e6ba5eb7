//! What a call of either binding goes through once decoded, on a publisher thread: admission
//! (the allow list's sample, then the adaptive fraction), the fast path's record, the count of
//! listed features a record lacks, and the buffers a thread keeps from one call to the next.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use featurelog_schemas::sampling;

use crate::allowlist::AllowList;
use crate::extract::CallContext;
use crate::extract::direct::PlanCache;

use super::Shared;
use super::producer::{RecordOf, produce};
use crate::reason::{Dropped, Skipped};

/// The largest record buffer a publisher thread keeps between calls.
const RECORD_BUFFER_KEPT: usize = 1 << 20;

/// What a publisher thread keeps from one call to the next.
#[derive(Default)]
pub(super) struct Local {
    /// For joining a body's chunks (see [`concat`]).
    pub(super) scratch: BytesMut,
    /// The fast path's plans by request layout.
    pub(super) plans: PlanCache,
    /// The encoded record; librdkafka copies it, so one buffer serves every call.
    pub(super) record: Vec<u8>,
    /// REST binary-data request headers read before.
    pub(super) headers: crate::extract::rest_json::HeaderCache,
}

/// The id a call of `rule` is logged under (its own, else `fallback`), if it is logged: the
/// allow list's sample, then what the adaptive controller lets through. Counts the ones that
/// are not.
pub(super) fn admit(
    shared: &Shared,
    rule: &crate::allowlist::ModelRule,
    own: String,
    fallback: String,
) -> Option<String> {
    // The request's own id, else the one the proxy decided on (header or generated).
    let request_id = if own.is_empty() { fallback } else { own };
    if !sampling::sampled(&request_id, rule.sample_rate) {
        shared.metrics.skip_call(Skipped::NotSampled);
        return None;
    }
    let fraction = f64::from_bits(shared.fraction.load(Ordering::Relaxed));
    // A different hash input than sampling, so shedding does not select the same requests.
    if fraction < 1.0 && !sampling::sampled(&format!("shed:{request_id}"), fraction) {
        shared.metrics.drop_call(Dropped::AdaptiveShed);
        return None;
    }
    Some(request_id)
}

/// The fast path: the record encoded straight from the request's bytes by the rule's plan
/// (`direct`), and produced. Gives the request back when the plan does not apply (outputs,
/// top-k, encodings it does not take), for the general path.
pub(super) fn produce_planned(
    shared: &Shared,
    local: &mut Local,
    list: &Arc<AllowList>,
    rule: &crate::allowlist::ModelRule,
    scanned: crate::extract::lazy::Scanned,
    ctx: CallContext<'_>,
    of: RecordOf<'_>,
) -> Option<crate::extract::lazy::Scanned> {
    let Some(plan) = local.plans.plan(list, rule, &scanned) else {
        return Some(scanned);
    };
    let record = &mut local.record;
    let Some(rows) = crate::extract::direct::encode_planned(plan, rule, &scanned, ctx, record)
    else {
        return Some(scanned);
    };
    drop(scanned);
    for feature in plan.missing(rule) {
        shared.metrics.missing_feature(&rule.name, feature);
    }
    produce(shared, of, record, rows);
    // A rare huge record should not pin its memory for the thread's lifetime.
    if record.capacity() > RECORD_BUFFER_KEPT {
        *record = Vec::new();
    }
    None
}

/// Counts each input and output the rule lists that the call's record lacks: a client that
/// stops sending a feature shows in the metrics before the training data goes bad.
pub(super) fn count_missing(
    shared: &Shared,
    rule: &crate::allowlist::ModelRule,
    record: &featurelog_schemas::featurelog::v1::FeatureLog,
) {
    let lacks = |wanted: &[String], got: &[featurelog_schemas::featurelog::v1::Feature]| {
        for name in wanted {
            if !got.iter().any(|f| &f.name == name) {
                shared.metrics.missing_feature(&rule.name, name);
            }
        }
    };
    lacks(&rule.features, &record.features);
    lacks(&rule.outputs, &record.outputs);
}
