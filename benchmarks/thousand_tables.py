"""A thousand tables (issue 54, item 2): the driver's CPU per table of one batch over N tables, new mirrors
(batch 0) then existing ones (batch 1), against the same events over one table.

Each batch is 100,000 canal-json events (the benchmark workload, keys spread over the tables) applied by
``Engine.process_files`` in this process. Wall time on a shared machine says little, so each batch reports
the driver's CPU (``time.process_time``: the Python driver, its apply threads included), the CPU of its
child processes (Spark's JVM and Python workers, /proc) and the machine's load. Not a test; results in
benchmarks/LOG.md ("A thousand tables"):

    python benchmarks/thousand_tables.py [--tables 1000] [--events 100000] [--profile 1]

``--steps``: one apply lane (``engine.LANES = 1``, so that wall time is a table's own) and the wall time
of each applier step (TableApplier, DeltaRsWriter methods, the kept handle's update) summed per batch.

``--profile B``: batch B's driver profile (yappi, CPU clock, every thread; ``pip install yappi``) to
bench-out/thousand-tables/profile-B.pstat, read with ``python -m pstats``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import events

REPO = Path(__file__).resolve().parent.parent


def write(path: Path, count: int, tables: int, seed: int) -> None:
    with path.open("wb") as f:
        for message in events(count, max(count // 10, tables), seed=seed):
            key = int(message["data"][0]["id"])
            message["table"] = f"t{key % tables:05d}"
            f.write(orjson.dumps(message) + b"\n")


def children_cpu() -> float:
    """CPU seconds of this process's descendants (the JVM and its Python workers, with their reaped
    children), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]) / tick)
    total, stack = 0.0, [os.getpid()]
    while stack:
        parent = stack.pop()
        for pid, (ppid, cpu) in procs.items():
            if ppid == parent:
                total += cpu
                stack.append(pid)
    return total


STEPS = {
    "replicator.apply.table:TableApplier": [
        "run",
        "prepare_rows",
        "typed",
        "guard",
        "update_tombstones",
        "ensure_table",
        "commit_rows",
    ],
    "replicator.sinks.delta_rs:DeltaRsWriter": ["merge_guarded", "exists", "applied_version", "schema"],
    "replicator.sinks.delta_rs": ["handle"],
}


def timed_steps() -> dict[str, list[float]]:
    """Wrap the STEPS with wall-time counters ({name: [seconds, calls]}), one apply lane."""
    import importlib

    import replicator.engine

    replicator.engine.LANES = 1
    spent: dict[str, list[float]] = {}

    def wrap(owner, name: str, label: str):  # type: ignore[no-untyped-def]
        inner = getattr(owner, name)

        def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                entry = spent.setdefault(label, [0.0, 0])
                entry[0] += time.perf_counter() - start
                entry[1] += 1

        setattr(owner, name, timed)

    for where, names in STEPS.items():
        module, _, cls = where.partition(":")
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        for name in names:
            wrap(owner, name, f"{cls or module}.{name}")
    return spent


def run(spark, work: Path, tables: int, count: int, profile: int | None, spent=None) -> list[dict]:  # type: ignore[no-untyped-def]  # type: ignore[no-untyped-def]
    from replicator.config import parse_config
    from replicator.engine import Engine
    from replicator.sources import file_list

    shutil.rmtree(work, ignore_errors=True)
    (work / "landing").mkdir(parents=True)
    names = ["a.jsonl", "b.jsonl"]
    for seed, name in enumerate(names, 7):
        write(work / "landing" / name, count, tables, seed)
    config = parse_config(
        {
            "name": f"tables-{tables}",
            "source": {"type": "files", "path": "landing", "dialect": "canal-json"},
            "target": {"path": "lake"},
            "state": {"path": "state"},
        },
        "thousand_tables",
        work,
    )
    engine = Engine(config)
    out = []
    for batch_id, name in enumerate(names):
        if profile == batch_id:
            import yappi

            yappi.set_clock_type("cpu")
            yappi.start()
        if spent is not None:
            spent.clear()
        cpu, wall, kids = time.process_time(), time.monotonic(), children_cpu()
        summary = engine.process_files(file_list([work / "landing" / name]), batch_id, spark)
        cpu, wall, kids = time.process_time() - cpu, time.monotonic() - wall, children_cpu() - kids
        if profile == batch_id:
            yappi.stop()
            yappi.get_func_stats().save(str(work.parent / f"profile-{batch_id}.pstat"), type="pstat")
        out.append(
            {
                "tables": tables,
                "batch": "new" if batch_id == 0 else "existing",
                "driver_cpu_s": round(cpu, 2),
                "driver_ms_per_table": round(cpu * 1000 / tables, 1),
                "children_cpu_s": round(kids, 2),
                "wall_s": round(wall, 1),
                "load": round(os.getloadavg()[0], 1),
                "phases_ms": summary.phases_ms,
                "rows_copied": sum(t["rows_copied"] for t in summary.tables.values()),
            }
        )
        if spent is not None:
            out[-1]["steps_s"] = {
                k: [round(v[0], 3), v[1]] for k, v in sorted(spent.items(), key=lambda i: -i[1][0])
            }
        print(json.dumps(out[-1]), flush=True)
    engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--profile", type=int, default=None, help="profile batch 0 (new) or 1 (existing)")
    parser.add_argument("--steps", action="store_true", help="one apply lane, wall time per applier step")
    parser.add_argument("--only", choices=["one", "many"], default=None, help="skip the other run")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "thousand-tables"))
    args = parser.parse_args()
    from replicator.spark import get_spark

    spent = timed_steps() if args.steps else None
    spark = get_spark()
    root = Path(args.workdir).resolve()
    results = []
    for tables in (1, args.tables):
        if args.only == ("many" if tables == 1 else "one"):
            continue
        profile = args.profile if tables > 1 else None
        results += run(spark, root / f"t{tables}", tables, args.events, profile, spent)
    (root / "result.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
