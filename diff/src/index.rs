//! The offline side's key index: open addressing with linear probing over flat `u64` slots,
//! in hash partitions built by the threads in parallel. A slot holds the top 32 bits of the
//! key's hash (its tag) and the row (plus one; 0 is empty), so a probe reads one slot (one
//! cache miss) and only a row whose tag matches is compared by key (hashbrown's table keeps
//! tags and rows apart: two misses per probe on a 10M-row side).
//!
//! The tag alone places a key: its top bits choose the partition, its low bits the slot. So
//! the offline side keeps four bytes of hash per row, and building a partition reads its
//! rows' tags from one list, in order.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bits of the tag that choose the partition.
const PARTITION_BITS: u32 = 8;
/// Hash partitions. Each is built whole before the next, from the list of its rows: a
/// 10M-row side's partition is then 512 kB of slots, which stay in cache while its rows go
/// in (inserting into one table of 128 MB was a cache miss per row).
pub(crate) const PARTITIONS: usize = 1 << PARTITION_BITS;

/// The tag of a key hash: its top 32 bits.
#[inline]
pub(crate) fn tag(h: u64) -> u32 {
    (h >> 32) as u32
}

#[inline]
fn partition(t: u32) -> usize {
    (t >> (32 - PARTITION_BITS)) as usize
}

/// A built partition: its number, its slots, and its rows left out as duplicates.
type Built = (usize, Vec<u64>, Vec<u32>);

/// The keys of rows `0..rows`, by hash.
#[derive(Debug, Default)]
pub(crate) struct Index {
    tables: Vec<Vec<u64>>,
}

impl Index {
    /// Indexes the rows whose tag `tag(row)` is `Some` (rows of null keys are left out), the
    /// first row of each key only: `same(a, b)` says whether rows `a` and `b` have the same
    /// key. Returns the index and the rows left out as later rows of a key already indexed, in
    /// row order. `threads` threads build the partitions, each partition by one thread in row
    /// order, so the result does not depend on the threads.
    pub(crate) fn build(
        rows: usize,
        tag: &(dyn Fn(usize) -> Option<u32> + Sync),
        same: &(dyn Fn(u32, u32) -> bool + Sync),
        threads: usize,
    ) -> (Index, Vec<u32>) {
        // Each partition's rows with their tags, in row order.
        let mut per = vec![0usize; PARTITIONS];
        for r in 0..rows {
            if let Some(t) = tag(r) {
                per[partition(t)] += 1;
            }
        }
        let mut lists: Vec<Vec<u64>> = per.iter().map(|&n| Vec::with_capacity(n)).collect();
        for r in 0..rows {
            if let Some(t) = tag(r) {
                lists[partition(t)].push(((r as u64) << 32) | u64::from(t));
            }
        }
        let next = AtomicUsize::new(0);
        let built: Vec<Vec<Built>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads.clamp(1, PARTITIONS))
                .map(|_| {
                    let (lists, next) = (&lists, &next);
                    scope.spawn(move || {
                        let mut mine = Vec::new();
                        loop {
                            let p = next.fetch_add(1, Ordering::Relaxed);
                            let Some(list) = lists.get(p) else { break };
                            let mut table = vec![0u64; capacity(list.len())];
                            let mut dups = Vec::new();
                            for &e in list {
                                let (r, t) = ((e >> 32) as u32, e as u32);
                                if !insert(&mut table, t, r, same) {
                                    dups.push(r);
                                }
                            }
                            mine.push((p, table, dups));
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        drop(lists);
        let mut tables: Vec<Vec<u64>> = vec![Vec::new(); PARTITIONS];
        let mut dups = Vec::new();
        let mut got = 0;
        for (p, table, d) in built.into_iter().flatten() {
            tables[p] = table;
            dups.extend(d);
            got += 1;
        }
        if got != PARTITIONS {
            // A builder panicked: an empty index finds nothing, and the caller checks.
            return (Index::default(), Vec::new());
        }
        dups.sort_unstable();
        (Index { tables }, dups)
    }

    /// Whether every partition was built.
    pub(crate) fn is_complete(&self) -> bool {
        self.tables.len() == PARTITIONS
    }

    /// The slot where the probe for hash `h` starts: read apart from [`Index::find`] so that
    /// a batch's slots are all requested from memory before any is needed (their loads
    /// overlap).
    #[inline]
    pub(crate) fn first_slot(&self, h: u64) -> u64 {
        let t = tag(h);
        match self.tables.get(partition(t)) {
            Some(table) if !table.is_empty() => table[t as usize & (table.len() - 1)],
            _ => 0,
        }
    }

    /// The row indexed for hash `h` whose key `is(row)` says is the one sought; `first` is
    /// [`Index::first_slot`] of `h`.
    #[inline]
    pub(crate) fn find(&self, h: u64, first: u64, is: impl Fn(u32) -> bool) -> Option<u32> {
        let t = tag(h);
        let table = self.tables.get(partition(t))?;
        if table.is_empty() {
            return None;
        }
        let mask = table.len() - 1;
        let mut pos = t as usize & mask;
        let mut s = first;
        loop {
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 == t {
                let row = (s as u32).wrapping_sub(1);
                if is(row) {
                    return Some(row);
                }
            }
            pos = (pos + 1) & mask;
            s = table[pos];
        }
    }
}

/// Slots for `n` keys: a power of two at most 5/8 full, so that probes stay short.
fn capacity(n: usize) -> usize {
    (n * 8 / 5 + 1).next_power_of_two().max(16)
}

/// Inserts row `r` of tag `t`; false when a row of the same key is there already.
fn insert(table: &mut [u64], t: u32, r: u32, same: &(dyn Fn(u32, u32) -> bool + Sync)) -> bool {
    let mask = table.len() - 1;
    let mut pos = t as usize & mask;
    loop {
        let s = table[pos];
        if s == 0 {
            table[pos] = (u64::from(t) << 32) | u64::from(r + 1);
            return true;
        }
        if (s >> 32) as u32 == t && same((s as u32).wrapping_sub(1), r) {
            return false;
        }
        pos = (pos + 1) & mask;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_first_rows_and_reports_later_ones() {
        // Keys: row r has key r % 1000; hashes collide on purpose for keys 0..10 (one hash).
        let key = |r: usize| (r % 1000) as u64;
        let hash = |r: usize| {
            let k = key(r);
            if k < 10 {
                42 << 32
            } else {
                crate::keys::hash_encoded(&k.to_le_bytes())
            }
        };
        let same = |a: u32, b: u32| key(a as usize) == key(b as usize);
        for threads in [1, 2, 3] {
            let (index, dups) = Index::build(3000, &|r| Some(tag(hash(r))), &same, threads);
            assert!(index.is_complete());
            assert_eq!(dups.len(), 2000);
            assert!(dups.iter().all(|&d| d >= 1000));
            for r in 0..1000u32 {
                let h = hash(r as usize);
                let found = index.find(h, index.first_slot(h), |o| same(o, r));
                assert_eq!(found, Some(r), "{threads} threads");
            }
            let h = crate::keys::hash_encoded(b"absent");
            assert_eq!(index.find(h, index.first_slot(h), |_| false), None);
        }
    }
}
