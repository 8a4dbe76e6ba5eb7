//! Bytes changed at random, bodies cut into chunks: what the properties of every decoder
//! share.

use std::io::Write;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::sample::Index;

pub(super) use featurelog_schemas::testing::{Mutation, mutate, mutations};

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
