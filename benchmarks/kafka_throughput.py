"""Catch-up throughput from Kafka: N canal-json events in a topic of 8 partitions (a broker of its
own, replicator.testing.broker), mirrored with `mirror --available-now` and
``max_offsets_per_trigger`` for ~500k events
per batch, beside the files source on the same events (same batch size: 10 files of 50k). Reports events/s
of both and their ratio. Not a test; ``make bench`` runs it, results in benchmarks/LOG.md:

    python benchmarks/kafka_throughput.py [--events 5000000] [--keys 500000] [--per-trigger 500000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
import zlib
from pathlib import Path

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workload import batch_lines, events, mirror_command, run_watched, write_files, write_job

from replicator.testing.broker import kafka_broker

REPO = Path(__file__).resolve().parent.parent


def produce(servers: str, topic: str, count: int, keys: int, partitions: int) -> float:
    """The workload's events into ``topic``, each key's in one partition (canal's partitionHash on the
    primary key), no record key; seconds taken."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(timeout=60)
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True,
        }
    )
    started = time.monotonic()
    for m in events(count, keys):
        value = orjson.dumps(m)
        partition = zlib.crc32(str(m["data"][0]["id"]).encode()) % partitions
        while True:
            try:
                producer.produce(topic, value=value, partition=partition)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(600):
        raise SystemExit("records not delivered")
    return time.monotonic() - started


def kafka_job(workdir: Path, servers: str, topic: str, per_trigger: int, options: dict[str, str]) -> Path:
    job = workdir / "job.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    kafka = {
        "bootstrap_servers": servers,
        "topics": [topic],
        "max_offsets_per_trigger": per_trigger,
        **({"options": options} if options else {}),
    }
    job.write_text(
        "name: bench\n"
        f"source: {{type: kafka, dialect: canal-json, kafka: {json.dumps(kafka)}}}\n"
        "target: {path: lake}\nstate: {path: state}\n"
    )
    return job


def with_spark_conf(job: Path, conf: dict[str, str]) -> Path:
    """The job file with ``spark.conf`` settings added (JSON is YAML)."""
    if conf:
        job.write_text(job.read_text() + f"spark: {json.dumps({'conf': conf})}\n")
    return job


def _pairs(items: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


def _kind(proc: psutil.Process, root: psutil.Process) -> str | None:
    """driver (the command), jvm (its Java child: Spark's JVM, the Kafka consumers included), workers (the
    Python processes below it: Spark's daemon and its workers, which decode and fold); not the JVM's
    short-lived ``chmod``/``readlink`` forks (benchmarks/throughput.py's ``_kind``)."""
    if proc.pid == root.pid:
        return "driver"
    if proc.ppid() == root.pid:
        return "jvm"
    return "workers" if proc.name().startswith("python") else None


def cpu_by_process(pid: int, stop: threading.Event, out: dict[str, float]) -> None:
    """CPU seconds (user + system) of the command's process tree by kind (:func:`_kind`): each process's
    last sample, every 0.05 s. PySpark's daemon ignores SIGCHLD, so a worker's time reaches no parent and
    is counted only here; a process's last < 0.05 s before it exits is missed."""
    root = psutil.Process(pid)
    seen: dict[tuple[int, float], tuple[str, float]] = {}
    while True:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for proc in procs:
            try:
                kind = _kind(proc, root)
                if kind is not None:
                    t = proc.cpu_times()
                    seen[(proc.pid, proc.create_time())] = (kind, t.user + t.system)
            except psutil.Error:
                pass
        if stop.wait(0.05):
            break
    for kind in ("driver", "jvm", "workers"):
        out[kind] = round(sum(s for k, s in seen.values() if k == kind), 2)


def timed(job: Path) -> tuple[float, list[dict], dict[str, float]]:
    """``mirror --available-now`` of a job: wall seconds, its batch log lines, CPU seconds by process."""
    cpu: dict[str, float] = {}
    elapsed, _out, err = run_watched(
        mirror_command(job), lambda pid, stop: cpu_by_process(pid, stop, cpu), cwd=REPO
    )
    return elapsed, batch_lines(err), cpu


def _broker_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def phase_sums(batches: list[dict]) -> dict[str, int]:
    """Each phase's milliseconds summed over the batches (their ``phases_ms``)."""
    sums: dict[str, int] = {}
    for b in batches:
        for name, ms in (b.get("phases_ms") or {}).items():
            sums[name] = sums.get(name, 0) + ms
    return sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--per-trigger", type=int, default=500_000, help="max_offsets_per_trigger")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "kafka_throughput"))
    parser.add_argument("--only", choices=("kafka", "files"), help="run one source only (profiling)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the topic and the landing files of an earlier run with the same workload (profiling)",
    )
    parser.add_argument("--conf", action="append", default=[], help="k=v: spark.conf of both jobs")
    parser.add_argument("--kafka-option", action="append", default=[], help="k=v: source.kafka.options")
    args = parser.parse_args()
    work = Path(args.workdir)
    workload = {
        "events": args.events,
        "keys": args.keys,
        "partitions": args.partitions,
        "per_trigger": args.per_trigger,
    }
    made = work / "workload.json"
    reuse = args.reuse and made.exists() and json.loads(made.read_text()) == workload
    if not reuse:
        shutil.rmtree(work, ignore_errors=True)
    for run in (work / "kafka", work / "files" / "lake", work / "files" / "state"):
        shutil.rmtree(run, ignore_errors=True)
    result: dict = {
        "events": args.events,
        "keys": args.keys,
        "partitions": args.partitions,
        "per_trigger": args.per_trigger,
        "cpus": os.cpu_count(),
        "conf": _pairs(args.conf),
        "kafka_options": _pairs(args.kafka_option),
    }
    work.mkdir(parents=True, exist_ok=True)
    made.write_text(json.dumps(workload))
    runs: dict[str, tuple[float, list[dict], dict[str, float]]] = {}
    if args.only != "files":
        # (no retention here: the tests' check of every log each second is not the benchmark's)
        settings = {"log.segment.bytes": str(256 * 2**20), "log.retention.check.interval.ms": "300000"}
        with kafka_broker(work / "broker", settings) as broker:
            if not (work / "produced").exists():
                result["produce_s"] = round(
                    produce(broker.bootstrap_servers, "bench", args.events, args.keys, args.partitions), 1
                )
                (work / "produced").touch()
            before = _broker_cpu(broker.pid)
            # Spark's rate limit floors each partition's share of max_offsets_per_trigger, so a batch reads
            # up to one record per partition fewer: 500,000 gave ten batches of 499,995-499,996 and an
            # eleventh of 44 events (a whole batch's fixed cost, its MERGE into the full mirror included),
            # which the files source, ten files of 50,000 a batch, does not pay. One more per partition
            # makes the ten batches the files source has.
            limit = args.per_trigger + args.partitions
            result["max_offsets_per_trigger"] = limit
            job = kafka_job(
                work / "kafka", broker.bootstrap_servers, "bench", limit, _pairs(args.kafka_option)
            )
            runs["kafka"] = timed(with_spark_conf(job, _pairs(args.conf)))
            result["kafka_broker_cpu_s"] = round(_broker_cpu(broker.pid) - before, 2)
    if args.only != "kafka":
        if not (work / "written").exists():
            per_file = max(1, args.per_trigger // 10)
            write_files(work / "files" / "landing", args.events, args.keys, per_file)
            os.sync()
            (work / "written").touch()
        runs["files"] = timed(with_spark_conf(write_job(work / "files", "bench", 10), _pairs(args.conf)))
    from deltalake import DeltaTable

    for source, (wall, batches, cpu) in runs.items():
        result[source] = {
            "wall_s": round(wall, 2),
            "events_per_s": round(args.events / wall),
            "batches": len(batches),
            "cpu_s": {**cpu, "total": round(sum(cpu.values()), 2)},
            "cpu_us_per_event": round(sum(cpu.values()) / args.events * 1e6, 2),
            "phases_ms_sum": phase_sums(batches),
            "phases_ms": [b.get("phases_ms") for b in batches][:3],
            "mirror_rows": DeltaTable(str(work / source / "lake" / "bench" / "orders")).count(),
        }
    if len(runs) == 2:
        k, f = result["kafka"], result["files"]
        result["kafka_to_files_events_per_s"] = round(k["events_per_s"] / f["events_per_s"], 3)
        result["kafka_to_files_cpu"] = {
            kind: round(k["cpu_s"][kind] / f["cpu_s"][kind], 3) if f["cpu_s"][kind] else None
            for kind in ("driver", "jvm", "workers", "total")
        }
        if k["mirror_rows"] != f["mirror_rows"]:
            raise SystemExit(
                f"the mirrors differ: {k['mirror_rows']} rows from Kafka, {f['mirror_rows']} from files"
            )
    print(json.dumps(result, indent=1))
    (work / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
