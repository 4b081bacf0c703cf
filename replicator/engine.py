"""The micro-batch: read + decode -> route -> resolve keys -> barriers -> fold -> per-table apply -> state.

A batch costs one Spark job whatever the number of tables: the source's records (a file listing or Kafka
records) brought to the driver as Arrow (sources.BATCH_RECORDS). Decoding runs in worker processes
(dialects.pool), everything after it is Arrow compute on the driver, and tables are applied in parallel
threads (delta-rs releases the GIL). docs/performance.md has the phases and their costs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator.apply import DeadRow, TableApplier, TableBatch, TableResult
from replicator.barriers import declared_keys, plan_barriers, rename_units
from replicator.changelog import Barrier, TableId, fold, keep, no_changes, seq_texts, split_by_table
from replicator.config import JobConfig
from replicator.dialects.base import DecodeOptions, gc_paused
from replicator.dialects.pool import decode_stream
from replicator.logging import get_logger
from replicator.model import BARRIER_OPS, DML_OPS, table_label
from replicator.phases import advance_all, after_horizon, bulk_load, table_activity
from replicator.routing import route
from replicator.sinks import writer_factory
from replicator.sources import BATCH_RECORDS
from replicator.state import DEAD_LETTER_SCHEMA, BatchSummary, State, TableState, now
from replicator.tombstones import expire_tombstones

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = get_logger("replicator.engine")


class Phases:
    """Wall time per phase of a batch (decode, fold, collect, merge, ...), reported in the batch log."""

    def __init__(self, started: float | None = None) -> None:
        self.ms: dict[str, int] = {}
        self._t = time.monotonic() if started is None else started

    def lap(self, name: str) -> None:
        t = time.monotonic()
        self.ms[name] = self.ms.get(name, 0) + int((t - self._t) * 1000)
        self._t = t


class RecordFailed(RuntimeError):
    """``on_error: fail``: a record could not be applied; the message names it."""


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
        self._background = ThreadPoolExecutor(1, thread_name_prefix="changelog")
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
    def process(self, frame: DataFrame, batch_id: int) -> BatchSummary:
        """A streaming micro-batch (the source's rows) -> mirrors. One Spark job brings its raw records to
        the driver (sources.BATCH_RECORDS); everything after that is Arrow and delta-rs."""
        started = time.monotonic()
        return self._run(BATCH_RECORDS[self.config.source.type](frame), batch_id, started)

    def process_records(self, records: pa.Table, batch_id: int) -> BatchSummary:
        """Raw records (sources.raw_schema) as one micro-batch (bootstrap from message files, tests)."""
        return self._run([records], batch_id, time.monotonic())

    def _run(self, chunks: Iterable[pa.Table], batch_id: int, started: float) -> BatchSummary:
        """Read + decode (overlapped, pool.decode_stream) -> route -> keys, barriers, fold -> apply ->
        state."""
        phases = Phases(started)
        source = self.config.source
        with gc_paused():
            records, decoded = decode_stream(
                chunks, source.dialect, self.options, batch_id, source.decode_workers
            )
            decoded = route(decoded, self.config.tables.route)
        phases.lap("read+decode")
        summary = self._process(records, decoded, batch_id, phases)
        summary.duration_ms = int((time.monotonic() - started) * 1000)
        self.state.record_batch(summary)
        log.info("batch", **dict(summary.__dict__.items()))
        return summary

    def _process(
        self, records: pa.Table | None, events: pa.Table, batch_id: int, phases: Phases | None = None
    ) -> BatchSummary:
        """Decoded events (Arrow) -> summary, change log, fold, per-table apply, state."""
        summary = BatchSummary(batch_id)
        phases = self.phases = phases or Phases()
        ok = pc.is_null(events["error"])
        groups = _groups(events, ok)
        summary.records_in = sum(int(g["records"] or 0) for g in groups)
        decode_errors = sum(g["n"] for g in groups if not g["ok"])
        summary.filtered = sum(g["n"] for g in groups if g["ok"] and g["op"] == "filtered")
        if decode_errors:
            failed = events.filter(pc.invert(ok))
            dead = _dead_table(
                failed.select(["dialect", "database", "table", "error", "raw", "coordinates"]), batch_id
            )
            self._fail_on(dead)
            self.state.write_dead_letters(dead, batch_id, ":decode")
            summary.dead_letters += dead.num_rows
        phases.lap("summary")

        registry = self.state.tables()
        tables: dict[TableId, list[str]] = {}
        for g in groups:
            if g["ok"] and g["op"] in (*DML_OPS, *BARRIER_OPS) and g["table"] is not None:
                table = (g["database"], g["schema"], g["table"])
                key = list(g["primary_key"] or [])
                if len(key) > len(tables.get(table, [])):
                    tables[table] = key
                else:
                    tables.setdefault(table, key)
        events = keep(events, pc.and_(ok, pc.is_in(events["op"], pa.array([*DML_OPS, *BARRIER_OPS]))))
        events = events.drop_columns(["raw", "error"])
        if "seq_text" not in events.column_names:  # decoding adds it; replayed change-log events lack it
            events = events.append_column("seq_text", seq_texts(events["seq"]))
        # Barrier events first: a CREATE declares the key of a table before any of its DML.
        all_barriers = _barrier_rows(events)
        self.activity = table_activity(groups, all_barriers)  # phases: snapshot rows / incremental per table
        selected, unkeyed, excluded_events, barrier_only = {}, [], 0, []
        for table, key in tables.items():
            name = f"{table[0]}.{table[2]}"
            if not (
                self.config.tables.selected(name) or self.config.tables.routed_target(table_label(table))
            ):
                excluded_events += sum(
                    g["n"] for g in groups if g["ok"] and (g["database"], g["schema"], g["table"]) == table
                )
                continue
            known = registry.get(table)
            key = key or self.config.tables.key_for(name) or list(known.primary_key if known else [])
            own_barriers = [r for r in all_barriers if (r["database"], r["schema"], r["table"]) == table]
            if not key and self.on_barrier is not None:
                key = next((list(k) for r in own_barriers if (k := declared_keys(r))), [])
            if key:
                selected[table] = key
            else:
                unkeyed.append(table)
                if own_barriers:  # its DDL still applies (the DML waits for a key)
                    barrier_only.append(table)
        summary.filtered += excluded_events
        summary.events = sum(g["n"] for g in groups if g["ok"] and g["op"] != "filtered")
        phases.lap("barriers")

        changelog = None
        if self.config.changelog.enabled:
            # Written by delta-rs (which releases the GIL) while the batch is folded and applied; both
            # commits carry the batch's app transaction, so either may land first across a crash.
            batch_ids = pa.repeat(pa.scalar(batch_id, pa.int64()), events.num_rows)
            changelog = self._background.submit(
                self.state.append_changelog,
                events.drop_columns(
                    [c for c in ("seq_text", "type_key") if c in events.column_names]
                ).append_column("batch_id", batch_ids),
                batch_id,
            )
        try:  # whatever fails below, the change-log write is waited for before the batch fails
            scope = {*selected, *barrier_only}
            barrier_rows = [r for r in all_barriers if (r["database"], r["schema"], r["table"]) in scope]
            barrier_rows = after_horizon(barrier_rows, registry)  # not at/before a truncate or snapshot point
            by_table, links = plan_barriers(barrier_rows, self.on_barrier is not None)
            barriers = [Barrier(table, tuple(r["seq"])) for table, rows in by_table.items() for r in rows]
            dml = keep(events, pc.is_in(events["op"], pa.array(DML_OPS)))
            types = _source_types(dml)
            folded = dict(fold(dml, selected, barriers))
            phases.lap("fold")

            dead_rows: list[DeadRow] = []
            if unkeyed:
                dead_rows += _unkeyed(dml, unkeyed)
            keys = {**{t: [] for t in barrier_only}, **selected}
            results = self._apply_tables(folded, by_table, links, types, keys, registry, batch_id)
        finally:
            if changelog is not None:
                wait([changelog])
        phases.lap("apply")
        if changelog is not None:
            changelog.result()  # a failed change-log write fails the batch (it is retried whole)
        if self.config.tables.history:  # history tables (replicator.history): every event, after the mirrors
            from replicator.history import record_history

            record_history(
                self.config,
                self.state,
                self.writer,
                events,
                results,
                links,
                batch_id,
                timezone=self.options.timezone,
                zero_dates=self.options.zero_dates,
            )
            phases.lap("history")
        for result in results:
            dead_rows.extend(result.dead)
            if not result.skipped:
                name = table_label(result.table)
                summary.tables[name] = {
                    "inserted": result.merged.inserted,
                    "updated": result.merged.updated,
                    "deleted": result.merged.deleted,
                    "files_scanned": result.merged.files_scanned,
                    "files_skipped": result.merged.files_skipped,
                    "rows_copied": result.merged.rows_copied,
                    "ddl": len(result.ddl),
                    "dead_letters": len(result.dead),
                }
                if result.ignored_values:
                    summary.tables[name]["ignored_values"] = result.ignored_values
        if dead_rows:
            dead = self._engine_dead_letters(records, dead_rows, batch_id)
            self.state.write_dead_letters(dead, batch_id, ":apply")
            summary.dead_letters += dead.num_rows
        summary.applied = summary.events - excluded_events - len(dead_rows)
        self.state.save_tables(advance_all(results, registry, self.activity), batch_id)
        expire_tombstones(
            self.state, [r.state for r in results if r.state is not None], self.config.tombstones, batch_id
        )
        phases.lap("state")
        summary.phases_ms = phases.ms
        self._fail_on_rows(dead_rows)
        return summary

    # ---- helpers ------------------------------------------------------------------------------------------
    def _apply_tables(
        self,
        folded: dict[TableId, pa.Table],
        by_table: dict[TableId, list[dict[str, Any]]],
        links: list[tuple[TableId, TableId, str]],
        types: dict[TableId, dict[str, str]],
        keys: dict[TableId, list[str]],
        registry: dict[TableId, TableState],
        batch_id: int,
    ) -> list[TableResult]:
        work: list[TableBatch] = []
        for table, rows in folded.items():
            if table not in keys:
                continue
            work.append(self._table_batch(table, rows, by_table, types, keys, registry))
        seen = {w.table for w in work}
        for table in set(by_table) - seen:
            if table in keys:
                work.append(self._table_batch(table, no_changes(), by_table, types, keys, registry))

        def run(item: TableBatch) -> TableResult:
            return TableApplier(
                item,
                self.state,
                batch_id,
                timezone=self.options.timezone,
                zero_dates=self.options.zero_dates,
                on_barrier=self.on_barrier,
                policy=self.config.schema_policy(f"{item.table[0]}.{item.table[2]}"),
            ).run()

        def run_unit(unit: list[TableBatch]) -> list[TableResult]:
            return [run(item) for item in unit]  # tables linked by a RENAME: in order, one thread

        units = rename_units(work, links)
        if len(units) <= 1:
            return [r for unit in units for r in run_unit(unit)]
        with ThreadPoolExecutor(max_workers=min(8, len(units))) as pool:
            return [r for results in pool.map(run_unit, units) for r in results]

    def _table_batch(self, table, rows, by_table, types, keys, registry) -> TableBatch:  # type: ignore[no-untyped-def]
        state = registry.get(table) or TableState(
            table[0], table[1], table[2], mirror=str(self.mirror_path(table)), primary_key=tuple(keys[table])
        )
        if not state.primary_key:
            state = TableState(**{**state.__dict__, "primary_key": tuple(keys[table])})
        return TableBatch(
            table=table,
            mirror=self.writer(state.mirror, self.config.target.mirror_properties()),
            rows=rows,
            barriers=by_table.get(table, []),
            types=types.get(table, {}),
            state=state,
            bulk=bulk_load(registry.get(table), self.activity.get(table)),
        )

    def _engine_dead_letters(self, records: pa.Table | None, dead: list[DeadRow], batch_id: int) -> pa.Table:
        """Dead letters of events that failed after decoding, with their raw records (a lookup by
        coordinates in the batch's records, which are still in memory)."""
        wanted = {
            (d.coordinates["source"], d.coordinates["partition"], d.coordinates["offset"]) for d in dead
        }
        raw: dict[tuple[Any, ...], bytes] = {}
        if records is not None and records.num_rows:
            # Only the records at a wanted offset come to Python (not the whole batch's bytes).
            offsets = pa.array({o for _s, _p, o in wanted}, records.schema.field("offset").type)
            near = records.filter(pc.is_in(records["offset"], value_set=offsets, skip_nulls=False))
            for r, s, p, o in zip(
                *(near.column(n).to_pylist() for n in ("raw", "source", "partition", "offset")),
                strict=True,
            ):
                if (s, p, o) in wanted:
                    raw[(s, p, o)] = r
        rows = pa.Table.from_pylist(
            [
                {
                    "dialect": None,
                    "database": d.database,
                    "table": d.table,
                    "error": d.error,
                    "raw": raw.get(
                        (d.coordinates["source"], d.coordinates["partition"], d.coordinates["offset"])
                    ),
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
            "batch_id": pa.repeat(pa.scalar(batch_id, pa.int64()), n),
            "recorded_at": pa.repeat(pa.scalar(now(), pa.timestamp("us", tz="UTC")), n),
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


MAP_FIELDS = ("after", "before", "source_types", "meta")


def _groups(events: pa.Table, ok: pa.Array) -> list[dict[str, Any]]:
    """The batch summary per (table, op, ok): events, records (first row of each record), longest key."""
    coords = events["coordinates"].combine_chunks() if events.num_rows else None
    first = (
        pc.and_(pc.equal(pc.struct_field(coords, "index"), 0), pc.equal(pc.struct_field(coords, "row"), 0))
        if coords is not None
        else pa.array([], pa.bool_())
    )
    frame = pa.table(
        {
            "database": events["database"],
            "schema": events["schema"],
            "table": events["table"],
            "op": events["op"],
            "ok": ok,
            "pk": pc.binary_join(events["primary_key"], "\x1f"),
            "first": pc.cast(pc.fill_null(first, False), pa.int64()),
        }
    )
    counted = frame.group_by(["database", "schema", "table", "op", "ok", "pk"], use_threads=False).aggregate(
        [("first", "sum"), ("first", "count")]
    )
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in counted.to_pylist():
        ident = (r["database"], r["schema"], r["table"], r["op"], r["ok"])
        g = merged.setdefault(
            ident,
            {
                **dict(zip(("database", "schema", "table", "op", "ok"), ident, strict=True)),
                "n": 0,
                "records": 0,
                "primary_key": [],
            },
        )
        g["n"] += r["first_count"]
        g["records"] += r["first_sum"]
        key = r["pk"].split("\x1f") if r["pk"] else []
        if len(key) > len(g["primary_key"]):
            g["primary_key"] = key
    return list(merged.values())


def _barrier_rows(events: pa.Table) -> list[dict[str, Any]]:
    """Barrier events as dicts (maps as dicts), in seq order."""
    barriers = events.filter(
        pc.and_(pc.is_in(events["op"], pa.array(BARRIER_OPS)), pc.is_valid(events["table"]))
    )
    rows = barriers.to_pylist()
    for r in rows:
        for name in MAP_FIELDS:
            if r.get(name) is not None:
                r[name] = dict(r[name])
    return sorted(rows, key=lambda r: r["seq_text"])


def type_keys(events: pa.Table) -> pa.Array | pa.ChunkedArray:
    """Per row, its type map as events.type_key_text writes it (the decoder gives it; else read here)."""
    if "type_key" in events.column_names:
        return events["type_key"]
    types = events["source_types"].combine_chunks()
    # offsets index the map's whole child arrays, as keys/items are (sliced or not)
    names = pc.binary_join(pa.ListArray.from_arrays(types.offsets, types.keys), "\x1f")
    values = pc.binary_join(pa.ListArray.from_arrays(types.offsets, pc.fill_null(types.items, "")), "\x1f")
    return pc.binary_join_element_wise(names, values, "\x1e")


def _source_types(dml: pa.Table) -> dict[TableId, dict[str, str]]:
    """Each table's column types: first-seen column order, the latest type of each column wins.

    A table's type map rarely changes inside a batch: group by the map's text (a few distinct maps per
    table), then merge them in seq order."""
    if dml.num_rows == 0:
        return {}
    keys = type_keys(dml)  # group_by reads a dictionary column without decoding it
    frame = pa.table(
        {
            "database": dml["database"],
            "schema": dml["schema"],
            "table": dml["table"],
            "type_key": keys,
            "seq_text": dml["seq_text"],
        }
    )
    rows = (
        frame.group_by(["database", "schema", "table", "type_key"], use_threads=False)
        .aggregate([("seq_text", "min"), ("seq_text", "max")])
        .to_pylist()
    )
    by_table: dict[TableId, list[dict[str, Any]]] = {}
    for r in rows:
        if r["type_key"] is None:
            continue
        names, types = r["type_key"].split("\x1e")
        r["names"] = names.split("\x1f") if names else []
        r["types"] = types.split("\x1f") if names else []
        by_table.setdefault((r["database"], r["schema"], r["table"]), []).append(r)
    result: dict[TableId, dict[str, str]] = {}
    for table, maps in by_table.items():
        merged: dict[str, str] = {}
        for r in sorted(maps, key=lambda r: r["seq_text_min"]):  # first-seen column order
            for column in r["names"]:
                merged.setdefault(column, "")
        for r in sorted(maps, key=lambda r: r["seq_text_max"]):  # the latest type of each column wins
            merged.update(zip(r["names"], r["types"], strict=True))
        result[table] = {c: t for c, t in merged.items() if t}
    return result


def _unkeyed(dml: pa.Table, tables: list[TableId]) -> list[DeadRow]:
    """DML of tables without a known primary key: dead letters asking for tables.keys."""
    dead: list[DeadRow] = []
    for table, rows in split_by_table(dml):
        if table not in tables:
            continue
        for coordinates in rows["coordinates"].to_pylist():
            dead.append(
                DeadRow(
                    coordinates,
                    f"no primary key known for {table[0]}.{table[2]}: the messages carry none; "
                    "set tables.keys in the job file",
                    table[0],
                    table[2],
                )
            )
    return dead


__all__ = ["Engine", "RecordFailed"]
