"""Reads a featurelog dataset with pyarrow (an independent reader) and prints its schema and
rows as JSON, sorted by request and item id.

usage: read_dataset.py DATASET_DIR
"""

import json
import math
import sys

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


table = ds.dataset(sys.argv[1], format="parquet", partitioning="hive").to_table()
rows = [{k: plain(v) for k, v in row.items()} for row in table.to_pylist()]
rows.sort(key=lambda r: (r["request_id"], r["item_id"]))
json.dump({"schema": {f.name: str(f.type) for f in table.schema}, "rows": rows}, sys.stdout)
