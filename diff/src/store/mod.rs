//! The offline side in memory, as the keyed comparison reads it: a fixed-width record per row
//! (the key's canonical encoding, each feature's value, a null bit per feature) and an
//! [`Index`] of the keys.
//!
//! Records rather than columns because of how the served side reads them: a served row whose
//! key is found reads every feature of one offline row, at a random place. A record is two or
//! three cache lines; columns cost a cache miss per feature (20 per row on the benchmark's
//! table, where that made the join the largest part of the diff's time). Values are held as
//! narrow as they come, since every byte of the offline side is memory first touched (page
//! faults: about a second per GB on the benchmark machine): a Float32 column as f32, exact
//! numbers as i64 (the rare one that needs more than 64 bits aside), text as a u32 code into a
//! dictionary per feature, so that comparing and counting text compares integers and each
//! distinct value is held once.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use arrow_array::{BinaryArray, Float64Array};
use hashbrown::HashMap;

use crate::bins::{Binner, exact_f64};
use crate::index::Index;
use crate::keys;
use crate::stats::{CATEGORY_CAP, DistSpec};
use crate::values::{DArr, I128Array, Unit, Val};

mod dict;
mod load;
#[cfg(test)]
mod tests;

pub(crate) use dict::Dict;
pub(crate) use load::load;

/// Row flags: a served row found the row's key.
pub(crate) const MATCHED: u8 = 1;
/// A later row of a key: not indexed, not compared.
pub(crate) const DUPLICATE: u8 = 2;
/// A part of the key is null.
pub(crate) const NULL_KEY: u8 = 4;

/// First byte of a key region whose encoding did not fit: then bytes 4..8 are the work unit
/// and 8..16 the offset of `[len: u32][encoding]` in that unit's overflow bytes. Key
/// encodings start with a part tag (1 to 3), never this.
const OVERFLOW: u8 = 0xFF;
/// The smallest integer of `width` bytes: in an exact slot, a value kept in `Store::big`.
fn big_marker(width: usize) -> i64 {
    match width {
        1 => i8::MIN.into(),
        2 => i16::MIN.into(),
        4 => i32::MIN.into(),
        _ => i64::MIN,
    }
}

/// How a feature's offline values are held.
#[derive(Debug)]
pub(crate) enum Slot {
    /// f64 at this record offset.
    F64(usize),
    /// A Float32 column's values as f32: the comparison's f64 is their exact widening.
    F32(usize),
    /// An exact number (integer, boolean, decimal, time) of this unit, as a little-endian
    /// signed integer of `Store::widths[k]` bytes (as few as the column's Parquet statistics
    /// allow: every byte of the offline side is a byte of memory first touched); the width's
    /// smallest integer stands for a value kept in `Store::big`.
    Exact(usize, Unit),
    /// Text: a u32 code into `Store::dicts[d]`.
    Code(usize, usize),
    /// Anything else (lists): the whole column in its domain, read by row.
    Column(Box<DArr>),
}

/// Where a record's parts are.
#[derive(Debug, Clone, Copy)]
struct Layout {
    width: usize,
    key_cap: usize,
    null_at: usize,
}

/// A feature's slot before loading.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    F64,
    F32,
    /// Of this many bytes.
    Exact(Unit, usize),
    Text,
    Column,
}

/// The offline side in memory.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) rows: usize,
    layout: Layout,
    data: Vec<u8>,
    /// Keys too long for their record, per work unit.
    overflow: Vec<Vec<u8>>,
    pub(crate) slots: Vec<Slot>,
    pub(crate) dicts: Vec<Dict>,
    /// Exact values beyond their slot's width, by (row, feature).
    big: HashMap<(u32, u32), i128>,
    /// Bytes of each exact slot (8 for the other features).
    widths: Vec<usize>,
    pub(crate) index: Index,
    pub(crate) flags: Vec<AtomicU8>,
    /// Null rows per feature.
    pub(crate) nulls: Vec<u64>,
}

/// Buffers of [`Store::bin_rows`], kept across calls: per feature, values and nulls.
#[derive(Default)]
pub(crate) struct Scratch(Vec<Vec<f64>>, Vec<Vec<bool>>);

#[inline]
fn word<const N: usize>(rec: &[u8], off: usize) -> [u8; N] {
    let mut w = [0u8; N];
    w.copy_from_slice(&rec[off..off + N]);
    w
}

impl Store {
    /// Row `row`'s record.
    #[inline]
    pub(crate) fn record(&self, row: u32) -> &[u8] {
        let w = self.layout.width;
        let at = row as usize * w;
        &self.data[at..at + w]
    }

    /// Whether feature `k` of a record is null.
    #[inline]
    pub(crate) fn is_null(&self, rec: &[u8], k: usize) -> bool {
        rec[self.layout.null_at + k / 8] & (1 << (k % 8)) != 0
    }

    #[inline]
    pub(crate) fn f64_at(rec: &[u8], off: usize) -> f64 {
        f64::from_le_bytes(word(rec, off))
    }

    #[inline]
    pub(crate) fn f32_at(rec: &[u8], off: usize) -> f32 {
        f32::from_le_bytes(word(rec, off))
    }

    #[inline]
    pub(crate) fn u32_at(rec: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(word(rec, off))
    }

    /// An exact slot's value (of row `row`, for the rare one beyond i64).
    #[inline]
    pub(crate) fn exact_at(&self, rec: &[u8], off: usize, row: u32, k: usize) -> i128 {
        let width = self.widths[k];
        let v = match width {
            1 => i64::from(i8::from_le_bytes(word(rec, off))),
            2 => i64::from(i16::from_le_bytes(word(rec, off))),
            4 => i64::from(i32::from_le_bytes(word(rec, off))),
            _ => i64::from_le_bytes(word(rec, off)),
        };
        if v == big_marker(width) {
            self.big
                .get(&(row, k as u32))
                .copied()
                .unwrap_or(i128::from(v))
        } else {
            i128::from(v)
        }
    }

    /// Feature `k` of row `row`.
    pub(crate) fn val(&self, row: u32, k: usize) -> Val<'_> {
        let rec = self.record(row);
        if let Some(Slot::Column(d)) = self.slots.get(k) {
            return d.get(row as usize);
        }
        if self.is_null(rec, k) {
            return Val::Null;
        }
        match self.slots.get(k) {
            Some(&Slot::F64(off)) => Val::Num(Self::f64_at(rec, off)),
            Some(&Slot::F32(off)) => Val::Num(f64::from(Self::f32_at(rec, off))),
            Some(&Slot::Exact(off, u)) => Val::Exact(self.exact_at(rec, off, row, k), u),
            Some(&Slot::Code(off, d)) => match self.dicts.get(d) {
                Some(dict) => Val::Text(dict.value(Self::u32_at(rec, off))),
                None => Val::Null,
            },
            Some(Slot::Column(_)) | None => Val::Null,
        }
    }

    /// The encoded key of a record whose key is not null.
    pub(crate) fn key_bytes<'a>(&'a self, rec: &'a [u8]) -> &'a [u8] {
        let region = &rec[..self.layout.key_cap];
        if region[0] != OVERFLOW {
            return region;
        }
        let unit = u32::from_le_bytes(word(region, 4)) as usize;
        let at = u64::from_le_bytes(word(region, 8)) as usize;
        let Some(arena) = self.overflow.get(unit) else {
            return &[];
        };
        let len = u32::from_le_bytes(word(arena, at)) as usize;
        &arena[at + 4..at + 4 + len]
    }

    /// Whether row `row`'s key is the one encoded as `enc` (see [`Keys::encode`]).
    #[inline]
    pub(crate) fn key_is(&self, row: u32, enc: &[u8]) -> bool {
        let rec = self.record(row);
        if rec[0] == OVERFLOW {
            return self.key_bytes(rec) == enc;
        }
        // The encoding is prefix-free and the region zero-padded: a region that starts with
        // the whole of `enc` holds exactly `enc`.
        rec.get(..enc.len()).is_some_and(|r| r == enc) && enc.len() <= self.layout.key_cap
    }

    /// Whether rows `a` and `b` (keys not null) have the same key.
    fn same_key(&self, a: u32, b: u32) -> bool {
        let (ra, rb) = (self.record(a), self.record(b));
        let cap = self.layout.key_cap;
        match (ra[0] == OVERFLOW, rb[0] == OVERFLOW) {
            (false, false) => ra[..cap] == rb[..cap],
            (true, true) => self.key_bytes(ra) == self.key_bytes(rb),
            _ => false,
        }
    }

    /// Row `row`'s key as examples print it.
    pub(crate) fn render_key(&self, row: u32) -> String {
        let rec = self.record(row);
        let enc = self.key_bytes(rec);
        // The region's zero padding is not part of the encoding: decoding stops there.
        keys::render_encoded(enc)
    }

    /// The columns [`DistSpec::from_offline`] derives each feature's bins from: for numbers,
    /// the rows it samples (every `rows / 200_000`th; it then takes every row of this sample,
    /// the same numbers), read a record at a time; for text, the distinct values in order of
    /// first appearance (its bins are the distinct values in that order), up to one more than
    /// it keeps.
    pub(crate) fn spec_columns(&self) -> Vec<DArr> {
        let stride = (self.rows / 200_000).max(1);
        let sampled = self.rows.div_ceil(stride);
        let mut floats: Vec<Vec<Option<f64>>> = vec![Vec::new(); self.slots.len()];
        let mut exact: Vec<Vec<Option<i128>>> = vec![Vec::new(); self.slots.len()];
        for (k, slot) in self.slots.iter().enumerate() {
            match slot {
                Slot::F64(_) | Slot::F32(_) => floats[k].reserve(sampled),
                Slot::Exact(..) => exact[k].reserve(sampled),
                _ => {}
            }
        }
        for r in (0..self.rows).step_by(stride) {
            for (k, slot) in self.slots.iter().enumerate() {
                match (slot, self.val(r as u32, k)) {
                    (Slot::F64(_) | Slot::F32(_), Val::Num(v)) => floats[k].push(Some(v)),
                    (Slot::F64(_) | Slot::F32(_), _) => floats[k].push(None),
                    (Slot::Exact(..), Val::Exact(v, _)) => exact[k].push(Some(v)),
                    (Slot::Exact(..), _) => exact[k].push(None),
                    _ => {}
                }
            }
        }
        let empty = || DArr::Text(BinaryArray::from(Vec::<Option<&[u8]>>::new()));
        self.slots
            .iter()
            .zip(floats.into_iter().zip(exact))
            .map(|(slot, (floats, exact))| match slot {
                Slot::F64(_) | Slot::F32(_) => DArr::Num(floats.into_iter().collect()),
                &Slot::Exact(_, u) => DArr::Exact(exact.into_iter().collect::<I128Array>(), u),
                &Slot::Code(_, d) => {
                    let Some(dict) = self.dicts.get(d) else {
                        return empty();
                    };
                    let mut codes: Vec<u32> = (0..dict.ends.len() as u32).collect();
                    codes.sort_by_key(|&c| dict.first[c as usize]);
                    codes.truncate(CATEGORY_CAP + 1);
                    if codes.is_empty() && self.rows > 0 {
                        // Only nulls: one null row says so (no rows at all is another note).
                        return DArr::Text(BinaryArray::from(vec![None::<&[u8]>]));
                    }
                    DArr::Text(BinaryArray::from_iter_values(
                        codes.iter().map(|&c| dict.value(c)),
                    ))
                }
                Slot::Column(d) => d.as_ref().clone(),
            })
            .collect()
    }

    /// The numeric features (in feature order) and their binners.
    pub(crate) fn numeric(&self, specs: &[DistSpec]) -> (Vec<usize>, Vec<Option<Binner>>) {
        let numeric: Vec<usize> = (0..self.slots.len())
            .filter(|&k| {
                matches!(self.slots[k], Slot::F64(_) | Slot::F32(_) | Slot::Exact(..))
                    && specs.get(k).is_some_and(|s| s.bins() > 0)
            })
            .collect();
        let binners = numeric.iter().map(|&k| Binner::of(&specs[k])).collect();
        (numeric, binners)
    }

    /// The offline side's counts over each feature's bins, as [`DistSpec::count`] counts them
    /// over the whole column: text by code (each code's count binned once), numbers in chunks
    /// of rows read back from the records, the chunks shared by `threads` threads. `matched`:
    /// the counts of [`Store::numeric`]'s features with a binner over the rows the served
    /// pass matched (and binned, while their records were in cache); then only the other
    /// rows are read here.
    pub(crate) fn distributions(
        &self,
        specs: &[DistSpec],
        threads: usize,
        matched: Option<Vec<Vec<u64>>>,
    ) -> Vec<Vec<u64>> {
        let mut out: Vec<Vec<u64>> = specs.iter().map(|s| vec![0; s.bins()]).collect();
        for (k, (spec, counts)) in specs.iter().zip(out.iter_mut()).enumerate() {
            if counts.is_empty() {
                continue;
            }
            match self.slots.get(k) {
                Some(&Slot::Code(_, d)) => {
                    let Some(dict) = self.dicts.get(d) else {
                        continue;
                    };
                    let mut one = vec![0u64; counts.len()];
                    for c in 0..dict.ends.len() as u32 {
                        one.iter_mut().for_each(|x| *x = 0);
                        let v = DArr::Text(BinaryArray::from_iter_values([dict.value(c)]));
                        spec.count(&v, &mut one);
                        if let Some(b) = one.iter().position(|&x| x > 0) {
                            counts[b] += dict.counts[c as usize];
                        }
                    }
                    if let Some(last) = counts.last_mut() {
                        *last += self.nulls[k];
                    }
                }
                Some(Slot::Column(d)) => spec.count(d, counts),
                Some(_) | None => {}
            }
        }
        let (numeric, binners) = self.numeric(specs);
        if numeric.is_empty() {
            return out;
        }
        let skip_matched = matched.is_some();
        if let Some(matched) = matched {
            for ((&k, counts), b) in numeric.iter().zip(matched).zip(&binners) {
                if b.is_some() {
                    for (a, b) in out[k].iter_mut().zip(counts) {
                        *a += b;
                    }
                }
            }
        }
        const CHUNK: usize = 4096;
        let chunks = self.rows.div_ceil(CHUNK);
        let binners = &binners;
        let next = AtomicUsize::new(0);
        let parts: Vec<Vec<Vec<u64>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads.max(1))
                .map(|_| {
                    let (numeric, next) = (&numeric, &next);
                    scope.spawn(move || {
                        let mut mine: Vec<Vec<u64>> =
                            numeric.iter().map(|&k| vec![0; specs[k].bins()]).collect();
                        let mut scratch = Scratch::default();
                        let mut list = Vec::with_capacity(CHUNK);
                        loop {
                            let c = next.fetch_add(1, Ordering::Relaxed);
                            if c >= chunks {
                                break;
                            }
                            let rows = (c * CHUNK) as u32..((c + 1) * CHUNK).min(self.rows) as u32;
                            list.clear();
                            list.extend(rows.clone().filter(|&r| {
                                !skip_matched
                                    || self.flags[r as usize].load(Ordering::Relaxed) & MATCHED == 0
                            }));
                            self.bin_rows(numeric, binners, &list, &mut mine, &mut scratch, |_| {
                                false
                            });
                            for ((&k, counts), binner) in
                                numeric.iter().zip(mine.iter_mut()).zip(binners)
                            {
                                if binner.is_none() {
                                    specs[k].count(&self.chunk(k, rows.clone()), counts);
                                }
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        for part in parts {
            for (&k, counts) in numeric.iter().zip(part) {
                for (a, b) in out[k].iter_mut().zip(counts) {
                    *a += b;
                }
            }
        }
        out
    }

    /// Counts rows `rows` of the numeric features `numeric` that have a binner (but those
    /// whose index in `numeric` is `done`) into their `counts`, as [`DistSpec::count`] would count them as columns: the values of a record
    /// at a time (each record read from memory once, in order), then each feature's values
    /// binned together.
    pub(crate) fn bin_rows(
        &self,
        numeric: &[usize],
        binners: &[Option<Binner>],
        rows: &[u32],
        counts: &mut [Vec<u64>],
        scratch: &mut Scratch,
        done: impl Fn(usize) -> bool,
    ) {
        let fields: Vec<(usize, &Slot, &Binner, usize)> = numeric
            .iter()
            .zip(binners)
            .enumerate()
            .filter(|(at, _)| !done(*at))
            .filter_map(|(at, (&k, b))| Some((k, &self.slots[k], b.as_ref()?, at)))
            .collect();
        if fields.is_empty() {
            return;
        }
        let n = rows.len();
        let Scratch(values, nulls) = scratch;
        values.resize(fields.len(), Vec::new());
        nulls.resize(fields.len(), Vec::new());
        for (v, z) in values.iter_mut().zip(nulls.iter_mut()) {
            v.resize(n, 0.0);
            z.resize(n, false);
        }
        for (i, &r) in rows.iter().enumerate() {
            let rec = self.record(r);
            for (f, &(k, slot, _, _)) in fields.iter().enumerate() {
                nulls[f][i] = self.is_null(rec, k);
                values[f][i] = match *slot {
                    Slot::F64(off) => Self::f64_at(rec, off),
                    Slot::F32(off) => f64::from(Self::f32_at(rec, off)),
                    Slot::Exact(off, u) => exact_f64(self.exact_at(rec, off, r, k), u),
                    _ => 0.0,
                };
            }
        }
        for (f, &(_, _, binner, at)) in fields.iter().enumerate() {
            let nulls = &nulls[f][..n];
            binner.count_floats(&values[f][..n], |i| nulls[i], &mut counts[at]);
        }
    }

    /// Rows `rows` of numeric feature `k` as a column.
    fn chunk(&self, k: usize, rows: std::ops::Range<u32>) -> DArr {
        match self.slots.get(k) {
            Some(&Slot::Exact(_, u)) => DArr::Exact(
                rows.map(|r| match self.val(r, k) {
                    Val::Exact(v, _) => Some(v),
                    _ => None,
                })
                .collect::<I128Array>(),
                u,
            ),
            _ => DArr::Num(
                rows.map(|r| match self.val(r, k) {
                    Val::Num(v) => Some(v),
                    _ => None,
                })
                .collect::<Float64Array>(),
            ),
        }
    }
}
