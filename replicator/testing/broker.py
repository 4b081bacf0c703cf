"""An Apache Kafka broker on 127.0.0.1 (KRaft: broker and controller in one process, no ZooKeeper) from the
jars ``replicator jars`` fetched (``replicator.jars``, group ``kafka``): the tests' broker, ``make e2e``'s
and the Kafka benchmarks'. Storage is formatted in a folder of the caller's; the process is stopped by its
process group when the context ends."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from replicator import jars

# A JVM's log4j2 settings: every line into the file ``{log}`` (the broker's, Kafka Connect's:
# replicator.testing.e2e), then the loggers of each.
LOG4J_TO_FILE = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
"""
_LOG4J = (
    LOG4J_TO_FILE
    + """\
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""
)


@dataclass(frozen=True)
class Broker:
    bootstrap_servers: str
    pid: int
    folder: Path

    @property
    def log(self) -> Path:
        return self.folder / "server.log"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else "java"


def _properties(folder: Path, port: int, controller: int, extra: dict[str, str]) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(folder / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # One voter: the controller's no-op record every 500 ms (Kafka's default, written and flushed) was
        # half of an idle broker's CPU here, on the cores the job under test shares (benchmarks/LOG.md).
        "metadata.max.idle.interval.ms": "10000",
        # Retention tests delete segments on demand (a short check interval, small segments per topic).
        "log.retention.check.interval.ms": "1000",
        **extra,
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def _serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def kafka_broker(
    folder: Path, settings: dict[str, str] | None = None, port: int | None = None, timeout: float = 120
) -> Iterator[Broker]:
    """Format storage in ``folder``, start the broker, wait until it serves, yield it; stop it at the end.

    ``port`` reuses a listener port (a broker restarted over the same storage keeps its address)."""
    cp = jars.classpath("kafka")
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = folder / "server.properties"
    if not (folder / "data" / "meta.properties").exists():
        config.write_text(_properties(folder, port, free_port(), settings or {}))
        cluster = "-"
        while cluster.startswith("-"):  # as Kafka's Uuid.randomUuid: "-..." would read as an option
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        done = subprocess.run(
            [_java(), "-cp", cp, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"formatting the Kafka storage in {folder} failed: {done.stderr[-2000:]}")
    (folder / "log4j2.properties").write_text(_LOG4J.format(log=folder / "server.log"))
    # A restart appends to the log: only what this process writes says it started.
    logged = (folder / "server.log").stat().st_size if (folder / "server.log").exists() else 0
    proc = subprocess.Popen(
        [
            _java(),
            "-Xmx512m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
            "-cp",
            cp,
            "kafka.Kafka",
            str(config),
        ],
        stdout=(folder / "stdout.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped whole below
    )
    broker = Broker(f"127.0.0.1:{_port_of(config)}", proc.pid, folder)
    try:
        deadline = time.monotonic() + timeout
        log = folder / "server.log"
        while not (log.exists() and "Kafka Server started" in _tail(log, logged)):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "stdout.log").read_text()[-2000:] + (
                    log.read_text(errors="replace")[-3000:] if log.exists() else ""
                )
                raise RuntimeError(f"the Kafka broker in {folder} did not start:\n{tail}")
            time.sleep(0.2)
        if not _serving(_port_of(config)):
            raise RuntimeError(f"the Kafka broker in {folder} started but does not accept connections")
        yield broker
    finally:
        stop(proc)


def _tail(log: Path, start: int) -> str:
    with log.open("rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def _port_of(config: Path) -> int:
    for line in config.read_text().splitlines():
        if line.startswith("advertised.listeners="):
            return int(line.rsplit(":", 1)[1])
    raise ValueError(f"no advertised listener in {config}")


def stop(proc: subprocess.Popen, kill: bool = False, timeout: float = 30) -> None:
    """Stop a process group (the broker's, and every service the testing helpers start): SIGTERM (a clean
    shutdown), SIGKILL after ``timeout`` seconds or when asked."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
