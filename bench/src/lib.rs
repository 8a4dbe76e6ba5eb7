//! Measuring helpers shared by the benchmarks.

/// A name for this run's topics and consumer groups that no other run on the same broker has
/// used: the process id alone repeats once ids wrap, and a joiner given a group name an earlier
/// run used reads that run's repartition topic (its records and router progress) as its own.
pub fn run_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{millis}-{}", std::process::id())
}

/// CPU time of every thread of process `pid` (`None`: this process), in seconds, from
/// `/proc/<pid>/task/*/schedstat`, whose first field is nanoseconds on the CPU: finer than the
/// clock ticks of `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: Option<u32>) -> f64 {
    thread_cpu(pid).iter().map(|(_, seconds)| seconds).sum()
}

/// CPU time of the calling thread in seconds, from `/proc/thread-self/schedstat` (nanoseconds
/// on the CPU; 0 where unavailable): what a step costs the thread, without the time it waits
/// (for an fsync, say).
pub fn current_thread_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

/// CPU time of process `pid` (`None`: this process) in seconds, from `/proc/<pid>/stat`: utime
/// plus stime, in the kernel's 100 Hz user ticks. Unlike [`cpu_seconds`], which sums the threads
/// alive when it is called, it keeps the time of threads that exited in between (a short-lived
/// Kafka admin client, say), so a measurement cannot miss work that ended early.
pub fn process_cpu_seconds(pid: Option<u32>) -> f64 {
    let ticks: u64 = stat_fields(pid)
        .iter()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// Minor page faults of process `pid` (`None`: this process) so far (0 where unavailable):
/// each one is a page of memory fresh from the kernel, zeroed on first touch.
pub fn process_minor_faults(pid: Option<u32>) -> u64 {
    stat_fields(pid)
        .get(7)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of process `pid` (`None`: this process) in bytes, from `/proc/<pid>/statm`
/// (0 where unavailable).
pub fn resident_bytes(pid: Option<u32>) -> usize {
    std::fs::read_to_string(proc_path(pid, "statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Peak resident memory of process `pid` (`None`: this process) in bytes: `VmHWM` of
/// `/proc/<pid>/status` (0 where unavailable).
pub fn peak_resident_bytes(pid: Option<u32>) -> usize {
    std::fs::read_to_string(proc_path(pid, "status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

fn proc_path(pid: Option<u32>, file: &str) -> String {
    match pid {
        Some(pid) => format!("/proc/{pid}/{file}"),
        None => format!("/proc/self/{file}"),
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces), so that
/// field 3 (state) comes first: utime and stime are at 11 and 12, minflt at 7.
fn stat_fields(pid: Option<u32>) -> Vec<String> {
    let stat = std::fs::read_to_string(proc_path(pid, "stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after.split_whitespace().map(str::to_owned).collect()
}

/// Each live thread of process `pid` (`None`: this process): its name and CPU seconds, from
/// `/proc/<pid>/task/*/comm` and `schedstat`.
pub fn thread_cpu(pid: Option<u32>) -> Vec<(String, f64)> {
    let dir = match pid {
        Some(pid) => format!("/proc/{pid}/task"),
        None => "/proc/self/task".to_owned(),
    };
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(dir) {
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let ns: f64 = std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0.0);
            out.push((comm.trim_end().to_owned(), ns / 1e9));
        }
    }
    out
}

/// CPU seconds of the live threads of process `pid` (`None`: this process): librdkafka's
/// (`rdk:`), and all the others.
pub fn librdkafka_and_other_cpu(pid: Option<u32>) -> (f64, f64) {
    thread_cpu(pid)
        .into_iter()
        .fold((0.0, 0.0), |(rdk, other), (comm, seconds)| {
            if comm.starts_with("rdk:") {
                (rdk + seconds, other)
            } else {
                (rdk, other + seconds)
            }
        })
}

/// The bytes of the files under `dir` whose path `keep` accepts, in every subdirectory.
pub fn file_bytes(dir: &std::path::Path, keep: &dyn Fn(&std::path::Path) -> bool) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => file_bytes(&path, keep),
                Ok(meta) if keep(&path) => meta.len(),
                _ => 0,
            }
        })
        .sum()
}
