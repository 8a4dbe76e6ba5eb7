//! The HTML page: one self-contained file, its charts drawn by its own script from data the
//! page carries (inline SVG: a legend saying which series is which, and every bin labelled).

use std::fmt::Write as _;

use super::{
    DUPLICATES, FEATURE_HEADER, bucket_label, feature_rows, fields_line, num, pct, schema_lines,
    tolerance, violation_lines,
};
use crate::report::{FeatureReport, Report, Verdict};

impl Report {
    /// One self-contained HTML page: summary, coverage, schema, a table of features and, per
    /// feature, side-by-side served and offline histograms and the histogram of differences
    /// (inline SVG with a legend and labelled bins, drawn by the page's script from each
    /// chart's data) and the top pairs. No external resource; a skewed feature's section is
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
        if c.served_duplicate_keys + c.offline_duplicate_keys > 0 {
            let _ = write!(
                o,
                "<p class=\"meta\">Duplicate keys: {}.</p>",
                esc(DUPLICATES)
            );
        }
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
        "<p class=\"meta\">served <code>{}</code> {}, offline <code>{}</code> {}; compared as {}; tolerance {}</p>",
        esc(&f.name),
        esc(&f.served_type),
        esc(&f.offline_name),
        esc(&f.offline_type),
        f.compared_as.name(),
        esc(&tolerance(f))
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
    difference_chart(o, f);
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
        if let Some(l) = fields_line(f) {
            let _ = write!(o, "<li>{}</li>", esc(&l));
        }
        o.push_str("</ul>");
    }
    if !f.top_pairs.is_empty() {
        if !f.pairs_complete {
            let _ = write!(
                o,
                "<p class=\"meta\">{}</p>",
                esc(&super::pairs_incomplete())
            );
        }
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

/// JSON in a single-quoted attribute: JSON's double quotes need no escape there.
fn data_attr(json: &serde_json::Value) -> String {
    json.to_string()
        .replace('&', "&amp;")
        .replace('\'', "&#39;")
        .replace('<', "&lt;")
}

/// The difference histogram as one series of bars, labelled by each bucket's lower bound
/// (`data-diff`: [label, count] per bucket), for numbers and times that differ.
fn difference_chart(o: &mut String, f: &FeatureReport) {
    if f.difference_histogram.is_empty() {
        return;
    }
    let time = f.limits.time_tolerance.is_some();
    let data: Vec<serde_json::Value> = f
        .difference_histogram
        .iter()
        .map(|b| serde_json::json!([bucket_label(b, time), b.count]))
        .collect();
    let _ = write!(
        o,
        "<div class=\"dchart\" data-diff='{}'></div>",
        data_attr(&serde_json::Value::Array(data))
    );
}

/// Side-by-side bars per bin, as shares of each side: at most 24, the null bin (last) always
/// among them, as a shift in nulls is a shift like any other. The page carries each chart as
/// its bins' labels and shares (`data-bins`), and its script draws them as inline SVG: drawn
/// here, the SVG of one chart took ~4 KB (two rects and a tooltip per bar), two thirds of a
/// skewed feature's section, where its data takes a few hundred bytes.
fn histogram_chart(o: &mut String, d: &crate::report::Distribution) {
    const BARS: usize = 24;
    let mut bins: Vec<&crate::report::Bin> = d.bins.iter().take(BARS).collect();
    if d.bins.len() > BARS
        && let Some(null) = d.bins.last().filter(|b| b.label == crate::stats::NULL_BIN)
    {
        bins[BARS - 1] = null;
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
    let _ = write!(
        o,
        "<div class=\"chart\" data-bins='{}'></div>",
        data_attr(&serde_json::Value::Array(data))
    );
}

/// A share to six decimals: enough for a bar's height and for its percentage as `pct` prints
/// it (the page's script prints it the same way).
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}code{font-size:13px}.v{padding:1px 6px;border-radius:3px;color:#fff}.v.pass{background:#2a7}.v.skew{background:#c33}.viol li{color:#a00}.feat{border-top:1px solid #ddd;padding:.3em 0}.meta{color:#666}rect.s,i.s{fill:#3b7dd8;background:#3b7dd8}rect.o,i.o{fill:#f0922b;background:#f0922b}rect.d,i.d{fill:#777;background:#777}.legend{font-size:12px;color:#444}.legend i{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}.legend i:first-child{margin-left:0}svg text{font-size:10px;fill:#444}.hist,.dhist{display:block;margin:.3em 0}tr.hide{display:none}";

/// Draws the charts (`histogram_chart`, `difference_chart`): a legend naming each series, the
/// bars, and each bin's label turned under its bars (a range by its lower bound; the whole
/// label and the shares on hover). Then filters the feature table. Sets `data-report-ok` on
/// the body when it ran, which the headless-browser test reads as proof that the page's
/// script had no error.
const SCRIPT: &str = r##"(function () {
  function e(t) {
    return String(t).replace(/[&<>"]/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c];
    });
  }
  function p(x) { return x === 0 ? '0%' : (100 * x).toFixed(x < 0.0001 ? 4 : 2) + '%'; }
  function short(l) {
    var m = /^\[(.*), [^,]*\)$/.exec(l), t = m ? m[1] : l;
    return t.length > 24 ? t.slice(0, 23) + '\u2026' : t;
  }
  // bins: [label, value...]; series: [[css class, index in a bin, name]]; tip: hover text.
  function draw(cls, bins, series, title, tip) {
    var h = 80, slot = 6 + 10 * series.length, m = 1e-12, chars = 0;
    bins.forEach(function (b) {
      series.forEach(function (s) { m = Math.max(m, b[s[1]]); });
      chars = Math.max(chars, short(b[0]).length);
    });
    var w = bins.length * slot + chars * 3 + 10, H = Math.ceil(h + 8 + chars * 5.2 + 6);
    var out = '<div class="legend">' + series.map(function (s) {
      return '<i class="' + s[0] + '"></i>' + e(s[2]);
    }).join('') + '</div><svg class="' + cls + '" width="' + w + '" height="' + H +
      '" viewBox="0 0 ' + w + ' ' + H + '" role="img"><title>' + e(title) + '</title>' +
      '<line x1="0" y1="' + (h + 0.5) + '" x2="' + bins.length * slot + '" y2="' + (h + 0.5) +
      '" stroke="#999"/>';
    bins.forEach(function (b, i) {
      var x0 = i * slot + 2, cx = x0 + slot / 2 - 3;
      out += '<g><title>' + e(tip(b)) + '</title>';
      series.forEach(function (s, k) {
        var v = b[s[1]] / m * h;
        out += '<rect class="' + s[0] + '" x="' + (x0 + 10 * k) + '" y="' + (h - v).toFixed(1) +
          '" width="9" height="' + v.toFixed(1) + '"/>';
      });
      out += '<text x="' + cx + '" y="' + (h + 10) + '" transform="rotate(60 ' + cx + ' ' +
        (h + 10) + ')">' + e(short(b[0])) + '</text></g>';
    });
    return out + '</svg>';
  }
  document.querySelectorAll('div.chart').forEach(function (d) {
    var bins = JSON.parse(d.dataset.bins);
    d.innerHTML = draw('hist', bins, [['s', 1, 'served'], ['o', 2, 'offline']],
      'share of rows per bin: served (blue) and offline (orange)',
      function (b) { return b[0] + ': served ' + p(b[1]) + ', offline ' + p(b[2]); });
  });
  document.querySelectorAll('div.dchart').forEach(function (d) {
    var bins = JSON.parse(d.dataset.diff);
    d.innerHTML = draw('dhist', bins, [['d', 1, 'compared pairs by |served - offline|']],
      'pairs whose values differ, by the size of the difference',
      function (b) { return '|served - offline| ' + b[0] + ': ' + b[1] + ' pairs'; });
  });
  var f = document.getElementById('filter'), s = document.getElementById('skewonly');
  function apply() {
    var q = f.value.toLowerCase();
    document.querySelectorAll('#features tr[data-name]').forEach(function (r) {
      var hide = (q && r.dataset.name.toLowerCase().indexOf(q) < 0) ||
        (s.checked && r.dataset.skew !== 'true');
      r.classList.toggle('hide', !!hide);
    });
  }
  f.addEventListener('input', apply);
  s.addEventListener('change', apply);
  apply();
  document.body.setAttribute('data-report-ok', '1');
})();"##;
