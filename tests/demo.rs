//! `featurelog demo` as a newcomer runs it: the binary, on the embedded broker and on a real
//! one. The dataset it writes is read back with pyarrow and must hold exactly one row per
//! impression the synthetic app made, with the features the model was sent; the report must
//! name the three bugs of the careless offline pipeline and nothing else.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use featurelog_demo::world::World;

const REQUESTS: u64 = 120;
const CANDIDATES: usize = 40;
const SEED: u64 = 7;

/// One demo at a time: each runs a model server, a sidecar and a joiner, and two at once on a
/// 2-core machine only measure the machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_demo(out: &Path, kafka: Option<&str>) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_featurelog"));
    cmd.args([
        "demo",
        "--out",
        out.to_str().unwrap(),
        "--requests",
        &REQUESTS.to_string(),
        "--candidates",
        &CANDIDATES.to_string(),
        "--rate",
        "200",
        "--impression-rate",
        "0.1",
        "--seed",
        &SEED.to_string(),
    ]);
    if let Some(bootstrap) = kafka {
        cmd.args(["--kafka", bootstrap]);
    }
    let output = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "demo failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Expected rows: (request id, item id) -> (user, item, clicked).
fn expected(run: &str) -> BTreeMap<(String, String), (u64, i64, bool)> {
    let world = World {
        seed: SEED,
        candidates: CANDIDATES,
    };
    let mut rows = BTreeMap::new();
    for n in 0..REQUESTS {
        let request = world.request(run, n);
        for (slot, &item) in request.items.iter().enumerate() {
            let (shown, clicked) = world.outcome(&request, slot, 0.1, 0.2);
            if shown {
                rows.insert(
                    (request.id.clone(), item.to_string()),
                    (request.user, item, clicked),
                );
            }
        }
    }
    rows
}

fn check(out: &Path, stdout: &str) {
    let read = featurelog_testkit::python_json("read_dataset.py", &[out.join("dataset")], &[]);
    let rows = read["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "no rows:\n{stdout}");
    let first_id = rows[0]["request_id"].as_str().unwrap();
    let run = first_id.rsplit_once('-').unwrap().0;
    let want = expected(run);
    let world = World {
        seed: SEED,
        candidates: CANDIDATES,
    };

    let mut got = BTreeMap::new();
    for row in rows {
        let key = (
            row["request_id"].as_str().unwrap().to_owned(),
            row["item_id"].as_str().unwrap().to_owned(),
        );
        let Some(&(user, item, clicked)) = want.get(&key) else {
            panic!("unexpected row {key:?}");
        };
        // The features the model was sent, as it was sent them.
        assert_eq!(row["user_locale"], world.locale(user), "{key:?}");
        assert_eq!(row["user_device"], world.device(user), "{key:?}");
        assert_eq!(row["user_age"], world.age(user), "{key:?}");
        assert_eq!(row["item_category"], world.category(item), "{key:?}");
        // FP32 through JSON: the text has every digit of the f32's value, so reading it back as
        // f32 gives the same bits.
        let f32_of = |v: &serde_json::Value| v.as_f64().unwrap() as f32;
        assert_eq!(
            f32_of(&row["item_price"]).to_bits(),
            (world.price(item) as f32).to_bits(),
            "{key:?}"
        );
        assert_eq!(
            f32_of(&row["item_popularity"]).to_bits(),
            world.popularity(item).to_bits(),
            "{key:?}"
        );
        let embedding: Vec<u32> = row["item_embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| f32_of(v).to_bits())
            .collect();
        let sent: Vec<u32> = world.embedding(item).iter().map(|v| v.to_bits()).collect();
        assert_eq!(embedding, sent, "{key:?}");
        assert_eq!(row["clicks"], u32::from(clicked), "{key:?}");
        assert!(
            row.get("cross_features").is_none(),
            "a feature outside the allow list was logged"
        );
        assert!(
            got.insert(key.clone(), ()).is_none(),
            "duplicate row {key:?}"
        );
    }
    assert_eq!(got.len(), want.len(), "rows: one per impression");

    // The report names the three injected bugs, and only those features are skewed.
    assert!(stdout.contains("locale-truncation"), "{stdout}");
    assert!(stdout.contains("\"ios-phone\""), "{stdout}");
    let skewed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_end().ends_with("SKEW") && !l.starts_with("SKEW"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        skewed,
        ["user_locale", "user_device", "item_popularity"],
        "{stdout}"
    );
    // Nothing else fails: the joiner's own columns (labels, parameters, ...) are not features
    // the offline table lacks.
    assert!(!stdout.contains("missing offline"), "{stdout}");
    assert!(!stdout.contains("fail-on-missing"), "{stdout}");
    assert!(stdout.contains(&format!("{} rows", want.len())), "{stdout}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("user_locale"));
    figures(out, stdout, want.len());
    readme_snippets(out, want.len());
}

/// What the demo prints besides the report: progress while it runs, and at the end the figures
/// a newcomer reads (requests, bytes before and after the allow list, rows and files, where
/// the report is), each agreeing with what is on disk.
fn figures(out: &Path, stdout: &str, rows: usize) {
    let progress: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("[traffic]") || l.contains("[joining]"))
        .collect();
    assert!(!progress.is_empty(), "no progress lines:\n{stdout}");
    for line in &progress {
        for part in ["requests", "records logged", "rows joined"] {
            assert!(line.contains(part), "{line}");
        }
    }
    // `label   value` lines of the Figures block.
    let figure = |label: &str| {
        let line = stdout
            .lines()
            .skip_while(|l| *l != "Figures")
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} figure:\n{stdout}"));
        line.trim_start()[label.len()..].trim().to_owned()
    };
    assert!(
        figure("requests").starts_with(&format!("{REQUESTS} (")),
        "{stdout}"
    );
    assert!(
        figure("app events").starts_with(&format!("{rows} impressions")),
        "{stdout}"
    );
    // "X MiB of requests -> Y MiB of records after the allow list (Rx smaller), N records"
    let bytes = figure("bytes");
    let smaller: f64 = bytes
        .split_once('(')
        .and_then(|(_, r)| r.split_once("x smaller"))
        .and_then(|(x, _)| x.parse().ok())
        .unwrap_or_else(|| panic!("bytes figure: {bytes}"));
    assert!(
        smaller > 1.0,
        "the allow list made records no smaller: {bytes}"
    );
    assert!(bytes.ends_with(&format!("{REQUESTS} records")), "{bytes}");
    let dataset = figure("dataset");
    let files = parquet_files(&out.join("dataset"));
    assert_eq!(
        dataset,
        format!(
            "{rows} rows in {files} Parquet files: {}",
            out.join("dataset").display()
        )
    );
    assert!(files > 0);
    assert_eq!(
        figure("HTML report"),
        out.join("report.html").display().to_string()
    );
}

/// Data files of a dataset, as readers count them: not the joiner's bookkeeping, not late rows.
fn parquet_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            !(name.starts_with('_') || name.starts_with('.') || name == "late")
        })
        .map(|e| {
            if e.file_type().unwrap().is_dir() {
                parquet_files(&e.path())
            } else {
                usize::from(e.path().extension().is_some_and(|x| x == "parquet"))
            }
        })
        .sum()
}

/// The README's DuckDB, Polars, pyarrow, pandas and Spark snippets, pasted as they are (only the
/// path and the hour changed), read every row of the demo's dataset and the rows of one hour,
/// and with their late-rows part the late rows too; Spark gives the columns the types the
/// README promises.
fn readme_snippets(out: &Path, rows: usize) {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let read = featurelog_testkit::python_json(
        "readme_snippets.py",
        &[readme.as_path(), &out.join("dataset")],
        &[],
    );
    assert_eq!(read["dataset_rows"], rows, "{read}");
    let everything = rows as u64 + read["late_rows"].as_u64().unwrap();
    for reader in ["duckdb", "polars", "pyarrow", "pandas", "spark"] {
        assert_eq!(read[reader]["rows"], rows, "{reader}: {read}");
        assert_eq!(read[reader]["hour"], read["hour_rows"], "{reader}: {read}");
        assert_eq!(read[reader]["everything"], everything, "{reader}: {read}");
        let columns = read[reader]["columns"].as_array().unwrap();
        for column in ["request_id", "item_id", "clicks", "user_locale", "dt", "hr"] {
            assert!(
                columns.iter().any(|c| c == column),
                "{reader}: no {column}: {read}"
            );
        }
    }
    for (column, spark_type) in [
        ("clicks", "bigint"),
        ("impressed", "boolean"),
        ("user_locale", "string"),
        ("item_price", "float"),
        ("item_embedding", "array<float>"),
        ("dt", "date"),
        ("hr", "int"),
    ] {
        assert_eq!(
            read["spark"]["types"][column], spark_type,
            "spark's type of {column}: {read}"
        );
    }
}

#[test]
fn the_demo_on_the_embedded_broker_writes_the_expected_rows_and_reports_the_skews() {
    let out = tempfile::tempdir().unwrap();
    let stdout = run_demo(out.path(), None);
    check(out.path(), &stdout);
    // The configs it ran with are left for the user and are valid.
    for (sub, file) in [("sidecar", "sidecar.toml"), ("join", "join.toml")] {
        let status = Command::new(env!("CARGO_BIN_EXE_featurelog"))
            .args([
                sub,
                "--check-config",
                out.path().join(file).to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
    }
}

#[test]
fn the_demo_runs_the_same_against_a_real_broker() {
    let Some(kafka) = featurelog_testkit::kafka("the_demo_runs_the_same_against_a_real_broker")
    else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let stdout = run_demo(out.path(), Some(&kafka.config.bootstrap_servers));
    assert!(stdout.contains(&kafka.config.bootstrap_servers), "{stdout}");
    check(out.path(), &stdout);
}
