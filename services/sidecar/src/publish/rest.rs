//! A call of the REST binding on a publisher thread: its JSON (and binary data) read into the
//! gRPC messages, then the same admission, fast path and extraction as a gRPC call's.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use prost::Message;

use crate::allowlist::AllowList;
use crate::extract::framing::inflate_http;
use crate::extract::{CallContext, extract};

use super::dead_letter::Rejected;
use super::producer::{RecordOf, produce};
use super::record::{Local, admit, count_missing, produce_planned};
use super::{CapturedCall, RestCall, Shared};
use crate::reason::{Dropped, Skipped};

/// A REST call: its JSON (and binary data) read into the gRPC messages, then the same
/// extraction as a gRPC call's decoded path.
pub(super) fn publish_rest(
    shared: &Shared,
    call: CapturedCall,
    rest: RestCall,
    list: &Arc<AllowList>,
    local: &mut Local,
) {
    let metrics = &shared.metrics;
    let limit = shared.max_message_bytes;
    let request_size: usize = call.request.iter().map(Bytes::len).sum();
    let inflated = |chunks, encoding: &Option<String>, scratch: &mut BytesMut| {
        inflate_http(chunks, encoding.as_deref(), limit, scratch)
    };
    // What a dead letter says of this call, besides what went wrong.
    let about = |rejected: Rejected, request_id: &str| {
        rejected
            .model(&rest.model, &rest.version)
            .call(request_id, request_size, call.served_at)
    };
    let body = match inflated(call.request, &call.request_encoding, &mut local.scratch) {
        Ok(b) => b,
        Err(e) => {
            let rejected = e.rejected("rest", call.request_encoding.as_deref(), limit);
            return shared.reject(about(rejected, &call.fallback_request_id));
        }
    };
    let Some(rule) = list.rule(&rest.model, &rest.version) else {
        return metrics.skip_call(Skipped::NotAllowListed);
    };
    // Only the tensors the rule logs are read, as the gRPC path decodes only those.
    let inputs = |name: &str| {
        rule.features.iter().any(|f| f == name) || rule.candidate_ids_input.as_deref() == Some(name)
    };
    let outputs = |name: &str| {
        rule.outputs.iter().any(|o| o == name) || rule.top_k.as_ref().is_some_and(|t| t.by == name)
    };
    let request = match crate::extract::rest_json::request(
        &body,
        rest.request_header_length,
        &rest.model,
        &rest.version,
        &inputs,
        Some(&mut local.headers),
    ) {
        Ok(r) => r,
        Err(err) => {
            let rejected = Rejected::new(err.reason(), "rest", err.to_string());
            let id = body_id(&body, rest.request_header_length).unwrap_or(call.fallback_request_id);
            return shared.reject(about(rejected, &id));
        }
    };
    let Some(request_id) = admit(shared, rule, request.id.clone(), call.fallback_request_id) else {
        return;
    };
    let ctx = CallContext {
        request_id: &request_id,
        served_at: call.served_at,
        instance: &shared.instance,
        allow_list_version: &list.version,
        headers: &call.headers,
    };
    let of = RecordOf {
        model: &rule.name,
        request_id: &request_id,
        binding: "rest",
        request_size,
        served_at: call.served_at,
    };
    // The gRPC path's fast encoder, on the request as gRPC would have carried it (only the
    // rule's tensors, a few kB): the generic extraction below decodes every value into vectors
    // first, which cost the publisher more than reading the JSON.
    if let Ok(scanned) = crate::extract::lazy::scan(Bytes::from(request.encode_to_vec()))
        && produce_planned(shared, local, list, rule, scanned, ctx, of).is_none()
    {
        return;
    }
    let response = if !rule.outputs.is_empty() || rule.top_k.is_some() {
        let read = inflated(call.response, &call.response_encoding, &mut BytesMut::new())
            .map_err(|e| {
                format!(
                    "the model server's response: {}",
                    e.rejected("rest", call.response_encoding.as_deref(), limit)
                        .detail
                )
            })
            .and_then(|body| {
                crate::extract::rest_json::response(&body, rest.response_header_length, &outputs)
                    .map_err(|e| format!("the model server's response: {e}"))
            });
        match read {
            Ok(r) => Some(r),
            Err(detail) => {
                let rejected = Rejected::new(Dropped::MalformedResponse, "rest", detail);
                return shared.reject(about(rejected, &request_id));
            }
        }
    } else {
        None
    };
    match extract(rule, &request, response.as_ref(), ctx) {
        Ok(record) => {
            count_missing(shared, rule, &record);
            produce(shared, of, &record.encode_to_vec(), record.row_count);
        }
        Err(err) => {
            let rejected = Rejected::new(err.reason(), "rest", err.to_string());
            shared.reject(about(rejected, &request_id));
        }
    }
}

/// The `id` of a REST request's JSON, read for a dead letter when the body as a whole could
/// not be: the id the app knows the call by, if it can be found.
fn body_id(body: &Bytes, header_length: Option<usize>) -> Option<String> {
    crate::extract::rest_json::peek_id(body, header_length).filter(|id| !id.is_empty())
}
