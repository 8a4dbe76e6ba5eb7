//! The `id` field of a ModelInferRequest read on the call's path, in place and without a full
//! decode, so that a call that names itself gets back the id its record will carry; prost's
//! decode decides whenever the message is unusual.

use bytes::{Buf, Bytes};
use featurelog_schemas::wire::model_infer_request::{ID, MODEL_NAME};
use featurelog_schemas::wire::{self, WireType};
use prost::Message;

use crate::extract::framing::{frame_head, unframe};

use super::tap::Captured;

/// The first fields of a ModelInferRequest: enough to learn whether the request names itself.
/// prost skips the fields it does not declare.
#[derive(Clone, PartialEq, Message)]
pub(super) struct RequestHead {
    #[prost(string, tag = "1")]
    pub(super) model_name: String,
    #[prost(string, tag = "2")]
    pub(super) model_version: String,
    #[prost(string, tag = "3")]
    pub(super) id: String,
}

/// The `id` field of the request a tap captured whole (see `Exchange::peek_request_id`).
pub(crate) fn captured_request_id(
    captured: &Captured,
    encoding: Option<&str>,
    limit: usize,
) -> Option<String> {
    if captured.overflow {
        // Too large to be logged, but the response still gets an `x-request-id` only if
        // the request names itself nowhere: its chunks are gone, its first bytes remain.
        return head_id(&captured.head);
    }
    if captured.chunks.iter().find(|c| !c.is_empty())?.first() == Some(&1) {
        // The id the caller gets back must be the one the record carries: the message as
        // the publisher will read it.
        let message = unframe(
            captured.chunks.clone(),
            encoding,
            limit,
            &mut bytes::BytesMut::new(),
        )
        .ok()?;
        return match request_id(&mut &message[..]) {
            Ok(id) => Some(id),
            Err(Unusual) => RequestHead::decode(&message[..]).ok().map(|h| h.id),
        };
    }
    // Nearly always the whole message is in one chunk: read it as a slice, which perf
    // showed several times cheaper than going field by field through `ChunksBuf`.
    if let Some(message) = contiguous_message(&captured.chunks) {
        return match request_id(&mut &message[..]) {
            Ok(id) => Some(id),
            Err(Unusual) => RequestHead::decode(message).ok().map(|h| h.id),
        };
    }
    let message = || {
        let mut buf = ChunksBuf::new(&captured.chunks);
        if buf.remaining() < 5 || buf.get_u8() != 0 {
            // Compressed requests: the publisher inflates them; here a compressed message
            // gives no cheap answer, so assume there is no id.
            return None;
        }
        let len = buf.get_u32() as usize;
        (len <= buf.remaining()).then(|| buf.take(len))
    };
    match request_id(&mut message()?) {
        Ok(id) => Some(id),
        // Anything unusual: the full decode decides, as the publisher's would.
        Err(Unusual) => RequestHead::decode(message()?).ok().map(|h| h.id),
    }
}

/// The `id` of an uncompressed ModelInferRequest in `chunks` after their first `skip` bytes
/// (a gRPC prefix), read in place; `None` if it does not decode.
pub(crate) fn id_in_chunks(chunks: &[Bytes], skip: usize) -> Option<String> {
    let mut buf = ChunksBuf::new(chunks);
    if buf.remaining() < skip {
        return None;
    }
    buf.advance(skip);
    match request_id(&mut buf) {
        Ok(id) => Some(id),
        Err(Unusual) => {
            let message = chunks.concat();
            RequestHead::decode(message.get(skip..)?).ok().map(|h| h.id)
        }
    }
}

/// The message of an uncompressed gRPC body whose prefix and message sit in its first
/// non-empty chunk.
pub(super) fn contiguous_message(chunks: &[Bytes]) -> Option<&[u8]> {
    match frame_head(chunks)? {
        (0, len, rest) => rest.get(..len),
        _ => None,
    }
}

/// The `id` of a request body of which only the first bytes were kept (it passed the size
/// limit), read from its leading fields: every encoder writes fields in field-number order, so
/// model_name, model_version and id come before the tensors, and the first field past `id`
/// means there is none. `None` when the bytes end before that, or the message is compressed or
/// unusual: the caller then generates an id, as for a request with none.
pub(crate) fn head_id(head: &[u8]) -> Option<String> {
    let ([0, ..], mut buf) = head.split_first_chunk::<5>()? else {
        return None;
    };
    let mut id = String::new();
    let (first, last) = (u64::from(MODEL_NAME), u64::from(ID));
    while !buf.is_empty() {
        let key = wire::read_varint(&mut buf).ok()?;
        match (key >> 3, key & 7) {
            (number, 2) if (first..=last).contains(&number) => {
                let text = std::str::from_utf8(wire::length_delimited(&mut buf).ok()?).ok()?;
                if number == last {
                    text.clone_into(&mut id);
                }
            }
            (number, _) if number > last => return Some(id),
            _ => return None,
        }
    }
    None
}

/// A message [`request_id`] leaves to prost.
pub(super) struct Unusual;

/// The `id` of an encoded ModelInferRequest, as `RequestHead::decode` reads it, for a message
/// whose top-level fields are all well formed and of the usual wire types. The other fields
/// are skipped by their length: this runs on the call's path, and prost's generic skipping of
/// a hundred tensor fields through a chunked buffer cost a few microseconds per call (perf).
pub(super) fn request_id(buf: &mut impl Buf) -> Result<String, Unusual> {
    let varint = |buf: &mut _| prost::encoding::decode_varint(buf).map_err(|_| Unusual);
    let mut id = String::new();
    while buf.has_remaining() {
        // Groups, too, are left to prost.
        let (number, wire) = wire::split_key(varint(buf)?).map_err(|_| Unusual)?;
        match wire {
            WireType::LengthDelimited => {
                let len = usize::try_from(varint(buf)?).map_err(|_| Unusual)?;
                if len > buf.remaining() {
                    return Err(Unusual);
                }
                if number <= ID {
                    // model_name, model_version and id must be UTF-8 for the decode to work;
                    // checked in place when the field is in one chunk, which it nearly always is.
                    if buf.chunk().len() >= len {
                        let text = std::str::from_utf8(&buf.chunk()[..len]).map_err(|_| Unusual)?;
                        if number == ID {
                            text.clone_into(&mut id);
                        }
                        buf.advance(len);
                    } else {
                        let mut field = vec![0; len];
                        buf.copy_to_slice(&mut field);
                        let text = String::from_utf8(field).map_err(|_| Unusual)?;
                        if number == ID {
                            id = text;
                        }
                    }
                } else {
                    buf.advance(len);
                }
            }
            _ if number <= ID => return Err(Unusual),
            WireType::Varint => {
                varint(buf)?;
            }
            WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                let len = if wire == WireType::SixtyFourBit { 8 } else { 4 };
                if len > buf.remaining() {
                    return Err(Unusual);
                }
                buf.advance(len);
            }
        }
    }
    Ok(id)
}

/// A [`Buf`] over a body's chunks, in order, without joining them.
struct ChunksBuf<'a> {
    chunks: &'a [Bytes],
    offset: usize,
    remaining: usize,
}

impl<'a> ChunksBuf<'a> {
    fn new(chunks: &'a [Bytes]) -> Self {
        let mut this = Self {
            chunks,
            offset: 0,
            remaining: chunks.iter().map(Bytes::len).sum(),
        };
        this.advance(0);
        this
    }
}

impl Buf for ChunksBuf<'_> {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.chunks
            .first()
            .and_then(|c| c.get(self.offset..))
            .unwrap_or_default()
    }

    fn advance(&mut self, mut cnt: usize) {
        cnt = cnt.min(self.remaining);
        self.remaining -= cnt;
        while cnt > 0 {
            while self.chunks.first().is_some_and(|c| c.len() == self.offset) {
                self.chunks = &self.chunks[1..];
                self.offset = 0;
            }
            let Some(first) = self.chunks.first() else {
                return;
            };
            let left = first.len() - self.offset;
            if cnt < left {
                self.offset += cnt;
                return;
            }
            cnt -= left;
            self.chunks = &self.chunks[1..];
            self.offset = 0;
        }
        // Skip empty chunks so chunk() is never empty while bytes remain.
        while self.chunks.first().is_some_and(|c| c.len() == self.offset) && self.remaining > 0 {
            self.chunks = &self.chunks[1..];
            self.offset = 0;
        }
    }
}
