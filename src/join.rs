//! `featurelog join`.

use std::path::PathBuf;

use anyhow::Context;
use featurelog_joiner::config::JoinerConfig;
use featurelog_joiner::sink::paths::DatasetPaths;

#[derive(Debug, clap::Args)]
pub struct JoinArgs {
    /// The joiner's config file (TOML); see joiner/join.example.toml.
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    config: Option<PathBuf>,
    /// Validate this config file, print the result and exit (0 valid, 2 not).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
}

pub fn run(args: JoinArgs) -> Result<(), crate::Failure> {
    if let Some(path) = args.check_config {
        let config = JoinerConfig::load(&path).map_err(|e| crate::Failure::Config(e.into()))?;
        // Resolved as the run resolves them (the same function), so that the paths printed
        // are the ones the run writes to; a path under a regular file is refused here too.
        let paths =
            DatasetPaths::resolve(&config.output).map_err(|e| crate::Failure::Config(e.into()))?;
        if let Some(err) = paths.file_in_the_way() {
            return Err(crate::Failure::Config(err.into()));
        }
        println!(
            "{}: valid; joins {} with {} into {}",
            path.display(),
            config.input.features_topic,
            config.input.events_topic,
            paths.root()
        );
        for (what, place) in paths.listing(&config.output, &config.input.features_topic) {
            println!("  {what:<12} {place}");
        }
        return Ok(());
    }
    let path = args
        .config
        .context("--config is required")
        .map_err(crate::Failure::Config)?;
    let config = JoinerConfig::load(&path).map_err(|e| crate::Failure::Config(e.into()))?;
    let runtime = crate::runtime()?;
    let result = runtime.block_on(async move {
        let shutdown = crate::signals::shutdown_on_signals()?;
        featurelog_joiner::run::run(config, shutdown).await?;
        Ok::<_, anyhow::Error>(())
    });
    // Everything that matters finished inside `block_on`; what may be left on the blocking
    // pool is a metadata request to a broker that does not answer, which must not hold the
    // exit for its whole timeout.
    runtime.shutdown_background();
    result?;
    Ok(())
}
