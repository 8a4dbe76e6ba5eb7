//! The mismatching value pairs of a feature, counted by their encodings within a bounded
//! number of distinct pairs, each with its class, the struct fields its values differ in and
//! a few example keys.

use hashbrown::HashMap;

use crate::values::{self, Owned, Val};

/// Distinct pairs kept per feature before the rarest are dropped (then counts of the kept
/// pairs are lower bounds and the report says so).
pub(crate) const PAIR_CAP: usize = 4096;
/// Example keys kept per pair.
const EXAMPLES: usize = 3;

#[derive(Debug, Clone, Default)]
pub(crate) struct PairEntry {
    pub(crate) count: u64,
    pub(crate) class: u16,
    /// The struct fields (JSON object fields) in which the two values differ.
    pub(crate) fields: Box<[Box<str>]>,
    /// Example keys by [`offer_example`].
    pub(crate) examples: Vec<(u64, String)>,
}

/// Offers the key of hash `hash` (rendered by `key`, called only when it may be kept) to
/// `list`, which keeps the `cap` distinct keys of smallest (hash, text), in that order. The
/// choice depends on the set of keys offered only, not on their order: neither on which
/// thread saw which rows, nor on which of a served key's duplicate rows was compared (a
/// duplicate has the same hash and text, so it is kept once). A key's hash is a fixed function
/// of the key, so the examples are the same every run, and a spread sample of the data rather
/// than the first rows of whichever file was read first.
pub(crate) fn offer_example(
    list: &mut Vec<(u64, String)>,
    cap: usize,
    hash: u64,
    key: impl FnOnce() -> String,
) {
    if cap == 0 || (list.len() >= cap && list.last().is_some_and(|(h, _)| *h < hash)) {
        return;
    }
    let key = key();
    let at = match list.binary_search_by(|(h, k)| (*h, k.as_str()).cmp(&(hash, key.as_str()))) {
        Ok(_) => return, // already kept
        Err(at) => at,
    };
    if at < cap {
        list.insert(at, (hash, key));
        list.truncate(cap);
    }
}

/// Counts of mismatching (served, offline) pairs, keyed by their encodings.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pairs {
    pub(crate) map: HashMap<Box<[u8]>, PairEntry>,
    /// Some pairs were dropped to stay within [`PAIR_CAP`].
    pub(crate) truncated: bool,
    scratch: Vec<u8>,
}

impl Pairs {
    /// Counts one pair, of the key of hash `hash` rendered by `key`, without counting fields.
    #[cfg(test)]
    fn add(&mut self, s: Val<'_>, o: Val<'_>, hash: u64, key: impl FnOnce() -> String) -> u16 {
        self.count(s, o, hash, key, &mut HashMap::new())
    }

    /// Counts one pair, of the key of hash `hash` rendered by `key`, and the struct fields in
    /// which its values differ into `fields`; returns its class.
    pub(super) fn count(
        &mut self,
        s: Val<'_>,
        o: Val<'_>,
        hash: u64,
        key: impl FnOnce() -> String,
        fields: &mut HashMap<Box<str>, u64>,
    ) -> u16 {
        self.scratch.clear();
        let mut tmp = std::mem::take(&mut self.scratch);
        tmp.extend_from_slice(&[0; 4]);
        s.encode(&mut tmp);
        let n = (tmp.len() - 4) as u32;
        tmp[..4].copy_from_slice(&n.to_le_bytes());
        o.encode(&mut tmp);
        let count_fields = |differ: &[Box<str>], fields: &mut HashMap<Box<str>, u64>| {
            for f in differ {
                match fields.get_mut(f) {
                    Some(n) => *n += 1,
                    None => {
                        fields.insert(f.clone(), 1);
                    }
                }
            }
        };
        let class = if let Some(e) = self.map.get_mut(tmp.as_slice()) {
            e.count += 1;
            offer_example(&mut e.examples, EXAMPLES, hash, key);
            count_fields(&e.fields, fields);
            e.class
        } else {
            let (a, b) = split(&tmp);
            let (a, b) = (values::decode(a), values::decode(b));
            let class = values::classify(&a, &b);
            let differ: Box<[Box<str>]> = values::differing_fields(&a, &b)
                .into_iter()
                .map(String::into_boxed_str)
                .collect();
            count_fields(&differ, fields);
            self.map.insert(
                tmp.as_slice().into(),
                PairEntry {
                    count: 1,
                    class,
                    fields: differ,
                    examples: vec![(hash, key())],
                },
            );
            if self.map.len() > PAIR_CAP {
                self.prune();
            }
            class
        };
        self.scratch = tmp;
        class
    }

    /// Drops the less frequent half: keeps every pair counted more often than the median
    /// count, and pairs at the median (ties, arbitrary ones) until half the cap is kept. When
    /// every count ties (all 1, the usual case for distinct values) that is half the cap.
    fn prune(&mut self) {
        let mut counts: Vec<u64> = self.map.values().map(|e| e.count).collect();
        let mid = counts.len() / 2;
        let (_, &mut cut, above) = counts.select_nth_unstable(mid);
        let above = above.iter().filter(|&&c| c > cut).count();
        let mut ties = (PAIR_CAP / 2).saturating_sub(above);
        self.map.retain(|_, e| {
            if e.count > cut {
                true
            } else if e.count == cut && ties > 0 {
                ties -= 1;
                true
            } else {
                false
            }
        });
        self.truncated = true;
    }

    pub(super) fn merge(&mut self, other: Pairs) {
        self.truncated |= other.truncated;
        for (k, e) in other.map {
            let mine = self.map.entry(k).or_insert_with(|| PairEntry {
                count: 0,
                class: e.class,
                fields: e.fields.clone(),
                examples: Vec::new(),
            });
            mine.count += e.count;
            for (h, k) in e.examples {
                offer_example(&mut mine.examples, EXAMPLES, h, || k);
            }
        }
        if self.map.len() > PAIR_CAP {
            self.prune();
        }
    }

    /// The pairs, most frequent first.
    pub(crate) fn top(&self, n: usize) -> Vec<TopPair> {
        let mut all: Vec<(&Box<[u8]>, &PairEntry)> = self.map.iter().collect();
        all.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(b.0)));
        all.into_iter()
            .take(n)
            .map(|(k, e)| {
                let (a, b) = split(k);
                let mut examples: Vec<String> = e.examples.iter().map(|(_, k)| k.clone()).collect();
                examples.sort();
                TopPair {
                    served: values::decode(a),
                    offline: values::decode(b),
                    count: e.count,
                    class: e.class,
                    fields: e.fields.iter().map(|f| f.to_string()).collect(),
                    examples,
                }
            })
            .collect()
    }
}

/// A counted pair, for the report.
#[derive(Debug, Clone)]
pub(crate) struct TopPair {
    pub(crate) served: Owned,
    pub(crate) offline: Owned,
    pub(crate) count: u64,
    pub(crate) class: u16,
    /// The struct fields in which the values differ.
    pub(crate) fields: Vec<String>,
    /// Example keys, sorted.
    pub(crate) examples: Vec<String>,
}

fn split(k: &[u8]) -> (&[u8], &[u8]) {
    let mut w = [0u8; 4];
    w.copy_from_slice(k.get(..4).unwrap_or(&[0; 4]));
    let n = (u32::from_le_bytes(w) as usize).min(k.len().saturating_sub(4));
    let rest = k.get(4..).unwrap_or(&[]);
    rest.split_at(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Example keys are distinct, and the same whatever the order they were seen in and
    /// however the rows were split between threads.
    #[test]
    fn example_keys_are_distinct_and_independent_of_order() {
        let keys: Vec<(u64, String)> = (0..50u64)
            .map(|k| ((k * 0x9e37_79b9) % 101, format!("k{k}")))
            .collect();
        let mut expected = keys.clone();
        expected.sort();
        expected.truncate(EXAMPLES);
        for rotation in [0, 7, 31] {
            for split in [1, 2, 5] {
                let mut order = keys.clone();
                order.rotate_left(rotation);
                // Each key twice, as a served key repeated on another row would be.
                order.extend(keys.iter().rev().cloned());
                let mut parts: Vec<Pairs> = (0..split).map(|_| Pairs::default()).collect();
                for (n, (h, k)) in order.into_iter().enumerate() {
                    parts[n % split].add(Val::Num(1.0), Val::Num(2.0), h, || k);
                }
                let mut all = Pairs::default();
                for p in parts {
                    all.merge(p);
                }
                let top = all.top(1);
                let mut want: Vec<String> = expected.iter().map(|(_, k)| k.clone()).collect();
                want.sort();
                assert_eq!(top[0].examples, want, "rotation {rotation}, {split} parts");
                assert_eq!(top[0].count, 100);
            }
        }
        // The same hash, two keys: both kept, once each.
        let mut list = Vec::new();
        for k in ["b", "a", "b", "a"] {
            offer_example(&mut list, 3, 5, || k.to_owned());
        }
        assert_eq!(list, [(5, "a".to_owned()), (5, "b".to_owned())]);
    }

    #[test]
    fn pairs_keep_the_frequent_ones_when_pruned() {
        let mut p = Pairs::default();
        for _ in 0..10 {
            p.add(Val::Text(b"a"), Val::Text(b"A"), 1, || "k".into());
        }
        for i in 0..(PAIR_CAP * 2) {
            p.add(Val::Num(i as f64), Val::Num(-1.5), i as u64, || "k".into());
        }
        assert!(p.truncated);
        let top = p.top(1);
        assert_eq!(top[0].count, 10);
        assert_eq!(top[0].class, values::CASE);
        assert_eq!(top[0].served, Owned::Text("a".into()));
    }

    /// Every pair distinct (all counts 1): pruning must keep half the cap, not empty the map.
    #[test]
    fn pruning_ties_keeps_half_the_cap() {
        let mut p = Pairs::default();
        for i in 0..=PAIR_CAP {
            p.add(Val::Num(i as f64), Val::Num(-0.5), i as u64, || {
                format!("k{i}")
            });
        }
        assert!(p.truncated);
        assert_eq!(p.map.len(), PAIR_CAP / 2);
        assert_eq!(p.top(10).len(), 10);
        // More after the prune are counted as usual.
        p.add(Val::Num(0.25), Val::Num(-0.5), 7, || "x".into());
        assert_eq!(p.map.len(), PAIR_CAP / 2 + 1);

        // Pairs above the median stay whatever the ties; ties fill up to half the cap.
        let mut p = Pairs::default();
        for i in 0..PAIR_CAP / 4 {
            for _ in 0..2 {
                p.add(Val::Num(i as f64), Val::Num(-1.5), i as u64, || "a".into());
            }
        }
        for i in 0..PAIR_CAP {
            p.add(Val::Num(i as f64), Val::Num(-2.5), i as u64, || "b".into());
        }
        assert!(p.truncated);
        let twice = p.map.values().filter(|e| e.count == 2).count();
        assert_eq!(twice, PAIR_CAP / 4);
        assert!(p.map.len() >= PAIR_CAP / 2, "{}", p.map.len());

        // Merging two full maps of distinct pairs keeps half the cap too.
        let (mut a, mut b) = (Pairs::default(), Pairs::default());
        for i in 0..PAIR_CAP {
            a.add(Val::Num(i as f64), Val::Num(1.5), i as u64, || "a".into());
            b.add(Val::Num(i as f64), Val::Num(2.5), i as u64, || "b".into());
        }
        a.merge(b);
        assert!(a.truncated);
        assert_eq!(a.map.len(), PAIR_CAP / 2);
    }
}
