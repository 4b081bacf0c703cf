"""A PostgreSQL server of its own on 127.0.0.1 for the end-to-end tests (issue 51), beside the MariaDB one of
``replicator.testing.e2e``: Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``), a data
folder initialised by ``initdb`` with ``wal_level=logical`` (what Debezium's PostgreSQL connector reads with
the built-in ``pgoutput`` plugin), a free port, no network but the loopback. Stopped by its PID.

PostgreSQL refuses to run as root: under root the server runs as the ``postgres`` user (the package's),
and its data folder is a temporary folder that user owns (the caller's folder, a pytest tmp dir, is not
reachable by another user); logs stay in the caller's folder."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replicator.testing.broker import free_port
from replicator.testing.e2e import PASSWORD, USER, PipelineError, _stop, _tail

DATABASE = "shop"


def _bin(name: str) -> str:
    """A server program of the newest PostgreSQL under /usr/lib/postgresql (Debian), else on PATH."""
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / name).exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return str(versions[-1] / name)
    found = shutil.which(name)
    if found is None:
        raise PipelineError(f"{name} not found: install PostgreSQL (Debian: apt-get install postgresql)")
    return found


@dataclass
class PostgreSQL:
    port: int
    folder: Path
    data: Path
    proc: subprocess.Popen
    argv: list[str]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def connect(self, database: str = DATABASE, **options: Any):
        """A psycopg connection as the capture user over TCP (autocommit on)."""
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=PASSWORD,
            dbname=database,
            autocommit=True,
            **options,
        )

    def restart(self, timeout: float = 60) -> None:
        """What ``pg_ctl restart`` does (a fast shutdown: sessions and the replication connection are cut,
        then the server starts again on the same port and data folder); replication slots survive."""
        self.proc.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
        self.proc.wait(timeout=timeout)
        self.proc = _spawn(self.argv, self.folder / "postgres.log")
        _wait_ready(self, timeout)


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        argv, stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True, **_as_user()
    )


def _wait_ready(server: PostgreSQL, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.proc.poll() is not None or time.monotonic() > deadline:
            raise PipelineError(
                f"postgres in {server.data} did not start:\n{_tail(server.folder / 'postgres.log')}"
            )
        try:
            with server.connect("postgres") as connection:
                connection.execute("SELECT 1")
            return
        except Exception:
            time.sleep(0.2)


def _as_user() -> dict[str, Any]:
    """Popen arguments that run a server program as ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam("postgres")
    return {"user": entry.pw_uid, "group": entry.pw_gid}


@contextmanager
def postgresql(folder: Path, timeout: float = 60) -> Iterator[PostgreSQL]:
    """``initdb`` a data folder, start ``postgres`` on 127.0.0.1 on a free port with ``wal_level=logical``,
    create the capture user (a superuser: Debezium's default ``publication.autocreate.mode=all_tables``
    creates a publication FOR ALL TABLES) and the database ``shop``; stop it at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    owner = _as_user()
    data = Path(tempfile.mkdtemp(prefix="replicator-pg-")) if owner else folder / "data"
    if owner:
        os.chown(data, owner["user"], owner["group"])
    try:
        pwfile = data / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if owner:
            os.chown(pwfile, owner["user"], owner["group"])
        done = subprocess.run(
            [
                _bin("initdb"),
                "-D",
                str(data / "pgdata"),
                "-U",
                USER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
            capture_output=True,
            text=True,
            **owner,
        )
        if done.returncode:
            raise PipelineError(f"initdb failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        port = free_port()
        log = folder / "postgres.log"
        log.write_text("")
        argv = [
            _bin("postgres"),
            "-D",
            str(data / "pgdata"),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={data}",
            "-c",
            "wal_level=logical",
            "-c",
            "max_replication_slots=10",
            "-c",
            "max_wal_senders=10",
            "-c",
            "shared_buffers=32MB",
            "-c",
            "fsync=off",  # a test database: a crash of the machine loses nothing of value
            "-c",
            "TimeZone=UTC",
        ]
        server = PostgreSQL(port, folder, data, _spawn(argv, log), argv)
        try:
            _wait_ready(server, timeout)
            with server.connect("postgres") as connection:
                connection.execute(f"CREATE DATABASE {DATABASE}")
            yield server
        finally:
            _stop(server.proc)
    finally:
        if owner:
            shutil.rmtree(data, ignore_errors=True)


def connector_settings(
    name: str, server: PostgreSQL, prefix: str, database: str = DATABASE, **extra: str
) -> dict[str, str]:
    """Debezium's PostgreSQL connector as a user who tuned nothing runs it: ``plugin.name=pgoutput`` (the
    built-in plugin; the default ``decoderbufs`` needs a server extension), initial snapshot, then the
    replication slot ``<name>``. ``extra`` overrides (``skipped.operations`` ...)."""
    return {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": USER,
        "database.password": PASSWORD,
        "database.dbname": database,
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": name.replace("-", "_"),
        "publication.name": f"{name.replace('-', '_')}_publication",
        **extra,
    }
