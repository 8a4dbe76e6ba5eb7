"""Reads every version of a featurelog Delta table with the `deltalake` package (time travel)
and prints, as JSON, per version: its operation, the completeness its commit records, the
number of files, and the (request id, item id) of every row, sorted.

usage: delta_versions.py TABLE_DIR
"""

import json
import sys

import deltalake

path = sys.argv[1]
latest = deltalake.DeltaTable(path)
history = {h["version"]: h for h in latest.history()}
versions = []
for version in range(latest.version() + 1):
    table = deltalake.DeltaTable(path, version=version)
    rows = table.to_pyarrow_table(columns=["request_id", "item_id"]).to_pylist()
    commit = history.get(version, {})
    parameters = commit.get("operationParameters") or {}
    versions.append(
        {
            "version": version,
            "operation": commit.get("operation"),
            "complete_through": parameters.get("featurelog.completeThrough"),
            "files": sorted(table.file_uris()),
            "rows": sorted([r["request_id"], r["item_id"]] for r in rows),
        }
    )
json.dump(versions, sys.stdout)
