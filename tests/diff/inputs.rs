//! What a side may be and what the options may name: gzipped CSV and TSV read as such, Hive's
//! extensionless data files, names in `--ignore` and the thresholds that must exist, and
//! rename suggestions across naming styles.

use std::io::Write as _;

use super::*;

/// The served side of the input tests: ids 1..=3, a number and a text holding a comma.
fn served_table(dir: &Path) -> PathBuf {
    let path = dir.join("served.parquet");
    write_parquet(
        &path,
        &batch(vec![
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            ("x", Arc::new(Float64Array::from(vec![0.5, 1.5, 2.5]))),
            ("s", Arc::new(StringArray::from(vec!["a", "b", "c,d"]))),
        ]),
    );
    path
}

fn gzip(text: &str) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap()
}

/// `.csv.gz`, `.tsv` and `.tsv.gz` files are read as the delimited text they are, alone or
/// mixed in a directory (a TSV field may hold a comma).
#[test]
fn gzipped_csv_and_tsv_are_read_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let served = served_table(dir.path());
    let csv = "id,x,s\n1,0.5,a\n2,1.5,b\n3,2.5,\"c,d\"\n";
    let tsv = "id\tx\ts\n1\t0.5\ta\n2\t1.5\tb\n3\t2.5\tc,d\n";
    let files: [(&str, Vec<u8>); 3] = [
        ("offline.csv.gz", gzip(csv)),
        ("offline.tsv", tsv.as_bytes().to_vec()),
        ("offline.TSV.GZ", gzip(tsv)),
    ];
    for (name, bytes) in &files {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let (code, r, err) = diff_json(&served, &path, "id", &[]);
        assert_eq!(code, 0, "{name}: {err}\n{r}");
        assert_eq!(r["offline"]["rows"], 3, "{name}");
        assert_eq!(r["coverage"]["both"], 3, "{name}");
        for f in ["x", "s"] {
            assert_eq!(feature(&r, f)["mismatches"], 0, "{name} {f}");
        }
    }
    // A directory of both kinds, split by rows.
    let parts = dir.path().join("parts");
    std::fs::create_dir_all(&parts).unwrap();
    std::fs::write(parts.join("part-0.csv.gz"), gzip("id,x,s\n1,0.5,a\n")).unwrap();
    std::fs::write(
        parts.join("part-1.tsv"),
        "id\tx\ts\n2\t1.5\tb\n3\t2.5\tc,d\n",
    )
    .unwrap();
    let (code, r, err) = diff_json(&served, &parts, "id", &[]);
    assert_eq!(code, 0, "{err}\n{r}");
    assert_eq!(r["offline"]["files"], 2);
    assert_eq!(feature(&r, "s")["mismatches"], 0);
}

/// Hive names its data files `000000_0`, without an extension: a directory that holds nothing
/// else is read as those Parquet files (hidden staging directories and markers skipped); next
/// to files of a known kind they are left alone; a file that says no format and is not Parquet
/// is refused with why.
#[test]
fn hive_extensionless_files_are_read_when_nothing_else_is() {
    let dir = tempfile::tempdir().unwrap();
    let offline = served_table(dir.path());
    let table = dir.path().join("warehouse/t");
    let rows = |ids: Vec<i64>| {
        let x: Vec<f64> = ids.iter().map(|i| *i as f64 - 0.5).collect();
        let s: Vec<&str> = ids
            .iter()
            .map(|i| ["a", "b", "c,d"][(*i - 1) as usize])
            .collect();
        batch(vec![
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("x", Arc::new(Float64Array::from(x))),
            ("s", Arc::new(StringArray::from(s))),
        ])
    };
    write_parquet(&table.join("dt=2025-01-01/000000_0"), &rows(vec![1, 2]));
    write_parquet(&table.join("dt=2025-01-02/000000_0"), &rows(vec![3]));
    std::fs::create_dir_all(table.join(".hive-staging_1")).unwrap();
    std::fs::write(table.join(".hive-staging_1/000000_0"), b"partial").unwrap();
    std::fs::write(table.join("_SUCCESS"), b"").unwrap();
    let (code, r, err) = diff_json(&table, &offline, "id", &["--ignore", "dt"]);
    assert_eq!(code, 0, "{err}\n{r}");
    assert_eq!(r["served"]["files"], 2);
    assert_eq!(r["served"]["rows"], 3);
    assert_eq!(feature(&r, "x")["mismatches"], 0);

    // Beside a Parquet file, the extensionless ones are not data.
    write_parquet(&table.join("part-0.parquet"), &rows(vec![1, 2, 3]));
    let (_, r, err) = diff_json(&table, &offline, "id", &[]);
    assert_eq!(r["served"]["files"], 1, "{err}");

    // One file whose name says nothing, read as Parquet only if it is.
    let (code, r, err) = diff_json(&table.join("dt=2025-01-01/000000_0"), &offline, "id", &[]);
    assert_eq!(r["served"]["rows"], 2, "{code} {err}");
    let text = dir.path().join("000000_0");
    std::fs::write(&text, "id,x,s\n1,0.5,a\n").unwrap();
    let (code, _, err) = diff_json(&text, &offline, "id", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("000000_0: not a Parquet file"), "{err}");
}

/// A column named in `--ignore` or in a thresholds section must exist on the served side (a
/// typo would otherwise leave the column compared, or its limits unapplied), as a rename's
/// must: an error that lists the columns there are.
#[test]
fn ignored_and_thresholded_columns_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let served = served_table(dir.path());
    let (code, _, err) = diff_json(&served, &served, "id", &["--ignore", "x,nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--ignore nope: the served side has no column nope (it has: id, x, s)"),
        "{err}"
    );
    let thresholds = dir.path().join("t.toml");
    std::fs::write(
        &thresholds,
        "[feature.x]\nmax-psi = 0.1\n[feature.nope]\nmax-psi = 0.1\n",
    )
    .unwrap();
    let t = thresholds.display().to_string();
    let (code, _, err) = diff_json(&served, &served, "id", &["--thresholds", &t]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("thresholds [feature.nope]: the served side has no column nope"),
        "{err}"
    );
    let (code, _, err) = diff_json(&served, &served, "id", &["--ignore", "id"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("id is a key column"), "{err}");
    // Named columns that exist are fine.
    std::fs::write(&thresholds, "[feature.x]\nmax-psi = 0.1\n").unwrap();
    let (code, r, err) = diff_json(
        &served,
        &served,
        "id",
        &["--thresholds", &t, "--ignore", "s"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["schema"]["ignored"], serde_json::json!(["s"]));
}

/// Names that differ by naming style are suggested as renames: camelCase against snake_case
/// as well as case alone or separators alone.
#[test]
fn renames_are_suggested_across_naming_styles() {
    let dir = tempfile::tempdir().unwrap();
    let ids = || Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef;
    let text = || Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef;
    let (served, offline) = parquet_sides(
        dir.path(),
        &batch(vec![
            ("id", ids()),
            ("userCountry", text()),
            ("deviceType", text()),
            ("item-price", text()),
        ]),
        &batch(vec![
            ("id", ids()),
            ("user_country", text()),
            ("devicetype", text()),
            ("item_price", text()),
        ]),
    );
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");
    let near: BTreeSet<(String, String, String)> = r["schema"]["near_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let s = |k: &str| n[k].as_str().unwrap().to_owned();
            (s("served"), s("offline"), s("differs_by"))
        })
        .collect();
    let want = [
        ("userCountry", "user_country", "case+separator"),
        ("deviceType", "devicetype", "case"),
        ("item-price", "item_price", "separator"),
    ];
    let want: BTreeSet<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(near, want, "{}", r["schema"]);
    let text = stdout(&diff_cli(&served, &offline, "id", &[]));
    assert!(text.contains("--rename userCountry=user_country"), "{text}");
}
