"""End to end from a real PostgreSQL (issue 51): PostgreSQL -> Debezium's PostgreSQL connector (pgoutput,
Kafka Connect) -> Kafka -> replicator, and every mirror equals ``SELECT *`` of its table
(tests/e2e_pg_workload.py): after the snapshot, after streaming (TOAST placeholders, replica identities,
key changes, names that differ by case and schema), after schema changes without DDL events.

One pipeline for the module (PostgreSQL, the broker and Kafka Connect started by replicator.testing in a
temp folder and stopped by PID); the tests run in order on it, each a later moment of one database.
Run with ``make e2e`` (marker ``e2e``)."""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest

from replicator.testing.broker import kafka_broker
from replicator.testing.e2e import kafka_connect
from replicator.testing.postgres import DATABASE, connector_settings, postgresql
from tests import e2e_pg_workload as w
from tests.helpers import job
from tests.test_e2e import dead_letters, dump, run_mirror, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PREFIX = "pg"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("pg-e2e")


@pytest.fixture(scope="module")
def pipeline(root):
    """PostgreSQL with the seeded tables, a broker, Kafka Connect whose connector has taken its snapshot."""
    with (
        postgresql(root / "postgres") as server,
        kafka_broker(root / "kafka") as broker,
        server.connect() as connection,
    ):
        w.create_schema(connection)
        w.seed(connection)
        w.mark(connection, "seeded")
        # Heartbeats (topic __debezium-heartbeat.pg) and transaction metadata (topic pg.transaction) on: the
        # mirror filters and counts them (test_metadata_records_...). Offsets flushed only when the worker
        # stops cleanly (the interval is longer than the module): a kill -9 of Connect loses every change
        # since that stop, and Debezium publishes them again (test_faults_...), whatever the tests' order.
        settings = connector_settings(
            PREFIX,
            server,
            PREFIX,
            **{"heartbeat.interval.ms": "1000", "provide.transaction.metadata": "true"},
        )
        worker = {"offset.flush.interval.ms": str(3_600_000)}
        with kafka_connect(root / "connect", broker, settings, worker=worker) as connect:
            wait_for(broker, f"{PREFIX}.public.marker", "seeded", timeout=300)
            # The snapshot publishes the tables one after another (marker before types and wiped): the
            # marker's snapshot row says only that the snapshot began. A change made now is streamed,
            # and streaming starts once the snapshot's last table is published (seen once in CI: the
            # mirror run while types and wiped were still being read).
            w.mark(connection, "snapshotted")
            wait_for(broker, f"{PREFIX}.public.marker", "snapshotted", timeout=300)
            yield server, broker, connect, connection


def mirror_source(broker, prefix: str = PREFIX) -> dict:
    """The connector's topics, its heartbeat topic (``topic.heartbeat.prefix`` + ``.`` + prefix) too."""
    return {
        "type": "kafka",
        "dialect": "debezium",
        "kafka": {
            "bootstrap_servers": broker.bootstrap_servers,
            "topic_pattern": rf"^(__debezium-heartbeat\.)?{prefix}(\..*)?$",
            "starting_offsets": "earliest",
        },
    }


def mirror_job(root, broker, prefix: str = PREFIX, **overrides):
    return job(
        root,
        name=f"e2e-{prefix}",
        source=mirror_source(broker, prefix),
        schema_evolution="evolve",
        **overrides,
    )


def check(root, connection, skip=None) -> None:
    problems = w.differences(root / "lake", DATABASE, w.snapshot(connection), w.tables(connection), skip)
    assert not problems, "\n".join(problems[:60])


def test_snapshot(spark, pipeline, root):
    _server, broker, _connect, connection = pipeline
    run_mirror(spark, mirror_job(root, broker))
    dump(broker, PREFIX, root / "snapshot.jsonl")
    check(root, connection)
    assert not dead_letters(root)


def test_streaming_toast_and_replica_identity(spark, pipeline, root):
    _server, broker, _connect, connection = pipeline
    w.stream(connection)
    w.mark(connection, "streamed")
    wait_for(broker, f"{PREFIX}.public.marker", "streamed", timeout=300)
    dump(broker, PREFIX, root / "streamed.jsonl")
    run_mirror(spark, mirror_job(root, broker))
    check(root, connection, skip={"types": [(k,) for k in w.INFINITE_DATES]})
    # TOAST: the placeholders of the updates that left the large values alone (a key change too) are kept
    # from the mirror or the batch, never written
    toasty = w.mirror_rows(root / "lake", DATABASE, "public", "toasty")
    assert toasty and not any(w.PLACEHOLDER in str(v) for r in toasty for v in r.values())
    # 'infinity' / '-infinity' of date, timestamp, timestamptz: Debezium publishes numbers (or the word) no
    # Delta date or timestamp is: the row is a dead letter naming each column and its value, never a wrong
    # date (the year-1 rows are mirrored: the snapshot's Julian timestamps corrected, replicator.dialects
    # .pg_dates)
    dead = dead_letters(root)
    assert len(dead) == len(w.INFINITE_DATES), dead
    for d in dead:
        which = "'infinity'" if "'infinity'" in d["error"] else "'-infinity'"
        assert d["table"] == "types", d
        assert all(
            f"{c} is PostgreSQL's {which} (published as " in d["error"] for c in ("dt", "ts", "tstz")
        ), d


def test_schema_changes_without_ddl_events(spark, pipeline, root):
    """PostgreSQL's logical decoding sends no DDL: the mirror follows the rows' schemas. Widened types widen
    the column (values past the old type are not dead letters), a new column appears and the rows already
    there take its default (from the row schema); what no row tells (a rename, a dropped column, a dropped
    table) is as docs/how-to/postgresql-debezium.md says."""
    _server, broker, _connect, connection = pipeline
    for statement in (
        "ALTER TABLE evolving ALTER COLUMN c TYPE bigint",
        "ALTER TABLE evolving ALTER COLUMN vc TYPE text",
        "ALTER TABLE evolving ALTER COLUMN n TYPE numeric(12,4)",
        "ALTER TABLE evolving ADD COLUMN plain text",
        "ALTER TABLE evolving ADD COLUMN e text DEFAULT 'dflt'",
        f"UPDATE evolving SET c = {2**40}, vc = '{'long text ' * 5}', n = 12345678.1234 WHERE id = 1",
        "INSERT INTO evolving VALUES (3, -5, 'x', 0.0001, 'p', 'own')",
        "ALTER TABLE doomed RENAME COLUMN v TO v2",
        "INSERT INTO doomed VALUES (2, 22)",
        "ALTER TABLE doomed DROP COLUMN v2",
        "INSERT INTO doomed VALUES (3)",
        "DROP TABLE doomed",
    ):
        connection.execute(statement)
    w.mark(connection, "altered")
    wait_for(broker, f"{PREFIX}.public.marker", "altered", timeout=300)
    dump(broker, PREFIX, root / "altered.jsonl")
    run_mirror(spark, mirror_job(root, broker))
    evolving = {r["id"]: r for r in w.mirror_rows(root / "lake", DATABASE, "public", "evolving")}
    assert evolving[1]["c"] == 2**40 and evolving[3]["c"] == -5
    assert str(evolving[1]["n"]) == "12345678.1234" and str(evolving[3]["n"]) == "0.0001"
    # The default the database gave the rows already there without a row event: from the row schema.
    assert evolving[1]["e"] == "dflt" and evolving[3]["e"] == "own" and evolving[2]["e"] == "dflt"
    skip = {"types": [(k,) for k in w.INFINITE_DATES]}
    problems = w.differences(root / "lake", DATABASE, w.snapshot(connection), w.tables(connection), skip)
    assert not problems, "\n".join(problems[:60])
    # DROP TABLE sends nothing: the mirror stays with its rows; the renamed column is a new one; a dropped
    # column stays, NULL in the rows written after the drop.
    doomed = {r["id"]: r for r in w.mirror_rows(root / "lake", DATABASE, "public", "doomed")}
    assert doomed == {
        1: {"id": 1, "v": 1, "v2": None},
        2: {"id": 2, "v": None, "v2": 22},
        3: {"id": 3, "v": None, "v2": None},
    }


def test_truncate_with_skipped_operations_none(spark, pipeline, root):
    """TRUNCATE reaches the mirror only with ``skipped.operations=none`` (the default ``t`` leaves it out:
    the mirror of the first connector keeps the rows, as docs/how-to/postgresql-debezium.md says); then the
    mirror is emptied at that point of the stream and the rows written after it are kept."""
    server, broker, _connect, connection = pipeline
    settings = connector_settings(
        "pgt",
        server,
        "pgt",
        **{
            "skipped.operations": "none",
            "publication.autocreate.mode": "filtered",
            "table.include.list": "public.wiped,public.marker",
        },
    )
    with kafka_connect(root / "connect-t", broker, settings):
        connection.execute("TRUNCATE wiped")
        connection.execute("INSERT INTO wiped VALUES (7, 77)")
        w.mark(connection, "truncated")
        wait_for(broker, "pgt.public.marker", "truncated", timeout=300)
    lake = root / "truncate"
    run_mirror(spark, mirror_job(lake, broker, "pgt"))
    assert w.mirror_rows(lake / "lake", DATABASE, "public", "wiped") == [{"id": 7, "v": 77}]
    wait_for(broker, f"{PREFIX}.public.marker", "truncated", timeout=300)
    run_mirror(spark, mirror_job(root, broker))  # the default connector: the TRUNCATE is not published
    kept = {r["id"] for r in w.mirror_rows(root / "lake", DATABASE, "public", "wiped")}
    assert kept == {1, 2, 3, 7}


def consumed(broker, ends: dict[tuple[str, int], int]) -> list[tuple[str, dict | None]]:
    """The records of each topic partition up to its end offset (the mirror's account of what it read), as
    (topic, value)."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "count", "enable.auto.commit": False}
    )
    out = []
    try:
        for (topic, partition), end in ends.items():
            consumer.assign([TopicPartition(topic, partition, 0)])
            offset = 0
            while offset < end:
                record = consumer.poll(5)
                assert record is not None and not record.error(), (topic, partition, offset, end)
                offset = record.offset() + 1
                value = record.value()
                out.append((topic, value and json.loads(value)))
    finally:
        consumer.close()
    return out


def kind(value: dict | None) -> str:
    if value is None:
        return "tombstone"
    if "Heartbeat" in ((value.get("schema") or {}).get("name") or ""):
        return "heartbeat"
    payload = value.get("payload") or {}
    return "transaction" if payload.get("status") in ("BEGIN", "END") else "change"


def test_table_added_later_transactions_and_metadata_records(spark, pipeline, root):
    """A table created after the connector started is in the publication (``publication.autocreate.mode``
    ``all_tables``, the default) and mirrored; a committed transaction over several tables is mirrored
    whole, a rolled-back one not at all; Debezium's heartbeats and transaction BEGIN/END records are
    filtered and counted in the batch summaries, none a dead letter."""
    from tests.test_kafka import state_rows

    _server, broker, _connect, connection = pipeline
    connection.execute("CREATE TABLE added_later (id integer PRIMARY KEY, v text)")
    connection.execute("INSERT INTO added_later VALUES (1, 'a'), (2, 'b')")
    with connection.transaction():  # one transaction, three tables
        connection.execute("INSERT INTO added_later VALUES (3, 'c')")
        connection.execute("UPDATE orders SET v = 'in tx' WHERE id = 2")
        connection.execute("DELETE FROM other.orders WHERE id = 2")
    with connection.transaction():  # rolled back: nothing of it reaches the mirror
        connection.execute("INSERT INTO added_later VALUES (99, 'rolled back')")
        connection.execute("UPDATE orders SET v = 'rolled back'")
        raise psycopg.Rollback()
    w.mark(connection, "added")
    wait_for(broker, f"{PREFIX}.public.marker", "added", timeout=300)
    run_mirror(spark, mirror_job(root, broker))
    skip = {"types": [(k,) for k in w.INFINITE_DATES], "wiped": [(1,), (2,), (3,)]}  # TRUNCATE not published
    check(root, connection, skip)
    added = sorted((r["id"], r["v"]) for r in w.mirror_rows(root / "lake", DATABASE, "public", "added_later"))
    assert added == [(1, "a"), (2, "b"), (3, "c")]
    assert "rolled back" not in {r["v"] for r in w.mirror_rows(root / "lake", DATABASE, "public", "orders")}

    # Every record the job read is in one batch's range; the non-change ones are its filtered count.
    ranges = state_rows(root / "state", "kafka_partitions")
    ends: dict[tuple[str, int], int] = {}
    for r in ranges:
        ends[(r["topic"], r["partition"])] = max(ends.get((r["topic"], r["partition"]), 0), r["end"])
    records = consumed(broker, ends)
    kinds = Counter(kind(v) for _t, v in records)
    assert kinds["heartbeat"] and kinds["transaction"], kinds
    assert {t for t, v in records if kind(v) == "heartbeat"} == {f"__debezium-heartbeat.{PREFIX}"}
    assert {t for t, v in records if kind(v) == "transaction"} == {f"{PREFIX}.transaction"}
    batches = state_rows(root / "state", "batches")
    assert sum(b["records_in"] for b in batches) == len(records)
    assert (
        sum(b["filtered"] for b in batches) == kinds["heartbeat"] + kinds["transaction"] + kinds["tombstone"]
    )
    assert sum(b["dead_letters"] for b in batches) == len(w.INFINITE_DATES)
    assert len(dead_letters(root)) == len(w.INFINITE_DATES)


def churn(connection, n: int) -> None:
    """A round of the fault test's table: a new key ``n``, every key's ``v`` one up (one history version
    each), in one transaction."""
    with connection.transaction():
        connection.execute("INSERT INTO churn VALUES (%s, 0)", [n])
        connection.execute("UPDATE churn SET v = v + 1 WHERE id < %s", [n])


def offsets_mtime(connect) -> float | None:
    """When Kafka Connect last stored the connector's offsets (standalone: the file is rewritten on each
    flush), None before the first."""
    offsets = connect.folder / "offsets.dat"
    return offsets.stat().st_mtime_ns if offsets.exists() else None


def test_faults_kill_the_mirror_restart_connect_and_postgresql(spark, pipeline, root):
    """kill -9 of the mirror process three times at different moments of its batches while the database
    changes, a kill -9 and restart of Kafka Connect after changes whose offsets it had not flushed (Debezium
    publishes them again), a restart of PostgreSQL (the connector reconnects to its slot), a mirror started
    when all of it is in Kafka: then a clean run, every mirror equals the database and the history table
    holds each version once."""
    import json
    import random
    import time

    import yaml
    from deltalake import DeltaTable

    from tests.test_e2e import batches, kill_group, start_mirror

    server, broker, connect, connection = pipeline
    rng = random.Random(51)
    lake = root / "faults"
    lake.mkdir()
    overrides = {"tables": {"history": ["shop.churn"]}, "trigger": {"interval": "1 second"}}
    config = mirror_job(lake, broker, **overrides)
    job_file = lake / "job.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "name": config.name,
                "source": mirror_source(broker),
                "target": {"path": "lake"},
                "state": {"path": "state"},
                "schema_evolution": "evolve",
                **overrides,
            }
        )
    )
    log = lake / "mirror.log"
    connection.execute("CREATE TABLE churn (id integer PRIMARY KEY, v integer NOT NULL)")
    rounds = 12
    kills = {2: 0.0, 4: rng.uniform(0.3, 1.0), 6: rng.uniform(1.0, 2.0)}  # round -> delay after a batch
    connect_at, postgres_at = 7, 11
    # A clean stop stores the connector's offsets (and Debezium confirms their LSN to the slot); none is
    # stored again until the next clean stop, so the kill -9 at round 7 loses the offsets of rounds 1 to 7.
    connect.stop()
    connect.start()
    stored = offsets_mtime(connect)
    assert stored is not None
    mirror = start_mirror(job_file, log)  # late: everything of the earlier tests is in Kafka already
    try:
        for n in range(1, rounds + 1):
            churn(connection, n)
            if n in kills:
                seen = batches(log)
                deadline = time.monotonic() + 180
                while batches(log) <= seen and time.monotonic() < deadline and mirror.poll() is None:
                    time.sleep(0.1)
                assert mirror.poll() is None, log.read_text()[-3000:]
                time.sleep(kills[n])
                kill_group(mirror)
                mirror = start_mirror(job_file, log)
            if n == connect_at:
                w.mark(connection, f"round-{n}")
                wait_for(broker, f"{PREFIX}.public.marker", f"round-{n}", timeout=300)
                # The offsets of the clean restart above are the last stored: the kill loses the rounds since.
                assert offsets_mtime(connect) == stored
                connect.kill()
                connect.start()
            if n == postgres_at:
                connection.close()
                server.restart()
                connection = server.connect()
        w.mark(connection, "faulted")
        wait_for(broker, f"{PREFIX}.public.marker", "faulted", timeout=300)
        # the end of the stream in a batch of the running mirror, then one more kill
        seen = batches(log)
        deadline = time.monotonic() + 180
        while batches(log) <= seen + 1 and time.monotonic() < deadline and mirror.poll() is None:
            time.sleep(0.2)
    finally:
        kill_group(mirror)
    run_mirror(spark, config)  # the clean run: what the killed ones left
    # evolving key 2 took ADD COLUMN e DEFAULT 'dflt' without a row event: this mirror, started late, meets
    # its snapshot row and the first rows with the column in one batch, and gives it the default too.
    skip = {"types": [(k,) for k in w.INFINITE_DATES], "wiped": [(1,), (2,), (3,)]}
    check(lake, connection, skip)

    # Debezium published the rounds after its last flush again: the same change (key, LSN) twice.
    changes = Counter(
        (json.dumps(v["payload"]["after"]), v["payload"]["source"]["lsn"])
        for t, v in consumed(broker, {("pg.public.churn", 0): _end(broker, "pg.public.churn")})
        if kind(v) == "change"
    )
    assert max(changes.values()) > 1, "nothing was published twice"
    # Each version once: a key inserted at v 0 and raised by one per round has the versions 0..v.
    history = DeltaTable(str(lake / "lake" / DATABASE / "public" / "churn__history")).to_pyarrow_table()
    versions: dict[int, list[int]] = {}
    for row in history.to_pylist():
        versions.setdefault(row["id"], []).append(row["v"])
    final = dict(connection.execute("SELECT id, v FROM churn").fetchall())
    assert {k: sorted(v) for k, v in versions.items()} == {k: list(range(v + 1)) for k, v in final.items()}
    assert sum(history["_cdc_current"].to_pylist()) == len(final)
    connection.close()


def _end(broker, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "end"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()
