//! The Markdown form of the report, for a CI comment: the same sections as the terminal form.

use std::fmt::Write as _;

use super::{
    DUPLICATES, FEATURE_HEADER, feature_rows, fields_line, histogram_line, pairs_incomplete, pct,
    schema_lines, violation_lines,
};
use crate::report::{Report, Verdict};

impl Report {
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
