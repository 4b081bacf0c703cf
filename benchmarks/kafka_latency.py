"""Latency from Kafka: produce time to mirror commit, with a 1 s trigger and 1,000 events/s produced.

A producer thread sends 100 canal-json INSERT messages every 100 ms into a topic of 4 partitions (a broker
of its own, replicator.broker), each event's ``es`` the wall clock (ms) at which it was produced.
``replicator mirror`` runs continuously with ``trigger.interval: 1 second`` and ``source.type: kafka``.
Latency per row = the commit time of the Delta version that added it minus its ``_cdc_event_time``
(benchmarks/latency.py's measure). Reports p50/p95/max after a warm-up. Not a test; ``make bench`` runs
it, results in docs/performance.md:

    python benchmarks/kafka_latency.py [--seconds 60] [--rate 1000] [--warmup 15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from latency import latencies
from workload import batch_lines, message, row

from replicator.broker import kafka_broker

REPO = Path(__file__).resolve().parent.parent
PARTITIONS = 4


def producer(servers: str, topic: str, rate: int, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    out = Producer({"bootstrap.servers": servers, "linger.ms": 5, "enable.idempotence": True})
    key = 0
    rng = random.Random(7)
    per_tick = max(1, rate // 10)
    tick = time.monotonic()
    while not stop.is_set():
        for _ in range(per_tick):
            es = int(time.time() * 1000)
            out.produce(
                topic,
                orjson.dumps(message("INSERT", row(rng, key, key), None, es, key)),
                partition=key % PARTITIONS,
            )
            key += 1
        out.poll(0)
        tick += 0.1
        time.sleep(max(0.0, tick - time.monotonic()))
    out.flush(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--warmup", type=float, default=15, help="seconds of events not counted")
    parser.add_argument("--workdir", default=str(REPO / "bench-out" / "kafka_latency"))
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with kafka_broker(work / "broker") as broker:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for future in admin.create_topics([NewTopic("latency", num_partitions=PARTITIONS)]).values():
            future.result(timeout=60)
        (work / "job.yaml").write_text(
            "name: latency\n"
            "source: {type: kafka, dialect: canal-json, kafka: "
            f'{{bootstrap_servers: "{broker.bootstrap_servers}", topics: [latency]}}}}\n'
            "target: {path: lake}\nstate: {path: state}\ntrigger: {interval: 1 second}\n"
        )
        job = subprocess.Popen(
            [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", "job.yaml"],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        time.sleep(12)  # let Spark start before the clock of the measured events starts
        started_ms = time.time() * 1000
        stop = threading.Event()
        thread = threading.Thread(
            target=producer, args=(broker.bootstrap_servers, "latency", args.rate, stop)
        )
        thread.start()
        time.sleep(args.seconds)
        stop.set()
        thread.join()
        time.sleep(5)  # the last records
        os.killpg(job.pid, signal.SIGTERM)
        _, err = job.communicate(timeout=120)
    batches = batch_lines(err)
    (work / "job.log").write_text(err)
    if not (work / "lake" / "bench" / "orders").exists():
        raise SystemExit(f"nothing mirrored; job log:\n{err[-3000:]}")
    values = sorted(latencies(work / "lake" / "bench" / "orders", int(started_ms + args.warmup * 1000)))
    if not values:
        raise SystemExit(f"no events measured; job log:\n{err[-3000:]}")

    def pct(p: float) -> float:
        return round(values[min(len(values) - 1, int(p * len(values)))], 1)

    result = {
        "rate": args.rate,
        "seconds": args.seconds,
        "partitions": PARTITIONS,
        "events_measured": len(values),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "max_ms": round(values[-1], 1),
        "batches": len(batches),
        "median_batch_ms": sorted(b["duration_ms"] for b in batches)[len(batches) // 2] if batches else None,
    }
    print(json.dumps(result, indent=1))
    (work / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
