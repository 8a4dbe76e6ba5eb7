//! Loading the offline side: the units read by worker threads, each into its share of the
//! records, then their parts put together and the key index built.

mod layout;
#[cfg(test)]
mod tests;
mod unit;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use arrow_array::{Array, ArrayRef};
use hashbrown::HashMap;

use super::{DUPLICATE, Dict, Kind, NULL_KEY, Slot, Store};
use crate::DiffError;
use crate::index::Index;
use crate::input::Input;
use crate::plan::Plan;
use crate::values::to_domain;
use layout::{key_capacity, kinds, layout};
use unit::{Ctx, Out, UnitLoad};

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
