//! One feature's report from what the workers counted: rates, the difference histogram, the
//! top pairs, the normalization classes and the distribution distances.

use crate::options::EffectiveLimits;
use crate::report::{
    Bin, ClassReport, DiffBucket, Distribution, FeatureReport, FieldReport, PairReport,
};
use crate::stats::{self, DIFF_BUCKETS, DistSpec, FeatureAcc};
use crate::values::{self, Domain};

/// `offline_nulls`: the offline side's (null rows, rows) of the feature.
pub(crate) fn feature_report(
    f: &crate::plan::Feature,
    acc: FeatureAcc,
    spec: &DistSpec,
    odist: &[u64],
    offline_nulls: (u64, u64),
    limits: EffectiveLimits,
    top: usize,
) -> FeatureReport {
    let mismatches = acc.mismatches();
    let matches = acc.compared - mismatches;
    let rate = |n: u64| {
        if acc.compared == 0 {
            0.0
        } else {
            n as f64 / acc.compared as f64
        }
    };
    let share = |n: u64| {
        if mismatches == 0 {
            0.0
        } else {
            n as f64 / mismatches as f64
        }
    };
    let numeric = matches!(f.domain, Domain::Number | Domain::NumberList);
    let difference_histogram = if numeric {
        (0..DIFF_BUCKETS)
            .filter(|&b| acc.diff_hist[b] > 0)
            .map(|b| DiffBucket {
                lower: stats::diff_bucket_lower(b),
                upper: (b + 1 < DIFF_BUCKETS).then(|| stats::diff_bucket_lower(b + 1)),
                count: acc.diff_hist[b],
            })
            .collect()
    } else {
        Vec::new()
    };
    let top_pairs = acc
        .pairs
        .top(top)
        .into_iter()
        .map(|p| PairReport {
            served: p.served.render(),
            offline: p.offline.render(),
            count: p.count,
            share: share(p.count),
            class: values::class_name(p.class),
            fields: p.fields,
            example_keys: p.examples,
        })
        .collect();
    let mut field_mismatches: Vec<FieldReport> = acc
        .fields
        .iter()
        .map(|(field, &count)| FieldReport {
            field: field.to_string(),
            count,
            share: share(count),
        })
        .collect();
    field_mismatches.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.field.cmp(&b.field)));
    let mut class_list: Vec<(u16, u64)> = acc.classes.iter().map(|(k, v)| (*k, *v)).collect();
    class_list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mismatch_rate = rate(mismatches);
    let classes = class_list
        .iter()
        .map(|&(class, count)| {
            let fixed: u64 = if class == values::OTHER {
                0
            } else {
                class_list
                    .iter()
                    .filter(|(c, _)| *c != values::OTHER && c & !class == 0)
                    .map(|(_, n)| n)
                    .sum()
            };
            let after = rate(mismatches - fixed);
            let name = values::class_name(class);
            let explanation = if class == values::OTHER {
                format!(
                    "{}: {:.2}% of mismatches are not explained by any normalization",
                    f.name,
                    100.0 * share(count)
                )
            } else {
                format!(
                    "{}: {:.2}% mismatch, {:.2}% after {}",
                    f.name,
                    100.0 * mismatch_rate,
                    100.0 * after,
                    values::class_action(class)
                )
            };
            ClassReport {
                class: name,
                count,
                share: share(count),
                mismatch_rate_after: after,
                explanation,
            }
        })
        .collect();
    let (distribution, distribution_note) = match spec {
        DistSpec::None(why) => (None, Some(why.clone())),
        _ => {
            let ordered = matches!(spec, DistSpec::Bins(..));
            let d = stats::distances(&acc.dist, odist, ordered);
            let labels = spec.labels();
            let mut bins: Vec<Bin> = labels
                .into_iter()
                .enumerate()
                .map(|(i, label)| Bin {
                    label,
                    served: acc.dist.get(i).copied().unwrap_or(0),
                    offline: odist.get(i).copied().unwrap_or(0),
                    psi: d.contributions.get(i).copied().unwrap_or(0.0),
                })
                .collect();
            let mut by_psi: Vec<&Bin> = bins.iter().filter(|b| b.psi > 1e-9).collect();
            by_psi.sort_by(|a, b| b.psi.total_cmp(&a.psi));
            let top_contributors = by_psi.iter().take(5).map(|b| b.label.clone()).collect();
            let null = bins.pop();
            let (served_nulls, offline_nulls) =
                null.as_ref().map_or((0, 0), |b| (b.served, b.offline));
            if ordered {
                // The NaN bin only when used.
                if bins.last().is_some_and(|b| b.served == 0 && b.offline == 0) {
                    bins.pop();
                }
            } else {
                let other = bins.pop();
                bins.sort_by_key(|b| std::cmp::Reverse(b.served + b.offline));
                bins.truncate(50);
                if let Some(o) = other.filter(|o| o.served > 0) {
                    bins.push(o);
                }
            }
            // The null bin, last, only when used.
            bins.extend(null.filter(|b| b.served > 0 || b.offline > 0));
            (
                Some(Distribution {
                    kind: if ordered { "numeric" } else { "categorical" }.into(),
                    psi: d.psi,
                    js: d.js,
                    ks: d.ks,
                    served_nulls,
                    offline_nulls,
                    bins,
                    top_contributors,
                }),
                None,
            )
        }
    };
    FeatureReport {
        name: f.name.clone(),
        offline_name: f.offline_name.clone(),
        served_type: f.served_type.clone(),
        offline_type: f.offline_type.clone(),
        compared_as: f.domain,
        limits,
        compared: acc.compared,
        matches,
        mismatches,
        match_rate: if acc.compared == 0 {
            1.0
        } else {
            rate(matches)
        },
        mismatch_rate,
        both_null: acc.both_null,
        within_tolerance: acc.within_tolerance,
        null_served_only: acc.served_null,
        null_offline_only: acc.offline_null,
        served_null_rate: if acc.rows == 0 {
            0.0
        } else {
            acc.nulls as f64 / acc.rows as f64
        },
        offline_null_rate: if offline_nulls.1 == 0 {
            0.0
        } else {
            offline_nulls.0 as f64 / offline_nulls.1 as f64
        },
        difference_histogram,
        top_pairs,
        pairs_complete: !acc.pairs.truncated,
        classes,
        field_mismatches,
        distribution,
        distribution_note,
        violations: Vec::new(),
    }
}
