"""The mirror job as users run it: the streaming query, the CLI, restarts, crashes and signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from chispa import assert_df_equality

from tests import helpers
from tests.helpers import WRITERS, canal, cli, cli_env, delta_table, order, run_here, write_jsonl

REPO = Path(__file__).resolve().parent.parent
ES = 1_700_000_000_000


def job_file(root: Path, extra: str = "", writer: str = "delta-rs") -> Path:
    return helpers.job_file(root, extra, name="cli-job", writer=writer)


def delta_rows(path: Path) -> list[dict]:
    return sorted(delta_table(path).to_pylist(), key=lambda r: json.dumps(r, default=str))


def batches(state: Path) -> list[dict]:
    from deltalake import DeltaTable

    return sorted(
        DeltaTable(str(state / "batches")).to_pyarrow_table().to_pylist(), key=lambda r: r["batch_id"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("writer", WRITERS)
def test_available_now_twice_processes_only_new_files(tmp_path, writer):
    """With either writer; with tables.keys, whose check before the second run reads the mirror's columns
    (a delta-spark job's second run once stopped there, asking for jars that were installed)."""
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1), order(2)], es=ES)])
    config = job_file(tmp_path, "tables: {keys: {shop.orders: [id]}}\n", writer)
    first = cli("mirror", "--config", str(config), "--available-now")
    assert first.returncode == 0, first.stderr[-3000:]
    summary_lines = [json.loads(line) for line in first.stderr.splitlines() if line.startswith("{")]
    assert any(line.get("event") == "batch" and line["records_in"] == 1 for line in summary_lines)

    write_jsonl(tmp_path / "landing" / "b.jsonl", [canal("DELETE", [order(1)], es=ES + 1)])
    second = cli("mirror", "--config", str(config), "--available-now")
    assert second.returncode == 0, second.stderr[-3000:]
    assert [r["id"] for r in delta_rows(tmp_path / "lake" / "shop" / "orders")] == [2]
    assert [b["records_in"] for b in batches(tmp_path / "state")] == [1, 1]

    status = cli("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    report = json.loads(status.stdout)
    assert report["tables"][0]["table"] == "shop.orders" and report["tables"][0]["rows"] == 1
    assert "Traceback" not in first.stderr + second.stderr + status.stderr


# The writer's MERGE (argv[2]: delta-rs' merge_guarded, delta-spark's merge_frame, which its merge_guarded
# and its staged upserts go through).
CRASH_SCRIPT = """
import os, sys
from replicator.sinks.delta_rs import DeltaRsWriter
from replicator.sinks.delta_spark import DeltaSparkWriter
spark = sys.argv[2] == "delta-spark"
cls, name = (DeltaSparkWriter, "merge_frame") if spark else (DeltaRsWriter, "merge_guarded")
original = getattr(cls, name)
commits = []
def merge_then_die(self, *args, **kwargs):
    result = original(self, *args, **kwargs)
    commits.append(self.path)
    if len(commits) == 1:
        os._exit(137)  # the process dies between the first and the second table's commit
    return result
setattr(cls, name, merge_then_die)
from replicator.commands.cli import main
sys.exit(main(["mirror", "--config", sys.argv[1], "--available-now"]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("writer", WRITERS)
def test_killed_between_two_tables_commits_then_rerun_applies_once(spark, tmp_path, writer):
    messages = [
        canal("INSERT", [order(1, "a"), order(2, "b")], es=ES),
        canal("INSERT", [order(10, "x")], es=ES + 1, table="customers"),
        canal("UPDATE", [order(1, "a2")], old=[{"name": "a"}], es=ES + 2),
        canal("UPDATE", [order(10, "x2")], old=[{"name": "x"}], es=ES + 3, table="customers"),
        canal("DELETE", [order(2, "b")], es=ES + 4),
    ]
    crashed, reference = tmp_path / "crashed", tmp_path / "reference"
    for root in (crashed, reference):
        write_jsonl(root / "landing" / "m.jsonl", messages)
    job_file(crashed, writer=writer)
    job_file(reference)  # the default writer's mirrors, uninterrupted: what either writer's rerun must equal
    died = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(crashed / "job.yaml"), writer],
        env=cli_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert died.returncode == 137, died.stderr[-3000:]
    applied = [p for p in ("orders", "customers") if (crashed / "lake" / "shop" / p / "_delta_log").exists()]
    assert applied, "the first table was committed before the crash"

    rerun = cli("mirror", "--config", str(crashed / "job.yaml"), "--available-now")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    run_here(spark, reference / "job.yaml")
    for table in ("orders", "customers"):
        assert delta_rows(crashed / "lake" / "shop" / table) == delta_rows(
            reference / "lake" / "shop" / table
        )
    assert [r["id"] for r in delta_rows(crashed / "lake" / "shop" / "orders")] == [1]
    # The batch was replayed with the same id: the table committed before the crash skipped it.
    from deltalake import DeltaTable

    for table in ("orders", "customers"):
        history = DeltaTable(str(crashed / "lake" / "shop" / table)).history()
        writes = [h for h in history if h.get("operation") == "MERGE"]
        assert len(writes) == 1, f"{table} was merged {len(writes)} times"


# New tables whose inserts the fold tasks write (replicator.fold.mirror_files): every table of a batch, and
# the process dies after the first table's files are committed (``die``) or not at all.
FILES_SCRIPT = """
import os, sys
from replicator import engine
from replicator.sinks.delta_rs import DeltaRsWriter
engine.TYPED_ON_EXECUTORS = 1
original = DeltaRsWriter.add_files
def add_then_die(self, *args, **kwargs):
    result = original(self, *args, **kwargs)
    os._exit(137)  # between the first and the second table's commit
if sys.argv[2] == "die":
    DeltaRsWriter.add_files = add_then_die
from replicator.commands.cli import main
sys.exit(main(["mirror", "--config", sys.argv[1], "--available-now"]))
"""


@pytest.mark.slow
def test_killed_between_two_new_tables_file_commits_then_rerun_applies_once(spark, tmp_path, monkeypatch):
    from replicator import engine
    from tests.test_crash import txns

    messages = [
        canal("INSERT", [order(1, "a"), order(2, "b"), order(3, "c")], es=ES),
        canal("INSERT", [order(10, "x"), order(11, "y")], es=ES + 1, table="customers"),
        canal("UPDATE", [order(1, "a2")], old=[{"name": "a"}], es=ES + 2),
        canal("DELETE", [order(2, "b")], es=ES + 3),  # a tombstone, no MERGE
        canal("UPDATE", [order(10, "x2")], old=[{"name": "x"}], es=ES + 4, table="customers"),
    ]
    crashed, reference = tmp_path / "crashed", tmp_path / "reference"
    for root in (crashed, reference):
        write_jsonl(root / "landing" / "m.jsonl", messages)
        job_file(root)
    env = {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"}

    def mirror(root: Path, mode: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", FILES_SCRIPT, str(root / "job.yaml"), mode]
        return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)

    died = mirror(crashed, "die")
    assert died.returncode == 137, died.stderr[-3000:]
    lake = crashed / "lake" / "shop"
    # (tables are applied in parallel: the other table's commit may land before the process dies)
    assert any(txns(lake / t)[("cli-job", 0)] for t in ("orders", "customers")), "no table was committed"
    rerun = mirror(crashed, "run")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    monkeypatch.setattr(engine, "TYPED_ON_EXECUTORS", 1)  # as FILES_SCRIPT sets it
    run_here(spark, reference / "job.yaml")
    for table in ("orders", "customers"):
        assert delta_rows(lake / table) == delta_rows(reference / "lake" / "shop" / table)
        assert txns(lake / table)[("cli-job", 0)] == 1, f"{table}: batch 0 committed more than once"
    assert [(r["id"], r["name"]) for r in delta_rows(lake / "orders")] == [(1, "a2"), (3, "c")]
    # the reference run's tables took the files path: their inserts are in the fold tasks' files
    for table in ("orders", "customers"):
        log = (reference / "lake" / "shop" / table / "_delta_log").glob("*.json")
        paths = [
            json.loads(line)["add"]["path"]
            for f in log
            for line in f.read_text().splitlines()
            if '"add"' in line
        ]
        assert paths and all(p.startswith("part-00000-") for p in paths), paths


@pytest.mark.slow
def test_sigterm_stops_cleanly_after_the_current_batch(tmp_path):
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    config = job_file(tmp_path)
    env = {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(config)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (tmp_path / "state" / "batches" / "_delta_log").exists():
            time.sleep(1)
        assert (tmp_path / "state" / "batches" / "_delta_log").exists(), "no batch within 240 s"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]  # interrupted (docs/operations.md; tests/test_interrupts.py)
    assert "mirror stopped" in err
    assert err.splitlines()[-1].startswith("replicator: interrupted (SIGTERM): stopped after batch 0")
    assert [r["id"] for r in delta_rows(tmp_path / "lake" / "shop" / "orders")] == [1]


def test_dts_avro_job_with_an_unreadable_schema_file_stops_before_any_batch(spark, tmp_path):
    """No schema file is needed (the layout is declared in the project), but a named one must be read."""
    from replicator.commands.runner import MirrorJob
    from replicator.config import load_config

    path = job_file(tmp_path)
    path.write_text(path.read_text().replace("canal-json", "dts-avro, avro_schema: no-such.avsc"))
    config = load_config(path)
    with pytest.raises(ValueError, match=r"source\.avro_schema"):
        MirrorJob(config, spark)
    assert not (tmp_path / "state" / "batches").exists()


@pytest.mark.slow
def test_demo_stream_produces_the_expected_tables(spark, tmp_path):
    import datetime as dt

    from replicator.commands.runner import MirrorJob
    from replicator.config import load_config

    shutil.copytree(REPO / "conf" / "samples", tmp_path / "samples")
    text = (REPO / "conf" / "demo.yaml").read_text().replace("../demo-out", "out")
    (tmp_path / "demo.yaml").write_text(text)
    config = load_config(tmp_path / "demo.yaml")
    assert MirrorJob(config, spark).run(available_now=True) == 0

    def mirror(name: str):
        from deltalake import DeltaTable

        table = DeltaTable(str(tmp_path / "out" / "lakehouse" / name)).to_pyarrow_table()
        table = table.drop_columns(["_cdc_seq", "_cdc_event_time", "_cdc_position"])
        return spark.createDataFrame(table).orderBy(table.column_names[0])

    orders = mirror("shop/orders")
    expected = spark.createDataFrame(
        [
            (
                Decimal(1),
                "王小明",
                Decimal("19.90"),
                "shipped",
                dt.datetime(2023, 11, 14, 22, 13, 20, 123000),
                dt.datetime(2023, 11, 14, 22, 13, 21, 500000),
                1,
                None,
                "update",
            ),
            (
                Decimal(30),
                "Bob",
                Decimal("1234567890.12"),
                "new",
                dt.datetime(2023, 11, 14, 22, 13, 21),
                None,
                1,
                bytearray(b"\xff\x00A"),
                "update",
            ),
        ],
        orders.schema,
    )
    assert_df_equality(orders, expected, ignore_nullable=True)
    asd_copy = mirror("test/asd_copy")
    assert_df_equality(
        asd_copy, spark.createDataFrame([(2223, "insert")], asd_copy.schema), ignore_nullable=True
    )

    from deltalake import DeltaTable

    dead = DeltaTable(str(tmp_path / "out" / "state" / "dead_letters")).to_pyarrow_table().to_pylist()
    errors = sorted(d["error"] for d in dead)
    assert len(errors) == 3
    assert any("not JSON" in e for e in errors)
    assert any("'amount'" in e and "12.345" in e for e in errors)
    assert any("'qty'" in e and "4294967295" in e for e in errors)


def test_a_batch_applied_behind_that_fails_fails_the_run_and_is_applied_first_next_time(spark, tmp_path):
    """trigger.overlap: batch 0 is applied while batch 1 is decoded. Its apply fails (on_error: fail, an
    amount its decimal(10,2) column cannot hold) after Spark committed it: the run fails naming the record,
    and the batch's note stays. The next run (on_error: dead_letter) applies batch 0 first from its note,
    then batch 1; every batch once, the bad row a dead letter."""
    import os

    from replicator.commands.runner import MirrorJob
    from replicator.config import load_config
    from replicator.errors import RecordFailed

    landing = tmp_path / "landing"
    bad = {"id": "2", "name": "b", "amount": "123456789012.00", "ts": "2024-01-01 00:00:00.000"}
    first = [canal("INSERT", [order(1)], es=ES), canal("INSERT", [bad], es=ES + 1)]
    for i, messages in enumerate([first, [canal("INSERT", [order(3)], es=ES + 2)]]):
        path = write_jsonl(landing / f"part-{i}.jsonl", messages)
        os.utime(path, (ES / 1000 + i, ES / 1000 + i))
    extra = "on_error: fail\n"
    path = job_file(tmp_path, extra)
    path.write_text(
        path.read_text().replace("dialect: canal-json}", "dialect: canal-json, max_files_per_trigger: 1}")
    )
    with pytest.raises(RecordFailed, match=r"part-0\.jsonl:2 .*amount"):
        MirrorJob(load_config(path), spark).run(available_now=True)
    assert (tmp_path / "state" / "checkpoint" / "commits" / "0").exists()  # Spark had committed it
    assert [p.name for p in (tmp_path / "state" / "pending").iterdir()] == [f"{0:020d}.json"]

    path.write_text(path.read_text().replace("on_error: fail", "on_error: dead_letter"))
    assert MirrorJob(load_config(path), spark).run(available_now=True) == 0
    assert list((tmp_path / "state" / "pending").iterdir()) == []
    assert [r["id"] for r in delta_rows(tmp_path / "lake" / "shop" / "orders")] == [1, 3]
    assert [(b["batch_id"], b["dead_letters"]) for b in batches(tmp_path / "state")] == [(0, 1), (1, 0)]


@pytest.fixture
def unfreeze():
    """The mirror command freezes the start's objects out of the collector (its process's whole life);
    in this test process they are given back."""
    import gc

    yield
    gc.unfreeze()
    gc.enable()


def test_the_mirror_command_runs_its_job_with_the_collector_on_and_its_start_frozen(
    spark, tmp_path, monkeypatch, unfreeze
):
    import gc

    import replicator.spark
    from replicator.commands import runner
    from replicator.commands.cli import main

    seen = {}

    def run(self, available_now=False, progress_stream=None, checked=False):
        seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count(), now=available_now, checked=checked)
        return 0

    gc.unfreeze()
    monkeypatch.setattr(replicator.spark, "get_spark", lambda config: spark)
    monkeypatch.setattr(runner.MirrorJob, "run", run)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "landing").mkdir()
    assert main(["mirror", "--config", str(job_file(tmp_path)), "--available-now"]) == 0
    # The modules, classes and functions of the start (pyspark's, pyarrow's, the engine's: far more
    # than 10,000 objects) are out of every later collection, and the collector is on for the batches.
    assert seen["enabled"] and seen["now"] and seen["checked"]  # the state was checked before Spark
    assert seen["frozen"] > 10_000


def test_a_mirror_command_whose_start_fails_leaves_the_collector_on(tmp_path, monkeypatch, unfreeze):
    import gc

    import replicator.spark
    from replicator.commands.cli import main

    def fails(config):
        raise RuntimeError("no JVM here")

    monkeypatch.setattr(replicator.spark, "get_spark", fails)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "landing").mkdir()
    with pytest.raises(RuntimeError, match="no JVM here"):
        main(["mirror", "--config", str(job_file(tmp_path))])
    assert gc.isenabled()
