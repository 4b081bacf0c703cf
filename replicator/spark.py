"""The SparkSession: an embedded local default that spark-submit settings override."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from replicator.config import JobConfig

# Small, quiet, local defaults; anything set by spark-submit or the job file wins.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    # The JVM moves file names and small results, never a batch's events (replicator.exchange) or what
    # the driver collects that may be large (net changes, dead letters: payload.to_files). So the heap
    # does not grow with the batch: 512m (Spark's least for local mode) ran the 5M catch-up's
    # 500k-event batches and a 1M-event batch, and the JVM's RSS fell by ~0.4 GB (benchmarks/LOG.md).
    "spark.driver.memory": "512m",
    # A heap that runs out in one of Spark's own threads (task-result-getter) leaves the job waiting
    # forever: exit instead, so the run fails and restarts from its checkpoint (exactly once holds).
    # The JVM plans and moves a few large binary values per task, it does not process rows: a C1-only JIT
    # with one compiler thread and the serial collector leave the cores to the Python workers (measured on
    # the 1M catch-up: driver JVM CPU 19.0 s -> 8.6 s on a cluster, wall 35.3 s -> 28.6 s locally).
    "spark.driver.extraJavaOptions": (
        "-XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"
    ),
    # Whole-stage code generation compiles Java for plans that see a few payload rows per task.
    "spark.sql.codegen.wholeStage": "false",
    # Only a batch's net changes and small results reach the driver (replicator.engine).
    "spark.driver.maxResultSize": "2g",
    "spark.sql.adaptive.enabled": "true",
}
# Arrow's allocator (mimalloc) returns freed pages to the system 10 ms after they are freed by default; a
# minute instead, so that a task reuses what the previous one freed (payload.keep_freed_memory sets it for
# the driver, whose local Python workers inherit it; SESSION_DEFAULTS for a cluster's workers).
ALLOCATOR_ENV = {"MIMALLOC_PURGE_DELAY": "60000"}
# Settings the engine gives the session when it starts unless the deployment sets them (each is read when
# the session or a query starts): spark-submit's --conf and spark-defaults.conf win, and so does the job
# file's spark.conf.
SESSION_DEFAULTS: dict[str, str] = {
    # PySpark's DataFrame debugging wraps each Column function to capture its Python call site: a stack
    # walk and a few py4j round trips per call, and one more per JVM object it made once Python frees it.
    # The driver builds its plans from such calls; measured on a cluster's 1M catch-up, the driver's CPU
    # fell by 0.1-0.2 s without it (benchmarks/LOG.md). An error still names the failing expression.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # The streaming checkpoint (state.path/checkpoint: a local folder, or s3a: docs/object-storage.md) goes
    # through Hadoop's FileContext by default, which, without Hadoop's native library, forks `readlink`
    # for each file status and `chmod` for each new file: 29 processes a batch, ~140 ms between two
    # batches (JFR, the 5M catch-up). Through the FileSystem API a batch forks 6 `chmod`s (~40 ms), and a
    # local rename is still atomic (POSIX rename(2)); the job lock keeps a second writer out.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    # A cluster's Python workers keep freed memory for their next task as the driver does (a local
    # worker inherits the driver's environment): payload.release_memory.
    **{f"spark.executorEnv.{name}": value for name, value in ALLOCATOR_ENV.items()},
}
# Settings the engine relies on, whatever the deployment says.
REQUIRED: dict[str, str] = {
    # A files batch's decode tasks are Spark's file partitions, packed by bytes towards this many: each
    # task opens its own files, so the packing only balances the cores. Measured on the 5M catch-up (10
    # files of 40 MB per batch): the default (the parallelism, 4) made 5 tasks of 2 files, 3 waves on 2
    # cores; 16 makes a task per file, 5 even waves: 6.2 -> ~5.2 s per batch.
    "spark.sql.files.minPartitionNum": "16",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    # The change log's Parquet files are committed to Delta, which reads microsecond timestamps.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Arrow data made on the driver (local_frame: a batch's file listing, the fold's bucket listings,
    # payloads) takes Spark's RDD path: a partition per record batch, turned into rows on the executors.
    # Under this threshold Spark makes a local relation instead: the driver JVM converts the rows with
    # generated code (its first compile loads janino from a signed jar, which class sharing skips: ~330
    # classes) and spreads them over the default parallelism rather than a task per batch.
    "spark.sql.execution.arrow.localRelationThreshold": "0",
}


def get_spark(
    config: JobConfig | None = None, app_name: str = "replicator", *, delta_spark: bool = False
) -> SparkSession:
    """Return the active session or build one; ``delta_spark``: with Delta Lake for Spark whatever the
    job's writer (``optimize`` of a mirror delta-rs cannot rewrite).

    Under ``spark-submit`` (``SPARK_SUBMIT`` style launch, a master already set) only the required settings
    are applied; embedded, the local defaults are used with ``local[*]``.
    """
    from pyspark.sql import SparkSession

    # Spark's Python workers, should any start, use this interpreter and its packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    builder = SparkSession.builder.appName(config.name if config else app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ or active is not None
    if not submitted:
        master = (config.spark.master if config else None) or os.environ.get("REPLICATOR_SPARK_MASTER")
        master = master or "local[*]"
        builder = builder.master(master)
        defaults = {
            **LOCAL_DEFAULTS,
            **SESSION_DEFAULTS,
            "spark.driver.extraJavaOptions": driver_java_options(),
        }
        for key, value in defaults.items():
            builder = builder.config(key, value)
        if master.startswith("local"):  # an embedded session listens on loopback only
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
            # Local workers run this installation, so they can start from its daemon, which imports the
            # installed pyspark, not Spark's zip (replicator.worker_daemon): ~0.5 s less CPU per run. Not
            # on a cluster by default: there replicator may come with --py-files, which the daemon
            # cannot see (docs/operations.md).
            builder = builder.config("spark.python.daemon.module", "replicator.worker_daemon")
    elif active is None:
        for key, value in _unset(SESSION_DEFAULTS).items():
            builder = builder.config(key, value)
    extras = jar_settings(config, delta_spark)
    if submitted and active is None:
        extras = _unset(extras)
    for key, value in extras.items():
        builder = builder.config(key, value)
    if config:
        for key, value in config.spark.conf.items():
            builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        packages = extras.get("spark.jars.packages")
        if packages and active is None:  # no jars fetched, and Spark's resolver could not get them either
            from replicator import jars
            from replicator.errors import SourceFailed

            raise SourceFailed(
                f"Spark did not start: this job needs {packages}, which are not installed in "
                f"{jars.home() / 'spark'} and which Spark's resolver (spark.jars.packages) could not fetch "
                "(see the lines above): run `replicator jars` (make install does), or give spark-submit "
                "--packages with a registry it reaches (docs/operations.md)"
            ) from exc
        raise
    if submitted and active is None and extras.get("spark.jars"):
        _driver_loads(spark, extras["spark.jars"].split(","))
    for key, value in REQUIRED.items():
        spark.conf.set(key, value)
    if config is not None and config.catalog.enabled and not config.catalog.metastore_uri:
        _derby_log(spark, config.catalog.metastore)
    if submitted and active is None:
        # spark-submit's console logging is INFO: a line per task buries the job's own lines. Turned down
        # once the session exists (REPLICATOR_SPARK_LOG_LEVEL=INFO keeps it).
        spark.sparkContext.setLogLevel(os.environ.get("REPLICATOR_SPARK_LOG_LEVEL", "WARN"))
        _warn_driver_options(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", ""))
    if not submitted:
        spark.sparkContext.setLogLevel("ERROR")
        if (spark.sparkContext.master or "").startswith("local"):
            _files_dir_on_workers_path(spark)
    return spark


# The settings a driver under spark-submit must be given by the deployment (its JVM starts before replicator
# runs): conf/spark-defaults.conf in the repository, and the spark-submit.conf that `replicator jvm-archive`
# writes beside its archive (replicator.commands.jvm_archive), hold these.
SUBMITTED_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.sql.codegen.wholeStage",
    "spark.sql.session.timeZone",
    "spark.sql.mapKeyDedupPolicy",
    "spark.sql.execution.arrow.pyspark.enabled",
    "spark.driver.maxResultSize",
    "spark.sql.adaptive.enabled",
)


def submitted_defaults(archive: Path | None = None) -> dict[str, str]:
    """SUBMITTED_KEYS' values, the driver's JVM options with ``archive`` mapped when one is given."""
    found = {key: LOCAL_DEFAULTS[key] for key in SUBMITTED_KEYS}
    if archive is not None:
        found["spark.driver.extraJavaOptions"] = driver_java_options(archive)
    return found


def missing_driver_options(java_options: str) -> list[str]:
    """The options of LOCAL_DEFAULTS' driver JVM that ``java_options`` lacks (a submitted driver's JVM
    started before replicator ran, so only the deployment can give them)."""
    given = set(java_options.split())
    return [o for o in LOCAL_DEFAULTS["spark.driver.extraJavaOptions"].split() if o not in given]


def _warn_driver_options(java_options: str) -> None:
    # Spark's JVM defaults cost a submitted driver ~3x the CPU (a 1M catch-up on a standalone cluster:
    # 28.4 against 8.9 CPU-s, benchmarks/LOG.md), and without ExitOnOutOfMemoryError a heap that runs out
    # in one of Spark's threads leaves the query waiting forever. Said once, when the session starts.
    missing = missing_driver_options(java_options)
    if missing:
        import structlog

        structlog.get_logger("replicator").warning(
            "driver JVM without replicator's options",
            missing=" ".join(missing),
            fix="spark-submit --properties-file conf/spark-defaults.conf, or the spark-submit.conf "
            "`replicator jvm-archive` writes beside its archive (docs/how-to/cluster.md)",
        )


def writer_session(config: JobConfig) -> SparkSession | None:
    """The session the job's mirror writer writes through (delta-spark), started with its jars and the job's
    settings as the mirror job starts it; None for a writer that needs none (delta-rs). For the commands
    that write mirrors outside a running job (bootstrap, repair)."""
    from replicator.sinks import writer_factory

    if not getattr(writer_factory(config.target.writer), "writes_with_spark", False):
        return None
    return get_spark(config)


# Delta Lake for Spark's session settings (static: read when the session starts).
DELTA_SPARK: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Delta rebuilds a table's state (its log's actions) with a Spark job of this many partitions, at
    # each read and write that finds a new version: Delta's default, 50, is for logs of millions of
    # actions. A mirror's log is a checkpoint and a few commits: measured on local[2] (a tiny table),
    # the first read after a write took 87 s with 50 partitions and 15 s with 1 (a shared, loaded
    # machine). A deployment's --conf still wins.
    "spark.databricks.delta.snapshotPartitions": "1",
}
JARS_ENV = "REPLICATOR_SPARK_JARS"  # "all": every session gets the Kafka connector and Delta (the tests)


def jar_settings(config: JobConfig | None, delta_spark: bool = False) -> dict[str, str]:
    """The jars (``replicator.jars``) and settings a job's session needs beyond pyspark: the Kafka connector
    for a Kafka source, Delta Lake for Spark for the delta-spark writer and for the catalog (with Spark's Hive
    support: ``catalog.enabled``). The embedded default (files source, delta-rs writer) needs none, and its
    start does not pay for them."""
    everything = os.environ.get(JARS_ENV) == "all"
    catalog = config is not None and config.catalog.enabled
    kafka = everything or (config is not None and config.source.type == "kafka")
    delta = (
        everything or delta_spark or catalog or (config is not None and config.target.writer == "delta-spark")
    )
    s3 = config is not None and config.on_object_store()
    settings: dict[str, str] = {}
    from replicator import jars

    if kafka or delta:
        hive = config.catalog.spark_settings() if catalog and config is not None else {}
        settings = {**jars.spark_settings(), **(DELTA_SPARK if delta else {}), **hive}
    if s3:  # Hadoop's s3a for the checkpoint, a files source and delta-spark (docs/object-storage.md)
        from replicator import storage

        for key, value in {**jars.s3_settings(), **storage.current().hadoop()}.items():
            joined = settings.get(key) if key in ("spark.jars", "spark.jars.packages") else None
            settings[key] = f"{joined},{value}" if joined else value
    return settings


def _driver_loads(spark: SparkSession, jars: list[str]) -> None:
    """Make ``jars`` loadable in a driver spark-submit started without them. Its JVM was up before this
    session's ``spark.jars`` was set: Spark ships them to the executors, but the driver's own class loader
    (spark-submit's, which the query threads inherit and Spark's data source lookup asks) does not get
    them, and ``format("kafka")`` is not found. That loader takes URLs (Spark's MutableURLClassLoader,
    what --jars fills); another one leaves the driver as it was, and the lookup's error names the fix."""
    from replicator.logging import get_logger

    jvm = spark._jvm  # type: ignore[attr-defined]
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        for jar in jars:
            loader.addURL(jvm.java.io.File(jar).toURI().toURL())
    except Exception as exc:
        get_logger("replicator.spark").warning(
            "the driver's class loader takes no jars: give spark-submit --jars or --packages",
            loader=str(loader.getClass().getName()),
            error=str(exc)[:200],
        )


def _derby_log(spark: SparkSession, metastore: Path | None) -> None:
    """The embedded metastore's Derby writes its log (derby.log) into the working folder unless told: into
    the metastore's folder instead. Read when Derby starts, at the catalog's first use (after this)."""
    if metastore is None:
        return
    Path(metastore).mkdir(parents=True, exist_ok=True)
    system = spark._jvm.java.lang.System  # type: ignore[attr-defined,union-attr]
    if system.getProperty("derby.stream.error.file") is None:
        system.setProperty("derby.stream.error.file", str(Path(metastore) / "derby.log"))


def _unset(settings: dict[str, str]) -> dict[str, str]:
    """Those of ``settings`` that spark-submit did not set (its --conf and spark-defaults.conf reach the
    driver's JVM as system properties, which a new SparkConf reads)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the gateway to the JVM spark-submit started
    given = SparkConf()
    return {key: value for key, value in settings.items() if not given.contains(key)}


def _files_dir_on_workers_path(spark: SparkSession) -> None:
    """Start the Python workers with Spark's files folder already on their path.

    Each new Python worker adds that folder to ``sys.path`` before its first task and, finding it new,
    calls ``importlib.invalidate_caches()``, which re-reads the directory of ``pyspark.zip`` once per
    package imported from it: 0.4 s of each worker's first task, measured on the 1M catch-up. With the
    folder in the workers' ``PYTHONPATH`` (Spark passes ``SparkContext.environment`` to its Python
    daemon) nothing is new. Local mode only: there the executor's files folder is the driver's."""
    from pyspark import SparkFiles

    environment = spark.sparkContext.environment
    folder = SparkFiles.getRootDirectory()
    paths = [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in paths:
        environment["PYTHONPATH"] = os.pathsep.join([folder, *paths])


# ---- the driver JVM's class data sharing archive -----------------------------------------------------------
# Starting Spark's driver JVM is mostly loading and verifying classes from Spark's jars: measured on the
# 1M catch-up, ~9 s and ~8.8 CPU seconds before the first task. A class data sharing (AppCDS) archive of
# the classes a mirror run loads, mapped at start, cut that to ~5 s and 4.9 CPU seconds (wall 23.2 ->
# 19.4 s; benchmarks/LOG.md). `replicator jvm-archive` writes it (`make install` runs it); an embedded
# session starts from it when it exists. A missing archive is skipped, one made by another JVM or for
# other jars is refused by the JVM (it starts without it); a half-written one would crash the JVM, so
# the archive is only ever moved into place whole.
ARCHIVE_ENV = "REPLICATOR_JVM_ARCHIVE"  # a path, or "off"


def _java() -> Path | None:
    """The java Spark's launcher runs: $JAVA_HOME/bin/java, else the one on PATH (resolved)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(os.path.realpath(found)) if found and os.path.exists(found) else None


def class_archive() -> Path | None:
    """Where this installation's archive lives: keyed by the JVM (its files' size and time) and pyspark's
    jars, in the environment's ``share/replicator`` (else ``~/.cache/replicator``); None when turned off
    (``REPLICATOR_JVM_ARCHIVE=off``) or when no java is found."""
    setting = os.environ.get(ARCHIVE_ENV, "")
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting)
    java = _java()
    if java is None:
        return None
    import pyspark

    facts = [str(java), pyspark.__version__, os.path.dirname(pyspark.__file__)]
    for path in (java, java.parent.parent / "lib" / "server" / "libjvm.so"):
        if path.exists():
            stat = path.stat()
            facts += [str(stat.st_size), str(stat.st_mtime_ns)]
    key = hashlib.sha256("\0".join(facts).encode()).hexdigest()[:16]
    base = Path(sys.prefix) / "share"
    folder = base / "replicator" if os.access(base if base.exists() else sys.prefix, os.W_OK) else None
    folder = folder or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "replicator"
    return folder / f"spark-driver-{key}.jsa"


def driver_java_options(archive: Path | None = None) -> str:
    """The embedded driver's JVM options: the local defaults, and the class archive when there is one."""
    options = LOCAL_DEFAULTS["spark.driver.extraJavaOptions"]
    archive = archive or class_archive()
    if archive is None or not archive.is_file():
        return options
    import shlex

    # -Xlog off: a refused archive (another JVM's) is not worth a warning on every start.
    return f"{options} -XX:SharedArchiveFile={shlex.quote(str(archive))} -Xlog:cds=off -Xlog:cds+dynamic=off"


def local_frame(
    spark: SparkSession,
    rows: list[tuple[Any, ...]],
    schema: pa.Schema,
    tasks: int | None = None,
) -> DataFrame:
    """Rows made on the driver as a DataFrame of ``tasks`` partitions (default: a row each), in order,
    sent to the JVM as Arrow record batches (a batch per partition).

    Not ``createDataFrame`` of Python rows: those become an RDD whose rows a Python worker converts, for
    which Spark started a second Python daemon and its workers (a plain RDD job's workers are not a SQL
    job's); the fold's first tasks waited ~0.9 s for them (measured on the 1M catch-up)."""
    import pyarrow as pa

    tasks = max(1, min(tasks or len(rows), len(rows)))
    size = -(-len(rows) // tasks) if rows else 1
    as_dicts = [dict(zip(schema.names, r, strict=True)) for r in rows]
    batches = [pa.RecordBatch.from_pylist(as_dicts[i : i + size], schema) for i in range(0, len(rows), size)]
    return spark.createDataFrame(pa.Table.from_batches(batches, schema))


def struct(schema: pa.Schema) -> StructType:
    """An Arrow schema as Spark's StructType. The engine gives Spark schemas as types, never as DDL text:
    text goes through Spark's SQL parser, whose first use costs the driver JVM ~0.2 CPU seconds (loading
    its grammar), which a mirror run with the default writer needs nowhere else (benchmarks/LOG.md)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
