//! `featurelog dev-broker`: keeps an embedded broker up until SIGINT or SIGTERM.

use std::io::Write;

use anyhow::Context;
use featurelog_kafka::DevBroker;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Number of brokers in the embedded cluster.
    #[arg(long, default_value_t = 1)]
    brokers: i32,
    /// Topics to create up front, as NAME or NAME:PARTITIONS (repeatable). Others are created
    /// on first use.
    #[arg(long = "topic", value_name = "NAME[:PARTITIONS]")]
    topics: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let broker = DevBroker::start(args.brokers)?;
    for spec in &args.topics {
        let (name, partitions) = match spec.split_once(':') {
            Some((name, n)) => (
                name,
                n.parse()
                    .with_context(|| format!("--topic {spec}: PARTITIONS must be a number"))?,
            ),
            None => (spec.as_str(), 1),
        };
        broker.create_topic(name, partitions)?;
    }
    eprintln!(
        "featurelog dev-broker: an in-memory Kafka-protocol broker for trying featurelog, not for \
         production (no durability; everything is lost on exit). Stop it with Ctrl-C."
    );
    // One line on stdout, flushed at once, so scripts and tests can read the address.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "bootstrap.servers={}", broker.bootstrap_servers())?;
    stdout.flush()?;
    drop(stdout);

    runtime.block_on(shutdown_signal())?;
    eprintln!("featurelog dev-broker: stopping");
    drop(broker);
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
