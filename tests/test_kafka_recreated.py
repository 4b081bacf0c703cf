"""A Kafka topic deleted and re-created under the same name (issue 48, item 7), against a real broker.

Spark's checkpoint holds offsets by topic name: with more records in the new topic than the job had read,
its Kafka source went on from the old offset and skipped the new topic's first records unseen; with fewer,
the run died with a Java traceback. The job now records each topic's ID (replicator.kafka_topics): by
default a re-created topic stops the run with one line naming it and both IDs (exit 4), nothing applied;
with ``fail_on_data_loss: false`` the new topic is read from its start and ``status`` shows the event.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import delta_table
from tests.kafka_helpers import kafka_source

pytestmark = pytest.mark.kafka


def inserts(ids: range, partitions: int = 2) -> list[tuple[bytes | None, bytes, int]]:
    """canal-json INSERTs of shop.orders, id i in partition i % partitions."""
    from tests.helpers import canal, order

    return [
        (None, json.dumps(canal("INSERT", [order(i)], es=1_700_000_000_000 + i)).encode(), i % partitions)
        for i in ids
    ]


def mirrored_ids(root: Path) -> list[int]:
    return sorted(int(r["id"]) for r in delta_table(root / "lake" / "shop" / "orders").to_pylist())


def job_file(root: Path, kafka, topic: str, fail_on_data_loss: bool, reader: str) -> Path:  # type: ignore[no-untyped-def]
    source = kafka_source(kafka, "canal-json", [topic], fail_on_data_loss=fail_on_data_loss, reader=reader)
    data = {"name": "recreated", "source": source, "target": {"path": "lake"}, "state": {"path": "state"}}
    path = root / f"job-{fail_on_data_loss}.json"  # (JSON is YAML)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def topic_id(kafka, topic: str) -> str | None:  # type: ignore[no-untyped-def]
    """The topic's ID as ``kafka-topics.sh --describe`` shows it."""
    from confluent_kafka import KafkaException, TopicCollection

    admin = kafka.admin()  # kept while its future runs (a collected client cancels it)
    [future] = admin.describe_topics(TopicCollection([topic])).values()
    try:
        described = future.result(timeout=30)
    except KafkaException:
        return None
    # librdkafka prints the UUID in standard base64, Kafka's Java client (kafka-topics.sh --describe, the
    # job's message) in URL-safe base64
    return str(described.topic_id).replace("+", "-").replace("/", "_")


@pytest.mark.parametrize(
    ("new_records", "case", "reader"), [(30, "more", "direct"), (4, "fewer", "direct"), (30, "more", "spark")]
)
def test_a_re_created_topic_stops_the_run_or_is_read_from_its_start(
    in_process, kafka, tmp_path, capsys, new_records, case, reader
):
    """``reader``: the decode tasks read the ranges (kafka_reader), or Spark's Kafka connector does."""
    from replicator.commands.status import collect_status, print_status
    from replicator.config import load_config

    topic = kafka.topic(f"recreated-{case}-{reader}", 2)
    kafka.produce(topic, inserts(range(10)))  # offsets 0-4 in each partition
    stop = job_file(tmp_path, kafka, topic, fail_on_data_loss=True, reader=reader)
    go_on = job_file(tmp_path, kafka, topic, fail_on_data_loss=False, reader=reader)
    assert in_process(["mirror", "--config", str(stop), "--available-now"]) == 0, capsys.readouterr()
    assert mirrored_ids(tmp_path) == list(range(10))
    old_id = topic_id(kafka, topic)
    assert old_id is not None

    kafka.recreate(topic, 2)
    # The broker's metadata may answer with the old topic, or none, a moment: the new ID three times running.
    deadline, seen = time.monotonic() + 60, []
    while not (len(seen) >= 3 and len(set(seen[-3:])) == 1 and seen[-1] not in (old_id, None)):
        assert time.monotonic() < deadline, seen
        seen.append(topic_id(kafka, topic))
        time.sleep(0.2)
    new_id = seen[-1]
    fresh = range(100, 100 + new_records)  # 15 (more than the 5 read) or 2 (fewer) in each partition
    kafka.produce(topic, inserts(fresh))
    capsys.readouterr()

    # By default: one line naming the topic and both IDs, exit 4, nothing applied; again on a second try.
    for _ in range(2):
        assert in_process(["mirror", "--config", str(stop), "--available-now"]) == 4
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if not line.startswith("{")]  # (the JSON log's event)
        assert len(lines) == 1 and lines[0].startswith("replicator: ") and "Traceback" not in err, err
        assert f"Kafka topic {topic!r} was deleted and re-created" in lines[0]
        assert old_id in lines[0] and new_id in lines[0] and "fail_on_data_loss: false" in lines[0]
        assert mirrored_ids(tmp_path) == list(range(10))

    # fail_on_data_loss: false: the new topic from its start, every record of it; status tells.
    assert in_process(["mirror", "--config", str(go_on), "--available-now"]) == 0, capsys.readouterr()
    assert mirrored_ids(tmp_path) == [*range(10), *fresh]
    status = collect_status(load_config(go_on))
    [event] = status["kafka_topics_recreated"]
    assert (event["topic"], event["old_id"], event["new_id"]) == (topic, old_id, new_id)
    partitions = {p["partition"]: p for p in status["kafka"]}
    for p in partitions.values():
        assert (p["next_offset"], p["lag"], p["lost"]) == (new_records // 2, 0, []), p
    capsys.readouterr()
    print_status(load_config(go_on))
    out = capsys.readouterr().out
    assert f"kafka topic {topic} was deleted and re-created (topic ID {old_id} -> {new_id})" in out

    # The new topic is the job's topic now: a later run goes on from where this one ended.
    kafka.produce(topic, inserts(range(200, 204)))
    assert in_process(["mirror", "--config", str(stop), "--available-now"]) == 0, capsys.readouterr()
    assert mirrored_ids(tmp_path) == [*range(10), *fresh, *range(200, 204)]
