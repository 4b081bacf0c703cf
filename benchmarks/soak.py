"""Soak: N canal-json events mirrored through repeated kill -9, compaction and vacuum, then compared.

The benchmark workload (benchmarks/workload.py) is written as many files; ``replicator mirror
--available-now`` runs with a small ``max_files_per_trigger`` and its whole process group is SIGKILLed at
seeded random moments, then started again, until a run finishes by itself. Between some restarts the mirror
is compacted (delta-rs ``optimize.compact()``) and vacuumed (retention 0). At the end the mirror is compared
column by column, typed, with the final row per key computed in plain Python from the same files, and the
accounting is checked (batch ids once each, records_in sums to the messages, applied + filtered + dead
letters = events, each batch's app transaction once in the mirror's log). Not part of ``make test``:

    python benchmarks/soak.py [--events 2000000] [--keys 100000] [--per-file 10000] [--seed 1]

The report is printed and written to bench-out/soak/result.json (docs/soak.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import TYPES, mirror_command, write_files, write_job

REPO = Path(__file__).resolve().parent.parent
JOB = "soak"
UTC = dt.UTC


# ---- the model ---------------------------------------------------------------------------------------------


def _datetime(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


# The workload's MySQL types, converted here by hand (not by replicator.types) so the check is independent:
# timestamp(6) is an instant written as wall-clock text in source.timezone (UTC); datetime(3) has no zone.
CONVERT = {
    "id": int,
    "name": str,
    "amount": Decimal,
    "qty": int,
    "price": float,
    "created": _datetime,
    "updated": lambda text: _datetime(text).replace(tzinfo=UTC),
    "status": str,
    "flag": int,
}
assert set(CONVERT) == set(TYPES)


def model(paths: list[Path]) -> tuple[dict[int, dict[str, Any]], int, int]:
    """The final row per key (typed), the number of messages and of row events in the files."""
    final: dict[str, dict[str, str]] = {}
    messages = rows = 0
    for path in paths:
        with path.open("rb") as f:
            for line in f:
                m = orjson.loads(line)
                messages += 1
                for r in m["data"]:
                    rows += 1
                    if m["type"] == "DELETE":
                        final.pop(r["id"], None)
                    else:
                        final[r["id"]] = r
    typed = {
        int(k): {c: (None if v is None else CONVERT[c](v)) for c, v in r.items()} for k, r in final.items()
    }
    return typed, messages, rows


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b  # written with repr(): the text round-trips exactly
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a == b and (a.tzinfo is None) == (b.tzinfo is None)
    return type(a) is type(b) and a == b


def compare(lake: Path, expected: dict[int, dict[str, Any]]) -> tuple[int, list[str], int]:
    """(mirror rows, mismatch samples, mismatch count) of the mirror against the model."""
    from deltalake import DeltaTable

    table = DeltaTable(str(lake / "bench" / "orders")).to_pyarrow_table()
    table = table.drop_columns([c for c in table.column_names if c.startswith("_cdc")])
    rows = table.to_pylist()
    problems: list[str] = []
    got: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["id"] in got:
            problems.append(f"key {r['id']}: duplicate row")
        got[r["id"]] = r
    problems += [f"key {k}: missing" for k in sorted(set(expected) - set(got))]
    problems += [f"key {k}: not in the model" for k in sorted(set(got) - set(expected))]
    for key in sorted(set(got) & set(expected)):
        mine, want = got[key], expected[key]
        if set(mine) != set(want):
            problems.append(f"key {key}: columns {sorted(mine)} != {sorted(want)}")
        for column, value in want.items():
            if column in mine and not same(mine[column], value):
                problems.append(f"key {key} {column}: mirror {mine[column]!r} != model {value!r}")
    return len(rows), problems[:50], len(problems)


# ---- accounting --------------------------------------------------------------------------------------------


def txns(table: Path) -> Counter:
    found: Counter = Counter()
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                found[(action["txn"]["appId"], action["txn"]["version"])] += 1
    return found


def batches(state: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(state / "batches")):
        return []
    return sorted(
        DeltaTable(str(state / "batches")).to_pyarrow_table().to_pylist(), key=lambda r: r["batch_id"]
    )


def accounting(workdir: Path, messages: int, events: int) -> dict[str, Any]:
    recorded = batches(workdir / "state")
    ids = [b["batch_id"] for b in recorded]
    unbalanced = [
        b["batch_id"] for b in recorded if b["applied"] + b["filtered"] + b["dead_letters"] != b["events"]
    ]
    commits = txns(workdir / "lake" / "bench" / "orders")
    twice = sorted(v for (app, v), n in commits.items() if app == JOB and n > 1)
    missing = sorted(set(ids) - {v for app, v in commits if app == JOB})
    result = {
        "batches": len(recorded),
        "batch_ids_contiguous_once": ids == list(range(len(ids))),
        "records_in": sum(b["records_in"] for b in recorded),
        "messages": messages,
        "events_recorded": sum(b["events"] for b in recorded),
        "events": events,
        "applied": sum(b["applied"] for b in recorded),
        "filtered": sum(b["filtered"] for b in recorded),
        "dead_letters": sum(b["dead_letters"] for b in recorded),
        "unbalanced_batches": unbalanced,
        "batches_committed_twice": twice,
        "batches_without_mirror_commit": missing,
    }
    result["ok"] = (
        result["batch_ids_contiguous_once"]
        and result["records_in"] == messages
        and result["events_recorded"] == events
        and not unbalanced
        and not twice
        and not missing
        and result["dead_letters"] == 0
    )
    return result


# ---- the runs ----------------------------------------------------------------------------------------------


def run_once(job: Path, log: Path, kill_after: float | None) -> tuple[str, float]:
    """One ``mirror --available-now``; SIGKILL of its process group (driver + JVM) after ``kill_after`` s."""
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            mirror_command(job),
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=kill_after)
        outcome = "finished" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        outcome = "killed"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a JVM left behind by a driver that exited
        except ProcessLookupError:
            pass
    return outcome, time.monotonic() - started


def maintain(lake: Path) -> tuple[bool, int]:
    """Compact and vacuum the mirror while the job is down; returns (done, files removed)."""
    from deltalake import DeltaTable

    path = lake / "bench" / "orders"
    if not DeltaTable.is_deltatable(str(path)):
        return False, 0
    table = DeltaTable(str(path))
    table.optimize.compact()
    removed = DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    return True, len(removed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--per-file", type=int, default=10_000, help="messages per file")
    parser.add_argument("--files-per-trigger", type=int, default=1, help="max_files_per_trigger")
    parser.add_argument("--kill-min", type=float, default=20.0, help="seconds")
    parser.add_argument("--kill-max", type=float, default=60.0, help="seconds")
    parser.add_argument("--maintain-every", type=int, default=2, help="compact + vacuum every N restarts")
    parser.add_argument("--max-runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "soak"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "logs").mkdir(parents=True)

    t0 = time.monotonic()
    paths = write_files(workdir / "landing", args.events, args.keys, per_file=args.per_file)
    for i, path in enumerate(paths):  # one file per trigger in order (Spark orders new files by mtime)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    generated = time.monotonic() - t0
    job = write_job(workdir, JOB, args.files_per_trigger)

    runs: list[dict[str, Any]] = []
    kills = maintained = vacuumed_files = 0
    stalled = 0  # killed runs in a row that recorded no batch: the next delay grows so the job can progress
    started = time.monotonic()
    while True:
        if len(runs) >= args.max_runs:
            raise SystemExit(f"no finished run after {len(runs)} runs")
        before = len(batches(workdir / "state"))
        delay = rng.uniform(args.kill_min, args.kill_max) * 1.5**stalled
        log = workdir / "logs" / f"run-{len(runs):04d}.log"
        outcome, took = run_once(job, log, delay)
        after = len(batches(workdir / "state"))
        runs.append(
            {"run": len(runs), "kill_at_s": round(delay, 1), "outcome": outcome, "s": round(took, 1),
             "batches_before": before, "batches_after": after}
        )  # fmt: skip
        print(json.dumps(runs[-1]), flush=True)
        if outcome == "finished":
            break
        if outcome != "killed":
            tail = log.read_text(errors="replace")[-4000:]
            raise SystemExit(f"mirror run {len(runs) - 1} {outcome}:\n{tail}")
        kills += 1
        stalled = stalled + 1 if after == before else 0
        if kills % args.maintain_every == 0:
            done, removed = maintain(workdir / "lake")
            maintained += done
            vacuumed_files += removed
    wall = time.monotonic() - started

    expected, messages, events = model(paths)
    rows, mismatches, mismatch_count = compare(workdir / "lake", expected)
    accounts = accounting(workdir, messages, events)
    result = {
        "events": args.events,
        "messages": messages,
        "keys": args.keys,
        "files": len(paths),
        "files_per_trigger": args.files_per_trigger,
        "seed": args.seed,
        "kills": kills,
        "restarts": len(runs) - 1,
        "optimize_vacuum_rounds": maintained,
        "vacuumed_files": vacuumed_files,
        "wall_s": round(wall, 1),
        "events_per_s": round(args.events / wall),
        "generate_s": round(generated, 1),
        "mirror_rows": rows,
        "model_rows": len(expected),
        "equal": mismatch_count == 0,
        "mismatches": mismatch_count,
        "mismatch_samples": mismatches,
        "accounting": accounts,
        "runs": runs,
        "cpus": os.cpu_count(),
    }
    text = json.dumps(result, indent=1, default=str)
    print(text)
    (workdir / "result.json").write_text(text)
    return 0 if result["equal"] and accounts["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
