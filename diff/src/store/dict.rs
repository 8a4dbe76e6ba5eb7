//! The distinct values of a text feature of the offline side, by code.

use hashbrown::HashTable;

use crate::keys;

/// The distinct values of a text feature, by code.
#[derive(Debug, Default)]
pub(crate) struct Dict {
    bytes: Vec<u8>,
    pub(super) ends: Vec<usize>,
    table: HashTable<u32>,
    /// Where each value first appears: (work unit << 32) | row in the unit.
    pub(super) first: Vec<u64>,
    /// Rows holding each value.
    pub(super) counts: Vec<u64>,
}

fn dict_value<'a>(bytes: &'a [u8], ends: &[usize], c: u32) -> &'a [u8] {
    let c = c as usize;
    let start = if c == 0 { 0 } else { ends[c - 1] };
    &bytes[start..ends[c]]
}

impl Dict {
    #[inline]
    pub(crate) fn value(&self, c: u32) -> &[u8] {
        dict_value(&self.bytes, &self.ends, c)
    }

    /// The code of `v`, if the offline side holds it.
    pub(crate) fn get(&self, v: &[u8]) -> Option<u32> {
        let h = keys::hash_encoded(v);
        self.table.find(h, |&c| self.value(c) == v).copied()
    }

    /// The code of `v`, added if new; `at` is where it appears and `rows` how many times.
    pub(super) fn intern(&mut self, v: &[u8], at: u64, rows: u64) -> u32 {
        let h = keys::hash_encoded(v);
        let Dict {
            bytes,
            ends,
            table,
            first,
            counts,
        } = self;
        let c = match table.find(h, |&c| dict_value(bytes, ends, c) == v) {
            Some(&c) => c,
            None => {
                let c = ends.len() as u32;
                bytes.extend_from_slice(v);
                ends.push(bytes.len());
                first.push(u64::MAX);
                counts.push(0);
                table.insert_unique(h, c, |&o| keys::hash_encoded(dict_value(bytes, ends, o)));
                c
            }
        };
        let c_ = c as usize;
        first[c_] = first[c_].min(at);
        counts[c_] += rows;
        c
    }
}
