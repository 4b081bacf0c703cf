"""payload.freeze_heap in Spark's reused Python workers: what a task's start freezes does not pile up.

Spark's daemon runs ``gc.collect()`` after each task; the engine's tasks freeze the heap as they start so
that collection skips the worker's long-lived objects. A cycle among frozen objects is never collected,
so a task that froze its own per-task objects (and they formed cycles) would leak at every task: here
each worker's frozen count must stop growing after its first tasks."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pyarrow as pa


def _task(cycle: bool, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import gc
    import os

    from replicator.payload import freeze_heap

    freeze_heap()
    for _batch in batches:
        pass
    if cycle:  # garbage the task makes in a cycle: younger than the freeze, the daemon collects it
        a: dict[str, object] = {}
        a["self"] = a
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()], "frozen": [gc.get_freeze_count()]})


def test_tasks_that_freeze_the_heap_do_not_pile_up_frozen_objects(spark):  # type: ignore[no-untyped-def]
    frame = spark.range(1).coalesce(1)
    seen: dict[int, list[int]] = {}
    for i in range(40):
        row = frame.mapInArrow(partial(_task, i % 2 == 0), "pid long, frozen long").toArrow().to_pylist()[0]
        seen.setdefault(row["pid"], []).append(row["frozen"])
    for counts in seen.values():
        assert counts[0] > 1_000  # the worker's imports were frozen
        settled = counts[len(counts) // 2 :]  # after its first tasks
        assert max(settled) - min(settled) <= 10, counts
