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
# The real MariaDB capture (tests/test_e2e.py's) holds tables with other keys than the `id` the job files
# below name for every Debezium table; tests/test_e2e.py mirrors it through Kafka with its own keys.
LEAVE_OUT = {"dts-avro": ("container.avro",), "debezium": ("real-mariadb-3.5.jsonl",)}


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
    # Each dead letter keeps the bytes produced at its coordinates: the record's value, or for an element of
    # an array document a slice of it that parses as that element.
    value_at = {where: raw for (_key, raw, _partition), where in zip(stream, placed, strict=True)}
    for d in state_rows(state, "dead_letters", ["source", "partition", "offset", "index", "raw"]):
        produced_value = value_at[(d["source"], d["partition"], d["offset"])]
        assert d["raw"] is not None and d["raw"] in produced_value, d
        if d["raw"] != produced_value:
            document = json.loads(produced_value)
            assert isinstance(document, list) and json.loads(d["raw"]) == document[d["index"] or 0], d


def inserts(ids: range, partitions: int = 2) -> list[tuple[bytes | None, bytes, int]]:
    """canal-json INSERTs of shop.orders, id i in partition i % partitions (no key, as canal)."""
    from tests.helpers import canal, order

    return [
        (None, json.dumps(canal("INSERT", [order(i)], es=1_700_000_000_000 + i)).encode(), i % partitions)
        for i in ids
    ]


def mirrored_ids(root: Path, table: str = "orders") -> list[int]:
    return sorted(int(r["id"]) for r in delta_table(root / "lake" / "shop" / table).to_pylist())


def test_offsets_deleted_before_the_job_read_them_fail_or_are_shown_as_lost(spark, kafka, tmp_path, capsys):
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
    assert f"of topic {topic!r} partition" in message
    assert "offsets 5 to 11 " in message or "offsets 5 to 7 " in message, message  # the lost ones
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
    from replicator.commands.status import print_status

    capsys.readouterr()
    print_status(going_on)
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(topic)]
    assert lines == [[topic, "0", "15", "14", "0", "5-11"], [topic, "1", "15", "14", "0", "5-7"]]


def run_until(spark, config, done, then=None, timeout: float = 180):  # type: ignore[no-untyped-def]
    """The streaming job (not --available-now) in this thread while ``then`` runs beside it; stopped once
    ``done()`` holds (or after ``timeout`` s). Returns the job's error, if it stopped on one."""
    import threading
    import time

    from replicator.commands.runner import MirrorJob

    mirror = MirrorJob(config, spark)
    errors: list[BaseException] = []

    def beside() -> None:
        try:
            if then is not None:
                then()
            deadline = time.monotonic() + timeout
            while not done() and time.monotonic() < deadline:
                time.sleep(0.5)
        except BaseException as exc:
            errors.append(exc)
        finally:
            mirror._stop.set()

    thread = threading.Thread(target=beside, daemon=True)
    thread.start()
    try:
        mirror.run()
    except Exception as exc:
        mirror._stop.set()
        thread.join()
        return exc
    thread.join()
    if errors:
        raise errors[0]
    return None


def ids_now(root: Path) -> list[int]:
    table = root / "lake" / "shop" / "orders"
    return mirrored_ids(root) if (table / "_delta_log").exists() else []


def wait_for(condition, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def test_partitions_added_and_a_new_topic_of_the_pattern_are_read_while_the_job_runs(spark, kafka, tmp_path):
    first = kafka.topic("grow", 1)
    prefix = first.rsplit("-", 1)[0]
    kafka.produce(first, inserts(range(5), 1))
    source = kafka_source(
        kafka, "canal-json", topic_pattern=f"{prefix}-[0-9]+", options={"kafka.metadata.max.age.ms": "500"}
    )
    config = job(tmp_path, source=source, trigger={"interval": "200ms"})
    later: list[str] = []

    def grow() -> None:
        wait_for(lambda: ids_now(tmp_path) == list(range(5)))
        kafka.add_partitions(first, 3)
        kafka.produce(first, [(k, v, 1 + i % 2) for i, (k, v, _p) in enumerate(inserts(range(5, 15), 1))])
        later.append(kafka.topic("grow", 2))  # matches the pattern: read from its first offset
        kafka.produce(later[0], inserts(range(15, 20)))

    error = run_until(spark, config, lambda: ids_now(tmp_path) == list(range(20)), grow)
    assert error is None, error
    assert ids_now(tmp_path) == list(range(20))
    from replicator.commands.status import collect_status

    seen = {(p["topic"], p["partition"]): p["next_offset"] for p in collect_status(config)["kafka"]}
    assert seen == {(first, 0): 5, (first, 1): 5, (first, 2): 5, (later[0], 0): 2, (later[0], 1): 3}


@pytest.mark.slow
def test_the_broker_stopped_and_restarted_the_job_resumes_without_loss(spark, tmp_path):
    import time

    from replicator.testing.broker import kafka_broker
    from tests.kafka_helpers import Kafka

    folder = tmp_path / "broker"
    starting = kafka_broker(folder)
    broker = starting.__enter__()
    restarted = None
    try:
        kafka = Kafka(broker)
        topic = kafka.topic("restart", 2)
        kafka.produce(topic, inserts(range(10)))
        config = job(
            tmp_path, source=kafka_source(kafka, "canal-json", [topic]), trigger={"interval": "200ms"}
        )
        port = int(broker.bootstrap_servers.rsplit(":", 1)[1])

        def outage() -> None:
            nonlocal restarted
            wait_for(lambda: ids_now(tmp_path) == list(range(10)))
            starting.__exit__(None, None, None)  # stopped (SIGTERM), storage kept
            time.sleep(5)  # the job's triggers meet no broker meanwhile
            restarted = kafka_broker(folder, port=port)
            restarted.__enter__()
            Kafka(broker).produce(topic, inserts(range(10, 20)))

        error = run_until(spark, config, lambda: ids_now(tmp_path) == list(range(20)), outage)
        # The job waits: Spark's Kafka source retries its offset requests through the 5 s outage.
        assert error is None, error
        assert ids_now(tmp_path) == list(range(20))
    finally:
        if restarted is not None:
            restarted.__exit__(None, None, None)
        else:
            starting.__exit__(None, None, None)


IVY_NOWHERE = """<ivysettings><settings defaultResolver="nowhere"/><resolvers><filesystem name="nowhere">
<artifact pattern="{root}/no-repository/[organisation]/[module]/[revision]/[artifact]-[revision].[ext]"/>
</filesystem></resolvers></ivysettings>"""


def test_a_kafka_job_with_no_jars_and_no_registry_fails_with_one_clear_line(tmp_path):
    """No jars fetched (REPLICATOR_JARS: an empty folder) and Spark's resolver reaching no registry (an ivy
    settings file whose only repository does not exist, its own empty cache): exit 4, and the last line
    says which packages, where they were looked for and what to run."""
    import os
    import subprocess
    import sys

    (tmp_path / "ivy.xml").write_text(IVY_NOWHERE.format(root=tmp_path))
    (tmp_path / "job.yaml").write_text(
        "name: nojars\n"
        "source: {type: kafka, dialect: canal-json, kafka: {bootstrap_servers: '127.0.0.1:9', topics: [t]}}\n"
        "target: {path: lake}\nstate: {path: state}\n"
        f"spark: {{conf: {{spark.jars.ivySettings: {tmp_path / 'ivy.xml'}, "
        f"spark.jars.ivy: {tmp_path / 'ivy'}}}}}\n"
    )
    (tmp_path / "jars").mkdir()
    env = {**os.environ, "REPLICATOR_JARS": str(tmp_path / "jars"), "REPLICATOR_SPARK_MASTER": "local[1]"}
    env.pop("REPLICATOR_SPARK_JARS", None)
    done = subprocess.run(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(tmp_path / "job.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 4, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("replicator: Spark did not start: this job needs org.apache.spark:spark-sql-kafka")
    assert str(tmp_path / "jars" / "spark") in last and "replicator jars" in last and "--packages" in last


def test_debezium_keys_tombstones_heartbeats_and_transaction_records_from_a_topic(spark, kafka, tmp_path):
    """Debezium as Kafka Connect writes it: the key struct as the record key (no tables.keys in the job),
    a NULL-value tombstone after each delete, heartbeats and transaction BEGIN/END records: the mirror keyed
    by the record key, and every non-change record filtered and counted, none a dead letter."""
    from tests.test_kafka_keys import debezium

    heartbeat = (
        b'{"schema":{"type":"struct","name":"io.debezium.connector.common.Heartbeat"},"payload":{"ts_ms":1}}'
    )

    def tx(status: str) -> bytes:
        return json.dumps({"status": status, "id": "571", "ts_ms": 1, "event_count": 2}).encode()

    records = [
        (None, tx("BEGIN")),
        (b'{"id": 1}', debezium("orders", "c", {"id": 1, "name": "a"}, None, 10)),
        (b'{"id": 2}', debezium("orders", "c", {"id": 2, "name": "b"}, None, 11)),
        (None, tx("END")),
        (None, heartbeat),
        (b'{"id": 1}', debezium("orders", "u", {"id": 1, "name": "a2"}, {"id": 1, "name": "a"}, 12)),
        (b'{"id": 2}', debezium("orders", "d", None, {"id": 2, "name": "b"}, 13)),
        (b'{"id": 2}', None),  # the tombstone after the delete
        (b'{"id": 3}', debezium("orders", "c", {"id": 3, "name": "c"}, None, 14)),
        (None, heartbeat),
    ]
    topic = kafka.topic("dbz", 1)  # one partition: the transaction records keep their place
    kafka.produce(topic, [(k, v, None) for k, v in records])
    config = job(tmp_path, source=kafka_source(kafka, "debezium", [topic]), trigger={"interval": "100ms"})
    run_job(spark, config)
    rows = delta_table(tmp_path / "lake" / "shop" / "orders").to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows) == [("1", "a2"), ("3", "c")]  # untyped: text
    batches = state_rows(tmp_path / "state", "batches")
    total = {
        c: sum(b[c] for b in batches) for c in ("records_in", "events", "applied", "filtered", "dead_letters")
    }
    assert total == {"records_in": 10, "events": 5, "applied": 5, "filtered": 5, "dead_letters": 0}
    assert state_rows(tmp_path / "state", "dead_letters") == []
