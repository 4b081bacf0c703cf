"""The worked example of each source (conf/<dialect>.yaml on conf/examples/<dialect>, docs/how-to/*.md):
each job file, run as a user copies it, mirrors its messages exactly, with no dead letter."""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from replicator.config import load_config
from tests.helpers import Runner

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("dialect", ["canal-json", "drs-json", "debezium"])
def test_worked_example_job_mirrors_its_messages(spark, tmp_path, dialect):
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf" / "examples" / dialect, conf / "examples" / dialect)
    text = (REPO / "conf" / f"{dialect}.yaml").read_text(encoding="utf-8")
    (conf / "job.yaml").write_text(text, encoding="utf-8")
    config = load_config(conf / "job.yaml")
    assert config.source.dialect == dialect
    runner = Runner(spark, config)
    summary = runner.batch(conf / "examples" / dialect)
    assert summary.dead_letters == 0
    rows = runner.mirror("shop", "orders")
    assert [(r["id"], r["amount"], r["status"]) for r in rows] == [(1, Decimal("19.90"), "paid")]
    assert (tmp_path / "examples-out" / dialect / "lake" / "shop" / "orders").is_dir()
