//! The report for people: a terminal table (the default), Markdown (for a CI comment) and one
//! self-contained HTML page with a chart per feature, each in its own module, from the
//! figures and lines they share, which are here. The JSON form is [`Report::to_json`].

mod html;
mod markdown;
mod terminal;
#[cfg(test)]
mod tests;

use crate::report::{DiffBucket, FeatureReport, Report};
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
