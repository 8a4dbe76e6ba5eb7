"""Runs the README's "Reading the dataset" snippets for pyarrow, Polars and Spark, as a user
would paste them, on a real dataset, and prints what each read as JSON: the rows of the whole
dataset, the rows of the hour the snippet's filter names (after pointing the filter at an hour
the dataset has), and the columns (with Spark's types).

usage: readme_snippets.py README.md DATASET_DIR

The snippets are taken from the README itself, so that a change that breaks them (a renamed
option, a reader that no longer accepts the dataset) fails a test instead of a user. Only the
dataset's path and the hour of the filter are replaced; everything else runs as written.
"""

import json
import os
import re
import sys

import pyarrow.dataset as ds


def snippet(readme: str, heading: str) -> str:
    """The first ```python block under `### heading`."""
    section = readme.split(f"\n### {heading}\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def point_at(code: str, root: str, dt: str, hr: int) -> str:
    """The snippet with its example root replaced by `root` and its hour filter by (dt, hr)."""
    code, n = re.subn(r'root = "[^"]*"', f"root = {root!r}", code)
    assert n == 1, "the snippet has no `root = \"...\"` line to point at the dataset"
    y, m, d = (int(p) for p in dt.split("-"))
    code, n = re.subn(r"pl\.date\(\d+, \d+, \d+\)", f"pl.date({y}, {m}, {d})", code)
    code, k = re.subn(r'== "\d{4}-\d{2}-\d{2}"', f"== {dt!r}", code)
    code, j = re.subn(r"dt = '\d{4}-\d{2}-\d{2}'", f"dt = '{dt}'", code)
    assert n + k + j == 1, "the snippet has no date filter to point at an hour of the dataset"
    code, n = re.subn(
        r'(pl\.col\("hr"\) == |ds\.field\("hr"\) == |AND hr = )\d+', rf"\g<1>{hr}", code
    )
    assert n == 1, "the snippet has no hour filter to point at an hour of the dataset"
    return code


readme_path, root = sys.argv[1], sys.argv[2]
readme = open(readme_path, encoding="utf-8").read()

# An hour the dataset has rows in, and how many: what the snippets' filters must find.
hours = {}
for fragment in ds.dataset(root, format="parquet", partitioning="hive",
                           ignore_prefixes=[".", "_", "late"]).get_fragments():
    parts = dict(re.findall(r"(dt|hr)=([^/]+)", fragment.path))
    key = (parts["dt"], int(parts["hr"]))
    hours[key] = hours.get(key, 0) + fragment.count_rows()
(dt, hr), hour_rows = max(hours.items(), key=lambda kv: kv[1])

out = {"hour": f"{dt} {hr:02d}", "hour_rows": hour_rows,
       "dataset_rows": sum(hours.values())}

scope = {}
exec(point_at(snippet(readme, "pyarrow"), root, dt, hr), scope)
out["pyarrow"] = {"rows": scope["data"].count_rows(), "hour": scope["table"].num_rows,
                  "columns": sorted(scope["data"].schema.names)}

scope = {}
exec(point_at(snippet(readme, "Polars"), root, dt, hr), scope)
pl = scope["pl"]
out["polars"] = {"rows": scope["rows"].select(pl.len()).collect().item(),
                 "hour": scope["complete"].height,
                 "columns": sorted(scope["rows"].collect_schema().names())}

# Spark, as a local session: the snippet takes `spark` from its surroundings, as in a notebook.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession  # noqa: E402 (a JVM starts: only once the others ran)

spark = (SparkSession.builder.master("local[1]").appName("readme-snippets")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.driver.memory", "1g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
scope = {"spark": spark}
exec(point_at(snippet(readme, "Spark"), root, dt, hr), scope)
out["spark"] = {"rows": scope["rows"].count(), "hour": scope["complete"].count(),
                "columns": sorted(scope["rows"].columns),
                "types": {f.name: f.dataType.simpleString() for f in scope["rows"].schema.fields}}
spark.stop()

json.dump(out, sys.stdout)
