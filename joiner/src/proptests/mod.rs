//! Differential property tests of the joiner's hand-written decoders on the untrusted path:
//! each reads the same bytes as its reference (prost for protobuf, serde_json for JSON) and must
//! agree with it, and never panic.
//!
//! - [`crate::log::ServedLog::decode`] against prost's `FeatureLog::decode`: records prost
//!   writes, the same records re-encoded as other writers may (unpacked or split repeated
//!   fields, split `values` messages, unknown fields, fields interleaved), and all of those
//!   changed at random.
//! - [`crate::event::from_protobuf`] against prost's `Impression::decode`, plain or in the
//!   Schema Registry's framing.
//! - [`crate::event::from_json`] (a streaming pick of the configured fields) against a parse of
//!   the whole event into a `serde_json::Value`.
//!
//! Cases are bounded (see [`config`]) so that the whole set runs in seconds in a debug build;
//! `PROPTEST_CASES=100000 cargo test -p featurelog-joiner --lib proptests` runs longer, and
//! `PROPTEST_RNG_SEED=<n>` explores other cases than the fixed default seed.
//!
//! One file per decoder under test (`feature_log`, `protobuf_event`, `json_event`), the cases
//! its properties found kept as unit tests at its end. What they share: [`config`] and
//! [`same_event`] here, bytes changed at random and text in `generators`, FeatureLog
//! re-encodings in `reencode`.

use proptest::prelude::*;

mod feature_log;
mod generators;
mod join_order;
mod json_event;
mod protobuf_event;
mod reencode;

/// `cases` cases (or `PROPTEST_CASES`), from a fixed seed unless `PROPTEST_RNG_SEED` is set:
/// CI runs the same cases every time, and a longer local run can explore others. No
/// regression files: a case found is kept as a unit test next to the decoder it broke.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    featurelog_schemas::testing::config(cases, 0x5eed_f00d_1e55_0001)
}

/// Events compared as values, errors by their reason (their texts name fields).
fn same_event(
    got: Result<crate::event::Event, crate::event::EventError>,
    want: Result<crate::event::Event, crate::event::EventError>,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            // Labels may be NaN: compared by their bits.
            let bits = |e: &crate::event::Event| -> Vec<(String, u64)> {
                e.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_bits()))
                    .collect()
            };
            prop_assert_eq!(bits(&g), bits(&w));
            prop_assert_eq!(
                (g.request_id, g.item_id, g.time_us, g.kind, g.event_id),
                (w.request_id, w.item_id, w.time_us, w.kind, w.event_id)
            );
        }
        (Err(g), Err(w)) => prop_assert_eq!(g.reason(), w.reason(), "{} / {}", g, w),
        (g, w) => prop_assert!(false, "got {:?}, want {:?}", g, w),
    }
    Ok(())
}
