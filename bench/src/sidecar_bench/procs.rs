//! The processes of a run: starting and stopping them, the configs of the sidecar, nginx and
//! HAProxy, their CPU time from /proc, and the sidecar's metrics.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;

pub(crate) fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    featurelog_bench::cpu_seconds(Some(pid))
}

/// CPU seconds of process `pid` and all its descendants (nginx's master and workers).
pub(crate) fn tree_cpu_seconds(pid: u32) -> f64 {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // The parent is the second field after the command, which is in parentheses.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
            if let Some(parent) = parent {
                parents.push((child, parent));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, q)| *q == p).map(|(c, _)| *c));
        i += 1;
    }
    tree.into_iter().map(cpu_seconds).sum()
}

/// `name` on the PATH or in the sbin directories (where Debian puts nginx and HAProxy).
pub(crate) fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|uid| uid == "0"))
        .unwrap_or(false)
}

/// nginx in front of the model server as its gRPC proxy guide has it: `grpc_pass` to an
/// upstream that keeps its connections, one worker process (as the sidecar's one thread and
/// HAProxy's), no access log.
pub(crate) fn nginx_config(
    dir: &Path,
    name: &str,
    listen: SocketAddr,
    upstream: SocketAddr,
) -> PathBuf {
    let d = dir.display();
    // As root nginx hands its workers to `nobody`, who cannot read the temporary directory.
    let user = if running_as_root() {
        "user root;\n"
    } else {
        ""
    };
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(
        &path,
        format!(
            "{user}worker_processes 1;\ndaemon off;\npid {d}/{name}.pid;\nerror_log stderr warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/{name}-body;\n  proxy_temp_path {d}/{name}-proxy;\n\
               client_max_body_size 64m;\n  keepalive_requests 1000000;\n\
               upstream model {{ server {upstream}; keepalive 32; keepalive_requests 1000000; }}\n\
               server {{\n    listen {listen} http2;\n    location / {{ grpc_pass grpc://model; }}\n  }}\n}}\n"
        ),
    )
    .unwrap();
    path
}

/// HAProxy in front of the model server: HTTP/2 on both sides (`proto h2`), one thread.
pub(crate) fn haproxy_config(
    dir: &Path,
    name: &str,
    listen: SocketAddr,
    upstream: SocketAddr,
) -> PathBuf {
    let path = dir.join(format!("{name}.cfg"));
    std::fs::write(
        &path,
        format!(
            "global\n  nbthread 1\n  maxconn 4096\n\
             defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
             frontend grpc\n  bind {listen} proto h2\n  default_backend model\n\
             backend model\n  server model {upstream} proto h2\n"
        ),
    )
    .unwrap();
    path
}

/// CPU seconds per thread group (tokio workers, publisher threads, librdkafka threads, other).
pub(crate) fn cpu_by_group(pid: u32) -> [f64; 4] {
    let mut out = [0.0; 4];
    for (comm, seconds) in featurelog_bench::thread_cpu(Some(pid)) {
        let group = if comm.starts_with("tokio") {
            0
        } else if comm.starts_with("featurelog-pub") {
            1
        } else if comm.starts_with("rdk:") {
            2
        } else {
            3
        };
        out[group] += seconds;
    }
    out
}

pub(crate) struct Proc(pub(crate) Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}

pub(crate) fn spawn(bin: &Path, args: &[&str]) -> anyhow::Result<Proc> {
    let child = Command::new(bin)
        .args(args)
        .env("FEATURELOG_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok(Proc(child))
}

pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub(crate) async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_sidecar_config(
    dir: &Path,
    name: &str,
    upstream: SocketAddr,
    listen: SocketAddr,
    metrics: SocketAddr,
    mode: &str,
    kafka: &str,
    topic: &str,
    compression: &str,
    rest: Option<(SocketAddr, SocketAddr)>,
) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let rest = rest
        .map(|(listen, upstream)| {
            format!("[rest]\nlisten = \"{listen}\"\nupstream = \"http://{upstream}\"\n")
        })
        .unwrap_or_default();
    std::fs::write(
        &path,
        format!(
            "listen = \"{listen}\"\nupstream = \"http://{upstream}\"\nmode = \"{mode}\"\nallow-list = \"allow.toml\"\n{rest}\
             [metrics]\nlisten = \"{metrics}\"\n[kafka]\nbootstrap-servers = \"{kafka}\"\n\
             [kafka.properties]\n\"statistics.interval.ms\" = \"1000\"\n\"compression.type\" = \"{compression}\"\n\
             [publish]\ntopic = \"{topic}\"\n"
        ),
    )
    .unwrap();
    path
}
