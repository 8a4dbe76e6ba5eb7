"""The reading half and the report of bench/delta.sh.

Given the write rounds' figures (`joiner-figures` lines of join-bench, one per round and
scenario) and the last round's datasets, it prints
1. the write cost of each scenario: rows per CPU second of the joiner until its last row is
   committed, and each Delta scenario's ratio to the Parquet layout's, taken round by round;
   the compaction's CPU apart;
2. files and bytes per hour of the first full day in each dataset (the Delta tables' live
   files, from their logs; the Parquet layout's files in its hour directories);
3. the time to read that day into memory: from a Delta table with the `deltalake` package
   (`to_pyarrow_table` with a partition filter) and with Polars (`scan_delta` filtered on
   `dt`), from the Parquet layout with pyarrow's hive dataset and with Polars' `scan_parquet`
   over the day's directory. Each read runs in a fresh interpreter (no reader's cache carries
   over), timed from before the table is opened to the rows in memory, wall clock and the
   process's CPU; the readers and datasets go in rotating order, round by round.
Every read must see the same rows (request id, item id) as the others.

usage: delta_bench.py --write-results TSV --dataset NAME=DIR ... [--read-rounds N]
       delta_bench.py --read-once READER DIR DAY   (what each timed read runs)
"""

import argparse
import collections
import hashlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

DELTA_READERS = ["deltalake", "polars-delta"]
PARQUET_READERS = ["pyarrow-hive", "polars-parquet"]
TARGET_FILE_BYTES = 256 * 2**20


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def read_once(reader, path, day):
    """Reads the day, printing wall and CPU seconds, rows and a digest of their keys."""
    if reader == "deltalake":
        import deltalake

        wall, cpu = time.perf_counter(), cpu_seconds()
        table = deltalake.DeltaTable(path).to_pyarrow_table(partitions=[("dt", "=", day)])
    elif reader == "polars-delta":
        import datetime

        import polars as pl

        wall, cpu = time.perf_counter(), cpu_seconds()
        table = pl.scan_delta(path).filter(pl.col("dt") == datetime.date.fromisoformat(day)).collect().to_arrow()
    elif reader == "pyarrow-hive":
        import pyarrow.dataset as ds

        wall, cpu = time.perf_counter(), cpu_seconds()
        table = ds.dataset(f"{path}/dt={day}", format="parquet", partitioning="hive").to_table()
    elif reader == "polars-parquet":
        import polars as pl

        wall, cpu = time.perf_counter(), cpu_seconds()
        table = pl.scan_parquet(f"{path}/dt={day}/*/*.parquet", hive_partitioning=True).collect().to_arrow()
    else:
        raise SystemExit(f"unknown reader {reader}")
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    keys = sorted(f"{r}\t{i}" for r, i in zip(table.column("request_id").to_pylist(), table.column("item_id").to_pylist()))
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
    json.dump({"wall": wall, "cpu": cpu, "rows": table.num_rows, "digest": digest}, sys.stdout)


def fig(values, fmt):
    """Median (lowest-highest), or the one value."""
    text = fmt.format(statistics.median(values))
    return text if len(values) == 1 else f"{text} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def write_report(path):
    rounds = collections.defaultdict(dict)
    for line in open(path).read().splitlines():
        round_, scenario, figures = line.split("\t")
        fields = dict(f.split("=", 1) for f in figures.split()[1:])
        rounds[round_][scenario] = {k: float(v) for k, v in fields.items()}
    scenarios = ["parquet", "delta", "delta-compacted"]
    per = {s: [r[s] for r in rounds.values()] for s in scenarios}
    print(f"\nwrite, {len(rounds)} rounds in rotating order; median (range)")
    print("| scenario | rows | commits | write CPU s | rows per CPU s | / Parquet's, per round | peak resident MiB | compaction CPU s after the write (hours compacted) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in scenarios:
        runs = per[s]
        rate = [r["rows"] / r["cpu_s"] for r in runs]
        ratio = [r[s]["rows"] / r[s]["cpu_s"] / (r["parquet"]["rows"] / r["parquet"]["cpu_s"]) for r in rounds.values()]
        compaction = (
            f"{fig([r['compaction_cpu_seconds'] for r in runs], '{:.2f}')} ({statistics.median([r['hours_compacted'] for r in runs]):.0f})"
            if s == "delta-compacted"
            else ""
        )
        print(
            f"| {s} | {statistics.median([r['rows'] for r in runs]):,.0f} | {fig([r['commits'] for r in runs], '{:,.0f}')} "
            f"| {fig([r['cpu_s'] for r in runs], '{:.2f}')} | {fig(rate, '{:,.0f}')} "
            f"| {'1' if s == 'parquet' else fig(ratio, '{:.3f}')} "
            f"| {fig([r['peak_rss_bytes'] / 2**20 for r in runs], '{:.0f}')} | {compaction} |"
        )


def hour_files(name, path, day):
    """Files and bytes of each hour of `day`: (hour, files, bytes) sorted by hour."""
    hours = collections.defaultdict(lambda: [0, 0])
    if name.startswith("delta"):
        import deltalake
        import pyarrow as pa

        actions = pa.table(deltalake.DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
        for action in actions:
            # `dt` is a date in the table, `hr` an integer.
            if str(action["partition.dt"]) == day:
                hours[f"{action['partition.hr']:02}"][0] += 1
                hours[f"{action['partition.hr']:02}"][1] += action["size_bytes"]
    else:
        base = f"{path}/dt={day}"
        for hour_dir in os.listdir(base):
            for file in os.listdir(f"{base}/{hour_dir}"):
                if file.endswith(".parquet"):
                    hours[hour_dir.removeprefix("hr=")][0] += 1
                    hours[hour_dir.removeprefix("hr=")][1] += os.path.getsize(f"{base}/{hour_dir}/{file}")
    return sorted((h, f, b) for h, (f, b) in hours.items())


def read_report(datasets, read_rounds):
    # The first full day: the data starts at 18:00 on 2025-11-29 and runs more than 30 hours.
    day = "2025-11-30"
    print(f"\nthe day {day}: files and bytes per hour")
    print("| dataset | hours | files per hour | KiB per hour | within ceil(bytes / 256 MiB) + 1 |")
    print("| --- | --- | --- | --- | --- |")
    for name, path in datasets:
        hours = hour_files(name, path, day)
        files, sizes = [f for _, f, _ in hours], [b for _, _, b in hours]
        bound = all(f <= math.ceil(b / TARGET_FILE_BYTES) + 1 for _, f, b in hours)
        print(f"| {name} | {len(hours)} | {fig(files, '{:.0f}')} | {fig([b / 1024 for b in sizes], '{:,.0f}')} | {'yes' if bound else 'no'} |")
    runs = [(name, path, reader) for name, path in datasets
            for reader in (DELTA_READERS if name.startswith("delta") else PARQUET_READERS)]
    times = collections.defaultdict(list)
    seen = {}
    for round_ in range(read_rounds):
        shift = round_ % len(runs)
        for name, path, reader in runs[shift:] + runs[:shift]:
            out = subprocess.run(
                [sys.executable, __file__, "--read-once", reader, path, day],
                check=True, capture_output=True, text=True,
            )
            result = json.loads(out.stdout)
            seen.setdefault((result["rows"], result["digest"]), []).append(f"{name}/{reader}")
            times[(name, reader)].append(result)
    if len(seen) != 1:
        raise SystemExit(f"the reads disagree: {seen}")
    ((rows, _),) = seen.keys()
    print(f"\nreading the day ({rows:,} rows, the same in every read), {read_rounds} rounds in rotating order; median (range)")
    print("| dataset | reader | wall s | CPU s | wall / the uncompacted Delta table's, per round |")
    print("| --- | --- | --- | --- | --- |")
    for name, _, reader in runs:
        walls = [r["wall"] for r in times[(name, reader)]]
        base = times.get(("delta", reader))
        ratio = fig([w / b["wall"] for w, b in zip(walls, base)], "{:.2f}") if base else ""
        print(f"| {name} | {reader} | {fig(walls, '{:.3f}')} | {fig([r['cpu'] for r in times[(name, reader)]], '{:.3f}')} | {ratio} |")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--read-once":
        read_once(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--write-results", required=True)
    parser.add_argument("--dataset", action="append", required=True, help="NAME=DIR")
    parser.add_argument("--read-rounds", type=int, default=7)
    args = parser.parse_args()
    write_report(args.write_results)
    read_report([d.split("=", 1) for d in args.dataset], args.read_rounds)


if __name__ == "__main__":
    main()
