//! The request id the caller is given, and the model a request names.

use bytes::{Bytes, BytesMut};
use featurelog_schemas::inference::ModelInferRequest;
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message as _;
use prost::encoding::{WireType, decode_varint};

use super::config;
use super::generators::{Mutation, chunked, cuts, framed, gzip, mutate, mutations};
use super::reencode::{fields, reencode_request};
use super::requests::request;
use crate::extract::framing::{request_model, unframe};
use crate::extract::lazy::LazyError;

/// The head of a ModelInferRequest as prost decodes it (what the model server reads of it):
/// the reference for every id and name read on the call's path.
#[derive(Clone, PartialEq, prost::Message)]
struct Head {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
}

fn head_of(message: &[u8]) -> Option<Head> {
    Head::decode(message).ok()
}

fn captured(chunks: Vec<Bytes>) -> crate::proxy::Captured {
    crate::proxy::Captured {
        len: chunks.iter().map(Bytes::len).sum(),
        chunks,
        overflow: false,
        head: Vec::new(),
        complete: true,
        trailers: None,
    }
}

/// A request as prost writes it, re-encoded (`how` 1), or changed at random (`how` 2).
fn message_of(r: &ModelInferRequest, how: u8, seed: u64, mutations: &[Mutation]) -> Vec<u8> {
    let mut raw = r.encode_to_vec();
    if how >= 1 {
        raw = reencode_request(&raw, seed);
    }
    if how == 2 {
        mutate(&mut raw, mutations);
    }
    raw
}

proptest! {
    #![proptest_config(config(1536))]

    /// The id a call's response names (`x-request-id` when the call carries none) is the one
    /// prost decodes from the request, in any chunks, compressed or not; and whenever the
    /// publisher logs the call, it is the id the record carries.
    #[test]
    fn the_id_given_back_is_the_one_prost_reads_and_the_record_carries(
        r in request(),
        how in 0u8..3,
        seed in any::<u64>(),
        mutations in mutations(),
        compressed in any::<bool>(),
        trailing in prop::collection::vec(any::<u8>(), 0..3),
        cuts in cuts(),
    ) {
        let message = message_of(&r, how, seed, &mutations);
        let want = head_of(&message).map(|h| h.id);
        if let Ok(full) = ModelInferRequest::decode(&message[..]) {
            prop_assert_eq!(want.as_deref(), Some(full.id.as_str()));
        }
        let (encoding, body) = if compressed {
            (Some("gzip"), framed(1, &gzip(&message, 1)))
        } else {
            (None, framed(0, &message))
        };
        let chunks = chunked(&body, &cuts);
        let got = crate::proxy::request_id::captured_request_id(&captured(chunks.clone()), encoding, 1 << 20);
        prop_assert_eq!(&got, &want, "{:?}", message);
        // The record's id: the publisher unframes the body and scans the message.
        let unframed = unframe(chunks.clone(), encoding, 1 << 20, &mut BytesMut::new());
        if let Ok(Ok(scanned)) = unframed.map(crate::extract::lazy::scan) {
            prop_assert_eq!(got.as_deref(), Some(scanned.id.as_str()), "{:?}", message);
        }
        if !compressed {
            // A streamed request's id, read in place from its message's chunks.
            let in_chunks = crate::proxy::request_id::id_in_chunks(&chunks, 5);
            prop_assert_eq!(&in_chunks, &want);
            // Bytes after the message (the publisher refuses such a body): the id is still
            // the message's, as its prefix bounds it.
            let mut longer = body.clone();
            longer.extend_from_slice(&trailing);
            let got = crate::proxy::request_id::captured_request_id(
                &captured(chunked(&longer, &cuts)), None, 1 << 20);
            prop_assert_eq!(&got, &want);
        }
    }

    /// A request past the size limit keeps only its first bytes: the id read from them is
    /// prost's, or none when they end before the first field past `id` (fields come in
    /// field-number order from every encoder).
    #[test]
    fn the_id_of_a_head_is_the_whole_messages_or_none(
        r in request(),
        cut in any::<Index>(),
        mutations in mutations(),
        mutated in any::<bool>(),
    ) {
        let message = r.encode_to_vec();
        let body = framed(0, &message);
        let head = &body[..cut.index(body.len() + 1)];
        let got = crate::proxy::request_id::head_id(head);
        let fields = fields(&message).unwrap_or_default();
        let past_id = fields.iter().find(|f| f.number >= 4).map(|f| 5 + f.start + f.key_len);
        let want = past_id.filter(|&end| head.len() >= end).map(|_| r.id.clone());
        prop_assert_eq!(got, want);
        if mutated {
            // Bytes changed at random: no panic, and an id only where prost reads one.
            let mut head = head.to_vec();
            mutate(&mut head, &mutations);
            if let Some(id) = crate::proxy::request_id::head_id(&head) {
                // It stops at the first field numbered past `id`, unread; prost reads on, so
                // a later `id` (no encoder writes one) or a malformed field there makes them
                // differ. Up to that field they agree.
                let stop = fields_until_past_id(&head[5..]);
                let prefix = stop.and_then(|s| head_of(&head[5..5 + s]));
                prop_assert_eq!(Some(id), prefix.map(|h| h.id), "{:?}", head);
            }
        }
    }

    /// The model a request names, read from the fields its first chunk starts with: prost's
    /// name and version, or no answer (the publisher's full decode then decides).
    #[test]
    fn the_model_read_early_is_prosts_or_none(
        r in request(),
        how in 0u8..3,
        seed in any::<u64>(),
        mutations in mutations(),
        cuts in cuts(),
    ) {
        let message = message_of(&r, how, seed, &mutations);
        let body = framed(0, &message);
        let chunks = chunked(&body, &cuts);
        let got = request_model(&chunks);
        let head = head_of(&message);
        if how == 0 {
            // Prost's order: name, version, then the rest.
            let first = chunks.iter().find(|c| !c.is_empty()).map_or(0, Bytes::len);
            let fields = fields(&message).unwrap_or_default();
            let leading = fields.iter().take_while(|f| f.number <= 2).count();
            let after = fields.get(leading).map_or(message.len(), |f| f.start);
            // Known when the first chunk holds the whole message or the first byte after the
            // name and version.
            let known = first >= body.len() || (first > 5 + after && first >= 5);
            let want = (known && !r.model_name.is_empty())
                .then_some((r.model_name.as_str(), r.model_version.as_str()));
            prop_assert_eq!(got, want, "first chunk {} of {}", first, body.len());
        } else if let (Some((name, version)), Some(head), Some(fields)) = (got, head, fields(&message)) {
            // Any answer is prost's when the name and version fields are all in the leading
            // run (as every encoder writes them): a later one would win in prost.
            let leading = fields
                .iter()
                .take_while(|f| f.number <= 2 && f.wire == WireType::LengthDelimited && f.key_len == 1)
                .count();
            if fields[leading..].iter().all(|f| f.number > 2) {
                prop_assert_eq!((name, version), (head.model_name.as_str(), head.model_version.as_str()));
            }
        }
    }
}

/// Where the first field numbered past `id` (4 or more, whatever its wire type) starts in
/// `message`, the fields before it stepped over as prost would; `None` when there is none or
/// a field before it is not well formed.
fn fields_until_past_id(message: &[u8]) -> Option<usize> {
    let mut rest = message;
    loop {
        let start = message.len() - rest.len();
        let key = decode_varint(&mut rest).ok()?;
        if key >> 3 >= 4 {
            return Some(start);
        }
        let wire = WireType::try_from(key & 7).ok()?;
        let number = u32::try_from(key >> 3).ok()?;
        let context = prost::encoding::DecodeContext::default();
        prost::encoding::skip_field(wire, number, &mut rest, context).ok()?;
    }
}

// ---------------------------------------------------------------------------------------------
// What the properties found, kept as the exact inputs.

/// A first chunk that ends right after the model's name, its version in the next chunk: the
/// version was read as none (so a call of a versioned rule was skipped as not allow-listed,
/// or its response dropped for another rule's). And bytes past the message are not its own.
#[test]
fn the_model_read_early_waits_for_a_version_in_the_next_chunk() {
    let message = ModelInferRequest {
        model_name: "m".into(),
        model_version: "2".into(),
        id: "x".into(),
        ..ModelInferRequest::default()
    }
    .encode_to_vec();
    let body = framed(0, &message);
    let (a, b) = body.split_at(5 + 3);
    let split = [Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)];
    assert_eq!(request_model(&split), None);
    assert_eq!(
        request_model(&[Bytes::from(body.clone())]),
        Some(("m", "2"))
    );
    let (a, b) = body.split_at(5 + 7);
    let past = [Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)];
    assert_eq!(request_model(&past), Some(("m", "2")));
    // A message of the name alone, followed in its chunk by bytes that are not its own.
    let mut short = framed(0, &message[..3]);
    short.extend_from_slice(&message[3..]);
    assert_eq!(request_model(&[Bytes::from(short)]), Some(("m", "")));
}

/// An `id` followed by a field 3 of another wire type: prost (and the proxy, which gives the
/// caller the id) refuse the message, but the publisher's scan read the id `a`: a record
/// logged under another id than the caller was given.
#[test]
fn a_head_field_of_another_wire_type_is_refused_as_prost_refuses_it() {
    for message in [
        &[0x1a, 1, b'a', 0x18, 5][..],
        &[0x0a, 1, b'm', 0x0d, 1, 2, 3, 4],
        &[0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1a, 1, b'a'],
        // As a group: the scan's walker steps over groups as prost does, but not these.
        &[0x1a, 1, b'a', 0x1b, 0x1c],
        &[0x0b, 0x08, 1, 0x0c, 0x1a, 1, b'a'],
    ] {
        assert_eq!(head_of(message), None, "{message:?}");
        let scanned = crate::extract::lazy::scan(Bytes::copy_from_slice(message));
        assert!(matches!(scanned, Err(LazyError::Malformed)), "{message:?}");
        let id = crate::proxy::request_id::captured_request_id(
            &captured(vec![Bytes::from(framed(0, message))]),
            None,
            1 << 20,
        );
        assert_eq!(id, None);
    }
}

/// A group of a field a ModelInferRequest does not declare: prost steps over it, and the id
/// given back is the one prost reads past it (the scan's walker refuses groups; the sidecar
/// steps over them as prost does).
#[test]
fn an_unknown_group_is_stepped_over_as_prost_steps_over_it() {
    // Group 30 (keys 0xf3 0x01, 0xf4 0x01) around a nested group and a length-delimited field.
    let group = [0xf3, 0x01, 0x0b, 0x12, 1, 0x0c, 0x0c, 0x08, 1, 0xf4, 0x01];
    let message = [&[0x0a, 1, b'm', 0x1a, 1, b'a'][..], &group, &[0x2a, 0]].concat();
    assert_eq!(head_of(&message).map(|h| h.id).as_deref(), Some("a"));
    let scanned = crate::extract::lazy::scan(Bytes::copy_from_slice(&message)).unwrap();
    assert_eq!((scanned.id.as_str(), scanned.input_count()), ("a", 1));
    let body = framed(0, &message);
    let id = crate::proxy::request_id::captured_request_id(
        &captured(vec![Bytes::from(body.clone())]),
        None,
        1 << 20,
    );
    assert_eq!(id.as_deref(), Some("a"));
    assert_eq!(
        crate::proxy::request_id::head_id(&body).as_deref(),
        Some("a")
    );
    let first = [&group[..], &message].concat();
    assert_eq!(head_of(&first).map(|h| h.id).as_deref(), Some("a"));
    let body = framed(0, &first);
    assert_eq!(
        crate::proxy::request_id::id_in_chunks(&[Bytes::from(body)], 5).as_deref(),
        Some("a")
    );
}
