"""The embedded SparkSession's set-up that the engine's speed depends on."""

from __future__ import annotations

import os


def test_workers_start_with_the_files_folder_on_their_path(spark):
    """A new Python worker finds Spark's files folder already on its path (from the daemon's
    PYTHONPATH), so it does not invalidate the import caches before its first task (0.4 s each)."""
    from pyspark import SparkFiles

    folder = SparkFiles.getRootDirectory()

    def report(batches):  # type: ignore[no-untyped-def]
        import os

        import pyarrow as pa

        for _ in batches:
            pass
        yield pa.RecordBatch.from_arrays([pa.array([os.environ.get("PYTHONPATH", "")])], names=["path"])

    rows = spark.range(1).mapInArrow(report, "path string").collect()
    assert folder in rows[0]["path"].split(os.pathsep)


def test_warming_a_worker_loads_the_decode_modules(spark):
    """warm_workers' task (replicator.decode.warm) runs in a Python worker and leaves it with the modules a
    decode task imports; an import it cannot make fails the task."""
    from functools import partial

    import pyarrow as pa

    from replicator.decode import warm

    def loaded(batches):  # type: ignore[no-untyped-def]
        import sys

        yield from warm("canal-json", batches)
        names = ["msgspec", "pyarrow.parquet", "replicator.exchange", "replicator.dialects.canal_json"]
        yield pa.RecordBatch.from_arrays([pa.array([all(n in sys.modules for n in names)])], names=["ok"])

    assert spark.range(1).mapInArrow(loaded, "ok boolean").collect()[0]["ok"]
    assert spark.range(1).mapInArrow(partial(warm, "canal-json"), "task int").collect() == []
