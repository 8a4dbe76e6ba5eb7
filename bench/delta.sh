#!/usr/bin/env bash
# The joiner's Delta table output against its plain Parquet layout, on the same records:
# produces the join benchmark's two topics once, spread over more than a day of event time
# (100,000 requests at 0.9 a second: 30.9 hours, every hour of 2025-11-30 complete), then per
# round runs the joiner (`join-bench --joiner-only`, its own process) three times in rotating
# order:
#   parquet            output.format = "parquet"
#   delta              output.format = "delta", no compaction (target-file-bytes = 0)
#   delta-compacted    output.format = "delta" with its defaults, kept running after its last
#                      row until it has compacted every complete hour
# each with small commits (--flush-rows), as a joiner reading live traffic makes them.
# The write's CPU is the process's until its last row is committed; the compaction's is what it
# spent after that. Then bench/delta_bench.py reads the day from the last round's three
# datasets (deltalake, Polars, pyarrow's hive dataset for the Parquet layout), in rotating order
# for a number of rounds, checks they hold the same rows, and prints files per hour and the
# medians and ranges of every figure.
#
#   FEATURELOG_KAFKA=127.0.0.1:9092 bench/delta.sh [--rounds 3] [--read-rounds 7]
#     [--requests 100000] [--event-rate 0.9] [--flush-rows 100] [--keep DIR]
#
# --keep DIR writes the datasets (and results.tsv) under DIR and keeps them; by default they go
# to a temporary directory, removed at the end.
# Needs a broker in $FEATURELOG_KAFKA (scripts/kafka.sh start) and python3 with deltalake,
# polars and pyarrow (tests/requirements.txt). The topics it made are deleted at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=3
read_rounds=7
requests=100000
rate=0.9
flush_rows=100
keep=
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --read-rounds) read_rounds=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --event-rate) rate=$2; shift 2 ;;
    --flush-rows) flush_rows=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "usage: bench/delta.sh [--rounds N] [--read-rounds N] [--requests N] [--event-rate R] [--flush-rows N] [--keep DIR]" >&2; exit 2 ;;
  esac
done
: "${FEATURELOG_KAFKA:?set FEATURELOG_KAFKA (scripts/kafka.sh start gives a broker)}"
python3 -c 'import deltalake, polars, pyarrow' 2>/dev/null \
  || python3 -m pip install -q -r tests/requirements.txt
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
cargo build --release --locked -p featurelog-bench --bins
bench=$CARGO_TARGET_DIR/release/join-bench
data=(--requests "$requests" --event-rate "$rate" --features-wait 10s)
# Hours the data completes: from the first request's hour (join-bench serves it at
# 2025-11-29T18:00Z) to the hour of the last one.
complete_hours=$(python3 -c "first = 1764439200; print(int((first + $requests / $rate) // 3600) - first // 3600)")

if [ -n "$keep" ]; then
  work=$keep
  mkdir -p "$work"
else
  work=$(mktemp -d)
fi
read -r _ ftopic etopic records impressions < <("$bench" "${data[@]}" --produce-only | grep '^topics ')
cleanup() {
  [ -n "$keep" ] || rm -rf "$work"
  "$bench" --delete-topics "$ftopic" > /dev/null
  "$bench" --delete-topics "$etopic" > /dev/null
}
trap cleanup EXIT
echo "topics $ftopic, $etopic: $records input records, $impressions rows; $complete_hours complete hours" >&2
results=$work/results.tsv
: > "$results"
scenarios=(parquet delta delta-compacted)
for round in $(seq 1 "$rounds"); do
  for i in 0 1 2; do
    scenario=${scenarios[$(((i + round - 1) % 3))]}
    case $scenario in
      parquet) extra=(--format parquet) ;;
      delta) extra=(--format delta --delta-target-file-bytes 0) ;;
      delta-compacted) extra=(--format delta --wait-compacted "$complete_hours") ;;
    esac
    rm -rf "${work:?}/$scenario"
    "$bench" "${data[@]}" --topics "$ftopic,$etopic" --joiner-only --flush-rows "$flush_rows" \
      --output "$work/$scenario" "${extra[@]}" > "$work/$scenario.log" 2>&1 \
      || { cat "$work/$scenario.log" >&2; exit 1; }
    line=$(grep '^joiner-figures ' "$work/$scenario.log")
    printf '%s\t%s\t%s\n' "$round" "$scenario" "$line" | tee -a "$results" >&2
  done
done
python3 bench/delta_bench.py --write-results "$results" --read-rounds "$read_rounds" \
  --dataset "parquet=$work/parquet" --dataset "delta=$work/delta" \
  --dataset "delta-compacted=$work/delta-compacted"
