//! Loading the offline side: the record layout from the columns' types, then the units read
//! by worker threads, each into its share of the records, and the key index built.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int32Type};
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch};
use hashbrown::HashMap;

use super::{DUPLICATE, Dict, Kind, Layout, NULL_KEY, OVERFLOW, Slot, Store, big_marker};
use crate::DiffError;
use crate::index::{self, Index};
use crate::input::{Input, Unit as WorkUnit};
use crate::keys::{self, Keys};
use crate::plan::Plan;
use crate::values::{DArr, Domain, Unit, to_domain};

/// What loading one work unit gave besides its records.
#[derive(Default)]
struct UnitLoad {
    rows: usize,
    /// Records, key tags and flags of a unit whose size was not known in advance (CSV).
    grown: Option<(Vec<u8>, Vec<u32>, Vec<u8>)>,
    overflow: Vec<u8>,
    /// (row in unit, feature, value)
    big: Vec<(u32, u32, i128)>,
    /// Raw columns of `Column` features, per feature.
    parts: Vec<(usize, ArrayRef)>,
    nulls: Vec<u64>,
}

/// Where a unit's records go: its share of the side's buffers when the row count is known
/// (a Parquet row group), else buffers of its own, appended once loading is done.
enum Out<'a> {
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
    fn next(&mut self, n: usize, width: usize) -> Option<Share<'_>> {
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

/// How each feature's offline values will be held, from the offline column's type.
fn kinds(input: &Input, plan: &Plan) -> Result<Vec<Kind>, DiffError> {
    plan.features
        .iter()
        .map(|f| {
            let dt = input
                .schema
                .field_with_name(&f.offline_name)
                .map(|x| x.data_type().clone())
                .unwrap_or(arrow_schema::DataType::Null);
            let empty = arrow_array::new_empty_array(&dt);
            let d = to_domain(&empty, f.domain).map_err(|source| DiffError::Arrow {
                path: input.root.join(&f.offline_name),
                source,
            })?;
            Ok(match d {
                DArr::Num(_) if dt == arrow_schema::DataType::Float32 => Kind::F32,
                DArr::Num(_) => Kind::F64,
                DArr::Exact(_, u) => Kind::Exact(u, exact_width(input, &f.offline_name, &dt, u)),
                DArr::Text(_) => Kind::Text,
                DArr::NumList(..) | DArr::TextList(..) => Kind::Column,
            })
        })
        .collect()
}

/// Bytes for an exact feature's values: integers of a signed type whose range the Parquet
/// statistics of every row group give are held in as few bytes as hold them (the benchmark's
/// counters, 0 to 999, in two instead of eight); anything else in eight. A value outside the
/// range (statistics that were wrong) is still right, only slower (`Store::big`).
fn exact_width(input: &Input, column: &str, dt: &arrow_schema::DataType, unit: Unit) -> usize {
    use arrow_schema::DataType::*;
    if unit != Unit::Int || !matches!(dt, Int8 | Int16 | Int32 | Int64) {
        return 8;
    }
    let Some((lo, hi)) = input.int_range(column) else {
        return 8;
    };
    // The width's smallest integer is its marker, so the range must stay above it.
    [1usize, 2, 4, 8]
        .into_iter()
        .find(|&w| lo > big_marker(w) && hi <= -(big_marker(w) + 1))
        .unwrap_or(8)
}

/// Bytes of a record's key region: enough for the longest key encoding among the first
/// batch's rows (rounded up to 8), between 16 (an overflow reference) and 64. Longer keys go
/// to the overflow bytes, correct but a cache miss more to compare.
fn key_capacity(
    input: &Input,
    units: &[WorkUnit],
    key_columns: &[String],
) -> Result<usize, DiffError> {
    let mut longest = 0;
    if let Some(&unit) = units.first()
        && let Some(batch) = input.first_batch(unit, key_columns)?
    {
        let keys = Keys::new(batch.columns(), key_columns, "offline")?;
        let mut enc = Vec::new();
        for r in 0..batch.num_rows() {
            enc.clear();
            if keys.encode(r, &mut enc) {
                longest = longest.max(enc.len());
            }
        }
    }
    Ok(longest.div_ceil(8).saturating_mul(8).clamp(16, 64))
}

fn layout(key_cap: usize, kinds: &[Kind]) -> (Layout, Vec<Slot>, usize) {
    let mut at = key_cap;
    let mut offsets = vec![0usize; kinds.len()];
    let bytes = |kind: &Kind| match *kind {
        Kind::F64 => 8,
        Kind::Exact(_, w) => w,
        Kind::F32 | Kind::Text => 4,
        Kind::Column => 0,
    };
    // Widest values first (eight bytes, then four, two, one), then the null bits.
    for size in [8, 4, 2, 1] {
        for (k, kind) in kinds.iter().enumerate() {
            if bytes(kind) == size {
                offsets[k] = at;
                at += size;
            }
        }
    }
    let null_at = at;
    let width = null_at + kinds.len().div_ceil(8);
    let mut dicts = 0;
    let slots = kinds
        .iter()
        .zip(&offsets)
        .map(|(kind, &off)| match *kind {
            Kind::F64 => Slot::F64(off),
            Kind::F32 => Slot::F32(off),
            Kind::Exact(u, _) => Slot::Exact(off, u),
            Kind::Text => {
                dicts += 1;
                Slot::Code(off, dicts - 1)
            }
            Kind::Column => Slot::Column(Box::new(DArr::Text(BinaryArray::from(Vec::<
                Option<&[u8]>,
            >::new(
            ))))),
        })
        .collect();
    (
        Layout {
            width,
            key_cap,
            null_at,
        },
        slots,
        dicts,
    )
}

/// Reads the offline key and feature columns with `threads` readers into a [`Store`] and
/// indexes its keys.
pub(crate) fn load(input: &Input, plan: &Plan, threads: usize) -> Result<Store, DiffError> {
    let columns: Vec<String> = plan
        .offline_keys
        .iter()
        .chain(plan.features.iter().map(|f| &f.offline_name))
        .cloned()
        .collect();
    let kinds = kinds(input, plan)?;
    let text: Vec<String> = plan
        .features
        .iter()
        .zip(&kinds)
        .filter(|(_, k)| **k == Kind::Text)
        .map(|(f, _)| f.offline_name.clone())
        .collect();
    let units = input.units();
    let key_cap = key_capacity(input, &units, &plan.offline_keys)?;
    let (layout, mut slots, n_dicts) = layout(key_cap, &kinds);
    let widths: Vec<usize> = kinds
        .iter()
        .map(|k| match k {
            Kind::Exact(_, w) => *w,
            _ => 8,
        })
        .collect();
    let w = layout.width;
    let too_many = |rows: usize| DiffError::TooManyRows {
        path: input.root.clone(),
        rows: rows as u64,
    };

    // Every unit's share of the buffers, when every unit's row count is known.
    let known: Option<Vec<usize>> = units.iter().map(|&u| input.unit_rows(u)).collect();
    let total = known.as_ref().map(|k| k.iter().sum::<usize>());
    if let Some(t) = total
        && t >= u32::MAX as usize
    {
        return Err(too_many(t));
    }
    let t = total.unwrap_or(0);
    let mut data = vec![0u8; t * w];
    // The top 32 bits of each key's hash (see `index`).
    let mut hashes = vec![0u32; t];
    let mut flags = vec![0u8; t];
    let outs: Vec<Mutex<Option<Out<'_>>>> = match &known {
        Some(rows) => {
            let (mut d, mut h, mut f) = (&mut data[..], &mut hashes[..], &mut flags[..]);
            let mut outs = Vec::with_capacity(rows.len());
            for &n in rows {
                let (d1, d2) = std::mem::take(&mut d).split_at_mut(n * w);
                let (h1, h2) = std::mem::take(&mut h).split_at_mut(n);
                let (f1, f2) = std::mem::take(&mut f).split_at_mut(n);
                (d, h, f) = (d2, h2, f2);
                outs.push(Mutex::new(Some(Out::Fixed {
                    data: d1,
                    hashes: h1,
                    flags: f1,
                    at: 0,
                })));
            }
            outs
        }
        None => units
            .iter()
            .map(|_| {
                Mutex::new(Some(Out::Grow {
                    data: Vec::new(),
                    hashes: Vec::new(),
                    flags: Vec::new(),
                }))
            })
            .collect(),
    };
    let dicts: Vec<Mutex<Dict>> = (0..n_dicts).map(|_| Mutex::new(Dict::default())).collect();
    let next = AtomicUsize::new(0);
    let loaded: Mutex<Vec<(usize, UnitLoad)>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<DiffError>> = Mutex::new(None);
    let ctx = Ctx {
        input,
        widths: &widths,
        plan,
        layout,
        slots: &slots,
        dicts: &dicts,
        columns: &columns,
        text: &text,
    };
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&unit) = units.get(i) else { break };
                    let out = outs.get(i).and_then(|o| o.lock().ok()?.take());
                    let r = match out {
                        Some(out) => ctx.load_unit(unit, i, out, known.as_ref().map(|k| k[i])),
                        None => Err(DiffError::Internal("a unit loaded twice".into())),
                    };
                    match r {
                        Ok(l) => {
                            if let Ok(mut all) = loaded.lock() {
                                all.push((i, l));
                            }
                        }
                        Err(e) => {
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(e);
                            }
                            next.store(units.len(), Ordering::Relaxed);
                            break;
                        }
                    }
                }
            });
        }
    });
    drop(outs);
    if let Some(e) = failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    let mut loaded = loaded
        .into_inner()
        .map_err(|_| DiffError::Internal("offline reader lock poisoned".into()))?;
    if loaded.len() != units.len() {
        return Err(DiffError::Internal("an offline reader panicked".into()));
    }
    loaded.sort_by_key(|(i, _)| *i);

    // Units of unknown size: their buffers, appended in unit order.
    if known.is_none() {
        for (_, l) in loaded.iter_mut() {
            if let Some((d, h, f)) = l.grown.take() {
                data.extend_from_slice(&d);
                hashes.extend_from_slice(&h);
                flags.extend_from_slice(&f);
            }
        }
    }
    let rows = hashes.len();
    if rows >= u32::MAX as usize {
        return Err(too_many(rows));
    }
    let mut nulls = vec![0u64; plan.features.len()];
    let mut big = HashMap::new();
    let mut parts: Vec<Vec<ArrayRef>> = vec![Vec::new(); plan.features.len()];
    let mut overflow = Vec::with_capacity(loaded.len());
    let mut base = 0u32;
    for (_, l) in loaded {
        for (a, b) in nulls.iter_mut().zip(&l.nulls) {
            *a += b;
        }
        for (r, k, v) in l.big {
            big.insert((base + r, k), v);
        }
        for (k, a) in l.parts {
            parts[k].push(a);
        }
        overflow.push(l.overflow);
        base += l.rows as u32;
    }
    for (k, f) in plan.features.iter().enumerate() {
        if !matches!(slots[k], Slot::Column(_)) {
            continue;
        }
        let raw = if parts[k].is_empty() {
            let dt = input
                .schema
                .field_with_name(&f.offline_name)
                .map(|x| x.data_type().clone())
                .unwrap_or(arrow_schema::DataType::Null);
            arrow_array::new_empty_array(&dt)
        } else {
            let refs: Vec<&dyn Array> = parts[k].iter().map(|a| a.as_ref()).collect();
            arrow_select::concat::concat(&refs).map_err(|source| DiffError::Arrow {
                path: input.root.clone(),
                source,
            })?
        };
        let d = to_domain(&raw, f.domain).map_err(|source| DiffError::Arrow {
            path: input.root.join(&f.offline_name),
            source,
        })?;
        nulls[k] = d.null_count() as u64;
        slots[k] = Slot::Column(Box::new(d));
    }
    let dicts = dicts
        .into_iter()
        .map(|d| {
            d.into_inner()
                .map_err(|_| DiffError::Internal("offline dictionary lock poisoned".into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut store = Store {
        rows,
        layout,
        data,
        overflow,
        slots,
        dicts,
        big,
        widths,
        index: Index::default(),
        flags: Vec::new(),
        nulls,
    };
    let (index, dups) = Index::build(
        rows,
        &|r| (flags[r] & NULL_KEY == 0).then(|| hashes[r]),
        &|a, b| store.same_key(a, b),
        threads,
    );
    if !index.is_complete() {
        return Err(DiffError::Internal("an index thread panicked".into()));
    }
    drop(hashes);
    for d in dups {
        flags[d as usize] |= DUPLICATE;
    }
    store.index = index;
    store.flags = flags.into_iter().map(AtomicU8::new).collect();
    Ok(store)
}

/// What every unit's load reads.
struct Ctx<'a> {
    input: &'a Input,
    /// Bytes of each exact slot.
    widths: &'a [usize],
    plan: &'a Plan,
    layout: Layout,
    slots: &'a [Slot],
    dicts: &'a [Mutex<Dict>],
    columns: &'a [String],
    /// The text features' offline columns (read as dictionaries where stored so).
    text: &'a [String],
}

impl Ctx<'_> {
    fn load_unit(
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
