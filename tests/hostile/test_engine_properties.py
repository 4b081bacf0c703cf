"""Nothing a producer sends stops the job (issue 48, "Done when"): random streams through the whole engine.

Each example draws a few tables with names a real source may have (letter case, other scripts, dots,
spaces, the engine's own ``_cdc_`` names), columns the same way (``v`` beside ``V``, ``_cdc_op`` as a source
column, wide rows), and a sequence of canal-json messages over them: inserts, updates, deletes, ADD COLUMN,
case-only RENAME COLUMN, TRUNCATE — and, between them, messages no source would send: broken JSON, DDL texts
that nest or repeat past the job's limits, a forged RENAME TABLE onto a live table, a row claiming more
columns than the limit. The messages go through the real engine (Spark, Delta) in a few micro-batches, then
through a new engine on the same state (a restart). Every example asserts:

- no batch raises (a job never exits non-zero on message content), and the restart goes on;
- every record is accounted for: applied, filtered or a dead letter, and every hostile record is a dead
  letter;
- every table equals its model (:class:`Model`, plain Python), read back by source column names.

10 examples in CI; many under ``make soak`` (``HYPOTHESIS_PROFILE=soak``).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.columns import source_name
from tests.helpers import Runner, canal, ddl, job, write_jsonl

SOAK = settings._current_profile == "soak"
EXAMPLES = 200 if SOAK else 10
ES = 1_700_000_000_000
DATABASE = "shop"
KEY = "id"

# Names a source can have. Tables: distinct without case (a mirror's folder keeps the case, but file systems
# that ignore it exist: the paths' own tests cover case-only table names). Columns: any of these at once.
TABLE_NAMES = ["orders", "Orders2", "表_订单", "a.b c", "_cdc_t", "x" * 120]
COLUMN_NAMES = ["v", "V", "_cdc_op", "_CDC_SEQ", "_cdc_current", "名前", "a b", "Ü", "ü", "c~1", "C~1"]
VALUES = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8),
    st.sampled_from(["\u2028", "x\u2029y", "\x0b", "0x10", "-0", " 1 "]),
)


@dataclass
class Model:
    """One source table: its columns (source names, in order) and rows by key (values as source text)."""

    name: str
    columns: list[str]
    rows: dict[int, dict[str, str | None]] = field(default_factory=dict)


@dataclass
class Stream:
    """The lines to deliver (one per record), how many of them are hostile, and the final tables."""

    lines: list[str]
    hostile: int
    tables: dict[str, Model]


def _types(columns: list[str]) -> dict[str, str]:
    return {c: ("int(11)" if c == KEY else "varchar(64)") for c in columns}


@st.composite
def streams(draw: st.DrawFn, max_steps: int = 14) -> Stream:
    es = itertools.count(ES, 7)
    names = draw(st.lists(st.sampled_from(TABLE_NAMES), min_size=1, max_size=3, unique=True))
    tables = {
        n: Model(n, [KEY, *draw(st.lists(st.sampled_from(COLUMN_NAMES), max_size=5, unique=True))])
        for n in names
    }
    lines: list[str] = []
    hostile = 0
    created: set[str] = set()  # tables the stream has written to (a live mirror, whatever its rows)
    keys = itertools.count(1)

    def row(model: Model, key: int) -> dict[str, str | None]:
        image = {c: draw(VALUES) for c in model.columns}
        image[KEY] = str(key)
        return image

    def message(kind: str, model: Model, rows: list[dict[str, Any]], **extra: Any) -> str:
        types = _types(model.columns)
        body = canal(kind, rows, es=next(es), table=model.name, database=DATABASE, types=types, pk=[KEY])
        return json.dumps({**body, **extra}, ensure_ascii=False)

    def statement(model: Model, sql: str, kind: str = "ALTER") -> str:
        return json.dumps(
            ddl(kind, sql, es=next(es), table=model.name, database=DATABASE), ensure_ascii=False
        )

    for _ in range(draw(st.integers(1, max_steps))):
        model = tables[draw(st.sampled_from(names))]
        step = draw(
            st.sampled_from(
                ["insert", "insert", "update", "delete", "add", "rename", "truncate", "wide", "hostile"]
            )
        )
        quoted = f"`{DATABASE}`.`{model.name}`"
        if step == "insert" or (step in ("update", "delete") and not model.rows):
            key = next(keys)
            image = row(model, key)
            model.rows[key] = image
            created.add(model.name)
            lines.append(message("INSERT", model, [image]))
        elif step == "update":
            key = draw(st.sampled_from(sorted(model.rows)))
            old = model.rows[key]
            image = row(model, key)
            model.rows[key] = image
            changed = {c: old[c] for c in model.columns if old[c] != image[c]}
            lines.append(message("UPDATE", model, [image], old=[changed]))
        elif step == "delete":
            key = draw(st.sampled_from(sorted(model.rows)))
            lines.append(message("DELETE", model, [model.rows.pop(key)]))
        elif step == "add":
            free = [c for c in COLUMN_NAMES if c not in model.columns]
            if not free:
                continue
            column = draw(st.sampled_from(free))
            escaped = column.replace("`", "``")
            lines.append(statement(model, f"ALTER TABLE {quoted} ADD COLUMN `{escaped}` varchar(64)"))
            model.columns.append(column)
            for image in model.rows.values():
                image[column] = None
        elif step == "rename":
            # A case-only rename (MySQL: `v` -> `V`), of a data column or of the key.
            column = draw(st.sampled_from(model.columns))
            new = column.swapcase()
            if new == column or new in model.columns or column == KEY:
                continue
            lines.append(statement(model, f"ALTER TABLE {quoted} RENAME COLUMN `{column}` TO `{new}`"))
            model.columns[model.columns.index(column)] = new
            for image in model.rows.values():
                image[new] = image.pop(column)
        elif step == "truncate":
            lines.append(statement(model, f"TRUNCATE TABLE {quoted}", kind="TRUNCATE"))
            model.rows.clear()
        elif step == "wide":
            # A row claiming more columns than the job's limit (limits.columns): a dead letter, not a stall.
            hostile += 1
            wide = {f"c{i}": "x" for i in range(20_001)}
            lines.append(
                json.dumps(
                    canal(
                        "INSERT", [{KEY: "1", **wide}], es=next(es), table="wide", types=_types([KEY, *wide])
                    )
                )
            )
        else:
            hostile += 1
            lines.append(
                draw(
                    st.sampled_from(
                        [
                            '{"data": [',  # truncated JSON
                            "[" * 5000 + "]" * 5000,  # nesting past any parser's recursion
                            statement(
                                model,
                                f"ALTER TABLE {quoted} ADD COLUMN d int DEFAULT " + "(" * 60 + "1" + ")" * 60,
                            ),
                            statement(
                                model,
                                f"ALTER TABLE {quoted} "
                                + ", ".join(f"ADD COLUMN k{i} int" for i in range(20_000)),
                            ),
                        ]
                        + [
                            # A forged RENAME TABLE onto another live table (MySQL refuses it).
                            statement(
                                model,
                                f"RENAME TABLE {quoted} TO `{DATABASE}`.`{other}`",
                                kind="RENAME",
                            )
                            for other in sorted(created)
                            if other != model.name and model.name in created
                        ]
                    )
                )
            )
    return Stream(lines, hostile, tables)


def mirror(root: Path, model: Model) -> dict[int, dict[str, str | None]] | None:
    """The mirror of ``model`` by source column names (None: no mirror), values as text."""
    from deltalake import DeltaTable

    from replicator.paths import table_path
    from replicator.sinks.delta_rs import read_table

    path = table_path(root, (DATABASE, None, model.name))
    if not DeltaTable.is_deltatable(str(path)):
        return None
    table = DeltaTable(str(path))
    fields = [f for f in table.schema().to_arrow() if not f.name.startswith("_cdc_")]
    data = read_table(table)
    rows = {}
    for record in data.to_pylist():
        image = {source_name(f): record[f.name] for f in fields}
        rows[int(image[KEY])] = {c: (None if v is None else str(v)) for c, v in image.items()}
    return rows


@pytest.mark.slow
@pytest.mark.timeout(1800)
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=streams(), cuts=st.lists(st.integers(0, 40), max_size=3))
def test_no_message_stops_the_job_and_every_table_equals_its_model(spark, tmp_path_factory, stream, cuts):
    root = tmp_path_factory.mktemp("engine")
    config = job(root, schema_evolution="evolve", limits={"columns": 10_000}, changelog={"enabled": False})
    # A few micro-batches, then a restart (a new engine on the same state) for the rest.
    bounds = sorted({min(c, len(stream.lines)) for c in cuts} | {0, len(stream.lines)})
    batches = [stream.lines[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    restart = len(batches) // 2
    summaries = []
    runner = Runner(spark, config)
    for i, lines in enumerate(batches):
        if i == restart and i:
            runner = Runner(spark, config)
            runner.batch_id = i
        folder = write_jsonl(root / f"in-{i}" / "m.jsonl", lines).parent
        summaries.append(runner.batch(folder))  # raises: a message stopped the job

    # docs/operations.md "Accounting": every record and every decoded event has an outcome (a record that
    # does not decode is one dead letter and no event).
    assert sum(s.records_in for s in summaries) == len(stream.lines)
    for s in summaries:
        outcomes = s.applied + s.filtered + s.dead_letters
        assert outcomes >= s.records_in and outcomes >= s.events, vars(s)
    assert sum(s.dead_letters for s in summaries) >= stream.hostile
    target = Path(config.target.path)
    for model in stream.tables.values():
        got = mirror(target, model)
        if got is None:
            assert not model.rows, model.name
            continue
        want = {k: {c: r.get(c) for c in model.columns} for k, r in model.rows.items()}
        assert {k: {c: r.get(c) for c in model.columns} for k, r in got.items()} == want, model.name
