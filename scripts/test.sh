#!/usr/bin/env bash
# The one test command, for a fresh machine as for a developer's:
#   1. installs what the build and the tests need and the machine lacks (Debian packages),
#   2. checks formatting (cargo fmt), lints (cargo clippy -D warnings), the build at the declared
#      rust-version, and the dependency tree's licenses, duplicates and sources (cargo deny),
#   3. starts a real single-node Kafka broker with scripts/kafka.sh and a real S3-compatible
#      server (MinIO, built once with go install) with scripts/s3.sh, and builds Prometheus's
#      promtool once (scripts/promtool.sh) for the alerting rules' unit tests and h2spec once
#      (scripts/h2spec.sh) for the sidecar's HTTP/2 conformance,
#   4. runs every test of the workspace against them (FEATURELOG_KAFKA, FEATURELOG_S3,
#      FEATURELOG_PROMTOOL, FEATURELOG_H2SPEC),
#   5. stops both, even when the tests fail, and exits with the tests' status.
# A broker or server that was already running before this script is reused and left running.
#
# CARGO_TARGET_DIR defaults to ~/.cache/featurelog/target, outside the clone, so repeated runs
# (and CI on the same machine) reuse earlier builds; nothing depends on it existing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
port=${FEATURELOG_KAFKA_PORT:-9092}
s3_port=${FEATURELOG_S3_PORT:-9000}

step() { printf '\n==> %s\n' "$*" >&2; }

install_missing() {
  local apt=()
  command -v cmake >/dev/null || apt+=(cmake)
  command -v g++ >/dev/null || apt+=(g++)
  command -v make >/dev/null || apt+=(make)
  command -v pkg-config >/dev/null || apt+=(pkg-config)
  dpkg -s libssl-dev >/dev/null 2>&1 || apt+=(libssl-dev)
  dpkg -s zlib1g-dev >/dev/null 2>&1 || apt+=(zlib1g-dev)
  command -v java >/dev/null || apt+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || apt+=(maven)
  command -v python3 >/dev/null || apt+=(python3 python3-pip)
  command -v curl >/dev/null || apt+=(curl)
  # The official Go toolchain, where the machine has one off the PATH; Debian's golang-go is
  # the fallback (MinIO needs Go 1.21 or newer).
  [[ -x /usr/local/go/bin/go ]] && export PATH=/usr/local/go/bin:$PATH
  command -v go >/dev/null || apt+=(golang-go)
  # tests/diff.rs opens the diff's HTML report in headless Chromium.
  command -v chromium >/dev/null || apt+=(chromium)
  if ((${#apt[@]})); then
    step "installing Debian packages: ${apt[*]}"
    if [[ $(id -u) -ne 0 ]]; then
      echo "test.sh: missing ${apt[*]}; install them (as root: apt-get install ${apt[*]})" >&2
      exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt[@]}"
  fi
  command -v cargo >/dev/null || { echo "test.sh: cargo is not installed (rustup.rs)" >&2; exit 1; }
  if [[ -f tests/requirements.txt ]] &&
    ! python3 -c 'import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))' \
      $(sed -n 's/^# modules: //p' tests/requirements.txt) 2>/dev/null; then
    step "installing Python test dependencies"
    python3 -m pip install -q --disable-pip-version-check -r tests/requirements.txt
  fi
}

install_missing

# Building MinIO takes minutes on a fresh machine (once; cached in ~/.cache/featurelog/s3): it
# runs beside fmt, clippy and the Rust build instead of after them.
s3_fetch_log=$(mktemp)
scripts/s3.sh fetch >"$s3_fetch_log" 2>&1 &
s3_fetch=$!
# promtool (the alerting rules' unit tests), built once like MinIO, beside the cargo build.
promtool_log=$(mktemp)
scripts/promtool.sh --path >"$promtool_log" 2>&1 &
promtool_fetch=$!
# h2spec (tests/sidecar_h2spec.rs), likewise.
h2spec_log=$(mktemp)
scripts/h2spec.sh --path >"$h2spec_log" 2>&1 &
h2spec_fetch=$!

# cargo-deny (licenses, bans, sources), installed once into ~/.cargo/bin, beside the build.
deny_log=$(mktemp)
if command -v cargo-deny >/dev/null; then
  deny_fetch=
else
  cargo install --locked --quiet cargo-deny@0.20.2 >"$deny_log" 2>&1 &
  deny_fetch=$!
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

# The workspace builds with the toolchain its rust-version declares (rust-version is what
# the tests run on, not a guess below it).
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
rustc_version=$(rustc --version | cut -d' ' -f2)
if [[ $rustc_version == "$msrv" || $rustc_version == "$msrv.0" ]]; then
  step "rust-version $msrv is the toolchain of this build"
else
  step "cargo check with rust-version's toolchain ($msrv)"
  rustup run "$msrv" rustc --version >/dev/null 2>&1 || rustup toolchain install "$msrv" --profile minimal
  cargo "+$msrv" check --workspace --all-targets --locked
fi

if [[ -n $deny_fetch ]] && ! wait "$deny_fetch"; then
  cat "$deny_log" >&2
  exit 1
fi
step "cargo deny check bans licenses sources"
cargo deny --locked check bans licenses sources

step "building the tests"
cargo test --workspace --locked --no-run

started_kafka=false
started_s3=false
stop_servers() {
  if $started_kafka; then
    step "stopping Kafka"
    scripts/kafka.sh stop || true
  fi
  if $started_s3; then
    step "stopping the S3 server"
    FEATURELOG_S3_PORT=$s3_port scripts/s3.sh stop || true
  fi
}
trap stop_servers EXIT

if ! FEATURELOG_KAFKA_PORT=$port scripts/kafka.sh status 2>/dev/null; then
  step "starting Kafka"
  FEATURELOG_KAFKA_PORT=$port scripts/kafka.sh start
  started_kafka=true
fi
export FEATURELOG_KAFKA=127.0.0.1:$port

if ! wait "$s3_fetch"; then
  cat "$s3_fetch_log" >&2
  exit 1
fi
if ! FEATURELOG_S3_PORT=$s3_port scripts/s3.sh status 2>/dev/null; then
  step "starting the S3 server"
  FEATURELOG_S3_PORT=$s3_port scripts/s3.sh start
  started_s3=true
fi
# testkit's defaults for the bucket and credentials are scripts/s3.sh's.
export FEATURELOG_S3=http://127.0.0.1:$s3_port

if ! wait "$promtool_fetch"; then
  cat "$promtool_log" >&2
  exit 1
fi
FEATURELOG_PROMTOOL=$(tail -n 1 "$promtool_log")
export FEATURELOG_PROMTOOL
if ! wait "$h2spec_fetch"; then
  cat "$h2spec_log" >&2
  exit 1
fi
FEATURELOG_H2SPEC=$(tail -n 1 "$h2spec_log")
export FEATURELOG_H2SPEC

step "cargo test (FEATURELOG_KAFKA=$FEATURELOG_KAFKA FEATURELOG_S3=$FEATURELOG_S3 FEATURELOG_PROMTOOL=$FEATURELOG_PROMTOOL FEATURELOG_H2SPEC=$FEATURELOG_H2SPEC)"
status=0
cargo test --workspace --locked || status=$?
exit "$status"
