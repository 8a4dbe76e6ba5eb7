#!/usr/bin/env bash
# The diff benchmark: generates N rows x 20 features per side (Parquet; the served side in hive
# partitions like the joiner's output), then runs `featurelog diff` (release build), the simple
# DuckDB query a user would write instead (a join counting mismatches per feature) and a DuckDB
# query doing the diff's work, in rotating order for a number of rounds, and prints each one's
# wall time, CPU time and peak RSS and the diff's ratios to both queries (medians and ranges
# over the rounds). Needs python3 with `duckdb` (pip).
#   bench/diff.sh [--rows 10000000] [--data DIR] [--rounds 5] [--no-same-work]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
# The generator and the runner are examples of the diff crate: they build without librdkafka.
cargo build --release --locked -p featurelog-diff --example diff_gen --example diff_run
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb
exec python3 bench/diff_bench.py --bin "$CARGO_TARGET_DIR/release/examples" "$@"
