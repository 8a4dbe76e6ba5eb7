#!/usr/bin/env bash
# Builds release binaries and runs the sidecar benchmark. Arguments go to sidecar-bench
# (--rate, --duration, --rounds, --candidates, --features, --logged, --typed, --kafka,
# --protocol grpc|grpc-stream|rest-json|rest-binary, --scenarios, --before).
# With FEATURELOG_KAFKA set (e.g. after scripts/kafka.sh start) it publishes to that broker.
# The gRPC runs compare the sidecar with nginx and HAProxy: when they are missing they are
# installed from the Debian packages (nginx-light, haproxy; as root, or through sudo), never
# started as services. FEATURELOG_BENCH_NO_INSTALL=1 skips that (their scenarios are then
# skipped unless installed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
if [ -z "${FEATURELOG_BENCH_NO_INSTALL:-}" ] && { ! have nginx || ! have haproxy; }; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing nginx and haproxy (Debian packages) for the comparison" >&2
    # policy-rc.d or not, the packages' services must not run: the bench starts its own.
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      nginx-light haproxy >&2 || echo "could not install nginx/haproxy: their scenarios are skipped" >&2
    for service in nginx haproxy; do
      $sudo service "$service" stop >/dev/null 2>&1 || true
    done
  else
    echo "no apt-get: install nginx and haproxy for the comparison" >&2
  fi
fi

cargo build --release --locked -p featurelog -p featurelog-bench --bins
exec "$CARGO_TARGET_DIR/release/sidecar-bench" "$@"
