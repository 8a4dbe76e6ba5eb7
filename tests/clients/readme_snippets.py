"""Runs the README's "Reading the dataset" snippets for DuckDB, Polars, pyarrow, pandas and Spark,
as a user would paste them, on a real dataset, and prints what each read as JSON.

usage: readme_snippets.py README.md DATASET_DIR [COLUMN]

The rows of the dataset without late/ ("dataset_rows") and in late/ ("late_rows"), counted
apart from the snippets. Per reader: the rows of the whole dataset without late/ ("rows"), the rows of the hour the
snippet's filter names, after pointing the filter at an hour the dataset has ("hour"), the
columns (and DuckDB's and Spark's types), and the rows of the snippet that adds late/
("everything"). With COLUMN, also that column's value in each row, as sorted
[request_id, item_id, value] triples, without late/ ("values") and with it ("everything_values").
Besides: the files a `**/*.parquet` glob matches ("glob", relative to the dataset), and what
Polars says when it is given the dataset's directory itself, hidden names skipped
("polars_root_error"), which the README explains.

The snippets are taken from the README itself, so that a change that breaks them (a renamed
option, a reader that no longer accepts the dataset) fails a test instead of a user. Only the
dataset's path and the hour of the filter are replaced; everything else runs as written. Each
reader's first python block reads the on-time rows; its second one, run after it in the same
scope, adds the late rows.
"""

import glob
import json
import math
import os
import re
import sys

import pyarrow.dataset as ds


def blocks(readme: str, heading: str) -> list:
    """The ```python blocks under `### heading`, up to the next heading."""
    section = readme.split(f"\n### {heading}\n", 1)[1]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def point_at(code: str, root: str, dt: str, hr: int) -> str:
    """The snippet with its example root replaced by `root` and its hour filter by (dt, hr)."""
    code, n = re.subn(r'root = "[^"]*"', f"root = {root!r}", code)
    assert n == 1, "the snippet has no `root = \"...\"` line to point at the dataset"
    y, m, d = (int(p) for p in dt.split("-"))
    day = r"\d{4}-\d{2}-\d{2}"
    dates = [
        (r"pl\.date\(\d+, \d+, \d+\)", f"pl.date({y}, {m}, {d})"),  # Polars
        (rf'== "{day}"', f"== {dt!r}"),  # pyarrow
        (rf"(dt = (?:DATE )?'){day}'", rf"\g<1>{dt}'"),  # Spark, DuckDB
        (rf'\("dt", "=", "{day}"\)', f'("dt", "=", {dt!r})'),  # pandas
    ]
    found = 0
    for pattern, replacement in dates:
        code, n = re.subn(pattern, replacement, code)
        found += n
    assert found == 1, "the snippet has no date filter to point at an hour of the dataset"
    code, n = re.subn(
        r'(pl\.col\("hr"\) == |ds\.field\("hr"\) == |AND hr = |\("hr", "=", )\d+',
        rf"\g<1>{hr}",
        code,
    )
    assert n == 1, "the snippet has no hour filter to point at an hour of the dataset"
    return code


def plain(value):
    """A cell as JSON: numpy and pandas scalars as Python's, NaN and NA as null."""
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict)):
        value = value.item()
    try:
        import pandas as pd

        if value is pd.NA:
            return None
    except ImportError:
        pass
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def triples(rows) -> list:
    return sorted(([r, i, plain(v)] for r, i, v in rows), key=lambda t: (t[0], t[1]))


readme_path, root = sys.argv[1], sys.argv[2]
column = sys.argv[3] if len(sys.argv) > 3 else None
readme = open(readme_path, encoding="utf-8").read()

# An hour the dataset has rows in, and how many: what the snippets' filters must find.
hours = {}
for fragment in ds.dataset(root, format="parquet", partitioning="hive",
                           ignore_prefixes=[".", "_", "late"]).get_fragments():
    parts = dict(re.findall(r"(dt|hr)=([^/]+)", fragment.path))
    key = (parts["dt"], int(parts["hr"]))
    hours[key] = hours.get(key, 0) + fragment.count_rows()
(dt, hr), hour_rows = max(hours.items(), key=lambda kv: kv[1])
late = os.path.isdir(os.path.join(root, "late"))
late_rows = (ds.dataset(os.path.join(root, "late"), format="parquet").count_rows()
             if late else 0)

out = {
    "hour": f"{dt} {hr:02d}",
    "hour_rows": hour_rows,
    "dataset_rows": sum(hours.values()),
    "late_rows": late_rows,
    "glob": sorted(os.path.relpath(p, root)
                   for p in glob.glob(os.path.join(root, "**", "*.parquet"), recursive=True)),
}


def run(heading: str, extra=None) -> dict:
    """Runs the reader's snippets in one scope: the first, then (if `late/` exists or the
    reader does not need it to) the second."""
    code = blocks(readme, heading)
    assert len(code) >= 2, f"### {heading} has no snippet that adds late/"
    scope = dict(extra or {})
    exec(point_at(code[0], root, dt, hr), scope)
    if late or heading != "Spark":
        exec(code[1], scope)
    return scope


scope = run("DuckDB")
rows, everything = scope["rows"], scope.get("everything")
out["duckdb"] = {
    "rows": rows.aggregate("count(*)").fetchall()[0][0],
    "hour": scope["complete"].aggregate("count(*)").fetchall()[0][0],
    "columns": sorted(rows.columns),
    "types": {c: str(t) for c, t in zip(rows.columns, rows.types)},
    "everything": everything.aggregate("count(*)").fetchall()[0][0],
}
if column:
    picked = f'request_id, item_id, "{column}"'
    out["duckdb"]["values"] = triples(rows.select(picked).fetchall())
    out["duckdb"]["everything_values"] = triples(everything.select(picked).fetchall())

scope = run("Polars")
pl = scope["pl"]
rows, everything = scope["rows"], scope["everything"]
out["polars"] = {
    "rows": rows.select(pl.len()).collect().item(),
    "hour": scope["complete"].height,
    "columns": sorted(rows.collect_schema().names()),
    "everything": everything.select(pl.len()).collect().item(),
}
if column:
    for key, frame in [("values", rows), ("everything_values", everything)]:
        out["polars"][key] = triples(frame.select("request_id", "item_id", column).collect().rows())
try:
    # Hidden names skipped, as far as Polars can: the README says why it fails all the same.
    pl.scan_parquet(root, hidden_file_prefix=["_", "."]).collect()
    out["polars_root_error"] = None
except Exception as e:  # noqa: BLE001 (what it says is the point)
    out["polars_root_error"] = str(e)

scope = run("pyarrow")
data, everything = scope["data"], scope["everything"]
out["pyarrow"] = {
    "rows": data.count_rows(),
    "hour": scope["table"].num_rows,
    "columns": sorted(data.schema.names),
    "everything": everything.count_rows(),
}
if column:
    for key, dataset in [("values", data), ("everything_values", everything)]:
        table = dataset.to_table(columns=["request_id", "item_id", column])
        out["pyarrow"][key] = triples(zip(*(table.column(c).to_pylist() for c in table.schema.names)))

scope = run("pandas")
rows, everything = scope["rows"], scope["everything"]
out["pandas"] = {
    "rows": len(rows),
    "hour": len(scope["complete"]),
    "columns": sorted(rows.columns),
    "types": {c: str(t) for c, t in rows.dtypes.items()},
    "everything": len(everything),
}
if column:
    for key, frame in [("values", rows), ("everything_values", everything)]:
        picked = frame[["request_id", "item_id", column]]
        out["pandas"][key] = triples(picked.itertuples(index=False, name=None))

# Spark, as a local session: the snippet takes `spark` from its surroundings, as in a notebook.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession  # noqa: E402 (a JVM starts: only once the others ran)

spark = (SparkSession.builder.master("local[1]").appName("readme-snippets")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.driver.memory", "1g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
scope = run("Spark", {"spark": spark})
rows = scope["rows"]
everything = scope.get("everything", rows)  # without late/, everything is the on-time rows
out["spark"] = {"rows": rows.count(), "hour": scope["complete"].count(),
                "columns": sorted(rows.columns),
                "types": {f.name: f.dataType.simpleString() for f in rows.schema.fields},
                "everything": everything.count()}
if column:
    for key, frame in [("values", rows), ("everything_values", everything)]:
        out["spark"][key] = triples(tuple(r) for r in frame.select("request_id", "item_id", column).collect())
spark.stop()

json.dump(out, sys.stdout)
