"""End to end from a real database (issue 31): MariaDB -> Debezium (Kafka Connect) -> Kafka -> replicator,
and every mirror equals ``SELECT *`` of its table (tests/e2e_workload.py).

MariaDB, the broker and Kafka Connect are started by replicator.testing.e2e in a temp folder and stopped by
PID.
Run with ``make e2e`` (marker ``e2e``)."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from replicator.testing.broker import kafka_broker
from replicator.testing.e2e import EXACT, connector_settings, kafka_connect, mariadb
from tests import e2e_workload as w
from tests.helpers import job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mariadb(tmp_path_factory.mktemp("mariadb")) as db:
        yield db


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as b:
        yield b


def wait_for(broker, topic: str, token: str, timeout: float = 120) -> None:
    """Read ``topic`` from the start until a record's value contains ``token``."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"wait-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            record = consumer.poll(0.5)
            if record is not None and not record.error() and token.encode() in (record.value() or b""):
                return
    finally:
        consumer.close()
    raise AssertionError(f"{token} did not arrive on {topic} within {timeout} s")


def dump(broker, prefix: str, path: Path) -> None:
    """Every record of the connector's topics into a JSONL file beside the test's mirror (what Debezium
    published, for a failing check to be read against)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"dump-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([rf"^{prefix}(\..*)?$"])
    quiet = time.monotonic() + 5
    with path.open("w") as out:
        while time.monotonic() < quiet:
            record = consumer.poll(0.5)
            if record is None or record.error():
                continue
            quiet = time.monotonic() + 2
            key, value = record.key(), record.value()
            out.write(
                json.dumps(
                    {
                        "topic": record.topic(),
                        "offset": record.offset(),
                        "key": key and key.decode(),
                        "value": value and value.decode(),
                    }
                )
                + "\n"
            )
    consumer.close()


def mirror_source(broker, prefix: str) -> dict:
    """The job's source: the connector's topics (``prefix`` and ``prefix.*``) from the first offset."""
    return {
        "type": "kafka",
        "dialect": "debezium",
        # The writers' session zone: a DATETIME DEFAULT CURRENT_TIMESTAMP added to rows that exist is the
        # ALTER's time on that wall clock (docs/schema-evolution.md)
        "timezone": "Asia/Kolkata",
        "kafka": {
            "bootstrap_servers": broker.bootstrap_servers,
            "topic_pattern": rf"^{prefix}(\..*)?$",
            "starting_offsets": "earliest",
        },
    }


def mirror_job(root: Path, broker, prefix: str, database: str, **overrides):
    """The job of a connector's topics. The schema-change topic also carries the DDL of the server's other
    databases (the snapshot's DROP/CREATE of every table): ``tables.include`` keeps the captured one."""
    return job(
        root,
        name=f"e2e-{prefix}",
        source=mirror_source(broker, prefix),
        schema_evolution="evolve",
        tables={"include": [f"{database}.*"]},
        **overrides,
    )


def run_mirror(spark, config) -> None:
    from replicator.commands.runner import MirrorJob

    MirrorJob(config, spark).run(available_now=True)


def dead_letters(root: Path) -> list[dict]:
    from deltalake import DeltaTable

    path = root / "state" / "dead_letters"
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist() if DeltaTable.is_deltatable(str(path)) else []


def check(root: Path, connection, database: str, skip: tuple[str, ...] = ("nokey",)) -> None:
    schema = w.tables(connection, database)
    rows = w.snapshot(connection, database)
    problems = w.differences(root / "lake", database, rows, schema, skip)
    assert not problems, "\n".join(problems[:50])


def _capture(connection, server, broker, tmp_path, rng, database, prefix):
    """The workload's tables seeded, the connector started (truncates published, unsigned values exact),
    the stream of changes written, and everything up to the marker in Kafka."""
    w.seed_tables(connection, rng, database)
    settings = connector_settings(
        prefix,
        server,
        broker,
        prefix,
        database,
        **EXACT,
    )
    with kafka_connect(tmp_path / "connect", broker, settings):
        for _ in w.stream(connection, rng, database):
            pass
        w.mark(connection, 1, "done", database)
        wait_for(broker, f"{prefix}.{database}.marker", "done")


def test_mirror_equals_the_database(spark, server, broker, tmp_path):
    database, prefix = "shop", "e2e"
    rng = random.Random(31)
    with server.connect() as connection:
        _capture(connection, server, broker, tmp_path, rng, database, prefix)
        dump(broker, prefix, tmp_path / "topics.jsonl")
        config = mirror_job(tmp_path, broker, prefix, database)
        run_mirror(spark, config)  # started late: the whole backlog in one catch-up
        check(tmp_path, connection, database)
    # RENAME TABLE old_name TO new_name: the rename's tableChanges (the new name's) must not bring the old
    # name back as an empty mirror (issue 53 item 8)
    assert not (tmp_path / "lake" / database / "old_name").exists()
    # The table without a primary key: its rows are dead letters naming the fix (docs/operations.md).
    dead = dead_letters(tmp_path)
    assert dead, "the keyless table's rows should be dead letters"
    assert all(d["table"] == "nokey" and "no primary key known for shop.nokey" in d["error"] for d in dead), (
        dead
    )


REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"}


def start_mirror(job_file: Path, log: Path) -> subprocess.Popen:
    """The continuous mirror in a process group of its own (the Spark JVM dies with it)."""
    with log.open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(job_file)],
            cwd=REPO,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def batches(log: Path) -> int:
    return log.read_text(errors="replace").count('"event": "batch"') if log.exists() else 0


def redelivered(dump_file: Path) -> int:
    """Row changes published more than once: a streamed change (same topic, key, binlog position, row and
    op), or a keyed row read again by a new snapshot (Debezium snapshots again when it lost its offsets)."""
    seen: set[tuple] = set()
    again = 0
    for line in dump_file.read_text().splitlines():
        record = json.loads(line)
        payload = record["value"] and json.loads(record["value"])["payload"]
        if not payload or payload.get("op") not in ("c", "u", "d", "t", "r"):
            continue
        source = payload["source"]
        if payload["op"] == "r":  # snapshot rows all share the snapshot's position
            if record["key"] is None:
                continue
            mark: tuple = (record["topic"], record["key"], "r")
        else:
            mark = (
                record["topic"],
                record["key"],
                source["file"],
                source["pos"],
                source["row"],
                payload["op"],
            )
        again += mark in seen
        seen.add(mark)
    return again


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def test_faults_kill_the_mirror_restart_the_connector_replay(spark, server, broker, tmp_path):
    """kill -9 of the mirror process at seeded moments while the database changes, a kill -9 and restart
    of Kafka Connect (Debezium publishes again what it had not flushed offsets for), then the mirror
    equals the database; ``replay --as-of`` a moment between two transactions equals the database then."""
    import yaml

    from replicator.commands.replay import replay

    database, prefix = "faults", "e2f"
    rng = random.Random(32)
    config = mirror_job(tmp_path, broker, prefix, database, trigger={"interval": "1 second"})
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "name": config.name,
                "source": mirror_source(broker, prefix),
                "target": {"path": "lake"},
                "state": {"path": "state"},
                "schema_evolution": "evolve",
                "tables": {"include": [f"{database}.*"]},
                "trigger": {"interval": "1 second"},
            }
        )
    )
    log = tmp_path / "mirror.log"
    moments = sorted(rng.sample(range(1, 12), 3))  # after which workload steps the mirror is killed
    restart_connect_at = rng.choice([m for m in range(2, 11) if m not in moments])
    as_of_at = 6
    kills = 0
    with server.connect() as connection:
        w.seed_tables(connection, rng, database)
        settings = connector_settings(
            prefix,
            server,
            broker,
            prefix,
            database,
            **EXACT,
        )
        # Offsets flushed only on a clean stop: the kill -9 below loses them, so the restarted connector
        # publishes again what it had published (a new snapshot: DROP/CREATE and every row), which the
        # mirror must absorb.
        worker = {"offset.flush.interval.ms": "600000"}
        with kafka_connect(tmp_path / "connect", broker, settings, worker=worker) as connect:
            mirror = start_mirror(job_file, log)  # after Connect is up: the two JVMs do not start together
            try:
                for n, _ in enumerate(w.stream(connection, rng, database), 1):
                    if n == as_of_at:  # a moment between two transactions, in whole seconds apart
                        time.sleep(1.2)
                        then = dt.datetime.now(dt.UTC)
                        state_then = (w.tables(connection, database), w.snapshot(connection, database))
                        time.sleep(1.2)
                    if n == restart_connect_at:
                        connect.kill()
                        connect.start()
                    if n in moments:
                        seen = batches(log)
                        deadline = time.monotonic() + 120
                        while batches(log) <= seen and time.monotonic() < deadline and mirror.poll() is None:
                            time.sleep(0.2)
                        time.sleep(rng.uniform(0, 1.5))  # inside or between batches
                        kill_group(mirror)
                        kills += 1
                        mirror = start_mirror(job_file, log)
                w.mark(connection, 1, "done", database)
                wait_for(broker, f"{prefix}.{database}.marker", "done")
            finally:
                kill_group(mirror)
        dump(broker, prefix, tmp_path / "topics.jsonl")
        assert kills == len(moments)
        run_mirror(spark, config)  # what the killed runs left
        check(tmp_path, connection, database)
        assert redelivered(tmp_path / "topics.jsonl") > 0, "the connector's restart redelivered nothing"
    replay(config, tmp_path / "replayed", as_of=then.isoformat())
    schema_then, rows_then = state_then
    problems = w.differences(tmp_path / "replayed", database, rows_then, schema_then, ("nokey",))
    assert not problems, "\n".join(problems[:50])


def test_value_modes(spark, server, broker, tmp_path):
    """decimal.handling.mode=string mirrors decimals exactly (typed by column.propagate.source.type);
    binary.handling.mode base64 and hex are dead letters naming the setting, never wrong values; BIGINT
    UNSIGNED values wrapped by the default bigint.unsigned.handling.mode=long into negative longs are stored
    exactly (the column is known unsigned from the propagated source type)."""
    from replicator.dialects.debezium_values import BINARY_AS_TEXT

    database = "modes"
    rng = random.Random(33)
    wrapped = {2, 5}  # ids whose BIGINT UNSIGNED is past 2^63-1
    with server.connect() as connection:
        w.session(connection)
        with connection.cursor() as c:
            c.execute(f"CREATE DATABASE {database}")
            c.execute(f"USE {database}")
            c.execute(
                "CREATE TABLE decimals "
                "(id INT PRIMARY KEY, d38 DECIMAL(38,10), d5 DECIMAL(5,0), u BIGINT UNSIGNED)"
            )
            c.execute("CREATE TABLE blobs (id INT PRIMARY KEY, vb VARBINARY(16), note VARCHAR(10))")
            c.execute("CREATE TABLE marker (id INT PRIMARY KEY, token VARCHAR(40))")

            def decimals(ids):
                w.insert(
                    c,
                    "decimals",
                    [
                        {
                            "id": i,
                            "d38": w.value(rng, "DECIMAL(38,10)"),
                            "d5": w.value(rng, "DECIMAL(5,0)"),
                            "u": 2**64 - i if i in wrapped else rng.randrange(2**63),
                        }
                        for i in ids
                    ],
                )

            decimals(range(1, 4))  # the snapshot's
            w.insert(
                c,
                "blobs",
                [{"id": i, "vb": None if i % 2 else bytes([i, 0, 255]), "note": "s"} for i in range(4)],
            )
            settings = {
                "decimal.handling.mode": "string",
                "binary.handling.mode": "base64",
                "column.propagate.source.type": ".*",
            }
            with kafka_connect(
                tmp_path / "connect",
                broker,
                connector_settings("b64", server, broker, "b64", database, **settings),
            ):
                decimals(range(4, 8))  # streamed
                c.execute("UPDATE blobs SET note = 'u'")
                w.mark(connection, 1, "done", database)
                wait_for(broker, f"b64.{database}.marker", "done")
            hex_settings = {**settings, "binary.handling.mode": "hex"}
            with kafka_connect(
                tmp_path / "connect-hex",
                broker,
                connector_settings("hex", server, broker, "hex", database, **hex_settings),
            ):
                wait_for(broker, f"hex.{database}.marker", "done")  # its snapshot
        rows = w.snapshot(connection, database)
        schema = w.tables(connection, database)
    for prefix in ("b64", "hex"):
        root = tmp_path / prefix
        run_mirror(spark, mirror_job(root, broker, prefix, database))
        dead = dead_letters(root)
        binary = [d for d in dead if d["table"] == "blobs"]
        assert binary and all(BINARY_AS_TEXT in d["error"] for d in binary), binary
        assert not [d for d in dead if d["table"] == "decimals"]
        kept = {
            "decimals": rows["decimals"],
            "blobs": [r for r in rows["blobs"] if r["vb"] is None],
            "marker": rows["marker"],
        }
        problems = w.differences(root / "lake", database, kept, schema)
        assert not problems, "\n".join(problems[:50])
        mirror = w.mirror_rows(root / "lake", database, "decimals")
        assert {type(r["d38"]).__name__ for r in mirror} <= {"Decimal", "NoneType"}  # typed, not text
        assert {r["id"]: int(r["u"]) for r in mirror if r["id"] in wrapped} == {i: 2**64 - i for i in wrapped}


@pytest.mark.s3
@pytest.mark.timeout(900)
def test_mirror_equals_the_database_with_mirrors_and_state_on_s3(s3, server, broker, tmp_path):
    """The same pipeline with target.path and state.path on the S3 server (SeaweedFS, the ``s3`` fixture):
    the mirror command (its own Spark, the checkpoint through s3a, the mirrors through delta-rs) catches up
    on the connector's backlog and every mirror equals ``SELECT *``. Marked ``s3`` too: ``make test-s3``
    runs it, ``make e2e`` leaves it to that tier (its marker expression excludes ``s3``)."""
    import yaml

    from replicator.storage import ObjectPath
    from tests.helpers import cli

    database, prefix = "s3shop", "e2es3"
    root = ObjectPath(f"s3://{s3.bucket}/{uuid.uuid4().hex[:12]}")
    rng = random.Random(52)
    with server.connect() as connection:
        _capture(connection, server, broker, tmp_path, rng, database, prefix)
        job_file = tmp_path / "job.yaml"
        job_file.write_text(
            yaml.safe_dump(
                {
                    "name": f"e2e-{prefix}",
                    "source": mirror_source(broker, prefix),
                    "target": {"path": str(root / "lake")},
                    "state": {"path": str(root / "state")},
                    "schema_evolution": "evolve",
                    "tables": {"include": [f"{database}.*"]},
                    "dead_tables": "warn",  # (the keyless table: dead letters only, checked below)
                }
            ),
            encoding="utf-8",
        )
        done = cli("mirror", "--config", str(job_file), "--available-now", timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        rows, schema = w.snapshot(connection, database), w.tables(connection, database)
        problems = w.differences(root / "lake", database, rows, schema, ("nokey",))
        assert not problems, "\n".join(problems[:50])
    assert not list(tmp_path.glob("s3:*"))  # nothing written to a local folder named after the URI
    assert (root / "state" / "checkpoint" / "commits" / "0").is_file()
    from deltalake import DeltaTable

    dead = DeltaTable(str(root / "state" / "dead_letters")).to_pyarrow_table().to_pylist()
    assert dead and all(d["table"] == "nokey" for d in dead), dead
