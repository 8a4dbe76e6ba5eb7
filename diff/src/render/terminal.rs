//! The terminal form of the report, the default: verdict, coverage, schema, a table of
//! features, then what explains each mismatching feature.

use std::fmt::Write as _;

use super::{
    DUPLICATES, FEATURE_HEADER, feature_rows, fields_line, histogram_line, num, pairs_incomplete,
    pct, schema_lines, violation_lines,
};
use crate::report::{FeatureReport, Report, Verdict};

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

/// `Delta version N, ` for a side read through a Delta log, so the report says which version.
fn delta_version(side: &crate::report::Side) -> String {
    side.delta_version
        .map(|v| format!("Delta version {v}, "))
        .unwrap_or_default()
}

impl Report {
    /// The default terminal output: verdict, coverage, schema, a row per feature, then the top
    /// mismatching pairs and their explanations for each feature that has mismatches.
    pub fn render_terminal(&self) -> String {
        let mut o = String::new();
        let c = &self.coverage;
        let _ = writeln!(
            o,
            "featurelog diff: {} ({}{} rows, {} files) vs {} ({}{} rows, {} files), key {}",
            self.served.path,
            delta_version(&self.served),
            self.served.rows,
            self.served.files,
            self.offline.path,
            delta_version(&self.offline),
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
}
