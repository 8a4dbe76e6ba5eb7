//! Bytes changed at random, and the text records and events are made of: what the
//! properties of every decoder share.

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

pub(super) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 1u8..4).prop_map(|(i, d)| Mutation::Add(i, d)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<Index>().prop_map(Mutation::Remove),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
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

pub(super) fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9_-]{0,6}",
        1 => "\\PC{0,4}",
    ]
}
