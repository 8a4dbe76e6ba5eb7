//! `rest_json::request` / `response` / `peek_id` against a parse of the whole body into a
//! `serde_json::Value`.

use bytes::Bytes;
use proptest::prelude::*;

use super::config;
use super::generators::{mutate, mutations};
use super::rest_bodies::{Json, REST_NAMES, rest_body};
use super::rest_reference::{
    MALFORMED, duplicate_keys, reference_request, reference_response, rest_parts,
};

/// `rest_json`'s readers on `body` against the references: the same request and response, or
/// the same reason to refuse it; the id peeked for the caller is the request's; a kept header
/// reads as reading it again.
fn check_rest(
    body: &Bytes,
    header_length: Option<usize>,
    wanted: &dyn Fn(&str) -> bool,
    cache: &mut crate::extract::rest_json::HeaderCache,
) -> Result<(), TestCaseError> {
    let got = crate::extract::rest_json::request(body, header_length, "m", "1", wanted, None);
    let want = reference_request(body, header_length, wanted);
    let text = String::from_utf8_lossy(body);
    prop_assert_eq!(
        got.as_ref().map_err(|e| e.reason().as_str()),
        want.as_ref().map_err(|e| *e),
        "{}",
        text
    );
    let kept = crate::extract::rest_json::request(
        body,
        header_length,
        "m",
        "1",
        wanted,
        Some(&mut *cache),
    );
    prop_assert_eq!(&kept, &got, "a kept header reads as reading it: {}", text);
    if let Ok(r) = &got {
        let peeked = crate::extract::rest_json::peek_id(body, header_length).unwrap_or_default();
        prop_assert_eq!(
            &peeked,
            &r.id,
            "the id given back is the record's: {}",
            text
        );
    }
    // The same text as a response: `inputs` is then an unknown member, its tensors read only
    // from `outputs` (there are none here unless `outputs` holds tensors).
    let got = crate::extract::rest_json::response(body, header_length, wanted);
    let want = reference_response(body, header_length, wanted);
    prop_assert_eq!(
        got.as_ref().map_err(|e| e.reason().as_str()),
        want.as_ref().map_err(|e| *e),
        "{}",
        text
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(1536))]

    /// Bodies as clients write them (JSON data, binary data, both, in any order and spacing,
    /// keys escaped): read as the whole parse reads them.
    #[test]
    fn rest_bodies_read_as_a_whole_parse_reads_them(
        body in rest_body(true),
        wanted in prop::collection::hash_set(prop::sample::select(REST_NAMES.to_vec()), 0..4),
    ) {
        let bytes = body.bytes();
        let wanted = |n: &str| wanted.contains(n);
        let mut cache = crate::extract::rest_json::HeaderCache::default();
        check_rest(&bytes, body.header_length(), &wanted, &mut cache)?;
        // Again, through the header it kept.
        check_rest(&bytes, body.header_length(), &wanted, &mut cache)?;
        // Its tensors as a response's outputs.
        let json = String::from_utf8_lossy(&body.json).replacen("\"inputs\"", "\"outputs\"", 1);
        let as_response = Bytes::from([json.as_bytes(), &body.binary].concat());
        let header_length = body.header_length().map(|_| json.len());
        if !duplicate_keys(json.as_bytes()) {
            let got = crate::extract::rest_json::response(&as_response, header_length, &wanted);
            let want = reference_response(&as_response, header_length, &wanted);
            prop_assert_eq!(got.as_ref().map_err(|e| e.reason().as_str()), want.as_ref().map_err(|e| *e), "{}", json);
        }
    }

    /// The same changed at random. Where the whole text parses, read as above. Where it does
    /// not, a body is read only if the damage is inside the `data` of tensors the rule does
    /// not read (stepped over unparsed, as the gRPC path steps over unread tensors; the model
    /// server refuses such a call, and a failed call is never logged). Requested outputs and
    /// parameters have no `data` here (see `rest_body`): damage there would be stepped over
    /// the same way, unseen by this check.
    #[test]
    fn mutated_rest_bodies_read_as_a_whole_parse_or_not_at_all(
        body in rest_body(false),
        wanted in prop::collection::hash_set(prop::sample::select(REST_NAMES.to_vec()), 0..4),
        mutations in mutations(),
    ) {
        let mut bytes = body.bytes().to_vec();
        mutate(&mut bytes, &mutations);
        let bytes = Bytes::from(bytes);
        let header_length = body.header_length().map(|n| n.min(bytes.len()));
        let wanted = |n: &str| wanted.contains(n);
        let json = rest_parts(&bytes, header_length).map(|(json, _)| json).unwrap_or_default();
        if duplicate_keys(json) {
            // Not modelled (see `duplicate_keys`): read without a panic, that is all.
            let _ = crate::extract::rest_json::request(&bytes, header_length, "m", "1", &wanted, None);
        } else if serde_json::from_slice::<Json>(json).is_ok() {
            check_rest(&bytes, header_length, &wanted, &mut crate::extract::rest_json::HeaderCache::default())?;
        } else if let Ok(r) = crate::extract::rest_json::request(&bytes, header_length, "m", "1", &wanted, None) {
            // serde_json checks that strings are UTF-8 only where it builds them, not in the
            // members it skips: such a body is read as the reference reads its text taken
            // lossily (where the bytes are in what the reader builds, it refuses the body).
            let lossy = String::from_utf8_lossy(json).into_owned();
            let binary = &bytes[json.len()..];
            let lossy_body = Bytes::from([lossy.as_bytes(), binary].concat());
            let lossy_length = header_length.map(|_| lossy.len());
            if serde_json::from_slice::<Json>(lossy.as_bytes()).is_ok() && !duplicate_keys(lossy.as_bytes()) {
                let want = reference_request(&lossy_body, lossy_length, &wanted);
                prop_assert_eq!(Ok(&r), want.as_ref(), "{}", lossy);
            } else {
                let all = crate::extract::rest_json::request(&bytes, header_length, "m", "1", &|_| true, None);
                prop_assert!(
                    all.is_err(),
                    "read a body that is not JSON, and not only for the tensors it skips: {:?}\n{:?}",
                    String::from_utf8_lossy(&bytes),
                    r
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the properties found, kept as the exact inputs.

/// A tensor's `data` that is no JSON value (`1x`, nothing, `:1`) was cut out of the body,
/// which then read as JSON where it is not, and `1x` as the number 1.
#[test]
fn data_that_is_no_json_value_is_refused() {
    let all = |_: &str| true;
    let none = |_: &str| false;
    for data in ["1x", "", ":1", "tru", "nul", "1.", "-"] {
        let body =
            format!(r#"{{"inputs":[{{"name":"a","shape":[1],"datatype":"FP32","data":{data}}}]}}"#);
        assert!(serde_json::from_str::<Json>(&body).is_err());
        for wanted in [&all as &dyn Fn(&str) -> bool, &none] {
            let read = crate::extract::rest_json::request(
                &Bytes::from(body.clone()),
                None,
                "m",
                "",
                wanted,
                None,
            );
            assert_eq!(
                read.map_err(|e| e.reason().as_str()),
                Err(MALFORMED),
                "{body}"
            );
        }
        let with_id = format!(r#"{{"id":{data},"inputs":[]}}"#);
        assert_eq!(
            crate::extract::rest_json::peek_id(&Bytes::from(with_id), None),
            None
        );
    }
    for data in ["1", "-0.5e3", "true", "null", "[1]"] {
        let body =
            format!(r#"{{"inputs":[{{"name":"a","shape":[1],"datatype":"FP32","data":{data}}}]}}"#);
        let read = crate::extract::rest_json::request(
            &Bytes::from(body.clone()),
            None,
            "m",
            "",
            &none,
            None,
        );
        assert!(read.is_ok(), "{body}: {read:?}");
    }
}
