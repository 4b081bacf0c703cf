"""Operator mistakes (issue 34, items 2 and 6-10): links and odd names in the landing folder, a second
launch of a running job, a deleted or truncated state file, folders that overlap or do not exist.

Each goes through the real engine (the session's Spark, delta-rs) or the real command in a process of its
own, and each failed before its fix: the linked file's lines were stored as dead letters, the second launch
killed the first, the deleted log file's batch was lost with exit 0, the truncated file was not named, the
overlapping folders were accepted, X.JSONL was never read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replicator.config import ConfigError, load_config
from tests import helpers
from tests.helpers import Runner, canal, cli, delta_table, job, order, write_jsonl

REPO = Path(__file__).resolve().parents[2]
ES = 1_700_000_000_000


def rows(path: Path) -> list[dict]:
    return sorted(delta_table(path).to_pylist(), key=lambda r: int(r["id"]))


def job_file(root: Path, extra: str = "") -> Path:
    return helpers.job_file(root, extra, name="ops-job")


# ---- 9: folders --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "state", "source", "keys"),
    [
        ("data", "data", "landing", "target.path and state.path are the same folder"),
        ("data", "data/state", "landing", "state.path (.*) is inside target.path"),
        ("data/lake", "data", "landing", "target.path (.*) is inside state.path"),
        ("landing/lake", "state", "landing", "target.path (.*) is inside source.path"),
        ("lake", "landing/state", "landing", "state.path (.*) is inside source.path"),
        ("lake", "state", "state/in", "source.path (.*) is inside state.path"),
        ("lake", "state", "lake", "target.path and source.path are the same folder"),
    ],
)
def test_overlapping_folders_are_refused_at_load_time(tmp_path, target, state, source, keys):
    with pytest.raises(ConfigError, match=keys.replace("(.*)", r"\(.*\)")) as caught:
        job(tmp_path, target={"path": target}, state={"path": state}, source={"path": source})
    assert "\n" not in str(caught.value)


def test_overlapping_folders_through_a_link_are_refused(tmp_path):
    (tmp_path / "lake").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "lake")
    with pytest.raises(ConfigError, match="same folder"):
        job(tmp_path, target={"path": "lake"}, state={"path": "alias"})


def test_cli_refuses_overlapping_folders_and_a_missing_landing_folder_in_one_line(tmp_path):
    nested = tmp_path / "nested"
    nested.mkdir()
    config = job_file(nested).read_text().replace("state: {path: state}", "state: {path: lake/state}")
    (nested / "job.yaml").write_text(config)
    done = cli("status", "--config", str(nested / "job.yaml"), timeout=120)
    assert done.returncode == 2, done.stderr
    assert "state.path" in done.stderr and "target.path" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr

    missing = tmp_path / "missing"
    missing.mkdir()
    done = cli("mirror", "--config", str(job_file(missing)), "--available-now", timeout=120)
    assert done.returncode == 2, done.stderr
    assert "source.path" in done.stderr and str(missing / "landing") in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# ---- 2 and 10: the landing folder's links and names --------------------------------------------------------


def landing_with_links(tmp_path: Path) -> Path:
    """A landing folder with one ordinary file, a file linked to a file outside, a folder linked to a folder
    outside with a message file in it."""
    landing = tmp_path / "landing"
    write_jsonl(landing / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir(parents=True)
    secret.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n")
    (landing / "x.jsonl").symlink_to(secret)
    write_jsonl(tmp_path / "elsewhere" / "b.jsonl", [canal("INSERT", [order(2)], es=ES + 1)])
    (landing / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    return landing


def test_linked_files_and_folders_in_the_landing_folder_are_not_read(spark, tmp_path):
    landing = landing_with_links(tmp_path)
    runner = Runner(spark, job(tmp_path))
    summary = runner.batch(landing)
    assert runner.dead_letters() == []  # the linked file's lines are nowhere
    assert [r["id"] for r in runner.mirror()] == [1]
    assert summary.records_in == 1

    from replicator.sources import scan_landing

    found = scan_landing(landing)
    assert found.counts() == {"links": 2, "hidden": 0, "other": 0}
    assert found.report()["examples"] == {"links": ["linked/", "x.jsonl"]}


def test_links_are_read_when_the_job_file_allows_them(spark, tmp_path):
    landing = landing_with_links(tmp_path)
    runner = Runner(spark, job(tmp_path, source={"follow_symlinks": True}))
    runner.batch(landing)
    assert [r["id"] for r in runner.mirror()] == [1, 2]
    assert len(runner.dead_letters()) == 2  # the linked passwd file's two lines: not messages


def test_skipped_names_are_counted_and_reported_and_upper_case_suffixes_read(spark, tmp_path):
    from replicator.commands.runner import MirrorJob
    from replicator.commands.status import collect_status

    root = tmp_path / "job"
    landing = root / "landing"
    write_jsonl(landing / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    write_jsonl(landing / "X.JSONL", [canal("INSERT", [order(2)], es=ES + 1)])
    write_jsonl(landing / "sub" / "Y.Json", [canal("INSERT", [order(3)], es=ES + 2)])
    write_jsonl(landing / "_x.jsonl", [canal("INSERT", [order(4)], es=ES + 3)])
    write_jsonl(landing / ".x.jsonl", [canal("INSERT", [order(5)], es=ES + 4)])
    write_jsonl(landing / "_tmp" / "c.jsonl", [canal("INSERT", [order(6)], es=ES + 5)])
    (landing / "notes.txt").write_text("not a message file\n")
    config = load_config(job_file(root))
    assert MirrorJob(config, spark).run(available_now=True) == 0
    assert [r["id"] for r in rows(root / "lake" / "shop" / "orders")] == [1, 2, 3]
    skipped = collect_status(config)["skipped_files"]
    assert {k: skipped[k] for k in ("skipped", "hidden", "links", "other")} == {
        "skipped": 4,
        "hidden": 3,
        "links": 0,
        "other": 1,
    }
    assert skipped["examples"] == {"hidden": [".x.jsonl", "_tmp/", "_x.jsonl"], "other": ["notes.txt"]}


# ---- 6: one job runs once ----------------------------------------------------------------------------------

ENV = {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]", "PYTHONPATH": str(REPO)}


def start_mirror(config: Path, log: Path, *extra: str) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "replicator.commands.cli", "mirror", "--config", str(config), *extra],
            cwd=REPO,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def wait_for_batches(log: Path, proc: subprocess.Popen, count: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text()
        if text.count('"event": "batch"') >= count:
            return
        assert proc.poll() is None, text[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"no {count} batches in time\n{log.read_text()[-3000:]}")


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow
def test_a_second_launch_is_refused_and_a_killed_holder_is_taken_over(tmp_path):
    config = job_file(tmp_path)
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1), order(2)], es=ES)])
    first = start_mirror(config, tmp_path / "first.log")
    try:
        wait_for_batches(tmp_path / "first.log", first, 1)
        for args in (["mirror", "--available-now"], ["mirror"], ["dead-letters", "retry"], ["optimize"]):
            second = cli(args[0], "--config", str(config), *args[1:], timeout=120)
            assert second.returncode == 2, (args, second.stderr[-2000:])
            message = second.stderr.strip().splitlines()
            assert len(message) == 1 and "Traceback" not in second.stderr, second.stderr
            assert f"job ops-job is already running (pid {first.pid} on host " in message[0], message
        # the first run goes on: a file landed now is applied
        write_jsonl(tmp_path / "landing" / "b.jsonl", [canal("DELETE", [order(1)], es=ES + 5)])
        wait_for_batches(tmp_path / "first.log", first, 2)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 130, (tmp_path / "first.log").read_text()[-3000:]  # interrupted
    finally:
        kill_group(first)
    assert [r["id"] for r in rows(tmp_path / "lake" / "shop" / "orders")] == [2]

    # A holder killed with SIGKILL (a process that takes the job's lock as `mirror` does, then waits): its
    # lock file stays, naming it, and the next launch takes the lock over.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(config)], cwd=REPO, env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        refused = cli("dead-letters", "retry", "--config", str(config), timeout=120)
        assert refused.returncode == 2 and f"(pid {holder.pid} on host" in refused.stderr, refused.stderr
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert str(holder.pid) in (tmp_path / "state" / "job.lock").read_text()
    write_jsonl(tmp_path / "landing" / "c.jsonl", [canal("INSERT", [order(3)], es=ES + 9)])
    after = cli("mirror", "--config", str(config), "--available-now")
    assert after.returncode == 0, after.stderr[-3000:]
    assert [r["id"] for r in rows(tmp_path / "lake" / "shop" / "orders")] == [2, 3]


HOLDER = """
import sys, time
from replicator.commands.cli import _hold_lock
from replicator.config import load_config

_hold_lock(load_config(sys.argv[1]), "mirror")
print("held", flush=True)
time.sleep(600)
"""


# ---- 7: a mirror that lost its newest commit ---------------------------------------------------------------


def newest_log(table: Path) -> Path:
    return max((table / "_delta_log").glob("*.json"), key=lambda p: int(p.stem))


def two_batches(spark, tmp_path: Path, vectors: bool = False) -> Runner:
    runner = Runner(spark, job(tmp_path, target={"deletion_vectors": vectors}))
    runner.messages(
        tmp_path / "in", [canal("INSERT", [order(i, amount=f"{i}.00") for i in (1, 2, 3)], es=ES)]
    )
    runner.messages(
        tmp_path / "in",
        [
            canal("DELETE", [order(2, amount="2.00")], es=ES + 1),
            canal("UPDATE", [order(1, amount="9.99")], old=[{"amount": "1.00"}], es=ES + 2),
        ],
    )
    return runner


def test_a_mirror_whose_newest_log_file_was_deleted_is_found_at_start_and_in_a_batch(spark, tmp_path):
    runner = two_batches(spark, tmp_path)
    mirror = Path(runner.config.target.path) / "shop" / "orders"
    newest_log(mirror).unlink()  # batch 1's MERGE: the delete of 2 and the update of 1 are gone
    assert [r["id"] for r in runner.mirror()] == [1, 2, 3]

    # a run that goes on stops at the table's next batch, writing nothing to it
    with pytest.raises(Exception, match=r"mirror shop\.orders \(.*\) is behind: .* holds batch 0 .* batch 1"):
        runner.messages(tmp_path / "in", [canal("INSERT", [order(4)], es=ES + 3)])
    assert [r["id"] for r in runner.mirror()] == [1, 2, 3]

    from replicator.commands.preflight import check_state
    from replicator.commands.status import collect_status
    from replicator.errors import StateDamaged

    with pytest.raises(StateDamaged, match="is behind"):  # the next run stops before its first batch
        check_state(runner.config)
    status = collect_status(runner.config)
    assert "is behind" in status["tables"][0]["behind"]


@pytest.mark.parametrize("vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_repair_rebuilds_a_mirror_that_lost_its_newest_commit_from_the_change_log(spark, tmp_path, vectors):
    from replicator.commands.preflight import check_state
    from replicator.commands.repair import repair

    runner = two_batches(spark, tmp_path, vectors)
    mirror = Path(runner.config.target.path) / "shop" / "orders"
    expected = runner.mirror()
    assert [(r["id"], str(r["amount"])) for r in expected] == [(1, "9.99"), (3, "3.00")]
    newest_log(mirror).unlink()

    assert [(d.table, d.rows, d.batch) for d in repair(runner.config, "shop.orders")] == [
        ("shop.orders", 2, 1)
    ]
    assert runner.mirror() == expected
    check_state(runner.config)  # no longer behind
    runner.messages(tmp_path / "in", [canal("INSERT", [order(2, amount="5.00")], es=ES + 3)])
    assert [(r["id"], str(r["amount"])) for r in runner.mirror()] == [(1, "9.99"), (2, "5.00"), (3, "3.00")]


# ---- 8: truncated files ------------------------------------------------------------------------------------


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_checkpoint_file_is_named(spark, tmp_path):
    from replicator.commands.runner import MirrorJob
    from replicator.errors import StateDamaged

    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    config = load_config(job_file(tmp_path))
    assert MirrorJob(config, spark).run(available_now=True) == 0
    offsets = tmp_path / "state" / "checkpoint" / "offsets"
    damaged = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    truncate(damaged)
    with pytest.raises(
        StateDamaged, match=f"damaged checkpoint file {damaged}: .*Recovering from damaged state"
    ):
        MirrorJob(config, spark).run(available_now=True)


@pytest.mark.parametrize("table", ["lake/shop/orders", "state/batches", "state/tables"])
def test_a_truncated_delta_log_file_is_named(spark, tmp_path, table):
    from replicator.commands.preflight import check_state
    from replicator.errors import StateDamaged

    runner = two_batches(spark, tmp_path)
    damaged = newest_log(tmp_path / table)
    truncate(damaged)
    with pytest.raises(
        StateDamaged, match=f"damaged Delta log file {damaged} .*Recovering from damaged state"
    ):
        check_state(runner.config)


def test_the_mirror_command_names_a_damaged_file_in_one_line_before_spark_starts(spark, tmp_path):
    two_batches(spark, tmp_path)
    (tmp_path / "landing").mkdir()
    config = job_file(tmp_path)
    damaged = newest_log(tmp_path / "lake" / "shop" / "orders")
    truncate(damaged)
    done = cli("mirror", "--config", str(config), "--available-now", timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(damaged) in lines[0], done.stderr[-3000:]


def test_repair_finds_a_mirror_whose_name_is_encoded(spark, tmp_path):
    """A table whose name maps to an escaped folder (replicator.paths): repair reads replay's copy under
    the same encoded folder and overwrites the registry's mirror (raw names found nothing: checked)."""
    from replicator.commands.repair import repair
    from replicator.paths import component

    name, folder = "order lines", component("order lines")
    assert folder != name
    runner = Runner(spark, job(tmp_path))
    runner.messages(tmp_path / "in", [canal("INSERT", [order(1), order(2)], es=ES, table=name)])
    runner.messages(tmp_path / "in", [canal("DELETE", [order(2)], es=ES + 1, table=name)])
    expected = runner.mirror(table=folder)
    newest_log(Path(runner.config.target.path) / "shop" / folder).unlink()
    assert [(d.table, d.rows, d.batch) for d in repair(runner.config, f"shop.{name}")] == [
        (f"shop.{name}", 1, 1)
    ]
    assert runner.mirror(table=folder) == expected
