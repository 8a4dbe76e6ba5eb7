//! One work unit of the offline side read into its share of the records: each row's key
//! encoded into its record (or the unit's overflow bytes), each feature's value into its slot.

use std::sync::Mutex;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int32Type};
use arrow_array::{Array, ArrayRef, RecordBatch};

use crate::DiffError;
use crate::index;
use crate::input::{Input, Unit as WorkUnit};
use crate::keys::{self, Keys};
use crate::plan::Plan;
use crate::store::{Dict, Layout, NULL_KEY, OVERFLOW, Slot, big_marker};
use crate::values::{DArr, Domain, to_domain};

/// What loading one work unit gave besides its records.
#[derive(Default)]
pub(super) struct UnitLoad {
    pub(super) rows: usize,
    /// Records, key tags and flags of a unit whose size was not known in advance (CSV).
    pub(super) grown: Option<(Vec<u8>, Vec<u32>, Vec<u8>)>,
    pub(super) overflow: Vec<u8>,
    /// (row in unit, feature, value)
    pub(super) big: Vec<(u32, u32, i128)>,
    /// Raw columns of `Column` features, per feature.
    pub(super) parts: Vec<(usize, ArrayRef)>,
    pub(super) nulls: Vec<u64>,
}

/// Where a unit's records go: its share of the side's buffers when the row count is known
/// (a Parquet row group), else buffers of its own, appended once loading is done.
pub(super) enum Out<'a> {
    Fixed {
        data: &'a mut [u8],
        hashes: &'a mut [u32],
        flags: &'a mut [u8],
        at: usize,
    },
    Grow {
        data: Vec<u8>,
        hashes: Vec<u32>,
        flags: Vec<u8>,
    },
}

type Share<'a> = (&'a mut [u8], &'a mut [u32], &'a mut [u8]);

impl Out<'_> {
    /// Room for `n` more rows.
    pub(super) fn next(&mut self, n: usize, width: usize) -> Option<Share<'_>> {
        match self {
            Out::Fixed {
                data,
                hashes,
                flags,
                at,
            } => {
                let (a, b) = (*at, *at + n);
                *at = b;
                Some((
                    data.get_mut(a * width..b * width)?,
                    hashes.get_mut(a..b)?,
                    flags.get_mut(a..b)?,
                ))
            }
            Out::Grow {
                data,
                hashes,
                flags,
            } => {
                let a = hashes.len();
                data.resize((a + n) * width, 0);
                hashes.resize(a + n, 0);
                flags.resize(a + n, 0);
                Some((&mut data[a * width..], &mut hashes[a..], &mut flags[a..]))
            }
        }
    }
}

/// What every unit's load reads.
pub(super) struct Ctx<'a> {
    pub(super) input: &'a Input,
    /// Bytes of each exact slot.
    pub(super) widths: &'a [usize],
    pub(super) plan: &'a Plan,
    pub(super) layout: Layout,
    pub(super) slots: &'a [Slot],
    pub(super) dicts: &'a [Mutex<Dict>],
    pub(super) columns: &'a [String],
    /// The text features' offline columns (read as dictionaries where stored so).
    pub(super) text: &'a [String],
}

impl Ctx<'_> {
    pub(super) fn load_unit(
        &self,
        unit: WorkUnit,
        ui: usize,
        mut out: Out<'_>,
        expected: Option<usize>,
    ) -> Result<UnitLoad, DiffError> {
        let nk = self.plan.offline_keys.len();
        let w = self.layout.width;
        let mut l = UnitLoad {
            nulls: vec![0; self.plan.features.len()],
            ..UnitLoad::default()
        };
        let mut enc = Vec::new();
        let mut codes: Vec<u32> = Vec::new();
        let arrow = |name: &str| {
            let path = self.input.root.join(name);
            move |source| DiffError::Arrow { path, source }
        };
        let internal = |what: &str| DiffError::Internal(format!("offline load: {what}"));
        self.input
            .read(unit, self.columns, self.text, |batch: RecordBatch| {
                let n = batch.num_rows();
                let at = l.rows;
                let (recs, hs, fl) = out
                    .next(n, w)
                    .ok_or_else(|| internal("more rows than the file's metadata says"))?;
                let keys = Keys::new(
                    batch.columns().get(..nk).unwrap_or(&[]),
                    &self.plan.offline_keys,
                    "offline",
                )?;
                let cap = self.layout.key_cap;
                for r in 0..n {
                    enc.clear();
                    let rec = &mut recs[r * w..(r + 1) * w];
                    if !keys.encode(r, &mut enc) {
                        fl[r] = NULL_KEY;
                        continue;
                    }
                    hs[r] = index::tag(keys::hash_encoded(&enc));
                    if enc.len() <= cap {
                        rec[..enc.len()].copy_from_slice(&enc);
                    } else {
                        rec[0] = OVERFLOW;
                        rec[4..8].copy_from_slice(&(ui as u32).to_le_bytes());
                        rec[8..16].copy_from_slice(&(l.overflow.len() as u64).to_le_bytes());
                        l.overflow
                            .extend_from_slice(&(enc.len() as u32).to_le_bytes());
                        l.overflow.extend_from_slice(&enc);
                    }
                }
                let null_at = self.layout.null_at;
                let set_null = |recs: &mut [u8], r: usize, k: usize| {
                    recs[r * w + null_at + k / 8] |= 1 << (k % 8);
                };
                for (k, f) in self.plan.features.iter().enumerate() {
                    let Some(col) = batch.columns().get(nk + k) else {
                        continue;
                    };
                    match &self.slots[k] {
                        &Slot::F64(off) => {
                            let DArr::Num(a) =
                                to_domain(col, f.domain).map_err(arrow(&f.offline_name))?
                            else {
                                return Err(internal("a float column changed domain"));
                            };
                            for r in 0..n {
                                if a.is_valid(r) {
                                    let o = r * w + off;
                                    recs[o..o + 8].copy_from_slice(&a.value(r).to_le_bytes());
                                } else {
                                    set_null(recs, r, k);
                                    l.nulls[k] += 1;
                                }
                            }
                        }
                        &Slot::F32(off) => {
                            let a = col
                                .as_primitive_opt::<Float32Type>()
                                .ok_or_else(|| internal("a Float32 column changed type"))?;
                            for r in 0..n {
                                if a.is_valid(r) {
                                    let o = r * w + off;
                                    recs[o..o + 4].copy_from_slice(&a.value(r).to_le_bytes());
                                } else {
                                    set_null(recs, r, k);
                                    l.nulls[k] += 1;
                                }
                            }
                        }
                        &Slot::Exact(off, unit) => {
                            let DArr::Exact(a, u) =
                                to_domain(col, f.domain).map_err(arrow(&f.offline_name))?
                            else {
                                return Err(internal("an exact column changed domain"));
                            };
                            if u != unit {
                                return Err(internal("an exact column changed unit"));
                            }
                            let width = self.widths[k];
                            let marker = big_marker(width);
                            for r in 0..n {
                                if a.is_null(r) {
                                    set_null(recs, r, k);
                                    l.nulls[k] += 1;
                                    continue;
                                }
                                let v = a.value(r);
                                // Fits the slot, and is not its marker.
                                let small = i64::try_from(v)
                                    .ok()
                                    .filter(|&x| x > marker && x <= -(marker + 1));
                                if small.is_none() {
                                    l.big.push(((at + r) as u32, k as u32, v));
                                }
                                let o = r * w + off;
                                recs[o..o + width].copy_from_slice(
                                    &small.unwrap_or(marker).to_le_bytes()[..width],
                                );
                            }
                        }
                        &Slot::Code(off, d) => {
                            let pos = |r: usize| ((ui as u64) << 32) | (at + r) as u64;
                            let dict = &self.dicts[d];
                            codes.clear();
                            codes.resize(n, u32::MAX);
                            text_codes(col, f.domain, dict, pos, &mut codes)
                                .map_err(arrow(&f.offline_name))?;
                            for (r, &c) in codes.iter().enumerate() {
                                if c == u32::MAX {
                                    set_null(recs, r, k);
                                    l.nulls[k] += 1;
                                } else {
                                    let o = r * w + off;
                                    recs[o..o + 4].copy_from_slice(&c.to_le_bytes());
                                }
                            }
                        }
                        Slot::Column(_) => l.parts.push((k, col.clone())),
                    }
                }
                l.rows += n;
                Ok(())
            })?;
        if let Some(e) = expected
            && e != l.rows
        {
            return Err(internal("fewer rows than the file's metadata says"));
        }
        if let Out::Grow {
            data,
            hashes,
            flags,
        } = out
        {
            l.grown = Some((data, hashes, flags));
        }
        Ok(l)
    }
}

/// Each row's code in `dict` (`u32::MAX` for null) into `codes`; `pos(r)` orders first
/// appearances. A dictionary array (as the Parquet reader gives dictionary-encoded columns)
/// is interned a distinct value at a time, under one lock per batch.
fn text_codes(
    col: &ArrayRef,
    domain: Domain,
    dict: &Mutex<Dict>,
    pos: impl Fn(usize) -> u64,
    codes: &mut [u32],
) -> Result<(), arrow_schema::ArrowError> {
    let poisoned = || arrow_schema::ArrowError::ComputeError("dictionary lock poisoned".into());
    if let Some(d) = col.as_dictionary_opt::<Int32Type>()
        && d.values().len() <= codes.len()
        && let DArr::Text(values) = to_domain(d.values(), domain)?
    {
        let keys = d.keys();
        let m = values.len();
        // Per distinct value: its first row here and its rows.
        let mut first = vec![usize::MAX; m];
        let mut count = vec![0u64; m];
        for r in 0..codes.len() {
            if keys.is_null(r) {
                continue;
            }
            let v = keys.value(r) as usize;
            if v < m && values.is_valid(v) {
                if count[v] == 0 {
                    first[v] = r;
                }
                count[v] += 1;
            }
        }
        let mut code = vec![u32::MAX; m];
        {
            let mut dict = dict.lock().map_err(|_| poisoned())?;
            for v in 0..m {
                if count[v] > 0 {
                    code[v] = dict.intern(values.value(v), pos(first[v]), count[v]);
                }
            }
        }
        for (r, c) in codes.iter_mut().enumerate() {
            if keys.is_valid(r) {
                *c = code
                    .get(keys.value(r) as usize)
                    .copied()
                    .unwrap_or(u32::MAX);
            }
        }
        return Ok(());
    }
    let DArr::Text(a) = to_domain(col, domain)? else {
        return Err(arrow_schema::ArrowError::ComputeError(
            "a text column changed domain".into(),
        ));
    };
    let mut dict = dict.lock().map_err(|_| poisoned())?;
    for (r, c) in codes.iter_mut().enumerate() {
        if a.is_valid(r) {
            *c = dict.intern(a.value(r), pos(r), 1);
        }
    }
    Ok(())
}
