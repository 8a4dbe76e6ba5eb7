#!/usr/bin/env bash
# The joiner's live heap against its resident memory, at two volumes: join-bench's joiner alone
# (routed events, a commit every 5,000 rows) on 600k and 6M input records, each run with
# heaptrack attached to the joiner process. Prints, per run, the heap still allocated when the
# run ends, the heap's peak and the resident memory once caught up (what target 2 compares).
#
# heaptrack sees malloc, so join-bench is built here without mimalloc (`--no-default-features`):
# glibc's allocator for everything, the heap itself the same. heaptrack and gdb (which attaches
# it) are installed from the Debian packages when missing (as root, or through sudo).
# Arguments: --rounds N (3), --sizes "100000 1000000" (requests; 6 input records each).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${FEATURELOG_KAFKA:?set FEATURELOG_KAFKA (scripts/kafka.sh start gives a broker)}"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/featurelog/target}
rounds=3
sizes="100000 1000000"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "join-heap.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ! command -v heaptrack >/dev/null 2>&1 || ! command -v gdb >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing heaptrack and gdb (Debian packages)" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends heaptrack gdb >&2
fi

cargo build --release --locked -p featurelog-bench --bin join-bench --no-default-features
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A copy of its own: the next default build of join-bench replaces the one in the target dir.
bench=$work/join-bench-glibc
cp "$CARGO_TARGET_DIR/release/join-bench" "$bench"

for requests in $sizes; do
  data=(--event-rate 200 --features-wait 10s --flush-rows 5000 --requests "$requests")
  read -r _ features events _ < <("$bench" "${data[@]}" --produce-only | grep '^topics ')
  for round in $(seq "$rounds"); do
    out=$work/run-$requests-$round
    "$bench" "${data[@]}" --topics "$features,$events" --joiner-only >"$out.log" 2>&1 &
    run=$!
    pid=""
    for _ in $(seq 300); do
      pid=$(pgrep -f -- "^$bench --run-joiner" | head -1 || true)
      [ -n "$pid" ] && break
      sleep 0.1
    done
    [ -n "$pid" ] || { echo "join-heap.sh: the joiner process did not start" >&2; exit 1; }
    heaptrack -o "$out" -p "$pid" >"$out.heaptrack.log" 2>&1 &
    tracker=$!
    wait "$run" || { cat "$out.log" >&2; exit 1; }
    # heaptrack ends once the joiner (killed by join-bench) is gone and its data is written.
    wait "$tracker" || true
    heaptrack_print -f "$out.zst" --print-leaks 0 --print-peaks 0 --print-allocators 0 \
      --print-temporary 0 -n 0 >"$out.heap" 2>/dev/null
    live=$(sed -n 's/^total memory leaked: //p' "$out.heap")
    peak=$(sed -n 's/^peak heap memory consumption: //p' "$out.heap")
    settled=$(grep -o 'rss_settled_bytes=[0-9]*' "$out.log" | cut -d= -f2)
    echo "requests=$requests round=$round live_heap_at_end=$live peak_heap=$peak rss_settled_mib=$((settled / 1048576))"
  done
  "$bench" --delete-topics "$features" >/dev/null
  "$bench" --delete-topics "$events" >/dev/null
done
