//! The store against the columns it holds: every value read back as the column in its domain
//! gives it, the distributions' bins and counts as `DistSpec` derives and counts them from the
//! whole columns, and the keys (null, duplicated, too long for their record) as the served
//! side finds them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, ListBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Decimal128Array, Float32Array, Float64Array, Int64Array, RecordBatch,
    StringArray, TimestampMillisecondArray, UInt64Array,
};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use super::*;
use crate::DiffOptions;
use crate::input::Input;
use crate::keys::Keys;
use crate::values::to_domain;

const ROWS: usize = 2500;

/// Rows `range` of the test table.
fn batch(range: std::ops::Range<usize>) -> RecordBatch {
    let rows: Vec<usize> = range.collect();
    let long = "k".repeat(70);
    let key: ArrayRef = Arc::new(StringArray::from_iter(rows.iter().map(|&i| match i % 97 {
        5 => None, // a null key
        // Too long for a record's key region: kept aside.
        7 => Some(format!("{long}{}", i / 3)),
        // Every key a second time, 1000 rows later: duplicates.
        _ => Some(format!("r{}", i % 1500)),
    })));
    let item: ArrayRef = Arc::new(Int64Array::from_iter(
        rows.iter()
            .map(|&i| (i % 89 != 3).then_some((i % 7) as i64 - 3)),
    ));
    let f32s: ArrayRef = Arc::new(Float32Array::from_iter(rows.iter().map(|&i| {
        match i % 13 {
            0 => None,
            1 => Some(f32::NAN),
            _ => Some((i % 101) as f32 * 0.25 - 3.0),
        }
    })));
    let f64s: ArrayRef = Arc::new(Float64Array::from_iter(rows.iter().map(|&i| {
        match i % 17 {
            0 => None,
            1 => Some(f64::INFINITY),
            2 => Some(-0.0),
            _ => Some(((i * 7919) % 1000) as f64 / 7.0 - 50.0),
        }
    })));
    // Small integers (two bytes a value), and ones needing all eight with their marker.
    let small: ArrayRef = Arc::new(Int64Array::from_iter(
        rows.iter()
            .map(|&i| (i % 11 != 0).then_some((i % 300) as i64 - 150)),
    ));
    let wide: ArrayRef = Arc::new(Int64Array::from_iter(rows.iter().map(|&i| match i % 5 {
        0 => Some(i64::MIN),
        1 => Some(i64::MAX),
        2 => None,
        _ => Some(i as i64 * 1_000_000_007),
    })));
    let unsigned: ArrayRef = Arc::new(UInt64Array::from_iter_values(rows.iter().map(|&i| {
        if i % 3 == 0 {
            u64::MAX - i as u64
        } else {
            i as u64
        }
    })));
    let flags: ArrayRef = Arc::new(BooleanArray::from_iter(
        rows.iter().map(|&i| (i % 4 != 0).then_some(i % 3 == 0)),
    ));
    let times: ArrayRef = Arc::new(TimestampMillisecondArray::from_iter(
        rows.iter()
            .map(|&i| (i % 9 != 0).then_some(1_700_000_000_000 + (i as i64 % 50) * 1000)),
    ));
    let money: ArrayRef = Arc::new(
        Decimal128Array::from_iter(rows.iter().map(|&i| (i % 6 != 0).then_some(i as i128 * 25)))
            .with_precision_and_scale(12, 2)
            .unwrap(),
    );
    let locale: ArrayRef =
        Arc::new(StringArray::from_iter(rows.iter().map(|&i| {
            (i % 10 != 0).then_some(["en-US", "de-DE", "fr-FR", "de"][i % 4])
        })));
    let many: ArrayRef = Arc::new(StringArray::from_iter_values(
        rows.iter().map(|&i| format!("v{}", (i * 31) % 1700)),
    ));
    let mut lists = ListBuilder::new(Float64Builder::new());
    for &i in &rows {
        if i % 8 == 0 {
            lists.append_null();
        } else {
            lists.values().append_value(i as f64);
            lists.values().append_option((i % 3 != 0).then_some(0.5));
            lists.append(true);
        }
    }
    let lists: ArrayRef = Arc::new(lists.finish());
    RecordBatch::try_from_iter([
        ("key", key),
        ("item", item),
        ("f32", f32s),
        ("f64", f64s),
        ("small", small),
        ("wide", wide),
        ("unsigned", unsigned),
        ("flag", flags),
        ("time", times),
        ("money", money),
        ("locale", locale),
        ("many", many),
        ("list", lists),
    ])
    .unwrap()
}

/// The side in two files of several row groups.
fn side(dir: &std::path::Path) {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(700))
        .build();
    for (name, range) in [("a.parquet", 0..1600), ("b.parquet", 1600..ROWS)] {
        let b = batch(range);
        let mut w = ArrowWriter::try_new(
            File::create(dir.join(name)).unwrap(),
            b.schema(),
            Some(props.clone()),
        )
        .unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
    }
}

fn encoded(v: Val<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    v.encode(&mut out);
    out
}

#[test]
fn holds_what_the_columns_hold() {
    let dir = tempfile::tempdir().unwrap();
    side(dir.path());
    let keys = vec!["key".to_owned(), "item".to_owned()];
    let input = Input::open(dir.path(), &keys, false).unwrap();
    let opts = DiffOptions::new(dir.path(), dir.path(), keys.clone());
    let plan = crate::plan::plan(&input, &input, &opts).unwrap();
    assert_eq!(plan.features.len(), 11, "{:?}", plan.features);
    let store = load(&input, &plan, 2).unwrap();
    assert_eq!(store.rows, ROWS);
    // The narrow column is held in two bytes, the others in eight.
    let small = plan
        .features
        .iter()
        .position(|f| f.name == "small")
        .unwrap();
    assert_eq!(store.widths[small], 2);

    // The whole columns, as the served side would read them.
    let mut names = keys.clone();
    names.extend(plan.features.iter().map(|f| f.offline_name.clone()));
    let mut parts: Vec<Vec<ArrayRef>> = vec![Vec::new(); names.len()];
    for unit in input.units() {
        input
            .read(unit, &names, &[], |b| {
                for (p, c) in parts.iter_mut().zip(b.columns()) {
                    p.push(c.clone());
                }
                Ok(())
            })
            .unwrap();
    }
    let whole: Vec<ArrayRef> = parts
        .iter()
        .map(|p| {
            let refs: Vec<&dyn arrow_array::Array> = p.iter().map(|a| a.as_ref()).collect();
            arrow_select::concat::concat(&refs).unwrap()
        })
        .collect();

    // Values and nulls.
    let cols: Vec<DArr> = plan
        .features
        .iter()
        .enumerate()
        .map(|(k, f)| to_domain(&whole[2 + k], f.domain).unwrap())
        .collect();
    for (k, col) in cols.iter().enumerate() {
        assert_eq!(
            store.nulls[k],
            col.null_count() as u64,
            "{}",
            plan.features[k].name
        );
        for r in 0..ROWS {
            assert_eq!(
                encoded(store.val(r as u32, k)),
                encoded(col.get(r)),
                "{} row {r}",
                plan.features[k].name
            );
        }
    }

    // Distribution bins and counts.
    let specs: Vec<DistSpec> = store
        .spec_columns()
        .iter()
        .zip(&plan.features)
        .map(|(c, f)| {
            if crate::stats::has_distribution(f.domain) {
                DistSpec::from_offline(c)
            } else {
                DistSpec::None(String::new())
            }
        })
        .collect();
    let mut expected = Vec::new();
    for ((spec, col), f) in specs.iter().zip(&cols).zip(&plan.features) {
        if !crate::stats::has_distribution(f.domain) {
            expected.push(Vec::new());
            continue;
        }
        let direct = DistSpec::from_offline(col);
        assert_eq!(spec.labels(), direct.labels(), "{}", f.name);
        let mut counts = vec![0; direct.bins()];
        direct.count(col, &mut counts);
        expected.push(counts);
    }
    assert_eq!(store.distributions(&specs, 2, None), expected);
    // The served pass bins the rows it matched; the rest are binned after.
    let (numeric, binners) = store.numeric(&specs);
    let matched: Vec<u32> = (0..ROWS as u32).filter(|r| r % 3 == 1).collect();
    for &r in &matched {
        store.flags[r as usize].fetch_or(MATCHED, Ordering::Relaxed);
    }
    let mut counts: Vec<Vec<u64>> = numeric.iter().map(|&k| vec![0; specs[k].bins()]).collect();
    for chunk in matched.chunks(100) {
        store.bin_rows(
            &numeric,
            &binners,
            chunk,
            &mut counts,
            &mut Scratch::default(),
            |_| false,
        );
    }
    assert_eq!(store.distributions(&specs, 3, Some(counts)), expected);

    // Keys: null ones, later rows of a key, and every other row found by its key.
    let k = Keys::new(&whole[..2], &keys, "offline").unwrap();
    let mut first = std::collections::HashMap::new();
    for r in 0..ROWS {
        let flags = store.flags[r].load(Ordering::Relaxed);
        let mut enc = Vec::new();
        if !k.encode(r, &mut enc) {
            assert_eq!(flags & NULL_KEY, NULL_KEY, "row {r}");
            continue;
        }
        assert_eq!(store.render_key(r as u32), k.render(r));
        let f = *first.entry(enc.clone()).or_insert(r);
        assert_eq!(flags & DUPLICATE != 0, f != r, "row {r}");
        let h = keys::hash_encoded(&enc);
        let found = store
            .index
            .find(h, store.index.first_slot(h), |row| store.key_is(row, &enc));
        assert_eq!(found, Some(f as u32), "row {r}");
    }
    assert!(
        store.overflow.iter().any(|o| !o.is_empty()),
        "long keys were kept aside"
    );
}
