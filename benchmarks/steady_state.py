"""Steady state into a large mirror: 10 micro-batches of 100,000 canal-json events against a 5,000,000-row
mirror, per-batch time and what each MERGE read and rewrote.

The mirror is loaded with ``replicator bootstrap`` from Parquet files written in key order (so its data
files hold narrow key ranges), then ``replicator mirror --available-now`` runs with
``max_files_per_trigger: 1`` over ten files of events. Two key distributions:

- ``hot`` (default): inserts of new keys, updates and deletes of the newest 5% of the keys -- the
  usual OLTP shape (recent orders change, old ones rarely). The MERGE's key-range predicate skips the
  files outside the hot range: cost follows the rows touched.
- ``uniform``: updates anywhere in the 5M keys. Every data file holds some touched key, so copy-on-write
  MERGE rewrites the whole table each batch: cost follows the table size (the limit, measured).

Not a test; ``make bench`` runs it, results in benchmarks/LOG.md:

    python benchmarks/steady_state.py [--rows 5000000] [--batches 10] [--events 100000] [--keys hot] [--s3]

``--s3``: target and state on a local SeaweedFS S3 server (as ``throughput.py --s3``), with the S3
requests of the mirror run counted per batch.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import ES0, TYPES, batch_lines, message, row, write_job

REPO = Path(__file__).resolve().parent.parent
ROWS_PER_FILE = 250_000


def snapshot(folder: Path, rows: int) -> None:
    """``rows`` rows in key order, as Parquet files of canonical text and a manifest with the types."""
    rng = random.Random(1)
    table_dir = folder / "bench" / "orders"
    table_dir.mkdir(parents=True)
    for start in range(0, rows, ROWS_PER_FILE):
        keys = range(start, min(start + ROWS_PER_FILE, rows))
        data = [row(rng, k, 0) for k in keys]
        pq.write_table(pa.Table.from_pylist(data), table_dir / f"part-{start // ROWS_PER_FILE:05d}.parquet")
    manifest = {
        "position": f"es={ES0 - 1}",
        "tables": [{"database": "bench", "table": "orders", "key": ["id"], "types": TYPES}],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))


def events(folder: Path, rows: int, batches: int, per_batch: int, keys: str) -> None:
    """``batches`` files of ``per_batch`` messages: 10% inserts of new keys, 75% updates, 15% deletes
    and re-inserts, over the newest 5% of the keys (hot) or all of them (uniform)."""
    rng = random.Random(7)
    folder.mkdir(parents=True)
    next_key = rows
    hot = max(1, rows // 20)
    deleted: set[int] = set()
    n = 0
    for b in range(batches):
        with (folder / f"batch-{b:03d}.jsonl").open("wb") as f:
            for _ in range(per_batch):
                roll = rng.random()
                low = next_key - hot if keys == "hot" else 0
                key = rng.randrange(low, next_key)
                if roll < 0.10:
                    key, next_key = next_key, next_key + 1
                    msg = message("INSERT", row(rng, key, n), None, ES0 + n, n)
                elif roll < 0.85 and key not in deleted:
                    new = row(rng, key, n)
                    msg = message("UPDATE", new, {"qty": "0", "status": "old"}, ES0 + n, n)
                elif key in deleted:
                    deleted.discard(key)
                    msg = message("INSERT", row(rng, key, n), None, ES0 + n, n)
                else:
                    deleted.add(key)
                    msg = message("DELETE", row(rng, key, n), None, ES0 + n, n)
                f.write(orjson.dumps(msg) + b"\n")
                n += 1


def run(args: list[str], cwd: Path) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "replicator.commands.cli", *args], cwd=cwd, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"replicator {args[0]} failed:\n{proc.stderr[-4000:]}")
    return time.monotonic() - started, proc.stderr


def median_interval(batches: list[dict]) -> float | None:
    from datetime import datetime
    from itertools import pairwise

    ends = [datetime.fromisoformat(b["timestamp"].replace("Z", "+00:00")) for b in batches]
    gaps = sorted((b - a).total_seconds() * 1000 for a, b in pairwise(ends))
    return round(gaps[len(gaps) // 2]) if gaps else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--events", type=int, default=100_000, help="events per batch")
    parser.add_argument("--keys", choices=["hot", "uniform"], default="hot")
    parser.add_argument(
        "--deletion-vectors", action="store_true", help="the mirror with target.deletion_vectors: true"
    )
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "steady-state"))
    parser.add_argument(
        "--s3", action="store_true", help="target and state on a local SeaweedFS S3 server (landing local)"
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="with --s3: every request through a recording pass-through (s3trace.py), counted per table",
    )
    args = parser.parse_args()
    name = args.keys + ("-vectors" if args.deletion_vectors else "") + ("-s3" if args.s3 else "")
    work = Path(args.workdir) / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.s3:
        from throughput import s3_server

        with s3_server(work) as (server, prefix):
            if not args.trace:
                measure(args, work, prefix, server)
                return
            import os

            from s3trace import Trace

            with Trace(server.ports["s3.port"]) as trace:
                os.environ["AWS_ENDPOINT_URL"] = trace.endpoint
                measure(args, work, prefix, server, trace)
        return
    measure(args, work)


def measure(args, work: Path, s3: str | None = None, server=None, trace=None) -> None:  # type: ignore[no-untyped-def]
    from throughput import s3_requests

    job = write_job(work, "steady", files_per_trigger=1)
    if args.deletion_vectors:
        job.write_text(job.read_text().replace("{path: lake}", "{path: lake, deletion_vectors: true}"))
    if s3:
        text = job.read_text().replace("{path: lake", f"{{path: {s3}/lake")
        job.write_text(text.replace("{path: state}", f"{{path: {s3}/state}}"))
    t0 = time.monotonic()
    snapshot(work / "snapshot", args.rows)
    events(work / "landing", args.rows, args.batches, args.events, args.keys)
    generated = time.monotonic() - t0
    loaded, _ = run(
        ["bootstrap", "--config", "job.yaml", "--snapshot", "snapshot/manifest.json", "--no-progress"], work
    )
    import os
    import resource

    import psutil

    before = s3_requests(server) if server else {}
    mark = trace.mark() if trace else 0
    load = os.getloadavg()[0]
    server_cpu = psutil.Process(server.process.pid).cpu_times() if server else None
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, log = run(["mirror", "--config", "job.yaml", "--available-now"], work)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The mirror command's CPU (its JVM and Python workers are its waited-for descendants), and the S3
    # server's over the same run (a cost the local-disk run does not have).
    cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    if server_cpu is not None:
        now = psutil.Process(server.process.pid).cpu_times()
        server_s = (now.user + now.system) - (server_cpu.user + server_cpu.system)
    requests = {k: v - before.get(k, 0) for k, v in s3_requests(server).items()} if server else {}
    batches = batch_lines(log)
    per_batch = [
        {
            "batch": b["batch_id"],
            "ms": b["duration_ms"],
            "phases_ms": b["phases_ms"],
            **{k: b["tables"]["bench.orders"][k] for k in ("files_scanned", "files_skipped", "rows_copied")},
            "touched": sum(b["tables"]["bench.orders"][k] for k in ("inserted", "updated", "deleted")),
        }
        for b in batches
    ]
    traced = {}
    if trace:
        from collections import Counter
        from datetime import datetime

        from s3trace import summary

        # The steady batches: the requests from the second batch's end to the last one's, per batch
        # (the first batch and the job's start load every table once).
        ends = [datetime.fromisoformat(b["timestamp"].replace("Z", "+00:00")).timestamp() for b in batches]
        steady = trace.between(ends[1], ends[-1]) if len(ends) > 2 else trace.since(mark)
        per = len(ends) - 2 if len(ends) > 2 else len(batches)
        traced = {
            "all_requests": len(trace.since(mark)),
            "steady_batches": per,
            "steady_per_batch": round(len(steady) / max(per, 1), 1),
            "steady_per_batch_by_table": summary(steady, per),
            "steady_top_keys": Counter(f"{k} {key}" for k, key in steady).most_common(40),
        }
    result = {
        "s3": bool(s3),
        "traced": traced,
        "s3_requests": requests,
        "s3_requests_per_batch": round(sum(requests.values()) / max(len(batches), 1)) if requests else None,
        "rows": args.rows,
        "keys": args.keys,
        "batches": len(batches),
        "events_per_batch": args.events,
        "bootstrap_s": round(loaded, 1),
        "mirror_wall_s": round(wall, 1),
        "mirror_cpu_s": round(cpu, 1),
        "s3_server_cpu_s": round(server_s, 1) if server_cpu is not None else None,
        "load_before": round(load, 1),
        "load_after": round(os.getloadavg()[0], 1),
        "batch_ms": [p["ms"] for p in per_batch],
        "median_batch_ms": sorted(p["ms"] for p in per_batch)[len(per_batch) // 2] if per_batch else None,
        # A batch's duration_ms overlaps the next one's (its apply runs behind the next decode): the time
        # from one batch's end to the next is the steady state's cost per batch.
        "median_interval_ms": median_interval(batches),
        "deletion_vectors": args.deletion_vectors,
        "per_batch": per_batch,
        "generate_s": round(generated, 1),
    }
    print(json.dumps(result, indent=1))
    (work / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
