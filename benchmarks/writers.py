"""delta-rs against delta-spark, side by side (issue 32, item 5): the same workloads through
``replicator mirror --available-now`` with ``target.writer: delta-rs``, ``delta-spark`` and
``delta-spark`` with ``target.deletion_vectors: true``, locally (``local[2]``) and on a standalone
cluster on 127.0.0.1 (``replicator.cluster``: 1 worker of 1 core, then 2 workers of 1 core; the
``replicator`` command's driver pointed at it with ``REPLICATOR_SPARK_MASTER``).

Cases (``--only``):

- ``catchup``: a catch-up after a bootstrap (workload.write_files ``full``: the first ``keys`` events
  insert every key, then updates, deletes and re-inserts spread over the whole key space), 100 files,
  10 per trigger: the first batch creates the whole mirror, the next nine change rows all over it.
  Issue 32's run is 5M events over 500k keys; the full scale here is 1M over 100k (the same shape: a
  batch is as large as the key space, ten batches), so that the whole table fits in ~20 minutes.
- ``onebatch``: 1M events over 100k keys (workload.write_files), one batch.
- ``hot`` / ``uniform``: steady state against a 5M-row mirror (steady_state.py's snapshot in key order,
  20 data files, bootstrapped once with delta-rs and copied for every run; ``deletion_vectors``: the
  copy gets ``delta.enableDeletionVectors``), then batches of 100k events, ``max_files_per_trigger: 1``;
  hot: the newest 5% of the keys, uniform: all of them. events/s here is a batch's events over the
  mean time of the batches after the first (the engine's ``duration_ms``; the first pays for the JVM's
  warm-up and the writer's first look at the table), Spark's start excluded; wall is the whole command.

Per run: wall time, events/s, peak RSS of the run's processes (the command, its Spark JVM and Python
workers; on the cluster also the executors' JVMs and Python workers, not the master's and workers' own
JVMs), CPU seconds by kind (psutil, every 0.2 s, the last value seen per process: a process's last
0.2 s may be missed) and the driver's share: the ``replicator`` command's own Python process over the
whole. Locally the one JVM is driver and executors at once; on the cluster ``jvm`` is the driver's JVM
and ``executor_jvm`` the executors'.

Writes ``<workdir>/result.json`` after every run (a rerun with ``--only``/``--envs``/``--writers``
replaces those runs and keeps the others of the same scale) and prints a Markdown table for
benchmarks/LOG.md. The inputs are generated once per scale and reused while their parameters match.

    python benchmarks/writers.py --prepare-only   # the inputs and the 5M-row mirror (no timing in them)
    python benchmarks/writers.py                  # every run, full scale (~15-20 min, quiet 2-core machine)
    python benchmarks/writers.py --quick          # the same at a small scale
    python benchmarks/writers.py --only hot --envs local --writers delta-rs,delta-spark-dv

The deletion-vector column runs locally by default (``--cluster-writers`` adds it on the clusters).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))
import steady_state  # noqa: E402
from workload import batch_lines, mirror_command, write_files  # noqa: E402

CASES = ("catchup", "onebatch", "hot", "uniform")
WRITERS: dict[str, dict[str, Any]] = {
    "delta-rs": {"writer": "delta-rs"},
    "delta-spark": {"writer": "delta-spark"},
    "delta-spark-dv": {"writer": "delta-spark", "deletion_vectors": True},
}
ENVS: dict[str, int] = {"local": 0, "cluster-1x1": 1, "cluster-2x1": 2}  # name -> workers of 1 core
SCALES: dict[str, dict[str, dict[str, int]]] = {
    "full": {
        "catchup": {"events": 1_000_000, "keys": 100_000, "per_file": 10_000, "per_trigger": 10},
        "onebatch": {"events": 1_000_000, "keys": 100_000, "per_file": 100_000},
        "steady": {"rows": 5_000_000, "batches": 3, "events": 100_000},
    },
    "quick": {
        "catchup": {"events": 50_000, "keys": 10_000, "per_file": 2_000, "per_trigger": 5},
        "onebatch": {"events": 100_000, "keys": 10_000, "per_file": 100_000},
        "steady": {"rows": 200_000, "batches": 2, "events": 10_000},
    },
}
# The cluster's settings (docs/operations.md, "Running on a cluster"): the executors run this installation,
# so they start from replicator's daemon, as a local run's do.
CLUSTER_CONF = {
    "spark.executor.memory": "2g",
    "spark.python.daemon.module": "replicator.worker_daemon",
}
WORKER_MEMORY = "3g"
SAMPLE_S = 0.2


# ---- inputs ---------------------------------------------------------------------------------------------
def prepare(data: Path, scale: dict[str, dict[str, int]], cases: list[str]) -> dict[str, float]:
    """Generate each case's inputs under ``data`` unless the same parameters made them before; the
    steady cases' 5M-row mirror is bootstrapped once (delta-rs) into ``data/steady/base``. Seconds spent."""
    spent: dict[str, float] = {}
    for case in cases:
        name = "steady" if case in ("hot", "uniform") else case
        params = {**scale[name], **({"keys": case} if name == "steady" else {})}
        folder = data / case
        marker = folder / "ready.json"
        if marker.is_file() and json.loads(marker.read_text()) == params:
            continue
        started = time.monotonic()
        shutil.rmtree(folder, ignore_errors=True)
        if name == "steady":
            base_params = scale["steady"]
            base = data / "steady-base"
            if not (
                (base / "ready.json").is_file()
                and json.loads((base / "ready.json").read_text()) == base_params
            ):
                bootstrap_base(base, base_params["rows"])
                (base / "ready.json").write_text(json.dumps(base_params))
            steady_state.events(
                folder / "landing", base_params["rows"], base_params["batches"], base_params["events"], case
            )
        else:
            write_files(
                folder / "landing",
                params["events"],
                params["keys"],
                params["per_file"],
                full=case == "catchup",
            )
        folder.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(params))
        spent[case] = round(time.monotonic() - started, 1)
    # Landed earlier, as a catch-up finds them: flushed, not written back during a run (throughput.py).
    os.sync()
    return spent


def bootstrap_base(base: Path, rows: int) -> None:
    """The steady cases' mirror: ``rows`` rows in key order in 20 data files, bootstrapped with delta-rs."""
    shutil.rmtree(base, ignore_errors=True)
    steady_state.ROWS_PER_FILE = max(rows // 20, 1)
    steady_state.snapshot(base / "snapshot", rows)
    (base / "landing").mkdir(parents=True, exist_ok=True)
    job = write_job(base, {"writer": "delta-rs"}, None, None)
    command = [sys.executable, "-m", "replicator.commands.cli", "bootstrap", "--config", str(job)]
    command += ["--snapshot", str(base / "snapshot" / "manifest.json"), "--no-progress"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=child_env(None))
    if done.returncode != 0:
        raise SystemExit(f"bootstrap of the steady mirror failed:\n{done.stderr[-4000:]}")
    shutil.rmtree(base / "snapshot")


def write_job(
    run: Path, target: dict[str, Any], landing: Path | None, per_trigger: int | None, conf: dict | None = None
) -> Path:
    source: dict[str, Any] = {
        "type": "files",
        "path": str(landing or run / "landing"),
        "dialect": "canal-json",
    }
    if per_trigger:
        source["max_files_per_trigger"] = per_trigger
    job: dict[str, Any] = {
        "name": "bench",
        "source": source,
        "target": {"path": str(run / "lake"), **target},
        "state": {"path": str(run / "state")},
    }
    if conf:
        job["spark"] = {"conf": conf}
    run.mkdir(parents=True, exist_ok=True)
    (run / "job.yaml").write_text(yaml.safe_dump(job))
    return run / "job.yaml"


def child_env(master: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(base or os.environ)
    env.pop("REPLICATOR_SPARK_JARS", None)  # a job gets the jars its writer needs, as a user's does
    env["REPLICATOR_SPARK_MASTER"] = master or "local[2]"
    env["PYTHONPATH"] = str(REPO)
    return env


# ---- watching a run ------------------------------------------------------------------------------------
class Watch:
    """RSS and CPU seconds of a run's processes, by kind: ``driver`` (the command), ``jvm`` (its Spark JVM),
    ``workers`` (Python workers, local or the executors'), ``executor_jvm`` (the cluster's executors);
    the workers' JVMs' children only where they started after the run did (this run's executors)."""

    def __init__(self, root: int, workers: list[int], since: float) -> None:
        self.root, self.workers, self.since = root, workers, since
        self.cpu: dict[tuple[int, float], tuple[str, float]] = {}
        self.peak: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _procs(self) -> list[tuple[psutil.Process, str]]:
        found: list[tuple[psutil.Process, str]] = []
        try:
            root = psutil.Process(self.root)
            found.append((root, "driver"))
            for p in root.children(recursive=True):
                kind = self._kind(p, {"java": "jvm"})
                if kind:
                    found.append((p, kind))
        except psutil.Error:
            pass
        for pid in self.workers:
            try:
                for p in psutil.Process(pid).children(recursive=True):
                    if p.create_time() >= self.since:
                        kind = self._kind(p, {"java": "executor_jvm"})
                        if kind:
                            found.append((p, kind))
            except psutil.Error:
                pass
        return found

    @staticmethod
    def _kind(p: psutil.Process, java: dict[str, str]) -> str | None:
        # Not the JVMs' other children: Hadoop's local file system forks chmod/readlink, and a forked
        # child shows its JVM's whole RSS until it execs (throughput.py).
        try:
            name = p.name()
        except psutil.Error:
            return None
        if name.startswith("python"):
            return "workers"
        return java["java"] if name == "java" else None

    def _loop(self) -> None:
        while not self.stop.is_set():
            rss: dict[str, int] = {}
            for p, kind in self._procs():
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        mem = p.memory_info().rss
                        self.cpu[(p.pid, p.create_time())] = (kind, t.user + t.system)
                    rss[kind] = rss.get(kind, 0) + mem
                except psutil.Error:
                    pass
            if sum(rss.values()) > sum(self.peak.values()):
                self.peak = rss
            self.stop.wait(SAMPLE_S)

    def cpu_by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, seconds in self.cpu.values():
            out[kind] = out.get(kind, 0.0) + seconds
        return out


def run_command(command: list[str], run: Path, env: dict[str, str], workers: list[int], timeout: float):
    """(wall s, return code or None on timeout, watch); stdout/stderr in ``run``."""
    # The previous run's executors must be gone, or their exit would blur this run's start.
    for pid in workers:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if not any(p.name() == "java" for p in psutil.Process(pid).children()):
                    break
            except psutil.Error:
                break
            time.sleep(0.2)
    since = time.time() - 0.5
    started = time.monotonic()
    with (run / "stdout.log").open("w") as out, (run / "stderr.log").open("w") as err:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
        watch = Watch(proc.pid, workers, since)
        watch.thread.start()
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            stop_group(proc)
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the run goes too, then the cluster
            stop_group(proc)
            raise
    wall = time.monotonic() - started
    watch.stop.set()
    watch.thread.join()
    return wall, code, watch


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a run: its own session holds the command, its JVM and its Python workers."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")  # unwinds: the run's group, then the cluster, stop


# ---- one run -------------------------------------------------------------------------------------------
def one(
    case: str,
    env_name: str,
    writer: str,
    scale: dict[str, dict[str, int]],
    data: Path,
    runs: Path,
    master: tuple[str, dict[str, str], list[int]] | None,
    timeout: float,
    delta_spark_conf: dict[str, str],
) -> dict[str, Any]:
    run = runs / env_name / case / writer
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    steady = case in ("hot", "uniform")
    if steady:
        params = scale["steady"]
        shutil.copytree(data / "steady-base" / "lake", run / "lake")
        shutil.copytree(data / "steady-base" / "state", run / "state")
        if WRITERS[writer].get("deletion_vectors"):
            # The same data files as the other writers' runs, with the property a mirror created by this
            # job would have (a table keeps the setting it was created with: docs/configuration.md).
            from deltalake import DeltaTable

            DeltaTable(str(mirror(run))).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
        per_trigger: int | None = 1
        events = params["batches"] * params["events"]
    else:
        params = scale[case]
        per_trigger = params.get("per_trigger")
        events = params["events"]
    conf = {
        **(CLUSTER_CONF if master else {}),
        **(delta_spark_conf if WRITERS[writer]["writer"] == "delta-spark" else {}),
    }
    job = write_job(run, WRITERS[writer], data / case / "landing", per_trigger, conf or None)
    command = mirror_command(job)
    env = child_env(master[0] if master else None, master[1] if master else None)
    wall, code, watch = run_command(command, run, env, master[2] if master else [], timeout)
    log = (run / "stderr.log").read_text(errors="replace")
    result: dict[str, Any] = {"case": case, "env": env_name, "writer": writer, "events": events}
    if delta_spark_conf and WRITERS[writer]["writer"] == "delta-spark":
        result["delta_spark_conf"] = delta_spark_conf
    result["wall_s"] = round(wall, 1)
    if code != 0:
        errors = [line for line in log.splitlines() if "Error" in line or "Exception" in line]
        result["error"] = "timeout" if code is None else f"exit {code}"
        result["error_lines"] = [*errors[:8], "...", *log.splitlines()[-8:]]
        return result
    batches = batch_lines(log)
    ms = [b["duration_ms"] for b in batches]
    warm = ms[1:] or ms
    warm_ms = sum(warm) / len(warm) if warm else None
    cpu = watch.cpu_by_kind()
    total = sum(cpu.values())
    result.update(
        {
            "events_per_s": round(params["events"] / (warm_ms / 1000))
            if steady and warm_ms
            else round(events / wall),
            "peak_rss_mb": round(sum(watch.peak.values()) / 2**20),
            "peak_rss_mb_by_kind": {k: round(v / 2**20) for k, v in watch.peak.items()},
            "cpu_s": round(total, 1),
            "cpu_s_by_kind": {k: round(v, 1) for k, v in cpu.items()},
            "driver_cpu_share": round(cpu.get("driver", 0.0) / total, 3) if total else None,
            "batches": len(batches),
            "batch_ms": ms,
            "warm_batch_ms": round(warm_ms) if warm_ms else None,
            "apply_ms": [(b.get("phases_ms") or {}).get("apply") for b in batches],
            "mirror_rows": mirror_rows(run),
            "deletion_vector_files": len(list(mirror(run).glob("deletion_vector_*.bin"))),
        }
    )
    return result


def mirror(run: Path) -> Path:
    return run / "lake" / "bench" / "orders"


def mirror_rows(run: Path) -> int:
    from deltalake import DeltaTable

    from replicator.sinks.delta_rs import read_table

    return read_table(DeltaTable(str(mirror(run))), columns=["id"]).num_rows


# ---- the table -----------------------------------------------------------------------------------------
def label(r: dict[str, Any]) -> str:
    return r["writer"] + (" (conf)" if r.get("delta_spark_conf") else "")


def table(results: list[dict[str, Any]]) -> str:
    order = {
        (c, e, w): n for n, (c, e, w) in enumerate((c, e, w) for c in CASES for e in ENVS for w in WRITERS)
    }
    rows = sorted(results, key=lambda r: order.get((r["case"], r["env"], r["writer"]), 1 << 30))
    lines = [
        "| case | where | writer | events/s | wall s | peak RSS MB | CPU s: driver / JVM / executor JVMs / "
        "Python workers | driver share | mirror rows |",
        "|---|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['env']} | {label(r)} | {r['error']} | {r['wall_s']} | | | | |")
            continue
        cpu = r["cpu_s_by_kind"]
        split = " / ".join(f"{cpu.get(k, 0):.1f}" for k in ("driver", "jvm", "executor_jvm", "workers"))
        lines.append(
            f"| {r['case']} | {r['env']} | {label(r)} | {r['events_per_s']:,} | {r['wall_s']} | "
            f"{r['peak_rss_mb']:,} | {split} | {r['driver_cpu_share']:.0%} | {r['mirror_rows']:,} |"
        )
    confs = {json.dumps(r["delta_spark_conf"], sort_keys=True) for r in rows if r.get("delta_spark_conf")}
    lines += [f"\n(conf): the delta-spark job's spark.conf {c}" for c in sorted(confs)]
    lines.append("")
    lines.append("| case | where | fastest | events/s against the fastest |")
    lines.append("|---|---|---|---|")
    for case in CASES:
        for env in ENVS:
            done = [r for r in rows if r["case"] == case and r["env"] == env and "error" not in r]
            if not done:
                continue
            done.sort(key=lambda r: -r["events_per_s"])
            rest = ", ".join(
                f"{label(r)} {r['events_per_s'] / done[0]['events_per_s']:.2f}x" for r in done[1:]
            )
            lines.append(f"| {case} | {env} | {label(done[0])} | {rest} |")
            counts = {r["mirror_rows"] for r in done}
            if len(counts) > 1:
                lines.append(f"| {case} | {env} | MIRRORS DIFFER: {sorted(counts)} | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small scale, for iteration")
    parser.add_argument("--only", default=",".join(CASES), help=f"cases, comma-separated: {', '.join(CASES)}")
    parser.add_argument(
        "--writers", default=",".join(WRITERS), help=f"locally, comma-separated: {', '.join(WRITERS)}"
    )
    parser.add_argument(
        "--cluster-writers",
        default="delta-rs,delta-spark",
        help="on the clusters (time: the dv column is local)",
    )
    parser.add_argument("--envs", default=",".join(ENVS), help=f"comma-separated: {', '.join(ENVS)}")
    parser.add_argument("--timeout", type=float, default=420, help="seconds per run before it is stopped")
    parser.add_argument(
        "--prepare-only", action="store_true", help="generate the inputs (and the 5M-row mirror) only"
    )
    parser.add_argument(
        "--delta-spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="spark.conf of the delta-spark runs' job files (the engine's defaults are tuned for a JVM "
        "that moves file names: 512m heap, C1 only, no whole-stage codegen; a delta-spark MERGE runs in it)",
    )
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "writers"))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminated)
    delta_spark_conf = dict(item.split("=", 1) for item in args.delta_spark_conf)
    cases, writers, cluster_writers, envs = (
        [x for x in value.split(",") if x]
        for value in (args.only, args.writers, args.cluster_writers, args.envs)
    )
    for names, known in ((cases, CASES), (writers, WRITERS), (cluster_writers, WRITERS), (envs, ENVS)):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"unknown {unknown}: choose from {list(known)}")
    scale_name = "quick" if args.quick else "full"
    scale = SCALES[scale_name]
    workdir = Path(args.workdir).resolve()  # the job files name absolute paths
    out = workdir / ("result-quick.json" if args.quick else "result.json")
    data = workdir / "data" / scale_name
    runs = workdir / "runs" / scale_name
    began = time.monotonic()
    generated = prepare(data, scale, cases)
    print(f"inputs ready in {time.monotonic() - began:.0f} s {generated}", flush=True)
    if args.prepare_only:
        return
    # As installed: the bytecode of the current sources (make bench does the same).
    subprocess.run([sys.executable, "-m", "compileall", "-q", "replicator", "jobs"], cwd=REPO, check=True)
    plan = [
        (env, case, writer)
        for env in envs
        for case in cases
        for writer in (cluster_writers if ENVS[env] else writers)
    ]
    previous = json.loads(out.read_text()) if out.is_file() else {}
    kept = [
        r
        for r in previous.get("runs", [])
        if previous.get("params") == scale and (r["env"], r["case"], r["writer"]) not in plan
    ]
    result: dict[str, Any] = {
        "scale": scale_name,
        "params": scale,
        "cluster_conf": CLUSTER_CONF,
        "delta_spark_conf": delta_spark_conf,
        "worker_memory": WORKER_MEMORY,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "inputs_s": generated,
        "runs": kept,
    }
    print(f"{len(plan)} runs", flush=True)
    began = time.monotonic()
    for env_name in envs:
        with ExitStack() as stack:
            master = None
            if ENVS[env_name]:
                from replicator.cluster import standalone

                folder = workdir / "cluster" / env_name
                shutil.rmtree(folder, ignore_errors=True)
                url, cenv = stack.enter_context(
                    standalone(folder, cores=1, memory=WORKER_MEMORY, workers=ENVS[env_name])
                )
                master = (url, cenv, [int(p) for p in cenv["REPLICATOR_WORKER_PIDS"].split(",")])
            for env, case, writer in plan:
                if env != env_name:
                    continue
                r = one(case, env_name, writer, scale, data, runs, master, args.timeout, delta_spark_conf)
                result["runs"].append(r)
                result["runs_s"] = round(time.monotonic() - began)
                out.write_text(json.dumps(result, indent=1))
                shown = r.get("error") or f"{r['events_per_s']:,} events/s"
                print(
                    f"[{time.monotonic() - began:5.0f} s] {env_name:12} {case:9} {writer:15} "
                    f"{r['wall_s']:6.1f} s  {shown}",
                    flush=True,
                )
    print(f"\nruns done in {time.monotonic() - began:.0f} s; {out}\n")
    print(table(result["runs"]))


if __name__ == "__main__":
    main()
