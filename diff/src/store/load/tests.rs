//! Loading small sides built here: CSV files (row counts unknown until read) and Parquet
//! row groups (known), each value type read back with its nulls, text by first appearance,
//! duplicate and null keys flagged, the record layout, and a file that no longer reads as it
//! did when opened named in the error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use super::*;
use crate::DiffOptions;
use crate::values::{Unit, Val};

/// A value as a test reads it.
fn show(v: Val<'_>) -> String {
    match v {
        Val::Null => "null".into(),
        Val::Num(x) => format!("{x}"),
        Val::Exact(x, Unit::Int) => x.to_string(),
        Val::Exact(x, u) => format!("{x} {u:?}"),
        Val::Text(t) => String::from_utf8_lossy(t).into_owned(),
        Val::NumList(..) | Val::TextList(..) => "list".into(),
    }
}

/// Opens `dir` as the offline side keyed by `id`, plans it against itself and loads it.
fn open_and_load(dir: &Path, threads: usize) -> (Plan, Result<Store, DiffError>) {
    let (input, plan) = open(dir);
    let store = load(&input, &plan, threads);
    (plan, store)
}

fn open(dir: &Path) -> (Input, Plan) {
    let keys = vec!["id".to_owned()];
    let input = Input::open(dir, &keys, false).unwrap();
    let opts = DiffOptions::new(dir, dir, keys);
    let plan = crate::plan::plan(&input, &input, &opts).unwrap();
    (input, plan)
}

/// Every feature of every row, by feature name, as [`show`] prints them.
fn rows(plan: &Plan, store: &Store) -> Vec<Vec<(String, String)>> {
    (0..store.rows as u32)
        .map(|r| {
            plan.features
                .iter()
                .enumerate()
                .map(|(k, f)| (f.name.clone(), show(store.val(r, k))))
                .collect()
        })
        .collect()
}

fn feature(plan: &Plan, name: &str) -> usize {
    plan.features.iter().position(|f| f.name == name).unwrap()
}

#[test]
fn csv_files_load_in_path_order_with_their_nulls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.csv"),
        "id,price,name,count\nr1,1.5,x,3\nr2,,y,\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.csv"),
        "id,price,name,count\nr3,2.5,,5\nr1,9,z,7\n",
    )
    .unwrap();
    let (plan, store) = open_and_load(dir.path(), 2);
    let store = store.unwrap();
    assert_eq!(store.rows, 4);
    let row = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut r: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
        r.sort_by_key(|(name, _)| feature(&plan, name));
        r
    };
    assert_eq!(
        rows(&plan, &store),
        [
            row(&[("price", "1.5"), ("name", "x"), ("count", "3")]),
            row(&[("price", "null"), ("name", "y"), ("count", "null")]),
            row(&[("price", "2.5"), ("name", "null"), ("count", "5")]),
            row(&[("price", "9"), ("name", "z"), ("count", "7")]),
        ]
    );
    let nulls = |name| store.nulls[feature(&plan, name)];
    assert_eq!((nulls("price"), nulls("name"), nulls("count")), (1, 1, 1));
    // Floats as f64, text as codes, integers exact in eight bytes (a CSV has no statistics).
    assert!(matches!(store.slots[feature(&plan, "price")], Slot::F64(_)));
    assert!(matches!(
        store.slots[feature(&plan, "name")],
        Slot::Code(..)
    ));
    assert!(matches!(
        store.slots[feature(&plan, "count")],
        Slot::Exact(_, Unit::Int)
    ));
    assert_eq!(store.widths[feature(&plan, "count")], 8);
    // The second `r1` is the duplicate, whichever thread read its file first.
    let flags: Vec<u8> = store
        .flags
        .iter()
        .map(|f| f.load(Ordering::Relaxed))
        .collect();
    assert_eq!(flags, [0, 0, 0, DUPLICATE]);
    let keys: Vec<String> = (0..4).map(|r| store.render_key(r)).collect();
    assert_eq!(keys, ["r1", "r2", "r3", "r1"]);
}

/// Writes `batch` as one Parquet file in row groups of `group` rows.
fn parquet(path: &Path, batch: &RecordBatch, group: usize) {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

#[test]
fn parquet_row_groups_fill_their_share_and_text_codes_follow_first_appearance() {
    let dir = tempfile::tempdir().unwrap();
    let ids: ArrayRef = Arc::new(StringArray::from_iter([
        Some("a"),
        Some("b"),
        None,
        Some("d"),
        Some("e"),
        Some("b"),
    ]));
    // Dictionary-encoded by the writer, read back as dictionaries.
    let colour: ArrayRef = Arc::new(StringArray::from_iter([
        Some("red"),
        Some("blue"),
        Some("red"),
        None,
        Some("green"),
        Some("blue"),
    ]));
    // 0 to 100: one byte a value, from the row groups' statistics.
    let small: ArrayRef = Arc::new(Int64Array::from_iter([
        Some(0),
        Some(100),
        None,
        Some(7),
        Some(50),
        Some(1),
    ]));
    let batch =
        RecordBatch::try_from_iter([("id", ids), ("colour", colour), ("small", small)]).unwrap();
    parquet(&dir.path().join("t.parquet"), &batch, 2);
    let (plan, store) = open_and_load(dir.path(), 3);
    let store = store.unwrap();
    assert_eq!(store.rows, 6);
    let (colour, small) = (feature(&plan, "colour"), feature(&plan, "small"));
    let values = |k| -> Vec<String> { (0..6).map(|r| show(store.val(r, k))).collect() };
    assert_eq!(
        values(colour),
        ["red", "blue", "red", "null", "green", "blue"]
    );
    assert_eq!(values(small), ["0", "100", "null", "7", "50", "1"]);
    assert_eq!(store.widths[small], 1);
    assert_eq!((store.nulls[colour], store.nulls[small]), (1, 1));

    // One code per distinct value, in order of first appearance over the units, with its
    // rows.
    let Slot::Code(_, d) = store.slots[colour] else {
        panic!("{:?}", store.slots[colour]);
    };
    let dict = &store.dicts[d];
    let mut codes: Vec<u32> = (0..dict.ends.len() as u32).collect();
    codes.sort_by_key(|&c| dict.first[c as usize]);
    let distinct: Vec<(String, u64)> = codes
        .iter()
        .map(|&c| {
            (
                String::from_utf8_lossy(dict.value(c)).into_owned(),
                dict.counts[c as usize],
            )
        })
        .collect();
    assert_eq!(
        distinct,
        [("red".into(), 2), ("blue".into(), 2), ("green".into(), 1)]
    );

    let flags: Vec<u8> = store
        .flags
        .iter()
        .map(|f| f.load(Ordering::Relaxed))
        .collect();
    assert_eq!(flags, [0, 0, NULL_KEY, 0, 0, DUPLICATE]);
}

#[test]
fn a_file_that_no_longer_reads_as_opened_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.csv");
    std::fs::write(&path, "id,price\nr1,1.5\nr2,2.5\n").unwrap();
    let (input, plan) = open(dir.path());
    // Rewritten between the schema's inference and the load: `price` is no longer a number.
    std::fs::write(&path, "id,price\nr1,1.5\nr2,cheap\n").unwrap();
    let Err(e) = load(&input, &plan, 1) else {
        panic!("loaded a file whose column no longer parses");
    };
    match &e {
        DiffError::Arrow { path: p, .. } => assert_eq!(p, &path),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.to_string(), format!("reading {}", path.display()));
}

#[test]
fn a_row_group_with_more_rows_than_its_share_is_refused() {
    let (mut data, mut hashes, mut flags) = (vec![0u8; 2 * 8], vec![0u32; 2], vec![0u8; 2]);
    let mut out = Out::Fixed {
        data: &mut data,
        hashes: &mut hashes,
        flags: &mut flags,
        at: 0,
    };
    assert_eq!(
        out.next(1, 8).map(|(d, h, f)| (d.len(), h.len(), f.len())),
        Some((8, 1, 1))
    );
    assert_eq!(
        out.next(1, 8).map(|(d, h, f)| (d.len(), h.len(), f.len())),
        Some((8, 1, 1))
    );
    assert!(out.next(1, 8).is_none());
    // A unit of unknown size grows instead.
    let mut out = Out::Grow {
        data: Vec::new(),
        hashes: Vec::new(),
        flags: Vec::new(),
    };
    assert!(out.next(3, 8).is_some());
    assert_eq!(
        out.next(2, 8).map(|(d, h, _)| (d.len(), h.len())),
        Some((16, 2))
    );
}

#[test]
fn the_layout_puts_wider_values_first_then_a_null_bit_per_feature() {
    let kinds = [
        Kind::F32,
        Kind::F64,
        Kind::Exact(Unit::Int, 2),
        Kind::Text,
        Kind::Column,
        Kind::Exact(Unit::Bool, 1),
        Kind::Exact(Unit::Int, 8),
        Kind::Text,
        Kind::F64,
    ];
    let (layout, slots, dicts) = layout::layout(16, &kinds);
    // Eight-byte values from the key's end (16), then four-, two- and one-byte ones.
    let offsets: Vec<String> = slots
        .iter()
        .map(|s| match s {
            Slot::F64(o) => format!("f64@{o}"),
            Slot::F32(o) => format!("f32@{o}"),
            Slot::Exact(o, _) => format!("exact@{o}"),
            Slot::Code(o, d) => format!("code{d}@{o}"),
            Slot::Column(_) => "column".into(),
        })
        .collect();
    assert_eq!(
        offsets,
        [
            "f32@40", "f64@16", "exact@52", "code0@44", "column", "exact@54", "exact@24",
            "code1@48", "f64@32",
        ]
    );
    assert_eq!(dicts, 2);
    assert_eq!((layout.key_cap, layout.null_at), (16, 55));
    // Nine features: two bytes of null bits.
    assert_eq!(layout.width, 57);
}

#[test]
fn the_key_region_fits_the_first_batch_keys_between_16_and_64_bytes() {
    for (key, cap) in [
        ("k".to_owned(), 16),
        ("k".repeat(35), 40),
        ("k".repeat(200), 64),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.csv"), format!("id,x\n{key},1\n")).unwrap();
        let (input, plan) = open(dir.path());
        let units = input.units();
        assert_eq!(
            layout::key_capacity(&input, &units, &plan.offline_keys).unwrap(),
            cap,
            "{} bytes of key",
            key.len()
        );
        // A key longer than its region is still found by its whole encoding.
        let store = load(&input, &plan, 1).unwrap();
        assert_eq!(store.render_key(0), key);
    }
}
