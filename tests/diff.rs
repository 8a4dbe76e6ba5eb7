//! `featurelog diff` end to end: datasets generated here with known injected skews (locale
//! truncation, separator swap, float noise within and beyond tolerance, missing keys, a stale
//! column) must be reported exactly, and nothing else; exit codes 0/1/2; the HTML report opens
//! in headless Chromium without console errors and is screenshotted. Then inputs as other
//! writers make them: every Parquet codec, CSV keys and types, hive escapes, UInt64 ids,
//! infinities, nulls inside lists, timestamps of different units.
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
    i % 3 != 0 // yesterday's count
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
        if let Some(d) = f["distribution"].as_object() {
            if f["name"] == "ctr" || f["name"] == "category" {
                assert!(
                    d["psi"].as_f64().unwrap() < 0.01,
                    "{}: {:?}",
                    f["name"],
                    d["psi"]
                );
            }
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

/// Headless Chromium (Debian's `chromium`): the page's script must run to its end (it sets
/// `data-report-ok` on the body, read back with `--dump-dom`) with no console error, and the
/// screenshot must be a real picture.
#[test]
fn html_report_opens_in_headless_chromium() {
    let fx = Fixture::new();
    let html = fx.path("report.html");
    let out = fx.diff("offline.parquet", &["--html", &html]);
    assert_eq!(out.status.code(), Some(1));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("data-bins") && page.contains("jp_JA") && !page.contains("http"),
        "self-contained"
    );
    assert!(page.len() < 200_000, "{} bytes", page.len());

    let chromium = ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(chromium) = chromium else {
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
            panic!("chromium is not installed (scripts/test.sh installs it)");
        }
        eprintln!("skipping: chromium is not installed (apt-get install chromium)");
        return;
    };
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{html}");
    let common = |cmd: &mut Command| {
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--user-data-dir={}", profile.path().display()),
        ]);
    };
    let dump = |url: &str| {
        let mut dump = Command::new(chromium);
        common(&mut dump);
        let out = dump.args(["--dump-dom", url]).output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        (String::from_utf8_lossy(&out.stdout).into_owned(), log)
    };
    // The check must be able to fail: a page that logs an error and throws is caught by it with
    // this very Chromium (whose log format changed once already: `CONSOLE(12)` became
    // `CONSOLE:12`, and a check for the old one passed everything).
    let control = fx.dir.path().join("control.html");
    std::fs::write(
        &control,
        "<html><body><script>console.error('control-error'); null.f();</script></body></html>",
    )
    .unwrap();
    let (_, log) = dump(&format!("file://{}", control.display()));
    let caught = console_messages(&log);
    assert!(
        caught.iter().any(|l| l.contains("control-error"))
            && caught.iter().any(|l| l.contains("Uncaught")),
        "the console check misses a page's errors: {caught:?}\n{log}"
    );

    let (dom, log) = dump(&url);
    assert!(
        dom.contains("data-report-ok=\"1\""),
        "the page's script did not finish:\n{log}"
    );
    // The script drew every chart.
    let charts = page.matches("class=\"chart\"").count();
    assert!(charts > 0);
    // (The body only: the script's own text holds the markup it writes.)
    let body = dom.split("<script>").next().unwrap();
    assert_eq!(
        body.matches("<svg class=\"hist\"").count(),
        charts,
        "charts drawn"
    );
    assert!(body.contains("<rect class=\"s\""), "no bars");
    // The report logs nothing at all: any console line is an error or a leftover.
    let messages = console_messages(&log);
    assert!(messages.is_empty(), "console messages: {messages:?}");

    let png = fx.dir.path().join("report.png");
    let mut shot = Command::new(chromium);
    common(&mut shot);
    let out = shot
        .args([
            &format!("--screenshot={}", png.display()),
            "--window-size=1280,2000",
            &url,
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot ({e}):\n{log}"));
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    assert!(bytes.len() > 20_000, "a blank page? {} bytes", bytes.len());
    if let Ok(dir) = std::env::var("FEATURELOG_DIFF_SCREENSHOT") {
        std::fs::copy(&png, Path::new(&dir).join("diff-report.png")).unwrap();
    }
}

/// The console messages (logs, errors, uncaught exceptions) in Chromium's stderr log, in either
/// of the formats its releases have used (`INFO:CONSOLE(12)]`, `INFO:CONSOLE:12]`).
fn console_messages(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(":CONSOLE(") || l.contains(":CONSOLE:"))
        .collect()
}

/// Runs `featurelog diff --format json` on two paths keyed by `key`: the exit code, the report
/// (Null when stdout is not JSON) and stderr.
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

/// Offline tables come from any writer: snappy (the default of pyarrow, pandas, Spark and
/// DuckDB), gzip, lz4 and brotli must read as well as the joiner's zstd.
#[test]
fn reads_parquet_of_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 3000;
    let b = batch(vec![
        (
            "id",
            Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
        ),
        (
            "x",
            Arc::new(Float64Array::from_iter_values(
                (0..rows).map(|i| i as f64 / 7.0),
            )),
        ),
        (
            "s",
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("v{}", i % 17)),
            )),
        ),
    ]);
    let zstd = dir.path().join("zstd.parquet");
    write_parquet_with(&zstd, &b, Some(Compression::ZSTD(ZstdLevel::default())));
    for (name, codec) in [
        ("snappy", Compression::SNAPPY),
        ("gzip", Compression::GZIP(GzipLevel::default())),
        ("lz4_raw", Compression::LZ4_RAW),
        ("lz4", Compression::LZ4),
        ("brotli", Compression::BROTLI(BrotliLevel::default())),
    ] {
        let path = dir.path().join(format!("{name}.parquet"));
        write_parquet_with(&path, &b, Some(codec));
        let (code, r, err) = diff_json(&path, &zstd, "id", &[]);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(r["coverage"]["both"], rows, "{name}");
        let (code, _, err) = diff_json(&zstd, &path, "id", &[]);
        assert_eq!(code, 0, "{name} offline: {err}");
    }
}

/// No tolerance reaches an infinity: inf vs 0.0 and -inf vs +inf are mismatches whose
/// difference lands in the top bucket of the histogram.
#[test]
fn infinities_mismatch_anything_but_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let (inf, ninf) = (f64::INFINITY, f64::NEG_INFINITY);
    let ids = || Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5])) as ArrayRef;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            (
                "x",
                Arc::new(Float64Array::from(vec![inf, ninf, 1.0, inf, ninf])),
            ),
        ]),
        &batch(vec![
            ("id", ids()),
            (
                "x",
                Arc::new(Float64Array::from(vec![0.0, inf, 1.0, inf, ninf])),
            ),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    let f = feature(&r, "x");
    assert_eq!(f["mismatches"], 2, "{f}");
    assert_eq!(f["matches"], 3);
    assert_eq!(f["within_tolerance"], 0);
    let hist = f["difference_histogram"].as_array().unwrap();
    assert_eq!(hist.len(), 1, "{hist:?}");
    assert_eq!(hist[0]["upper"], Value::Null);
    assert_eq!(hist[0]["count"], 2);
    let pairs: BTreeSet<(String, String)> = f["top_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["served"].to_string(), p["offline"].to_string()))
        .collect();
    assert_eq!(
        pairs,
        BTreeSet::from([
            ("\"inf\"".to_owned(), "\"0\"".to_owned()),
            ("\"-inf\"".to_owned(), "\"inf\"".to_owned()),
        ])
    );
}

fn text_lists(rows: &[&[Option<&str>]]) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for row in rows {
        for v in *row {
            b.values().append_option(*v);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

/// A null inside a list equals only a null (not 0.0, not ""), and prints as `null`.
#[test]
fn null_list_elements_are_values_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let ids = || Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            (
                "emb",
                Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(vec![
                    Some(vec![None]),
                    Some(vec![Some(1.0), None]),
                    Some(vec![Some(2.5)]),
                ])),
            ),
            (
                "tags",
                text_lists(&[&[Some("a"), None], &[None], &[Some("b")]]),
            ),
        ]),
        &batch(vec![
            ("id", ids()),
            (
                "emb",
                Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(vec![
                    Some(vec![Some(0.0)]),
                    Some(vec![Some(1.0), None]),
                    Some(vec![Some(2.5)]),
                ])),
            ),
            (
                "tags",
                text_lists(&[&[Some("a"), Some("")], &[None], &[Some("b")]]),
            ),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    let f = feature(&r, "emb");
    assert_eq!(f["mismatches"], 1, "{f}");
    assert_eq!(f["top_pairs"][0]["served"], "[null]");
    assert_eq!(f["top_pairs"][0]["offline"], "[0]");
    assert_eq!(f["top_pairs"][0]["example_keys"][0], "1");
    let f = feature(&r, "tags");
    assert_eq!(f["mismatches"], 1, "{f}");
    assert_eq!(f["top_pairs"][0]["served"], r#"["a", null]"#);
    assert_eq!(f["top_pairs"][0]["offline"], r#"["a", ""]"#);
}

/// UInt64 ids above i64::MAX are keys (not nulls) and match the same id as text.
#[test]
fn u64_keys_keep_their_full_range() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [u64::MAX, 1 << 63, (1 << 63) - 1, 5];
    let x = || Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0, 4.0])) as ArrayRef;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", Arc::new(UInt64Array::from(ids.to_vec()))),
            ("x", x()),
        ]),
        &batch(vec![
            (
                "id",
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|i| i.to_string()),
                )),
            ),
            ("x", x()),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 0, "{err}\n{r}");
    let c = &r["coverage"];
    assert_eq!(c["both"], 4, "{c}");
    assert_eq!(c["served_null_keys"], 0);
    assert_eq!(c["served_duplicate_keys"], 0);
    assert_eq!(feature(&r, "x")["mismatches"], 0);

    // The same bits as a negative Int64 are another id.
    let signed = dir.path().join("signed.parquet");
    write_parquet(
        &signed,
        &batch(vec![
            (
                "id",
                Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| i as i64))),
            ),
            ("x", x()),
        ]),
    );
    let (_, r, err) = diff_json(&served, &signed, "id", &[]);
    assert_eq!(r["coverage"]["both"], 2, "{err}");
    assert_eq!(r["coverage"]["served_only"], 2);
}

/// CSV key columns are text, so the canonical-integer rule applies to them: `0123` is not
/// `123` and `07` is not `7`, while `123` still matches the integer 123.
#[test]
fn csv_keys_are_read_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served.parquet");
    write_parquet(
        &served,
        &batch(vec![
            (
                "id",
                Arc::new(StringArray::from(vec!["0123", "07", "123"])) as ArrayRef,
            ),
            ("x", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
        ]),
    );
    let offline = dir.path().join("offline.csv");
    std::fs::write(&offline, "id,x\n0123,1\n7,2\n123,3\n").unwrap();
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    let c = &r["coverage"];
    assert_eq!(c["both"], 2, "{c}");
    assert_eq!(c["offline_duplicate_keys"], 0, "0123 and 123 are two keys");
    assert_eq!(c["served_only_examples"], serde_json::json!(["07"]));
    assert_eq!(c["offline_only_examples"], serde_json::json!(["7"]));
    assert_eq!(feature(&r, "x")["mismatches"], 0);

    // Integer ids on the other side match canonical text only.
    let ints = dir.path().join("ints.parquet");
    write_parquet(
        &ints,
        &batch(vec![
            ("id", Arc::new(Int64Array::from(vec![123, 7])) as ArrayRef),
            ("x", Arc::new(Float64Array::from(vec![3.0, 2.0]))),
        ]),
    );
    let (_, r, err) = diff_json(&ints, &offline, "id", &[]);
    assert_eq!(r["coverage"]["both"], 2, "{err}");
    assert_eq!(r["coverage"]["offline_only_examples"][0], "0123");
}

/// A CSV with a header and no rows is a side of zero rows (not a Null-typed key), an empty
/// file in a directory adds nothing, and the files of a directory agree on types: Int64 in one
/// and Float64 in another read as Float64, an empty column takes the others' type.
#[test]
fn csv_sides_of_zero_rows_and_of_files_inferring_differently() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served.parquet");
    write_parquet(
        &served,
        &batch(vec![
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            ("x", Arc::new(Float64Array::from(vec![1.0, 2.0, 2.5]))),
            (
                "y",
                Arc::new(StringArray::from(vec![None, None, Some("a")])),
            ),
        ]),
    );

    let header_only = dir.path().join("header.csv");
    std::fs::write(&header_only, "id,x,y\n").unwrap();
    let (code, r, err) = diff_json(&served, &header_only, "id", &[]);
    assert_eq!(code, 1, "served-only keys, not an error: {err}");
    assert_eq!(r["offline"]["rows"], 0);
    assert_eq!(r["coverage"]["served_only"], 3);
    assert_eq!(r["coverage"]["both"], 0);

    let offline = dir.path().join("offline");
    std::fs::create_dir_all(&offline).unwrap();
    std::fs::write(offline.join("a.csv"), "id,x,y\n1,1,\n2,2,\n").unwrap();
    std::fs::write(offline.join("b.csv"), "id,x,y\n3,2.5,a\n").unwrap();
    std::fs::write(offline.join("c.csv"), "id,x,y\n").unwrap();
    std::fs::write(offline.join("d.csv"), "").unwrap();
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 0, "{err}\n{r}");
    assert_eq!(r["offline"]["files"], 4);
    assert_eq!(r["offline"]["rows"], 3);
    assert_eq!(r["coverage"]["both"], 3);
    assert_eq!(feature(&r, "x")["offline_type"], "Float64");
    assert_eq!(feature(&r, "x")["mismatches"], 0);
    assert_eq!(feature(&r, "y")["offline_type"], "Utf8");
    assert_eq!(feature(&r, "y")["mismatches"], 0);
}

/// Two empty sides compare nothing: in CI that is a broken pipeline, not a pass.
#[test]
fn two_empty_sides_are_an_error_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (served, offline) = (dir.path().join("s.csv"), dir.path().join("o.csv"));
    std::fs::write(&served, "id,x\n").unwrap();
    std::fs::write(&offline, "id,x\n").unwrap();
    let (code, _, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("both sides are empty"), "{err}");
}

/// Hive directories as pyarrow, Spark and Hive write them: values percent-encoded
/// (`en%20US`), null as `__HIVE_DEFAULT_PARTITION__`.
#[test]
fn hive_partition_values_are_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    for (i, segment) in [
        "locale=en%20US",
        "locale=__HIVE_DEFAULT_PARTITION__",
        "locale=a%2Fb%3Dc%25",
        "locale=%C3%BC",
    ]
    .iter()
    .enumerate()
    {
        write_parquet(
            &served.join(segment).join("part-0.parquet"),
            &batch(vec![
                ("id", Arc::new(Int64Array::from(vec![i as i64])) as ArrayRef),
                ("x", Arc::new(Float64Array::from(vec![i as f64]))),
            ]),
        );
    }
    let offline = dir.path().join("offline.parquet");
    write_parquet(
        &offline,
        &batch(vec![
            (
                "id",
                Arc::new(Int64Array::from(vec![0, 1, 2, 3])) as ArrayRef,
            ),
            ("x", Arc::new(Float64Array::from(vec![0.0, 1.0, 2.0, 3.0]))),
            (
                "locale",
                Arc::new(StringArray::from(vec![
                    Some("en US"),
                    None,
                    Some("a/b=c%"),
                    Some("ü"),
                ])),
            ),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 0, "{err}\n{r}");
    let f = feature(&r, "locale");
    assert_eq!(f["compared"], 4);
    assert_eq!(f["mismatches"], 0, "{f}");
    assert_eq!(f["both_null"], 1);
}

/// Temporal values compare in one unit: 1000 ms is 1000000 us, a date is its midnight UTC,
/// inside lists too; a real difference of 1 ms is 1000 (us).
#[test]
fn timestamps_compare_across_units() {
    let dir = tempfile::tempdir().unwrap();
    let ids = || Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef;
    let ms = [1000i64, 1_700_000_000_123];
    let day = 19_675i32; // 2023-11-14
    let micros: Vec<i64> = ms.iter().map(|v| v * 1000).collect();
    let secs = i64::from(day) * 86_400;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            ("ts", Arc::new(TimestampMillisecondArray::from(ms.to_vec()))),
            (
                "late",
                Arc::new(TimestampMillisecondArray::from(ms.to_vec()).with_timezone("UTC")),
            ),
            ("day", Arc::new(Date32Array::from(vec![day, day + 1]))),
            (
                "times",
                Arc::new(ListArray::from_iter_primitive::<
                    TimestampMillisecondType,
                    _,
                    _,
                >(vec![
                    Some(vec![Some(ms[0]), None]),
                    Some(vec![Some(ms[1])]),
                ])),
            ),
        ]),
        &batch(vec![
            ("id", ids()),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(micros.clone())),
            ),
            (
                "late",
                Arc::new(
                    TimestampMicrosecondArray::from(vec![micros[0], micros[1] + 1000])
                        .with_timezone("UTC"),
                ),
            ),
            (
                "day",
                Arc::new(TimestampSecondArray::from(vec![secs, secs + 86_400])),
            ),
            (
                "times",
                Arc::new(ListArray::from_iter_primitive::<
                    TimestampMicrosecondType,
                    _,
                    _,
                >(vec![
                    Some(vec![Some(micros[0]), None]),
                    Some(vec![Some(micros[1])]),
                ])),
            ),
        ]),
    );
    let thresholds = dir.path().join("exact.toml");
    std::fs::write(&thresholds, "[features]\nrel-tolerance = 0.0\n").unwrap();
    let t = thresholds.display().to_string();
    let (code, r, err) = diff_json(&served, &offline, "id", &["--thresholds", &t]);
    assert_eq!(code, 1, "{err}");
    for name in ["ts", "day", "times"] {
        let f = feature(&r, name);
        assert_eq!(f["mismatches"], 0, "{name}: {f}");
        assert_eq!(f["compared"], 2);
    }
    let f = feature(&r, "late");
    assert_eq!(f["mismatches"], 1, "{f}");
    assert_eq!(f["difference_histogram"][0]["lower"], 1000.0);
    assert_eq!(
        violations(&r, &["subject"]),
        BTreeSet::from(["late".to_owned()])
    );
}

/// More distinct mismatching pairs than the cap (4,096) still report their top pairs.
#[test]
fn top_pairs_survive_more_distinct_pairs_than_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let n = 4097;
    let ids = || Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            (
                "x",
                Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64))),
            ),
        ]),
        &batch(vec![
            ("id", ids()),
            (
                "x",
                Arc::new(Float64Array::from_iter_values(
                    (0..n).map(|i| -(i as f64) - 1.0),
                )),
            ),
        ]),
    );
    for threads in ["1", "2"] {
        let (code, r, err) = diff_json(&served, &offline, "id", &["--threads", threads]);
        assert_eq!(code, 1, "{err}");
        let f = feature(&r, "x");
        assert_eq!(f["mismatches"], n, "{threads}");
        assert_eq!(
            f["top_pairs"].as_array().unwrap().len(),
            10,
            "threads {threads}: {f}"
        );
        assert_eq!(f["top_pairs"][0]["count"], 1);
        assert_eq!(f["classes"][0]["count"], n, "class counts stay exact");
    }
}

/// A report that cannot be written (a full disk) is an error, exit 2, not a panic.
#[test]
fn a_failed_stdout_write_exits_2() {
    let Ok(full) = File::options().write(true).open("/dev/full") else {
        eprintln!("skipping: no /dev/full");
        return;
    };
    let fx = Fixture::new();
    let (served, offline) = (fx.path("served"), fx.path("offline.parquet"));
    let out = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args([
            "diff",
            "--served",
            &served,
            "--offline",
            &offline,
            "--key",
            "request_id,item_id",
        ])
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("writing the report to stdout"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Nested feature columns: a struct, a map and a list of lists are compared (as text, as
/// Arrow prints them); a list of structs is skipped with a note naming its type, and every
/// other feature is still diffed.
#[test]
fn nested_columns_are_compared_or_skipped_never_fatal() {
    use arrow_array::builder::{Float32Builder, Int64Builder, MapBuilder, StructBuilder};
    let dir = tempfile::tempdir().unwrap();
    let ids = || Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef;
    // The struct's fields (a: Int64, b: Utf8), taken from a batch of those columns.
    let fields = batch(vec![
        ("a", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("b", Arc::new(StringArray::from(vec!["x"]))),
    ])
    .schema()
    .fields()
    .clone();
    let structs = |a: [i64; 3]| {
        let mut b = StructBuilder::from_fields(fields.clone(), 3);
        for v in a {
            b.field_builder::<Int64Builder>(0).unwrap().append_value(v);
            b.field_builder::<StringBuilder>(1)
                .unwrap()
                .append_value("x");
            b.append(true);
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let list_of_structs = |a: [i64; 3]| {
        let mut b = ListBuilder::new(StructBuilder::from_fields(fields.clone(), 3));
        for v in a {
            let s = b.values();
            s.field_builder::<Int64Builder>(0).unwrap().append_value(v);
            s.field_builder::<StringBuilder>(1)
                .unwrap()
                .append_value("x");
            s.append(true);
            b.append(true);
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let maps = |a: [i64; 3]| {
        let mut b = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
        for v in a {
            b.keys().append_value("k");
            b.values().append_value(v);
            b.append(true).unwrap();
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let vectors = |a: [f32; 3]| {
        let mut b = ListBuilder::new(ListBuilder::new(Float32Builder::new()));
        for v in a {
            b.values().values().append_value(v);
            b.values().values().append_value(1.0);
            b.values().append(true);
            b.append(true);
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            ("items", list_of_structs([1, 2, 3])),
            ("x", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
            ("s", structs([1, 2, 3])),
            ("m", maps([1, 2, 3])),
            ("vv", vectors([1.0, 2.0, 3.0])),
        ]),
        &batch(vec![
            ("id", ids()),
            ("items", list_of_structs([1, 2, 4])),
            ("x", Arc::new(Float64Array::from(vec![1.0, 2.0, 5.0]))),
            ("s", structs([1, 2, 4])),
            ("m", maps([1, 2, 4])),
            ("vv", vectors([1.0, 2.0, 4.0])),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    let skipped = r["schema"]["not_compared"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0]["column"], "items");
    assert_eq!(skipped[0]["offline_column"], "items");
    for side in ["served_type", "offline_type"] {
        let t = skipped[0][side].as_str().unwrap();
        assert!(t.starts_with("List(") && t.contains("Struct("), "{t}");
    }
    let reason = skipped[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("lists of structs are not compared"),
        "{reason}"
    );
    let compared: Vec<&str> = r["schema"]["compared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(compared, ["x", "s", "m", "vv"]);
    assert!(
        r["features"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["name"] != "items")
    );
    // Every other feature is diffed: each differs at id 3.
    for (name, compared_as, served, offline) in [
        ("x", "number", "3", "5"),
        ("s", "text", r#""{a: 3, b: x}""#, r#""{a: 4, b: x}""#),
        ("m", "text", r#""{k: 3}""#, r#""{k: 4}""#),
        ("vv", "text_list", r#"["[3.0, 1.0]"]"#, r#"["[4.0, 1.0]"]"#),
    ] {
        let f = feature(&r, name);
        assert_eq!(f["compared_as"], compared_as, "{name}");
        assert_eq!(f["compared"], 3, "{name}");
        assert_eq!(f["mismatches"], 1, "{name}: {f}");
        assert_eq!(f["top_pairs"][0]["served"], served, "{name}");
        assert_eq!(f["top_pairs"][0]["offline"], offline, "{name}");
        assert_eq!(f["top_pairs"][0]["example_keys"][0], "3", "{name}");
    }
    // The terminal says which column is left out, its type and why.
    let out = diff_cli(&served, &offline, "id", &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("not compared: items is List(")
                && l.contains("lists of structs are not compared")),
        "{text}"
    );
    // A list of structs on one side only, against text: compared as text.
    let (code, r, err) = diff_json(
        &dir.path().join("served.parquet"),
        &dir.path().join("offline.parquet"),
        "id",
        &["--rename", "items=s"],
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(feature(&r, "items")["compared_as"], "text");
}

/// Example keys are distinct keys, the same every run whatever the threads: each served row
/// is in two files (served duplicates), each offline row twice (offline duplicates), and two
/// composite keys whose parts hold the `|` that joins parts print apart.
#[test]
fn example_keys_are_distinct_and_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    // (a, b): 40 keys on both sides, 10 served only, and two that print alike unquoted.
    let both: Vec<(String, String)> = (0..40)
        .map(|k| (format!("k{k}"), "1".to_owned()))
        .chain([("x|y".into(), "z".into()), ("x".into(), "y|z".into())])
        .collect();
    let served_only: Vec<(String, String)> =
        (0..10).map(|k| (format!("s{k}"), "1".to_owned())).collect();
    let side = |keys: &[(String, String)], x: &str, y: &dyn Fn(&str) -> &'static str| {
        batch(vec![
            (
                "a",
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| &k.0))) as ArrayRef,
            ),
            (
                "b",
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| &k.1))),
            ),
            (
                "x",
                Arc::new(StringArray::from_iter_values(keys.iter().map(|_| x))),
            ),
            (
                "y",
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| y(&k.0)))),
            ),
        ])
    };
    let all: Vec<(String, String)> = both.iter().chain(&served_only).cloned().collect();
    for part in 0..2 {
        write_parquet(
            &served.join(format!("part-{part}.parquet")),
            &side(&all, "a", &|_| "same"),
        );
    }
    let offline = dir.path().join("offline.parquet");
    let twice: Vec<(String, String)> = both.iter().chain(&both).cloned().collect();
    write_parquet(
        &offline,
        &side(&twice, "b", &|a| {
            if a.starts_with('x') { "other" } else { "same" }
        }),
    );
    let mut runs = BTreeSet::new();
    for threads in ["1", "2", "4"] {
        for _ in 0..3 {
            let (code, r, err) = diff_json(&served, &offline, "a,b", &["--threads", threads]);
            assert_eq!(code, 1, "{err}");
            let c = &r["coverage"];
            assert_eq!(c["served_duplicate_keys"], all.len(), "{c}");
            assert_eq!(c["offline_duplicate_keys"], both.len(), "{c}");
            let examples = |v: &Value| -> Vec<String> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k.as_str().unwrap().to_owned())
                    .collect()
            };
            let pair = examples(&feature(&r, "x")["top_pairs"][0]["example_keys"]);
            let only = examples(&c["served_only_examples"]);
            for (list, len) in [(&pair, 3), (&only, 5)] {
                let distinct: BTreeSet<&String> = list.iter().collect();
                assert_eq!(distinct.len(), len, "threads {threads}: {list:?}");
            }
            assert!(only.iter().all(|k| k.starts_with('s')), "{only:?}");
            assert_eq!(
                examples(&feature(&r, "y")["top_pairs"][0]["example_keys"]),
                [r#""x|y"|z"#, r#"x|"y|z""#],
                "threads {threads}"
            );
            runs.insert((pair, only));
        }
    }
    assert_eq!(runs.len(), 1, "examples differ between runs: {runs:?}");
}

/// Nulls are a bin of their own in the distributions: a number and a text feature null in 30%
/// of served rows but never offline (and the reverse) show a shift whose top contributor is
/// the null bin, while the same null rate on both sides shows none.
#[test]
fn null_rates_shift_the_distributions() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1000;
    let ids = || Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef;
    // Whole hundreds null, so that the values left have the same shares on both sides.
    let nulls = |i: i64| (i / 100) % 10 < 3;
    let num = |null: &dyn Fn(i64) -> bool| {
        Arc::new(Float64Array::from_iter(
            (0..n).map(|i| (!null(i)).then_some((i % 100) as f64)),
        )) as ArrayRef
    };
    let text = |null: &dyn Fn(i64) -> bool| {
        Arc::new(StringArray::from_iter(
            (0..n).map(|i| (!null(i)).then(|| format!("c{}", i % 5))),
        )) as ArrayRef
    };
    let never = |_: i64| false;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            ("x", num(&nulls)),
            ("c", text(&nulls)),
            ("x_offline_nulls", num(&never)),
            ("c_offline_nulls", text(&never)),
            ("x_same", num(&nulls)),
            ("c_same", text(&nulls)),
        ]),
        &batch(vec![
            ("id", ids()),
            ("x", num(&never)),
            ("c", text(&never)),
            ("x_offline_nulls", num(&nulls)),
            ("c_offline_nulls", text(&nulls)),
            ("x_same", num(&nulls)),
            ("c_same", text(&nulls)),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    for (name, kind, served_rate, offline_rate) in [
        ("x", "numeric", 0.3, 0.0),
        ("c", "categorical", 0.3, 0.0),
        ("x_offline_nulls", "numeric", 0.0, 0.3),
        ("c_offline_nulls", "categorical", 0.0, 0.3),
    ] {
        let f = feature(&r, name);
        let d = &f["distribution"];
        assert_eq!(d["kind"], kind, "{name}");
        assert!(d["psi"].as_f64().unwrap() > 0.25, "{name}: {d}");
        assert!(d["js"].as_f64().unwrap() > 0.1, "{name}: {d}");
        assert_eq!(f["served_null_rate"], served_rate, "{name}");
        assert_eq!(f["offline_null_rate"], offline_rate, "{name}");
        assert_eq!(d["top_contributors"][0], "null", "{name}: {d}");
        let bin = d["bins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["label"] == "null")
            .unwrap_or_else(|| panic!("{name}: no null bin in {d}"));
        assert_eq!(bin["served"], (served_rate * n as f64) as u64, "{name}");
        assert_eq!(bin["offline"], (offline_rate * n as f64) as u64, "{name}");
        assert_eq!(d["served_nulls"], bin["served"]);
        assert!(
            f["violations"]
                .as_array()
                .unwrap()
                .contains(&Value::from("max-psi")),
            "{name}: {f}"
        );
        if kind == "numeric" {
            // KS compares the values' cumulative shares: the values are the same.
            assert!(d["ks"].as_f64().unwrap() < 1e-9, "{name}: {d}");
        }
    }
    for name in ["x_same", "c_same"] {
        let f = feature(&r, name);
        let d = &f["distribution"];
        assert!(d["psi"].as_f64().unwrap() < 1e-9, "{name}: {d}");
        assert!(d["js"].as_f64().unwrap() < 1e-6, "{name}: {d}");
        assert_eq!(f["served_null_rate"], 0.3, "{name}");
        assert!(f["violations"].as_array().unwrap().is_empty(), "{name}");
    }
    // The terminal names the null bin and both null rates.
    let out = diff_cli(&served, &offline, "id", &[]);
    let text = stdout(&out);
    assert!(
        text.contains("x: distribution shift") && text.contains("most from null"),
        "{text}"
    );
    assert!(text.contains("null% s/o"), "{text}");
    assert!(text.contains("30.00%/0%"), "{text}");
}

/// Copies every file under `dir` to the test S3 server under `prefix`, with its relative path.
fn upload_dir(s3: &featurelog_testkit::TestS3, dir: &Path, prefix: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let relative = path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned();
            let bytes = std::fs::read(&path).unwrap();
            runtime.block_on(s3.put(&format!("{prefix}/{relative}"), bytes));
        }
    }
}

/// `featurelog diff --format json` with `env` and `extra` arguments, as (exit code, report,
/// stderr).
fn diff_json_with_env(
    served: &str,
    offline: &str,
    env: &[(&str, String)],
    extra: &[&str],
) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_featurelog"))
        .args(["diff", "--served", served, "--offline", offline])
        .args(["--key", "request_id,item_id", "--format", "json"])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), report, err)
}

/// The joiner's dataset on S3, as it is once joiners scale out, and the offline table there
/// too: `s3://` inputs (a prefix, or one object) give the same report as the same files read
/// locally, name their URLs, and skip the dataset's bookkeeping (`_featurelog/`, pending
/// files, which are not Parquet and would fail the read); a prefix with no data exits 2 and
/// says so.
#[test]
fn s3_inputs_give_the_report_of_the_same_files_read_locally() {
    let Some(s3) =
        featurelog_testkit::s3("s3_inputs_give_the_report_of_the_same_files_read_locally")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    write_served(&served);
    let offline = dir.path().join("offline.parquet");
    write_offline_parquet(&offline);
    let prefix = s3.unique_prefix("diff");
    upload_dir(&s3, &served, &format!("{prefix}/dataset"));
    // The offline table as one object among others.
    upload_dir(&s3, dir.path(), &format!("{prefix}/all"));

    let (local_code, local, local_err) = diff_json_with_env(
        served.to_str().unwrap(),
        offline.to_str().unwrap(),
        &[],
        &[],
    );
    assert_eq!(local_code, 1, "{local_err}");
    let env = s3.aws_env();
    let (served_url, offline_url) = (
        s3.url(&format!("{prefix}/dataset")),
        s3.url(&format!("{prefix}/all/offline.parquet")),
    );
    let (code, remote, err) = diff_json_with_env(&served_url, &offline_url, &env, &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(remote["served"]["path"], served_url.as_str());
    assert_eq!(remote["offline"]["path"], offline_url.as_str());
    for part in ["coverage", "schema", "features", "violations", "verdict"] {
        assert_eq!(remote[part], local[part], "{part}");
    }
    for side in ["served", "offline"] {
        for count in ["files", "rows", "columns"] {
            assert_eq!(remote[side][count], local[side][count], "{side} {count}");
        }
    }

    // Nothing there: an error that names the URL, not a pass.
    let empty = s3.url(&format!("{prefix}/nothing"));
    let (code, _, err) = diff_json_with_env(&empty, &offline_url, &env, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&empty) && err.contains("no .parquet or .csv"),
        "{err}"
    );

    // The joiner's completeness markers come along for --complete-only.
    tokio::runtime::Runtime::new().unwrap().block_on(s3.put(
        &format!("{prefix}/dataset/dt=2025-11-29/hr=18/_SUCCESS"),
        Vec::new(),
    ));
    let (_, complete, err) =
        diff_json_with_env(&served_url, &offline_url, &env, &["--complete-only"]);
    assert_eq!(complete["served"]["files"], 1, "{err}");
    assert_eq!(complete["served"]["incomplete_files_skipped"], 1);
}

/// `--complete-only` reads the hours the joiner marked complete and skips (and counts) the one
/// still growing; a Spark-style `_SUCCESS` at the root makes everything complete; a side with
/// no complete directory is an error, not an empty pass.
#[test]
fn complete_only_reads_the_hours_marked_complete() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    write_served(&served);
    let offline = dir.path().join("offline.parquet");
    write_offline_parquet(&offline);
    let complete_only = ["--complete-only"];

    // Nothing marked: an error that says why.
    let (code, _, err) = diff_json(&served, &offline, "request_id,item_id", &complete_only);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("_SUCCESS") && err.contains("2 elsewhere"),
        "{err}"
    );

    // Hour 18 complete, hour 19 still growing: only hour 18's rows are read.
    std::fs::write(served.join("dt=2025-11-29/hr=18/_SUCCESS"), b"").unwrap();
    let (_, all, _) = diff_json(&served, &offline, "request_id,item_id", &[]);
    let (_, part, err) = diff_json(&served, &offline, "request_id,item_id", &complete_only);
    assert_eq!(part["served"]["files"], 1, "{err}");
    assert_eq!(part["served"]["incomplete_files_skipped"], 1);
    assert_eq!(part["served"]["rows"], (ROWS / 2) as u64);
    assert_eq!(all["served"]["rows"], ROWS as u64);
    assert_eq!(all["served"]["incomplete_files_skipped"], 0);

    // A marker at the root (Spark's): every file is complete.
    std::fs::write(served.join("_SUCCESS"), b"").unwrap();
    let (_, root, _) = diff_json(&served, &offline, "request_id,item_id", &complete_only);
    assert_eq!(root["served"]["rows"], ROWS as u64);
    assert_eq!(root["served"]["incomplete_files_skipped"], 0);
}

/// Every normalization class of docs/DIFF.md, injected into a column of its own and read back
/// through the command line: each feature names exactly its class with the count injected, the
/// rate it would have after that normalization (non-zero when another class is left), the
/// nulls on one side only, and nothing is reported for the column that agrees.
#[test]
fn every_normalization_class_is_named_with_its_count_and_rate_after() {
    const N: i64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let text = |f: &dyn Fn(i64) -> Option<&'static str>| {
        Arc::new(StringArray::from_iter((0..N).map(f))) as ArrayRef
    };
    let ints =
        |f: &dyn Fn(i64) -> Option<i64>| Arc::new(Int64Array::from_iter((0..N).map(f))) as ArrayRef;
    let tags = |swapped: &dyn Fn(i64) -> bool| {
        let mut b = ListBuilder::new(StringBuilder::new());
        for i in 0..N {
            let (x, y) = if swapped(i) { ("b", "a") } else { ("a", "b") };
            b.values().append_value(x);
            b.values().append_value(y);
            b.append(true);
        }
        Arc::new(b.finish()) as ArrayRef
    };
    // Not one of these is a float32 exactly, so each of the first 25 rounds differently.
    let score = |i: i64| i as f64 + 0.1;
    let served = batch(vec![
        ("id", ints(&Some)),
        ("country", text(&|_| Some("US"))),
        ("city", text(&|_| Some("New York"))),
        ("qty", text(&|_| Some("1"))),
        (
            "score",
            Arc::new(Float64Array::from_iter_values(
                (0..N).map(|i| f64::from(score(i) as f32)),
            )),
        ),
        ("segment", text(&|i| (i >= 12).then_some("a"))),
        ("age", ints(&|i| (i >= 8).then_some(30))),
        ("bucket", ints(&|_| Some(5))),
        ("tags", tags(&|_| false)),
        (
            "market",
            text(&|i| {
                Some(match i {
                    0..10 => "jp-JA",
                    10..14 => "en",
                    _ => "en-GB",
                })
            }),
        ),
        ("clean", text(&|i| Some(if i % 2 == 0 { "x" } else { "y" }))),
    ]);
    let offline = batch(vec![
        ("id", ints(&Some)),
        ("country", text(&|i| Some(if i < 20 { "us" } else { "US" }))),
        (
            "city",
            text(&|i| Some(if i < 10 { "  New   York " } else { "New York" })),
        ),
        ("qty", text(&|i| Some(if i < 15 { "1.0" } else { "1" }))),
        (
            "score",
            Arc::new(Float64Array::from_iter_values((0..N).map(|i| {
                if i < 25 {
                    score(i)
                } else {
                    f64::from(score(i) as f32)
                }
            }))),
        ),
        ("segment", text(&|i| Some(if i < 12 { "" } else { "a" }))),
        ("age", ints(&|i| Some(if i < 8 { -1 } else { 30 }))),
        ("bucket", ints(&|i| (i >= 6).then_some(5))),
        ("tags", tags(&|i| i < 9)),
        (
            "market",
            text(&|i| Some(if i < 10 { "JP_ja" } else { "en-GB" })),
        ),
        ("clean", text(&|i| Some(if i % 2 == 0 { "x" } else { "y" }))),
    ]);
    let (served, offline) = parquet_sides(dir.path(), &served, &offline);
    let thresholds = dir.path().join("thresholds.toml");
    // Without a tolerance of its own the float32 round trip would be a match (docs/DIFF.md).
    std::fs::write(&thresholds, "[feature.score]\nrel-tolerance = 0\n").unwrap();
    let thresholds = thresholds.display().to_string();
    let (code, r, err) = diff_json(&served, &offline, "id", &["--thresholds", &thresholds]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(r["coverage"]["both"], N, "{}", r["coverage"]);

    // (feature, mismatches, [(class, count, mismatch rate after it)], null served only,
    // null offline only)
    type Classes = &'static [(&'static str, u64, f64)];
    let expected: [(&str, u64, Classes, u64, u64); 10] = [
        ("country", 20, &[("case", 20, 0.0)], 0, 0),
        ("city", 10, &[("whitespace", 10, 0.0)], 0, 0),
        ("qty", 15, &[("number-format", 15, 0.0)], 0, 0),
        ("score", 25, &[("float32-round-trip", 25, 0.0)], 0, 0),
        ("segment", 12, &[("null-sentinel", 12, 0.0)], 12, 0),
        ("age", 8, &[("null-sentinel", 8, 0.0)], 8, 0),
        ("bucket", 6, &[("other", 6, 0.06)], 0, 6),
        ("tags", 9, &[("list-order", 9, 0.0)], 0, 0),
        (
            "market",
            14,
            &[("case+separator", 10, 0.04), ("locale-truncation", 4, 0.10)],
            0,
            0,
        ),
        ("clean", 0, &[], 0, 0),
    ];
    for (name, mismatches, classes, null_served, null_offline) in expected {
        let f = feature(&r, name);
        assert_eq!(f["mismatches"], mismatches, "{name}: {f}");
        assert_eq!(f["null_served_only"], null_served, "{name}: {f}");
        assert_eq!(f["null_offline_only"], null_offline, "{name}: {f}");
        let got: Vec<(String, u64, f64)> = f["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["class"].as_str().unwrap().to_owned(),
                    c["count"].as_u64().unwrap(),
                    c["mismatch_rate_after"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got.len(), classes.len(), "{name}: {got:?}");
        for ((class, count, after), (want_class, want_count, want_after)) in got.iter().zip(classes)
        {
            assert_eq!(
                (class.as_str(), *count),
                (*want_class, *want_count),
                "{name}"
            );
            assert!((after - want_after).abs() < 1e-9, "{name} {class}: {after}");
        }
    }
    // Every skewed feature fails the diff; the clean one and the key never do.
    let failing = violations(&r, &["subject"]);
    let skewed: BTreeSet<String> = expected
        .iter()
        .filter(|e| e.1 > 0)
        .map(|e| e.0.to_owned())
        .collect();
    assert_eq!(failing, skewed, "{}", r["violations"]);
}

/// A model with hundreds of features gets a report page of a few kilobytes per feature, each
/// feature skewed (so each has its open section, histograms and top pairs): the worst case.
#[test]
fn html_report_stays_small_with_hundreds_of_features() {
    const ROWS: i64 = 2000;
    const NUMBERS: usize = 200;
    const TEXTS: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let side = |offline: bool| {
        let mut columns: Vec<(String, ArrayRef)> = vec![(
            "id".into(),
            Arc::new(Int64Array::from_iter_values(0..ROWS)) as ArrayRef,
        )];
        for f in 0..NUMBERS {
            let values = (0..ROWS).map(|i| {
                let v = ((i * 7919 + f as i64 * 104_729) % 1000) as f64 / 10.0;
                // A tenth of the rows drift offline, by an amount that grows with the row.
                if offline && i % 10 == f as i64 % 10 {
                    v + 1.0 + i as f64 / 100.0
                } else {
                    v
                }
            });
            columns.push((
                format!("num_{f:03}"),
                Arc::new(Float64Array::from_iter_values(values)),
            ));
        }
        for f in 0..TEXTS {
            let values = (0..ROWS).map(|i| {
                let v = format!("cat-{}-{}", f, (i * 31 + f as i64) % 40);
                if offline && i % 7 == 0 {
                    v.replace('-', "_")
                } else {
                    v
                }
            });
            columns.push((
                format!("txt_{f:03}"),
                Arc::new(StringArray::from_iter_values(values)),
            ));
        }
        RecordBatch::try_from_iter(columns).unwrap()
    };
    let (served, offline) = parquet_sides(dir.path(), &side(false), &side(true));
    let html = dir.path().join("report.html");
    let html_arg = html.display().to_string();
    let out = diff_cli(&served, &offline, "id", &["--html", &html_arg]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    let features = NUMBERS + TEXTS;
    for f in ["num_000", "num_199", "txt_000", "txt_099"] {
        assert!(page.contains(f), "{f} is not on the page");
    }
    let per_feature = page.len() / features;
    eprintln!(
        "{features} features: {} bytes, {per_feature} bytes a feature",
        page.len()
    );
    assert!(
        per_feature < 3_000,
        "{} bytes for {features} features ({per_feature} a feature)",
        page.len()
    );
}

/// The coverage and schema counts no other test reaches, with a CSV on the served side (a
/// non-empty one): null keys on both sides, a served-only key, an offline-only one, a column
/// missing offline, an extra offline column, a near name that differs by separator, and a type
/// difference whose values are still compared.
#[test]
fn coverage_and_schema_count_every_kind_with_a_csv_served_side() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served.csv");
    std::fs::write(
        &served,
        "id,score,item-price,only_served\n1,0.5,1.5,a\n2,0.25,2.5,b\n3,1,3.5,c\n,9,9.5,d\n4,2,4.5,e\n",
    )
    .unwrap();
    let offline = dir.path().join("offline.parquet");
    write_parquet(
        &offline,
        &batch(vec![
            (
                "id",
                Arc::new(Int64Array::from(vec![
                    Some(1),
                    Some(2),
                    Some(3),
                    None,
                    None,
                    Some(5),
                ])) as ArrayRef,
            ),
            (
                "score",
                Arc::new(StringArray::from(vec!["0.5", "0.25", "1", "9", "9", "7"])),
            ),
            (
                "item_price",
                Arc::new(Float64Array::from(vec![1.5, 2.5, 3.5, 9.5, 9.5, 5.5])),
            ),
            (
                "only_offline",
                Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5, 6])),
            ),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    let c = &r["coverage"];
    assert_eq!(c["served_rows"], 5, "{c}");
    assert_eq!(c["offline_rows"], 6, "{c}");
    assert_eq!(c["both"], 3, "{c}");
    assert_eq!(c["served_only"], 1, "{c}");
    assert_eq!(c["offline_only"], 1, "{c}");
    assert_eq!(c["served_null_keys"], 1, "{c}");
    assert_eq!(c["offline_null_keys"], 2, "{c}");
    assert_eq!(c["served_only_examples"][0], "4", "{c}");
    let s = &r["schema"];
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(&s["missing_in_offline"]),
        ["item-price", "only_served"],
        "{s}"
    );
    assert_eq!(
        names(&s["extra_in_offline"]),
        ["item_price", "only_offline"],
        "{s}"
    );
    assert_eq!(s["near_names"][0]["served"], "item-price", "{s}");
    assert_eq!(s["near_names"][0]["offline"], "item_price", "{s}");
    assert_eq!(s["near_names"][0]["differs_by"], "separator", "{s}");
    // score: a number served (CSV inference), text offline: compared as text, where the
    // served 1 reads "1.0" against the offline "1" (the issue's `"1"` vs `1.0`).
    assert_eq!(s["type_differences"][0]["column"], "score", "{s}");
    let score = feature(&r, "score");
    assert_eq!(score["compared"], 3, "{score}");
    assert_eq!(score["mismatches"], 1, "{score}");
    assert_eq!(score["top_pairs"][0]["served"], "\"1.0\"", "{score}");
    assert_eq!(score["top_pairs"][0]["offline"], "\"1\"", "{score}");
    assert_eq!(score["classes"][0]["class"], "number-format", "{score}");
    assert_eq!(score["classes"][0]["mismatch_rate_after"], 0.0, "{score}");
    // What fails: the keys of one side only and null keys, the missing columns, score; not
    // the extra columns (fail-on-extra is off by default).
    let failing = violations(&r, &["scope", "metric"]);
    let has = |scope: &str, metric: &str| failing.contains(&format!("{scope}:{metric}"));
    for metric in [
        "max-null-keys",
        "max-served-only-rate",
        "max-offline-only-rate",
    ] {
        assert!(has("coverage", metric), "{metric}: {failing:?}");
    }
    let subjects: BTreeSet<String> = violations(&r, &["scope", "subject"])
        .into_iter()
        .filter_map(|v| {
            v.split_once(':')
                .filter(|(scope, _)| *scope != "coverage")
                .map(|(_, s)| s.to_owned())
        })
        .collect();
    assert_eq!(
        subjects,
        BTreeSet::from(["item-price", "only_served", "score"].map(String::from)),
        "{}",
        r["violations"]
    );
}

/// When the keys do not line up at all (the offline table was built for other requests), no
/// value is compared, but the distributions still say which features shifted and where: a
/// number moved up by a third of its range, a category that doubled its share and a value
/// served that offline never had, against twins of each that did not move.
#[test]
fn distributions_find_the_shifted_features_when_no_key_lines_up() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2000;
    let ids = |from: i64| Arc::new(Int64Array::from_iter_values(from..from + n)) as ArrayRef;
    let num = |shift: f64| {
        Arc::new(Float64Array::from_iter_values(
            (0..n).map(|i| ((i * 37) % 90) as f64 + shift),
        )) as ArrayRef
    };
    let cats = |i: i64| format!("c{}", (i * 7) % 5);
    let text = |f: &dyn Fn(i64) -> String| {
        Arc::new(StringArray::from_iter_values((0..n).map(f))) as ArrayRef
    };
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids(0)),
            ("x", num(30.0)),
            ("x_same", num(0.0)),
            (
                "c",
                text(&|i| {
                    if i % 10 < 2 {
                        "c0".into()
                    } else if i % 10 == 2 {
                        "new".into()
                    } else {
                        cats(i)
                    }
                }),
            ),
            ("c_same", text(&cats)),
        ]),
        &batch(vec![
            ("id", ids(1_000_000)),
            ("x", num(0.0)),
            ("x_same", num(0.0)),
            ("c", text(&cats)),
            ("c_same", text(&cats)),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(r["coverage"]["both"], 0, "{}", r["coverage"]);
    assert_eq!(r["coverage"]["served_only"], n, "{}", r["coverage"]);
    let d = |name: &str| feature(&r, name)["distribution"].clone();
    let x = d("x");
    assert_eq!(x["kind"], "numeric", "{x}");
    assert!(x["psi"].as_f64().unwrap() > 1.0, "{x}");
    // A third of the offline range is above the served minimum: KS sees at least that.
    assert!(x["ks"].as_f64().unwrap() > 0.3, "{x}");
    let same = d("x_same");
    assert!(same["psi"].as_f64().unwrap() < 0.01, "{same}");
    assert!(same["ks"].as_f64().unwrap() < 0.01, "{same}");
    let c = d("c");
    assert_eq!(c["kind"], "categorical", "{c}");
    assert!(c["psi"].as_f64().unwrap() > 0.25, "{c}");
    let top: Vec<&str> = c["top_contributors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    // The value offline never had leads; the category that grew is named too.
    assert_eq!(top[0], "(not offline)", "{c}");
    assert!(top.contains(&"\"c0\""), "{c}");
    assert!(d("c_same")["psi"].as_f64().unwrap() < 0.01);
    // Only the shifted features fail on a distance.
    let shifted: BTreeSet<&str> = r["features"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["violations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == "max-psi")
        })
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(shifted, BTreeSet::from(["c", "x"]));
}
