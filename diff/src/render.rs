//! The report for people: a terminal table (the default), Markdown (for a CI comment) and one
//! self-contained HTML page with a chart per feature. The JSON form is [`Report::to_json`].

mod html;

use std::fmt::Write as _;

use crate::report::{DiffBucket, FeatureReport, Report, Verdict};
use crate::values::{Domain, fmt_decade, fmt_num};

fn pct(x: f64) -> String {
    if x == 0.0 {
        "0%".into()
    } else if x < 0.0001 {
        format!("{:.4}%", 100.0 * x)
    } else {
        format!("{:.2}%", 100.0 * x)
    }
}

/// A metric or a limit: whole numbers from 100 on, four decimals below, scientific notation
/// where those would read as 0 or run long.
fn num(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 || !x.is_finite() {
        fmt_num(x)
    } else if !(1e-4..1e15).contains(&a) {
        format!("{x:.3e}")
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.4}")
    }
}

/// Said wherever top pairs are listed while their counts are lower bounds.
fn pairs_incomplete() -> String {
    format!(
        "top pairs are incomplete: more distinct pairs than the {} kept per feature and thread, so their counts are lower bounds and rarer pairs may be missing (class counts are exact)",
        crate::stats::PAIR_CAP
    )
}

/// Said when keys repeat: which of a key's rows is compared.
const DUPLICATES: &str = "of a duplicated key, the first offline row (files in path order) is compared, and one served row: the first read, which with --threads 1 is the first in path order and otherwise may change between runs";

/// The feature's tolerance in words: `exact`, `abs 0.01 rel 1e-6`, `within 15m`.
fn tolerance(f: &FeatureReport) -> String {
    let l = &f.limits;
    if let Some(t) = l.time_tolerance {
        return if t.is_zero() {
            "exact".into()
        } else {
            format!("within {}", humantime::format_duration(t))
        };
    }
    match f.compared_as {
        Domain::Text | Domain::TextList => "exact (text)".into(),
        _ if l.abs_tolerance == 0.0 && l.rel_tolerance == 0.0 => "exact".into(),
        _ => format!(
            "abs {} rel {}",
            fmt_num(l.abs_tolerance),
            fmt_num(l.rel_tolerance)
        ),
    }
}

/// A bucket of the difference histogram as its range (`[1e-3, 1e-2)`, `[1ms, 10ms)` for
/// times, `[1e18, max)` at the top), infinite differences as `infinite`.
fn bucket_label(b: &DiffBucket, time: bool) -> String {
    match b.upper {
        None => "infinite".into(),
        Some(u) if u == f64::MAX => format!("[{}, max)", fmt_decade(b.lower, time)),
        Some(u) => format!("[{}, {})", fmt_decade(b.lower, time), fmt_decade(u, time)),
    }
}

/// The difference histogram on one line, or `None` when it is empty.
fn histogram_line(f: &FeatureReport) -> Option<String> {
    if f.difference_histogram.is_empty() {
        return None;
    }
    let time = f.limits.time_tolerance.is_some();
    let buckets: Vec<String> = f
        .difference_histogram
        .iter()
        .map(|b| format!("{}: {}", bucket_label(b, time), b.count))
        .collect();
    let unit = if time { " (time)" } else { "" };
    Some(format!("|difference|{unit}: {}", buckets.join("  ")))
}

/// Mismatches per struct field on one line, or `None` for other features.
fn fields_line(f: &FeatureReport) -> Option<String> {
    if f.field_mismatches.is_empty() {
        return None;
    }
    let fields: Vec<String> = f
        .field_mismatches
        .iter()
        .map(|m| format!("{} {} ({})", m.field, m.count, pct(m.share)))
        .collect();
    Some(format!("fields that differ: {}", fields.join(", ")))
}

fn status(f: &FeatureReport) -> &'static str {
    if f.violations.is_empty() {
        "ok"
    } else if f.limits.ignore {
        "SKEW (ignored)"
    } else {
        "SKEW"
    }
}

/// A plain text table with columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = w.saturating_sub(c.chars().count());
            if i == 0 {
                l.push_str(c);
                l.push_str(&" ".repeat(pad));
            } else {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    line(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(|s| s.as_str())
            .collect(),
        &mut out,
    );
    for r in rows {
        line(r.iter().map(|s| s.as_str()).collect(), &mut out);
    }
    out
}

fn feature_rows(r: &Report) -> Vec<Vec<String>> {
    r.features
        .iter()
        .map(|f| {
            let d = f.distribution.as_ref();
            vec![
                f.name.clone(),
                f.compared.to_string(),
                pct(f.match_rate),
                pct(f.mismatch_rate),
                format!("{}/{}", f.null_served_only, f.null_offline_only),
                format!("{}/{}", pct(f.served_null_rate), pct(f.offline_null_rate)),
                d.map_or("-".into(), |d| num(d.psi)),
                d.map_or("-".into(), |d| num(d.js)),
                d.and_then(|d| d.ks).map_or("-".into(), num),
                status(f).into(),
            ]
        })
        .collect()
}

/// `null s/o`: compared rows null on one side only (counts); `null% s/o`: null rows of each
/// side, keys ignored (rates).
const FEATURE_HEADER: [&str; 10] = [
    "feature",
    "compared",
    "match",
    "mismatch",
    "null s/o",
    "null% s/o",
    "psi",
    "js",
    "ks",
    "status",
];

fn violation_lines(r: &Report) -> Vec<String> {
    r.violations
        .iter()
        .map(|v| {
            let subject = v
                .subject
                .as_deref()
                .map(|s| format!(" {s}"))
                .unwrap_or_default();
            format!(
                "{}{}: {} = {} > {}",
                v.scope,
                subject,
                v.metric,
                num(v.value),
                num(v.limit)
            )
        })
        .collect()
}

fn schema_lines(r: &Report) -> Vec<String> {
    let s = &r.schema;
    let mut out = Vec::new();
    if !s.missing_in_offline.is_empty() {
        out.push(format!(
            "missing offline: {}",
            s.missing_in_offline.join(", ")
        ));
    }
    if !s.extra_in_offline.is_empty() {
        out.push(format!(
            "extra offline (not served): {}",
            s.extra_in_offline.join(", ")
        ));
    }
    for t in &s.type_differences {
        out.push(format!(
            "type differs: {} is {} served, {} offline (compared as {:?})",
            t.column, t.served_type, t.offline_type, t.compared_as
        ));
    }
    for n in &s.near_names {
        out.push(format!(
            "near names: {} (served) and {} (offline) differ by {}: --rename {}={}",
            n.served, n.offline, n.differs_by, n.served, n.offline
        ));
    }
    for n in &s.renamed {
        out.push(format!(
            "renamed: {} served = {} offline",
            n.served, n.offline
        ));
    }
    for n in &s.merged {
        out.push(format!(
            "type variant: {} served compared with {} offline, where the feature's own column is null",
            n.served, n.offline
        ));
    }
    for n in &s.not_compared {
        out.push(format!(
            "not compared: {} is {} served, {} offline: {} (--ignore {} to leave it out)",
            n.column, n.served_type, n.offline_type, n.reason, n.column
        ));
    }
    if !s.ignored.is_empty() {
        out.push(format!("ignored: {}", s.ignored.join(", ")));
    }
    out
}

impl Report {
    /// The default terminal output: verdict, coverage, schema, a row per feature, then the top
    /// mismatching pairs and their explanations for each feature that has mismatches.
    pub fn render_terminal(&self) -> String {
        let mut o = String::new();
        let c = &self.coverage;
        let _ = writeln!(
            o,
            "featurelog diff: {} ({} rows, {} files) vs {} ({} rows, {} files), key {}",
            self.served.path,
            self.served.rows,
            self.served.files,
            self.offline.path,
            self.offline.rows,
            self.offline.files,
            self.keys
                .iter()
                .map(|k| k.served.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
        let _ = writeln!(o, "\nCoverage");
        let _ = writeln!(
            o,
            "  both {}  served only {} ({})  offline only {} ({})",
            c.both,
            c.served_only,
            pct(c.served_only_rate),
            c.offline_only,
            pct(c.offline_only_rate)
        );
        let _ = writeln!(
            o,
            "  duplicate keys served {} offline {}  null keys served {} offline {}",
            c.served_duplicate_keys,
            c.offline_duplicate_keys,
            c.served_null_keys,
            c.offline_null_keys
        );
        if c.served_duplicate_keys + c.offline_duplicate_keys > 0 {
            let _ = writeln!(o, "  ({DUPLICATES})");
        }
        if !c.served_only_examples.is_empty() {
            let _ = writeln!(
                o,
                "  served only, e.g. {}",
                c.served_only_examples.join(", ")
            );
        }
        if !c.offline_only_examples.is_empty() {
            let _ = writeln!(
                o,
                "  offline only, e.g. {}",
                c.offline_only_examples.join(", ")
            );
        }
        let schema = schema_lines(self);
        if !schema.is_empty() {
            let _ = writeln!(o, "\nSchema");
            for l in schema {
                let _ = writeln!(o, "  {l}");
            }
        }
        let _ = writeln!(o, "\nFeatures");
        o.push_str(&table(&FEATURE_HEADER, &feature_rows(self)));
        for f in self.features.iter().filter(|f| f.mismatches > 0) {
            let _ = writeln!(
                o,
                "\n{}: {} of {} rows differ ({})",
                f.name,
                f.mismatches,
                f.compared,
                pct(f.mismatch_rate)
            );
            for cl in &f.classes {
                let _ = writeln!(
                    o,
                    "  {:<24} {:>6}  {}",
                    cl.class,
                    pct(cl.share),
                    cl.explanation
                );
            }
            if let Some(l) = fields_line(f) {
                let _ = writeln!(o, "  {l}");
            }
            if !f.pairs_complete {
                let _ = writeln!(o, "  {}", pairs_incomplete());
            }
            let rows: Vec<Vec<String>> = f
                .top_pairs
                .iter()
                .take(5)
                .map(|p| {
                    vec![
                        p.served.clone(),
                        p.offline.clone(),
                        p.count.to_string(),
                        pct(p.share),
                        p.class.clone(),
                        p.example_keys.first().cloned().unwrap_or_default(),
                    ]
                })
                .collect();
            for l in table(
                &["served", "offline", "count", "share", "class", "e.g. key"],
                &rows,
            )
            .lines()
            {
                let _ = writeln!(o, "  {l}");
            }
            if let Some(l) = histogram_line(f) {
                let _ = writeln!(o, "  {l}");
            }
        }
        let dist: Vec<&FeatureReport> = self
            .features
            .iter()
            .filter(|f| f.distribution.as_ref().is_some_and(|d| d.psi > 0.1))
            .collect();
        for f in dist {
            if let Some(d) = &f.distribution {
                let nulls = if f.served_null_rate > 0.0 || f.offline_null_rate > 0.0 {
                    format!(
                        "; null {} served, {} offline",
                        pct(f.served_null_rate),
                        pct(f.offline_null_rate)
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    o,
                    "\n{}: distribution shift psi {} js {}; most from {}{nulls}",
                    f.name,
                    num(d.psi),
                    num(d.js),
                    d.top_contributors.join(", ")
                );
            }
        }
        let _ = writeln!(o);
        match self.verdict {
            Verdict::Pass => {
                let _ = writeln!(o, "PASS: every metric within its threshold");
            }
            Verdict::Skew => {
                let _ = writeln!(o, "SKEW: {} threshold(s) exceeded", self.violations.len());
                for l in violation_lines(self) {
                    let _ = writeln!(o, "  {l}");
                }
            }
        }
        o
    }

    /// The report as Markdown (a CI comment): the same sections as the terminal form.
    pub fn render_markdown(&self) -> String {
        let mut o = String::new();
        let c = &self.coverage;
        let verdict = match self.verdict {
            Verdict::Pass => "**PASS**",
            Verdict::Skew => "**SKEW**",
        };
        let _ = writeln!(o, "# featurelog diff: {verdict}\n");
        let _ = writeln!(
            o,
            "Served `{}` ({} rows), offline `{}` ({} rows), key `{}`.\n",
            self.served.path,
            self.served.rows,
            self.offline.path,
            self.offline.rows,
            self.keys
                .iter()
                .map(|k| k.served.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
        let _ = writeln!(o, "## Coverage\n");
        let _ = writeln!(
            o,
            "| both | served only | offline only | duplicate keys (s/o) | null keys (s/o) |"
        );
        let _ = writeln!(o, "| ---: | ---: | ---: | ---: | ---: |");
        let _ = writeln!(
            o,
            "| {} | {} ({}) | {} ({}) | {}/{} | {}/{} |\n",
            c.both,
            c.served_only,
            pct(c.served_only_rate),
            c.offline_only,
            pct(c.offline_only_rate),
            c.served_duplicate_keys,
            c.offline_duplicate_keys,
            c.served_null_keys,
            c.offline_null_keys
        );
        if c.served_duplicate_keys + c.offline_duplicate_keys > 0 {
            let _ = writeln!(o, "Duplicate keys: {DUPLICATES}.\n");
        }
        let schema = schema_lines(self);
        if !schema.is_empty() {
            let _ = writeln!(o, "## Schema\n");
            for l in schema {
                let _ = writeln!(o, "- {}", md_escape(&l));
            }
            let _ = writeln!(o);
        }
        let _ = writeln!(o, "## Features\n");
        let _ = writeln!(o, "| {} |", FEATURE_HEADER.join(" | "));
        let _ = writeln!(o, "| --- |{}", " ---: |".repeat(FEATURE_HEADER.len() - 1));
        for r in feature_rows(self) {
            let cells: Vec<String> = r.iter().map(|c| md_escape(c)).collect();
            let _ = writeln!(o, "| {} |", cells.join(" | "));
        }
        for f in self.features.iter().filter(|f| f.mismatches > 0) {
            let _ = writeln!(o, "\n### {}\n", md_escape(&f.name));
            for cl in &f.classes {
                let _ = writeln!(
                    o,
                    "- `{}` ({}): {}",
                    cl.class,
                    pct(cl.share),
                    md_escape(&cl.explanation)
                );
            }
            for l in [fields_line(f), histogram_line(f)].into_iter().flatten() {
                let _ = writeln!(o, "- {}", md_escape(&l));
            }
            if !f.pairs_complete {
                let _ = writeln!(o, "\n*{}.*", md_escape(&pairs_incomplete()));
            }
            let _ = writeln!(
                o,
                "\n| served | offline | count | share | class | example keys |"
            );
            let _ = writeln!(o, "| --- | --- | ---: | ---: | --- | --- |");
            for p in &f.top_pairs {
                let _ = writeln!(
                    o,
                    "| `{}` | `{}` | {} | {} | {} | {} |",
                    md_escape(&p.served),
                    md_escape(&p.offline),
                    p.count,
                    pct(p.share),
                    p.class,
                    md_escape(&p.example_keys.join(", "))
                );
            }
        }
        if !self.violations.is_empty() {
            let _ = writeln!(o, "\n## Thresholds exceeded\n");
            for l in violation_lines(self) {
                let _ = writeln!(o, "- {}", md_escape(&l));
            }
        }
        o
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}
