"""The micro-batch: decode -> resolve keys -> barriers -> fold -> one Arrow collect -> per-table apply.

A batch costs a fixed number of Spark jobs whatever the number of tables: a summary aggregate, the
source types, the barrier events, the folded rows (one ``toArrow``), the change log write, and, only when
there are any, dead letters. Tables are then applied in parallel threads (delta-rs releases the GIL).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.apply import DeadRow, TableApplier, TableBatch, TableResult
from replicator.changelog import Barrier, TableId, assign_segments, fold, table_match, with_keys
from replicator.config import JobConfig
from replicator.dialects.base import DecodeOptions, decode
from replicator.logging import get_logger
from replicator.model import BARRIER_OPS, DML_OPS, parse_seq_text, seq_text, seq_text_sql
from replicator.sinks import writer_factory
from replicator.state import DEAD_LETTER_SCHEMA, BatchSummary, State, TableState, now

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = get_logger("replicator.engine")

CHANGELOG_DROP = ("raw", "error")


class Phases:
    """Wall time per phase of a batch (decode, fold, collect, merge, ...), reported in the batch log."""

    def __init__(self) -> None:
        self.ms: dict[str, int] = {}
        self._t = time.monotonic()

    def lap(self, name: str) -> None:
        t = time.monotonic()
        self.ms[name] = self.ms.get(name, 0) + int((t - self._t) * 1000)
        self._t = t


class RecordFailed(RuntimeError):
    """``on_error: fail``: a record could not be applied; the message names it."""


def table_name(table: TableId) -> str:
    database, schema, name = table
    return ".".join(part for part in (database, schema, name) if part)


class Engine:
    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.writer = writer_factory(config.target.writer)
        self.state = State(config.state.path, config.name, self.writer)
        self.options = DecodeOptions(
            timezone=config.source.timezone,
            zero_dates=config.source.zero_dates,
            avro_schema=config.source.avro_schema,
        )
        self.on_barrier = None
        try:  # schema changes arrive with replicator.schema_changes (DDL issue); record-only without it
            from replicator.schema_changes import barrier_handler

            self.on_barrier = barrier_handler(config)
        except ImportError:
            pass

    def mirror_path(self, table: TableId) -> Path:
        database, schema, name = table
        parts = [database, schema, name] if schema else [database, name]
        return Path(self.config.target.path).joinpath(*parts)

    # ---- the micro-batch ----------------------------------------------------------------------------------
    def process(self, records: DataFrame, batch_id: int) -> BatchSummary:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        started = time.monotonic()
        records = records.withColumn("batch_id", F.lit(batch_id).cast("bigint"))
        decoded = decode(records, self.config.source.dialect, self.options).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            summary = self._process(records, decoded, batch_id)
        finally:
            decoded.unpersist()
        summary.duration_ms = int((time.monotonic() - started) * 1000)
        self.state.record_batch(summary)
        log.info("batch", **{k: v for k, v in summary.__dict__.items()})
        return summary

    def _process(self, records: DataFrame, decoded: DataFrame, batch_id: int) -> BatchSummary:
        from pyspark.sql import functions as F

        summary = BatchSummary(batch_id)
        phases = self.phases = Phases()
        ok = F.col("error").isNull()
        groups = (
            decoded.groupBy("database", "schema", "table", "op", ok.alias("ok"))
            .agg(
                F.count("*").alias("n"),
                F.sum(F.when((F.col("coordinates.index") == 0) & (F.col("coordinates.row") == 0), 1).otherwise(0))
                .alias("records"),
                F.max_by("primary_key", F.size("primary_key")).alias("primary_key"),
            )
            .collect()
        )
        phases.lap("decode+summary")
        summary.records_in = sum(int(g["records"] or 0) for g in groups)
        decode_errors = sum(g["n"] for g in groups if not g["ok"])
        summary.filtered = sum(g["n"] for g in groups if g["ok"] and g["op"] == "filtered")
        if decode_errors:
            dead = self._decode_dead_letters(decoded, batch_id)
            self._fail_on(dead)
            self.state.write_dead_letters(dead, batch_id, ":decode")
            summary.dead_letters += dead.num_rows
            phases.lap("decode_dead_letters")

        registry = self.state.tables()
        phases.lap("registry")
        tables: dict[TableId, list[str]] = {}
        for g in groups:
            if g["ok"] and g["op"] in (*DML_OPS, *BARRIER_OPS) and g["table"] is not None:
                table = (g["database"], g["schema"], g["table"])
                key = list(g["primary_key"] or [])
                if len(key) > len(tables.get(table, [])):
                    tables[table] = key
                else:
                    tables.setdefault(table, key)
        selected, unkeyed, excluded_events = {}, [], 0
        for table, key in tables.items():
            if not self.config.tables.selected(f"{table[0]}.{table[2]}"):
                excluded_events += sum(
                    g["n"] for g in groups if g["ok"] and (g["database"], g["schema"], g["table"]) == table
                )
                continue
            known = registry.get(table)
            key = key or self.config.tables.key_for(f"{table[0]}.{table[2]}") or list(known.primary_key if known else [])
            if key:
                selected[table] = key
            else:
                unkeyed.append(table)
        summary.filtered += excluded_events
        summary.events = sum(g["n"] for g in groups if g["ok"] and g["op"] != "filtered")

        events = decoded.where(ok & F.col("op").isin(*DML_OPS, *BARRIER_OPS)).drop("raw", "error")
        if self.config.changelog.enabled:
            self.state.append_changelog(events.withColumn("batch_id", F.lit(batch_id).cast("bigint")), batch_id)
            phases.lap("changelog")

        in_scope = F.lit(False)
        for table in selected:
            in_scope = in_scope | table_match(table)
        events = with_keys(events.where(in_scope), selected)
        barrier_rows = [r.asDict(recursive=True) for r in events.where(F.col("op").isin(*BARRIER_OPS))
                        .withColumn("seq_text", F.expr(seq_text_sql())).orderBy("seq").collect()]
        barriers = [Barrier((r["database"], r["schema"], r["table"]), tuple(r["seq"])) for r in barrier_rows]
        phases.lap("barriers")
        types = self._source_types(events)
        phases.lap("types")
        folded = fold(assign_segments(events, barriers)).toArrow()
        phases.lap("fold+collect")

        dead_rows: list[DeadRow] = []
        if unkeyed:
            dead_rows += self._unkeyed(decoded, unkeyed)
        results = self._apply_tables(folded, barrier_rows, types, selected, registry, batch_id)
        phases.lap("apply")
        for result in results:
            dead_rows.extend(result.dead)
            if not result.skipped:
                name = table_name(result.table)
                summary.tables[name] = {
                    "inserted": result.merged.inserted, "updated": result.merged.updated,
                    "deleted": result.merged.deleted, "ddl": len(result.ddl), "dead_letters": len(result.dead),
                }
        if dead_rows:
            dead = self._engine_dead_letters(records, dead_rows, batch_id)
            self.state.write_dead_letters(dead, batch_id, ":apply")
            summary.dead_letters += dead.num_rows
        summary.applied = summary.events - excluded_events - len(dead_rows)
        self.state.save_tables([r.state for r in results if r.state is not None], batch_id)
        phases.lap("state")
        summary.phases_ms = phases.ms
        self._fail_on_rows(dead_rows)
        return summary

    # ---- helpers ------------------------------------------------------------------------------------------
    def _source_types(self, events: DataFrame) -> dict[TableId, dict[str, str]]:
        from pyspark.sql import functions as F

        rows = (
            events.where(F.col("op").isin(*DML_OPS))
            .select("database", "schema", "table", "seq", F.posexplode("source_types").alias("pos", "column", "type"))
            .groupBy("database", "schema", "table", "column")
            .agg(F.max_by("type", "seq").alias("type"), F.min(F.struct("seq", "pos")).alias("first"))
            .collect()
        )
        result: dict[TableId, list[tuple[Any, str, str]]] = {}
        for r in rows:
            first = (tuple(r["first"]["seq"]), r["first"]["pos"])
            result.setdefault((r["database"], r["schema"], r["table"]), []).append((first, r["column"], r["type"]))
        return {t: {c: ty for _f, c, ty in sorted(cols, key=lambda x: x[0])} for t, cols in result.items()}

    def _apply_tables(
        self,
        folded: pa.Table,
        barrier_rows: list[dict[str, Any]],
        types: dict[TableId, dict[str, str]],
        keys: dict[TableId, list[str]],
        registry: dict[TableId, TableState],
        batch_id: int,
    ) -> list[TableResult]:
        work: list[TableBatch] = []
        for table, rows in _split_by_table(folded):
            if table not in keys:
                continue
            work.append(self._table_batch(table, rows, barrier_rows, types, keys, registry))
        seen = {w.table for w in work}
        for table in {(r["database"], r["schema"], r["table"]) for r in barrier_rows} - seen:
            if table in keys:
                work.append(self._table_batch(table, folded.slice(0, 0), barrier_rows, types, keys, registry))

        def run(item: TableBatch) -> TableResult:
            return TableApplier(
                item, self.state, batch_id, timezone=self.options.timezone, zero_dates=self.options.zero_dates,
                on_barrier=self.on_barrier,
            ).run()

        if len(work) <= 1:
            return [run(w) for w in work]
        with ThreadPoolExecutor(max_workers=min(8, len(work))) as pool:
            return list(pool.map(run, work))

    def _table_batch(self, table, rows, barrier_rows, types, keys, registry) -> TableBatch:  # type: ignore[no-untyped-def]
        state = registry.get(table) or TableState(
            table[0], table[1], table[2], mirror=str(self.mirror_path(table)), primary_key=tuple(keys[table])
        )
        if not state.primary_key:
            state = TableState(**{**state.__dict__, "primary_key": tuple(keys[table])})
        return TableBatch(
            table=table,
            mirror=self.writer(state.mirror),
            rows=rows,
            barriers=[r for r in barrier_rows if (r["database"], r["schema"], r["table"]) == table],
            types=types.get(table, {}),
            state=state,
        )

    def _decode_dead_letters(self, decoded: DataFrame, batch_id: int) -> pa.Table:
        from pyspark.sql import functions as F

        rows = decoded.where(F.col("error").isNotNull()).select(
            "dialect", "database", "table", "error", "raw", "coordinates"
        ).toArrow()
        return _dead_table(rows, batch_id)

    def _unkeyed(self, decoded: DataFrame, tables: list[TableId]) -> list[DeadRow]:
        from pyspark.sql import functions as F

        cond = F.lit(False)
        for table in tables:
            cond = cond | table_match(table)
        rows = decoded.where(F.col("error").isNull() & cond & F.col("op").isin(*DML_OPS)).select(
            "database", "table", "coordinates"
        ).collect()
        return [
            DeadRow(
                r["coordinates"].asDict(),
                f"no primary key known for {r['database']}.{r['table']}: the messages carry none; "
                "set tables.keys in the job file",
                r["database"], r["table"],
            )
            for r in rows
        ]

    def _engine_dead_letters(self, records: DataFrame, dead: list[DeadRow], batch_id: int) -> pa.Table:
        """Fetch the raw records of events that failed after decoding (rare: one join, only then)."""
        spark = records.sparkSession
        wanted = spark.createDataFrame(
            [(d.coordinates["source"], d.coordinates["partition"], d.coordinates["offset"]) for d in dead],
            "source STRING, partition BIGINT, offset BIGINT",
        ).distinct()
        found = (
            records.select("raw", "coordinates.source", "coordinates.partition", "coordinates.offset")
            .join(wanted, ["source", "partition", "offset"])
            .collect()
        )
        raw = {(r["source"], r["partition"], r["offset"]): r["raw"] for r in found}
        rows = pa.Table.from_pylist(
            [
                {
                    "dialect": None, "database": d.database, "table": d.table, "error": d.error,
                    "raw": raw.get((d.coordinates["source"], d.coordinates["partition"], d.coordinates["offset"])),
                    "coordinates": d.coordinates,
                }
                for d in dead
            ]
        )
        return _dead_table(rows, batch_id)

    def _fail_on(self, dead: pa.Table) -> None:
        if self.config.on_error == "fail" and dead.num_rows:
            first = dead.slice(0, 1).to_pylist()[0]
            raise RecordFailed(
                f"record {first['source']}:{first['offset']} (message {first['index']}, row {first['row']}): "
                f"{first['error']}  [on_error: fail]"
            )

    def _fail_on_rows(self, dead: list[DeadRow]) -> None:
        if self.config.on_error == "fail" and dead:
            d = dead[0]
            c = d.coordinates
            raise RecordFailed(
                f"record {c['source']}:{c['offset']} (message {c['index']}, row {c['row']}) of "
                f"{d.database}.{d.table}: {d.error}  [on_error: fail]"
            )


def _dead_table(rows: pa.Table, batch_id: int) -> pa.Table:
    coords = rows["coordinates"].combine_chunks() if rows.num_rows else None
    n = rows.num_rows
    raw = rows["raw"].combine_chunks() if n else pa.array([], pa.binary())

    def text(value: bytes | None) -> str | None:
        if value is None:
            return None
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def field(name: str) -> pa.Array:
        return pc.struct_field(coords, name) if n else pa.array([], DEAD_LETTER_SCHEMA.field(name).type)

    return pa.table(
        {
            "batch_id": pa.array([batch_id] * n, pa.int64()),
            "recorded_at": pa.array([now()] * n, pa.timestamp("us", tz="UTC")),
            "dialect": rows["dialect"].cast(pa.string()),
            "database": rows["database"].cast(pa.string()),
            "table": rows["table"].cast(pa.string()),
            "error": rows["error"].cast(pa.string()),
            "raw": raw.cast(pa.binary()),
            "raw_text": pa.array([text(v) for v in raw.to_pylist()], pa.string()),
            "source": field("source"),
            "partition": field("partition"),
            "offset": field("offset"),
            "index": field("index"),
            "row": field("row"),
        },
        schema=DEAD_LETTER_SCHEMA,
    )


def _split_by_table(folded: pa.Table) -> Iterable[tuple[TableId, pa.Table]]:
    if folded.num_rows == 0:
        return
    ordered = folded.sort_by([("database", "ascending"), ("schema", "ascending"), ("table", "ascending")])
    ids = list(zip(ordered["database"].to_pylist(), ordered["schema"].to_pylist(), ordered["table"].to_pylist(),
                   strict=True))
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[start]:
            yield ids[start], ordered.slice(start, i - start)
            start = i


__all__ = ["Engine", "RecordFailed", "parse_seq_text", "seq_text"]
