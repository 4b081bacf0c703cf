"""``replicator jvm-archive``: write the class data sharing archive the embedded driver JVM starts from.

A mirror run on a few generated canal-json messages (DDL, inserts, updates, deletes of two tables, in
two files) loads the classes a real run loads, embedded and then on a standalone cluster started on
127.0.0.1 for it (replicator.cluster), in one driver JVM; that JVM dumps them at exit
(``-XX:ArchiveClassesAtExit``) into a temporary file, moved into place whole
(replicator.spark.class_archive says where, and why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from shlex import quote

import yaml

from replicator.cluster import standalone
from replicator.spark import LOCAL_DEFAULTS, class_archive, submitted_defaults

TYPES = {"id": "bigint(20)", "name": "varchar(64)", "price": "decimal(10,2)", "at": "datetime(3)"}
SQL_TYPES = {"id": -5, "name": 12, "price": 3, "at": 93}


def _message(table: str, kind: str, es: int, rows: list[dict[str, str | None]], **extra: object) -> str:
    message = {
        "data": rows, "database": "warmup", "es": es, "id": es, "isDdl": False, "mysqlType": TYPES,
        "old": None, "pkNames": ["id"], "sql": "", "sqlType": SQL_TYPES, "table": table, "ts": es + 1,
        "type": kind, **extra,
    }  # fmt: skip
    return json.dumps(message)


def _row(key: int) -> dict[str, str | None]:
    return {"id": str(key), "name": f"n{key}", "price": f"{key}.50", "at": "2026-01-02 03:04:05.678"}


def sample_files(landing: Path) -> None:
    """Two files of canal-json: a CREATE TABLE, then inserts, updates and deletes, for two tables."""
    landing.mkdir(parents=True, exist_ok=True)
    es = 1_700_000_000_000
    for part, table in enumerate(("orders", "items")):
        create = f"CREATE TABLE {table} (id bigint primary key, name varchar(64), price decimal(10,2))"
        ddl = {
            "isDdl": True,
            "sql": create,
            "data": None,
            "pkNames": None,
            "mysqlType": None,
            "sqlType": None,
        }
        lines = [
            _message(table, "CREATE", es, [], **ddl),
            *(_message(table, "INSERT", es + k, [_row(k)]) for k in range(1, 200)),
            *(
                _message(table, "UPDATE", es + 1000 + k, [_row(k)], old=[{"name": "old"}])
                for k in range(1, 50)
            ),
            *(_message(table, "DELETE", es + 2000 + k, [_row(k)]) for k in range(50, 60)),
        ]
        (landing / f"part-{part}.jsonl").write_text("\n".join(lines) + "\n")


def write_archive(target: Path | None = None) -> Path:
    """Run the sample job in a child process whose JVM dumps its classes; move the archive to ``target``
    (default: replicator.spark.class_archive()). Raises RuntimeError naming what failed."""
    target = target or class_archive()
    if target is None:
        raise RuntimeError("no archive path: java was not found, or REPLICATOR_JVM_ARCHIVE=off")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="replicator-jvm-archive-") as work, ExitStack() as cluster:
        root = Path(work)
        sample_files(root / "landing")
        dump = target.parent / f".{target.name}.{os.getpid()}.tmp"
        defaults = LOCAL_DEFAULTS["spark.driver.extraJavaOptions"]
        options = f"{defaults} -XX:ArchiveClassesAtExit={quote(str(dump))}"
        jobs = [_job_file(root, "local", options)]
        # Then the same run on a standalone cluster, in the same JVM: a driver under spark-submit talks to
        # a master and to remote executors (Spark's standalone client, its block transfer and shuffle
        # messages, Netty's buffers: ~250 classes a local run never loads, ~0.15 s of such a driver's
        # start when they come from the jars). Where no cluster starts, the archive has the local run's.
        try:
            master, _env = cluster.enter_context(standalone(root / "cluster", cores=1, memory="1g"))
            jobs.append(_job_file(root, "cluster", options, master))
        except (RuntimeError, OSError) as exc:
            print(f"replicator: no standalone cluster for the sample run ({exc})", file=sys.stderr)
        command = [sys.executable, "-m", "replicator.commands.jvm_archive", *map(str, jobs)]
        # (the UI listens on this address: loopback, not every interface)
        env = {**os.environ, "REPLICATOR_JVM_ARCHIVE": "off", "SPARK_LOCAL_IP": "127.0.0.1"}
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0 or not dump.is_file() or dump.stat().st_size == 0:
                tail = "\n".join(done.stderr.splitlines()[-20:])
                raise RuntimeError(
                    f"the sample job did not leave an archive (exit {done.returncode}):\n{tail}"
                )
            os.replace(dump, target)  # whole, never half-written: a truncated archive crashes the JVM
        finally:
            dump.unlink(missing_ok=True)
    return target


def write_submit_defaults(archive: Path) -> Path:
    """A properties file for spark-submit beside ``archive`` (``spark-submit.conf``): replicator's driver
    settings with the archive mapped, so that ``spark-submit --properties-file <it>`` starts its driver as
    the embedded one starts. Not Spark's own ``conf/spark-defaults.conf`` of the installation: that folder
    is on the driver's class path, and a class path folder that is not empty makes the JVM refuse every
    class archive (measured: "shared class paths mismatch"), the embedded driver's too."""
    path = archive.parent / "spark-submit.conf"
    lines = [
        "# Written by `replicator jvm-archive`: spark-submit --properties-file <this file>",
        *(f"{key} {value}" for key, value in submitted_defaults(archive).items()),
    ]
    part = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    part.write_text("\n".join(lines) + "\n")
    os.replace(part, path)
    return path


def _job_file(root: Path, name: str, options: str, master: str | None = None) -> Path:
    """A job file for the sample files: its own mirror and state under ``root / name``."""
    job = {
        "name": f"jvm-archive-{name}",
        "source": {"type": "files", "path": str(root / "landing"), "dialect": "canal-json"},
        "target": {"path": str(root / name / "lake")},
        "state": {"path": str(root / name / "state")},
        "spark": {
            "master": master,
            "conf": {
                # the job file's options replace the embedded defaults': no archive read, this one dumped
                "spark.driver.extraJavaOptions": options,
                # The web UI's classes too (Jetty's, ~0.1 s of a driver's start): a driver under
                # spark-submit runs it, an embedded one does not (and maps none of them).
                "spark.ui.enabled": "true",
            },
        },
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _sample_runs(jobs: list[str]) -> int:
    """The child: each job file's mirror run in turn, in one driver JVM (it dumps the archive at exit)."""
    from pyspark.sql import SparkSession

    from replicator.commands.cli import main

    for job in jobs:
        code = main(["mirror", "--config", job, "--available-now"])
        if code:
            return code
        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()  # the next job's session starts on its own master, in the same JVM
    return 0


if __name__ == "__main__":
    sys.exit(_sample_runs(sys.argv[1:]))
