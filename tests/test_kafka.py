"""The Kafka source against a real broker (conftest's ``kafka``: Apache Kafka in KRaft mode on 127.0.0.1).

Every format is produced into a topic of several partitions the way its capture tool produces it
(tests/kafka_helpers.py: record keys and partitions) and mirrored with ``source.type: kafka`` by the streaming
job; the mirror equals the files source's mirror of the same stream, and the change log and dead letters
name the records' Kafka coordinates (topic, partition, offset)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from replicator.sources import read_path
from tests.helpers import Runner, delta_table, job
from tests.kafka_helpers import PLACEMENT, kafka_source, run_job, stream_folder

pytestmark = pytest.mark.kafka
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PARTITIONS = 3


def mirrors(lake: Path) -> dict[str, list[str]]:
    """Every mirror table under ``lake`` (database/table) -> its rows (engine columns left out, since
    ``_cdc_seq`` ends with the record's coordinates), as sorted JSON texts."""
    found = {}
    for log in sorted(lake.glob("**/_delta_log")):
        table = log.parent
        rows = delta_table(table).to_pylist()
        found[str(table.relative_to(lake))] = sorted(json.dumps(r, default=str, sort_keys=True) for r in rows)
    return found


def state_rows(state: Path, name: str, columns: list[str] | None = None) -> list[dict]:
    from deltalake import DeltaTable

    path = state / name
    if not DeltaTable.is_deltatable(str(path)):
        return []
    return DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist()


# A DTS container file (.avro) is the files source's own way of holding many datums; DTS puts one Avro datum
# in each Kafka record (the .b64 lines), so the topic leaves it out.
LEAVE_OUT = {"dts-avro": ("container.avro",)}


@pytest.mark.parametrize("dialect", sorted(PLACEMENT))
def test_every_format_mirrors_from_kafka_as_from_files(spark, kafka, tmp_path, dialect):
    folder = stream_folder(dialect, FIXTURES, tmp_path / "landing", LEAVE_OUT.get(dialect, ()))
    records = read_path(str(folder))
    assert records.num_rows > 0
    topic = kafka.topic(dialect, PARTITIONS)
    place = PLACEMENT[dialect]
    stream = []
    for raw in records["raw"].to_pylist():
        key, partition = place(raw, PARTITIONS)
        stream.append((key, raw, partition))
    placed = kafka.produce(topic, stream)
    assert len({p for _t, p, _o in placed}) > 1 or dialect == "dts-avro"  # more than one partition in use

    # CKafka's format one names no key; Debezium's is in the record key, which files do not have: the job
    # file gives the files source the key the records carry (test_debezium_key_from_the_record_key: none).
    keys = {"tables": {"keys": {"*.*": ["id"]}}} if dialect in ("ckafka", "debezium") else {}
    files = Runner(spark, job(tmp_path / "files", source={"path": str(folder), "dialect": dialect}, **keys))
    files.batch(folder)
    config = job(
        tmp_path / "kafka",
        source=kafka_source(kafka, dialect, [topic], max_offsets_per_trigger=None),
        trigger={"interval": "100ms"},
        **keys,
    )
    run_job(spark, config)

    expected = mirrors(tmp_path / "files" / "lake")
    assert expected, f"the files source mirrored nothing of {dialect}: the comparison would be empty"
    assert mirrors(tmp_path / "kafka" / "lake") == expected

    # Every record read once, counted as the files source counts it; coordinates are Kafka's.
    state = tmp_path / "kafka" / "state"
    batches = state_rows(state, "batches")
    files_batches = state_rows(tmp_path / "files" / "state", "batches")
    for column in ("records_in", "events", "applied", "filtered", "dead_letters"):
        assert sum(b[column] for b in batches) == sum(b[column] for b in files_batches), column
    produced = set(placed)
    # The change log's data files (read as Parquet: delta-rs does not open the log of a table whose
    # partition value has a space, DRS's seed table "test "; a defect of its own, not of the source).
    log = [
        r
        for f in (state / "changelog").rglob("*.parquet")
        for r in pq.read_table(f, columns=["coordinates"]).to_pylist()
    ]
    dead = state_rows(state, "dead_letters", ["source", "partition", "offset"])
    assert log or dead
    for c in [r["coordinates"] for r in log] + dead:
        assert (c["source"], c["partition"], c["offset"]) in produced, c
    logged = {(r["coordinates"]["source"], r["coordinates"]["partition"]) for r in log}
    assert {t for t, _p in logged} <= {topic}
    assert len(dead) == len(state_rows(tmp_path / "files" / "state", "dead_letters", ["offset"]))


def inserts(ids: range, partitions: int = 2) -> list[tuple[bytes | None, bytes, int]]:
    """canal-json INSERTs of shop.orders, id i in partition i % partitions (no key, as canal)."""
    from tests.helpers import canal, order

    return [
        (None, json.dumps(canal("INSERT", [order(i)], es=1_700_000_000_000 + i)).encode(), i % partitions)
        for i in ids
    ]


def mirrored_ids(root: Path, table: str = "orders") -> list[int]:
    return sorted(int(r["id"]) for r in delta_table(root / "lake" / "shop" / table).to_pylist())


def test_offsets_deleted_before_the_job_read_them_fail_or_are_shown_as_lost(spark, kafka, tmp_path):
    from confluent_kafka import TopicPartition

    from replicator.commands.status import collect_status
    from replicator.errors import SourceFailed

    topic = kafka.topic("retention", 2)
    kafka.produce(topic, inserts(range(10)))  # offsets 0-4 in each partition
    source = kafka_source(kafka, "canal-json", [topic])
    config = job(tmp_path, source=source, trigger={"interval": "100ms"})
    run_job(spark, config)
    assert mirrored_ids(tmp_path) == list(range(10))

    kafka.produce(topic, inserts(range(10, 30)))  # offsets 5-14 in each partition
    admin = kafka.admin()
    deleted = admin.delete_records([TopicPartition(topic, 0, 12), TopicPartition(topic, 1, 8)])
    for future in deleted.values():
        future.result(timeout=30)  # as retention would: partition 0 starts at 12, partition 1 at 8

    with pytest.raises(SourceFailed) as failed:
        run_job(spark, config)
    message = str(failed.value)
    assert f"of topic '{topic}' partition" in message and "offsets 5 to 14" in message
    assert "fail_on_data_loss: false" in message and "\n" not in message
    assert mirrored_ids(tmp_path) == list(range(10))  # nothing of that batch applied

    going_on = job(tmp_path, source={**source, "kafka": {**source["kafka"], "fail_on_data_loss": False}})
    run_job(spark, going_on)
    lost = {10, 12, 14, 16, 18, 20, 22} | {11, 13, 15}  # partition 0 offsets 5-11, partition 1 offsets 5-7
    assert mirrored_ids(tmp_path) == sorted(set(range(30)) - lost)
    partitions = {p["partition"]: p for p in collect_status(going_on)["kafka"]}
    assert partitions[0]["lost"] == [[5, 12]] and partitions[0]["lost_offsets"] == 7
    assert partitions[1]["lost"] == [[5, 8]] and partitions[1]["lost_offsets"] == 3
    for p in partitions.values():
        assert (p["topic"], p["next_offset"], p["last_read"], p["latest"], p["lag"]) == (topic, 15, 14, 15, 0)
