"""payload.release_memory and keep_freed_memory: a process that lives across tasks keeps the memory a task
freed for the next one (up to a resident size), instead of having the kernel fault and zero it in again.

Each case runs a fresh interpreter, as the ``replicator`` command starts one: Arrow's allocator reads its
settings when Arrow loads. A "task" allocates ~500 MB through Arrow's pool, frees it and calls
release_memory; the page faults of a second, identical task tell whether the first one's memory was
reused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TASKS = """
import ctypes, json, os, resource
# Page faults counted in base pages whatever the machine's transparent huge pages setting (PR_SET_THP_DISABLE)
ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0)
from replicator import payload
payload.keep_freed_memory()
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def task():
    before = faults()
    base = pa.array(np.arange(125_000, dtype=np.int64))
    arrays = [pc.add(base, i) for i in range(400)]  # 400 buffers of 1 MB from Arrow's pool
    strings = [pc.cast(pc.add(base, i), pa.string()) for i in range(20)]
    del arrays, strings
    payload.release_memory()
    return faults() - before

start = payload._resident()
first = task()
kept = payload._resident()
second = task()
print(json.dumps({"start": start >> 20, "first": first, "kept": kept >> 20, "second": second,
                  "delay": os.environ.get("MIMALLOC_PURGE_DELAY")}))
"""


def _run(**env: str) -> dict[str, int | str]:
    environment = dict(os.environ)
    for name in ("MIMALLOC_PURGE_DELAY", "REPLICATOR_KEEP_RESIDENT_MB"):  # the test's own, set below
        environment.pop(name, None)
    environment.update(env, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", TASKS],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_task_reuses_the_memory_the_previous_one_freed() -> None:
    run = _run()
    assert run["delay"] == "60000"
    assert run["kept"] - run["start"] >= 300, run  # the ~500 MB the first task freed stayed with the process
    assert run["second"] * 5 < run["first"], run  # and the second task faulted few pages in


def test_a_process_above_its_limit_gives_the_freed_memory_back() -> None:
    for limit in ("0", "64"):  # 0: always; 64 MB: below what the process holds after the first task
        run = _run(REPLICATOR_KEEP_RESIDENT_MB=limit)
        assert run["kept"] - run["start"] < 100, (limit, run)
        assert run["second"] * 2 > run["first"], (limit, run)  # faulted in again


def test_the_allocator_setting_of_the_environment_wins() -> None:
    run = _run(MIMALLOC_PURGE_DELAY="10")  # freed pages returned 10 ms after: nothing for the next task
    assert run["delay"] == "10"
    assert run["second"] * 2 > run["first"], run
