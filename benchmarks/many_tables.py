"""Many tables: one micro-batch touching 200 tables against a 1-table batch of the same size.

Both batches hold the same number of canal-json events (the benchmark workload, keys spread over the
tables); each runs through ``replicator mirror --available-now`` in this process (one warm Spark
session, after a warm-up batch), and the Spark jobs of each run are counted in Spark's status store.
A batch costs a fixed number of Spark jobs whatever its tables (the listing of the batch's files); the
per-table work is the delta-rs MERGE and state commits, run in a thread pool. Not a test; ``make bench``
runs it, results in benchmarks/LOG.md:

    python benchmarks/many_tables.py [--events 100000] [--tables 200]

``--new-tables N``: the cost of creating a table instead (limits.new_tables_per_batch bounds how many one
batch may create): one batch of N events, each a table of its own that has no mirror yet; prints the
batch's time per new table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import events

REPO = Path(__file__).resolve().parent.parent


def write(folder: Path, count: int, tables: int) -> None:
    folder.mkdir(parents=True)
    with (folder / "events.jsonl").open("wb") as f:
        for message in events(count, max(count // 10, tables)):
            key = int(message["data"][0]["id"])
            message["table"] = f"t{key % tables:03d}"
            f.write(orjson.dumps(message) + b"\n")


def write_new(folder: Path, tables: int) -> None:
    """One event per table, each table new."""
    folder.mkdir(parents=True)
    with (folder / "events.jsonl").open("wb") as f:
        for i, message in enumerate(events(tables, tables)):
            message["table"] = f"n{i:06d}"
            f.write(orjson.dumps(message) + b"\n")


def run_once(spark, work: Path, count: int, tables: int, new: bool = False) -> dict:  # type: ignore[no-untyped-def]
    from replicator.commands.runner import MirrorJob
    from replicator.config import parse_config

    shutil.rmtree(work, ignore_errors=True)
    if new:
        write_new(work / "landing", tables)
    else:
        write(work / "landing", count, tables)
    config = parse_config(
        {
            "name": f"many-{tables}",
            "source": {"type": "files", "path": "landing", "dialect": "canal-json"},
            "target": {"path": "lake"},
            "state": {"path": "state"},
        },
        "many_tables",
        work,
    )
    store = spark.sparkContext._jsc.sc().statusStore()  # every job, the streaming query's included
    jobs_before = store.jobsList(None).size()
    job = MirrorJob(config, spark)
    summaries = []
    job._applied = summaries.append  # type: ignore[method-assign]  # each batch's summary, once applied
    started = time.monotonic()
    job.run(available_now=True)
    wall = time.monotonic() - started
    jobs = store.jobsList(None).size() - jobs_before
    [batch] = summaries
    return {
        "tables": tables,
        "events": count,
        "wall_s": round(wall, 2),
        "batch_ms": batch.duration_ms,
        "phases_ms": batch.phases_ms,
        "spark_jobs": jobs,
        "tables_written": len(batch.tables),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--new-tables", type=int, default=0, help="measure creating N tables in one batch")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "many-tables"))
    args = parser.parse_args()
    from replicator.spark import get_spark

    spark = get_spark()
    root = Path(args.workdir)
    run_once(spark, root / "warmup", 1000, 2)
    if args.new_tables:
        run = run_once(spark, root / f"new{args.new_tables}", args.new_tables, args.new_tables, new=True)
        run["ms_per_new_table"] = round(run["batch_ms"] / run["tables_written"], 1)
        print(json.dumps(run, indent=1))
        (root / "new-tables.json").write_text(json.dumps(run, indent=1))
        return
    runs = [run_once(spark, root / f"t{n}", args.events, n) for n in (1, args.tables)]
    result = {"runs": runs, "ratio": round(runs[1]["batch_ms"] / runs[0]["batch_ms"], 2)}
    print(json.dumps(result, indent=1))
    (root / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
