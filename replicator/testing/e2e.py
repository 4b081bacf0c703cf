"""A real capture pipeline on 127.0.0.1 for the end-to-end tests and ``make e2e`` (issue 31): MariaDB from
the system's packages (Debian ``mariadb-server``), a Kafka broker (``replicator.testing.broker``) and Kafka
Connect standalone with Debezium's MariaDB connector (``replicator.jars`` group ``connect``).

Everything lives in a folder of the caller's (data directory, socket, logs, Connect offsets) and every
process is started in its own process group and stopped by its PID when its context ends."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replicator import jars
from replicator.testing.broker import LOG4J_TO_FILE, Broker, _java, free_port
from replicator.testing.broker import stop as _stop

USER = "replicator"
PASSWORD = "replicator"
SERVER_ID = 1


class PipelineError(RuntimeError):
    """A part of the pipeline did not start; the message carries its log's tail."""


def _tail(path: Path, size: int = 3000) -> str:
    return path.read_text(errors="replace")[-size:] if path.exists() else f"({path} not written)"


def _binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/usr/local/sbin")
    if found is None:
        raise PipelineError(f"{name} not found: install MariaDB (Debian: apt-get install mariadb-server)")
    return found


@dataclass
class MariaDB:
    port: int
    socket: Path
    folder: Path
    pid: int

    def connect(self, database: str | None = None, **options: Any):
        """A pymysql connection as the root user over the socket (autocommit on, utf8mb4)."""
        import pymysql

        return pymysql.connect(
            unix_socket=str(self.socket),
            user="root",
            database=database,
            charset="utf8mb4",
            autocommit=True,
            **options,
        )


def _server_args(folder: Path, port: int) -> list[str]:
    data = folder / "data"
    args = [
        _binary("mariadbd"),
        "--no-defaults",
        f"--datadir={data}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--socket={folder / 'mysqld.sock'}",
        f"--pid-file={folder / 'mysqld.pid'}",
        f"--log-error={folder / 'error.log'}",
        # What Debezium reads: the binary log in ROW format with full images; MariaDB always writes GTIDs.
        f"--log-bin={data / 'mysql-bin'}",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        f"--server-id={SERVER_ID}",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        "--skip-name-resolve",
        "--performance-schema=OFF",
        "--innodb-buffer-pool-size=32M",
        "--innodb-log-file-size=16M",
        "--max-connections=50",
    ]
    if os.geteuid() == 0:
        args.append("--user=root")  # mariadbd refuses to run as root unless told so
    return args


@contextmanager
def mariadb(folder: Path, timeout: float = 60) -> Iterator[MariaDB]:
    """Initialise a data directory in ``folder`` (unless there is one), start ``mariadbd`` on 127.0.0.1 on a
    free port, wait until it answers, create the capture user; stop it at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "data"
    if not (data / "mysql").is_dir():
        install = [
            _binary("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        if os.geteuid() == 0:
            install.append("--user=root")
        done = subprocess.run(install, capture_output=True, text=True)
        if done.returncode:
            raise PipelineError(f"mariadb-install-db failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    port = free_port()
    proc = subprocess.Popen(
        _server_args(folder, port),
        stdout=(folder / "stdout.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = MariaDB(port, folder / "mysqld.sock", folder, proc.pid)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise PipelineError(f"mariadbd in {folder} did not start:\n{_tail(folder / 'error.log')}")
            try:
                with server.connect() as connection, connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
                break
            except Exception:
                time.sleep(0.2)
        with server.connect() as connection, connection.cursor() as cursor:
            # Debezium's user (its docs: SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE/CLIENT,
            # BINLOG MONITOR).
            cursor.execute(f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
            cursor.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1'")
        yield server
    finally:
        _stop(proc)


_CONNECT_LOG4J = (
    LOG4J_TO_FILE
    + """\
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.connect.name = org.apache.kafka.connect.runtime
logger.connect.level = INFO
"""
)


# What docs/how-to/debezium.md asks of a connector for an exact mirror: TRUNCATE published (Debezium's
# default skips it) and BIGINT UNSIGNED as exact decimals (its default wraps values past 2^63-1).
EXACT = {"skipped.operations": "none", "bigint.unsigned.handling.mode": "precise"}


def connector_settings(
    name: str, server: MariaDB, broker: Broker, prefix: str, databases: str, **extra: str
) -> dict[str, str]:
    """A Debezium MariaDB connector with its ordinary defaults: initial snapshot, then the binlog; schema
    changes on the ``<prefix>`` topic; its schema history in a Kafka topic. ``extra`` overrides
    (``decimal.handling.mode`` ...)."""
    return {
        "name": name,
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": USER,
        "database.password": PASSWORD,
        "database.server.id": "5400",
        "database.ssl.mode": "disable",
        "topic.prefix": prefix,
        "database.include.list": databases,
        "schema.history.internal.kafka.bootstrap.servers": broker.bootstrap_servers,
        "schema.history.internal.kafka.topic": f"history.{prefix}",  # outside the prefix: not a change topic
        **extra,
    }


@dataclass
class Connect:
    folder: Path
    connector: dict[str, str]
    broker: Broker
    worker: dict[str, str] = field(default_factory=dict)  # worker settings over the defaults below
    proc: subprocess.Popen | None = field(default=None)

    @property
    def log(self) -> Path:
        return self.folder / "connect.log"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout: float = 300) -> None:
        """Start Kafka Connect standalone with the connector; return once the connector's task streams (or
        has finished its snapshot and reads the binlog)."""
        folder = self.folder
        folder.mkdir(parents=True, exist_ok=True)
        worker = {
            "bootstrap.servers": self.broker.bootstrap_servers,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            # Kafka Connect's JsonConverter writes a NULL of a column with a DEFAULT as that default unless
            # told not to (replace.null.with.default, true since Kafka 3.5): the mirror would hold the
            # default (seen in tests/test_e2e.py).
            "key.converter.replace.null.with.default": "false",
            "value.converter.replace.null.with.default": "false",
            "offset.storage.file.filename": str(folder / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{free_port()}",
            # The connector is on the class path (the group's jars): nothing to scan.
            "plugin.discovery": "only_scan",
            **self.worker,
        }
        (folder / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in worker.items()))
        (folder / "connector.properties").write_text("".join(f"{k}={v}\n" for k, v in self.connector.items()))
        (folder / "log4j2.properties").write_text(_CONNECT_LOG4J.format(log=self.log))
        marker = self.log.read_text(errors="replace").count(STREAMING) if self.log.exists() else 0
        self.proc = subprocess.Popen(
            [
                _java(),
                "-Xmx384m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
                "-cp",
                jars.classpath("connect"),
                "org.apache.kafka.connect.cli.ConnectStandalone",
                str(folder / "worker.properties"),
                str(folder / "connector.properties"),
            ],
            stdout=(folder / "stdout.log").open("a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            if log.count(STREAMING) > marker:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline or "Task threw" in log:
                tail = _tail(folder / "stdout.log", 2000) + _tail(self.log, 5000)
                self.stop()
                raise PipelineError(f"Kafka Connect with Debezium did not start streaming:\n{tail}")
            time.sleep(0.3)

    def kill(self) -> None:
        """kill -9 of the worker: offsets not flushed yet are lost, so Debezium publishes again what it had
        published since the last flush (at-least-once) when started again."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            self.proc = None


# Debezium's binlog reader logs this once it reads the binary log (after the snapshot, if any).
STREAMING = "Starting streaming"


@contextmanager
def kafka_connect(
    folder: Path,
    broker: Broker,
    connector: dict[str, str],
    timeout: float = 300,  # the worker's plugin scan alone took 2 minutes on 2 busy cores
    worker: dict[str, str] | None = None,
) -> Iterator[Connect]:
    """Kafka Connect standalone running ``connector`` (``connector_settings``); stopped at the end."""
    connect = Connect(folder, connector, broker, worker or {})
    connect.start(timeout)
    try:
        yield connect
    finally:
        connect.stop()
