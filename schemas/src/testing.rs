//! What the property tests of every decoder of these schemas share (feature `testing`, and
//! this crate's own tests): their proptest configuration, random changes to an encoding, and
//! encoded fields put in another order that protobuf readers must read the same.

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed};

/// `cases` cases (or `PROPTEST_CASES`), from the fixed `seed` unless `PROPTEST_RNG_SEED` is
/// set: CI runs the same cases every time, and a longer local run can explore others. No
/// regression files: a case found is kept as a unit test next to the decoder it broke.
pub fn config(cases: u32, seed: u64) -> Config {
    let mut config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    if let Some(n) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        config.cases = n;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(seed);
    }
    config
}

/// One change to an encoding: mostly small ones to lengths, tags and counts, which move fields.
#[derive(Debug, Clone)]
pub enum Mutation {
    Set(Index, u8),
    Add(Index, u8),
    Flip(Index, u8),
    Insert(Index, u8),
    Remove(Index),
    Truncate(Index),
}

/// One [`Mutation`], small changes weighted up.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 1u8..4).prop_map(|(i, d)| Mutation::Add(i, d)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<Index>().prop_map(Mutation::Remove),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

/// One to three [`Mutation`]s.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..4)
}

/// Applies `mutations` to `bytes` in order (none to an empty encoding).
pub fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
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

/// Encoded `(field number, field)`s in another order that keeps each field number's
/// occurrences in theirs (a scalar's last occurrence wins, a repeated field's elements are in
/// order, messages merge in order): the message a protobuf reader reads is the same.
pub fn interleaved(fields: Vec<(u32, Vec<u8>)>, rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut by_number: BTreeMap<u32, VecDeque<Vec<u8>>> = BTreeMap::new();
    for (n, f) in fields {
        by_number.entry(n).or_default().push_back(f);
    }
    let mut out = Vec::new();
    while !by_number.is_empty() {
        let pick = rng.usize(..by_number.len());
        let Some((&n, queue)) = by_number.iter_mut().nth(pick) else {
            break;
        };
        if let Some(f) = queue.pop_front() {
            out.extend(f);
        }
        if queue.is_empty() {
            by_number.remove(&n);
        }
    }
    out
}
