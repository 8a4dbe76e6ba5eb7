"""Driver of bench/diff.sh: `featurelog diff` against the same keyed comparison in DuckDB.

Each contender runs as a child process, measured from outside the same way: wall time, user+
system CPU time and peak RSS from wait4(2). DuckDB runs in its own Python process with its
default settings (all cores, memory limit 80% of RAM).
"""

import argparse
import os
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


def duckdb_sql(served: str, offline: str) -> str:
    """Coverage, duplicate keys and per-feature match counts with the diff's default tolerance
    (abs 0, rel 1e-6), null on one side only, and the top mismatching pairs of each feature."""
    per = []
    for f in FEATURES:
        if f in FLOATS:
            differ = (f"(s.{f} IS NOT NULL AND o.{f} IS NOT NULL AND abs(s.{f} - o.{f}) > "
                      f"1e-6 * greatest(abs(s.{f}), abs(o.{f})))")
        else:
            differ = f"(s.{f} IS NOT NULL AND o.{f} IS NOT NULL AND s.{f} <> o.{f})"
        per.append(f"count(*) FILTER (WHERE both_sides AND {differ}) AS {f}_differ")
        per.append(f"count(*) FILTER (WHERE both_sides AND (s.{f} IS NULL) <> (o.{f} IS NULL)) AS {f}_null_one_side")
    cols_s = ", ".join(f"{f}" for f in FEATURES)
    pairs = " UNION ALL ".join(
        f"(SELECT '{f}' AS feature, CAST(s_{f} AS VARCHAR) AS served, CAST(o_{f} AS VARCHAR) AS offline, count(*) AS n "
        f"FROM j WHERE s_{f} IS DISTINCT FROM o_{f} GROUP BY ALL ORDER BY n DESC LIMIT 10)"
        for f in FEATURES
    )
    sel_s = ", ".join(f"s.{f} AS s_{f}" for f in FEATURES)
    sel_o = ", ".join(f"o.{f} AS o_{f}" for f in FEATURES)
    return f"""
CREATE TEMP TABLE s AS SELECT request_id, item_id, {cols_s} FROM read_parquet('{served}/**/*.parquet', hive_partitioning = true);
CREATE TEMP TABLE o AS SELECT request_id, item_id, {cols_s} FROM read_parquet('{offline}');
SELECT (SELECT count(*) FROM s) AS served_rows, (SELECT count(*) FROM o) AS offline_rows,
       (SELECT count(*) - count(DISTINCT (request_id, item_id)) FROM s) AS served_dups,
       (SELECT count(*) - count(DISTINCT (request_id, item_id)) FROM o) AS offline_dups;
CREATE TEMP TABLE j AS
  SELECT s.request_id IS NOT NULL AND o.request_id IS NOT NULL AS both_sides,
         s.request_id IS NULL AS offline_only, o.request_id IS NULL AS served_only, {sel_s}, {sel_o}
  FROM s FULL OUTER JOIN o ON s.request_id = o.request_id AND s.item_id = o.item_id;
SELECT count(*) FILTER (WHERE both_sides) AS both, count(*) FILTER (WHERE served_only) AS served_only,
       count(*) FILTER (WHERE offline_only) AS offline_only,
       {", ".join(p.replace("s." , "s_").replace("o.", "o_") for p in per)}
FROM j;
SELECT * FROM ({pairs}) WHERE feature IS NOT NULL;
"""


DUCKDB_CHILD = r"""
import sys, duckdb
NAMES = [f"f32_{i}" for i in range(8)] + [f"f64_{i}" for i in range(4)] + [f"i64_{i}" for i in range(4)] + [f"str_{i}" for i in range(4)]
con = duckdb.connect()
con.execute('SET enable_progress_bar = false')
results = []
for stmt in [s for s in sys.stdin.read().split(';') if s.strip()]:
    r = con.execute(stmt)
    try:
        results.append(r.fetchall())
    except Exception:
        pass
counts = [r for r in results if r and len(r[0]) > 10][0][0]
print('both', counts[0], 'served_only', counts[1], 'offline_only', counts[2], 'differ', {n: c for n, c in zip(NAMES, counts[3::2]) if c})
"""


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
    code = os.waitstatus_to_exitcode(status)
    return {
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "rss_mib": ru.ru_maxrss / 1024,
        "code": code,
        "out": out.decode(errors="replace"),
        "err": err.decode(errors="replace"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="directory of the release binaries")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/featurelog/diff-bench"))
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()

    data = os.path.join(args.data, str(args.rows))
    served, offline = os.path.join(data, "served"), os.path.join(data, "offline.parquet")
    if not os.path.exists(offline):
        print(f"generating {args.rows} rows x 20 features per side in {data}", file=sys.stderr)
        subprocess.run([os.path.join(args.bin, "diff_gen"), "--out", data, "--rows", str(args.rows)], check=True)

    diff_cmd = [os.path.join(args.bin, "diff_run"), "--served", served, "--offline", offline,
                "--key", "request_id,item_id"]
    duck_cmd = [sys.executable, "-c", DUCKDB_CHILD]
    sql = duckdb_sql(served, offline)
    rows = []
    for r in range(args.rounds):
        for name, cmd, stdin in (("featurelog diff", diff_cmd, None), ("duckdb", duck_cmd, sql)):
            m = measure(cmd, stdin)
            if m["code"] not in (0, 1):
                print(f"{name} failed ({m['code']}):\n{m['err'][-3000:]}", file=sys.stderr)
                sys.exit(1)
            rows.append((name, r, m))
            print(f"round {r} {name}: wall {m['wall']:.2f} s, cpu {m['cpu']:.2f} s, "
                  f"peak rss {m['rss_mib']:.0f} MiB", file=sys.stderr)
            if name == "duckdb":
                print(f"  duckdb coverage/mismatch row: {m['out'].strip()[:300]}", file=sys.stderr)
            else:
                import json
                rep = json.loads(m["out"])
                c = rep["coverage"]
                mism = {f["name"]: f["mismatches"] for f in rep["features"] if f["mismatches"]}
                print(f"  diff: both {c['both']} served_only {c['served_only']} offline_only {c['offline_only']} "
                      f"mismatches {mism}", file=sys.stderr)

    def best(name, key):
        return min(m[key] for n, _, m in rows if n == name)

    print(f"\nrows per side: {args.rows}, 20 features, best of {args.rounds} round(s)\n")
    print("| contender | wall s | cpu s | peak RSS MiB |")
    print("| --- | ---: | ---: | ---: |")
    for name in ("featurelog diff", "duckdb"):
        print(f"| {name} | {best(name, 'wall'):.2f} | {best(name, 'cpu'):.2f} | {best(name, 'rss_mib'):.0f} |")
    print(f"| ratio diff/duckdb | {best('featurelog diff', 'wall') / best('duckdb', 'wall'):.2f}x | "
          f"{best('featurelog diff', 'cpu') / best('duckdb', 'cpu'):.2f}x | "
          f"{best('featurelog diff', 'rss_mib') / best('duckdb', 'rss_mib'):.2f}x |")


if __name__ == "__main__":
    main()
