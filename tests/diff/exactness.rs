//! Exactness: integers, decimals and times that differ by one unit are mismatches at any
//! magnitude unless the feature's own threshold sets a tolerance (a duration for a time), the
//! tolerances of `[features]` being for floats; structs compare field by field, by name.

use arrow_array::{Decimal128Array, StructArray};

use super::*;

const N: i64 = 200;

/// Served and offline sides where every row of five exact features differs by a little: an id
/// near 1.5e18 by 1 (beyond f64's 2^53), an item id near 1e9 by 500, a counter near 1e6 by 1,
/// an hourly timestamp by 10 minutes, a decimal price by one cent. Their distributions keep
/// their shapes (the values lie further apart than they move), and a float feature differs by
/// float noise only: nothing but the exact comparison tells these sides apart.
fn exact_sides(dir: &Path) -> (PathBuf, PathBuf) {
    let rows = || 0..N;
    let ints = |base: i64, step: i64, shift: i64| {
        Arc::new(Int64Array::from_iter_values(
            rows().map(|i| base + i * step + shift),
        )) as ArrayRef
    };
    let side = |offline: bool| {
        let on = i64::from(offline);
        batch(vec![
            ("id", Arc::new(Int64Array::from_iter_values(rows()))),
            ("big_id", ints(1_500_000_000_000_000_000, 1_000_003, on)),
            ("item", ints(1_000_000_000, 1_000_000, 500 * on)),
            ("counter", ints(1_000_000, 10, on)),
            (
                "seen_at",
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        rows()
                            .map(|i| 1_700_000_000_000_000 + i * 3_600_000_000 + 600_000_000 * on),
                    )
                    .with_timezone("UTC"),
                ),
            ),
            (
                "price",
                Arc::new(
                    Decimal128Array::from_iter_values(
                        rows().map(|i| 1_234_567 + i128::from(i) * 100 + i128::from(on)),
                    )
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
                ),
            ),
            (
                "score",
                Arc::new(Float64Array::from_iter_values(
                    rows().map(|i| (i as f64 + 0.5) * (1.0 + 1e-9 * on as f64)),
                )),
            ),
        ])
    };
    parquet_sides(dir, &side(false), &side(true))
}

const EXACT: [&str; 5] = ["big_id", "item", "counter", "seen_at", "price"];

/// Every row of the exact features differs, so each fails; the float noise matches within
/// the floats' default tolerance. Values print as their types read: ISO 8601 times, decimals
/// with their scale.
#[test]
fn integers_decimals_and_times_that_differ_are_mismatches_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let (served, offline) = exact_sides(dir.path());
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}\n{r}");
    for name in EXACT {
        let f = feature(&r, name);
        assert_eq!(f["compared_as"], "number", "{name}");
        assert_eq!(f["mismatches"], N, "{name}: {f}");
        assert_eq!(f["within_tolerance"], 0, "{name}");
        assert_eq!(f["limits"]["abs_tolerance"], 0.0, "{name}");
        assert_eq!(f["limits"]["rel_tolerance"], 0.0, "{name}");
    }
    let score = feature(&r, "score");
    assert_eq!(score["mismatches"], 0, "{score}");
    assert_eq!(score["within_tolerance"], N);
    assert_eq!(score["limits"]["rel_tolerance"], 1e-6);
    let failing: BTreeSet<String> = EXACT.iter().map(|s| s.to_string()).collect();
    assert_eq!(violations(&r, &["subject"]), failing);

    let pair = |name: &str| {
        let p = &feature(&r, name)["top_pairs"][0];
        (
            p["served"].as_str().unwrap().to_owned(),
            p["offline"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(pair("item").0.len(), 10);
    let (s, o) = pair("seen_at");
    assert!(s.starts_with("2023-11-") && s.ends_with(":13:20Z"), "{s}");
    assert!(o.starts_with("2023-11-") && o.ends_with(":23:20Z"), "{o}");
    let (s, o) = pair("price");
    assert!(s.ends_with(".67") && o.ends_with(".68"), "{s} {o}");
    let (s, o) = pair("big_id");
    assert_eq!(o.parse::<i128>().unwrap() - s.parse::<i128>().unwrap(), 1);
    // Differences in their units: 10 minutes in microseconds, a cent.
    let seen = feature(&r, "seen_at");
    assert_eq!(seen["limits"]["time_tolerance"], "0s");
    assert_eq!(seen["difference_histogram"][0]["lower"], 1e8, "{seen}");
    assert_eq!(seen["difference_histogram"][0]["upper"], 1e9, "{seen}");
    assert_eq!(
        feature(&r, "price")["difference_histogram"][0]["lower"],
        0.01
    );
    // The time's bins and pairs read as times in the terminal too.
    let out = diff_cli(&served, &offline, "id", &[]);
    let text = stdout(&out);
    assert!(
        text.contains("|difference| (time): [1.67min, 16.7min): 200"),
        "{text}"
    );
    assert!(text.contains("SKEW"), "{text}");
}

/// The defaults' tolerances are for floats: an exact feature takes only its own, and a time's
/// is a duration (`time-tolerance`, in `[features]` for every time feature too). A tolerance
/// of the wrong kind for the feature's type is an error, not a silent no-op.
#[test]
fn tolerances_of_exact_features_are_their_own_and_a_times_is_a_duration() {
    let dir = tempfile::tempdir().unwrap();
    let (served, offline) = exact_sides(dir.path());
    let thresholds = |text: &str| {
        let path = dir.path().join("thresholds.toml");
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let t = thresholds(
        r#"
        [features]
        abs-tolerance = 1000
        rel-tolerance = 0.01
        [feature.counter]
        abs-tolerance = 1
        [feature.seen_at]
        time-tolerance = "15m"
        [feature.price]
        abs-tolerance = 0.01
        "#,
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &["--thresholds", &t]);
    assert_eq!(code, 1, "{err}");
    for name in ["counter", "seen_at", "price", "score"] {
        let f = feature(&r, name);
        assert_eq!(f["mismatches"], 0, "{name}: {f}");
        assert_eq!(f["within_tolerance"], N, "{name}");
    }
    for name in ["big_id", "item"] {
        assert_eq!(feature(&r, name)["mismatches"], N, "{name}");
    }
    let seen = &feature(&r, "seen_at")["limits"];
    assert_eq!(seen["time_tolerance"], "15m", "{seen}");
    assert_eq!(seen["abs_tolerance"], 9e8, "{seen}");

    let t = thresholds("[features]\ntime-tolerance = \"10m\"\n");
    let (_, r, err) = diff_json(&served, &offline, "id", &["--thresholds", &t]);
    assert_eq!(feature(&r, "seen_at")["mismatches"], 0, "{err}");
    assert_eq!(feature(&r, "counter")["mismatches"], N);

    for (text, says) in [
        (
            "[feature.seen_at]\nabs-tolerance = 600000000\n",
            "time-tolerance",
        ),
        ("[feature.counter]\ntime-tolerance = \"1s\"\n", "not a time"),
        (
            "[feature.price]\nrel-tolerance = 1\n[feature.id]\nmax-psi = 1\n",
            "key column",
        ),
    ] {
        let t = thresholds(text);
        let (code, _, err) = diff_json(&served, &offline, "id", &["--thresholds", &t]);
        assert_eq!(code, 2, "{text}: {err}");
        assert!(
            err.contains("thresholds [feature.") && err.contains(says),
            "{err}"
        );
    }
}

/// A struct `{a, b, c: {d}}` with its fields in `order`.
fn structs(order: &[&str], a: &[i64], b: &[&str], d: &[f64]) -> ArrayRef {
    let (a, b): (ArrayRef, ArrayRef) = (
        Arc::new(Int64Array::from(a.to_vec())),
        Arc::new(StringArray::from(b.to_vec())),
    );
    let d: ArrayRef = Arc::new(Float64Array::from(d.to_vec()));
    let c: ArrayRef = Arc::new(StructArray::try_from(vec![("d", d)]).unwrap());
    let parts: Vec<(&str, ArrayRef)> = order
        .iter()
        .map(|name| match *name {
            "a" => ("a", a.clone()),
            "b" => ("b", b.clone()),
            _ => ("c", c.clone()),
        })
        .collect();
    Arc::new(StructArray::try_from(parts).unwrap())
}

/// Two writers order a struct's fields differently: the values are compared field by field by
/// name (no type difference, equal rows match), and a mismatch names the fields that differ,
/// nested ones by their path.
#[test]
fn structs_compare_field_by_field_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let ids = || Arc::new(Int64Array::from(vec![1, 2, 3, 4])) as ArrayRef;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            (
                "profile",
                structs(
                    &["a", "b", "c"],
                    &[1, 2, 3, 4],
                    &["x", "x", "x", "x"],
                    &[0.5; 4],
                ),
            ),
        ]),
        &batch(vec![
            ("id", ids()),
            (
                "profile",
                structs(
                    &["c", "b", "a"],
                    &[1, 2, 3, 5],
                    &["x", "y", "x", "y"],
                    &[0.5, 0.5, 1.5, 0.5],
                ),
            ),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        r["schema"]["type_differences"],
        serde_json::json!([]),
        "{}",
        r["schema"]
    );
    let f = feature(&r, "profile");
    assert_eq!(f["compared_as"], "text");
    assert_eq!(f["mismatches"], 3, "{f}");
    let fields: BTreeSet<(String, u64)> = f["field_mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["field"].as_str().unwrap().to_owned(),
                m["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([("a".into(), 1), ("b".into(), 2), ("c.d".into(), 1)]),
        "{f}"
    );
    let by_key: BTreeSet<(String, Vec<String>)> = f["top_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let fields = p["fields"].as_array().unwrap().iter();
            (
                p["example_keys"][0].as_str().unwrap().to_owned(),
                fields.map(|v| v.as_str().unwrap().to_owned()).collect(),
            )
        })
        .collect();
    assert_eq!(
        by_key,
        BTreeSet::from([
            ("2".into(), vec!["b".into()]),
            ("3".into(), vec!["c.d".into()]),
            ("4".into(), vec!["a".into(), "b".into()]),
        ])
    );
    let text = stdout(&diff_cli(&served, &offline, "id", &[]));
    assert!(text.contains("fields that differ: b 2 (66.67%)"), "{text}");
}

/// A struct's field type seen as a whole: the same fields in another order is the same type.
#[test]
fn reordered_struct_fields_are_not_a_type_difference() {
    let dir = tempfile::tempdir().unwrap();
    let ids = || Arc::new(Int64Array::from(vec![1])) as ArrayRef;
    let s = |order: &[&str]| structs(order, &[1], &["x"], &[0.5]);
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![("id", ids()), ("p", s(&["a", "b", "c"]))]),
        &batch(vec![("id", ids()), ("p", s(&["b", "c", "a"]))]),
    );
    let thresholds = dir.path().join("t.toml");
    std::fs::write(&thresholds, "[schema]\nfail-on-type-difference = true\n").unwrap();
    let t = thresholds.display().to_string();
    let (code, r, err) = diff_json(&served, &offline, "id", &["--thresholds", &t]);
    assert_eq!(code, 0, "{err}\n{}", r["schema"]);
}
