"""Where the CPU goes on a real cluster: a 1M-event catch-up submitted to a standalone master and one
worker on 127.0.0.1 (started from the pyspark package), CPU seconds of the driver (spark-submit's JVM and
the Python driver) against the executors (the executor JVM and its Python workers), sampled from /proc.

Not a test; `make bench` runs it and docs/performance.md reports it.

    python benchmarks/cluster_cpu.py [--events 1000000] [--keys 100000] [--per-file 100000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
from workload import run_watched, write_files, write_job  # noqa: E402

from tests.cluster import spark_home, standalone  # noqa: E402


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def sample(
    groups: dict[str, int], seen: dict[str, dict[tuple[int, float, str], float]], stop: threading.Event
) -> None:
    """The last CPU time (user + system) of every process under each group's root, by (pid, start,
    program name)."""
    while not stop.is_set():
        for name, pid in groups.items():
            for proc in _tree(pid):
                try:
                    t = proc.cpu_times()
                    seen[name][(proc.pid, proc.create_time(), proc.name())] = t.user + t.system
                except psutil.Error:
                    pass
        time.sleep(0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--per-file", type=int, default=100_000)
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "cluster_cpu"))
    parser.add_argument("--driver-java-options", default="", help="passed to spark-submit as they are")
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE, passed to spark-submit")
    parser.add_argument(
        "--class-archive",
        action="store_true",
        help="the driver JVM maps `replicator jvm-archive`'s class archive (docs/operations.md)",
    )
    args = parser.parse_args()
    if args.class_archive:
        from replicator.spark import class_archive

        archive = class_archive()
        if archive is None or not archive.is_file():
            raise SystemExit(f"no class archive at {archive}: run `replicator jvm-archive` first")
        args.driver_java_options = f"{args.driver_java_options} -XX:SharedArchiveFile={archive}".strip()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    write_files(workdir / "landing", args.events, args.keys, args.per_file)
    job = write_job(workdir, "bench", 0)
    with standalone(workdir / "cluster", memory="6g") as (url, env):
        worker = int(env["REPLICATOR_WORKER_PID"])
        worker_own = sum(psutil.Process(worker).cpu_times()[:2])
        seen: dict[str, dict[tuple[int, float, str], float]] = {"driver": {}, "worker": {}}
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            url,
            "--conf",
            "spark.executor.memory=4g",
            *(["--driver-java-options", args.driver_java_options] if args.driver_java_options else []),
            *[part for conf in args.conf for part in ("--conf", conf)],
            str(REPO / "jobs" / "mirror.py"),
            "--config",
            str(job),
            "--available-now",
        ]
        wall, out, _err = run_watched(
            command,
            lambda pid, stop: sample({"driver": pid, "worker": worker}, seen, stop),
            cwd=REPO,
            env=env,
        )
        worker_key = next(k for k in seen["worker"] if k[0] == worker)
        executors = sum(seen["worker"].values()) - seen["worker"][worker_key]
        worker_jvm = seen["worker"][worker_key] - worker_own
    driver = sum(seen["driver"].values())
    driver_python = sum(v for k, v in seen["driver"].items() if k[2].startswith("python"))
    result = {
        "events": args.events,
        "driver_java_options": args.driver_java_options,
        "conf": args.conf,
        "wall_s": round(wall, 1),
        "driver_cpu_s": round(driver, 1),
        "driver_python_cpu_s": round(driver_python, 1),
        "driver_jvm_cpu_s": round(driver - driver_python, 1),
        "executors_cpu_s": round(executors, 1),
        "executor_share": round(executors / (driver + executors), 3),
        "worker_daemon_cpu_s": round(worker_jvm, 1),
        "batches": [json.loads(line) for line in out.splitlines() if '"event": "batch"' in line][:3],
    }
    print(json.dumps(result, indent=1))
    (workdir / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
