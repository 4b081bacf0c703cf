"""Catch-up throughput from Kafka: N canal-json events in a topic of 8 partitions (a broker of its own,
replicator.broker), mirrored with `mirror --available-now` and ``max_offsets_per_trigger`` for ~500k events
per batch, beside the files source on the same events (same batch size: 10 files of 50k). Reports events/s
of both and their ratio. Not a test; ``make bench`` runs it, results in docs/performance.md:

    python benchmarks/kafka_throughput.py [--events 5000000] [--keys 500000] [--per-trigger 500000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import zlib
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workload import batch_lines, events, mirror_command, run_watched, write_files, write_job

from replicator.broker import kafka_broker

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


def kafka_job(workdir: Path, servers: str, topic: str, per_trigger: int) -> Path:
    job = workdir / "job.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    job.write_text(
        "name: bench\n"
        "source: {type: kafka, dialect: canal-json, kafka: "
        f'{{bootstrap_servers: "{servers}", topics: [{topic}], max_offsets_per_trigger: {per_trigger}}}}}\n'
        "target: {path: lake}\nstate: {path: state}\n"
    )
    return job


def timed(job: Path) -> tuple[float, list[dict]]:
    elapsed, _out, err = run_watched(mirror_command(job), lambda pid, stop: stop.wait(), cwd=REPO)
    return elapsed, batch_lines(err)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--per-trigger", type=int, default=500_000, help="max_offsets_per_trigger")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "kafka_throughput"))
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    with kafka_broker(work / "broker", {"log.segment.bytes": str(256 * 2**20)}) as broker:
        produce_s = produce(broker.bootstrap_servers, "bench", args.events, args.keys, args.partitions)
        kafka_s, kafka_batches = timed(
            kafka_job(work / "kafka", broker.bootstrap_servers, "bench", args.per_trigger)
        )
    per_file = max(1, args.per_trigger // 10)
    write_files(work / "files" / "landing", args.events, args.keys, per_file)
    os.sync()
    files_s, files_batches = timed(write_job(work / "files", "bench", 10))
    from deltalake import DeltaTable

    rows = {s: DeltaTable(str(work / s / "lake" / "bench" / "orders")).count() for s in ("kafka", "files")}
    result = {
        "events": args.events,
        "keys": args.keys,
        "partitions": args.partitions,
        "per_trigger": args.per_trigger,
        "produce_s": round(produce_s, 1),
        "kafka_wall_s": round(kafka_s, 2),
        "kafka_events_per_s": round(args.events / kafka_s),
        "kafka_batches": len(kafka_batches),
        "files_wall_s": round(files_s, 2),
        "files_events_per_s": round(args.events / files_s),
        "files_batches": len(files_batches),
        "kafka_to_files": round(files_s / kafka_s, 3),
        "mirror_rows": rows,
        "kafka_phases_ms": [b.get("phases_ms") for b in kafka_batches][:3],
        "cpus": os.cpu_count(),
    }
    if rows["kafka"] != rows["files"]:
        raise SystemExit(f"the mirrors differ: {rows}")
    print(json.dumps(result, indent=1))
    (work / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
