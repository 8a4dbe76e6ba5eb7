//! Gzip and deflate: `unframe` and `inflate_http`.

use std::io::Read;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::config;
use super::generators::{chunked, cuts, framed, gzip, mutate, mutations, zlib};
use crate::extract::framing::{Unframe, inflate_http, unframe};

/// What flate2's plain readers make of compressed bytes: the first member (or zlib stream)
/// and whether bytes follow it, and every member read on (gzip only; `None` for deflate).
struct Inflated {
    first: Option<Vec<u8>>,
    trailing: bool,
    all_members: Option<Vec<u8>>,
}

fn reference_gunzip(body: &[u8]) -> Inflated {
    let mut first = Vec::new();
    let mut reader = flate2::bufread::GzDecoder::new(body);
    let ok = reader.read_to_end(&mut first).is_ok();
    let trailing = !reader.into_inner().is_empty();
    let mut all = Vec::new();
    let all_ok = flate2::read::MultiGzDecoder::new(body)
        .read_to_end(&mut all)
        .is_ok();
    Inflated {
        first: ok.then_some(first),
        trailing,
        all_members: all_ok.then_some(all),
    }
}

fn reference_inflate(body: &[u8]) -> Inflated {
    let mut first = Vec::new();
    let mut reader = flate2::bufread::ZlibDecoder::new(body);
    let ok = reader.read_to_end(&mut first).is_ok();
    Inflated {
        first: ok.then_some(first),
        trailing: !reader.into_inner().is_empty(),
        all_members: None,
    }
}

/// The rule for a compressed body, given what the reference reads of it: one whole stream and
/// nothing after it, inflated to at most `limit` bytes, is read as the reference reads it;
/// past `limit` (as far as the decoder must read to know) it is too large; anything else is
/// malformed. Bytes after the first gzip member are refused even when they are more members
/// (which some servers read on, as `MultiGzDecoder` does, and some refuse): what the model
/// read is not known, so nothing is logged.
fn check_inflated(
    got: Result<Bytes, Unframe>,
    reference: &Inflated,
    limit: usize,
) -> Result<(), TestCaseError> {
    match (&reference.first, reference.trailing) {
        (Some(first), _) if first.len() > limit => {
            prop_assert!(matches!(got, Err(Unframe::TooLarge)), "{:?}", got)
        }
        (Some(first), false) => {
            prop_assert_eq!(got.as_deref().ok(), Some(&first[..]));
            if let Some(all) = &reference.all_members {
                prop_assert_eq!(all, first);
            }
        }
        // Bytes after the stream, or a stream that does not inflate: refused; too large when
        // what inflated before the error already passed the limit.
        _ => prop_assert!(
            matches!(got, Err(Unframe::Malformed | Unframe::TooLarge)),
            "{:?}",
            got
        ),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1024))]

    /// A gRPC body: its one message, inflated when flagged and gzip, whatever the chunks.
    #[test]
    fn unframing_reads_the_message_it_was_made_of(
        message in prop::collection::vec(any::<u8>(), 0..600),
        compressed in any::<bool>(),
        level in 0u32..10,
        encoding in prop::sample::select(vec![None, Some("gzip"), Some("snappy"), Some("deflate")]),
        limit in 0usize..800,
        cuts in cuts(),
    ) {
        let payload = if compressed { gzip(&message, level) } else { message.clone() };
        let body = framed(u8::from(compressed), &payload);
        let got = unframe(chunked(&body, &cuts), encoding, limit, &mut BytesMut::new());
        match (compressed, encoding) {
            // The tap bounds an uncompressed body; unframing does not again.
            (false, _) => prop_assert_eq!(got.as_deref().ok(), Some(&message[..])),
            (true, Some("gzip")) => check_inflated(got, &reference_gunzip(&payload), limit)?,
            (true, _) => prop_assert!(matches!(got, Err(Unframe::Compression)), "{:?}", got),
        }
    }

    /// The same bodies changed at random (a length that disagrees, a flag of 2, a corrupt or
    /// extended gzip stream): never a panic, and never a message but the one the reference
    /// reads from exactly the bytes the prefix says.
    #[test]
    fn mutated_grpc_bodies_are_refused_or_read_as_the_reference_reads_them(
        message in prop::collection::vec(any::<u8>(), 0..300),
        level in 0u32..10,
        compressed in any::<bool>(),
        second_member in prop::option::of(prop::collection::vec(any::<u8>(), 0..20)),
        limit in 0usize..400,
        mutations in mutations(),
        mutated in any::<bool>(),
        cuts in cuts(),
    ) {
        let mut payload = if compressed { gzip(&message, level) } else { message.clone() };
        if let Some(second) = &second_member {
            payload.extend(gzip(second, level));
        }
        let mut body = framed(u8::from(compressed), &payload);
        if mutated {
            mutate(&mut body, &mutations);
        }
        let got = unframe(chunked(&body, &cuts), Some("gzip"), limit, &mut BytesMut::new());
        let (flag, len) = match body.as_slice() {
            [flag, a, b, c, d, ..] => (*flag, u32::from_be_bytes([*a, *b, *c, *d]) as usize),
            _ => return {
                prop_assert!(matches!(got, Err(Unframe::Malformed)), "{:?}", got);
                Ok(())
            },
        };
        let rest = &body[5..];
        if rest.len() != len {
            prop_assert!(matches!(got, Err(Unframe::Malformed)), "{:?}", got);
        } else if flag == 0 {
            prop_assert_eq!(got.as_deref().ok(), Some(rest));
        } else if flag == 1 {
            check_inflated(got, &reference_gunzip(rest), limit)?;
        } else {
            prop_assert!(matches!(got, Err(Unframe::Compression)), "{:?}", got);
        }
    }

    /// An HTTP body: as it is without a Content-Encoding (or identity), inflated for gzip and
    /// deflate (in any case, spaces around), refused for any other.
    #[test]
    fn http_bodies_inflate_as_the_reference_reads_them(
        data in prop::collection::vec(any::<u8>(), 0..600),
        level in 0u32..10,
        encoding in prop::sample::select(vec![
            None, Some(""), Some("identity"), Some("gzip"), Some(" GZip "), Some("deflate"),
            Some("Deflate"), Some("br"), Some("x-gzip"),
        ]),
        limit in 0usize..800,
        extra in prop::option::of(prop::collection::vec(any::<u8>(), 0..20)),
        mutations in mutations(),
        mutated in any::<bool>(),
        cuts in cuts(),
    ) {
        let kind = encoding.map(|e| e.trim().to_ascii_lowercase());
        let mut body = match kind.as_deref() {
            Some("gzip") => gzip(&data, level),
            Some("deflate") => zlib(&data, level),
            _ => data.clone(),
        };
        // A second gzip member, or bytes after the stream.
        match (&extra, kind.as_deref()) {
            (Some(extra), Some("gzip")) => body.extend(gzip(extra, level)),
            (Some(extra), _) => body.extend_from_slice(extra),
            (None, _) => {}
        }
        if mutated {
            mutate(&mut body, &mutations);
        }
        let got = inflate_http(chunked(&body, &cuts), encoding, limit, &mut BytesMut::new());
        match kind.as_deref() {
            None | Some("" | "identity") => prop_assert_eq!(got.as_deref().ok(), Some(&body[..])),
            Some("gzip") => check_inflated(got, &reference_gunzip(&body), limit)?,
            Some("deflate") => check_inflated(got, &reference_inflate(&body), limit)?,
            Some(_) => prop_assert!(matches!(got, Err(Unframe::Compression)), "{:?}", got),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What the properties found, kept as the exact inputs.

/// Bytes after the compressed stream of an HTTP body (a second gzip member, or anything after
/// a zlib stream) were ignored, the first member read as the body; servers differ on them, so
/// the body is refused as a gRPC message with a second member is.
#[test]
fn an_http_body_with_bytes_after_its_compressed_stream_is_refused() {
    let body = br#"{"inputs":[]}"#;
    let read = |bytes: Vec<u8>, encoding| {
        inflate_http(
            vec![Bytes::from(bytes)],
            Some(encoding),
            1 << 20,
            &mut BytesMut::new(),
        )
    };
    assert_eq!(read(gzip(body, 6), "gzip").ok().as_deref(), Some(&body[..]));
    assert_eq!(
        read(zlib(body, 6), "deflate").ok().as_deref(),
        Some(&body[..])
    );
    let two_members = [gzip(body, 6), gzip(b"", 6)].concat();
    assert!(matches!(read(two_members, "gzip"), Err(Unframe::Malformed)));
    let after_zlib = [zlib(body, 6), b"x".to_vec()].concat();
    assert!(matches!(
        read(after_zlib, "deflate"),
        Err(Unframe::Malformed)
    ));
    // Too large is still said first.
    let two_members = [gzip(body, 6), gzip(b"", 6)].concat();
    let small = inflate_http(
        vec![Bytes::from(two_members)],
        Some("gzip"),
        4,
        &mut BytesMut::new(),
    );
    assert!(matches!(small, Err(Unframe::TooLarge)));
}
