"""Reads a featurelog Delta table with two independent readers, the `deltalake` package
(delta-rs) and Polars' `read_delta`, and prints what each sees as JSON: the table's version and
schema, and the rows (request id, item id, clicks, dt, hr), sorted.

usage: read_delta.py TABLE_DIR_OR_S3_URL

For an `s3://` table, the endpoint and credentials come from the environment as the AWS tools
read them (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).
"""

import json
import os
import sys

import deltalake
import deltalake.exceptions
import polars as pl

COLUMNS = ["request_id", "item_id", "clicks", "dt", "hr"]


def plain(row):
    return [v if isinstance(v, (int, str, type(None))) else str(v) for v in row]


path = sys.argv[1]
options = None
if path.startswith("s3://"):
    options = {
        k.lower(): os.environ[k]
        for k in ["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP"]
        if k in os.environ
    }
try:
    table = deltalake.DeltaTable(path, storage_options=options)
except deltalake.exceptions.TableNotFoundError:
    # Not created yet (a test polling for rows): nothing to read.
    json.dump({"version": None, "partitions": [], "schema": {}, "deltalake": [], "polars": []}, sys.stdout)
    sys.exit(0)
arrow = table.to_pyarrow_table(columns=COLUMNS)
by_deltalake = sorted(plain([r[c] for c in COLUMNS]) for r in arrow.to_pylist())
frame = pl.read_delta(path, storage_options=options).select(COLUMNS)
by_polars = sorted(plain(list(r)) for r in frame.rows())
json.dump(
    {
        "version": table.version(),
        "partitions": table.metadata().partition_columns,
        "schema": {f.name: str(f.type) for f in arrow.schema},
        "deltalake": by_deltalake,
        "polars": by_polars,
    },
    sys.stdout,
)
