//! How the report shows what it found: the HTML page in headless Chromium, floats that read
//! apart, bounded difference buckets, float32 round trips only within float32's range, lower
//! bounds and duplicate keys said in every format, and HTML charts that name their series,
//! label their bins and show the differences.

use super::*;

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

    let Some(chromium) = Chromium::find() else {
        return;
    };
    let url = format!("file://{html}");
    // The check must be able to fail: a page that logs an error and throws is caught by it with
    // this very Chromium (whose log format changed once already: `CONSOLE(12)` became
    // `CONSOLE:12`, and a check for the old one passed everything).
    let control = fx.dir.path().join("control.html");
    std::fs::write(
        &control,
        "<html><body><script>console.error('control-error'); null.f();</script></body></html>",
    )
    .unwrap();
    let (_, log) = chromium.dump(&format!("file://{}", control.display()));
    let caught = console_messages(&log);
    assert!(
        caught.iter().any(|l| l.contains("control-error"))
            && caught.iter().any(|l| l.contains("Uncaught")),
        "the console check misses a page's errors: {caught:?}\n{log}"
    );

    let body = chromium.drawn(&url);
    // The script drew every chart.
    let charts = page.matches("class=\"chart\"").count();
    assert!(charts > 0);
    assert_eq!(
        body.matches("<svg class=\"hist\"").count(),
        charts,
        "charts drawn"
    );
    assert!(body.contains("<rect class=\"s\""), "no bars");
    // The differences of the numbers that differ, within their tolerance or not.
    let differences = page.matches("class=\"dchart\"").count();
    assert!(differences > 0);
    assert_eq!(body.matches("<svg class=\"dhist\"").count(), differences);

    let png = fx.dir.path().join("report.png");
    let mut shot = chromium.command();
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

/// Headless Chromium (Debian's `chromium`) with a profile of its own.
struct Chromium {
    binary: &'static str,
    profile: tempfile::TempDir,
}

impl Chromium {
    /// Chromium when installed; in CI it must be (scripts/test.sh installs it), elsewhere the
    /// test that asked is skipped.
    fn find() -> Option<Chromium> {
        let binary = ["chromium", "chromium-browser"].into_iter().find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let Some(binary) = binary else {
            if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
                panic!("chromium is not installed (scripts/test.sh installs it)");
            }
            eprintln!("skipping: chromium is not installed (apt-get install chromium)");
            return None;
        };
        Some(Chromium {
            binary,
            profile: tempfile::tempdir().unwrap(),
        })
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(self.binary);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--user-data-dir={}", self.profile.path().display()),
        ]);
        cmd
    }

    /// The page's DOM after its script ran, and Chromium's log.
    fn dump(&self, url: &str) -> (String, String) {
        let out = self.command().args(["--dump-dom", url]).output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        (String::from_utf8_lossy(&out.stdout).into_owned(), log)
    }

    /// The body of a report page as its script left it, checked to have run to its end (it
    /// sets `data-report-ok`) without logging anything: any console line is an error or a
    /// leftover.
    fn drawn(&self, url: &str) -> String {
        let (dom, log) = self.dump(url);
        assert!(
            dom.contains("data-report-ok=\"1\""),
            "the page's script did not finish:\n{log}"
        );
        let messages = console_messages(&log);
        assert!(messages.is_empty(), "console messages: {messages:?}");
        // The body only: the script's own text holds the markup it writes.
        dom.split("<script>").next().unwrap_or_default().to_owned()
    }
}

/// The console messages (logs, errors, uncaught exceptions) in Chromium's stderr log, in either
/// of the formats its releases have used (`INFO:CONSOLE(12)]`, `INFO:CONSOLE:12]`).
fn console_messages(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(":CONSOLE(") || l.contains(":CONSOLE:"))
        .collect()
}

/// More distinct pairs than the 4,096 kept per feature.
const N: i64 = 4097;

fn timestamps(shift_us: i64, rows: &[i64]) -> ArrayRef {
    Arc::new(
        TimestampMicrosecondArray::from_iter_values(
            rows.iter()
                .map(|i| 1_700_000_000_000_000 + i * 1_000_000 + shift_us),
        )
        .with_timezone("UTC"),
    )
}

fn floats(rows: &[i64], f: impl Fn(i64) -> f64) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(rows.iter().map(|&i| f(i))))
}

/// Floats far from 1 print in scientific notation (two tiny values stay apart), a 1 ms and a
/// 1 h shift land in different bounded buckets, values beyond float32's range are no float32
/// round trip; when top pairs are lower bounds and when keys repeat, the terminal, Markdown
/// and HTML say so as JSON does, and the first offline row of a repeated key is the one
/// compared.
#[test]
fn values_and_differences_read_apart_and_the_report_says_what_it_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let served_rows: Vec<i64> = (0..N).collect();
    // The offline side repeats key 0 last, with other values.
    let offline_rows: Vec<i64> = (0..N).chain([0]).collect();
    let last = |i: usize| i == offline_rows.len() - 1;
    let served = batch(vec![
        (
            "id",
            Arc::new(Int64Array::from(served_rows.clone())) as ArrayRef,
        ),
        (
            "tiny",
            floats(&served_rows, |i| if i == 0 { 1.234e-100 } else { 0.0 }),
        ),
        (
            "huge",
            floats(&served_rows, |i| if i == 0 { 1e39 } else { 1.0 }),
        ),
        ("shift_ms", timestamps(0, &served_rows)),
        ("shift_h", timestamps(0, &served_rows)),
        ("many", floats(&served_rows, |i| i as f64)),
        ("dup", floats(&served_rows, |_| 1.0)),
    ]);
    let offline_ids: Vec<i64> = offline_rows.clone();
    let dup: Vec<f64> = (0..offline_rows.len())
        .map(|k| if last(k) { 99.0 } else { 1.0 })
        .collect();
    let offline = batch(vec![
        ("id", Arc::new(Int64Array::from(offline_ids)) as ArrayRef),
        (
            "tiny",
            floats(&offline_rows, |i| if i == 0 { 2.5e-100 } else { 0.0 }),
        ),
        (
            "huge",
            floats(&offline_rows, |i| if i == 0 { 2e39 } else { 1.0 }),
        ),
        ("shift_ms", timestamps(1000, &offline_rows)),
        ("shift_h", timestamps(3_600_000_000, &offline_rows)),
        ("many", floats(&offline_rows, |i| -(i as f64) - 1.0)),
        ("dup", Arc::new(Float64Array::from(dup))),
    ]);
    let (served, offline) = parquet_sides(dir.path(), &served, &offline);
    let (code, r, err) = diff_json(&served, &offline, "id", &[]);
    assert_eq!(code, 1, "{err}");

    let tiny = &feature(&r, "tiny")["top_pairs"][0];
    assert_eq!(tiny["served"], "1.234e-100", "{tiny}");
    assert_eq!(tiny["offline"], "2.5e-100", "{tiny}");
    let huge = feature(&r, "huge");
    assert_eq!(huge["top_pairs"][0]["served"], "1e39");
    assert_eq!(huge["classes"][0]["class"], "other", "{huge}");
    for (name, lower, upper) in [("shift_ms", 1e3, 1e4), ("shift_h", 1e9, 1e10)] {
        let h = &feature(&r, name)["difference_histogram"];
        assert_eq!(h.as_array().unwrap().len(), 1, "{name}: {h}");
        assert_eq!(h[0]["lower"], lower, "{name}: {h}");
        assert_eq!(h[0]["upper"], upper, "{name}: {h}");
        assert_eq!(h[0]["count"], N, "{name}");
    }
    assert_eq!(feature(&r, "many")["pairs_complete"], false);
    assert_eq!(feature(&r, "tiny")["pairs_complete"], true);
    assert_eq!(r["coverage"]["offline_duplicate_keys"], 1);
    assert_eq!(
        feature(&r, "dup")["mismatches"],
        0,
        "the first offline row is compared"
    );

    let text = stdout(&diff_cli(&served, &offline, "id", &[]));
    for needle in [
        "1.234e-100",
        "|difference| (time): [1ms, 10ms): 4097",
        "|difference| (time): [16.7min, 2.78h): 4097",
        "top pairs are incomplete",
        "of a duplicated key, the first offline row",
    ] {
        assert!(text.contains(needle), "terminal lacks {needle}:\n{text}");
    }
    // Said for each feature whose pairs were cut (the times too: all their pairs differ).
    let cut = r["features"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["pairs_complete"] == false)
        .count();
    assert_eq!(cut, 3, "many, shift_ms, shift_h");
    assert_eq!(
        text.matches("top pairs are incomplete").count(),
        cut,
        "{text}"
    );
    let md = stdout(&diff_cli(
        &served,
        &offline,
        "id",
        &["--format", "markdown"],
    ));
    for needle in [
        "top pairs are incomplete",
        "Duplicate keys: of a duplicated key",
    ] {
        assert!(md.contains(needle), "markdown lacks {needle}:\n{md}");
    }
    let html = dir.path().join("report.html");
    let html_arg = html.display().to_string();
    diff_cli(&served, &offline, "id", &["--html", &html_arg]);
    let page = std::fs::read_to_string(&html).unwrap();
    for needle in ["top pairs are incomplete", "of a duplicated key"] {
        assert!(page.contains(needle), "the page lacks {needle}");
    }
}

/// Each chart of the page has a legend naming the served and the offline series, a visible
/// label under every bin (times as ISO 8601), and numbers and times that differ get a chart of
/// their differences; the script draws them all without an error.
#[test]
fn html_charts_name_their_series_label_their_bins_and_show_differences() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<i64> = (0..300).collect();
    let side = |offline: bool| {
        let on = i64::from(offline);
        batch(vec![
            ("id", Arc::new(Int64Array::from(rows.clone())) as ArrayRef),
            (
                "seen_at",
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(rows.iter().map(|i| {
                        1_700_000_000_000_000 + i * 60_000_000 + on * (i % 3) * 1_000_000
                    }))
                    .with_timezone("UTC"),
                ),
            ),
            (
                "market",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|i| {
                    if offline && i % 4 == 0 {
                        "jp_JA"
                    } else {
                        ["jp-JA", "en-GB"][(i % 2) as usize]
                    }
                }))),
            ),
            (
                "score",
                floats(&rows, |i| i as f64 / 10.0 + on as f64 * 0.25),
            ),
        ])
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
    let charts = page.matches("class=\"chart\"").count();
    let dcharts = page.matches("class=\"dchart\"").count();
    assert_eq!(
        (charts, dcharts),
        (3, 2),
        "seen_at, market, score; seen_at and score differ"
    );
    assert!(
        page.contains("[\"[1s, 10s)\",200]"),
        "seen_at's differences"
    );
    assert!(page.contains("tolerance exact"), "seen_at's tolerance");

    let Some(chromium) = Chromium::find() else {
        return;
    };
    let body = chromium.drawn(&format!("file://{}", html.display()));
    assert_eq!(body.matches("<svg class=\"hist\"").count(), charts);
    assert_eq!(body.matches("<svg class=\"dhist\"").count(), dcharts);
    assert_eq!(
        body.matches(
            "<div class=\"legend\"><i class=\"s\"></i>served<i class=\"o\"></i>offline</div>"
        )
        .count(),
        charts,
        "a legend per distribution chart"
    );
    assert_eq!(
        body.matches("<div class=\"legend\">").count(),
        charts + dcharts
    );
    // Every bar has its label on the page, not only on hover.
    let bars = body.matches("<rect class=\"s\"").count();
    assert!(bars >= 20, "{bars}");
    assert!(body.matches("<text ").count() >= bars, "labels");
    let labels: Vec<&str> = body
        .split("<text ")
        .skip(1)
        .filter_map(|t| {
            t.split_once('>')
                .and_then(|(_, rest)| rest.split_once("</text>"))
        })
        .map(|(label, _)| label)
        .collect();
    assert!(
        labels
            .iter()
            .any(|l| l.starts_with("2023-11-14T") && l.ends_with('Z')),
        "{labels:?}"
    );
    assert!(
        labels.contains(&"\"jp_JA\"") || labels.contains(&"(not offline)"),
        "{labels:?}"
    );
    assert!(
        labels.contains(&"[1s, 10s)") || labels.contains(&"1s"),
        "{labels:?}"
    );
}
