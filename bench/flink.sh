#!/usr/bin/env bash
# The joiner against Flink on the same records: builds the Flink SQL interval join of
# bench/flink/ (Maven, one shaded jar) and join-bench, then per round produces the join
# benchmark's two topics once (steady-state data: --event-rate 200, features served 10 s
# before they expire) and runs on them, one after the other in alternating order, the joiner
# (`join-bench --joiner-only`, its own process) twice and Flink (`java -jar`, one local JVM),
# and compares their rows (bench/flink/compare.py, pyarrow). The joiner runs once with its
# default commit settings, which commit at least as often as Flink's 10 s checkpoints (every
# `output.flush-interval`, 10 s, or sooner when a task's rows reach `output.flush-bytes`), and
# once committing every 5,000 rows a task (`--flush-rows 5000`, join.sh's steady state), many
# times a second. Prints a line per round and the medians and ranges over rounds.
#
#   FEATURELOG_KAFKA=127.0.0.1:9092 bench/flink.sh --requests 20000 --rounds 3
#
# Needs a broker in $FEATURELOG_KAFKA (scripts/kafka.sh start), Java 17, Maven, python3 with
# pyarrow. Every topic named bench-* on that broker is deleted after each round.
# --events-partitioning by-request-id: the events are keyed by request id into as many partitions
# as the feature logs, and the joiner reads them without its router (input.events-partitioning);
# Flink's job is the same. Default `any`: events keyed by item id, routed by the joiner.
# FLINK_JAVA_OPTS: options for Flink's JVM (e.g. -Xmx1g); by default the JVM sizes its heap
# itself (at most a quarter of the machine's memory).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
requests=20000
rounds=3
# Flink's watermark alignment, as the joiner's join.max-read-ahead (30 s); 0: none.
max_drift_ms=30000
partitioning=any
while [ $# -gt 0 ]; do
  case $1 in
    --requests) requests=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --flink-max-drift-ms) max_drift_ms=$2; shift 2 ;;
    --events-partitioning) partitioning=$2; shift 2 ;;
    *) echo "usage: bench/flink.sh [--requests N] [--rounds N] [--flink-max-drift-ms MS] [--events-partitioning any|by-request-id]" >&2; exit 2 ;;
  esac
done
: "${FEATURELOG_KAFKA:?set FEATURELOG_KAFKA (scripts/kafka.sh start gives a broker)}"
features_wait_s=10
data=(--requests "$requests" --event-rate 200 --features-wait "${features_wait_s}s" --events-partitioning "$partitioning")

# The repository's schema, with the options Flink's protobuf format wants of a Java class.
mkdir -p bench/flink/target/proto/featurelog/v1
{ cat schemas/proto/featurelog/v1/feature_log.proto
  printf '\noption java_package = "featurelog.v1";\noption java_multiple_files = true;\n'
} > bench/flink/target/proto/featurelog/v1/feature_log.proto
case $(uname -m) in aarch64) platform=linux-aarch_64 ;; *) platform=linux-x86_64 ;; esac
(cd bench/flink && mvn -q -B package -DskipTests -Dprotoc.platform="$platform")
jar=$root/bench/flink/target/flink-join-0.1.0.jar
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
cargo build --release --locked -p featurelog-bench --bins
bench=$CARGO_TARGET_DIR/release/join-bench

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv
# One figure of a `joiner-figures` line: figure NAME LINE.
figure() { sed -E "s/.* $1=([^ ]+).*/\1/" <<<"$2"; }
: > "$results"
for round in $(seq 1 "$rounds"); do
  read -r _ ftopic etopic records impressions < <("$bench" "${data[@]}" --produce-only | grep '^topics ')
  rm -rf "$work/joiner" "$work/joiner5k" "$work/flink" "$work/checkpoints"
  run_joiner() {
    "$bench" "${data[@]}" --topics "$ftopic,$etopic" --joiner-only --output "$work/joiner" \
      > "$work/joiner.log" 2>&1 || { cat "$work/joiner.log" >&2; return 1; }
    "$bench" "${data[@]}" --flush-rows 5000 --topics "$ftopic,$etopic" --joiner-only \
      --output "$work/joiner5k" > "$work/joiner5k.log" 2>&1 || { cat "$work/joiner5k.log" >&2; return 1; }
  }
  run_flink() {
    # GNU time reports the JVM's own rusage: utime, stime, and its peak resident set (KiB).
    /usr/bin/time -o "$work/flink.time" -f '%U %S %M %e' \
      java ${FLINK_JAVA_OPTS:-} -jar "$jar" --kafka "$FEATURELOG_KAFKA" --features-topic "$ftopic" --events-topic "$etopic" \
      --output "$work/flink" --checkpoints "$work/checkpoints" \
      --features-wait-ms $((features_wait_s * 1000)) --parallelism 2 --max-drift-ms "$max_drift_ms" \
      > "$work/flink.log" 2>&1 || { cat "$work/flink.log" >&2; return 1; }
  }
  # Alternating order, so that neither always runs on the warmer page cache.
  if [ $((round % 2)) = 1 ]; then run_joiner; run_flink; else run_flink; run_joiner; fi
  line=$(grep '^joiner-figures ' "$work/joiner.log")
  j_cpu=$(figure cpu_s "$line")
  j_peak=$(figure peak_rss_bytes "$line")
  buffered=$(figure buffered_requests "$line")
  read -r f_user f_sys f_peak_kib f_wall < "$work/flink.time"
  compare=$(python3 bench/flink/compare.py "$work/joiner" "$work/flink" || true)
  echo "$compare" | sed 's/^/  /' >&2
  j_rows=$(sed -nE 's/^compare joiner_rows=([0-9]+).*/\1/p' <<<"$compare")
  f_rows=$(sed -nE 's/.* flink_rows=([0-9]+).*/\1/p' <<<"$compare")
  match=$(sed -nE 's/.* match=([a-z]+).*/\1/p' <<<"$compare")
  compare5k=$(python3 bench/flink/compare.py "$work/joiner5k" "$work/flink" || true)
  echo "$compare5k" | sed 's/^/  (5,000 rows a commit) /' >&2
  match5k=$(sed -nE 's/.* match=([a-z]+).*/\1/p' <<<"$compare5k")
  line5k=$(grep '^joiner-figures ' "$work/joiner5k.log")
  j5_cpu=$(figure cpu_s "$line5k")
  j5_peak=$(figure peak_rss_bytes "$line5k")
  j_commits=$(figure commits "$line")
  j5_commits=$(figure commits "$line5k")
  f_cpu=$(python3 -c "print(f'{$f_user + $f_sys:.3f}')")
  j_wall=$(figure wall_s "$line")
  # round, input records, rows (joiner, Flink), CPU s, peak resident bytes, the joiner's
  # buffered requests at the end, rows match, wall s; then the joiner committing every 5,000
  # rows: CPU s, peak resident bytes, rows match; the commits of each joiner run
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$records" \
    "$j_rows" "$f_rows" "$j_cpu" "$f_cpu" "$j_peak" "$((f_peak_kib * 1024))" "$buffered" "$match" \
    "$j_wall" "$f_wall" "$j5_cpu" "$j5_peak" "$match5k" "$j_commits" "$j5_commits" \
    | tee -a "$results"
  "$bench" --delete-topics bench- > /dev/null
done

python3 - "$results" "$partitioning" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
def col(i, f=float): return [f(r[i]) for r in rows]
def fig(v, fmt):
    return fmt.format(statistics.median(v)) + (
        "" if len(v) == 1 else " (" + fmt.format(min(v)) + "-" + fmt.format(max(v)) + ")")
j_cpu, f_cpu, j5_cpu = col(4), col(5), col(12)
j_peak, f_peak = [b / 2**20 for b in col(6)], [b / 2**20 for b in col(7)]
j5_peak = [b / 2**20 for b in col(13)]
buffered = col(8)
print(f"\n{len(rows)} rounds, input records {rows[0][1]}, events partitioning {sys.argv[2]}; median (range)")
print("| figure | joiner | Flink |")
print("| --- | --- | --- |")
print(f"| rows written | {fig(col(2), '{:,.0f}')} | {fig(col(3), '{:,.0f}')} |")
print(f"| CPU s | {fig(j_cpu, '{:.2f}')} | {fig(f_cpu, '{:.2f}')} |")
print(f"| Flink CPU / joiner CPU, per round | {fig([f / j for f, j in zip(f_cpu, j_cpu)], '{:.1f}')} | |")
print(f"| peak resident MiB | {fig(j_peak, '{:.0f}')} | {fig(f_peak, '{:.0f}')} |")
print(f"| commits (joiner), with its default commit settings | {fig(col(15), '{:.0f}')} | |")
print(f"| joiner committing every 5,000 rows a task: CPU s; commits | {fig(j5_cpu, '{:.2f}')}; {fig(col(16), '{:.0f}')} | |")
print(f"| Flink CPU / joiner CPU committing every 5,000 rows, per round | {fig([f / j for f, j in zip(f_cpu, j5_cpu)], '{:.1f}')} | |")
print(f"| peak resident MiB, joiner committing every 5,000 rows | {fig(j5_peak, '{:.0f}')} | |")
print(f"| rows match, joiner committing every 5,000 rows | {', '.join(r[14] for r in rows)} | |")
print(f"| peak resident KiB per buffered request ({fig(buffered, '{:.0f}')} at the end) "
      f"| {fig([p * 1024 / b for p, b in zip(j_peak, buffered)], '{:.0f}')} "
      f"| {fig([p * 1024 / b for p, b in zip(f_peak, buffered)], '{:.0f}')} |")
print(f"| rows match (full key and value comparison) | {', '.join(r[9] for r in rows)} | |")
print(f"| wall s (the joiner's until its last row is committed) | {fig(col(10), '{:.0f}')} | {fig(col(11), '{:.0f}')} |")
PY
