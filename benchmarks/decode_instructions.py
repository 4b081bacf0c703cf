"""Instructions per message of one decode task, counted by valgrind's callgrind: repeatable where a
shared VM's CPU time is not (the same task's CPU time moved by 2x between runs here, its instruction
count by well under 1%).

A decode task (``replicator.decode.decode_partition``: read and split the file, decode, the change log's
Parquet, the fold's bucketed Arrow file, the small results) runs over a file of ``--messages`` canal-json
workload messages; callgrind counts the whole process once with one task after a warm-up task and once
with two, and the difference divided by the messages is one task's cost per message. Not a test; results
in benchmarks/LOG.md.

    python benchmarks/decode_instructions.py [--messages 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import events

REPO = Path(__file__).resolve().parent.parent

# Runs in the measured process: a warm-up task (imports, caches), then ``tasks`` more.
TASKS = """
import shutil, sys
import pyarrow as pa
from replicator.decode import DecodePlan, decode_partition
from replicator.dialects.base import DecodeOptions

path, work, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(tasks + 1):
    shutil.rmtree(work, ignore_errors=True)
    plan = DecodePlan(source="files", dialect="canal-json", options=DecodeOptions(), batch_id=3,
                      spill=work + "/spill", changelog=work + "/changelog", buckets=4)
    list(decode_partition(plan, [pa.RecordBatch.from_pydict({"path": ["file://" + path], "mtime": [1]})]))
"""


def instructions(path: Path, work: Path, tasks: int) -> int:
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={work}/callgrind.out",
            sys.executable,
            "-c",
            TASKS,
            str(path),
            str(work / "task"),
            str(tasks),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench-out" / "decode_instructions" / "result.json"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        path = work / "messages.jsonl"
        path.write_bytes(
            b"".join(orjson.dumps(m) + b"\n" for m in events(args.messages, args.messages // 10))
        )
        one, two = (instructions(path, work, tasks) for tasks in (1, 2))
    result = {"messages": args.messages, "instructions_per_message": round((two - one) / args.messages)}
    print(json.dumps(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
