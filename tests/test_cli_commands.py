"""The read and maintenance commands through the ``replicator`` command line (its parser, its output), on
a job two real batches made with either writer: ``show``, ``status`` (text), ``dead-letters``,
``optimize``, ``replay`` and ``repair``."""

from __future__ import annotations

import re
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from replicator.config import load_config
from tests.helpers import WRITERS, Runner, canal, cli, delta_table, order

ES = 1_700_000_000_000
JOB = """\
name: cli-commands
source: {{type: files, path: landing, dialect: canal-json}}
target: {{path: lake, writer: {writer}}}
state: {{path: state}}
"""


@pytest.fixture(scope="module", params=WRITERS)
def made(request, spark, tmp_path_factory) -> Path:
    """Batch 0 inserts ids 1 and 2; batch 1 renames 1 to "b" and carries a line that is not JSON. The
    mirror written by each writer (the commands read and rewrite either)."""
    root = tmp_path_factory.mktemp("cli")
    (root / "job.yaml").write_text(JOB.format(writer=request.param), encoding="utf-8")
    runner = Runner(spark, load_config(root / "job.yaml"))
    runner.messages(root, [canal("INSERT", [order(1, "a"), order(2, "c")], es=ES)])
    runner.messages(root, [canal("UPDATE", [order(1, "b")], old=[{"name": "a"}], es=ES + 60_000), "oops"])
    return root


def run(made: Path, *args: str) -> list[str]:
    done = cli(*args[:1], "--config", str(made / "job.yaml"), *args[1:])
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_show_prints_each_mirror_by_key(made):
    lines = run(made, "show")
    assert lines[0] == f"== shop.orders  (2 rows, key id) {made / 'lake' / 'shop' / 'orders'}"
    assert lines[1].split()[:4] == ["id", "name", "amount", "ts"]
    assert [line.split()[:3] for line in lines[2:4]] == [["1", "b", "1.00"], ["2", "c", "1.00"]]


def test_status_prints_tables_and_batches_as_text(made):
    lines = run(made, "status")
    assert lines[0] == "job cli-commands: 1 table, 1 pending dead letter"
    [table] = [line.split() for line in lines if line.startswith("shop.orders")]
    assert table[1:4] == ["incremental", "2", "0"]  # phase, rows, snapshot rows
    batches = lines[lines.index("recent batches:") + 1 :]
    assert [re.sub(r"; [^;]+$", "", b) for b in batches] == [  # without the duration
        "  #0: 1 record in, 2 items = 2 applied + 0 filtered + 0 dead letters",
        "  #1: 2 records in, 2 items = 1 applied + 0 filtered + 1 dead letter"
        " (1 of them undecodable records)",
    ]
    assert any(line.startswith("(undecodable records)") for line in lines)


def test_status_writes_the_html_report(made, tmp_path):
    out = tmp_path / "report.html"
    assert run(made, "status", "--html", str(out)) == [f"wrote {out}"]
    page = out.read_text(encoding="utf-8")
    assert "<tr><td>shop.orders</td><td>incremental</td><td>2</td><td>0</td>" in page  # its mirror's rows
    assert page.count("<svg") == 2  # the lag and throughput charts


def test_dead_letters_groups_by_table_and_error(made):
    lines = run(made, "dead-letters")
    assert lines[0] == "job cli-commands: 1 dead letters pending, 0 retried, 0 discarded"
    assert lines[1].split()[0] == "1" and "(batch 1)" in lines[1]
    assert lines[2].strip() == "error:   not JSON: the record does not parse as a JSON document"
    assert lines[3].strip() == "example: oops"


@pytest.mark.slow
def test_replay_rebuilds_the_mirror_as_of_a_time(made, tmp_path):
    """As of a minute before batch 1's update: ids 1 and 2 as inserted."""
    out = tmp_path / "replayed"
    lines = run(made, "replay", "--as-of", str(ES + 1000), "--target-path", str(out))
    assert lines == [f"replayed 2 events into 1 tables under {out}"]
    assert [(r["id"], r["name"]) for r in delta_table(out / "shop" / "orders").to_pylist()] in (
        [(1, "a"), (2, "c")],
        [(2, "c"), (1, "a")],
    )


def test_optimize_rewrites_the_files_and_keeps_the_rows(made):
    mirror = made / "lake" / "shop" / "orders"
    before = sorted(delta_table(mirror).to_pylist(), key=lambda r: r["id"])
    lines = run(made, "optimize")
    [line] = lines
    match = re.fullmatch(r"shop\.orders: (\d+) files rewritten as (\d+), 0 unreferenced files removed", line)
    assert match and int(match[1]) >= 1 and int(match[2]) == 1, line
    assert DeltaTable(str(mirror)).history(1)[0]["operation"] == "OPTIMIZE"
    assert sorted(delta_table(mirror).to_pylist(), key=lambda r: r["id"]) == before
    assert [r["amount"] for r in before] == [Decimal("1.00")] * 2


@pytest.mark.slow
def test_repair_rebuilds_a_mirror_that_lost_its_newest_commit(made, tmp_path):
    """The mirror's newest log file deleted by hand (a copy of the job): the mirror command refuses to
    start, ``repair`` rebuilds it from the change log with the commit of the batch the registry recorded."""
    job = tmp_path / "job"
    shutil.copytree(made, job)
    mirror = job / "lake" / "shop" / "orders"
    before = sorted(delta_table(mirror).to_pylist(), key=lambda r: r["id"])
    # Batch 1's commit and those after it (an optimize's), as `rm _delta_log/<version>.*` removes them: the
    # JSON file and a delta-spark mirror's <version>.crc; the hidden .<version>.json.crc stays.
    batch_1 = min(v for v in range(DeltaTable(str(mirror)).version() + 1) if applied(mirror, v) == 1)
    for lost in (mirror / "_delta_log").glob("[0-9]*.*"):
        if int(lost.name.split(".")[0]) >= batch_1:
            lost.unlink()
    assert [r["name"] for r in sorted(delta_table(mirror).to_pylist(), key=lambda r: r["id"])] == ["a", "c"]
    lines = run(job, "repair", "--tables", "shop.orders")
    assert lines == ["shop.orders: rebuilt from the change log, 2 rows, as of batch 1"]
    assert sorted(delta_table(mirror).to_pylist(), key=lambda r: r["id"]) == before
    assert applied(mirror) == 1
    assert run(job, "status")[0] == "job cli-commands: 1 table, 1 pending dead letter"


def applied(mirror: Path, version: int | None = None) -> int | None:
    """The job's newest batch in a mirror's log (at ``version``)."""
    return DeltaTable(str(mirror), version=version).transaction_version("cli-commands")
