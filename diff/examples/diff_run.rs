//! bench/diff.sh's runner: `featurelog diff --format json` in a binary that builds with this
//! crate alone (the `featurelog` binary links the whole workspace, librdkafka included, which
//! takes a 2-core machine many minutes in release). Same library call, same allocator
//! (mimalloc) as `featurelog`; flags: --served, --offline, --key, [--threads].

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut opts = featurelog_diff::DiffOptions::new("", "", Vec::new());
    let mut it = std::env::args().skip(1);
    while let (Some(flag), Some(value)) = (it.next(), it.next()) {
        match flag.as_str() {
            "--served" => opts.served = value.into(),
            "--offline" => opts.offline = value.into(),
            "--key" => opts.keys = value.split(',').map(str::to_owned).collect(),
            "--threads" => opts.threads = value.parse().ok(),
            _ => {
                eprintln!("unknown flag {flag}");
                return ExitCode::from(2);
            }
        }
    }
    match featurelog_diff::run(&opts) {
        Ok(report) => {
            println!("{}", report.to_json());
            ExitCode::from(report.verdict().exit_code())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
