//! `featurelog diff` end to end: datasets generated here with known injected skews (locale
//! truncation, separator swap, float noise within and beyond tolerance, missing keys, a stale
//! column) must be reported exactly, and nothing else; exit codes 0/1/2. The modules below
//! take the rest: inputs as other writers make them (`writers`), what a side and the options
//! may be (`inputs`), Delta tables read through their log (`delta`), exact comparisons and structs (`exactness`), the report's other
//! sections (`reports`), and how values and charts show, the HTML page opened in headless
//! Chromium without console errors and screenshotted (`display`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test helpers: a panic is a failed test.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::types::{
    Float32Type, Float64Type, TimestampMicrosecondType, TimestampMillisecondType,
};
use arrow_array::{
    ArrayRef, Date32Array, FixedSizeListArray, Float32Array, Float64Array, Int64Array, ListArray,
    RecordBatch, StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
    TimestampSecondArray, UInt64Array,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde_json::Value;

const ROWS: usize = 2000;
const LOCALES: [&str; 5] = ["en-US", "de-DE", "fr-FR", "pt-BR", "es-MX"];
const MARKETS: [&str; 3] = ["jp-JA", "en-GB", "de-AT"];

/// Row `i`'s served values.
struct Row {
    request: String,
    item: i64,
    locale: &'static str,
    market: &'static str,
    ctr: f64,
    price: f32,
    clicks: i64,
    category: String,
    embedding: [f32; 2],
}

fn row(i: usize) -> Row {
    Row {
        request: format!("r{}", i / 10),
        item: (i % 10) as i64 + 1000,
        locale: LOCALES[(i / 7) % LOCALES.len()],
        market: MARKETS[(i / 3) % MARKETS.len()],
        ctr: ((i % 997) + 1) as f64 / 1000.0,
        price: (i % 50) as f32 + 0.25,
        clicks: (i % 13) as i64 * 3,
        category: format!("c{}", i % 4),
        embedding: [i as f32 / 8.0, -(i as f32)],
    }
}

// The injected skews, by served row number.
fn dropped_offline(i: usize) -> bool {
    i % 50 == 5 // missing keys: 40 served-only rows
}
fn truncated_locale(i: usize) -> bool {
    i % 20 == 3
}
fn swapped_separator(i: usize) -> bool {
    i % 10 == 7
}
fn price_noise_within(i: usize) -> bool {
    i % 5 == 1 // +0.004, the price tolerance is 0.01
}
fn price_noise_beyond(i: usize) -> bool {
    i % 25 == 2 // +0.5
}
fn stale_clicks(i: usize) -> bool {
    !i.is_multiple_of(3) // yesterday's count
}
const EXTRA_OFFLINE: usize = 10;

fn served_batch(range: std::ops::Range<usize>) -> RecordBatch {
    let rows: Vec<Row> = range.clone().map(row).collect();
    let col = |a: ArrayRef| a;
    RecordBatch::try_from_iter(vec![
        (
            "request_id",
            col(Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.request.clone()),
            ))),
        ),
        (
            "item_id",
            col(Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.item.to_string()),
            ))),
        ),
        (
            "model_name",
            col(Arc::new(StringArray::from_iter_values(
                rows.iter().map(|_| "ranker"),
            ))),
        ),
        (
            "served_at",
            col(Arc::new(
                TimestampMicrosecondArray::from_iter_values(range.clone().map(|i| i as i64))
                    .with_timezone("UTC"),
            )),
        ),
        (
            "user_locale",
            col(Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.locale),
            ))),
        ),
        (
            "market",
            col(Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.market),
            ))),
        ),
        (
            "ctr",
            col(Arc::new(Float64Array::from_iter_values(
                rows.iter().map(|r| r.ctr),
            ))),
        ),
        (
            "item_price",
            col(Arc::new(Float32Array::from_iter_values(
                rows.iter().map(|r| r.price),
            ))),
        ),
        (
            "clicks_7d",
            col(Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.clicks),
            ))),
        ),
        (
            "category",
            col(Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.category.clone()),
            ))),
        ),
        (
            "item_embedding",
            col(Arc::new(FixedSizeListArray::from_iter_primitive::<
                Float32Type,
                _,
                _,
            >(
                rows.iter().map(|r| Some(r.embedding.map(Some))),
                2,
            ))),
        ),
    ])
    .unwrap()
}

fn write_parquet(path: &Path, batch: &RecordBatch) {
    write_parquet_with(path, batch, None);
}

fn write_parquet_with(path: &Path, batch: &RecordBatch, compression: Option<Compression>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let props = compression.map(|c| WriterProperties::builder().set_compression(c).build());
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), props).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// The served side as the joiner lays it out: two hourly partitions, plus the joiner's hidden
/// state and a pending file that readers must skip.
fn write_served(dir: &Path) {
    write_parquet(
        &dir.join("dt=2025-11-29/hr=18/part-0.parquet"),
        &served_batch(0..ROWS / 2),
    );
    write_parquet(
        &dir.join("dt=2025-11-29/hr=19/part-0.parquet"),
        &served_batch(ROWS / 2..ROWS),
    );
    std::fs::create_dir_all(dir.join("_featurelog")).unwrap();
    std::fs::write(dir.join("_featurelog/checkpoint.parquet"), b"not parquet").unwrap();
    std::fs::write(
        dir.join("dt=2025-11-29/hr=19/.part-1.parquet.pending"),
        b"junk",
    )
    .unwrap();
}

/// Offline rows: served rows with the skews injected (`skewed`), minus dropped keys, plus
/// offline-only keys.
fn offline_rows(skewed: bool) -> Vec<(usize, Row)> {
    let mut out = Vec::new();
    for i in 0..ROWS {
        let mut r = row(i);
        if skewed {
            if dropped_offline(i) {
                continue;
            }
            if truncated_locale(i) {
                r.locale = &r.locale[..2];
            }
            if price_noise_within(i) {
                r.price += 0.004;
            }
            if price_noise_beyond(i) {
                r.price += 0.5;
            }
            if stale_clicks(i) {
                r.clicks -= 1;
            }
            r.ctr *= 1.0 + 1e-9; // float noise within the default relative tolerance
        }
        out.push((i, r));
    }
    if skewed {
        for k in 0..EXTRA_OFFLINE {
            let mut r = row(k);
            r.request = format!("offline-only-{k}");
            out.push((usize::MAX, r));
        }
    }
    out
}

/// The skewed offline side as Parquet, item ids as integers (the served side has strings),
/// vectors as List instead of the joiner's FixedSizeList, columns in another order.
fn write_offline_parquet(path: &Path) {
    let rows = offline_rows(true);
    let market = |i: usize, r: &Row| {
        if i != usize::MAX && swapped_separator(i) {
            r.market.replace('-', "_")
        } else {
            r.market.to_owned()
        }
    };
    let batch = RecordBatch::try_from_iter(vec![
        (
            "clicks_7d",
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|(_, r)| r.clicks),
            )) as ArrayRef,
        ),
        (
            "item_id",
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|(_, r)| r.item),
            )),
        ),
        (
            "request_id",
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, r)| r.request.clone()),
            )),
        ),
        (
            "user_locale",
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, r)| r.locale),
            )),
        ),
        (
            "market",
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(i, r)| market(*i, r)),
            )),
        ),
        (
            "ctr",
            Arc::new(Float64Array::from_iter_values(
                rows.iter().map(|(_, r)| r.ctr),
            )),
        ),
        (
            "item_price",
            Arc::new(Float32Array::from_iter_values(
                rows.iter().map(|(_, r)| r.price),
            )),
        ),
        (
            "category",
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, r)| r.category.clone()),
            )),
        ),
        (
            "item_embedding",
            Arc::new(ListArray::from_iter_primitive::<Float32Type, _, _>(
                rows.iter().map(|(_, r)| Some(r.embedding.map(Some))),
            )),
        ),
    ])
    .unwrap();
    write_parquet(path, &batch);
}

/// The offline side as CSV without skews: ids as integers, every number as text.
fn write_offline_csv(path: &Path) {
    let mut s =
        String::from("request_id,item_id,user_locale,market,ctr,item_price,clicks_7d,category\n");
    for (_, r) in offline_rows(false) {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            r.request, r.item, r.locale, r.market, r.ctr, r.price, r.clicks, r.category
        ));
    }
    std::fs::write(path, s).unwrap();
}

const THRESHOLDS: &str = r#"
[features]
max-mismatch-rate = 0.001

[feature.item_price]
abs-tolerance = 0.01
"#;

fn featurelog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        write_served(&dir.path().join("served"));
        write_offline_parquet(&dir.path().join("offline.parquet"));
        write_offline_csv(&dir.path().join("offline.csv"));
        std::fs::write(dir.path().join("thresholds.toml"), THRESHOLDS).unwrap();
        Fixture { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn diff(&self, offline: &str, extra: &[&str]) -> Output {
        let served = self.path("served");
        let offline = self.path(offline);
        let thresholds = self.path("thresholds.toml");
        let mut args = vec![
            "diff",
            "--served",
            &served,
            "--offline",
            &offline,
            "--key",
            "request_id,item_id",
            "--thresholds",
            &thresholds,
        ];
        args.extend_from_slice(extra);
        featurelog(&args)
    }
}

fn feature<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no feature {name}"))
}

/// The report's violations, each as the given fields joined by `:` (a missing one as `-`).
fn violations(report: &Value, fields: &[&str]) -> BTreeSet<String> {
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            fields
                .iter()
                .map(|f| v[*f].as_str().unwrap_or("-"))
                .collect::<Vec<_>>()
                .join(":")
        })
        .collect()
}

fn count_compared(pred: impl Fn(usize) -> bool) -> u64 {
    (0..ROWS)
        .filter(|&i| !dropped_offline(i) && pred(i))
        .count() as u64
}

#[test]
fn reports_exactly_the_injected_skews() {
    let fx = Fixture::new();
    let out = fx.diff("offline.parquet", &["--format", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["schema_version"], 1);
    assert_eq!(
        r["served"]["files"], 2,
        "hidden and pending files are skipped"
    );

    // Coverage: the dropped keys and the offline-only ones, nothing else.
    let c = &r["coverage"];
    let served_only = (0..ROWS).filter(|&i| dropped_offline(i)).count() as u64;
    assert_eq!(c["served_rows"], ROWS as u64);
    assert_eq!(c["served_only"], served_only);
    assert_eq!(c["offline_only"], EXTRA_OFFLINE as u64);
    assert_eq!(c["both"], ROWS as u64 - served_only);
    for k in [
        "served_duplicate_keys",
        "offline_duplicate_keys",
        "served_null_keys",
        "offline_null_keys",
    ] {
        assert_eq!(c[k], 0, "{k}");
    }
    assert!(
        c["offline_only_examples"][0]
            .as_str()
            .unwrap()
            .starts_with("offline-only-")
    );

    // Schema: identical once the joiner's context columns and partitions are set aside, and
    // integer vs string ids are compatible keys.
    let s = &r["schema"];
    for k in [
        "missing_in_offline",
        "extra_in_offline",
        "type_differences",
        "near_names",
    ] {
        assert_eq!(s[k].as_array().unwrap().len(), 0, "{k}: {}", s[k]);
    }
    let ignored: BTreeSet<&str> = s["ignored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        ignored,
        BTreeSet::from(["dt", "hr", "model_name", "served_at"])
    );

    // Locale truncation.
    let f = feature(&r, "user_locale");
    assert_eq!(f["mismatches"], count_compared(truncated_locale));
    assert_eq!(f["classes"].as_array().unwrap().len(), 1);
    assert_eq!(f["classes"][0]["class"], "locale-truncation");
    assert_eq!(f["classes"][0]["mismatch_rate_after"], 0.0);
    let top = &f["top_pairs"][0];
    assert!(
        top["served"].as_str().unwrap().contains('-') && top["class"] == "locale-truncation",
        "{top}"
    );
    assert!(!top["example_keys"].as_array().unwrap().is_empty());

    // Separator swap.
    let f = feature(&r, "market");
    assert_eq!(f["mismatches"], count_compared(swapped_separator));
    assert_eq!(f["classes"].as_array().unwrap().len(), 1);
    assert_eq!(f["classes"][0]["class"], "separator");
    let pairs: BTreeSet<(String, String)> = f["top_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["served"].as_str().unwrap().to_owned(),
                p["offline"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        pairs.contains(&("\"jp-JA\"".to_owned(), "\"jp_JA\"".to_owned())),
        "{pairs:?}"
    );

    // Float noise: within the per-feature tolerance it matches, beyond it is reported with the
    // size of the difference.
    let f = feature(&r, "item_price");
    assert_eq!(f["mismatches"], count_compared(price_noise_beyond));
    assert_eq!(f["within_tolerance"], count_compared(price_noise_within));
    assert_eq!(f["limits"]["abs_tolerance"], 0.01);
    let hist = f["difference_histogram"].as_array().unwrap();
    let beyond: u64 = hist
        .iter()
        .filter(|b| b["lower"].as_f64().unwrap() >= 0.1)
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(beyond, count_compared(price_noise_beyond), "{hist:?}");
    assert_eq!(f["classes"][0]["class"], "other");

    let f = feature(&r, "ctr");
    assert_eq!(f["mismatches"], 0);
    assert_eq!(f["within_tolerance"], r["coverage"]["both"]);

    // The stale column.
    let f = feature(&r, "clicks_7d");
    assert_eq!(f["mismatches"], count_compared(stale_clicks));
    assert_eq!(f["top_pairs"][0]["class"], "other");

    // Nothing else.
    for name in ["category", "item_embedding"] {
        let f = feature(&r, name);
        assert_eq!(f["mismatches"], 0, "{name}");
        assert_eq!(f["compared"], r["coverage"]["both"]);
    }
    let clean = ["ctr", "category", "item_embedding"];
    for f in r["features"].as_array().unwrap() {
        if clean.contains(&f["name"].as_str().unwrap()) {
            assert!(
                f["violations"].as_array().unwrap().is_empty(),
                "{}",
                f["name"]
            );
        }
        if let Some(d) = f["distribution"].as_object()
            && (f["name"] == "ctr" || f["name"] == "category")
        {
            assert!(
                d["psi"].as_f64().unwrap() < 0.01,
                "{}: {:?}",
                f["name"],
                d["psi"]
            );
        }
    }
    let subjects = violations(&r, &["scope", "subject"]);
    let expected: BTreeSet<String> = [
        "coverage:-",
        "feature:user_locale",
        "feature:market",
        "feature:item_price",
        "feature:clicks_7d",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(subjects, expected);
    let coverage: Vec<&Value> = r["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["scope"] == "coverage")
        .collect();
    assert_eq!(coverage.len(), 1);
    assert_eq!(coverage[0]["metric"], "max-served-only-rate");
    assert_eq!(r["verdict"], "skew");
}

#[test]
fn csv_offline_with_integer_ids_and_no_skew_passes() {
    let fx = Fixture::new();
    // The CSV has no vectors: leaving the column out is the user's call.
    let out = fx.diff("offline.csv", &["--ignore", "item_embedding"]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("PASS"), "{text}");
    let out = fx.diff(
        "offline.csv",
        &["--ignore", "item_embedding", "--format", "json"],
    );
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["coverage"]["both"], ROWS as u64);
    for f in r["features"].as_array().unwrap() {
        assert_eq!(f["mismatches"], 0, "{}", f["name"]);
    }
    // Float32 served, float64 parsed from CSV offline: reported as a type difference only.
    let diffs: Vec<&str> = r["schema"]["type_differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["column"].as_str().unwrap())
        .collect();
    assert_eq!(diffs, ["item_price"]);
}

#[test]
fn terminal_and_markdown_name_each_skew_and_its_explanation() {
    let fx = Fixture::new();
    let out = fx.diff("offline.parquet", &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    for needle in [
        "user_locale",
        "locale-truncation",
        "separator",
        "\"jp_JA\"",
        "SKEW",
        "max-served-only-rate",
        "after keeping the primary language subtag",
    ] {
        assert!(text.contains(needle), "terminal lacks {needle}:\n{text}");
    }
    let out = fx.diff("offline.parquet", &["--format", "markdown"]);
    let md = stdout(&out);
    assert!(md.starts_with("# featurelog diff: **SKEW**"), "{md}");
    assert!(
        md.contains("### market") && md.contains("| `\"jp-JA\"` | `\"jp_JA\"` |"),
        "{md}"
    );
}

#[test]
fn renamed_columns_are_compared_and_near_names_suggested() {
    let dir = tempfile::tempdir().unwrap();
    let a = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
        (
            "userLocale",
            Arc::new(StringArray::from(vec!["en", "de", "fr"])),
        ),
        ("price", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
    ])
    .unwrap();
    let b = RecordBatch::try_from_iter(vec![
        (
            "ID",
            Arc::new(StringArray::from(vec!["1", "2", "3"])) as ArrayRef,
        ),
        (
            "user_locale",
            Arc::new(StringArray::from(vec!["en", "de", "fr"])),
        ),
        ("Price", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
    ])
    .unwrap();
    let (sa, sb) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
    write_parquet(&sa, &a);
    write_parquet(&sb, &b);
    let (sa, sb) = (sa.display().to_string(), sb.display().to_string());
    let out = featurelog(&[
        "diff",
        "--served",
        &sa,
        "--offline",
        &sb,
        "--key",
        "id",
        "--rename",
        "id=ID,userLocale=user_locale",
        "--format",
        "json",
    ]);
    let r: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "price is missing offline (under another case)"
    );
    assert_eq!(r["coverage"]["both"], 3);
    assert_eq!(feature(&r, "userLocale")["mismatches"], 0);
    assert_eq!(r["schema"]["missing_in_offline"][0], "price");
    assert_eq!(r["schema"]["near_names"][0]["offline"], "Price");
    assert_eq!(r["schema"]["near_names"][0]["differs_by"], "case");
    let out = featurelog(&[
        "diff",
        "--served",
        &sa,
        "--offline",
        &sb,
        "--key",
        "id",
        "--rename",
        "id=ID,userLocale=user_locale,price=Price",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn errors_exit_2_with_the_path_or_column() {
    let fx = Fixture::new();
    let served = fx.path("served");
    let offline = fx.path("offline.parquet");
    let out = featurelog(&[
        "diff",
        "--served",
        &served,
        "--offline",
        &offline,
        "--key",
        "request_id,nope",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("key column nope is missing from the served side"),
        "{err}"
    );

    let out = featurelog(&[
        "diff",
        "--served",
        &served,
        "--offline",
        &offline,
        "--key",
        "ctr",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("keys must be integers or strings"));

    let missing = fx.path("nowhere.parquet");
    let out = featurelog(&[
        "diff",
        "--served",
        &served,
        "--offline",
        &missing,
        "--key",
        "request_id",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere.parquet"));

    let junk = fx.path("junk.parquet");
    std::fs::write(&junk, b"PAR1 this is not parquet").unwrap();
    let out = featurelog(&[
        "diff",
        "--served",
        &served,
        "--offline",
        &junk,
        "--key",
        "request_id",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("junk.parquet"));

    let bad = fx.path("bad.toml");
    std::fs::write(&bad, "[features]\nmax-mismatch = 0.1\n").unwrap();
    let out = featurelog(&[
        "diff",
        "--served",
        &served,
        "--offline",
        &offline,
        "--key",
        "request_id",
        "--thresholds",
        &bad,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.toml"));
}

/// `featurelog diff` of two sides by `key`, with `extra` arguments.
fn diff_cli(served: &Path, offline: &Path, key: &str, extra: &[&str]) -> Output {
    let (served, offline) = (served.display().to_string(), offline.display().to_string());
    let mut args = vec![
        "diff",
        "--served",
        &served,
        "--offline",
        &offline,
        "--key",
        key,
    ];
    args.extend_from_slice(extra);
    featurelog(&args)
}

/// Runs `featurelog diff --format json` on two paths keyed by `key`: the exit code, the report
/// (Null when stdout is not JSON) and stderr.
fn diff_json(served: &Path, offline: &Path, key: &str, extra: &[&str]) -> (i32, Value, String) {
    let out = diff_cli(
        served,
        offline,
        key,
        &[&["--format", "json"], extra].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), report, err)
}

/// The two sides as `served.parquet` and `offline.parquet` in `dir`.
fn parquet_sides(dir: &Path, served: &RecordBatch, offline: &RecordBatch) -> (PathBuf, PathBuf) {
    let paths = (dir.join("served.parquet"), dir.join("offline.parquet"));
    write_parquet(&paths.0, served);
    write_parquet(&paths.1, offline);
    paths
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).unwrap()
}

#[path = "diff/delta.rs"]
mod delta;
#[path = "diff/display.rs"]
mod display;
#[path = "diff/exactness.rs"]
mod exactness;
#[path = "diff/inputs.rs"]
mod inputs;
#[path = "diff/reports.rs"]
mod reports;
#[path = "diff/writers.rs"]
mod writers;
