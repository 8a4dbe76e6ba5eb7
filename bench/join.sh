#!/usr/bin/env bash
# Builds release binaries and runs the joiner benchmark against $FEATURELOG_KAFKA
# (scripts/kafka.sh start gives one). Arguments go to join-bench (--requests, --candidates, ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
cargo build --release --locked -p featurelog-bench --bins
exec "$CARGO_TARGET_DIR/release/join-bench" "$@"
