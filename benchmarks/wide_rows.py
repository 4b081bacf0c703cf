"""Wide rows: one row of 1,000 / 2,000 / 4,096 columns (MySQL's most) inserted, then updated, each a
micro-batch through ``replicator mirror --available-now`` in this process (one warm Spark session).

delta-rs's MERGE plans every column (its cost grew with the square of the columns: 1,000 columns 19.8 s,
2,000 86.5 s); a mirror of sinks.vectors.WIDE_COLUMNS columns or more is MERGEd by rewriting its changed
files in Arrow instead. Not a test; results in benchmarks/LOG.md ("Wide rows"):

    python benchmarks/wide_rows.py [--columns 1000 2000 4096]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent


def message(columns: int, kind: str, es: int, tag: str) -> bytes:
    names = [f"c{i}" for i in range(columns - 1)]
    types = {"id": "int(11)", **dict.fromkeys(names, "varchar(32)")}
    row = {"id": "1", **{n: f"{tag}-{n}" for n in names}}
    body = {
        "data": [row],
        "database": "wide",
        "table": f"t{columns}",
        "es": es,
        "id": es,
        "isDdl": False,
        "mysqlType": types,
        "sqlType": dict.fromkeys(types, 12),
        "old": [{"c0": "x"}] if kind == "UPDATE" else None,
        "pkNames": ["id"],
        "sql": "",
        "ts": es,
        "type": kind,
    }
    return orjson.dumps(body) + b"\n"


def batch(spark, work: Path, columns: int) -> dict:  # type: ignore[no-untyped-def]
    """One run of the job over the landing folder's new file: its one batch's figures."""
    from replicator.commands.runner import MirrorJob
    from replicator.config import parse_config

    config = parse_config(
        {
            "name": f"wide-{columns}",
            "source": {"type": "files", "path": "landing", "dialect": "canal-json"},
            "target": {"path": "lake"},
            "state": {"path": "state"},
        },
        "wide_rows",
        work,
    )
    job = MirrorJob(config, spark)
    summaries = []
    job._applied = summaries.append  # type: ignore[method-assign]  # each batch's summary, once applied
    job.run(available_now=True)
    [summary] = summaries
    return {"batch_ms": summary.duration_ms, "apply_ms": summary.phases_ms.get("apply")}


def run_once(spark, work: Path, columns: int) -> dict:  # type: ignore[no-untyped-def]
    shutil.rmtree(work, ignore_errors=True)
    landing = work / "landing"
    landing.mkdir(parents=True)
    (landing / "1-insert.jsonl").write_bytes(message(columns, "INSERT", 1_700_000_000_000, "a"))
    insert = batch(spark, work, columns)
    (landing / "2-update.jsonl").write_bytes(message(columns, "UPDATE", 1_700_000_000_001, "b"))
    update = batch(spark, work, columns)
    return {"columns": columns, "insert (new table)": insert, "update": update}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, nargs="+", default=[1000, 2000, 4096])
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "wide-rows"))
    args = parser.parse_args()
    from replicator.spark import get_spark

    spark = get_spark()
    root = Path(args.workdir)
    run_once(spark, root / "warmup", 10)
    runs = [run_once(spark, root / f"c{n}", n) for n in args.columns]
    print(json.dumps(runs, indent=1))
    (root / "result.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
