//! Differential property tests of the sidecar's hand-written decoders on the untrusted path:
//! each reads the same bytes as a reference (prost for protobuf, serde_json for JSON, flate2's
//! plain readers for gzip) and must agree with it, and never panic. Where a decoder reads less
//! than the reference on purpose (only the fields it needs, leaving the rest to the model
//! server, which refuses a call it cannot decode: such a call is never logged), the property
//! says so where it allows it.
//!
//! - `extract::framing::unframe` and `extract::framing::inflate_http` against the body they were made from,
//!   and against flate2's single- and multi-member gzip readers on bytes changed at random.
//! - `extract::lazy::scan` / `Scanned::decode_for_rule` against `ModelInferRequest::decode`.
//! - `extract::direct::encode` (and its plan cache) against the general path and against the raw
//!   contents prost decodes.
//! - The request id the caller is given (`proxy::request_id::captured_request_id`,
//!   `id_in_chunks`, `head_id`) against prost's decode of the message's head and against the id
//!   the publisher logs the call under; `extract::framing::request_model` against prost's name
//!   and version.
//! - `extract::rest_json::request` / `response` / `peek_id` against a parse of the whole body into a
//!   `serde_json::Value`.
//! - `proxy::stream::messages` (the cutter of streamed gRPC messages) against cutting the whole body.
//!
//! Cases are bounded (see [`config`]) so that the set runs in seconds in a debug build;
//! `PROPTEST_CASES=100000 cargo test -p featurelog-sidecar --lib proptests` runs longer, and
//! `PROPTEST_RNG_SEED=<n>` explores other cases than the fixed default seed.
//!
//! One file per decoder under test (`framing`, `lazy`, `direct`, `request_id`, `stream`,
//! `rest_json`), the cases its properties found kept as unit tests at its end. What they share:
//! [`config`] here, bytes changed at random and bodies cut into chunks in `generators`,
//! ModelInferRequest encodings in `reencode` and `requests`, REST bodies in `rest_bodies` and
//! what a parse of a whole one reads in `rest_reference`.

use proptest::prelude::*;

mod direct;
mod framing;
mod generators;
mod lazy;
mod reencode;
mod request_id;
mod requests;
mod rest_bodies;
mod rest_json;
mod rest_reference;
mod stream;

/// `cases` cases (or `PROPTEST_CASES`), from a fixed seed unless `PROPTEST_RNG_SEED` is set:
/// CI runs the same cases every time, and a longer local run can explore others. No
/// regression files: a case found is kept as a unit test (at the end of its decoder's file).
fn config(cases: u32) -> ProptestConfig {
    featurelog_schemas::testing::config(cases, 0x5eed_f00d_51de_ca75)
}
