"""A canal-json workload for benchmarks: inserts, updates, deletes and re-inserts over a key space."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

TYPES = {
    "id": "bigint(20)",
    "name": "varchar(64)",
    "amount": "decimal(12,2)",
    "qty": "int(11)",
    "price": "double",
    "created": "datetime(3)",
    "updated": "timestamp(6)",
    "status": "varchar(16)",
    "flag": "tinyint(1)",
}
SQL_TYPES = {
    "id": -5,
    "name": 12,
    "amount": 3,
    "qty": 4,
    "price": 8,
    "created": 93,
    "updated": 93,
    "status": 12,
    "flag": -6,
}
STATUSES = ["new", "paid", "shipped", "done"]
ES0 = 1_700_000_000_000


def row(rng: random.Random, key: int, n: int) -> dict[str, Any]:
    return {
        "id": str(key),
        "name": f"customer-{key}-{n % 97}",
        "amount": f"{rng.randint(-99999, 9999999) / 100:.2f}",
        "qty": str(rng.randint(0, 1000)),
        "price": repr(rng.random() * 1000),
        "created": f"2024-01-{1 + key % 28:02d} 10:{n % 60:02d}:{key % 60:02d}.{n % 1000:03d}",
        "updated": f"2024-02-{1 + n % 28:02d} 11:{key % 60:02d}:{n % 60:02d}.{n % 1000000:06d}",
        "status": STATUSES[n % 4],
        "flag": str(n % 2),
    }


def events(count: int, keys: int, seed: int = 7, full: bool = False) -> Iterator[dict[str, Any]]:
    """``count`` single-row messages: 10% inserts, 75% updates, 15% deletes and re-inserts. ``full``: a
    catch-up after a bootstrap, the first ``keys`` messages insert every key, then the same mix spreads
    over the whole key space (issue 32's workload)."""
    rng = random.Random(seed)
    present: list[int] = []
    absent = list(range(keys))
    rng.shuffle(absent)
    current: dict[int, dict[str, Any]] = {}
    for n in range(count):
        es = ES0 + n
        roll = rng.random()
        if not present or (roll < 0.10 and absent) or (full and n < keys):
            key = absent.pop()
            present.append(key)
            current[key] = row(rng, key, n)
            yield message("INSERT", current[key], None, es, n)
        elif roll < 0.85:
            key = present[rng.randrange(len(present))]
            new = row(rng, key, n)
            old = {k: v for k, v in current[key].items() if new[k] != v}
            current[key] = new
            yield message("UPDATE", new, old, es, n)
        elif roll < 0.925 or not absent:
            idx = rng.randrange(len(present))
            key = present[idx]
            last = present.pop()
            if idx < len(present):
                present[idx] = last
            absent.append(key)
            yield message("DELETE", current.pop(key), None, es, n)
        else:
            key = absent.pop(rng.randrange(len(absent)))
            present.append(key)
            current[key] = row(rng, key, n)
            yield message("INSERT", current[key], None, es, n)


def message(
    kind: str,
    data: dict[str, Any],
    old: dict[str, Any] | None,
    es: int,
    n: int,
    types: tuple[dict[str, str], dict[str, int]] = (TYPES, SQL_TYPES),
) -> dict[str, Any]:
    """A canal-json message of table bench.orders; ``types``: its mysqlType and sqlType maps."""
    return {
        "data": [data],
        "database": "bench",
        "es": es,
        "id": n,
        "isDdl": False,
        "mysqlType": types[0],
        "old": [old] if old is not None else None,
        "pkNames": ["id"],
        "sql": "",
        "sqlType": types[1],
        "table": "orders",
        "ts": es + 5,
        "type": kind,
    }


def write_files(
    folder: Path, count: int, keys: int, per_file: int = 100_000, full: bool = False
) -> list[Path]:
    return write_messages(folder, events(count, keys, full=full), per_file)


def write_messages(folder: Path, messages: Iterator[dict[str, Any]], per_file: int) -> list[Path]:
    """``messages`` as JSON lines in files of ``per_file`` (part-00000.jsonl, ...)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    handle = None
    for n, message in enumerate(messages):
        if n % per_file == 0:
            if handle:
                handle.close()
            paths.append(folder / f"part-{n // per_file:05d}.jsonl")
            handle = paths[-1].open("wb")
        assert handle is not None
        handle.write(orjson.dumps(message) + b"\n")
    if handle:
        handle.close()
    return paths


def write_job(
    workdir: Path, name: str, files_per_trigger: int | None = None, trigger: str | None = None
) -> Path:
    """``workdir/job.yaml``: canal-json files from ``landing`` into ``lake``, state in ``state``."""
    source = "{type: files, path: landing, dialect: canal-json"
    source += f", max_files_per_trigger: {files_per_trigger}}}" if files_per_trigger else "}"
    text = f"name: {name}\nsource: {source}\ntarget: {{path: lake}}\nstate: {{path: state}}\n"
    if trigger:
        text += f"trigger: {{interval: {trigger}}}\n"
    job = workdir / "job.yaml"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(text)
    return job


def batch_lines(log: str) -> list[dict[str, Any]]:
    """The ``batch`` summaries (JSON log lines) of a job's log."""
    import json

    return [json.loads(line) for line in log.splitlines() if line.startswith("{") and '"batch"' in line]


def mirror_command(job: Path) -> list[str]:
    """The ``replicator mirror --available-now`` command of a job file, as a user runs it."""
    return [
        sys.executable,
        "-m",
        "replicator.commands.cli",
        "mirror",
        "--config",
        str(job),
        "--available-now",
    ]


def run_watched(
    command: list[str], sampler: Callable[[int, threading.Event], None], **popen: Any
) -> tuple[float, str, str]:
    """Run a command while ``sampler(pid, stop)`` watches its processes from a thread; (wall seconds,
    stdout, stderr). A failed command ends the benchmark with its stderr's tail."""
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    stop = threading.Event()
    watcher = threading.Thread(target=sampler, args=(proc.pid, stop))
    watcher.start()
    out, err = proc.communicate()
    elapsed = time.monotonic() - started
    stop.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"{Path(command[0]).name} failed:\n{err[-4000:]}")
    return elapsed, out, err
