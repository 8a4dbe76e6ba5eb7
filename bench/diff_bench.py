"""Driver of bench/diff.sh: `featurelog diff` against the same keyed comparison in DuckDB.

Each contender runs as a child process, measured from outside the same way: wall time, user+
system CPU time and peak RSS from wait4(2). DuckDB runs in its own Python process with its
default settings (all cores, memory limit 80% of RAM).
"""

import argparse
import json
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
    (abs 0, rel 1e-6), null on one side only, and the top mismatching pairs of each feature.

    The sides are views over the Parquet files, read in place as the diff reads them (copying
    them into temporary tables first would charge DuckDB for a load the diff does not do). The
    joined rows are kept once in a temporary table with only the columns the two queries over
    them read, since both the counts and the top pairs need them."""
    per = []
    for f in FEATURES:
        if f in FLOATS:
            differ = (f"(s_{f} IS NOT NULL AND o_{f} IS NOT NULL AND abs(s_{f} - o_{f}) > "
                      f"1e-6 * greatest(abs(s_{f}), abs(o_{f})))")
        else:
            differ = f"(s_{f} IS NOT NULL AND o_{f} IS NOT NULL AND s_{f} <> o_{f})"
        per.append(f"count(*) FILTER (WHERE both_sides AND {differ}) AS {f}_differ")
        per.append(f"count(*) FILTER (WHERE both_sides AND (s_{f} IS NULL) <> (o_{f} IS NULL)) AS {f}_null_one_side")
    cols = ", ".join(FEATURES)
    pairs = " UNION ALL ".join(
        f"(SELECT '{f}' AS feature, CAST(s_{f} AS VARCHAR) AS served, CAST(o_{f} AS VARCHAR) AS offline, count(*) AS n "
        f"FROM j WHERE both_sides AND s_{f} IS DISTINCT FROM o_{f} GROUP BY ALL ORDER BY n DESC LIMIT 10)"
        for f in FEATURES
    )
    sel_s = ", ".join(f"s.{f} AS s_{f}" for f in FEATURES)
    sel_o = ", ".join(f"o.{f} AS o_{f}" for f in FEATURES)
    return f"""
CREATE VIEW s AS SELECT request_id, item_id, {cols} FROM read_parquet('{served}/**/*.parquet', hive_partitioning = true);
CREATE VIEW o AS SELECT request_id, item_id, {cols} FROM read_parquet('{offline}');
SELECT 'rows', (SELECT count(*) FROM s), (SELECT count(*) FROM o),
       (SELECT count(*) - count(DISTINCT (request_id, item_id)) FROM s),
       (SELECT count(*) - count(DISTINCT (request_id, item_id)) FROM o);
CREATE TEMP TABLE j AS
  SELECT s.request_id IS NOT NULL AND o.request_id IS NOT NULL AS both_sides,
         s.request_id IS NULL AS offline_only, o.request_id IS NULL AS served_only, {sel_s}, {sel_o}
  FROM s FULL OUTER JOIN o ON s.request_id = o.request_id AND s.item_id = o.item_id;
SELECT 'counts', count(*) FILTER (WHERE both_sides) AS both, count(*) FILTER (WHERE served_only) AS served_only,
       count(*) FILTER (WHERE offline_only) AS offline_only, {", ".join(per)}
FROM j;
SELECT 'pair', * FROM ({pairs}) WHERE feature IS NOT NULL;
"""


DUCKDB_CHILD = r"""
import json, sys, duckdb
NAMES = [f"f32_{i}" for i in range(8)] + [f"f64_{i}" for i in range(4)] + [f"i64_{i}" for i in range(4)] + [f"str_{i}" for i in range(4)]
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
        if row and row[0] == 'rows':
            out['served_rows'], out['offline_rows'], out['served_dups'], out['offline_dups'] = row[1:]
        elif row and row[0] == 'counts':
            out['both'], out['served_only'], out['offline_only'] = row[1:4]
            # A mismatch, as the diff counts it: values apart beyond the tolerance, or null on
            # one side only.
            out['mismatches'] = {n: d + z for n, d, z in zip(NAMES, row[4::2], row[5::2]) if d + z}
        elif row and row[0] == 'pair':
            out.setdefault('pairs', 0)
            out['pairs'] += 1
print(json.dumps(out))
"""


def agree(diff_out: str, duck_out: str) -> list:
    """Where the two contenders' counts differ (nothing, when both did the same comparison)."""
    import json
    rep, duck = json.loads(diff_out), json.loads(duck_out)
    c = rep["coverage"]
    mine = {
        "served_rows": c["served_rows"], "offline_rows": c["offline_rows"],
        "served_dups": c["served_duplicate_keys"], "offline_dups": c["offline_duplicate_keys"],
        "both": c["both"], "served_only": c["served_only"], "offline_only": c["offline_only"],
        "mismatches": {f["name"]: f["mismatches"] for f in rep["features"] if f["mismatches"]},
    }
    return [f"{k}: diff {v} duckdb {duck.get(k)}" for k, v in mine.items() if duck.get(k) != v]


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
        outputs = {}
        for name, cmd, stdin in (("featurelog diff", diff_cmd, None), ("duckdb", duck_cmd, sql)):
            m = measure(cmd, stdin)
            if m["code"] not in (0, 1):
                print(f"{name} failed ({m['code']}):\n{m['err'][-3000:]}", file=sys.stderr)
                sys.exit(1)
            rows.append((name, r, m))
            print(f"round {r} {name}: wall {m['wall']:.2f} s, cpu {m['cpu']:.2f} s, "
                  f"peak rss {m['rss_mib']:.0f} MiB", file=sys.stderr)
            outputs[name] = m["out"]
        disagree = agree(outputs["featurelog diff"], outputs["duckdb"])
        if disagree:
            print("the two contenders disagree:\n  " + "\n  ".join(disagree), file=sys.stderr)
            sys.exit(1)
        rep = json.loads(outputs["featurelog diff"])
        print(f"  same counts: both {rep['coverage']['both']}, served only {rep['coverage']['served_only']}, "
              f"mismatches {dict((f['name'], f['mismatches']) for f in rep['features'] if f['mismatches'])}",
              file=sys.stderr)

    def best(name, key):
        return min(m[key] for n, _, m in rows if n == name)

    print(f"\nrows per side: {args.rows}, 20 features, best of {args.rounds} round(s), the same counts on both sides\n")
    print("| contender | wall s | cpu s | peak RSS MiB |")
    print("| --- | ---: | ---: | ---: |")
    for name in ("featurelog diff", "duckdb"):
        print(f"| {name} | {best(name, 'wall'):.2f} | {best(name, 'cpu'):.2f} | {best(name, 'rss_mib'):.0f} |")
    print(f"| ratio diff/duckdb | {best('featurelog diff', 'wall') / best('duckdb', 'wall'):.2f}x | "
          f"{best('featurelog diff', 'cpu') / best('duckdb', 'cpu'):.2f}x | "
          f"{best('featurelog diff', 'rss_mib') / best('duckdb', 'rss_mib'):.2f}x |")


if __name__ == "__main__":
    main()
