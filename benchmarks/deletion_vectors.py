"""Issue 32's uniform-keys target: a batch's guarded MERGE into a delta-rs mirror with deletion vectors
(``target.deletion_vectors``: the engine's own commit, replicator.sinks.vectors) against delta-rs's
copy-on-write MERGE, on the same table and batches, through DeltaRsWriter.merge_guarded (the apply
path's write); then both mirrors are read through delta-rs and through Delta for Spark and must be equal.

The table: ``--rows`` rows in key order in files of 250,000 (as benchmarks/steady_state.py's mirror),
integer keys, typed columns; ``--batches`` batches of ``--events`` net changes per case: ``hot`` the
newest 5% of the keys, ``uniform`` all of them; 5% inserts of new keys, 10% deletes, 2% stale (older
than the mirror's row: the guard drops them). Times are of the write alone (the batch's decode and fold
are benchmarks/steady_state.py's); the medians leave out the first batch.

    python benchmarks/deletion_vectors.py                  # 5M rows, 3 batches of 100k per case
    python benchmarks/deletion_vectors.py --rows 500000 --events 20000 --no-spark
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
VECTORS = {"delta.enableDeletionVectors": "true"}
ROWS_PER_FILE = 250_000
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("status", pa.string()),
        ("updated", pa.timestamp("us", "UTC")),
        ("_cdc_op", pa.string()),
        ("_cdc_seq", pa.string()),
    ]
)


def apply(writer, batch: pa.Table, number: int) -> dict:  # type: ignore[no-untyped-def]
    """The apply path's guarded MERGE of one batch (replicator.sinks.delta_rs.DeltaRsWriter.merge_guarded):
    delta-rs's copy-on-write MERGE, or with ``delta.enableDeletionVectors`` the engine's vectors."""
    from replicator.sinks.base import Txn

    started = time.perf_counter()
    result = writer.merge_guarded(batch, ["id"], "_cdc_seq", "_cdc_op", Txn("bench", number))
    return {
        "seconds": time.perf_counter() - started,
        "changed": result.inserted + result.updated + result.deleted,
        "rows_copied": result.rows_copied,
    }


def mirror_rows(rng: random.Random, keys: np.ndarray, seq: str, op: str | list[str]) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "name": pa.array([f"customer-{k}-{rng.randrange(1000)}" for k in keys.tolist()]),
            "amount": pa.array([rng.randrange(10_000_000) for _ in range(n)], pa.int64())
            .cast(pa.decimal128(21, 2))
            .cast(pa.decimal128(12, 2)),
            "status": pa.array([rng.choice(["new", "paid", "shipped", "done"]) for _ in range(n)]),
            "updated": pa.array(np.full(n, 1_700_000_000_000_000, "datetime64[us]")).cast(
                pa.timestamp("us", "UTC")
            ),
            "_cdc_op": pa.array([op] * n if isinstance(op, str) else op),
            "_cdc_seq": pa.array([seq] * n),
        },
        schema=SCHEMA,
    )


def build(root: Path, rows: int, vectors: bool) -> None:
    from deltalake import DeltaTable, write_deltalake

    DeltaTable.create(str(root), SCHEMA, configuration=VECTORS if vectors else None)
    rng = random.Random(1)
    for start in range(0, rows, ROWS_PER_FILE):
        keys = np.arange(start, min(start + ROWS_PER_FILE, rows))
        write_deltalake(str(root), mirror_rows(rng, keys, "0001", "insert"), mode="append")


def batches(rows: int, events: int, count: int, case: str, rng: random.Random) -> list[pa.Table]:
    out, next_key = [], rows
    for b in range(count):
        space = range(int(rows * 0.95), rows) if case == "hot" else range(rows)
        keys = np.array(
            rng.sample(space, events - events // 20) + list(range(next_key, next_key + events // 20))
        )
        next_key += events // 20
        ops = ["insert" if k >= rows else ("delete" if i % 10 == 0 else "update") for i, k in enumerate(keys)]
        batch = mirror_rows(rng, keys, f"0002.{case}.{b:04d}", ops)
        stale = np.arange(events) % 50 == 1  # older than the mirror's rows: the guard drops them
        out.append(batch.set_column(6, "_cdc_seq", pc.if_else(pa.array(stale), "0000", batch["_cdc_seq"])))
    return out


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    return a.sort_by("id").equals(b.select(a.column_names).cast(a.schema).sort_by("id"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true", help="skip the check through Delta for Spark")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "deletion_vectors"))
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from deltalake import DeltaTable

    from replicator.sinks.delta_rs import DeltaRsWriter, read_table

    work = Path(args.workdir)
    result: dict = {"rows": args.rows, "events": args.events, "cases": {}}
    for way in ("merge", "vectors"):
        base = work / f"base-{args.rows}-{way}"
        if not (base / "_delta_log").exists():
            shutil.rmtree(base, ignore_errors=True)
            build(base, args.rows, vectors=way == "vectors")
    for case in ("hot", "uniform"):
        cow, dv = work / f"{case}-merge", work / f"{case}-vectors"
        for way, copy in (("merge", cow), ("vectors", dv)):
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(work / f"base-{args.rows}-{way}", copy)
        writers = {"merge": DeltaRsWriter(cow), "vectors": DeltaRsWriter(dv, VECTORS)}
        runs = []
        for number, batch in enumerate(batches(args.rows, args.events, args.batches, case, random.Random(7))):
            runs.append({way: apply(writer, batch, number) for way, writer in writers.items()})
            print(case, json.dumps(runs[-1]), flush=True)
        same = same_rows(read_table(DeltaTable(str(cow))), read_table(DeltaTable(str(dv))))
        result["cases"][case] = {"runs": runs, "delta_rs_reads_equal": same}
        if not same:
            print(f"{case}: the two mirrors differ (delta-rs reads)", file=sys.stderr)
            return 1
    if not args.no_spark:
        os.environ["REPLICATOR_SPARK_JARS"] = "all"
        from replicator.spark import get_spark

        spark = get_spark()
        for case in ("hot", "uniform"):
            cow = spark.read.format("delta").load(str(work / f"{case}-merge"))
            dv = spark.read.format("delta").load(str(work / f"{case}-vectors"))
            differ = cow.exceptAll(dv).count() + dv.exceptAll(cow).count()
            result["cases"][case]["spark_reads_equal"] = differ == 0
            if differ:
                print(f"{case}: the two mirrors differ by {differ} rows (Spark reads)", file=sys.stderr)
                return 1
    for found in result["cases"].values():
        later = found["runs"][1:] or found["runs"]
        found["median_seconds"] = {
            way: float(np.median([r[way]["seconds"] for r in later])) for way in ("merge", "vectors")
        }
    hot, uniform = (result["cases"][c]["median_seconds"] for c in ("hot", "uniform"))
    result["uniform_over_hot"] = {way: uniform[way] / hot[way] for way in ("merge", "vectors")}
    (work / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result["cases"][k]["median_seconds"] for k in result["cases"]}))
    print(json.dumps({"uniform_over_hot": result["uniform_over_hot"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
