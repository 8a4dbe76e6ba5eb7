//! The report: what a diff found, as plain data with a stable JSON form (docs/DIFF.md, schema
//! version 1), and the verdict that the thresholds make of it.

use serde::Serialize;

use crate::options::{EffectiveLimits, Thresholds};
use crate::values::Domain;

/// Version of the JSON schema; bumped only when a field changes meaning or disappears (new
/// fields may be added within a version).
pub const SCHEMA_VERSION: u32 = 1;

/// The outcome for CI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every metric within its threshold.
    Pass,
    /// At least one metric over its threshold.
    Skew,
}

impl Verdict {
    /// The process exit code: 0 pass, 1 skew (2, errors, is the CLI's).
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Pass => 0,
            Verdict::Skew => 1,
        }
    }
}

/// A complete diff report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The served input.
    pub served: Side,
    /// The offline input.
    pub offline: Side,
    /// Key columns (served name, offline name).
    pub keys: Vec<Rename>,
    /// How the keys line up.
    pub coverage: Coverage,
    /// How the columns line up.
    pub schema: SchemaReport,
    /// One entry per compared feature, in served column order.
    pub features: Vec<FeatureReport>,
    /// Every threshold exceeded.
    pub violations: Vec<Violation>,
    /// `pass` or `skew`.
    pub verdict: Verdict,
    /// The thresholds applied.
    pub thresholds: Thresholds,
    /// Wall time of the diff.
    pub elapsed_seconds: f64,
}

/// One input.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// The path given.
    pub path: String,
    /// Data files read.
    pub files: usize,
    /// Rows read.
    pub rows: u64,
    /// Columns (file columns and hive partition columns).
    pub columns: usize,
    /// Data files skipped as not complete (`--complete-only`; 0 without it).
    pub incomplete_files_skipped: usize,
    /// The version read when the side is a Delta table (null otherwise).
    pub delta_version: Option<u64>,
}

/// Key coverage. `served_rows = served_null_keys + served_duplicate_keys + both + served_only`,
/// and the same for the offline side.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Coverage {
    /// Rows of the served side.
    pub served_rows: u64,
    /// Rows of the offline side.
    pub offline_rows: u64,
    /// Distinct keys present on both sides: the rows compared.
    pub both: u64,
    /// Distinct served keys absent offline.
    pub served_only: u64,
    /// Distinct offline keys never served.
    pub offline_only: u64,
    /// `served_only / served_rows`.
    pub served_only_rate: f64,
    /// `offline_only / offline_rows`.
    pub offline_only_rate: f64,
    /// Served rows whose key an earlier served row had (not compared).
    pub served_duplicate_keys: u64,
    /// Offline rows whose key an earlier offline row had (not compared; the first is).
    pub offline_duplicate_keys: u64,
    /// Served rows with a null key part.
    pub served_null_keys: u64,
    /// Offline rows with a null key part.
    pub offline_null_keys: u64,
    /// A few served-only keys (parts joined by `|`).
    pub served_only_examples: Vec<String>,
    /// A few offline-only keys.
    pub offline_only_examples: Vec<String>,
}

/// A column's served and offline names.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rename {
    /// Served name.
    pub served: String,
    /// Offline name.
    pub offline: String,
}

/// Columns whose types differ.
#[derive(Debug, Clone, Serialize)]
pub struct TypeDifference {
    /// Served name.
    pub column: String,
    /// Arrow type served.
    pub served_type: String,
    /// Arrow type offline.
    pub offline_type: String,
    /// The domain the values were compared in.
    pub compared_as: Domain,
}

/// A column both sides have whose type the diff cannot compare (e.g. a list of structs): not a
/// feature of the report, and not a reason to fail the diff.
#[derive(Debug, Clone, Serialize)]
pub struct NotCompared {
    /// Served name.
    pub column: String,
    /// Offline name.
    pub offline_column: String,
    /// Arrow type served.
    pub served_type: String,
    /// Arrow type offline.
    pub offline_type: String,
    /// Why it is not compared.
    pub reason: String,
}

/// A missing and an extra column whose names differ only by case or separator.
#[derive(Debug, Clone, Serialize)]
pub struct NearName {
    /// The served column (missing offline).
    pub served: String,
    /// The offline column (not served).
    pub offline: String,
    /// `case` or `separator`.
    pub differs_by: String,
}

/// How the columns line up.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SchemaReport {
    /// Features compared (served names).
    pub compared: Vec<String>,
    /// Served columns the offline side lacks.
    pub missing_in_offline: Vec<String>,
    /// Offline columns that were not served.
    pub extra_in_offline: Vec<String>,
    /// Compared columns of different types.
    pub type_differences: Vec<TypeDifference>,
    /// Likely renames: pairs of missing and extra columns with near names.
    pub near_names: Vec<NearName>,
    /// Columns compared under another name offline (`--rename`).
    pub renamed: Vec<Rename>,
    /// The joiner's type variants (`<name>__<DATATYPE>`, written when a feature arrived with
    /// another type than its name holds in the dataset), compared as part of their feature:
    /// `served` is the variant, `offline` the feature's offline column.
    pub merged: Vec<Rename>,
    /// Columns not compared: `--ignore`, or context columns (joiner metadata, hive partitions)
    /// that only one side has.
    pub ignored: Vec<String>,
    /// Columns on both sides whose types cannot be compared, with why (not in `features`).
    pub not_compared: Vec<NotCompared>,
}

/// One bucket of the distribution of numeric differences (microseconds for times).
#[derive(Debug, Clone, Serialize)]
pub struct DiffBucket {
    /// Inclusive lower bound of |served - offline|: 0, a power of ten from 1e-12 to 1e18, or
    /// `f64::MAX` for infinite differences.
    pub lower: f64,
    /// Exclusive upper bound; `null` for infinite differences only.
    pub upper: Option<f64>,
    /// Pairs in the bucket (within tolerance or not).
    pub count: u64,
}

/// A mismatching pair of values.
#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    /// The served value as text (strings quoted, `null` for null).
    pub served: String,
    /// The offline value.
    pub offline: String,
    /// Rows with this pair.
    pub count: u64,
    /// `count / mismatches`.
    pub share: f64,
    /// The pair's normalization class (see [`ClassReport`]).
    pub class: String,
    /// For structs: the fields (dotted paths) in which the two values differ.
    pub fields: Vec<String>,
    /// Up to three keys with this pair.
    pub example_keys: Vec<String>,
}

/// Mismatches in one field of a struct feature.
#[derive(Debug, Clone, Serialize)]
pub struct FieldReport {
    /// The field, a dotted path for nested structs (`address.city`).
    pub field: String,
    /// Mismatching rows whose values differ in this field (a row counts in each field that
    /// differs).
    pub count: u64,
    /// `count / mismatches`.
    pub share: f64,
}

/// Mismatches that one normalization class explains.
#[derive(Debug, Clone, Serialize)]
pub struct ClassReport {
    /// `case`, `whitespace`, `separator`, `locale-truncation`, `number-format`,
    /// `float32-round-trip`, `null-sentinel`, `list-order`, a `+` combination, or `other`.
    pub class: String,
    /// Mismatching rows in this class.
    pub count: u64,
    /// `count / mismatches`.
    pub share: f64,
    /// The feature's mismatch rate if this class's normalizations were applied to both sides
    /// (which also fixes every class made of a subset of them).
    pub mismatch_rate_after: f64,
    /// A sentence saying so.
    pub explanation: String,
}

/// One bin of a distribution.
#[derive(Debug, Clone, Serialize)]
pub struct Bin {
    /// The range or category.
    pub label: String,
    /// Served rows in it.
    pub served: u64,
    /// Offline rows in it.
    pub offline: u64,
    /// This bin's term of the PSI.
    pub psi: f64,
}

/// Distribution distances over every row of each side, keys ignored.
#[derive(Debug, Clone, Serialize)]
pub struct Distribution {
    /// `numeric` (offline quantile bins) or `categorical` (offline values).
    pub kind: String,
    /// Population stability index.
    pub psi: f64,
    /// Jensen-Shannon distance, base 2, in [0, 1].
    pub js: f64,
    /// Kolmogorov-Smirnov statistic at the bin edges (numeric only).
    pub ks: Option<f64>,
    /// Null rows served (the `null` bin).
    pub served_nulls: u64,
    /// Null rows offline (the `null` bin).
    pub offline_nulls: u64,
    /// The bins (categorical: the 50 most populated), then `(not offline)` (categorical, when
    /// served), `NaN` (numeric) and `null` when used: nulls are a bin, in PSI and JS.
    pub bins: Vec<Bin>,
    /// Labels of the bins that contribute most to the PSI, largest first.
    pub top_contributors: Vec<String>,
}

/// What the diff found for one feature.
#[derive(Debug, Clone, Serialize)]
pub struct FeatureReport {
    /// Served column name.
    pub name: String,
    /// Offline column name.
    pub offline_name: String,
    /// Arrow type served.
    pub served_type: String,
    /// Arrow type offline.
    pub offline_type: String,
    /// How values were compared.
    pub compared_as: Domain,
    /// Tolerances and limits applied.
    pub limits: EffectiveLimits,
    /// Rows compared (keys on both sides).
    pub compared: u64,
    /// Equal, within tolerance, or both null.
    pub matches: u64,
    /// Everything else.
    pub mismatches: u64,
    /// `matches / compared` (1 when nothing was compared).
    pub match_rate: f64,
    /// `mismatches / compared`.
    pub mismatch_rate: f64,
    /// Null on both sides (a match).
    pub both_null: u64,
    /// Numbers that differ within tolerance (a match).
    pub within_tolerance: u64,
    /// Null served, present offline (a mismatch).
    pub null_served_only: u64,
    /// Present served, null offline (a mismatch).
    pub null_offline_only: u64,
    /// Null rows / rows of the served side, keys ignored (every served row, compared or not).
    pub served_null_rate: f64,
    /// Null rows / rows of the offline side, keys ignored.
    pub offline_null_rate: f64,
    /// Sizes of numeric differences (non-empty buckets).
    pub difference_histogram: Vec<DiffBucket>,
    /// The most frequent mismatching pairs.
    pub top_pairs: Vec<PairReport>,
    /// False when there were more distinct pairs than kept: counts of `top_pairs` are then
    /// lower bounds (the class counts stay exact).
    pub pairs_complete: bool,
    /// Mismatches by normalization class, largest first.
    pub classes: Vec<ClassReport>,
    /// For structs: mismatches per field that differs, largest first (exact counts).
    pub field_mismatches: Vec<FieldReport>,
    /// Distribution distances, when computed.
    pub distribution: Option<Distribution>,
    /// Why `distribution` is null.
    pub distribution_note: Option<String>,
    /// Metrics of this feature over their limits.
    pub violations: Vec<String>,
}

/// A threshold exceeded.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// `coverage`, `schema` or `feature`.
    pub scope: String,
    /// The feature (scope `feature`) or column (scope `schema`).
    pub subject: Option<String>,
    /// The metric, as named in the thresholds file.
    pub metric: String,
    /// Its value.
    pub value: f64,
    /// The limit.
    pub limit: f64,
}

impl Report {
    /// The verdict: `skew` when any threshold is exceeded.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The report as pretty JSON (schema in docs/DIFF.md).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Applies `thresholds` to the measured values: fills `violations`, each feature's
    /// `violations` and `verdict`.
    pub(crate) fn judge(&mut self) {
        let t = self.thresholds.clone();
        let mut v = Vec::new();
        let mut push =
            |scope: &str, subject: Option<&str>, metric: &str, value: f64, limit: f64| {
                v.push(Violation {
                    scope: scope.into(),
                    subject: subject.map(str::to_owned),
                    metric: metric.into(),
                    value,
                    limit,
                });
            };
        let c = &self.coverage;
        if let Some(l) = t.coverage.max_served_only_rate
            && c.served_only_rate > l
        {
            push(
                "coverage",
                None,
                "max-served-only-rate",
                c.served_only_rate,
                l,
            );
        }
        if let Some(l) = t.coverage.max_offline_only_rate
            && c.offline_only_rate > l
        {
            push(
                "coverage",
                None,
                "max-offline-only-rate",
                c.offline_only_rate,
                l,
            );
        }
        if let Some(l) = t.coverage.max_duplicate_keys {
            for (side, n) in [
                ("served", c.served_duplicate_keys),
                ("offline", c.offline_duplicate_keys),
            ] {
                if n > l {
                    push(
                        "coverage",
                        Some(side),
                        "max-duplicate-keys",
                        n as f64,
                        l as f64,
                    );
                }
            }
        }
        if let Some(l) = t.coverage.max_null_keys {
            for (side, n) in [
                ("served", c.served_null_keys),
                ("offline", c.offline_null_keys),
            ] {
                if n > l {
                    push("coverage", Some(side), "max-null-keys", n as f64, l as f64);
                }
            }
        }
        let s = &self.schema;
        if t.schema.fail_on_missing {
            for m in &s.missing_in_offline {
                push("schema", Some(m), "fail-on-missing", 1.0, 0.0);
            }
        }
        if t.schema.fail_on_extra {
            for e in &s.extra_in_offline {
                push("schema", Some(e), "fail-on-extra", 1.0, 0.0);
            }
        }
        if t.schema.fail_on_type_difference {
            for d in &s.type_differences {
                push(
                    "schema",
                    Some(&d.column),
                    "fail-on-type-difference",
                    1.0,
                    0.0,
                );
            }
        }
        for f in &mut self.features {
            let l = f.limits;
            let mut over = Vec::new();
            if let Some(m) = l.max_mismatch_rate
                && f.mismatch_rate > m
            {
                over.push(("max-mismatch-rate", f.mismatch_rate, m));
            }
            if let Some(d) = &f.distribution {
                for (metric, value, limit) in [
                    ("max-psi", Some(d.psi), l.max_psi),
                    ("max-js", Some(d.js), l.max_js),
                    ("max-ks", d.ks, l.max_ks),
                ] {
                    if let (Some(value), Some(limit)) = (value, limit)
                        && value > limit
                    {
                        over.push((metric, value, limit));
                    }
                }
            }
            f.violations = over.iter().map(|(m, _, _)| (*m).to_owned()).collect();
            if !l.ignore {
                for (metric, value, limit) in over {
                    push("feature", Some(&f.name), metric, value, limit);
                }
            }
        }
        self.verdict = if v.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Skew
        };
        self.violations = v;
    }
}
