//! The joiner process's course while it runs: samples of its CPU, memory and state, the
//! dataset's hours, and its metrics.

/// One sample of the joiner's course (see `print_course`).
pub(crate) struct Sample {
    pub(crate) rows: f64,
    pub(crate) cpu: f64,
    pub(crate) rss: usize,
    pub(crate) state: f64,
    pub(crate) paused: f64,
}

/// The run in fifths of the rows written: CPU per row and memory in each, so that growth with
/// the volume seen shows as rising figures down the table.
pub(crate) fn print_course(course: &[Sample], rows: usize, out: &std::path::Path) {
    let hours = walk_hours(out);
    println!();
    println!(
        "course of the run ({rows} rows into {hours} hour directories), by fifths of the rows written:"
    );
    println!(
        "| rows written | CPU us per row | resident MiB at the end (max in the fifth) | join state MiB (max) | samples with a paused partition |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let mut start = (0.0, 0.0);
    let mut from = 0;
    for fifth in 1..=5 {
        let goal = rows as f64 * f64::from(fifth) / 5.0;
        let Some(end) = course[from..]
            .iter()
            .position(|s| s.rows >= goal)
            .map(|i| from + i)
        else {
            break;
        };
        let window = &course[from..=end];
        let (rows, cpu) = (course[end].rows - start.0, course[end].cpu - start.1);
        let max_rss = window.iter().map(|s| s.rss).max().unwrap_or(0);
        let max_state = window.iter().map(|s| s.state).fold(0.0, f64::max);
        let paused = window.iter().filter(|s| s.paused > 0.0).count();
        println!(
            "| {:.0}-{:.0} | {:.2} | {:.0} ({:.0}) | {:.1} | {paused} of {} |",
            start.0,
            course[end].rows,
            cpu * 1e6 / rows.max(1.0),
            course[end].rss as f64 / 1048576.0,
            max_rss as f64 / 1048576.0,
            max_state / 1048576.0,
            window.len()
        );
        start = (course[end].rows, course[end].cpu);
        from = end + 1;
        if from >= course.len() {
            break;
        }
    }
}

/// Hour directories (`dt=*/hr=*`) under the dataset root.
fn walk_hours(root: &std::path::Path) -> usize {
    let list = |d: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .map(|r| r.filter_map(|e| Some(e.ok()?.path())).collect())
            .unwrap_or_default()
    };
    list(root)
        .iter()
        .filter(|d| {
            d.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("dt="))
        })
        .map(|d| list(d).len())
        .sum()
}

pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        // Not `sum`, whose empty float sum is -0.0.
        .fold(0.0, |a, b| a + b)
}

pub(crate) async fn scrape(addr: std::net::SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}
