//! The joiner's progress as the demo sees it: the rows committed to the dataset, and the wait
//! for them to reach one per impression.

use std::path::Path;
use std::time::Duration;

use crate::error::{DemoError, io};

/// How long the demo waits for the joiner's next row before it gives up.
pub(crate) const STALL_LIMIT: Duration = Duration::from_secs(60);

/// Polls `poll` (rows written so far, and whether to stop waiting) every second until the rows
/// reach `expected`, it says stop, or the rows have not grown for `stall`: a slow machine or a
/// large run takes as long as it needs, and only a joiner that stopped writing is given up on.
/// The rows last seen.
pub(crate) async fn wait_for_rows(
    expected: u64,
    stall: Duration,
    mut poll: impl FnMut() -> Result<(u64, bool), DemoError>,
) -> Result<u64, DemoError> {
    let (mut rows, mut stop) = poll()?;
    let mut grew = tokio::time::Instant::now();
    while rows < expected && !stop && grew.elapsed() <= stall {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = rows;
        (rows, stop) = poll()?;
        if rows > before {
            grew = tokio::time::Instant::now();
        }
    }
    Ok(rows)
}

/// Rows and files the joiner has committed: visible Parquet files only (not pending ones, not
/// the late area, not the joiner's own state).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counted {
    /// Rows.
    pub rows: u64,
    /// Files.
    pub files: u64,
}

/// Counts the committed rows under `dataset`.
pub fn count_rows(dataset: &Path) -> Result<Counted, DemoError> {
    let mut counted = Counted::default();
    let mut stack = vec![dataset.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.starts_with('_') || name == "late" {
                continue;
            }
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".parquet") {
                let file = std::fs::File::open(&path).map_err(io(&path))?;
                let reader =
                    parquet::file::reader::SerializedFileReader::new(file).map_err(|e| {
                        DemoError::Offline {
                            path: path.clone(),
                            message: e.to_string(),
                        }
                    })?;
                use parquet::file::reader::FileReader as _;
                counted.rows += reader.metadata().file_metadata().num_rows() as u64;
                counted.files += 1;
            }
        }
    }
    Ok(counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `wait_for_rows` over a sequence of counts, one per poll; the rows it returned and the
    /// (paused) time it took.
    async fn wait(counts: &[u64], expected: u64, stop_at: Option<usize>) -> (u64, Duration) {
        let started = tokio::time::Instant::now();
        let mut polls = 0;
        let rows = wait_for_rows(expected, Duration::from_secs(60), || {
            let rows = counts[polls.min(counts.len() - 1)];
            polls += 1;
            Ok((rows, stop_at.is_some_and(|s| polls > s)))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        (rows, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_joiner_is_waited_for_as_long_as_its_rows_grow() {
        // One new row every 50 s: 200 s in all, far past the minute, never a minute without one.
        let counts: Vec<u64> = (0..=200).map(|s| s / 50).collect();
        let (rows, took) = wait(&counts, 4, None).await;
        assert_eq!(rows, 4);
        assert_eq!(took, Duration::from_secs(200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_joiner_that_stops_writing_is_given_up_on_after_a_minute() {
        let counts = [0, 1, 2, 3];
        let (rows, took) = wait(&counts, 10, None).await;
        assert_eq!(rows, 3);
        // The last new row came at 3 s; a minute later (and a poll) it gives up.
        assert_eq!(took, Duration::from_secs(64));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_joiner_or_a_shutdown_ends_the_wait_at_once() {
        let (rows, took) = wait(&[0, 1], 10, Some(1)).await;
        assert_eq!((rows, took), (1, Duration::from_secs(1)));
    }
}
