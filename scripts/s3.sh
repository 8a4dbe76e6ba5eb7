#!/usr/bin/env bash
# A single-node S3-compatible server (MinIO) for tests and local runs, built once from source
# with `go install` through the Go module proxy. No Docker, no download outside the registries.
#
#   scripts/s3.sh start    build the binary once (cached), start on fresh storage, wait, create
#                          the test bucket
#   scripts/s3.sh stop     stop it (SIGTERM, then SIGKILL after 30 s)
#   scripts/s3.sh status   say whether it runs, and where
#
# Environment:
#   FEATURELOG_S3_PORT    S3 port on 127.0.0.1 (default 9000; the console takes port+1)
#   FEATURELOG_S3_CACHE   where the binary and the server's data live
#                         (default ~/.cache/featurelog/s3: the binary outlives clones)
#   FEATURELOG_S3_BUCKET  the bucket created at start (default featurelog-test)
#   FEATURELOG_S3_ACCESS_KEY / FEATURELOG_S3_SECRET_KEY  root credentials
#                         (default featurelog / featurelog-secret)
# Exit codes: 0 done, 1 failed (the server log's tail is printed), 2 bad usage.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# A pseudo-version: MinIO tags its releases RELEASE.<date>, which Go modules do not resolve.
# This is the commit of 2026-02-12 on its default branch.
version=v0.0.0-20260212201848-7aac2a2c5b7c
cache=${FEATURELOG_S3_CACHE:-$HOME/.cache/featurelog/s3}
port=${FEATURELOG_S3_PORT:-9000}
console_port=$((port + 1))
bucket=${FEATURELOG_S3_BUCKET:-featurelog-test}
access_key=${FEATURELOG_S3_ACCESS_KEY:-featurelog}
secret_key=${FEATURELOG_S3_SECRET_KEY:-featurelog-secret}
bin="$cache/minio-$version/minio"
run="$cache/run-$port"
pidfile="$run/minio.pid"
log="$run/minio.log"

say() { printf 's3.sh: %s\n' "$*" >&2; }

# running_pid, port_open, stop, status.
source "$root/scripts/lib/daemon.sh"

fetch() {
  if [[ -x $bin ]]; then return; fi
  command -v go >/dev/null || { say "go is not installed (MinIO is built from source; go.dev/dl)"; exit 1; }
  say "building MinIO $version with go install (once; a few minutes) into $(dirname "$bin")"
  local tmp="$cache/minio-$version.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "github.com/minio/minio@$version" >"$cache/go-install.log" 2>&1; then
    say "go install failed:"; tail -n 40 "$cache/go-install.log" >&2; exit 1
  fi
  mkdir -p "$(dirname "$bin")"
  mv "$tmp/minio" "$bin"
  rm -rf "$tmp"
}

start() {
  if pid=$(running_pid); then
    say "already running (pid $pid) on 127.0.0.1:$port"
    return 0
  fi
  if port_open "$port" || port_open "$console_port"; then
    say "port $port or $console_port is taken by another process; set FEATURELOG_S3_PORT"
    exit 1
  fi
  fetch
  # Fresh storage each start: tests must not depend on what an earlier run left behind.
  rm -rf "$run/data"
  mkdir -p "$run/data"
  say "starting MinIO on 127.0.0.1:$port (log: $log)"
  MINIO_ROOT_USER=$access_key MINIO_ROOT_PASSWORD=$secret_key MINIO_BROWSER=off \
    MINIO_UPDATE=off MINIO_CI_CD=1 \
    nohup "$bin" server "$run/data" --address "127.0.0.1:$port" \
    --console-address "127.0.0.1:$console_port" >>"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  local deadline=$((SECONDS + 60))
  until curl -fsS -o /dev/null "http://127.0.0.1:$port/minio/health/ready" 2>/dev/null; do
    if ! running_pid >/dev/null; then
      say "the server exited during start-up:"; tail -n 40 "$log" >&2; exit 1
    fi
    if ((SECONDS > deadline)); then
      say "the server was not ready within 60 s:"; tail -n 40 "$log" >&2; stop; exit 1
    fi
    sleep 0.3
  done
  AWS_ACCESS_KEY_ID=$access_key AWS_SECRET_ACCESS_KEY=$secret_key \
    python3 "$root/scripts/s3/bucket.py" "http://127.0.0.1:$port" "$bucket" || { stop; exit 1; }
  say "ready: FEATURELOG_S3=http://127.0.0.1:$port bucket $bucket"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status|fetch" >&2; exit 2 ;;
esac
