"""Latency: source event to mirror commit, with a 1 s trigger and 1,000 events/s arriving.

A writer thread drops a file of 100 canal-json INSERT messages every 100 ms into the landing folder, each
event's ``es`` the wall clock (ms) at which it was written. ``replicator mirror`` runs continuously with
``trigger.interval: 1 second``. Afterwards, for every row of the mirror, latency = the commit time of the
Delta version that added its data file minus its ``_cdc_event_time`` (inserts of new keys only, so a
version's new files hold exactly the rows it committed). Reports p50/p95/max over the events written
after a warm-up, each phase's median over the batches and the CPU time per second of the job's processes
(driver, Spark JVM, Python workers) after the warm-up. Not a test; ``make bench`` runs it, results in
benchmarks/LOG.md:

    python benchmarks/latency.py [--seconds 60] [--rate 1000] [--warmup 15]
    python benchmarks/latency.py --rate 10000 --tables 100   # issue 54 item 3's many-table case
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


def writer(landing: Path, rate: int, stop: threading.Event, tables: int = 1) -> None:
    """Every 100 ms a file of rate/10 INSERTs of new keys, spread round-robin over ``tables`` tables."""
    key = 0
    rng = random.Random(7)
    per_file = max(1, rate // 10)
    landing.mkdir(parents=True, exist_ok=True)
    tick = time.monotonic()
    while not stop.is_set():
        lines = []
        for _ in range(per_file):
            es = int(time.time() * 1000)
            event = message("INSERT", row(rng, key, key), None, es, key)
            if tables > 1:
                event["table"] = table_name(key % tables)
            lines.append(orjson.dumps(event))
            key += 1
        part = landing / f".part-{key:09d}.jsonl.tmp"
        part.write_bytes(b"\n".join(lines) + b"\n")
        part.rename(landing / f"part-{key:09d}.jsonl")  # appears whole: the file source never sees half
        tick += 0.1
        time.sleep(max(0.0, tick - time.monotonic()))


def table_name(n: int) -> str:
    return f"orders_{n:04d}"


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


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of the job's process tree by kind (benchmarks/throughput.py's
    driver / jvm / workers), children that ended and were waited for included."""
    import psutil
    from throughput import _kind

    root = psutil.Process(pid)
    out = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    for proc in [root, *root.children(recursive=True)]:
        try:
            kind = _kind(proc, root)
            if kind is not None:
                t = proc.cpu_times()
                out[kind] += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return out


def timed_run(
    work: Path, feed: Callable[[threading.Event], None], seconds: float, warmup: float = 0.0
) -> tuple[float, str, dict[str, int]]:
    """``replicator mirror`` running continuously on ``work/job.yaml`` while ``feed`` sends events for
    ``seconds`` (until its event is set) -> the wall clock (ms) the feed started at, the job's log, and the
    CPU time (ms) per second its processes used after ``warmup`` seconds: on a shared machine the
    wall-clock figures move with the others' load, the CPU time much less."""
    # The job's log into a file, not a pipe: read only at the end, a pipe's 64 KB filled up and blocked
    # the job (a batch's log line over 100 tables is ~20 KB).
    log = (work / "job.log").open("w")
    job = subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", "job.yaml"],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    # The clock of the measured events starts once the query runs (its checkpoint is written when it
    # starts; a loaded machine takes longer than the usual ~10 s to get there, and the first batch would
    # take a backlog).
    for _ in range(600):
        if (work / "state" / "checkpoint" / "metadata").exists() or job.poll() is not None:
            break
        time.sleep(0.2)
    time.sleep(3)
    started_ms = time.time() * 1000
    stop = threading.Event()
    thread = threading.Thread(target=feed, args=(stop,))
    thread.start()
    warmup = min(warmup, seconds)
    time.sleep(warmup)
    cpu_from = tree_cpu(job.pid)
    time.sleep(seconds - warmup)
    cpu_to = tree_cpu(job.pid)
    stop.set()
    thread.join()
    time.sleep(5)  # the last files or records
    _drained(work / "state" / "checkpoint", job)  # a job behind the feed finishes its backlog first
    os.killpg(job.pid, signal.SIGTERM)
    job.wait(timeout=120)
    log.close()
    err = (work / "job.log").read_text()
    measured = max(1.0, seconds - warmup)
    return started_ms, err, {k: round((cpu_to[k] - cpu_from[k]) * 1000 / measured) for k in cpu_to}


def _drained(checkpoint: Path, job: subprocess.Popen, timeout: float = 600) -> None:
    """Wait until every batch Spark planned is committed and none was planned for 3 s (the job has read
    everything the feed wrote), or ``timeout``."""

    def last(folder: str) -> int:
        names = [p.name for p in (checkpoint / folder).glob("[0-9]*")]
        return max((int(n) for n in names if n.isdigit()), default=-1)

    deadline = time.monotonic() + timeout
    quiet_since = None
    seen = (-1, -1)
    while time.monotonic() < deadline and job.poll() is None:
        now = (last("offsets"), last("commits"))
        if now != seen or now[0] != now[1]:
            seen, quiet_since = now, None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 3:
            return
        time.sleep(0.5)


def median_phases(batches: list[dict[str, Any]]) -> dict[str, int]:
    """Each phase's median over the batches that had events (phases_ms of the batch log lines), the first
    three (the start, the backlog) left out."""
    counted = [b for b in batches if b.get("events")]
    counted = counted[3:] or counted
    names = sorted({name for b in counted for name in b.get("phases_ms") or {}})
    out = {}
    for name in names:
        values = sorted((b.get("phases_ms") or {}).get(name, 0) for b in counted)
        out[name] = values[len(values) // 2]
    return out


def report(
    mirror: Path | list[Path], warmup_ms: int, err: str, head: dict[str, Any]
) -> tuple[dict[str, Any], list[dict]]:
    """``head`` and the latencies of the mirror's (or mirrors') rows after ``warmup_ms`` (p50, p95, max)
    and the job's batches, and those batches (from its log ``err``)."""
    batches = batch_lines(err)
    mirrors = mirror if isinstance(mirror, list) else [mirror]
    values = sorted(v for m in mirrors for v in latencies(m, warmup_ms))
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
        "median_phases_ms": median_phases(batches),
    }
    return result, batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--warmup", type=float, default=15, help="seconds of events not counted")
    parser.add_argument("--tables", type=int, default=1, help="tables the events are spread over")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "latency"))
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    (work / "landing").mkdir(parents=True)
    write_job(work, "latency", trigger="1 second")
    feed = partial(writer, work / "landing", args.rate, tables=args.tables)
    started_ms, err, cpu = timed_run(work, feed, args.seconds, args.warmup)
    lake = work / "lake" / "bench"
    mirrors = [lake / "orders"] if args.tables == 1 else [lake / table_name(n) for n in range(args.tables)]
    head = {"rate": args.rate, "seconds": args.seconds, "tables": args.tables}
    result, _batches = report(mirrors, int(started_ms + args.warmup * 1000), err, head)
    result["cpu_ms_per_s"] = cpu  # after the warm-up (a 1 s trigger: about one batch a second)
    print(json.dumps(result, indent=1))
    (work / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
