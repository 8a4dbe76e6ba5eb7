//! What a state file copies from the one before it: the entries of a repeated header field
//! that did not change since, byte for byte, instead of encoding them again. Most entries of
//! the join table (a held feature log, an impression waiting for its label window) wait
//! unchanged through many commits; encoding each at every commit cost more than the commit's
//! new rows.

use prost::encoding::{self, WireType};

/// Where an entry's message sits in the previous snapshot's bytes of its field, while no field
/// of it that a state file keeps has changed: its start and length.
pub(super) type Encoded = Option<(u32, u32)>;

/// Appends one entry of the repeated message field `field` to `out`: the bytes at `encoded` in
/// `last` (the previous snapshot's bytes of the same field) when there are some, else the
/// message that `body` writes into `scratch`. Returns where the entry now sits in `out`, for
/// the next snapshot.
pub(super) fn copy_or_encode(
    encoded: Encoded,
    last: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    field: u32,
    body: impl FnOnce(&mut Vec<u8>),
) -> Encoded {
    let start = out.len();
    match encoded.and_then(|(at, len)| last.get(at as usize..at as usize + len as usize)) {
        Some(bytes) => out.extend_from_slice(bytes),
        None => {
            scratch.clear();
            body(scratch);
            encoding::encode_key(field, WireType::LengthDelimited, out);
            encoding::encode_varint(scratch.len() as u64, out);
            out.extend_from_slice(scratch);
        }
    }
    // Past 4 GiB of entries an entry is simply encoded again next time.
    u32::try_from(start)
        .ok()
        .zip(u32::try_from(out.len() - start).ok())
}
