"""A Spark standalone cluster on 127.0.0.1 from the pyspark package: one master, one worker (`replicator
jvm-archive`'s sample run, the tests, the benchmarks). Every process it starts is stopped by its process
group when the context ends."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(tmp / "local"),
        "SPARK_WORKER_DIR": str(tmp / "work"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [str(spark_home() / "bin" / "spark-class"), *args],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group: stopped whole below
    )


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


@contextmanager
def standalone(tmp: Path, cores: int = 2, memory: str = "2g") -> Iterator[tuple[str, dict[str, str]]]:
    """Start a master and one worker; yields (master URL, the environment to submit jobs with)."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = cluster_env(tmp)
    port = _free_port()
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(_free_port()),
        ],
        tmp / "master.log",
        env,
    )
    url = f"spark://127.0.0.1:{port}"
    worker = _start(
        [
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--host",
            "127.0.0.1",
            "--cores",
            str(cores),
            "--memory",
            memory,
            "--webui-port",
            str(_free_port()),
        ],
        tmp / "worker.log",
        env,
    )
    try:
        deadline = time.monotonic() + 180
        while "Registering worker" not in (tmp / "master.log").read_text():
            if time.monotonic() > deadline or master.poll() is not None or worker.poll() is not None:
                raise RuntimeError(
                    "the standalone cluster did not start:\n" + (tmp / "master.log").read_text()[-3000:]
                )
            time.sleep(1)
        yield url, {**env, "REPLICATOR_WORKER_PID": str(worker.pid)}
    finally:
        _stop(worker)
        _stop(master)
