"""Memory: peak RSS (driver + JVM + decode workers) is bounded by the trigger size, not by the backlog.

Runs ``replicator mirror --available-now`` over a backlog of N events and of 10 x N events, both in files
of ``--per-file`` events with ``max_files_per_trigger`` files per micro-batch, and compares the peak RSS of
the two command process trees. Not a test; ``make bench`` runs it, results in benchmarks/LOG.md:

    python benchmarks/memory.py [--events 100000] [--per-file 10000] [--files-per-trigger 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import REPO, run_mirror
from workload import batch_lines, write_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--per-file", type=int, default=10_000)
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "memory"))
    args = parser.parse_args()
    runs = []
    for factor in (1, 10):
        work = Path(args.workdir) / f"x{factor}"
        shutil.rmtree(work, ignore_errors=True)
        events = args.events * factor
        write_files(work / "landing", events, max(events // 10, 1000), args.per_file)
        wall, peak, _cpu, err = run_mirror(work, args.files_per_trigger)
        batches = len(batch_lines(err))
        runs.append(
            {
                "events": events,
                "batches": batches,
                "wall_s": round(wall, 1),
                "peak_rss_mb": round(sum(peak.values()) / 2**20),
                "peak_rss_mb_by_process": {k: round(v / 2**20) for k, v in peak.items()},
            }
        )
    result = {
        "per_file": args.per_file,
        "files_per_trigger": args.files_per_trigger,
        "runs": runs,
        "peak_ratio": round(runs[1]["peak_rss_mb"] / runs[0]["peak_rss_mb"], 3),
    }
    print(json.dumps(result, indent=1))
    (Path(args.workdir) / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
