//! What the report says beyond single values: example keys, null rates and distributions,
//! every normalization class, coverage and schema counts, S3 and complete-only inputs, and the
//! size of the HTML page.

use super::*;

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
pub(super) fn upload_dir(s3: &featurelog_testkit::TestS3, dir: &Path, prefix: &str) {
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
pub(super) fn diff_json_with_env(
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
