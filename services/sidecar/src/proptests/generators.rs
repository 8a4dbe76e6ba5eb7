//! Bytes changed at random, bodies cut into chunks: what the properties of every decoder
//! share.

use std::io::Write;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::sample::Index;

/// One change to an encoding: mostly small ones to lengths, tags and counts, which move fields.
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    Set(Index, u8),
    Add(Index, u8),
    Flip(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 1u8..4).prop_map(|(i, d)| Mutation::Add(i, d)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<Index>().prop_map(Mutation::Remove),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

pub(super) fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..4)
}

pub(super) fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        if bytes.is_empty() {
            return;
        }
        let at = |i: &Index| i.index(bytes.len());
        match m {
            Mutation::Set(i, b) => {
                let at = at(i);
                bytes[at] = *b;
            }
            Mutation::Add(i, d) => {
                let at = at(i);
                bytes[at] = bytes[at].wrapping_add(*d);
            }
            Mutation::Flip(i, bit) => {
                let at = at(i);
                bytes[at] ^= 1 << bit;
            }
            Mutation::Insert(i, b) => {
                let at = at(i);
                bytes.insert(at, *b);
            }
            Mutation::Remove(i) => {
                let at = at(i);
                bytes.remove(at);
            }
            Mutation::Truncate(i) => {
                let at = at(i);
                bytes.truncate(at);
            }
        }
    }
}

/// `body` cut at `cuts` (as HTTP/2 data frames may cut it), with an empty chunk at some cuts.
pub(super) fn chunked(body: &[u8], cuts: &[Index]) -> Vec<Bytes> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for (n, cut) in at.into_iter().enumerate() {
        out.push(Bytes::copy_from_slice(&body[from..cut]));
        if n % 3 == 2 {
            out.push(Bytes::new());
        }
        from = cut;
    }
    out.push(Bytes::copy_from_slice(&body[from..]));
    out
}

pub(super) fn cuts() -> impl Strategy<Value = Vec<Index>> {
    prop::collection::vec(any::<Index>(), 0..4)
}

/// A gRPC message: compressed flag, big-endian length, bytes.
pub(super) fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend((message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

pub(super) fn gzip(data: &[u8], level: u32) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    let _ = gz.write_all(data);
    gz.finish().unwrap_or_default()
}

pub(super) fn zlib(data: &[u8], level: u32) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
    let _ = z.write_all(data);
    z.finish().unwrap_or_default()
}
