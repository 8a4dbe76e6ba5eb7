//! Matching the two sides' schemas: which columns are keys, which are compared as features (and
//! in which domain), and the schema section of the report (missing, extra, type differences,
//! names that differ only by case or separator).

use std::collections::BTreeSet;

use arrow_schema::Schema;

use crate::input::Input;
use crate::keys::key_type_ok;
use crate::options::{EffectiveLimits, Thresholds};
use crate::report::{NearName, NotCompared, Rename, SchemaReport, TypeDifference};
use crate::values::{Domain, Tolerance, domain_of, logical_type, not_comparable, tolerance_of};
use crate::{DiffError, DiffOptions};

/// Columns the joiner writes next to the features (docs/JOINER.md): labels and serving
/// metadata that an offline pipeline rarely has. Like hive partition columns they are compared
/// when both sides have them and not reported as missing or extra otherwise.
pub const CONTEXT_COLUMNS: [&str; 9] = [
    "model_name",
    "model_version",
    "served_at",
    "impression_time",
    "impressed",
    "clicks",
    "conversions",
    "labels",
    "parameters",
];

/// One compared feature.
#[derive(Debug, Clone)]
pub(crate) struct Feature {
    pub(crate) name: String,
    pub(crate) offline_name: String,
    pub(crate) served_type: String,
    pub(crate) offline_type: String,
    pub(crate) domain: Domain,
    /// Which tolerances apply, from both types.
    pub(crate) tolerance: Tolerance,
    /// The joiner's type variants of this feature on the served side (`<name>__<DATATYPE>`),
    /// whose values stand in where the feature's own column is null.
    pub(crate) variants: Vec<String>,
}

impl Feature {
    /// The feature's tolerances and limits under `thresholds`.
    pub(crate) fn limits(&self, thresholds: &Thresholds) -> EffectiveLimits {
        thresholds.for_column(&self.name, self.tolerance)
    }
}

#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) served_keys: Vec<String>,
    pub(crate) offline_keys: Vec<String>,
    pub(crate) features: Vec<Feature>,
    pub(crate) schema: SchemaReport,
}

fn names(schema: &Schema) -> String {
    if schema.fields().is_empty() {
        return "none (an empty file?)".into();
    }
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The key columns by their names on each side: (served, offline), renames applied.
pub(crate) fn key_names(opts: &DiffOptions) -> (Vec<String>, Vec<String>) {
    let served: Vec<String> = opts.keys.iter().map(|k| k.trim().to_owned()).collect();
    let offline = served
        .iter()
        .map(|k| opts.renames.get(k).cloned().unwrap_or_else(|| k.clone()))
        .collect();
    (served, offline)
}

/// The feature a joiner type variant belongs to: `price` for `price__FP32`, `emb__FP32x64`,
/// `locale__BYTES_binary` or `price__FP32_2` (docs/JOINER.md, "Column names").
fn variant_of(name: &str) -> Option<&str> {
    const TYPES: [&str; 14] = [
        "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
        "BF16", "FP32", "FP64", "BYTES",
    ];
    let (base, suffix) = name.rsplit_once("__")?;
    let datatype = TYPES
        .iter()
        .filter(|t| suffix.starts_with(*t))
        .max_by_key(|t| t.len())?;
    let mut rest = &suffix[datatype.len()..];
    while let Some(dims) = rest.strip_prefix('x') {
        let digits = dims.len() - dims.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return None;
        }
        rest = &dims[digits..];
    }
    rest = rest.strip_prefix("_binary").unwrap_or(rest);
    if let Some(n) = rest.strip_prefix('_') {
        if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        rest = "";
    }
    (rest.is_empty() && !base.is_empty()).then_some(base)
}

/// Lowercase with `-`, `.` and spaces as `_`: names equal under this differ only by case or
/// separator.
fn loose(name: &str) -> String {
    name.to_lowercase().replace(['-', '.', ' '], "_")
}

/// A name's words, lowercase: split at separators and where camelCase starts a word
/// (`userCountry`, `user_country` and `UserCountry` are `user`, `country`; `HTTPServer` is
/// `http`, `server`).
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in name.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = part.chars().collect();
        let mut word = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1);
            let starts = c.is_uppercase()
                && prev.is_some_and(|p| {
                    p.is_lowercase()
                        || p.is_numeric()
                        || (p.is_uppercase() && next.is_some_and(|n| n.is_lowercase()))
                });
            if starts && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
        }
        if !word.is_empty() {
            out.push(word);
        }
    }
    out
}

/// How a served name and an offline one differ when they name the same thing: `case`
/// (`deviceType`, `devicetype`), `separator` (`user-country`, `user_country`) or
/// `case+separator` (`userCountry`, `user_country`); `None` when they are other names.
fn near_name(a: &str, b: &str) -> Option<&'static str> {
    if a.to_lowercase() == b.to_lowercase() {
        Some("case")
    } else if loose(a) == loose(b) {
        Some("separator")
    } else if words(a) == words(b) && !words(a).is_empty() {
        Some("case+separator")
    } else {
        None
    }
}

/// `--ignore` and the thresholds' `[feature.NAME]` sections must name served columns that are
/// not keys: a typo would otherwise silently compare (or fail on) the column meant.
fn check_names(
    opts: &DiffOptions,
    served: &Schema,
    served_keys: &[String],
) -> Result<(), DiffError> {
    let named = opts
        .ignore
        .iter()
        .map(|c| (format!("--ignore {c}"), c))
        .chain(
            opts.thresholds
                .overrides
                .keys()
                .map(|c| (format!("thresholds [feature.{c}]"), c)),
        );
    for (what, column) in named {
        if served_keys.contains(column) {
            return Err(DiffError::Options(format!(
                "{what}: {column} is a key column, not a feature"
            )));
        }
        if served.index_of(column).is_err() {
            return Err(DiffError::NoSuchColumn {
                what,
                side: "served",
                column: column.clone(),
                available: names(served),
            });
        }
    }
    Ok(())
}

/// A feature's own tolerances must be of its kind: a duration for a time, a number for other
/// numbers, none for text (where they would silently do nothing).
fn check_tolerances(thresholds: &Thresholds, features: &[Feature]) -> Result<(), DiffError> {
    for f in features {
        let Some(l) = thresholds.overrides.get(&f.name) else {
            continue;
        };
        let numeric = l.abs_tolerance.is_some() || l.rel_tolerance.is_some();
        let message = match f.tolerance {
            Tolerance::Time if numeric => format!(
                "{} is a time ({}): its tolerance is a duration, e.g. time-tolerance = \"1s\", not abs-tolerance or rel-tolerance",
                f.name, f.served_type
            ),
            Tolerance::Float | Tolerance::Exact if l.time_tolerance.is_some() => format!(
                "{} is {} served and {} offline, not a time: time-tolerance applies to timestamps, dates, times of day and durations; use abs-tolerance or rel-tolerance",
                f.name, f.served_type, f.offline_type
            ),
            Tolerance::None if numeric || l.time_tolerance.is_some() => format!(
                "{} is compared as {}: no tolerance applies to it",
                f.name,
                f.domain.name()
            ),
            _ => continue,
        };
        return Err(DiffError::Threshold {
            feature: f.name.clone(),
            message,
        });
    }
    Ok(())
}

pub(crate) fn plan(served: &Input, offline: &Input, opts: &DiffOptions) -> Result<Plan, DiffError> {
    if opts.keys.is_empty() || opts.keys.iter().any(|k| k.trim().is_empty()) {
        return Err(DiffError::Options(
            "--key needs at least one column name (e.g. --key request_id,item_id)".into(),
        ));
    }
    let (ss, os) = (&served.schema, &offline.schema);
    for (s, o) in &opts.renames {
        for (side, schema, column) in [("served", ss, s), ("offline", os, o)] {
            if schema.index_of(column).is_err() {
                return Err(DiffError::NoSuchColumn {
                    what: format!("rename {s}={o}"),
                    side,
                    column: column.clone(),
                    available: names(schema),
                });
            }
        }
    }
    let offline_name = |s: &str| opts.renames.get(s).cloned().unwrap_or_else(|| s.to_owned());
    let (served_keys, offline_keys) = key_names(opts);
    check_names(opts, ss, &served_keys)?;
    for (side, input, keys) in [
        ("served", served, &served_keys),
        ("offline", offline, &offline_keys),
    ] {
        for k in keys {
            let field = input
                .schema
                .field_with_name(k)
                .map_err(|_| DiffError::MissingKey {
                    side,
                    path: input.root.clone(),
                    column: k.clone(),
                    available: names(&input.schema),
                })?;
            if !key_type_ok(field.data_type()) {
                return Err(DiffError::BadKeyType {
                    side,
                    column: k.clone(),
                    data_type: field.data_type().to_string(),
                });
            }
        }
    }

    let context = |name: &str, input: &Input| {
        CONTEXT_COLUMNS.contains(&name) || input.partition_columns.iter().any(|p| p == name)
    };
    let mut schema = SchemaReport::default();
    let mut features = Vec::new();
    let mut used_offline: BTreeSet<String> = offline_keys.iter().cloned().collect();
    for field in ss.fields() {
        let name = field.name();
        if served_keys.contains(name) {
            continue;
        }
        let oname = offline_name(name);
        if opts.ignore.contains(name) {
            schema.ignored.push(name.clone());
            used_offline.insert(oname);
            continue;
        }
        match os.field_with_name(&oname) {
            Ok(ofield) => {
                used_offline.insert(oname.clone());
                if &oname != name {
                    schema.renamed.push(Rename {
                        served: name.clone(),
                        offline: oname.clone(),
                    });
                }
                let domain = domain_of(field.data_type(), ofield.data_type());
                let (st, ot) = (
                    field.data_type().to_string(),
                    ofield.data_type().to_string(),
                );
                // A type the diff cannot compare is one feature left out with a note, not a
                // diff of every other feature lost.
                if let Some(reason) = not_comparable(field.data_type(), ofield.data_type(), domain)
                {
                    schema.not_compared.push(NotCompared {
                        column: name.clone(),
                        offline_column: oname,
                        served_type: st,
                        offline_type: ot,
                        reason,
                    });
                    continue;
                }
                if logical_type(field.data_type()) != logical_type(ofield.data_type()) {
                    schema.type_differences.push(TypeDifference {
                        column: name.clone(),
                        served_type: st.clone(),
                        offline_type: ot.clone(),
                        compared_as: domain,
                    });
                }
                schema.compared.push(name.clone());
                features.push(Feature {
                    name: name.clone(),
                    offline_name: oname,
                    served_type: st,
                    offline_type: ot,
                    domain,
                    tolerance: tolerance_of(field.data_type(), ofield.data_type(), domain),
                    variants: Vec::new(),
                });
            }
            Err(_) if context(name, served) => schema.ignored.push(name.clone()),
            Err(_) => schema.missing_in_offline.push(name.clone()),
        }
    }
    // The joiner's type variants of compared features are part of them, not columns the
    // offline side lacks.
    schema.missing_in_offline.retain(|m| {
        let Some(base) = variant_of(m) else {
            return true;
        };
        let Some(feature) = features.iter_mut().find(|f| f.name == base) else {
            return true;
        };
        let (Ok(variant), Ok(offline)) = (
            ss.field_with_name(m),
            os.field_with_name(&feature.offline_name),
        ) else {
            return true;
        };
        // Merged values are scalars: a list variant stays a column of its own.
        if !matches!(feature.domain, Domain::Number | Domain::Text)
            || domain_of(variant.data_type(), offline.data_type()) != feature.domain
            || not_comparable(variant.data_type(), offline.data_type(), feature.domain).is_some()
        {
            return true;
        }
        feature.variants.push(m.clone());
        schema.merged.push(Rename {
            served: m.clone(),
            offline: feature.offline_name.clone(),
        });
        false
    });
    for field in os.fields() {
        let name = field.name();
        if used_offline.contains(name) {
            continue;
        }
        if context(name, offline) {
            schema.ignored.push(name.clone());
        } else {
            schema.extra_in_offline.push(name.clone());
        }
    }
    check_tolerances(&opts.thresholds, &features)?;
    for m in &schema.missing_in_offline {
        for e in &schema.extra_in_offline {
            let Some(differs_by) = near_name(m, e) else {
                continue;
            };
            schema.near_names.push(NearName {
                served: m.clone(),
                offline: e.clone(),
                differs_by: differs_by.into(),
            });
        }
    }
    schema.ignored.sort();
    schema.ignored.dedup();
    Ok(Plan {
        served_keys,
        offline_keys,
        features,
        schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joiner_type_variants_are_recognised_and_other_names_are_not() {
        for (name, base) in [
            ("price__FP32", Some("price")),
            ("emb__FP32x64", Some("emb")),
            ("grid__INT8x8x8", Some("grid")),
            ("locale__BYTES_binary", Some("locale")),
            ("price__FP64_2", Some("price")),
            ("a__b__UINT16", Some("a__b")),
            ("price__FP32x", None),
            ("price__FLOAT", None),
            ("price__FP32_", None),
            ("__FP32", None),
            ("price", None),
        ] {
            assert_eq!(variant_of(name), base, "{name}");
        }
    }

    #[test]
    fn loose_names() {
        assert_eq!(loose("User-Locale"), loose("user_locale"));
        assert_ne!(loose("locale"), loose("locales"));
    }

    /// camelCase against snake_case is a near name, as a case or separator difference is.
    #[test]
    fn near_names_across_naming_styles() {
        for (a, b, by) in [
            ("deviceType", "devicetype", Some("case")),
            ("user-country", "user_country", Some("separator")),
            ("userCountry", "user_country", Some("case+separator")),
            ("UserCountry", "user.country", Some("case+separator")),
            ("HTTPServerURL", "http_server_url", Some("case+separator")),
            ("item2Vec", "item2_vec", Some("case+separator")),
            ("userCountry", "user_county", None),
            ("ab_c", "a_bc", None),
            ("", "_", None),
        ] {
            assert_eq!(near_name(a, b), by, "{a} {b}");
        }
        assert_eq!(words("HTTPServer"), ["http", "server"]);
    }
}
