//! `featurelog demo`: runs featurelog-demo and prints its progress and figures.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use featurelog_demo::{DemoOptions, Progress, Stage};

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Folder for the configs, the Parquet dataset, the offline table and the reports.
    #[arg(long, value_name = "DIR", default_value = "featurelog-demo")]
    out: PathBuf,
    /// A real Kafka broker's bootstrap servers; default: the embedded broker.
    #[arg(long, value_name = "BOOTSTRAP")]
    kafka: Option<String>,
    /// Inference requests to send through the sidecar.
    #[arg(long, default_value_t = 2_000)]
    requests: u64,
    /// Candidates the model scores per request.
    #[arg(long, default_value_t = 100)]
    candidates: usize,
    /// Requests per second.
    #[arg(long, default_value_t = 250)]
    rate: u32,
    /// Fraction of scored candidates the app shows (impressions).
    #[arg(long, default_value_t = 0.03)]
    impression_rate: f64,
    /// Fraction of shown candidates the user clicks.
    #[arg(long, default_value_t = 0.2)]
    click_rate: f64,
    /// Seed of the synthetic users and items.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

pub fn run(args: DemoArgs) -> Result<(), crate::Failure> {
    if !(0.0..=1.0).contains(&args.impression_rate) || !(0.0..=1.0).contains(&args.click_rate) {
        return Err(crate::Failure::Config(anyhow::anyhow!(
            "--impression-rate and --click-rate are fractions between 0 and 1"
        )));
    }
    if args.requests == 0 || args.candidates == 0 || args.rate == 0 {
        return Err(crate::Failure::Config(anyhow::anyhow!(
            "--requests, --candidates and --rate must be at least 1"
        )));
    }
    let options = DemoOptions {
        out_dir: args.out,
        kafka: args.kafka,
        requests: args.requests,
        candidates: args.candidates,
        rate: args.rate,
        impression_rate: args.impression_rate,
        click_rate: args.click_rate,
        seed: args.seed,
    };
    let broker = options
        .kafka
        .clone()
        .unwrap_or_else(|| "the embedded broker".into());
    println!(
        "featurelog demo: {} requests x {} candidates at {}/s through the sidecar, on {broker}",
        options.requests, options.candidates, options.rate
    );
    let summary = crate::runtime()?.block_on(async move {
        let shutdown = crate::signals::shutdown_on_signals()?;
        let summary = featurelog_demo::run(options, shutdown, |p: Progress| {
            let stage = match p.stage {
                Stage::Traffic => "traffic",
                Stage::Joining => "joining",
            };
            println!(
                "  [{stage}] requests {:>6}  records logged {:>6}  rows joined {:>6} / {}",
                p.requests, p.records, p.rows, p.expected_rows
            );
            let _ = std::io::stdout().flush();
        })
        .await
        .context("the demo failed")?;
        Ok::<_, anyhow::Error>(summary)
    })?;

    println!();
    println!("{}", summary.report.render_terminal());
    println!("Figures");
    println!(
        "  requests            {} ({} candidates scored)",
        summary.requests, summary.candidates
    );
    println!(
        "  app events          {} impressions, {} clicks",
        summary.impressions, summary.clicks
    );
    let ratio = if summary.record_bytes > 0 {
        summary.request_bytes as f64 / summary.record_bytes as f64
    } else {
        0.0
    };
    println!(
        "  bytes               {} of requests -> {} of records after the allow list ({ratio:.1}x smaller), {} records",
        mib(summary.request_bytes),
        mib(summary.record_bytes),
        summary.records
    );
    println!(
        "  dataset             {} rows in {} Parquet files: {}",
        summary.rows,
        summary.files,
        summary.dataset.display()
    );
    println!("  offline table       {}", summary.offline.display());
    println!("  HTML report         {}", summary.html.display());
    println!(
        "  configs             {} (sidecar.toml, allow-list.toml, join.toml)",
        summary.out_dir.display()
    );
    println!(
        "  took                {:.1} s",
        summary.elapsed.as_secs_f64()
    );
    Ok(())
}
