"""Latency: source event to mirror commit, with a 1 s trigger and 1,000 events/s arriving.

A writer thread drops a file of 100 canal-json INSERT messages every 100 ms into the landing folder, each
event's ``es`` the wall clock (ms) at which it was written. ``replicator mirror`` runs continuously with
``trigger.interval: 1 second``. Afterwards, for every row of the mirror, latency = the commit time of the
Delta version that added its data file minus its ``_cdc_event_time`` (inserts of new keys only, so a
version's new files hold exactly the rows it committed). Reports p50/p95/max over the events written
after a warm-up. Not a test; ``make bench`` runs it, results in docs/performance.md:

    python benchmarks/latency.py [--seconds 60] [--rate 1000] [--warmup 15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import batch_lines, message, row, write_job

REPO = Path(__file__).resolve().parent.parent


def writer(landing: Path, rate: int, stop: threading.Event) -> None:
    key = 0
    rng = random.Random(7)
    per_file = max(1, rate // 10)
    landing.mkdir(parents=True, exist_ok=True)
    tick = time.monotonic()
    while not stop.is_set():
        lines = []
        for _ in range(per_file):
            es = int(time.time() * 1000)
            lines.append(orjson.dumps(message("INSERT", row(rng, key, key), None, es, key)))
            key += 1
        part = landing / f".part-{key:09d}.jsonl.tmp"
        part.write_bytes(b"\n".join(lines) + b"\n")
        part.rename(landing / f"part-{key:09d}.jsonl")  # appears whole: the file source never sees half
        tick += 0.1
        time.sleep(max(0.0, tick - time.monotonic()))


def latencies(mirror: Path, warmup_ms: int) -> list[float]:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    table = DeltaTable(str(mirror))
    out: list[float] = []
    seen: set[str] = set()
    for entry in sorted(table.history(), key=lambda h: h["version"]):
        version = entry["version"]
        committed = entry["timestamp"]  # ms
        files = set(DeltaTable(str(mirror), version=version).file_uris()) - seen
        seen |= files
        if not files:
            continue
        data = ds.dataset(sorted(files), format="parquet").to_table(columns=["_cdc_event_time"])
        times = pc.cast(data["_cdc_event_time"], "int64").to_numpy() / 1000  # µs -> ms
        out.extend(committed - t for t in times if t >= warmup_ms)
    return out


def timed_run(work: Path, feed: Callable[[threading.Event], None], seconds: float) -> tuple[float, str]:
    """``replicator mirror`` running continuously on ``work/job.yaml`` while ``feed`` sends events for
    ``seconds`` (until its event is set) -> the wall clock (ms) the feed started at, and the job's log."""
    job = subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", "job.yaml"],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(12)  # let Spark start before the clock of the measured events starts
    started_ms = time.time() * 1000
    stop = threading.Event()
    thread = threading.Thread(target=feed, args=(stop,))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    time.sleep(5)  # the last files or records
    os.killpg(job.pid, signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    return started_ms, err


def report(mirror: Path, warmup_ms: int, err: str, head: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
    """``head`` and the latencies of the mirror's rows after ``warmup_ms`` (p50, p95, max) and the job's
    batches, and those batches (from its log ``err``)."""
    batches = batch_lines(err)
    values = sorted(latencies(mirror, warmup_ms))
    if not values:
        raise SystemExit(f"no events measured; job log:\n{err[-3000:]}")

    def pct(p: float) -> float:
        return round(values[min(len(values) - 1, int(p * len(values)))], 1)

    result = {
        **head,
        "events_measured": len(values),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "max_ms": round(values[-1], 1),
        "batches": len(batches),
        "median_batch_ms": sorted(b["duration_ms"] for b in batches)[len(batches) // 2] if batches else None,
    }
    return result, batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--warmup", type=float, default=15, help="seconds of events not counted")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "latency"))
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    (work / "landing").mkdir(parents=True)
    write_job(work, "latency", trigger="1 second")
    started_ms, err = timed_run(work, partial(writer, work / "landing", args.rate), args.seconds)
    mirror = work / "lake" / "bench" / "orders"
    head = {"rate": args.rate, "seconds": args.seconds}
    result, batches = report(mirror, int(started_ms + args.warmup * 1000), err, head)
    result["median_phases_ms"] = batches[len(batches) // 2]["phases_ms"] if batches else None
    print(json.dumps(result, indent=1))
    (work / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
