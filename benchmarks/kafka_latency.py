"""Latency from Kafka: produce time to mirror commit, with a 1 s trigger and 1,000 events/s produced.

A producer thread sends 100 canal-json INSERT messages every 100 ms into a topic of 4 partitions (a broker
of its own, replicator.testing.broker), each event's ``es`` the wall clock (ms) at which it was produced.
``replicator mirror`` runs continuously with ``trigger.interval: 1 second`` and ``source.type: kafka``.
Latency per row = the commit time of the Delta version that added it minus its ``_cdc_event_time``
(benchmarks/latency.py's measure). Reports p50/p95/max after a warm-up, each phase's median over the
batches and the CPU time per second of the job's processes after the warm-up (benchmarks/latency.py's
report). Not a test; ``make bench`` runs it, results in benchmarks/LOG.md:

    python benchmarks/kafka_latency.py [--seconds 60] [--rate 1000] [--warmup 15]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import threading
import time
from functools import partial
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from latency import report, timed_run
from workload import message, row

from replicator.testing.broker import kafka_broker

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
        feed = partial(producer, broker.bootstrap_servers, "latency", args.rate)
        started_ms, err, cpu = timed_run(work, feed, args.seconds, args.warmup)
    (work / "job.log").write_text(err)
    mirror = work / "lake" / "bench" / "orders"
    if not mirror.exists():
        raise SystemExit(f"nothing mirrored; job log:\n{err[-3000:]}")
    head = {"rate": args.rate, "seconds": args.seconds, "partitions": PARTITIONS}
    result, _batches = report(mirror, int(started_ms + args.warmup * 1000), err, head)
    result["cpu_ms_per_s"] = cpu  # after the warm-up (a 1 s trigger: about one batch a second)
    print(json.dumps(result, indent=1))
    (work / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
