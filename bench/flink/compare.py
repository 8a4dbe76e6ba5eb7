"""Compares the joiner's dataset with Flink's: the same rows, keyed by (request_id, item_id),
with the same values in every column both write and in the same dt/hr partition. Prints one
`compare` line (rows of each, and whether they match) and the first differences; exits 1 when
they differ.

Usage: compare.py <joiner dataset> <flink dataset>
"""

import glob
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def read(root: str, pattern: str) -> pa.Table:
    """Every data file under root's dt=/hr= directories, with its partition as columns."""
    tables = []
    for path in sorted(glob.glob(os.path.join(root, "dt=*", "hr=*", pattern))):
        if os.path.basename(path).startswith("."):
            continue  # Flink's in-progress files: not committed
        t = pq.read_table(path)
        hr_dir = os.path.dirname(path)
        dt = os.path.basename(os.path.dirname(hr_dir)).removeprefix("dt=")
        hr = os.path.basename(hr_dir).removeprefix("hr=")
        t = t.append_column("dt", pa.array([dt] * t.num_rows, pa.string()))
        t = t.append_column("hr", pa.array([hr] * t.num_rows, pa.string()))
        tables.append(t)
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def normalise(t: pa.Table, columns: list[str]) -> pa.Table:
    """The shared columns with one type each: timestamps as epoch microseconds (Flink's
    carry no UTC annotation), integers as int64."""
    out = {}
    for name in columns:
        c = t.column(name)
        if pa.types.is_timestamp(c.type):
            c = c.cast(pa.timestamp("us")).cast(pa.int64())
        elif pa.types.is_integer(c.type):
            c = c.cast(pa.int64())
        out[name] = c
    table = pa.table(out)
    return table.sort_by([("request_id", "ascending"), ("item_id", "ascending")])


def main() -> int:
    joiner = read(sys.argv[1], "*.parquet")
    flink = read(sys.argv[2], "part-*")
    shared = [c for c in joiner.column_names if c in flink.column_names]
    only_joiner = [c for c in joiner.column_names if c not in flink.column_names]
    differences = []
    if joiner.num_rows != flink.num_rows:
        differences.append(f"rows: joiner {joiner.num_rows}, flink {flink.num_rows}")
    else:
        j, f = normalise(joiner, shared), normalise(flink, shared)
        for name in shared:
            equal = pc.equal(j.column(name), f.column(name))
            # Both null counts as equal; one null does not.
            both_null = pc.and_(pc.is_null(j.column(name)), pc.is_null(f.column(name)))
            same = pc.or_kleene(pc.fill_null(equal, False), both_null)
            bad = len(same) - pc.sum(same.cast(pa.int64())).as_py() if len(same) else 0
            if bad:
                first = pc.index(same, False).as_py()
                differences.append(
                    f"{name}: {bad} rows differ, first {j.column('request_id')[first]} "
                    f"{j.column('item_id')[first]}: joiner {j.column(name)[first]}, "
                    f"flink {f.column(name)[first]}"
                )
        keys = pc.binary_join_element_wise(j.column("request_id"), j.column("item_id"), "/")
        if pc.count_distinct(keys).as_py() != j.num_rows:
            differences.append("joiner: repeated (request_id, item_id) keys")
    print(
        f"compare joiner_rows={joiner.num_rows} flink_rows={flink.num_rows} "
        f"columns_compared={len(shared)} match={'yes' if not differences else 'no'} "
        f"joiner_only_columns={','.join(only_joiner) or '-'}"
    )
    for d in differences[:10]:
        print(f"  difference: {d}")
    return 0 if not differences else 1


if __name__ == "__main__":
    sys.exit(main())
