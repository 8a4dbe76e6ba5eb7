"""Writes a Delta table with the `deltalake` package (delta-rs) as a table lives: two appends,
a compaction, then an overwrite of one hour, so that files the table no longer holds stay on
disk (nothing is vacuumed). Prints as JSON the rows the table holds at each version, as delta-rs
reads them, and the rows and data files the directory holds.

usage: write_delta.py TABLE_DIR ROWS

Row i: request_id "r{i // 10}", item_id 1000 + i % 10, price i / 4, partitioned by dt (a date,
2025-11-29) and hr (an integer, 18 + i % 2). Versions: 0 rows [0, ROWS/2), 1 appends
[ROWS/2, ROWS), 2 compacts, 3 overwrites hour 19 with its rows i < ROWS/2 only.
"""

import datetime
import json
import pathlib
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

path, rows = sys.argv[1], int(sys.argv[2])


def batch(indices):
    indices = list(indices)
    return pa.table(
        {
            "request_id": pa.array([f"r{i // 10}" for i in indices], pa.string()),
            "item_id": pa.array([1000 + i % 10 for i in indices], pa.int64()),
            "price": pa.array([i / 4 for i in indices], pa.float64()),
            "dt": pa.array([datetime.date(2025, 11, 29)] * len(indices), pa.date32()),
            "hr": pa.array([18 + i % 2 for i in indices], pa.int32()),
        }
    )


half = rows // 2
write_deltalake(path, batch(range(half)), partition_by=["dt", "hr"])
write_deltalake(path, batch(range(half, rows)), partition_by=["dt", "hr"], mode="append")
DeltaTable(path).optimize.compact()
write_deltalake(
    path,
    batch(i for i in range(half) if i % 2 == 1),
    partition_by=["dt", "hr"],
    mode="overwrite",
    predicate="hr = 19",
)
table = DeltaTable(path)
files = [f for f in pathlib.Path(path).rglob("*.parquet") if "_delta_log" not in f.parts]
json.dump(
    {
        "version": table.version(),
        "rows": [DeltaTable(path, version=v).to_pyarrow_table().num_rows for v in range(table.version() + 1)],
        "files": [len(DeltaTable(path, version=v).file_uris()) for v in range(table.version() + 1)],
        "rows_on_disk": sum(pq.read_metadata(f).num_rows for f in files),
        "files_on_disk": len(files),
    },
    sys.stdout,
)
