"""Driver of bench/diff.sh: `featurelog diff` against two DuckDB queries on the same files.

1. the simple query a user would write instead of the diff: join the two sides on the key and
   count, per feature, the rows whose values differ (the diff's default tolerances: floats
   within a relative 1e-6 are equal, everything else exactly) or are null on one side only;
2. the same work as the diff, in SQL: coverage and duplicate keys per side, a full outer join,
   the per-feature counts, and the top 10 mismatching pairs of each feature.

Each contender runs as a child process, measured from outside the same way: wall time,
user+system CPU time and peak RSS from wait4(2). DuckDB runs in its own Python process with its
default settings (all cores, memory limit 80% of RAM). The contenders run one after the other,
in a rotating order, for a number of rounds (the machine may be shared: a round's three runs
share its conditions), and each ratio is taken within a round; medians and ranges over the
rounds are printed. The run fails if the contenders' counts differ.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

FEATURES = (
    [f"f32_{i}" for i in range(8)]
    + [f"f64_{i}" for i in range(4)]
    + [f"i64_{i}" for i in range(4)]
    + [f"str_{i}" for i in range(4)]
)
FLOATS = set(FEATURES[:12])
KEYS = "request_id, item_id"


def differs(f: str, s: str, o: str) -> str:
    """SQL: the served value `s` and the offline value `o` of feature `f` both present and
    apart, as the diff judges them by default."""
    if f in FLOATS:
        return f"({s} IS NOT NULL AND {o} IS NOT NULL AND abs({s} - {o}) > 1e-6 * greatest(abs({s}), abs({o})))"
    return f"({s} IS NOT NULL AND {o} IS NOT NULL AND {s} <> {o})"


def sources(served: str, offline: str) -> tuple:
    """The two sides, read in place as the diff reads them (copying them into tables first
    would charge DuckDB for a load the diff does not do)."""
    return (f"read_parquet('{served}/**/*.parquet', hive_partitioning = true)",
            f"read_parquet('{offline}')")


def simple_sql(served: str, offline: str) -> str:
    """The counting join: matched rows, and per feature the mismatches."""
    s, o = sources(served, offline)
    per = ", ".join(
        f"count(*) FILTER (WHERE {differs(f, f's.{f}', f'o.{f}')} OR (s.{f} IS NULL) <> (o.{f} IS NULL))"
        for f in FEATURES
    )
    return f"SELECT 'simple', count(*), {per} FROM {s} s JOIN {o} o USING ({KEYS});"


def same_work_sql(served: str, offline: str) -> str:
    """Coverage, duplicate keys, per-feature counts (differing, null on one side only) and the
    top mismatching pairs of each feature. The joined rows are kept once in a temporary table
    with only the columns the two queries over them read, since both need them."""
    s, o = sources(served, offline)
    cols = ", ".join(FEATURES)
    per = []
    for f in FEATURES:
        per.append(f"count(*) FILTER (WHERE both_sides AND {differs(f, f's_{f}', f'o_{f}')}) AS {f}_differ")
        per.append(f"count(*) FILTER (WHERE both_sides AND (s_{f} IS NULL) <> (o_{f} IS NULL)) AS {f}_null_one_side")
    pairs = " UNION ALL ".join(
        f"(SELECT '{f}' AS feature, CAST(s_{f} AS VARCHAR) AS served, CAST(o_{f} AS VARCHAR) AS offline, count(*) AS n "
        f"FROM j WHERE both_sides AND s_{f} IS DISTINCT FROM o_{f} GROUP BY ALL ORDER BY n DESC LIMIT 10)"
        for f in FEATURES
    )
    sel_s = ", ".join(f"s.{f} AS s_{f}" for f in FEATURES)
    sel_o = ", ".join(f"o.{f} AS o_{f}" for f in FEATURES)
    return f"""
CREATE VIEW s AS SELECT {KEYS}, {cols} FROM {s};
CREATE VIEW o AS SELECT {KEYS}, {cols} FROM {o};
SELECT 'rows', (SELECT count(*) FROM s), (SELECT count(*) FROM o),
       (SELECT count(*) - count(DISTINCT ({KEYS})) FROM s),
       (SELECT count(*) - count(DISTINCT ({KEYS})) FROM o);
CREATE TEMP TABLE j AS
  SELECT s.request_id IS NOT NULL AND o.request_id IS NOT NULL AS both_sides,
         s.request_id IS NULL AS offline_only, o.request_id IS NULL AS served_only, {sel_s}, {sel_o}
  FROM s FULL OUTER JOIN o ON s.request_id = o.request_id AND s.item_id = o.item_id;
SELECT 'counts', count(*) FILTER (WHERE both_sides), count(*) FILTER (WHERE served_only),
       count(*) FILTER (WHERE offline_only), {", ".join(per)}
FROM j;
SELECT 'pair', * FROM ({pairs}) WHERE feature IS NOT NULL;
"""


DUCKDB_CHILD = r"""
import json, sys, duckdb
NAMES = json.loads(sys.argv[1])
con = duckdb.connect()
con.execute('SET enable_progress_bar = false')
out = {}
for stmt in [s for s in sys.stdin.read().split(';') if s.strip()]:
    r = con.execute(stmt)
    try:
        rows = r.fetchall()
    except Exception:
        continue
    for row in rows:
        if not row:
            continue
        if row[0] == 'simple':
            out['both'] = row[1]
            out['mismatches'] = {n: m for n, m in zip(NAMES, row[2:]) if m}
        elif row[0] == 'rows':
            out['served_rows'], out['offline_rows'], out['served_dups'], out['offline_dups'] = row[1:]
        elif row[0] == 'counts':
            out['both'], out['served_only'], out['offline_only'] = row[1:4]
            # A mismatch, as the diff counts it: values apart beyond the tolerance, or null on
            # one side only.
            out['mismatches'] = {n: d + z for n, d, z in zip(NAMES, row[4::2], row[5::2]) if d + z}
        elif row[0] == 'pair':
            out['pairs'] = out.get('pairs', 0) + 1
print(json.dumps(out))
"""


def disagreements(diff_out: str, duck_out: str) -> list:
    """Where DuckDB's counts differ from the diff's (it reports a subset of them)."""
    rep, duck = json.loads(diff_out), json.loads(duck_out)
    c = rep["coverage"]
    mine = {
        "served_rows": c["served_rows"], "offline_rows": c["offline_rows"],
        "served_dups": c["served_duplicate_keys"], "offline_dups": c["offline_duplicate_keys"],
        "both": c["both"], "served_only": c["served_only"], "offline_only": c["offline_only"],
        "mismatches": {f["name"]: f["mismatches"] for f in rep["features"] if f["mismatches"]},
    }
    return [f"{k}: diff {mine[k]} duckdb {v}" for k, v in duck.items() if k in mine and mine[k] != v]


def measure(cmd, stdin=None):
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin else None,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if stdin:
        proc.stdin.write(stdin.encode())
        proc.stdin.close()
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    return {
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "rss_mib": ru.ru_maxrss / 1024,
        "code": os.waitstatus_to_exitcode(status),
        "out": out.decode(errors="replace"),
        "err": err.decode(errors="replace"),
    }


def spread(values, fmt):
    """`median [min-max]`."""
    return f"{fmt(statistics.median(values))} [{fmt(min(values))}-{fmt(max(values))}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="directory of the release binaries")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/featurelog/diff-bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-same-work", action="store_true",
                    help="skip the same-work DuckDB query (several times the others' time)")
    args = ap.parse_args()

    data = os.path.join(args.data, str(args.rows))
    served, offline = os.path.join(data, "served"), os.path.join(data, "offline.parquet")
    if not os.path.exists(offline):
        print(f"generating {args.rows} rows x 20 features per side in {data}", file=sys.stderr)
        subprocess.run([os.path.join(args.bin, "diff_gen"), "--out", data, "--rows", str(args.rows)], check=True)

    import duckdb  # noqa: F401 (diff.sh installs it; its version goes in the report)
    duck_cmd = [sys.executable, "-c", DUCKDB_CHILD, json.dumps(FEATURES)]
    contenders = [
        ("featurelog diff", [os.path.join(args.bin, "diff_run"), "--served", served,
                             "--offline", offline, "--key", "request_id,item_id"], None),
        ("DuckDB simple", duck_cmd, simple_sql(served, offline)),
    ]
    if not args.no_same_work:
        contenders.append(("DuckDB same work", duck_cmd, same_work_sql(served, offline)))
    runs = {name: [] for name, _, _ in contenders}
    for r in range(args.rounds):
        outputs = {}
        # Rotate the order, so that no contender always runs first (after a cold start or a
        # quiet moment) or last.
        order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
        for name, cmd, stdin in order:
            m = measure(cmd, stdin)
            if m["code"] not in (0, 1):
                print(f"{name} failed ({m['code']}):\n{m['err'][-3000:]}", file=sys.stderr)
                sys.exit(1)
            runs[name].append(m)
            outputs[name] = m["out"]
            print(f"round {r} {name}: wall {m['wall']:.2f} s, cpu {m['cpu']:.2f} s, "
                  f"peak rss {m['rss_mib']:.0f} MiB", file=sys.stderr)
        for name in outputs:
            if name == "featurelog diff":
                continue
            bad = disagreements(outputs["featurelog diff"], outputs[name])
            if bad:
                print(f"featurelog diff and {name} disagree:\n  " + "\n  ".join(bad), file=sys.stderr)
                sys.exit(1)
    rep = json.loads(outputs["featurelog diff"])
    c = rep["coverage"]

    import duckdb as d
    print(f"\n{args.rows} rows per side, 20 features, {args.rounds} rounds (median [min-max]); "
          f"DuckDB {d.__version__}; the same counts on every side: both {c['both']}, "
          f"served only {c['served_only']}, mismatches "
          f"{ {f['name']: f['mismatches'] for f in rep['features'] if f['mismatches']} }\n")
    print("| contender | wall s | CPU s | peak RSS MiB |")
    print("| --- | ---: | ---: | ---: |")
    for name, ms in runs.items():
        print(f"| {name} | {spread([m['wall'] for m in ms], lambda v: f'{v:.2f}')} | "
              f"{spread([m['cpu'] for m in ms], lambda v: f'{v:.2f}')} | "
              f"{spread([m['rss_mib'] for m in ms], lambda v: f'{v:.0f}')} |")
    print("\n| ratio (within each round) | wall | CPU | peak RSS |")
    print("| --- | ---: | ---: | ---: |")
    for other in runs:
        if other == "featurelog diff":
            continue
        ratio = lambda key: [a[key] / b[key] for a, b in zip(runs["featurelog diff"], runs[other])]
        print(f"| diff / {other} | {spread(ratio('wall'), lambda v: f'{v:.2f}x')} | "
              f"{spread(ratio('cpu'), lambda v: f'{v:.2f}x')} | "
              f"{spread(ratio('rss_mib'), lambda v: f'{v:.2f}x')} |")


if __name__ == "__main__":
    main()
