"""The cost of a history table (SCD type 2, docs/history.md) beside a mirror, against the mirror alone.

Writes ``--batches`` files of ``--events`` canal-json messages each (10% inserts, 75% updates, 15% deletes
and re-inserts over ``--keys`` keys), then runs ``replicator mirror --available-now`` with
``max_files_per_trigger: 1`` twice into fresh folders: without and with ``tables.history``. Prints the
per-batch ``apply`` (mirror MERGE) and ``history`` phases and the batch time.

Not a test; results in benchmarks/LOG.md:

    python benchmarks/history.py [--batches 5] [--events 100000] [--keys 20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import batch_lines, mirror_command, write_files, write_job

REPO = Path(__file__).resolve().parent.parent


def run(workdir: Path, history: bool) -> list[dict]:
    job = write_job(workdir, "bench-history" if history else "bench-mirror", files_per_trigger=1)
    if history:
        job.write_text(job.read_text() + 'tables: {history: ["bench.*"]}\n')
    started = time.monotonic()
    done = subprocess.run(
        mirror_command(job),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    print(f"{'with' if history else 'without'} history: {time.monotonic() - started:.1f} s in all")
    return batch_lines(done.stdout + done.stderr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench-out" / "history")
    args = parser.parse_args()
    import shutil

    shutil.rmtree(args.workdir, ignore_errors=True)
    landing = args.workdir / "landing"
    write_files(landing, args.batches * args.events, args.keys, per_file=args.events)
    result: dict[str, list[dict]] = {}
    for history in (False, True):
        workdir = args.workdir / ("history" if history else "mirror")
        shutil.copytree(landing, workdir / "landing")
        batches = run(workdir, history)
        for b in batches:
            ms = b["phases_ms"]
            print(
                f"  batch {b['batch_id']}: {b['duration_ms'] / 1000:.1f} s, apply {ms.get('apply', 0)} ms, "
                f"history {ms.get('history', 0)} ms"
            )
        times = [b["duration_ms"] / 1000 for b in batches]
        print(f"  median batch {statistics.median(times):.1f} s")
        result["history" if history else "mirror"] = [
            {"batch_id": b["batch_id"], "duration_ms": b["duration_ms"], "phases_ms": b["phases_ms"]}
            for b in batches
        ]
    (args.workdir / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
