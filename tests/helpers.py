"""Shared test builders: canal-json messages, job files, batches through the real engine."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from replicator.config import JobConfig, parse_config

# Both mirror writers, for tests parametrized over them (the delta-spark cases carry the delta_spark mark).
WRITERS = ["delta-rs", pytest.param("delta-spark", marks=pytest.mark.delta_spark)]

ORDER_TYPES = {"id": "int(11)", "name": "varchar(64)", "amount": "decimal(10,2)", "ts": "datetime(3)"}
_ids = itertools.count(1)


def canal(
    type_: str,
    rows: list[dict[str, Any]],
    *,
    es: int,
    id_: int | None = None,
    old: list[dict[str, Any]] | None = None,
    table: str = "orders",
    database: str = "shop",
    types: dict[str, str] | None = None,
    pk: list[str] | None = None,
) -> dict[str, Any]:
    """A canal-json FlatMessage (canal «Data Type» shape)."""
    types = types or ORDER_TYPES
    return {
        "data": rows,
        "database": database,
        "es": es,
        "id": next(_ids) if id_ is None else id_,
        "isDdl": False,
        "mysqlType": types,
        "old": old,
        "pkNames": pk or ["id"],
        "sql": "",
        "sqlType": dict.fromkeys(types, 12),
        "table": table,
        "ts": es + 100,
        "type": type_,
    }


def ddl(kind: str, sql: str, *, es: int, table: str = "orders", database: str = "shop") -> dict[str, Any]:
    return {
        "data": None,
        "database": database,
        "es": es,
        "id": next(_ids),
        "isDdl": True,
        "mysqlType": None,
        "old": None,
        "pkNames": None,
        "sql": sql,
        "sqlType": None,
        "table": table,
        "ts": es + 100,
        "type": kind,
    }


def order(
    i: int, name: str = "x", amount: str = "1.00", ts: str = "2024-01-01 00:00:00.000"
) -> dict[str, Any]:
    return {"id": str(i), "name": name, "amount": amount, "ts": ts}


def write_jsonl(path: Path, messages: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for m in messages:
            f.write((m if isinstance(m, str) else json.dumps(m, ensure_ascii=False)) + "\n")
    return path


def job(tmp_path: Path, **overrides: Any) -> JobConfig:
    data: dict[str, Any] = {
        "name": "test-job",
        "source": {"type": "files", "path": "landing", "dialect": "canal-json"},
        "target": {"path": "lake"},
        "state": {"path": "state"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_config(data, "test", tmp_path)


class Runner:
    """Feeds folders of files through the real engine, one micro-batch per call."""

    def __init__(self, spark, config: JobConfig) -> None:
        from replicator.engine import Engine

        self.spark = spark
        self.config = config
        self.engine = Engine(config)
        self.batch_id = 0

    def batch(self, folder: Path, batch_id: int | None = None):
        """The folder's files as one micro-batch, read by Spark's binaryFile source as the stream does."""
        from replicator.sources import FILE_GLOB, binary_file_schema

        bid = self.batch_id if batch_id is None else batch_id
        frame = (
            self.spark.read.format("binaryFile")
            .schema(binary_file_schema())
            .option("pathGlobFilter", FILE_GLOB)
            .option("recursiveFileLookup", "true")
            .load(str(folder))
        )
        summary = self.engine.process(frame, bid)
        self.batch_id = max(self.batch_id, bid + 1)
        return summary

    def messages(self, tmp: Path, messages: list[Any], batch_id: int | None = None):
        folder = tmp / f"batch-{self.batch_id if batch_id is None else batch_id}-{next(_ids)}"
        write_jsonl(folder / "m.jsonl", messages)
        return self.batch(folder, batch_id)

    def mirror(
        self, database: str = "shop", table: str = "orders", cdc: bool = False
    ) -> list[dict[str, Any]]:
        data = delta_table(Path(self.config.target.path) / database / table, cdc)
        key = data.column_names[0]
        return data.take(pc.sort_indices(data, [(key, "ascending")])).to_pylist()

    def dead_letters(self) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        path = Path(self.config.state.path) / "dead_letters"
        if not DeltaTable.is_deltatable(str(path)):
            return []
        return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def job_file(
    root: Path,
    extra: str = "",
    *,
    name: str = "cli-job",
    trigger: str | None = "1 second",
    writer: str = "delta-rs",
    dialect: str = "canal-json",
) -> Path:
    """``root/job.yaml`` for the ``replicator`` command: ``dialect`` files from ``landing`` into ``lake``
    (through ``writer``), state in ``state``, a ``trigger`` interval (None: the default), then the
    ``extra`` YAML lines."""
    lines = [
        f"name: {name}",
        f"source: {{type: files, path: landing, dialect: {dialect}}}",
        f"target: {{path: lake, writer: {writer}}}",
        "state: {path: state}",
        *([f"trigger: {{interval: {trigger}}}"] if trigger else []),
    ]
    path = root / "job.yaml"
    path.write_text("\n" + "\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


def cli_env() -> dict[str, str]:
    """The environment of a ``replicator`` command the tests start: Spark on 2 cores, and the jars its job
    needs as a user's shell gets them (not every jar, which the tests' own session takes: conftest.py)."""
    env = {**os.environ, "REPLICATOR_SPARK_MASTER": "local[2]"}
    env.pop("REPLICATOR_SPARK_JARS", None)
    return env


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """The ``replicator`` command in a process of its own (Spark on 2 cores), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "replicator.commands.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(),
        cwd=Path(__file__).resolve().parent.parent,
    )


def run_here(spark, config: Path) -> None:  # type: ignore[no-untyped-def]
    """The job file's job to the end (``--available-now``) in this process's session: a reference run,
    where the process is not what is tested (a Spark start fewer than the ``replicator`` command)."""
    from replicator.commands.runner import MirrorJob
    from replicator.config import load_config

    assert MirrorJob(load_config(config), spark).run(available_now=True) == 0


def delta_table(path: Path | str, cdc: bool = False) -> pa.Table:
    """A Delta table's rows; ``cdc``: with the engine's ``_cdc_*`` columns."""
    from deltalake import DeltaTable

    from replicator.sinks.delta_rs import read_table

    data = read_table(DeltaTable(str(path)))  # (a delta-spark mirror's deletion vectors applied)
    return data if cdc else data.drop_columns([c for c in data.column_names if c.startswith("_cdc_")])
