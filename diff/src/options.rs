//! What a diff is asked to do: the two inputs, the key, column renames and the thresholds that
//! decide the verdict (loaded from a TOML file with per-feature overrides).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::DiffError;
use crate::values::Tolerance;

/// Everything [`crate::run`] needs. Build it with [`DiffOptions::new`] and adjust the public
/// fields; the CLI (`featurelog diff`) and `featurelog demo` both go through this.
#[derive(Debug, Clone)]
pub struct DiffOptions {
    /// The served side: a Parquet, CSV or TSV file (text gzipped or not), or a directory
    /// searched recursively (hive partitions `name=value/` become string columns; names
    /// starting with `.` or `_` are skipped, as Spark and pyarrow do; Hive's extensionless
    /// Parquet files are read when nothing else is there). A directory holding `_delta_log/`
    /// is a Delta table, read through its log: the files it holds at `served_version`.
    pub served: PathBuf,
    /// The offline side, same forms. It is the side held in memory (columnar) and indexed.
    pub offline: PathBuf,
    /// Key columns, by their served-side names; a composite key when more than one.
    pub keys: Vec<String>,
    /// Served column name -> offline column name, for columns renamed by one pipeline.
    pub renames: BTreeMap<String, String>,
    /// Served-side column names to leave out of the comparison (each must exist).
    pub ignore: Vec<String>,
    /// Thresholds and tolerances.
    pub thresholds: Thresholds,
    /// Worker threads for reading and comparing; `None`: the machine's available parallelism.
    pub threads: Option<usize>,
    /// How many mismatching value pairs to report per feature.
    pub top_pairs: usize,
    /// Read only files in directories marked complete: a directory holding `_SUCCESS`, or one
    /// below such a directory (the joiner marks each complete hour; Spark marks its output's
    /// root). Files elsewhere (an hour still growing, the joiner's `late/`) are skipped and
    /// counted. A side given as one file is read as it is.
    pub complete_only: bool,
    /// The version of the served side to read when it is a Delta table (a directory or prefix
    /// holding `_delta_log/`, read through its log); `None`: the newest. Set for a side that is
    /// not a table, it is an error.
    pub served_version: Option<u64>,
    /// The same for the offline side.
    pub offline_version: Option<u64>,
}

impl DiffOptions {
    /// Options with default thresholds, no renames, 10 top pairs.
    pub fn new(served: impl Into<PathBuf>, offline: impl Into<PathBuf>, keys: Vec<String>) -> Self {
        DiffOptions {
            served: served.into(),
            offline: offline.into(),
            keys,
            renames: BTreeMap::new(),
            ignore: Vec::new(),
            thresholds: Thresholds::default(),
            threads: None,
            top_pairs: 10,
            complete_only: false,
            served_version: None,
            offline_version: None,
        }
    }
}

/// The thresholds file (`diff/thresholds.example.toml`, docs/DIFF.md). A metric over its limit
/// makes the verdict `skew` (exit 1). Unset limits are not checked.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Thresholds {
    /// Limits on key coverage.
    pub coverage: CoverageLimits,
    /// What schema differences fail the diff.
    pub schema: SchemaLimits,
    /// Limits and tolerances of every feature without an override.
    pub features: FeatureLimits,
    /// Per-feature overrides (by served name); unset fields fall back to `features`.
    #[serde(rename = "feature")]
    pub overrides: BTreeMap<String, FeatureLimits>,
}

/// Coverage limits, as fractions (0.01 = 1%) of the served rows (served-only) or the offline
/// rows (offline-only), and counts for keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct CoverageLimits {
    /// Served rows whose key is not offline, as a fraction of served rows.
    pub max_served_only_rate: Option<f64>,
    /// Offline rows whose key was not served, as a fraction of offline rows.
    pub max_offline_only_rate: Option<f64>,
    /// Extra rows with an already-seen key, per side.
    pub max_duplicate_keys: Option<u64>,
    /// Rows with a null key part, per side.
    pub max_null_keys: Option<u64>,
}

impl Default for CoverageLimits {
    fn default() -> Self {
        CoverageLimits {
            max_served_only_rate: Some(0.01),
            max_offline_only_rate: Some(0.01),
            max_duplicate_keys: Some(0),
            max_null_keys: Some(0),
        }
    }
}

/// Which schema differences count as skew.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SchemaLimits {
    /// A served column with no offline counterpart fails the diff.
    pub fail_on_missing: bool,
    /// An offline column that was not served fails the diff.
    pub fail_on_extra: bool,
    /// Columns of different types fail the diff (their values are still compared).
    pub fail_on_type_difference: bool,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        SchemaLimits {
            fail_on_missing: true,
            fail_on_extra: false,
            fail_on_type_difference: false,
        }
    }
}

/// Per-feature tolerances and limits. Every field is optional so that an override can set one
/// and inherit the rest.
///
/// Tolerances: `abs-tolerance` and `rel-tolerance` in `[features]` apply to floating-point
/// features only; integers, booleans and decimals compare exactly unless their own
/// `[feature.NAME]` sets one. Times (timestamps, dates, times of day, durations) compare
/// exactly unless a `time-tolerance`, a duration, says otherwise (in `[features]` for every
/// time feature, or in their own section).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct FeatureLimits {
    /// Numbers within this absolute difference match (default 0).
    pub abs_tolerance: Option<f64>,
    /// Numbers within this difference relative to the larger magnitude match (default 1e-6
    /// for floats, 0 for exact numbers).
    pub rel_tolerance: Option<f64>,
    /// Times within this duration of each other match (`"500ms"`, `"15m"`; default 0).
    #[serde(with = "humantime_serde")]
    pub time_tolerance: Option<Duration>,
    /// Largest allowed mismatch rate over keys on both sides (default 0.001).
    pub max_mismatch_rate: Option<f64>,
    /// Largest allowed population stability index (default 0.25).
    pub max_psi: Option<f64>,
    /// Largest allowed Jensen-Shannon distance, base 2 (default: unchecked).
    pub max_js: Option<f64>,
    /// Largest allowed Kolmogorov-Smirnov statistic, numbers only (default: unchecked).
    pub max_ks: Option<f64>,
    /// Leave this feature out of the verdict (it is still reported).
    pub ignore: Option<bool>,
}

/// The limits of one feature after its override is applied.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EffectiveLimits {
    /// Absolute tolerance, in the values' units (microseconds for times).
    pub abs_tolerance: f64,
    /// Relative tolerance.
    pub rel_tolerance: f64,
    /// For a time feature, its tolerance as a duration (`abs_tolerance` in microseconds);
    /// `None` for other features.
    #[serde(with = "humantime_serde")]
    pub time_tolerance: Option<Duration>,
    /// Mismatch rate limit.
    pub max_mismatch_rate: Option<f64>,
    /// PSI limit.
    pub max_psi: Option<f64>,
    /// Jensen-Shannon limit.
    pub max_js: Option<f64>,
    /// KS limit.
    pub max_ks: Option<f64>,
    /// Excluded from the verdict.
    pub ignore: bool,
}

impl Thresholds {
    /// Reads a thresholds file (TOML).
    pub fn load(path: &Path) -> Result<Self, DiffError> {
        let text = std::fs::read_to_string(path).map_err(|source| DiffError::Io {
            path: path.to_owned(),
            source,
        })?;
        let thresholds: Self = toml::from_str(&text).map_err(|e| DiffError::Config {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        thresholds.validate().map_err(|message| DiffError::Config {
            path: path.to_owned(),
            message,
        })?;
        Ok(thresholds)
    }

    /// Every limit and tolerance is a finite number >= 0: a NaN limit would never be exceeded
    /// (every comparison with it is false), so a typo would silently turn a check off.
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.coverage;
        let mut checks: Vec<(String, Option<f64>)> = vec![
            (
                "coverage.max-served-only-rate".into(),
                c.max_served_only_rate,
            ),
            (
                "coverage.max-offline-only-rate".into(),
                c.max_offline_only_rate,
            ),
        ];
        let sections = std::iter::once(("features".to_owned(), &self.features)).chain(
            self.overrides
                .iter()
                .map(|(name, l)| (format!("feature.{name}"), l)),
        );
        for (section, l) in sections {
            for (field, value) in [
                ("abs-tolerance", l.abs_tolerance),
                ("rel-tolerance", l.rel_tolerance),
                ("max-mismatch-rate", l.max_mismatch_rate),
                ("max-psi", l.max_psi),
                ("max-js", l.max_js),
                ("max-ks", l.max_ks),
            ] {
                checks.push((format!("{section}.{field}"), value));
            }
        }
        for (name, value) in checks {
            if let Some(v) = value
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!(
                    "{name} = {v}: limits and tolerances must be finite numbers >= 0"
                ));
            }
        }
        Ok(())
    }

    /// The limits of floating-point feature `name` (served name): its override over the
    /// defaults.
    pub fn for_feature(&self, name: &str) -> EffectiveLimits {
        self.for_column(name, Tolerance::Float)
    }

    /// The limits of feature `name` (served name) whose values take the tolerances of `kind`:
    /// the defaults' tolerances apply to floats (and times, for `time-tolerance`), a
    /// feature's own to any number.
    pub(crate) fn for_column(&self, name: &str, kind: Tolerance) -> EffectiveLimits {
        let d = &self.features;
        let o = self.overrides.get(name);
        let pick = |f: fn(&FeatureLimits) -> Option<f64>| o.and_then(f).or_else(|| f(d));
        let own = |f: fn(&FeatureLimits) -> Option<f64>| o.and_then(f);
        let (abs_tolerance, rel_tolerance, time_tolerance) = match kind {
            Tolerance::Float => (
                pick(|l| l.abs_tolerance).unwrap_or(0.0),
                pick(|l| l.rel_tolerance).unwrap_or(1e-6),
                None,
            ),
            Tolerance::Exact => (
                own(|l| l.abs_tolerance).unwrap_or(0.0),
                own(|l| l.rel_tolerance).unwrap_or(0.0),
                None,
            ),
            Tolerance::Time => {
                let t = o
                    .and_then(|l| l.time_tolerance)
                    .or(d.time_tolerance)
                    .unwrap_or_default();
                (t.as_nanos() as f64 / 1000.0, 0.0, Some(t))
            }
            Tolerance::None => (0.0, 0.0, None),
        };
        EffectiveLimits {
            abs_tolerance,
            rel_tolerance,
            time_tolerance,
            max_mismatch_rate: pick(|l| l.max_mismatch_rate).or(Some(0.001)),
            max_psi: pick(|l| l.max_psi).or(Some(0.25)),
            max_js: pick(|l| l.max_js),
            max_ks: pick(|l| l.max_ks),
            ignore: o.and_then(|l| l.ignore).or(d.ignore).unwrap_or(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_inherit_the_defaults() {
        let t: Thresholds = toml::from_str(
            r#"
            [features]
            rel-tolerance = 1e-4
            max-mismatch-rate = 0.01
            [feature.price]
            abs-tolerance = 0.5
            "#,
        )
        .unwrap();
        let p = t.for_feature("price");
        assert_eq!(p.abs_tolerance, 0.5);
        assert_eq!(p.rel_tolerance, 1e-4);
        assert_eq!(p.max_mismatch_rate, Some(0.01));
        assert_eq!(t.for_feature("other").abs_tolerance, 0.0);
        assert_eq!(t.coverage.max_duplicate_keys, Some(0));
    }

    /// The defaults' tolerances apply to floats only: an integer or a time compares exactly
    /// unless its own section says otherwise, a time's tolerance being a duration.
    #[test]
    fn default_tolerances_apply_to_floats_only() {
        let t: Thresholds = toml::from_str(
            r#"
            [features]
            abs-tolerance = 0.5
            rel-tolerance = 1e-3
            [feature.count]
            abs-tolerance = 1
            [feature.seen_at]
            time-tolerance = "15m"
            "#,
        )
        .unwrap();
        let l = t.for_column("price", Tolerance::Float);
        assert_eq!((l.abs_tolerance, l.rel_tolerance), (0.5, 1e-3));
        let l = t.for_column("item", Tolerance::Exact);
        assert_eq!((l.abs_tolerance, l.rel_tolerance), (0.0, 0.0));
        let l = t.for_column("count", Tolerance::Exact);
        assert_eq!((l.abs_tolerance, l.rel_tolerance), (1.0, 0.0));
        let l = t.for_column("seen_at", Tolerance::Time);
        assert_eq!(l.abs_tolerance, 900e6);
        assert_eq!(l.time_tolerance, Some(Duration::from_secs(900)));
        let l = t.for_column("born_at", Tolerance::Time);
        assert_eq!((l.abs_tolerance, l.rel_tolerance), (0.0, 0.0));
        assert_eq!(l.time_tolerance, Some(Duration::ZERO));
        let l = t.for_column("name", Tolerance::None);
        assert_eq!(
            (l.abs_tolerance, l.rel_tolerance, l.time_tolerance),
            (0.0, 0.0, None)
        );
        assert!(toml::from_str::<Thresholds>("[features]\ntime-tolerance = 5").is_err());
        assert!(
            toml::from_str::<Thresholds>("[features]\ntime-tolerance = \"5 parsecs\"").is_err()
        );
    }

    #[test]
    fn nan_or_negative_limits_are_refused() {
        for text in [
            "[features]\nmax-psi = nan",
            "[coverage]\nmax-served-only-rate = -0.1",
            "[feature.price]\nabs-tolerance = inf",
        ] {
            let t: Thresholds = toml::from_str(text).unwrap();
            assert!(t.validate().is_err(), "{text}");
        }
        assert!(Thresholds::default().validate().is_ok());
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(toml::from_str::<Thresholds>("[features]\nmax-mismatch = 1").is_err());
        assert!(toml::from_str::<Thresholds>("typo = 1").is_err());
    }

    #[test]
    fn the_example_file_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("thresholds.example.toml");
        let t = Thresholds::load(&path).unwrap();
        assert!(!t.overrides.is_empty());
    }
}
