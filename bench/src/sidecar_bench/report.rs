//! The results of all rounds as tables: medians and ranges per scenario, CPU by thread group,
//! ratios round by round, added latency and bytes per call.

use crate::load::Run;
use crate::{Args, Scenario};

/// Median and range of `values` (NaN when empty).
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    ((v[(n - 1) / 2] + v[n / 2]) / 2.0, v[0], v[n - 1])
}

/// Prints the results of every round of every scenario.
pub(crate) fn report(
    args: &Args,
    results: Vec<(Scenario, Vec<Run>)>,
    published: (f64, f64, f64, f64),
    grpc: bool,
) {
    let range_with = |values: Vec<f64>, digits: usize| {
        let (median, low, high) = spread(&values);
        format!("{median:.digits$} ({low:.digits$}-{high:.digits$})")
    };
    let range = |values: Vec<f64>| range_with(values, 1);
    println!();
    println!(
        "Medians over {} rounds, range in parentheses; CPU per call of the proxy process (nginx: master and workers) and of the model server.",
        args.rounds
    );
    println!();
    println!(
        "| scenario | calls | errors | p50 ms | p99 ms | proxy CPU us/call | model server CPU us/call |"
    );
    println!("| --- | ---: | ---: | --- | --- | --- | --- |");
    for (scenario, runs) in &results {
        let cpu = if *scenario == Scenario::Direct {
            "-".to_string()
        } else {
            range(
                runs.iter()
                    .filter_map(|r| r.proxy_cpu_us_per_call)
                    .collect(),
            )
        };
        println!(
            "| {} | {} | {} | {} | {} | {cpu} | {} |",
            scenario.label(),
            runs.iter().map(|r| r.calls).sum::<u64>(),
            runs.iter().map(|r| r.errors).sum::<u64>(),
            range_with(runs.iter().map(|r| r.p50_ms).collect(), 2),
            range_with(runs.iter().map(|r| r.p99_ms).collect(), 2),
            range(runs.iter().map(|r| r.model_cpu_us_per_call).collect()),
        );
    }
    let sidecars: Vec<_> = results
        .iter()
        .filter(|(s, _)| s.sidecar_mode().is_some())
        .collect();
    if !sidecars.is_empty() {
        println!();
        println!(
            "| sidecar CPU us/call by thread (median) | proxy (tokio) | publisher | librdkafka | other |"
        );
        println!("| --- | --- | --- | --- | --- |");
        for (scenario, runs) in sidecars {
            let g: Vec<String> = (0..4)
                .map(|i| {
                    let (m, _, _) = spread(
                        &runs
                            .iter()
                            .map(|r| r.sidecar_groups_us[i])
                            .collect::<Vec<_>>(),
                    );
                    format!("{m:.1}")
                })
                .collect();
            println!("| {} | {} |", scenario.label(), g.join(" | "));
        }
    }

    // Each ratio is taken round by round (the scenarios of a round run back to back), so its
    // spread says how much of it is the machine's noise rather than the proxies.
    let runs_of = |s: Scenario| results.iter().find(|(r, _)| *r == s).map(|(_, runs)| runs);
    let ratio = |num: Scenario, den: Scenario, target: &str| {
        let (Some(a), Some(b)) = (runs_of(num), runs_of(den)) else {
            return;
        };
        let per_round: Vec<f64> = a
            .iter()
            .zip(b)
            .filter_map(|(x, y)| Some(x.proxy_cpu_us_per_call? / y.proxy_cpu_us_per_call?))
            .collect();
        let (median, low, high) = spread(&per_round);
        println!(
            "{} / {} CPU per call: median {median:.3}x, {low:.3}x to {high:.3}x over {} rounds{target}",
            num.label(),
            den.label(),
            per_round.len()
        );
    };
    println!();
    ratio(Scenario::PassThrough, Scenario::Nginx, " (target <= 1)");
    ratio(Scenario::PassThrough, Scenario::Haproxy, " (target <= 1)");
    ratio(
        Scenario::Logging,
        Scenario::PassThrough,
        " (target <= 1.10x)",
    );
    ratio(Scenario::PassThrough, Scenario::BeforePassThrough, "");
    ratio(Scenario::Logging, Scenario::BeforeLogging, "");
    ratio(Scenario::BeforeLogging, Scenario::BeforePassThrough, "");

    if let Some(direct) = runs_of(Scenario::Direct) {
        let p50 = |runs: &Vec<Run>| spread(&runs.iter().map(|r| r.p50_ms).collect::<Vec<_>>()).0;
        let p99 = |runs: &Vec<Run>| spread(&runs.iter().map(|r| r.p99_ms).collect::<Vec<_>>()).0;
        let added: Vec<String> = results
            .iter()
            .filter(|(s, _)| *s != Scenario::Direct)
            .map(|(s, runs)| {
                format!(
                    "{} p50 {:+.2} ms, p99 {:+.2} ms",
                    s.label(),
                    p50(runs) - p50(direct),
                    p99(runs) - p99(direct)
                )
            })
            .collect();
        println!("added latency vs direct (medians): {}", added.join("; "));
    }
    if runs_of(Scenario::Logging).is_some() {
        let body = if grpc { "gRPC" } else { "HTTP" };
        let records = published.1.max(1.0);
        let per_request = published.3 / records;
        println!(
            "bytes per call: request {per_request:.0} ({body} body); record {:.0} ({:.1}x smaller); on the wire to Kafka (compressed) {:.0} ({:.1}x smaller, target >= 5x)",
            published.0 / records,
            per_request / (published.0 / records),
            published.2 / records,
            per_request / (published.2 / records),
        );
    }
}
