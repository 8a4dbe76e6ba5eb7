//! The terminal and Markdown forms of a small report, line for line, and the figures they
//! print: percentages, metrics, tolerances and difference buckets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use super::*;
use crate::options::{EffectiveLimits, Thresholds};
use crate::report::{
    ClassReport, Coverage, Distribution, PairReport, Rename, SchemaReport, Side, Verdict, Violation,
};

fn limits() -> EffectiveLimits {
    EffectiveLimits {
        abs_tolerance: 0.0,
        rel_tolerance: 0.0,
        time_tolerance: None,
        max_mismatch_rate: Some(0.01),
        max_psi: None,
        max_js: None,
        max_ks: None,
        ignore: false,
    }
}

/// A feature of `compared` rows of which `mismatches` differ, nothing else to say.
fn feature(name: &str, compared_as: Domain, compared: u64, mismatches: u64) -> FeatureReport {
    let rate = mismatches as f64 / compared as f64;
    FeatureReport {
        name: name.into(),
        offline_name: name.into(),
        served_type: "Float64".into(),
        offline_type: "Float64".into(),
        compared_as,
        limits: limits(),
        compared,
        matches: compared - mismatches,
        mismatches,
        match_rate: 1.0 - rate,
        mismatch_rate: rate,
        both_null: 0,
        within_tolerance: 0,
        null_served_only: 0,
        null_offline_only: 0,
        served_null_rate: 0.0,
        offline_null_rate: 0.0,
        difference_histogram: Vec::new(),
        top_pairs: Vec::new(),
        pairs_complete: true,
        classes: Vec::new(),
        field_mismatches: Vec::new(),
        distribution: None,
        distribution_note: None,
        violations: Vec::new(),
    }
}

fn side(path: &str, rows: u64) -> Side {
    Side {
        path: path.into(),
        files: 1,
        rows,
        columns: 3,
        incomplete_files_skipped: 0,
        delta_version: None,
    }
}

/// Four keys on each side, three in both; `price` differs on one and its distribution
/// shifted; `locale` matches.
fn report() -> Report {
    let mut price = feature("price", Domain::Number, 3, 1);
    price.null_offline_only = 1;
    price.offline_null_rate = 0.25;
    price.difference_histogram = vec![DiffBucket {
        lower: 0.01,
        upper: Some(0.1),
        count: 1,
    }];
    price.top_pairs = vec![PairReport {
        served: "1.25".into(),
        offline: "1.2".into(),
        count: 1,
        share: 1.0,
        class: "rounding".into(),
        fields: Vec::new(),
        example_keys: vec!["r1".into()],
    }];
    price.classes = vec![ClassReport {
        class: "rounding".into(),
        count: 1,
        share: 1.0,
        mismatch_rate_after: 0.0,
        explanation: "equal when rounded to 1 decimal".into(),
    }];
    price.distribution = Some(Distribution {
        kind: "numeric".into(),
        psi: 0.5,
        js: 0.125,
        ks: Some(0.25),
        served_nulls: 0,
        offline_nulls: 1,
        bins: Vec::new(),
        top_contributors: vec!["[1, 2)".into()],
    });
    price.violations = vec!["max-mismatch-rate".into()];
    let locale = feature("locale", Domain::Text, 3, 0);
    Report {
        schema_version: 1,
        served: side("served/", 4),
        offline: side("offline.csv", 4),
        keys: vec![Rename {
            served: "id".into(),
            offline: "id".into(),
        }],
        coverage: Coverage {
            served_rows: 4,
            offline_rows: 4,
            both: 3,
            served_only: 1,
            offline_only: 1,
            served_only_rate: 0.25,
            offline_only_rate: 0.25,
            served_only_examples: vec!["r4".into()],
            offline_only_examples: vec!["r5".into()],
            ..Coverage::default()
        },
        schema: SchemaReport {
            compared: vec!["price".into(), "locale".into()],
            missing_in_offline: vec!["score".into()],
            ignored: vec!["dt".into()],
            ..SchemaReport::default()
        },
        features: vec![price, locale],
        violations: vec![Violation {
            scope: "feature".into(),
            subject: Some("price".into()),
            metric: "max-mismatch-rate".into(),
            value: 1.0 / 3.0,
            limit: 0.01,
        }],
        verdict: Verdict::Skew,
        thresholds: Thresholds::default(),
        elapsed_seconds: 0.5,
    }
}

#[test]
fn the_terminal_form_of_a_small_report() {
    let expected = "\
featurelog diff: served/ (4 rows, 1 files) vs offline.csv (4 rows, 1 files), key id

Coverage
  both 3  served only 1 (25.00%)  offline only 1 (25.00%)
  duplicate keys served 0 offline 0  null keys served 0 offline 0
  served only, e.g. r4
  offline only, e.g. r5

Schema
  missing offline: score
  ignored: dt

Features
feature  compared    match  mismatch  null s/o  null% s/o     psi      js      ks  status
-------  --------  -------  --------  --------  ---------  ------  ------  ------  ------
price           3   66.67%    33.33%       0/1  0%/25.00%  0.5000  0.1250  0.2500    SKEW
locale          3  100.00%        0%       0/0      0%/0%       -       -       -      ok

price: 1 of 3 rows differ (33.33%)
  rounding                 100.00%  equal when rounded to 1 decimal
  served  offline  count    share     class  e.g. key
  ------  -------  -----  -------  --------  --------
  1.25        1.2      1  100.00%  rounding        r1
  |difference|: [1e-2, 1e-1): 1

price: distribution shift psi 0.5000 js 0.1250; most from [1, 2); null 0% served, 25.00% offline

SKEW: 1 threshold(s) exceeded
  feature price: max-mismatch-rate = 0.3333 > 0.0100
";
    assert_eq!(report().render_terminal(), expected);
}

#[test]
fn the_markdown_form_of_a_small_report() {
    let expected = "\
# featurelog diff: **SKEW**

Served `served/` (4 rows), offline `offline.csv` (4 rows), key `id`.

## Coverage

| both | served only | offline only | duplicate keys (s/o) | null keys (s/o) |
| ---: | ---: | ---: | ---: | ---: |
| 3 | 1 (25.00%) | 1 (25.00%) | 0/0 | 0/0 |

## Schema

- missing offline: score
- ignored: dt

## Features

| feature | compared | match | mismatch | null s/o | null% s/o | psi | js | ks | status |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| price | 3 | 66.67% | 33.33% | 0/1 | 0%/25.00% | 0.5000 | 0.1250 | 0.2500 | SKEW |
| locale | 3 | 100.00% | 0% | 0/0 | 0%/0% | - | - | - | ok |

### price

- `rounding` (100.00%): equal when rounded to 1 decimal
- \\|difference\\|: [1e-2, 1e-1): 1

| served | offline | count | share | class | example keys |
| --- | --- | ---: | ---: | --- | --- |
| `1.25` | `1.2` | 1 | 100.00% | rounding | r1 |

## Thresholds exceeded

- feature price: max-mismatch-rate = 0.3333 > 0.0100
";
    assert_eq!(report().render_markdown(), expected);
}

#[test]
fn a_passing_report_ends_with_its_verdict_and_lists_no_feature_section() {
    let mut r = report();
    r.features.remove(0);
    r.violations.clear();
    r.verdict = Verdict::Pass;
    let terminal = r.render_terminal();
    assert!(
        terminal.ends_with("\n\nPASS: every metric within its threshold\n"),
        "{terminal}"
    );
    assert!(!terminal.contains("rows differ"), "{terminal}");
    let markdown = r.render_markdown();
    assert!(markdown.starts_with("# featurelog diff: **PASS**\n"));
    assert!(!markdown.contains("Thresholds exceeded"), "{markdown}");
}

#[test]
fn duplicates_and_incomplete_pairs_are_explained_where_they_matter() {
    let mut r = report();
    r.coverage.offline_duplicate_keys = 2;
    r.features[0].pairs_complete = false;
    let terminal = r.render_terminal();
    assert!(
        terminal.contains(&format!("  ({DUPLICATES})\n")),
        "{terminal}"
    );
    assert!(terminal.contains(&format!("  {}\n", pairs_incomplete())));
    let markdown = r.render_markdown();
    assert!(markdown.contains(&format!("Duplicate keys: {DUPLICATES}.\n")));
}

#[test]
fn markdown_cells_escape_pipes_and_newlines() {
    let mut r = report();
    r.features[0].name = "a|b".into();
    r.features[0].top_pairs[0].served = "x\ny".into();
    let markdown = r.render_markdown();
    assert!(markdown.contains("| a\\|b | 3 |"), "{markdown}");
    assert!(markdown.contains("### a\\|b\n"), "{markdown}");
    assert!(markdown.contains("| `x y` | `1.2` |"), "{markdown}");
}

#[test]
fn percentages_keep_small_rates_visible() {
    assert_eq!(pct(0.0), "0%");
    assert_eq!(pct(0.00001), "0.0010%");
    assert_eq!(pct(0.5), "50.00%");
    assert_eq!(pct(1.0), "100.00%");
}

#[test]
fn metrics_print_whole_from_100_and_scientific_when_tiny_or_huge() {
    assert_eq!(num(0.0), "0");
    assert_eq!(num(0.123456), "0.1235");
    assert_eq!(num(250.4), "250");
    assert_eq!(num(0.00001), "1.000e-5");
    assert_eq!(num(2e15), "2.000e15");
    assert_eq!(num(f64::INFINITY), "inf");
}

#[test]
fn tolerances_in_words() {
    let mut f = feature("x", Domain::Number, 1, 0);
    assert_eq!(tolerance(&f), "exact");
    f.limits.abs_tolerance = 0.01;
    f.limits.rel_tolerance = 1e-6;
    assert_eq!(tolerance(&f), "abs 0.01 rel 1e-6");
    f.compared_as = Domain::Text;
    assert_eq!(tolerance(&f), "exact (text)");
    f.limits.time_tolerance = Some(Duration::from_secs(900));
    assert_eq!(tolerance(&f), "within 15m");
    f.limits.time_tolerance = Some(Duration::ZERO);
    assert_eq!(tolerance(&f), "exact");
}

#[test]
fn difference_buckets_as_ranges() {
    let b = |lower, upper| DiffBucket {
        lower,
        upper,
        count: 1,
    };
    assert_eq!(bucket_label(&b(0.001, Some(0.01)), false), "[1e-3, 1e-2)");
    assert_eq!(bucket_label(&b(1e18, Some(f64::MAX)), false), "[1e18, max)");
    assert_eq!(bucket_label(&b(f64::INFINITY, None), false), "infinite");
    assert_eq!(
        bucket_label(&b(1000.0, Some(10_000.0)), true),
        "[1ms, 10ms)"
    );
}

#[test]
fn an_ignored_feature_over_its_limits_says_so() {
    let mut f = feature("x", Domain::Number, 1, 1);
    assert_eq!(status(&f), "ok");
    f.violations = vec!["max-mismatch-rate".into()];
    assert_eq!(status(&f), "SKEW");
    f.limits.ignore = true;
    assert_eq!(status(&f), "SKEW (ignored)");
}
