//! The report for people: a terminal table (the default), Markdown (for a CI comment) and one
//! self-contained HTML page with a chart per feature. The JSON form is [`Report::to_json`].

use std::fmt::Write as _;

use crate::report::{FeatureReport, Report, Verdict};

fn pct(x: f64) -> String {
    if x == 0.0 {
        "0%".into()
    } else if x < 0.0001 {
        format!("{:.4}%", 100.0 * x)
    } else {
        format!("{:.2}%", 100.0 * x)
    }
}

fn num(x: f64) -> String {
    if x.abs() >= 100.0 || x == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.4}")
    }
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
            if !f.difference_histogram.is_empty() {
                let buckets: Vec<String> = f
                    .difference_histogram
                    .iter()
                    .map(|b| format!(">={}: {}", num_short(b.lower), b.count))
                    .collect();
                let _ = writeln!(o, "  |difference|: {}", buckets.join("  "));
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

    /// One self-contained HTML page: summary, coverage, schema, a table of features and, per
    /// feature, side-by-side histograms (inline SVG, drawn by the page's script from each
    /// chart's bins) and the top pairs. No external resource; a skewed feature's section is
    /// under 3 KB, so hundreds of features stay small.
    pub fn render_html(&self) -> String {
        let mut o = String::new();
        let verdict = match self.verdict {
            Verdict::Pass => "PASS",
            Verdict::Skew => "SKEW",
        };
        let _ = write!(
            o,
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>featurelog diff: {verdict}</title><style>{CSS}</style></head><body>"
        );
        let _ = write!(
            o,
            "<h1>featurelog diff <span class=\"v {}\">{verdict}</span></h1><p>Served <code>{}</code> ({} rows) vs offline <code>{}</code> ({} rows), key <code>{}</code>.</p>",
            verdict.to_lowercase(),
            esc(&self.served.path),
            self.served.rows,
            esc(&self.offline.path),
            self.offline.rows,
            esc(&self
                .keys
                .iter()
                .map(|k| k.served.as_str())
                .collect::<Vec<_>>()
                .join(","))
        );
        if !self.violations.is_empty() {
            o.push_str("<h2>Thresholds exceeded</h2><ul class=\"viol\">");
            for l in violation_lines(self) {
                let _ = write!(o, "<li>{}</li>", esc(&l));
            }
            o.push_str("</ul>");
        }
        let c = &self.coverage;
        let _ = write!(
            o,
            "<h2>Coverage</h2><table><tr><th>both</th><th>served only</th><th>offline only</th><th>duplicate keys s/o</th><th>null keys s/o</th></tr><tr><td>{}</td><td>{} ({})</td><td>{} ({})</td><td>{}/{}</td><td>{}/{}</td></tr></table>",
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
        let schema = schema_lines(self);
        if !schema.is_empty() {
            o.push_str("<h2>Schema</h2><ul>");
            for l in schema {
                let _ = write!(o, "<li>{}</li>", esc(&l));
            }
            o.push_str("</ul>");
        }
        o.push_str("<h2>Features</h2><p><input id=\"filter\" placeholder=\"filter features\"> <label><input type=\"checkbox\" id=\"skewonly\"> skew only</label></p><table id=\"features\"><tr>");
        for h in FEATURE_HEADER {
            let _ = write!(o, "<th>{h}</th>");
        }
        o.push_str("</tr>");
        for (f, row) in self.features.iter().zip(feature_rows(self)) {
            let _ = write!(
                o,
                "<tr data-name=\"{}\" data-skew=\"{}\">",
                esc(&f.name),
                !f.violations.is_empty()
            );
            for (i, cell) in row.iter().enumerate() {
                if i == 0 {
                    let _ = write!(
                        o,
                        "<td><a href=\"#f-{}\">{}</a></td>",
                        anchor(&f.name),
                        esc(cell)
                    );
                } else {
                    let _ = write!(o, "<td>{}</td>", esc(cell));
                }
            }
            o.push_str("</tr>");
        }
        o.push_str("</table>");
        for f in &self.features {
            feature_html(&mut o, f);
        }
        let _ = write!(o, "<script>{SCRIPT}</script></body></html>");
        o
    }
}

fn num_short(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:e}")
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn anchor(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn feature_html(o: &mut String, f: &FeatureReport) {
    let skew = !f.violations.is_empty();
    let _ = write!(
        o,
        "<details class=\"feat\" id=\"f-{}\"{}><summary><b>{}</b> {} match, {} mismatch{}</summary>",
        anchor(&f.name),
        if skew { " open" } else { "" },
        esc(&f.name),
        pct(f.match_rate),
        pct(f.mismatch_rate),
        if skew {
            " <span class=\"v skew\">SKEW</span>"
        } else {
            ""
        }
    );
    let _ = write!(
        o,
        "<p class=\"meta\">served <code>{}</code> {}, offline <code>{}</code> {}; compared as {:?}; tolerance abs {} rel {}</p>",
        esc(&f.name),
        esc(&f.served_type),
        esc(&f.offline_name),
        esc(&f.offline_type),
        f.compared_as,
        f.limits.abs_tolerance,
        f.limits.rel_tolerance
    );
    if let Some(d) = &f.distribution {
        let _ = write!(
            o,
            "<p>psi {} js {}{}</p>",
            num(d.psi),
            num(d.js),
            d.ks.map(|k| format!(" ks {}", num(k))).unwrap_or_default()
        );
        histogram_chart(o, d);
    } else if let Some(n) = &f.distribution_note {
        let _ = write!(o, "<p class=\"meta\">no distribution: {}</p>", esc(n));
    }
    if !f.classes.is_empty() {
        o.push_str("<ul>");
        for cl in &f.classes {
            let _ = write!(
                o,
                "<li><code>{}</code> {}: {}</li>",
                esc(&cl.class),
                pct(cl.share),
                esc(&cl.explanation)
            );
        }
        o.push_str("</ul>");
    }
    if !f.top_pairs.is_empty() {
        o.push_str("<table><tr><th>served</th><th>offline</th><th>count</th><th>share</th><th>class</th><th>example keys</th></tr>");
        for p in &f.top_pairs {
            let _ = write!(
                o,
                "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.served),
                esc(&p.offline),
                p.count,
                pct(p.share),
                esc(&p.class),
                esc(&p.example_keys.join(", "))
            );
        }
        o.push_str("</table>");
    }
    o.push_str("</details>");
}

/// Side-by-side bars per bin, as shares of each side: at most 24, the null bin (last) always
/// among them, as a shift in nulls is a shift like any other. The page carries each chart as
/// its bins' labels and shares (`data-bins`), and its script draws them as inline SVG: drawn
/// here, the SVG of one chart took ~4 KB (two rects and a tooltip per bar), two thirds of a
/// skewed feature's section, where its data takes a few hundred bytes.
fn histogram_chart(o: &mut String, d: &crate::report::Distribution) {
    const BARS: usize = 24;
    let mut bins: Vec<&crate::report::Bin> = d.bins.iter().take(BARS).collect();
    if d.bins.len() > BARS {
        if let Some(null) = d.bins.last().filter(|b| b.label == crate::stats::NULL_BIN) {
            bins[BARS - 1] = null;
        }
    }
    if bins.is_empty() {
        return;
    }
    let ts: u64 = d.bins.iter().map(|b| b.served).sum::<u64>().max(1);
    let to: u64 = d.bins.iter().map(|b| b.offline).sum::<u64>().max(1);
    // [label, served share, offline share] per bar.
    let data: Vec<serde_json::Value> = bins
        .iter()
        .map(|b| {
            let (s, of) = (b.served as f64 / ts as f64, b.offline as f64 / to as f64);
            serde_json::json!([b.label, round6(s), round6(of)])
        })
        .collect();
    // In single quotes, so that JSON's double quotes need no escape.
    let json = serde_json::Value::Array(data).to_string();
    let _ = write!(
        o,
        "<div class=\"chart\" data-bins='{}'></div>",
        json.replace('&', "&amp;")
            .replace('\'', "&#39;")
            .replace('<', "&lt;")
    );
}

/// A share to six decimals: enough for a bar's height and for its percentage as `pct` prints
/// it (the page's script prints it the same way).
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}code{font-size:13px}.v{padding:1px 6px;border-radius:3px;color:#fff}.v.pass{background:#2a7}.v.skew{background:#c33}.viol li{color:#a00}.feat{border-top:1px solid #ddd;padding:.3em 0}.meta{color:#666}.hist rect.s{fill:#3b7dd8}.hist rect.o{fill:#f0922b}.hist{display:block;margin:.3em 0;border-bottom:1px solid #999}tr.hide{display:none}";

/// Draws the charts (`histogram_chart`), then filters the feature table; sets `data-report-ok`
/// on the body when it ran, which the headless-browser test reads as proof that the page's
/// script had no error.
const SCRIPT: &str = "(function(){function e(t){return String(t).replace(/[&<>\"]/g,function(c){return {'&':'&amp;','<':'&lt;','>':'&gt;','\"':'&quot;'}[c];});}function p(x){return x===0?'0%':(100*x).toFixed(x<0.0001?4:2)+'%';}document.querySelectorAll('div.chart').forEach(function(d){var b=JSON.parse(d.dataset.bins),m=1e-9,h=80,w=b.length*22;b.forEach(function(x){m=Math.max(m,x[1],x[2]);});var s='<svg class=\"hist\" width=\"'+w+'\" height=\"82\" viewBox=\"0 0 '+w+' 82\" role=\"img\"><title>served (blue) and offline (orange) share per bin</title>';b.forEach(function(x,i){var hs=x[1]/m*h,ho=x[2]/m*h;s+='<g><title>'+e(x[0])+': served '+p(x[1])+' offline '+p(x[2])+'</title><rect class=\"s\" x=\"'+(i*22+1)+'\" y=\"'+(h-hs).toFixed(1)+'\" width=\"9\" height=\"'+hs.toFixed(1)+'\"/><rect class=\"o\" x=\"'+(i*22+10)+'\" y=\"'+(h-ho).toFixed(1)+'\" width=\"9\" height=\"'+ho.toFixed(1)+'\"/></g>';});d.innerHTML=s+'</svg>';});var f=document.getElementById('filter'),s=document.getElementById('skewonly');function apply(){var q=f.value.toLowerCase();document.querySelectorAll('#features tr[data-name]').forEach(function(r){var hide=(q&&r.dataset.name.toLowerCase().indexOf(q)<0)||(s.checked&&r.dataset.skew!=='true');r.classList.toggle('hide',!!hide);});}f.addEventListener('input',apply);s.addEventListener('change',apply);apply();document.body.setAttribute('data-report-ok','1');})();";
