//! Signal handling shared by the long-running subcommands: the first SIGINT or SIGTERM cancels
//! the token (stop accepting, drain, flush, exit); a second one exits at once with code 130.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Spawns the watcher; returns the token it cancels.
pub fn shutdown_on_signals() -> anyhow::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutting down (a second signal exits at once)");
        cancel.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        eprintln!("second signal: exiting without draining");
        std::process::exit(130);
    });
    Ok(token)
}
