#!/usr/bin/env bash
# Builds release binaries and runs the sidecar benchmark. Arguments go to sidecar-bench
# (--rate, --duration, --rounds, --candidates, --features, --logged, --typed, --kafka,
# --protocol grpc|rest-json|rest-binary).
# With FEATURELOG_KAFKA set (e.g. after scripts/kafka.sh start) it publishes to that broker.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
cargo build --release --locked -p featurelog -p featurelog-bench --bins
exec "$CARGO_TARGET_DIR/release/sidecar-bench" "$@"
