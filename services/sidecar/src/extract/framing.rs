//! The bodies of a captured call as the model server read them: a unary gRPC body's one
//! message (unframed, gzip-inflated when flagged) and an HTTP body inflated per its
//! `Content-Encoding`, plus the cheap looks at a request's first chunk that the proxies take on
//! the call's path (its prefix, the model it names). Both the proxies and the publisher threads
//! read bodies this way, so that the id a caller gets back is the one its record carries.

use std::io::Read;

use bytes::{Buf, Bytes, BytesMut};
use featurelog_schemas::wire::{self, WireType, model_infer_request};

/// A gRPC body's prefix (compressed flag, message length) and the rest of its first non-empty
/// chunk, which is where the message starts.
pub(crate) fn frame_head(chunks: &[Bytes]) -> Option<(u8, usize, &[u8])> {
    let first = chunks.iter().find(|c| !c.is_empty())?;
    let (&[flag, a, b, c, d], rest) = first.split_first_chunk::<5>()?;
    Some((flag, u32::from_be_bytes([a, b, c, d]) as usize, rest))
}

/// The keys of a request's `model_name` and `model_version`, length-delimited: one byte each.
const NAME_KEY: u8 = wire::key(model_infer_request::MODEL_NAME, WireType::LengthDelimited) as u8;
const VERSION_KEY: u8 = wire::key(
    model_infer_request::MODEL_VERSION,
    WireType::LengthDelimited,
) as u8;

/// The model name and version of an uncompressed request whose message starts with them, as
/// encoders write fields in order, read from its first chunk (nearly always the whole body);
/// `None` when it does not, or when the chunk ends before the message does and right after
/// those fields (the next chunk may name the version), and the publisher thread's full decode
/// decides. A message that names another model again further on (no encoder does) is judged
/// by its first name here.
pub(crate) fn request_model(chunks: &[Bytes]) -> Option<(&str, &str)> {
    let (0, len, rest) = crate::extract::framing::frame_head(chunks)? else {
        return None;
    };
    // Only the message's own bytes.
    let whole = rest.len() >= len;
    let mut rest = rest.get(..len).unwrap_or(rest);
    let (mut name, mut version) = (None, "");
    // model_name and model_version, both length-delimited.
    while let Some(&key @ (NAME_KEY | VERSION_KEY)) = rest.first() {
        rest = &rest[1..];
        let text = std::str::from_utf8(wire::length_delimited(&mut rest).ok()?).ok()?;
        if key == NAME_KEY {
            name = Some(text);
        } else {
            version = text;
        }
    }
    if rest.is_empty() && !whole {
        return None;
    }
    Some((name?, version))
}

/// Why a gRPC body could not be turned into one message.
#[derive(Debug)]
pub(crate) enum Unframe {
    Malformed,
    TooLarge,
    Compression,
}

/// The chunks as one buffer. `scratch` is the thread's reusable buffer: once the previous
/// call's slices are dropped, `reserve` reclaims it, so a large request does not cost a fresh
/// allocation (and its page faults: perf showed them at a tenth of the publisher's time).
fn concat(chunks: Vec<Bytes>, scratch: &mut BytesMut) -> Bytes {
    if chunks.len() == 1 {
        return chunks.into_iter().next().unwrap_or_default();
    }
    scratch.clear();
    scratch.reserve(chunks.iter().map(Bytes::len).sum());
    for c in chunks {
        scratch.extend_from_slice(&c);
    }
    scratch.split().freeze()
}

/// The one message of a unary gRPC body: a 5-byte prefix (compressed flag, big-endian length)
/// and the message, gzip-inflated when flagged.
pub(crate) fn unframe(
    chunks: Vec<Bytes>,
    encoding: Option<&str>,
    limit: usize,
    scratch: &mut BytesMut,
) -> Result<Bytes, Unframe> {
    let mut body = concat(chunks, scratch);
    if body.len() < 5 {
        return Err(Unframe::Malformed);
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if body.len() != len {
        return Err(Unframe::Malformed);
    }
    match (compressed, encoding) {
        (0, _) => Ok(body),
        (1, Some("gzip")) => {
            let mut out = Vec::new();
            let mut decoder = flate2::bufread::GzDecoder::new(&body[..]).take(limit as u64 + 1);
            decoder
                .read_to_end(&mut out)
                .map_err(|_| Unframe::Malformed)?;
            if out.len() > limit {
                return Err(Unframe::TooLarge);
            }
            // Bytes after the first gzip member: some servers read them as more of the message
            // (a second member), some refuse the call, so what the model read is unknown.
            if !decoder.into_inner().into_inner().is_empty() {
                return Err(Unframe::Malformed);
            }
            Ok(Bytes::from(out))
        }
        _ => Err(Unframe::Compression),
    }
}

/// An HTTP body as the model server read it: inflated per its `Content-Encoding` (gzip and
/// deflate, as Triton's HTTP clients send), at most `limit` bytes.
pub(crate) fn inflate_http(
    chunks: Vec<Bytes>,
    encoding: Option<&str>,
    limit: usize,
    scratch: &mut BytesMut,
) -> Result<Bytes, Unframe> {
    let body = concat(chunks, scratch);
    let mut out = Vec::new();
    // Whether the compressed stream is all of the body.
    let read = match encoding.map(str::trim) {
        None | Some("" | "identity") => return Ok(body),
        Some(e) if e.eq_ignore_ascii_case("gzip") => {
            let mut decoder = flate2::bufread::GzDecoder::new(&body[..]).take(limit as u64 + 1);
            (decoder.read_to_end(&mut out)).map(|_| decoder.into_inner().into_inner().is_empty())
        }
        Some(e) if e.eq_ignore_ascii_case("deflate") => {
            let mut decoder = flate2::bufread::ZlibDecoder::new(&body[..]).take(limit as u64 + 1);
            (decoder.read_to_end(&mut out)).map(|_| decoder.into_inner().into_inner().is_empty())
        }
        Some(_) => return Err(Unframe::Compression),
    };
    let whole = read.map_err(|_| Unframe::Malformed)?;
    if out.len() > limit {
        return Err(Unframe::TooLarge);
    }
    // Bytes after the first gzip member or the zlib stream: as for a gRPC message (`unframe`),
    // servers differ on them (more members, or an error), so what the model read is unknown.
    if !whole {
        return Err(Unframe::Malformed);
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn http_bodies_are_inflated_as_their_content_encoding_says() {
        use std::io::Write;
        let body = br#"{"inputs":[]}"#.repeat(50);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&body).unwrap();
        let gz = gz.finish().unwrap();
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(&body).unwrap();
        let zlib = zlib.finish().unwrap();
        let read = |bytes: &[u8], encoding, limit| {
            // In two chunks, as a body arrives.
            let (a, b) = bytes.split_at(bytes.len() / 2);
            let chunks = vec![Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)];
            inflate_http(chunks, encoding, limit, &mut BytesMut::new())
        };
        for (bytes, encoding) in [
            (&body[..], None),
            (&body[..], Some("identity")),
            (&gz[..], Some("gzip")),
            (&gz[..], Some("GZIP")),
            (&zlib[..], Some("deflate")),
        ] {
            assert_eq!(
                &read(bytes, encoding, 1 << 20).unwrap()[..],
                &body[..],
                "{encoding:?}"
            );
        }
        assert!(matches!(
            read(&gz, Some("gzip"), 100),
            Err(Unframe::TooLarge)
        ));
        assert!(matches!(
            read(&gz, Some("br"), 1 << 20),
            Err(Unframe::Compression)
        ));
        assert!(matches!(
            read(&body, Some("gzip"), 1 << 20),
            Err(Unframe::Malformed)
        ));
    }

    /// A gRPC-framed `message`, split across two chunks.
    pub(crate) fn frame(message: &[u8]) -> Vec<Bytes> {
        let mut out = vec![0u8];
        out.extend((message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        // Split across chunks, as HTTP/2 data frames may be.
        let (a, b) = out.split_at(3);
        vec![Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)]
    }

    #[test]
    fn split_bodies_are_joined_and_the_buffer_reused() {
        let mut scratch = BytesMut::new();
        for _ in 0..3 {
            let whole = frame(&[7u8; 1000]).concat();
            let chunks: Vec<Bytes> = whole.chunks(300).map(Bytes::copy_from_slice).collect();
            let body = unframe(chunks, None, 2000, &mut scratch).unwrap();
            assert_eq!(&body[..], &[7u8; 1000][..]);
        }
    }

    #[test]
    fn unframing_checks_the_length_and_inflates_gzip() {
        assert_eq!(
            unframe(frame(b"hello"), None, 100, &mut BytesMut::new()).unwrap(),
            "hello"
        );
        let mut short = frame(b"hello");
        short.pop();
        assert!(matches!(
            unframe(short, None, 100, &mut BytesMut::new()),
            Err(Unframe::Malformed)
        ));

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"hello").unwrap();
        let gz = gz.finish().unwrap();
        let mut framed = vec![1u8];
        framed.extend((gz.len() as u32).to_be_bytes());
        framed.extend(gz);
        let framed = vec![Bytes::from(framed)];
        assert_eq!(
            unframe(framed.clone(), Some("gzip"), 100, &mut BytesMut::new()).unwrap(),
            "hello"
        );
        assert!(matches!(
            unframe(framed.clone(), Some("gzip"), 3, &mut BytesMut::new()),
            Err(Unframe::TooLarge)
        ));
        assert!(matches!(
            unframe(framed, Some("snappy"), 100, &mut BytesMut::new()),
            Err(Unframe::Compression)
        ));
    }

    #[test]
    fn a_gzip_body_with_a_second_member_is_not_read_as_its_first() {
        // Servers differ on what follows the first member (grpc-go reads it as more of the
        // message, grpc-core refuses the call): what the model read is unknown, so no record.
        let member = |text: &[u8]| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, text).unwrap();
            gz.finish().unwrap()
        };
        let mut two = member(b"model a");
        two.extend(member(b"model b"));
        let mut framed = vec![1u8];
        framed.extend((two.len() as u32).to_be_bytes());
        framed.extend(two);
        assert!(matches!(
            unframe(
                vec![Bytes::from(framed)],
                Some("gzip"),
                100,
                &mut BytesMut::new()
            ),
            Err(Unframe::Malformed)
        ));
    }
}
