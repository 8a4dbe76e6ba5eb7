//! Measuring helpers shared by the benchmarks.

/// CPU time of every thread of process `pid` (`None`: this process), in seconds, from
/// `/proc/<pid>/task/*/schedstat`, whose first field is nanoseconds on the CPU: finer than the
/// clock ticks of `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: Option<u32>) -> f64 {
    let dir = match pid {
        Some(pid) => format!("/proc/{pid}/task"),
        None => "/proc/self/task".to_owned(),
    };
    let mut total = 0u64;
    if let Ok(tasks) = std::fs::read_dir(dir) {
        for task in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
                total += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
        }
    }
    total as f64 / 1e9
}
