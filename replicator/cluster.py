"""A Spark standalone cluster on 127.0.0.1 from the pyspark package: one master, one worker or more
(`replicator jvm-archive`'s sample run, the tests, the benchmarks). Every process it starts is stopped by
its process group when the context ends."""

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
def standalone(
    tmp: Path, cores: int = 2, memory: str = "2g", workers: int = 1
) -> Iterator[tuple[str, dict[str, str]]]:
    """Start a master and ``workers`` workers of ``cores`` cores and ``memory`` each; yields (master URL,
    the environment to submit jobs with: ``REPLICATOR_WORKER_PID`` the first worker's JVM,
    ``REPLICATOR_WORKER_PIDS`` every worker's, comma-separated)."""
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
    started: list[subprocess.Popen] = []
    try:
        for n in range(workers):
            # The first worker keeps SPARK_WORKER_DIR (tests read its executors' logs there); the others
            # get folders of their own.
            work = ["--work-dir", str(tmp / f"work-{n}")] if n else []
            log = tmp / ("worker.log" if n == 0 else f"worker-{n}.log")
            args = ["--host", "127.0.0.1", "--cores", str(cores), "--memory", memory]
            args += ["--webui-port", str(_free_port()), *work]
            started.append(_start(["org.apache.spark.deploy.worker.Worker", url, *args], log, env))
        deadline = time.monotonic() + 180
        while (tmp / "master.log").read_text().count("Registering worker") < workers:
            gone = master.poll() is not None or any(w.poll() is not None for w in started)
            if time.monotonic() > deadline or gone:
                raise RuntimeError(
                    "the standalone cluster did not start:\n" + (tmp / "master.log").read_text()[-3000:]
                )
            time.sleep(1)
        pids = [str(w.pid) for w in started]
        yield url, {**env, "REPLICATOR_WORKER_PID": pids[0], "REPLICATOR_WORKER_PIDS": ",".join(pids)}
    finally:
        for worker in started:
            _stop(worker)
        _stop(master)
