"""Reads a featurelog dataset with pyarrow (an independent reader), every file's columns
unified into one schema, and prints that schema and the rows as JSON, sorted by request and
item id.

usage: read_dataset.py DATASET_DIR
"""

import json
import math
import sys

import pyarrow as pa
import pyarrow.dataset as ds


def plain(value):
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value == 0.0 and math.copysign(1.0, value) < 0:
            return "-0.0"
    if isinstance(value, (list, tuple)):
        # A map column reads as a list of (key, value) tuples.
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


# As a training job over a dataset whose files gained columns over time reads it: one schema
# unified from every file's (which fails if a name has two types in two files).
dataset = ds.dataset(sys.argv[1], format="parquet", partitioning="hive")
schema = pa.unify_schemas([dataset.schema] + [f.physical_schema for f in dataset.get_fragments()])
table = ds.dataset(sys.argv[1], format="parquet", partitioning="hive", schema=schema).to_table()
rows = [{k: plain(v) for k, v in row.items()} for row in table.to_pylist()]
rows.sort(key=lambda r: (r["request_id"], r["item_id"]))
json.dump({"schema": {f.name: str(f.type) for f in table.schema}, "rows": rows}, sys.stdout)
