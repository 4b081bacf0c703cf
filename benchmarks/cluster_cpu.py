"""Where the CPU goes on a real cluster: a 1M-event catch-up submitted to a standalone master and one
worker on 127.0.0.1 (started from the pyspark package), CPU seconds of the driver (spark-submit's JVM and
the Python driver) against the executors (the executor JVM and its Python daemon and workers).

Counted exactly where the kernel keeps the count, sampled where it does not: the driver's from this
process's reaped children (spark-submit's JVM, which reaps its Python driver), so its last moments count
(sampling every 0.25 s missed 0.2-0.4 s of them, benchmarks/LOG.md); the executor JVM's and the Python
daemon's from the worker's reaped children once the executor has exited. Only the Python workers are
sampled (every 0.05 s): PySpark's daemon ignores SIGCHLD, so their times reach no parent; they idle at the
end, when a sample would be missed.

Not a test; `make bench` runs it and benchmarks/LOG.md reports it.

    python benchmarks/cluster_cpu.py [--events 1000000] [--keys 100000] [--per-file 100000]
    python benchmarks/cluster_cpu.py --light               # ids and three short columns (issue 54, item 5)
    python benchmarks/cluster_cpu.py --workers 2 --cores 1 # two executors of one core (docs/scaling.md)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
from workload import ES0, message, run_watched, write_files, write_job, write_messages  # noqa: E402

from replicator.cluster import spark_home, standalone  # noqa: E402


def write_light(folder: Path, count: int, keys: int, per_file: int) -> None:
    """Light canal-json messages (an id and three short columns, the shape of issue 54's item 5): inserts
    of every key, then updates spread over them, one message a line."""
    types = (
        {"id": "bigint(20)", "code": "varchar(8)", "qty": "int(11)", "ok": "tinyint(1)"},
        {"id": -5, "code": 12, "qty": 4, "ok": -6},
    )

    def messages():  # type: ignore[no-untyped-def]
        for n in range(count):
            key = n if n < keys else (n * 7919) % keys
            data = {"id": str(key), "code": f"c{n % 1000}", "qty": str(n % 977), "ok": str(n % 2)}
            update = n >= keys
            old = {"qty": str((n + 1) % 977)} if update else None
            yield message("UPDATE" if update else "INSERT", data, old, ES0 + n, n, types)

    write_messages(folder, messages(), per_file)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


Seen = dict[tuple[int, float, str, int], float]  # (pid, start, program name, parent pid) -> CPU seconds


def sample(groups: dict[str, int], seen: dict[str, Seen], stop: threading.Event) -> None:
    """The last CPU time (user + system) of every process under each group's root."""
    while not stop.is_set():
        for name, pid in groups.items():
            for proc in _tree(pid):
                try:
                    t = proc.cpu_times()
                    key = (proc.pid, proc.create_time(), proc.name(), proc.ppid())
                    seen[name][key] = t.user + t.system
                except psutil.Error:
                    pass
        time.sleep(0.05)


def _reaped() -> float:
    """CPU seconds of this process's children that have ended and been waited for (with theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _children_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.children_user + times.children_system


def _executor_gone(worker: psutil.Process, timeout: float = 120) -> None:
    """Wait until the worker has no executor JVM left (the application's end makes it kill its executor)."""
    deadline = time.monotonic() + timeout
    while any(p.name().startswith("java") for p in worker.children()):
        if time.monotonic() > deadline:
            raise SystemExit("the executor did not exit: its CPU seconds are not all counted")
        time.sleep(0.1)


def _forked_workers(seen: Seen) -> float:
    """Sampled CPU seconds of the Python workers: Python processes whose parent is a Python process (the
    daemon forks them)."""
    python = {key[0] for key in seen if key[2].startswith("python")}
    return sum(cpu for key, cpu in seen.items() if key[2].startswith("python") and key[3] in python)


# As jobs/mirror.py starts, with the installed pyspark first (replicator.pythonpath), then nothing of
# the engine's.
TRIVIAL = """\
from replicator.pythonpath import installed_pyspark_first

installed_pyspark_first()
from pyspark.sql import SparkSession  # noqa: E402

spark = SparkSession.builder.appName("trivial").getOrCreate()
print(spark.range(10).count())
spark.stop()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--per-file", type=int, default=100_000)
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "cluster_cpu"))
    parser.add_argument("--light", action="store_true", help="light messages: an id and three short columns")
    parser.add_argument("--workers", type=int, default=1, help="workers, an executor each")
    parser.add_argument("--cores", type=int, default=2, help="cores of each worker")
    parser.add_argument("--driver-java-options", default="", help="passed to spark-submit as they are")
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE, passed to spark-submit")
    parser.add_argument("--properties-file", help="passed to spark-submit (e.g. conf/spark-defaults.conf)")
    parser.add_argument(
        "--class-archive",
        action="store_true",
        help="the driver JVM maps `replicator jvm-archive`'s class archive (docs/operations.md)",
    )
    parser.add_argument(
        "--trivial",
        action="store_true",
        help="submit a trivial application instead (a session, range(10).count()): Spark's own floor",
    )
    args = parser.parse_args()
    args.load = [round(x, 2) for x in os.getloadavg()]
    if args.class_archive:
        from replicator.spark import class_archive

        archive = class_archive()
        if archive is None or not archive.is_file():
            raise SystemExit(f"no class archive at {archive}: run `replicator jvm-archive` first")
        args.driver_java_options = f"{args.driver_java_options} -XX:SharedArchiveFile={archive}".strip()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    if args.trivial:
        workdir.mkdir(parents=True)
        (workdir / "trivial.py").write_text(TRIVIAL)
        application = [str(workdir / "trivial.py")]
    else:
        if args.light:
            write_light(workdir / "landing", args.events, args.keys, args.per_file)
        else:
            write_files(workdir / "landing", args.events, args.keys, args.per_file)
        job = write_job(workdir, "bench", 0)
        application = [str(REPO / "jobs" / "mirror.py"), "--config", str(job), "--available-now"]
    memory = "6g" if args.workers == 1 else "3g"
    with standalone(workdir / "cluster", cores=args.cores, memory=memory, workers=args.workers) as (url, env):
        workers = [psutil.Process(int(pid)) for pid in env["REPLICATOR_WORKER_PIDS"].split(",")]
        own = {w.pid: sum(w.cpu_times()[:2]) for w in workers}
        reaped = {w.pid: _children_cpu(w) for w in workers}
        seen: dict[str, Seen] = {"driver": {}, **{f"worker-{w.pid}": {} for w in workers}}
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            url,
            "--conf",
            f"spark.executor.memory={'4g' if args.workers == 1 else '2g'}",
            *(["--driver-java-options", args.driver_java_options] if args.driver_java_options else []),
            *[part for conf in args.conf for part in ("--conf", conf)],
            *(["--properties-file", args.properties_file] if args.properties_file else []),
            *application,
        ]
        roots = {"driver": 0, **{f"worker-{w.pid}": w.pid for w in workers}}
        before = _reaped()
        wall, out, _err = run_watched(
            command,
            lambda pid, stop: sample({**roots, "driver": pid}, seen, stop),
            cwd=REPO,
            env=env,
        )
        driver = _reaped() - before  # spark-submit's JVM, waited for, with its Python driver
        for worker in workers:
            _executor_gone(worker)
        per_executor = [
            _children_cpu(w) - reaped[w.pid] + _forked_workers(seen[f"worker-{w.pid}"]) for w in workers
        ]
        executors = sum(per_executor)
        worker_jvm = sum(sum(w.cpu_times()[:2]) - own[w.pid] for w in workers)
    driver_sampled = sum(seen["driver"].values())
    driver_python = sum(v for k, v in seen["driver"].items() if k[2].startswith("python"))
    executors_sampled = sum(v for w in workers for k, v in seen[f"worker-{w.pid}"].items() if k[0] != w.pid)
    result = {
        "events": 0 if args.trivial else args.events,
        "driver_java_options": args.driver_java_options,
        "conf": args.conf,
        "properties_file": args.properties_file,
        "wall_s": round(wall, 1),
        "driver_cpu_s": round(driver, 2),
        # The split is sampled (its last moments missed): Python's share, and the rest of the exact total.
        "driver_python_cpu_s": round(driver_python, 1),
        "driver_jvm_cpu_s": round(driver - driver_python, 1),
        "executors_cpu_s": round(executors, 2),
        "workers": args.workers,
        "cores": args.cores,
        "light": args.light,
        "per_executor_cpu_s": [round(c, 2) for c in per_executor],
        "executor_share": round(executors / (driver + executors), 3),
        "sampled": {  # every process sampled every 0.05 s, as the benchmark counted before
            "driver_cpu_s": round(driver_sampled, 2),
            "executors_cpu_s": round(executors_sampled, 2),
            "executor_share": round(executors_sampled / (driver_sampled + executors_sampled), 3),
        },
        "worker_daemon_cpu_s": round(worker_jvm, 1),
        "batches": [json.loads(line) for line in out.splitlines() if '"event": "batch"' in line][:3],
        "load_before": args.load,
    }
    print(json.dumps(result, indent=1))
    (workdir / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
