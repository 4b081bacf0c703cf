"""The embedded SparkSession's set-up that the engine's speed depends on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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


def test_workers_import_the_installed_pyspark_not_sparks_zip(spark):
    """The embedded session's Python daemon (replicator.worker_daemon) moves Spark's pyspark.zip behind the
    installed pyspark, so a worker's modules come with their bytecode instead of being compiled again in
    every process."""
    import pyspark as driver_pyspark

    def where(batches):  # type: ignore[no-untyped-def]
        import pyarrow as pa
        import pyspark
        import pyspark.worker

        for _ in batches:
            pass
        yield pa.RecordBatch.from_arrays(
            [pa.array([pyspark.__file__]), pa.array([pyspark.worker.__file__])], names=["package", "worker"]
        )

    row = spark.range(1).mapInArrow(where, "package string, worker string").collect()[0]
    assert ".zip" not in row["package"] and ".zip" not in row["worker"], row
    assert row["package"] == driver_pyspark.__file__


def test_installed_pyspark_first_moves_only_the_installed_packages_own_zips(tmp_path):
    """spark-submit's zips inside the installed pyspark package go behind it; a zip of another Spark
    distribution (same file name, maybe another build) and a py4j zip of another version than the installed
    py4j's stay."""
    from replicator.pythonpath import installed_pyspark_first

    site = tmp_path / "site-packages"
    package = site / "pyspark"
    lib = package / "python" / "lib"
    lib.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (site / "py4j").mkdir()
    (site / "py4j" / "__init__.py").write_text("")
    (site / "py4j" / "version.py").write_text("__version__ = '0.10.9.9'\n")
    own = str(lib / "pyspark.zip")
    own_py4j = str(lib / "py4j-0.10.9.9-src.zip")
    old_py4j = str(lib / "py4j-0.0.1-src.zip")
    vendor = str(tmp_path / "opt" / "spark" / "python" / "lib" / "pyspark.zip")
    path = ["/app", own, own_py4j, old_py4j, vendor, str(site), "/lib.zip"]

    moved = installed_pyspark_first(path)

    assert moved == [own, own_py4j]
    assert path == ["/app", old_py4j, vendor, str(site), "/lib.zip", own, own_py4j]


def test_installed_pyspark_first_finds_the_package_python_imports_from_a_folder():
    """Without importing pyspark or reading every distribution's metadata, the package folder is the one
    Python imports once the zips are behind it (the pip pyspark's here, whose Spark ships its zips inside
    it), and the installed py4j's version is its distribution's."""
    import sys
    from importlib import metadata

    import pyspark

    from replicator.pythonpath import _installed_py4j, installed_package_dir, installed_pyspark_first

    package = installed_package_dir()
    assert package == Path(pyspark.__file__).resolve().parent
    assert _installed_py4j(sys.path) == metadata.version("py4j")
    own = str(package / "python" / "lib" / "pyspark.zip")
    path = [own, *sys.path]
    assert installed_pyspark_first(path) == [own]
    assert path == [*sys.path, own]
    assert installed_package_dir(["/nowhere", own]) is None  # a zip is not an installed package


def test_a_local_frame_has_a_task_per_record_batch_converted_on_the_executors(spark):
    """local_frame's rows reach the executors as Spark's RDD of Arrow batches, a partition each, also past
    the default parallelism (4 here): a local relation would spread them over that parallelism, and
    convert them in the driver JVM with generated code."""
    import pyarrow as pa

    from replicator.spark import local_frame, struct

    schema = pa.schema([("task", pa.int32()), ("name", pa.string())])
    rows = [(i, f"n{i}") for i in range(6)]
    frame = local_frame(spark, rows, schema)
    assert frame.rdd.getNumPartitions() == 6
    assert "LocalTableScan" not in frame._jdf.queryExecution().executedPlan().toString()
    assert [tuple(r) for r in frame.collect()] == rows
    assert frame.schema == struct(schema)
    assert local_frame(spark, rows, schema, tasks=2).rdd.getNumPartitions() == 2


def test_the_session_starts_without_pysparks_dataframe_debugging(spark):
    from pyspark.errors.utils import is_debugging_enabled

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert not is_debugging_enabled()  # what PySpark's Column functions consult


def test_the_checkpoint_is_written_through_the_file_system_api(spark, tmp_path):
    """The streaming checkpoint's manager is Spark's FileSystem-based one (no forked readlink/chmod per
    file), a class this Spark has (its package moved in Spark 4: a wrong name fails every query's start),
    and a query restarted on its checkpoint resumes after the batches it committed."""
    from replicator.spark import SESSION_DEFAULTS

    name = SESSION_DEFAULTS["spark.sql.streaming.checkpointFileManagerClass"]
    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == name
    spark._jvm.java.lang.Class.forName(name)  # raises if this Spark does not have it
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    seen: list[list[str]] = []

    def run() -> None:
        stream = spark.readStream.format("text").load(str(source))
        batch = lambda frame, _id: seen.append(sorted(r.value for r in frame.collect()))  # noqa: E731
        query = stream.writeStream.foreachBatch(batch).option("checkpointLocation", str(checkpoint))
        query.trigger(availableNow=True).start().awaitTermination()

    (source / "a.txt").write_text("one\n")
    run()
    (source / "b.txt").write_text("two\n")
    run()
    assert seen == [["one"], ["two"]]
    commits = sorted(p.name for p in (checkpoint / "commits").iterdir() if not p.name.startswith("."))
    assert commits == ["0", "1"]


def test_session_defaults_leave_what_spark_submit_set(spark):
    """Under spark-submit, --conf and spark-defaults.conf reach the JVM as system properties; the
    embedded session's launch passes its settings the same way, so they count as set."""
    from replicator.spark import SESSION_DEFAULTS, _unset

    assert _unset({"spark.master": "elsewhere", "spark.replicator.test.unset": "1"}) == {
        "spark.replicator.test.unset": "1"
    }
    assert _unset(SESSION_DEFAULTS) == {}  # the launch's own settings count as given
    # the master the launch was given (the fixture's), not one a default put in its place
    assert spark.sparkContext.getConf().get("spark.master") == os.environ["REPLICATOR_SPARK_MASTER"]


@pytest.mark.slow
@pytest.mark.cluster  # a spark-submit launch of its own (minutes on 2 busy cores): make test-cluster
def test_spark_submit_runs_the_job_without_sparks_info_lines(tmp_path):
    """``spark-submit jobs/mirror.py`` as docs/how-to/cluster.md shows it (the venv's bin on PATH): the job
    turns Spark's console logging down to warnings once its session exists, so no line per task."""
    import os
    import subprocess
    import sys

    from tests.helpers import canal, order, write_jsonl

    repo = Path(__file__).resolve().parent.parent
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1, "a")], es=1_700_000_000_000)])
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: submitted\nsource: {type: files, path: landing, dialect: canal-json}\n"
        "target: {path: lake}\nstate: {path: state}\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "REPLICATOR_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [
            "spark-submit",
            "--master",
            "local[1]",
            str(repo / "jobs" / "mirror.py"),
            "--config",
            str(job),
            "--available-now",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "lake" / "shop" / "orders" / "_delta_log").is_dir()
    assert "INFO DAGScheduler" not in done.stderr and "INFO TaskSetManager" not in done.stderr, done.stderr[
        -3000:
    ]
