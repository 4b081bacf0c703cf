"""Catch-up throughput: N canal-json events from files into an empty mirror with `mirror --available-now`.

Reports events/s (wall time of the whole command), peak RSS of the command's process tree (driver +
JVM), and the floor on this machine: orjson parse of every message + one write_deltalake of the final
table. Not a test; run with `make bench` and copy the figures into benchmarks/LOG.md.

    python benchmarks/throughput.py [--events 1000000] [--keys 100000] [--files-per-trigger 0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import batch_lines, mirror_command, run_watched, write_files, write_job

REPO = Path(__file__).resolve().parent.parent


def _kind(proc: psutil.Process, root: psutil.Process) -> str | None:
    """driver (the command), jvm (its direct children: the Spark JVM), workers (every Python process below
    them: Spark's Python daemon and workers, which decode and fold). Not the JVM's other children: Hadoop's
    local file system forks ``chmod``/``readlink``, and a forked child shows the JVM's whole RSS until it
    execs (counting it doubled the JVM, measured)."""
    if proc.pid == root.pid:
        return "driver"
    if proc.ppid() == root.pid:
        return "jvm"
    return "workers" if proc.name().startswith("python") else None


def tree_rss(proc: psutil.Process) -> dict[str, int]:
    """RSS of the command's process tree by kind of process (:func:`_kind`)."""
    by_kind = {"driver": 0, "jvm": 0, "workers": 0}
    for p in [proc, *proc.children(recursive=True)]:
        try:
            kind = _kind(p, proc)
            if kind is not None:
                by_kind[kind] += p.memory_info().rss
        except psutil.Error:
            pass
    return by_kind


def peak_rss(pid: int, stop: threading.Event, out: list[dict[str, int]], cpu: dict | None = None) -> None:
    """The process tree's RSS at its peak, by kind of process; ``cpu`` gets each process's last seen CPU
    seconds (user + system) by (kind, pid), so the driver's share of the run's CPU can be told."""
    peak: dict[str, int] = {}
    root = psutil.Process(pid)
    while not stop.is_set():
        try:
            now = tree_rss(root)
            if sum(now.values()) > sum(peak.values()):
                peak = now
            if cpu is not None:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        kind = _kind(p, root)
                        if kind is not None:
                            t = p.cpu_times()
                            cpu[(kind, p.pid)] = t.user + t.system
                    except psutil.Error:
                        pass
        except psutil.Error:
            pass
        time.sleep(0.2)
    out.append(peak)


def run_mirror(
    workdir: Path,
    files_per_trigger: int,
    vectors: bool = False,
    cwd: Path = REPO,
    extra: str = "",
    s3: str | None = None,
) -> tuple[float, dict[str, int], dict[str, float], str]:
    """``mirror --available-now`` of the workload's job: (wall seconds, peak RSS by process, CPU seconds
    by process (sampled every 0.2 s, so a short-lived process's last 0.2 s may be missed), its log);
    ``vectors``: the mirrors with ``target.deletion_vectors``; ``cwd``: where the command runs (first on
    its ``sys.path``); ``extra``: YAML lines added to the job file; ``s3``: an ``s3://bucket/prefix`` that
    target.path and state.path go under (the landing files stay local)."""
    job = write_job(workdir, "bench", files_per_trigger)
    if s3:
        text = job.read_text().replace("{path: lake}", f"{{path: {s3}/lake}}")
        job.write_text(text.replace("{path: state}", f"{{path: {s3}/state}}"))
    if vectors:
        job.write_text(job.read_text().replace("{path: lake}", "{path: lake, deletion_vectors: true}"))
    if extra:
        job.write_text(job.read_text() + extra.rstrip("\n") + "\n")
    peak: list[dict[str, int]] = []
    cpu: dict[tuple[str, int], float] = {}
    command = mirror_command(job)
    elapsed, _out, err = run_watched(command, lambda pid, stop: peak_rss(pid, stop, peak, cpu), cwd=cwd)
    by_kind: dict[str, float] = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    for (kind, _pid), seconds in cpu.items():
        by_kind[kind] += seconds
    return elapsed, peak[0], by_kind, err


def floor(paths: list[Path], workdir: Path) -> float:
    """orjson parse of every message + one write of the final table (the least any engine must do)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    started = time.monotonic()
    final: dict[str, dict] = {}
    for path in paths:
        with path.open("rb") as f:
            for line in f:
                m = orjson.loads(line)
                r = m["data"][0]
                if m["type"] == "DELETE":
                    final.pop(r["id"], None)
                else:
                    final[r["id"]] = r
    table = pa.Table.from_pylist(list(final.values()))
    write_deltalake(str(workdir / "floor"), table, mode="overwrite")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--files-per-trigger", type=int, default=0, help="0: everything in one batch")
    parser.add_argument("--per-file", type=int, default=100_000, help="events per landing file")
    parser.add_argument(
        "--full", action="store_true", help="the first batch inserts every key, then updates spread over them"
    )
    parser.add_argument(
        "--deletion-vectors", action="store_true", help="the mirrors with target.deletion_vectors: true"
    )
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "throughput"))
    parser.add_argument(
        "--s3",
        action="store_true",
        help="target and state on a local SeaweedFS S3 server (replicator.testing.s3server)",
    )
    args = parser.parse_args()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    if args.s3:
        with s3_server(workdir) as (server, prefix):
            measure(args, workdir, prefix, server)
        return
    measure(args, workdir)


@contextlib.contextmanager
def s3_server(workdir: Path):  # type: ignore[no-untyped-def]
    """A SeaweedFS server for the run, its variables in this process's environment (the job inherits them)."""
    from replicator.testing.s3server import SeaweedServer

    with SeaweedServer(workdir / "seaweedfs") as server:
        os.environ.update(server.env())
        yield server, f"s3://{server.bucket}/bench"


def s3_requests(server) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The S3 gateway's request counts by action, from its Prometheus metrics."""
    return server.request_counts()


def measure(args, workdir: Path, s3: str | None = None, server=None) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    paths = write_files(workdir / "landing", args.events, args.keys, args.per_file, args.full)
    generated = time.monotonic() - t0
    # The files a catch-up finds have landed earlier: flush the ones just generated first, or the kernel
    # writes them back while the run reads them (measured: the 5M run 85 s after a flush, 101-105 s
    # right after generating 4 GB).
    os.sync()
    before = s3_requests(server) if server else {}
    elapsed, rss, cpu, err = run_mirror(workdir, args.files_per_trigger, args.deletion_vectors, s3=s3)
    requests = {k: v - before.get(k, 0) for k, v in s3_requests(server).items()} if server else {}
    batches = batch_lines(err)
    if not batches:
        raise SystemExit(f"the job ran no batch:\n{err[-3000:]}")
    floor_s = floor(paths, workdir)
    from deltalake import DeltaTable

    rows = DeltaTable(f"{s3 or workdir}/lake/bench/orders").count()
    result = {
        "s3": bool(s3),
        "s3_requests": requests,
        "s3_requests_per_batch": round(sum(requests.values()) / len(batches)) if requests else None,
        "deletion_vectors": args.deletion_vectors,
        "events": args.events,
        "keys": args.keys,
        "full": args.full,
        "mirror_rows": rows,
        "wall_s": round(elapsed, 2),
        "events_per_s": round(args.events / elapsed),
        "peak_rss_mb": round(sum(rss.values()) / 2**20),
        "peak_rss_mb_by_process": {k: round(v / 2**20) for k, v in rss.items()},
        "cpu_s_by_process": {k: round(v, 1) for k, v in cpu.items()},
        "driver_cpu_share": round(cpu["driver"] / max(sum(cpu.values()), 1e-9), 3),
        "floor_s": round(floor_s, 2),
        "ratio_to_floor": round(elapsed / floor_s, 1),
        "batches": len(batches),
        "phases_ms": [b.get("phases_ms") for b in batches][:5],
        "generate_s": round(generated, 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(json.dumps(result, indent=1))
    (workdir / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
