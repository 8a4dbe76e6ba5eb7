//! `output.format = "delta"` end to end: an uninterrupted joiner, one killed with SIGKILL and
//! restarted several times while impressions arrive, and two in one group each write a Delta
//! table, and three independent readers (the `deltalake` package, Polars' `read_delta` and
//! Spark with delta-spark) see every expected row exactly once in each; a dataset keeps the
//! format it was first written in. The same for a table on S3-compatible storage.

use super::*;

/// Sets `output.format` in a config written by `joiner_config`.
pub(super) fn set_format(config: &Path, format: &str) {
    let text = std::fs::read_to_string(config)
        .unwrap()
        .replace("[output]\n", &format!("[output]\nformat = \"{format}\"\n"));
    std::fs::write(config, text).unwrap();
}

/// The rows `tests/clients/read_delta.py` read with one of its readers: (request id, item id)
/// -> the clicks of each row of the pair.
fn delta_rows(read: &serde_json::Value, reader: &str) -> BTreeMap<(String, String), Vec<u64>> {
    let mut rows: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for row in read[reader].as_array().unwrap() {
        let key = (
            row[0].as_str().unwrap().to_owned(),
            row[1].as_str().unwrap().to_owned(),
        );
        rows.entry(key).or_default().push(row[2].as_u64().unwrap());
    }
    rows
}

/// Every expected row once, with its clicks, and nothing else, as each reader of the table
/// sees it.
fn check_delta(out: &Path, expected: &BTreeMap<(String, String), u32>, what: &str) {
    check_delta_with(out, &[], expected, what);
}

/// [`check_delta`] of a table at `out` (a directory or an `s3://` URL), the readers run with
/// `env`.
fn check_delta_with(
    out: &Path,
    env: &[(&str, String)],
    expected: &BTreeMap<(String, String), u32>,
    what: &str,
) {
    // Spark only here, not in `wait_for_delta_rows`: its JVM takes seconds to start.
    let args = [std::ffi::OsStr::new("--spark"), out.as_os_str()];
    let read = featurelog_testkit::python_json("read_delta.py", &args, env);
    let want: BTreeMap<_, _> = expected
        .iter()
        .map(|(k, clicks)| (k.clone(), vec![u64::from(*clicks)]))
        .collect();
    for reader in ["deltalake", "polars", "spark"] {
        let got = delta_rows(&read, reader);
        let twice: Vec<_> = got.iter().filter(|(_, v)| v.len() > 1).collect();
        assert!(
            twice.is_empty(),
            "{what}, {reader}: rows seen twice: {twice:?}"
        );
        let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
        assert!(
            missing.is_empty(),
            "{what}, {reader}: rows missing: {missing:?}"
        );
        assert_eq!(got, want, "{what}, {reader}");
    }
    assert_eq!(
        read["partitions"],
        serde_json::json!(["dt", "hr"]),
        "{what}"
    );
    // Delta has no unsigned integers: the clicks are a long, not a wrapped-around uint32.
    assert_eq!(
        read["schema"]["clicks"], "int64",
        "{what}: {}",
        read["schema"]
    );
    let spark = &read["spark_schema"];
    for (column, spark_type) in [("clicks", "bigint"), ("dt", "date"), ("hr", "int")] {
        assert_eq!(
            spark[column], spark_type,
            "{what}, Spark's {column}: {spark}"
        );
    }
}

/// Waits until the `deltalake` reader sees at least `expected` rows in the table at `out`: the
/// checkpoints alone can cover every feature log before the router has passed an event on.
async fn wait_for_delta_rows(out: &Path, env: &[(&'static str, String)], expected: usize) {
    let (out, env) = (out.to_owned(), env.to_vec());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (table, env) = (out.clone(), env.clone());
        let seen = tokio::task::spawn_blocking(move || {
            let out = table;
            if !out.to_string_lossy().starts_with("s3:") && !out.join("_delta_log").is_dir() {
                return 0;
            }
            let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.clone())).collect();
            let read = featurelog_testkit::python_json("read_delta.py", &[&out], &env);
            read["deltalake"].as_array().map_or(0, Vec::len)
        })
        .await
        .unwrap();
        if seen >= expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: {seen} of {expected} rows after 120 s",
            out.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn a_delta_table_holds_every_row_once_through_sigkill_and_restarts() {
    let name = "a_delta_table_holds_every_row_once_through_sigkill_and_restarts";
    let Some(kafka) = kafka(name) else {
        return;
    };
    let mut s = setup(kafka, 8, 5).await;
    let (single_out, crash_out, pair_out) = (
        s.dir.path().join("single"),
        s.dir.path().join("crash"),
        s.dir.path().join("pair"),
    );
    let single_group = s.kafka.unique_group("delta-single");
    let single_config = s.joiner_config("delta-single", &single_group, &single_out);
    let crash_group = s.kafka.unique_group("delta-crash");
    let crash_config = s.joiner_config("delta-crash", &crash_group, &crash_out);
    // Two processes in one group commit to one log: their tasks' commits conflict, and the
    // second joins mid-run, taking over tasks the first may be committing.
    let pair_group = s.kafka.unique_group("delta-pair");
    let pair_configs = [
        s.joiner_config("delta-pair-a", &pair_group, &pair_out),
        s.joiner_config("delta-pair-b", &pair_group, &pair_out),
    ];
    for config in [&single_config, &crash_config]
        .into_iter()
        .chain(&pair_configs)
    {
        set_format(config, "delta");
    }
    keep_checkpoints(&crash_config, 2);
    let single = Joiner::start(&single_config);
    let mut pair = vec![Joiner::start(&pair_configs[0])];
    // Kill -9 at different moments, restarting each time, while impressions keep arriving:
    // some kills land between a checkpoint and its Delta commit, which the restart finishes.
    let trickle = trickle_impressions(&mut s, 40, Duration::from_millis(120));
    for (kill, wait_ms) in [700u64, 1300, 400, 2100, 900].into_iter().enumerate() {
        let j = Joiner::start(&crash_config);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        j.kill9();
        if kill == 1 {
            pair.push(Joiner::start(&pair_configs[1]));
        }
    }
    trickle.await.unwrap();
    assert!(
        checkpoints_per_task(&crash_out)
            .values()
            .any(|epochs| !epochs.is_empty()),
        "the killed runs committed no checkpoint"
    );
    let crash = Joiner::start(&crash_config);
    for out in [&single_out, &crash_out, &pair_out] {
        wait_for_delta_rows(out, &[], s.expected.len()).await;
    }
    let k = &s.kafka.config;
    for config in [&single_config, &crash_config, &pair_configs[0]] {
        wait_checkpointed_in(k, &s.features, config).await;
    }
    // The Delta commit follows the checkpoint: a joiner stopped with SIGTERM has made its
    // last one.
    assert!(single.terminate().success());
    assert!(crash.terminate().success());
    for joiner in pair {
        assert!(joiner.terminate().success());
    }
    check_delta(&pair_out, &s.expected, "two in one group");
    check_delta(&single_out, &s.expected, "uninterrupted");
    check_delta(&crash_out, &s.expected, "killed and restarted");
    assert!(single_out.join("_delta_log").is_dir());

    // A dataset has one format: the same dataset as plain Parquet is refused, and so is a
    // Delta table begun on a Parquet dataset (it would lack the rows written before it).
    let parquet_config = s.joiner_config("delta-as-parquet", &single_group, &single_out);
    let (code, stderr) = refused(&parquet_config).await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("written as \"delta\""), "{stderr}");
    let parquet_out = s.dir.path().join("parquet");
    let parquet_group = s.kafka.unique_group("delta-parquet");
    let config = s.joiner_config("parquet-first", &parquet_group, &parquet_out);
    let parquet = Joiner::start(&config);
    let k = &s.kafka.config;
    wait_checkpointed_in(k, &s.features, &config).await;
    assert!(parquet.terminate().success());
    set_format(&config, "delta");
    let (code, stderr) = refused(&config).await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("written as \"parquet\""), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn on_s3_a_delta_table_holds_every_row_once() {
    let name = "on_s3_a_delta_table_holds_every_row_once";
    let (Some(kafka), Some(s3)) = (kafka(name), s3(name)) else {
        return;
    };
    let s = setup(kafka, 10, 2).await;
    let prefix = s3.unique_prefix("delta");
    let config = s3_joiner_config(&s, &s3, "s3-delta", &prefix);
    set_format(&config, "delta");
    let joiner = Joiner::start_with_env(&config, &s3.aws_env());
    let url = s3.url(&prefix);
    wait_for_delta_rows(Path::new(&url), &s3.aws_env(), s.expected.len()).await;
    wait_checkpointed_on_s3(&s, &s3, &prefix, &config).await;
    assert!(joiner.terminate().success());
    let keys: Vec<String> = s3
        .objects(&prefix)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(
        keys.iter().any(|k| k.starts_with("_delta_log/")),
        "the log is under the dataset's prefix: {keys:?}"
    );
    check_delta_with(Path::new(&url), &s3.aws_env(), &s.expected, "on S3");
}

/// Once an hour is complete, its many small files (a task commits every 2 rows) are compacted
/// into files of about `target-file-bytes`: every version of the table, read by time travel,
/// holds each row once, the compaction's version the same rows as the one before it, the hour
/// ends with at most ceil(bytes / target) + 1 files, and the table records how far the
/// dataset is complete. The log is checkpointed every 5 versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn complete_hours_are_compacted_and_every_version_holds_each_row_once() {
    let name = "complete_hours_are_compacted_and_every_version_holds_each_row_once";
    let Some(kafka) = kafka(name) else {
        return;
    };
    const TARGET: u64 = 8192;
    let s = setup(kafka, 12, 2).await;
    let out = s.dir.path().join("compacted");
    let group = s.kafka.unique_group("delta-compact");
    let config = s.joiner_config("delta-compact", &group, &out);
    set_format(&config, "delta");
    // The rows are of 2025-11-29 18:00 UTC: once the inputs are quiet the watermark moves on
    // the wall clock (`idle-timeout`) and that hour completes.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            "flush-interval = \"300ms\"\n",
            "flush-interval = \"300ms\"\nflush-rows = 2\n",
        )
        .replace("idle-timeout = \"1h\"", "idle-timeout = \"2s\"");
    std::fs::write(
        &config,
        format!("{text}[output.delta]\ntarget-file-bytes = {TARGET}\ncheckpoint-interval = 5\n"),
    )
    .unwrap();
    let joiner = Joiner::start(&config);
    let hour = out.join("dt=2025-11-29/hr=18");
    let compacted = featurelog_testkit::eventually(Duration::from_secs(120), || {
        hour.join("_COMPACTED").exists()
    })
    .await;
    assert!(compacted, "the hour was not compacted in 120 s");
    assert!(hour.join("_SUCCESS").exists());
    // Readers start from a checkpoint of the log, not from its first commit. The upkeep
    // checkpoints after it compacts, so the checkpoint may follow `_COMPACTED` by a moment.
    let checkpointed = featurelog_testkit::eventually(Duration::from_secs(60), || {
        out.join("_delta_log/_last_checkpoint").exists()
    })
    .await;
    assert!(checkpointed, "the log was not checkpointed in 60 s");
    assert!(joiner.terminate().success());

    let versions = featurelog_testkit::python_json("delta_versions.py", &[&out], &[]);
    let versions = versions.as_array().unwrap();
    let want: Vec<serde_json::Value> = s
        .expected
        .keys()
        .map(|(request, item)| serde_json::json!([request, item]))
        .collect();
    let mut previous: Option<&serde_json::Value> = None;
    let mut optimized = 0;
    for v in versions {
        let rows = v["rows"].as_array().unwrap();
        let mut unique = rows.clone();
        unique.dedup();
        assert_eq!(
            unique.len(),
            rows.len(),
            "version {}: rows twice",
            v["version"]
        );
        assert!(
            rows.iter().all(|r| want.contains(r)),
            "version {}",
            v["version"]
        );
        if v["operation"] == "OPTIMIZE" {
            optimized += 1;
            let before = previous.unwrap();
            assert_eq!(v["rows"], before["rows"], "the compaction changed rows");
            assert!(
                v["files"].as_array().unwrap().len() < before["files"].as_array().unwrap().len()
            );
        }
        previous = Some(v);
    }
    assert_eq!(optimized, 1, "one compaction of the one hour");
    let last = versions.last().unwrap();
    assert_eq!(last["rows"].as_array().unwrap(), &want, "every row, once");
    let files: Vec<PathBuf> = (last["files"].as_array().unwrap().iter())
        .map(|u| {
            let u = u.as_str().unwrap();
            PathBuf::from(u.strip_prefix("file://").unwrap_or(u))
        })
        .collect();
    let bytes: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(
        files.len() as u64 <= bytes.div_ceil(TARGET) + 1,
        "{} files of {bytes} bytes for a target of {TARGET}",
        files.len()
    );
    // A scheduler finds how far the dataset is complete in the table's history.
    let through = (versions.iter())
        .filter_map(|v| v["complete_through"].as_str())
        .max()
        .unwrap();
    assert!(through >= "2025-11-29T19:00:00Z", "{through}");
    check_delta(&out, &s.expected, "compacted");
}
