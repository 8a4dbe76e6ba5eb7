//! `featurelog diff`: command-line flags for the skew audit in `featurelog-diff`. Exit codes:
//! 0 every metric within its threshold, 1 skew over a threshold, 2 error (unreadable input,
//! bad key, bad thresholds file). It returns its own exit code because "skew" is neither
//! success nor a failure to run.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use featurelog_diff::{DiffOptions, Thresholds, Verdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// Tables for a terminal.
    Terminal,
    /// The report as JSON (schema in docs/DIFF.md).
    Json,
    /// Markdown, e.g. for a CI comment.
    Markdown,
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Served features: a Parquet, CSV or TSV file (`.csv.gz` and `.tsv.gz` too), or a
    /// directory of them (hive partitions included), usually the joiner's output; or `s3://bucket/prefix` (S3 settings and
    /// credentials from the environment, as the AWS tools read them). A directory or prefix
    /// holding `_delta_log/` is read as a Delta table, through its log.
    #[arg(long, value_name = "PATH")]
    served: PathBuf,
    /// The offline pipeline's features, same forms; this side is held in memory (columnar).
    #[arg(long, value_name = "PATH")]
    offline: PathBuf,
    /// Key columns by served name, comma-separated (a composite key when several).
    #[arg(long, value_name = "COLS", value_delimiter = ',', required = true)]
    key: Vec<String>,
    /// A column named differently offline: SERVED=OFFLINE (repeatable or comma-separated).
    #[arg(long, value_name = "SERVED=OFFLINE", value_delimiter = ',')]
    rename: Vec<String>,
    /// Served columns to leave out of the comparison (repeatable or comma-separated).
    #[arg(long, value_name = "COLS", value_delimiter = ',')]
    ignore: Vec<String>,
    /// Thresholds and tolerances (TOML; see diff/thresholds.example.toml).
    #[arg(long, value_name = "FILE")]
    thresholds: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value = "terminal")]
    format: Format,
    /// Also write a self-contained HTML report to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Mismatching value pairs to report per feature.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top_pairs: usize,
    /// Worker threads (default: the available cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Read only files in directories marked complete (`_SUCCESS` in them or above them: the
    /// joiner's complete hours, a Spark output's root); others are skipped and counted.
    #[arg(long)]
    complete_only: bool,
    /// Read this version of the served Delta table (default: its newest).
    #[arg(long, value_name = "N")]
    version: Option<u64>,
    /// Read this version of the offline Delta table (default: its newest).
    #[arg(long, value_name = "N")]
    offline_version: Option<u64>,
}

pub fn run(args: DiffArgs) -> ExitCode {
    match execute(args) {
        Ok(Verdict::Pass) => ExitCode::SUCCESS,
        Ok(verdict) => ExitCode::from(verdict.exit_code()),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn execute(args: DiffArgs) -> anyhow::Result<Verdict> {
    let mut opts = DiffOptions::new(args.served, args.offline, args.key);
    for r in &args.rename {
        let (s, o) = r
            .split_once('=')
            .filter(|(s, o)| !s.is_empty() && !o.is_empty())
            .with_context(|| format!("--rename {r}: expected SERVED=OFFLINE"))?;
        opts.renames.insert(s.to_owned(), o.to_owned());
    }
    opts.ignore = args.ignore;
    if let Some(path) = &args.thresholds {
        opts.thresholds = Thresholds::load(path)?;
    }
    opts.threads = args.threads;
    opts.top_pairs = args.top_pairs;
    opts.complete_only = args.complete_only;
    opts.served_version = args.version;
    opts.offline_version = args.offline_version;
    let report = featurelog_diff::run(&opts)?;
    if let Some(path) = &args.html {
        std::fs::write(path, report.render_html())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let out = match args.format {
        Format::Terminal => report.render_terminal(),
        Format::Json => report.to_json() + "\n",
        Format::Markdown => report.render_markdown(),
    };
    // Not print!: it panics when stdout fails (a full disk, a closed pipe); that is an error
    // like any other, exit code 2.
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing the report to stdout")?;
    Ok(report.verdict())
}
