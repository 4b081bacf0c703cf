"""Mirrors, state and a landing folder on a real S3-compatible server (SeaweedFS: the session's ``s3``
fixture; ``make test-s3``). No mock stands in for the store: every request below is an HTTP request to it.

The CLI runs with target, state and the files source all under ``s3://lake/<test>/``; the commits' put-if-
absent and the job's lease are exercised against the server's own conditional PUTs."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
import uuid

import pyarrow as pa
import pytest

from replicator.catalog import same_location
from replicator.sinks.base import Txn
from replicator.storage import ObjectPath
from tests.helpers import canal, cli, ddl, delta_table, order

pytestmark = [pytest.mark.s3, pytest.mark.slow]

ES = 1_700_000_000_000


@pytest.fixture
def prefix(s3) -> ObjectPath:
    """A prefix of this test's own in the server's bucket."""
    return ObjectPath(f"s3://{s3.bucket}/{uuid.uuid4().hex[:12]}")


def put_messages(folder: ObjectPath, name: str, messages: list) -> None:
    (folder / name).write_text("".join(json.dumps(m) + "\n" for m in messages))


def job_yaml(tmp_path, prefix: ObjectPath, name: str = "s3-job", extra: str = ""):
    path = tmp_path / "job.yaml"
    path.write_text(
        f"name: {name}\n"
        f"source: {{type: files, path: {prefix}/landing, dialect: canal-json}}\n"
        f"target: {{path: {prefix}/lake}}\n"
        f"state: {{path: {prefix}/state}}\n" + extra,
        encoding="utf-8",
    )
    return path


def rows(path: ObjectPath) -> list[dict]:
    data = delta_table(str(path))
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def test_mirror_status_show_and_replay_with_everything_on_s3(tmp_path, prefix):
    landing = prefix / "landing"
    put_messages(landing, "0001.jsonl", [canal("INSERT", [order(1, "a"), order(2, "b")], es=ES)])
    job = job_yaml(tmp_path, prefix)

    done = cli("mirror", "--config", str(job), "--available-now")
    assert done.returncode == 0, done.stderr[-3000:]
    mirror = prefix / "lake" / "shop" / "orders"
    assert [(r["id"], r["name"]) for r in rows(mirror)] == [(1, "a"), (2, "b")]
    assert not (tmp_path / "s3:").exists()  # nothing local in the job's folder
    assert (prefix / "state" / "checkpoint" / "commits" / "0").is_file()  # Spark's checkpoint via s3a

    put_messages(
        landing,
        "0002.jsonl",
        [
            canal("UPDATE", [order(1, "z")], old=[{"name": "a"}], es=ES + 1000),
            canal("DELETE", [order(2)], es=ES + 2000),
        ],
    )
    done = cli("mirror", "--config", str(job), "--available-now")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(r["id"], r["name"]) for r in rows(mirror)] == [(1, "z")]
    batches = delta_table(str(prefix / "state" / "batches")).to_pylist()
    assert sorted(b["batch_id"] for b in batches) == [0, 1]  # each batch once

    status = cli("status", "--config", str(job))
    assert status.returncode == 0, status.stderr[-3000:]
    assert status.stdout.splitlines()[0].startswith("job s3-job: 1 table")
    show = cli("show", "--config", str(job))
    assert show.returncode == 0, show.stderr[-3000:]
    assert show.stdout.splitlines()[0].startswith(f"== shop.orders  (1 rows, key id) {mirror}")

    asof = prefix / "asof"
    as_of = dt.datetime.fromtimestamp((ES + 1500) / 1000, dt.UTC).isoformat()
    replayed = cli("replay", "--config", str(job), "--as-of", as_of, "--target-path", str(asof))
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert [(r["id"], r["name"]) for r in rows(asof / "shop" / "orders")] == [(1, "z"), (2, "b")]


@pytest.mark.delta_spark
def test_delta_spark_writer_with_history_and_change_feed_on_s3(tmp_path, prefix):
    """The delta-spark writer (its MERGE through Spark and s3a), a history table and the change data feed,
    with target and state on S3."""
    from deltalake import DeltaTable

    put_messages(prefix / "landing", "0001.jsonl", [canal("INSERT", [order(1, "a"), order(2, "b")], es=ES)])
    time.sleep(1.1)  # one file per batch, in this order (max_files_per_trigger: 1 takes the oldest first)
    put_messages(
        prefix / "landing",
        "0002.jsonl",
        [canal("UPDATE", [order(1, "z")], old=[{"name": "a"}], es=ES + 1000)],
    )
    job = job_yaml(tmp_path, prefix, name="s3-spark", extra="tables: {history: ['shop.*']}\n")
    text = job.read_text().replace("canal-json}", "canal-json, max_files_per_trigger: 1}")
    job.write_text(text.replace("lake}", "lake, writer: delta-spark, change_data_feed: true}"))
    done = cli("mirror", "--config", str(job), "--available-now")
    assert done.returncode == 0, done.stderr[-3000:]
    mirror = prefix / "lake" / "shop" / "orders"
    assert [(r["id"], r["name"]) for r in rows(mirror)] == [(1, "z"), (2, "b")]
    history = delta_table(f"{mirror}__history").to_pylist()
    assert sorted((r["id"], r["name"]) for r in history) == [(1, "a"), (1, "z"), (2, "b")]
    feed = pa.table(DeltaTable(str(mirror)).load_cdf(starting_version=0).read_all()).to_pylist()
    assert {r["_change_type"] for r in feed} >= {"insert", "update_postimage"}


def test_a_second_job_on_one_state_is_refused_by_the_lease(tmp_path, prefix):
    from replicator.commands.joblock import JobLock, Lease
    from replicator.config import load_config
    from replicator.errors import JobRunning

    config = load_config(job_yaml(tmp_path, prefix))
    first = JobLock(config, "mirror").acquire()
    assert isinstance(first, Lease)
    try:
        with pytest.raises(JobRunning, match="already running"):
            JobLock(config, "optimize").acquire()
        held = json.loads((prefix / "state" / "job.lease").read_text())
        assert held["command"] == "mirror" and held["owner"] == first.owner
    finally:
        first.release()
    assert not (prefix / "state" / "job.lease").exists()
    JobLock(config, "mirror").acquire().release()  # free again


def test_an_expired_lease_of_a_dead_job_is_taken_over_once(tmp_path, prefix):
    from replicator.commands.joblock import Lease
    from replicator.config import load_config
    from replicator.errors import JobRunning

    config = load_config(job_yaml(tmp_path, prefix))
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).isoformat()
    (prefix / "state" / "job.lease").write_text(json.dumps({"owner": "dead", "pid": 1, "expires": past}))
    # Two launches race for the expired lease: the conditional PUT lets exactly one win.
    results: list[object] = []

    def launch() -> None:
        try:
            results.append(Lease(config, "mirror").acquire())
        except JobRunning as exc:
            results.append(exc)

    threads = [threading.Thread(target=launch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if isinstance(r, Lease)]
    assert len(won) == 1, results
    assert json.loads((prefix / "state" / "job.lease").read_text())["owner"] == won[0].owner
    won[0].release()


def test_two_writers_racing_on_one_table_never_lose_or_double_a_commit(prefix):
    """delta-rs commits each version with a put-if-absent: writers that loaded the same version all try to
    write the next one; one wins, each other one sees the conflict and commits after it (appends) or fails
    (a MERGE over the same rows), never overwriting a commit."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    uri = str(prefix / "race")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    write_deltalake(uri, pa.table({"id": [0], "v": ["base"]}, schema=schema))
    stale = [DeltaTable(uri) for _ in range(4)]  # all at version 0
    errors: list[BaseException] = []

    def append(i: int) -> None:
        try:
            write_deltalake(
                stale[i],
                pa.table({"id": [i + 1], "v": [f"w{i}"]}, schema=schema),
                mode="append",
                commit_properties=CommitProperties(app_transactions=[Transaction(f"w{i}", 1)]),
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    table = DeltaTable(uri)
    assert table.version() == 4  # four commits after the first, none overwritten
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2, 3, 4]
    assert [table.transaction_version(f"w{i}") for i in range(4)] == [1, 1, 1, 1]

    # Two MERGEs from one stale version that update the same row: the second fails, nothing half-written.
    a, b = DeltaTable(uri), DeltaTable(uri)
    source = pa.table({"id": [0], "v": ["a"]}, schema=schema)
    a.merge(source, "t.id = s.id", source_alias="s", target_alias="t").when_matched_update_all().execute()
    with pytest.raises(CommitFailedError):
        b.merge(
            pa.table({"id": [0], "v": ["b"]}, schema=schema),
            "t.id = s.id",
            source_alias="s",
            target_alias="t",
        ).when_matched_update_all().execute()
    final = DeltaTable(uri)
    assert final.version() == 5
    assert sorted(final.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])[0] == {"id": 0, "v": "a"}


def test_a_batch_asks_whether_it_is_in_without_reading_the_log_again(s3, prefix):
    """Each batch asks its tables whether they hold it already (their app transaction). deltalake answers
    that by reading every commit since the last checkpoint, a GET each on an object store: a batch cost
    more requests the longer a table's log grew (up to ~100 GETs a table). The answer is kept per version
    and carried across the job's own commits: a batch's GETs stay the same however long the log; another
    writer's commit between is read."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    from replicator.sinks import writer_factory
    from replicator.state import State

    state = State(prefix / "state", "job", writer_factory("delta-rs"), prefix / "lake")
    table = state.table("probe")

    def batch(batch_id: int) -> None:
        if not state.done("probe", batch_id):
            table.append(pa.table({"batch": [batch_id]}), state.txn(batch_id))
        assert state.done("probe", batch_id)

    def gets(batches: range) -> int:
        before = s3.request_counts()
        for batch_id in batches:
            batch(batch_id)
        return s3.request_counts().get("GET", 0) - before.get("GET", 0)

    early = gets(range(0, 5))
    gets(range(5, 30))
    late = gets(range(30, 35))  # 30 commits after the first: a reread of the log would GET each
    assert late <= early + 2 and late <= 5 * 6, (early, late)
    props = CommitProperties(app_transactions=[Transaction("job", 40)])
    write_deltalake(
        str(prefix / "state" / "probe"), pa.table({"batch": [40]}), mode="append", commit_properties=props
    )
    assert state.done("probe", 40) and not state.done("probe", 41)  # another writer's commit: read
    assert sorted(table.read()["batch"].to_pylist()) == [*range(0, 35), 40]


def test_a_held_mirror_is_updated_once_and_its_merge_never_loses_another_commit(s3, prefix):
    """A table's apply holds its mirror as read at its first use (its app transaction, its schema four
    times: no update of the handle each). A commit another writer made meanwhile is never lost: the
    MERGE is merged after it or fails (delta-rs's conflict check), and the next read sees it."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError

    from replicator.sinks.delta_rs import DeltaRsWriter

    schema = pa.schema(
        [("id", pa.int64()), ("v", pa.string()), ("_cdc_op", pa.string()), ("_cdc_seq", pa.string())]
    )

    def rows(data: list[tuple]) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in data], schema)

    path = str(prefix / "lake" / "t")
    writer = DeltaRsWriter(path)
    writer.create(schema)
    writer.append(rows([(1, "a", "insert", "01")]), Txn("job", 0))
    with writer.held():
        before = s3.request_counts()
        assert writer.applied_version("job") == 0
        for _ in range(4):
            assert writer.schema().names == schema.names
        counts = s3.request_counts()
        assert counts.get("LIST", 0) - before.get("LIST", 0) <= 1, (before, counts)  # one update
        write_deltalake(path, rows([(2, "b", "insert", "02")]), mode="append")  # another writer
        try:
            writer.merge_guarded(
                rows([(3, "c", "insert", "03")]), ["id"], "_cdc_seq", "_cdc_op", Txn("job", 1)
            )
            merged = True
        except CommitFailedError:
            merged = False
        assert writer.applied_version("job") == (1 if merged else 0)  # read up to date after the write
    ids = sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist())
    assert ids == ([1, 2, 3] if merged else [1, 2])


@pytest.mark.timeout(900)
def test_kill_9_mid_batch_then_restart_on_s3_applies_each_batch_once(tmp_path, prefix, monkeypatch):
    """tests/test_crash.py's workload and crash points with target and state on S3: the process SIGKILLs
    itself between two tables' commits of batch 0 and before batch 1's registry is saved; a restart
    finishes the catch-up, the mirrors equal the model and each batch is committed once per table."""
    import os

    from tests import test_crash as crash

    # test_crash's processes get the environment it saw when collected: the server's variables are newer.
    monkeypatch.setattr(crash, "ENV", {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"})
    files, model = crash.workload(seed=0)
    config = crash.write_job(tmp_path, files, overlap=True)  # the landing files stay local
    text = config.read_text().replace("{path: lake}", f"{{path: {prefix}/lake}}")
    text = text.replace("{path: state}", f"{{path: {prefix}/state}}")
    config.write_text(text + "storage: {lease_seconds: 20}\n")
    lease = prefix / "state" / "job.lease"

    def wait_for_expiry() -> None:
        """A killed job's lease stays until it expires; a launch before that is refused (exit 2)."""
        expires = dt.datetime.fromisoformat(json.loads(lease.read_text())["expires"])
        refused = cli("mirror", "--config", str(config), "--available-now", timeout=120)
        assert refused.returncode == 2 and "already running" in refused.stderr, refused.stderr[-2000:]
        time.sleep(max(0.0, (expires - dt.datetime.now(dt.UTC)).total_seconds()) + 0.5)

    crash.crash_at(config, "between@0")  # one table holds batch 0, the other does not
    assert sorted(crash.committed(prefix, t, 0) for t in crash.TABLES) == [False, True]
    wait_for_expiry()
    crash.crash_at(config, "save_tables@1")  # both tables hold batch 1, the registry does not
    assert all(crash.committed(prefix, t, 1) for t in crash.TABLES)
    wait_for_expiry()
    crash.finish(config)
    assert not lease.exists()  # released at the end of the run

    problems = crash.differences(prefix, model)
    assert not problems, "\n".join(problems)
    for table in crash.TABLES:
        counts = crash.txns(prefix / "lake" / "shop" / table)
        twice = {k: n for k, n in counts.items() if n > 1}
        assert not twice, f"{table}: app transactions committed more than once: {twice}"


def test_bootstrap_dead_letters_retry_html_report_repair_and_optimize_on_s3(tmp_path, prefix):
    """The maintenance commands on one job with target, state and landing on S3: a bootstrap from table
    files, two batches (one message without a key becomes a dead letter), ``dead-letters retry`` with the
    key given, ``status --html`` (its lag chart read from the change log under the s3:// state), ``repair``
    of a mirror whose newest commit was deleted, then ``optimize`` with a vacuum."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from tests.test_bootstrap import orders

    snapshot = tmp_path / "snap" / "shop" / "orders"  # (a snapshot is a local folder: bootstrap's argument)
    snapshot.mkdir(parents=True)
    pq.write_table(orders([1, 2, 3]), snapshot / "part-0.parquet")
    keys = "tables: {keys: {shop.orders: [id]}}\ndead_tables: warn\n"  # (shop.items: dead letters only)
    job = job_yaml(tmp_path, prefix, name="s3-ops", extra=keys)
    job.write_text(job.read_text().replace("canal-json}", "canal-json, max_files_per_trigger: 1}"))
    keyed = tmp_path / "keyed.yaml"
    keyed.write_text(job.read_text().replace("[id]}}", "[id], shop.items: [id]}}"), encoding="utf-8")

    def ok(*args: str, config=job) -> list[str]:
        done = cli(*args[:1], "--config", str(config), *args[1:])
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.splitlines()

    booted = ok("bootstrap", "--snapshot", str(tmp_path / "snap"), "--position", str(ES + 50))
    assert any("shop.orders: snapshot_done, 3 snapshot rows" in line for line in booted), booted
    keyless = canal("INSERT", [order(5, "i")], es=ES + 70, table="items")
    keyless["pkNames"] = None
    put_messages(
        prefix / "landing",
        "0001.jsonl",
        [
            canal("UPDATE", [order(1, "new")], old=[{"name": "snap1"}], es=ES + 51),
            canal("INSERT", [order(7, "c")], es=ES + 60, table="customers"),
            keyless,
        ],
    )
    time.sleep(1.1)  # one file per batch, in this order
    put_messages(
        prefix / "landing",
        "0002.jsonl",
        [canal("UPDATE", [order(7, "d")], old=[{"name": "c"}], es=ES + 80, table="customers")],
    )
    ok("mirror", "--available-now")
    lake = prefix / "lake" / "shop"
    assert [(r["id"], r["name"]) for r in rows(lake / "orders")] == [(1, "new"), (2, "snap2"), (3, "snap3")]
    assert [(r["id"], r["name"]) for r in rows(lake / "customers")] == [(7, "d")]
    assert json.loads("\n".join(ok("dead-letters", "--json")))["pending"] == 1

    retried = ok("dead-letters", "retry", config=keyed)  # (its lease released at its exit: repair below)
    assert retried[-1].endswith("1 events applied, 0 filtered, 0 dead letters again"), retried
    assert [(r["id"], r["name"]) for r in rows(lake / "items")] == [(5, "i")]
    assert json.loads("\n".join(ok("dead-letters", "--json", config=keyed)))["pending"] == 0

    report = tmp_path / "report.html"
    assert ok("status", "--html", str(report), config=keyed) == [f"wrote {report}"]
    page = report.read_text(encoding="utf-8")
    assert "<tr><td>shop.customers</td><td>incremental</td><td>1</td>" in page
    assert "no change log" not in page and page.count("<svg") >= 2  # lag and throughput from the change log

    # Repair: the customers mirror loses batch 1's commit (and any after it), as a hand-made `rm` would.
    customers = lake / "customers"
    newest = DeltaTable(str(customers)).version()
    applied = [DeltaTable(str(customers), version=v).transaction_version("s3-ops") for v in range(newest + 1)]
    first = applied.index(1)
    for entry in list((customers / "_delta_log").iterdir()):
        head = entry.name.split(".", 1)[0]
        if head.isdigit() and int(head) >= first:
            entry.unlink()
    assert [r["name"] for r in rows(customers)] == ["c"]
    repaired = ok("repair", "--tables", "shop.customers", config=keyed)
    assert repaired == ["shop.customers: rebuilt from the change log, 1 rows, as of batch 1"]
    assert [(r["id"], r["name"]) for r in rows(customers)] == [(7, "d")]

    optimized = ok("optimize", "--tables", "shop.orders", "--vacuum-hours", "0", config=keyed)
    [line] = optimized
    match = re.fullmatch(r"shop\.orders: (\d+) files rewritten as 1, (\d+) unreferenced files removed", line)
    assert match and int(match[1]) >= 1 and int(match[2]) >= 2, line  # (the files the MERGE replaced too)
    assert [(r["id"], r["name"]) for r in rows(lake / "orders")] == [(1, "new"), (2, "snap2"), (3, "snap3")]
    assert not (prefix / "state" / "job.lease").exists()  # each command released the job's lease
    live = {p.relative_to(lake / "orders") for p, _s, _t in (lake / "orders").walk_files()}
    assert len([p for p in live if p.endswith(".parquet") and not p.startswith("_delta_log")]) == 1


def test_rename_truncate_and_drop_act_only_under_the_prefix(s3, spark, tmp_path, prefix):
    """DDL on mirrors under an S3 prefix, through the engine in this process (landing files local): a
    RENAME moves the mirror's objects to the new name's keys, a TRUNCATE empties it, a DROP deletes its
    objects; a neighbour prefix that shares the text of the name is never touched. (``s3`` before
    ``spark``: Spark's Python workers take the server's variables from the environment it starts in.)"""
    from tests.helpers import Runner, job

    neighbour = ObjectPath(f"{prefix}/lake/shop/clients-kept/data.parquet")
    neighbour.write_text("not a mirror")
    config = job(
        tmp_path,
        target={"path": str(prefix / "lake")},
        state={"path": str(prefix / "state")},
        schema_evolution="evolve",
    )
    runner = Runner(spark, config)
    runner.messages(
        tmp_path,
        [
            canal("INSERT", [order(1, "a"), order(2, "b")], es=ES, table="customers"),
            canal("INSERT", [order(7, "o")], es=ES + 1),
        ],
    )
    lake = prefix / "lake" / "shop"
    runner.messages(
        tmp_path,
        [
            ddl("RENAME", "ALTER TABLE `customers` RENAME TO `clients`", es=ES + 10, table="customers"),
            canal("INSERT", [order(3, "c")], es=ES + 11, table="clients"),
            ddl("TRUNCATE", "TRUNCATE TABLE `orders`", es=ES + 12),
        ],
    )
    assert list((lake / "customers").walk_files()) == []  # (a store may list an empty "folder" a while)
    assert [(r["id"], r["name"]) for r in rows(lake / "clients")] == [(1, "a"), (2, "b"), (3, "c")]
    assert rows(lake / "orders") == []
    runner.messages(tmp_path, [ddl("ERASE", "DROP TABLE `clients`", es=ES + 20, table="clients")])
    assert list((lake / "clients").walk_files()) == []
    assert neighbour.read_text() == "not a mirror"
    assert (prefix / "state" / "tables" / "_delta_log").is_dir()


@pytest.mark.timeout(900)
def test_the_server_restarted_mid_run_fails_or_delays_a_batch_and_the_next_run_completes_it(
    tmp_path, s3, prefix
):
    """A continuous job whose object store goes away (killed) and comes back: the job either waits and
    applies the batch, or fails it and stops; a new run then completes it. Nothing is lost or doubled.
    (Runs last in this file: it restarts the session's server.)"""
    import os
    import signal
    import subprocess
    import sys

    from tests.helpers import write_jsonl

    write_jsonl(tmp_path / "landing" / "0001.jsonl", [canal("INSERT", [order(1, "a")], es=ES)])
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: restart-job\n"
        "source: {type: files, path: landing, dialect: canal-json}\n"
        f"target: {{path: {prefix}/lake}}\n"
        f"state: {{path: {prefix}/state}}\n"
        "trigger: {interval: 1 second}\n"
        "storage: {lease_seconds: 20}\n",
        encoding="utf-8",
    )
    mirror = prefix / "lake" / "shop" / "orders"
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(job)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"},
        start_new_session=True,
    )

    def ids() -> list[int]:
        try:
            return [r["id"] for r in rows(mirror)]
        except Exception:  # not there yet, or the server is down
            return []

    def wait_for(wanted: list[int], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            if ids() == wanted:
                return True
            time.sleep(1)
        return ids() == wanted

    try:
        assert wait_for([1], 240), (tmp_path / "run.log").read_text()[-3000:]
        s3.stop(kill=True)
        write_jsonl(tmp_path / "landing" / "0002.jsonl", [canal("INSERT", [order(2, "b")], es=ES + 1000)])
        time.sleep(8)  # a trigger or more with the store gone
        s3.start()
        applied = wait_for([1, 2], 180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    if not applied:  # the job failed the batch and stopped (or was stopped before it was applied)
        lease = prefix / "state" / "job.lease"
        if lease.exists():
            expires = dt.datetime.fromisoformat(json.loads(lease.read_text())["expires"])
            time.sleep(max(0.0, (expires - dt.datetime.now(dt.UTC)).total_seconds()) + 0.5)
        done = cli("mirror", "--config", str(job), "--available-now")
        assert done.returncode == 0, done.stderr[-3000:]
    assert ids() == [1, 2]
    batches = delta_table(str(prefix / "state" / "batches")).to_pylist()
    assert sorted(b["applied"] for b in batches) == [1, 1]  # each insert applied once


# A second Spark application that knows only the metastore folder and the server (its own s3a settings, no
# AWS variables): it lists the catalog's tables in ``shop`` and reads each by name.
CATALOG_READER = """
import json, sys
from pyspark.sql import SparkSession
metastore, jars, endpoint, access, secret = sys.argv[1:6]
s3a = "org.apache.hadoop.fs.s3a.S3AFileSystem"
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.jars", jars)
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .config("spark.sql.catalogImplementation", "hive")
    .config("spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={metastore}/metastore_db;create=false")
    .config("spark.hadoop.fs.s3.impl", s3a)
    .config("spark.hadoop.fs.s3a.impl", s3a)
    .config("spark.hadoop.fs.s3a.endpoint", endpoint)
    .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
    .config("spark.hadoop.fs.s3a.path.style.access", "true")
    .config("spark.hadoop.fs.s3a.endpoint.region", "us-east-1")
    .config("spark.hadoop.fs.s3a.aws.credentials.provider",
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    .config("spark.hadoop.fs.s3a.access.key", access)
    .config("spark.hadoop.fs.s3a.secret.key", secret)
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
out = {}
for row in spark.sql("SHOW TABLES IN shop").collect():
    found = spark.sql(f"SELECT * FROM shop.{row.tableName}").collect()
    out[row.tableName] = sorted(([r.id, r.name] for r in found), key=lambda r: (r[0], str(r[1])))
    location = spark.sql(f"DESCRIBE DETAIL shop.{row.tableName}").collect()[0].location
    out[row.tableName + ":location"] = location
print("RESULT " + json.dumps(out))
"""


def logged(stderr: str, event: str) -> list[str]:
    """The catalog entries of the command's JSON log lines of ``event``."""
    lines = [json.loads(x) for x in stderr.splitlines() if x.startswith("{") and event in x]
    return [line["entry"] for line in lines if line.get("event") == event]


@pytest.mark.timeout(900)
def test_a_second_spark_application_reads_the_s3_mirrors_through_the_catalog(s3, tmp_path, prefix):
    """``catalog.enabled`` with target and state on S3 and the embedded metastore in a local folder: the
    mirrors are registered with their s3:// locations; another Spark application that knows only that folder
    and the server reads them by name. A RENAME and a DROP in a second run: the catalog follows."""
    import os
    import subprocess
    import sys
    import textwrap

    from replicator import jars
    from replicator.testing.s3server import ACCESS_KEY, SECRET_KEY

    metastore = tmp_path / "metastore"
    history = "tables: {history: ['shop.orders']}\n"
    job = job_yaml(
        tmp_path,
        prefix,
        name="s3-catalog",
        extra=f"catalog: {{enabled: true, metastore: {metastore}}}\n{history}",
    )
    job.write_text(job.read_text().replace("canal-json}", "canal-json, max_files_per_trigger: 1}"))
    customer = {"id": "int(11)", "name": "varchar(64)"}
    put_messages(
        prefix / "landing",
        "0001.jsonl",
        [
            canal("INSERT", [order(1, "a"), order(2, "b"), order(3, "c")], es=ES),
            canal("UPDATE", [order(1, "z")], old=[{"name": "a"}], es=ES + 1),
            canal("DELETE", [order(2, "b")], es=ES + 2),
            canal("INSERT", [{"id": "7", "name": "p"}], es=ES + 3, table="customers", types=customer),
            canal("INSERT", [{"id": "8", "name": "q"}], es=ES + 4, table="customers", types=customer),
            canal(
                "UPDATE",
                [{"id": "8", "name": "r"}],
                old=[{"name": "q"}],
                es=ES + 5,
                table="customers",
                types=customer,
            ),
        ],
    )
    first = cli("--log-level", "INFO", "mirror", "--config", str(job), "--available-now", timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    registered = sorted(logged(first.stderr, "catalog entry registered"))
    assert registered == ["shop.customers", "shop.orders", "shop.orders__history"]

    reader = tmp_path / "reader.py"
    reader.write_text(textwrap.dedent(CATALOG_READER), encoding="utf-8")
    spark_jars = ",".join(str(p) for p in [*jars.require("spark"), *jars.require("s3")])
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # only its own s3a settings

    def read() -> dict:
        done = subprocess.run(
            [sys.executable, str(reader), str(metastore), spark_jars, s3.endpoint, ACCESS_KEY, SECRET_KEY],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))[7:])

    lake = prefix / "lake" / "shop"
    seen = read()
    changes = delta_table(f"{lake / 'orders'}__history").to_pylist()  # read by its path: the reference
    assert {(1, "a"), (1, "z"), (2, "b"), (3, "c")} <= {(r["id"], r["name"]) for r in changes}
    assert seen == {
        "orders": [[1, "z"], [3, "c"]],
        "orders:location": seen["orders:location"],
        "orders__history": sorted(([r["id"], r["name"]] for r in changes), key=lambda r: (r[0], str(r[1]))),
        "orders__history:location": seen["orders__history:location"],
        "customers": [[7, "p"], [8, "r"]],
        "customers:location": seen["customers:location"],
    }
    assert same_location(seen["orders:location"], str(lake / "orders"))
    assert same_location(seen["customers:location"], str(lake / "customers"))
    assert same_location(seen["orders__history:location"], f"{lake / 'orders'}__history")

    put_messages(
        prefix / "landing",
        "0002.jsonl",
        [
            ddl("RENAME", "RENAME TABLE `customers` TO `clients`", es=ES + 10, table="clients"),
            canal("INSERT", [{"id": "9", "name": "s"}], es=ES + 11, table="clients", types=customer),
            ddl("ERASE", "DROP TABLE `orders`", es=ES + 12),
        ],
    )
    second = cli("--log-level", "INFO", "mirror", "--config", str(job), "--available-now", timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    # The restart found the first run's entries in the metastore: only the new name is registered.
    assert logged(second.stderr, "catalog entry registered") == ["shop.clients"]
    dropped = sorted(logged(second.stderr, "catalog entry dropped"))
    assert dropped == ["shop.customers", "shop.orders", "shop.orders__history"]
    assert (lake / "orders" / "_delta_log").is_dir()  # an entry's drop leaves the objects (lenient drop)
    seen = read()
    assert seen == {
        "clients": [[7, "p"], [8, "r"], [9, "s"]],
        "clients:location": seen["clients:location"],
    }
    assert same_location(seen["clients:location"], str(lake / "clients"))
