#!/usr/bin/env bash
# The diff benchmark: generates N rows x 20 features per side (Parquet; the served side in hive
# partitions like the joiner's output), then runs `featurelog diff` (release build) and the same
# keyed comparison in DuckDB's SQL, one after the other in this command, and prints the wall
# time, CPU time and peak RSS of each and their ratios. Needs python3 with `duckdb` (pip).
#   bench/diff.sh [--rows 10000000] [--data DIR] [--rounds 1]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
# The generator and the runner are examples of the diff crate: they build without librdkafka.
cargo build --release --locked -p featurelog-diff --example diff_gen --example diff_run
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb
exec python3 bench/diff_bench.py --bin "$CARGO_TARGET_DIR/release/examples" "$@"
