//! Inputs as other writers make them: every Parquet codec, CSV keys and types, hive escapes,
//! UInt64 ids, infinities, nulls inside lists, timestamps of different units, nested columns.

use super::*;

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

/// Nested feature columns: a struct (as a JSON object), a map and a list of lists (as Arrow
/// prints them) are compared as text; a list of structs is skipped with a note naming its
/// type, and every other feature is still diffed.
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
        (
            "s",
            "text",
            r#""{\"a\": 3, \"b\": \"x\"}""#,
            r#""{\"a\": 4, \"b\": \"x\"}""#,
        ),
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
