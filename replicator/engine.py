"""The micro-batch: source -> decode (executors) -> keys, barriers -> fold (executors) -> apply -> record.

Each stage is a module or package of its own name, and imports go one way (tests/test_layout.py):

- ``replicator.sources``: the batch's records (a Kafka DataFrame, or the listing of its files);
- ``replicator.decode``: Spark tasks read and decode them with the dialects (mapInArrow), write the change
  log's files and the DML events' Arrow files (in the batch's folder), and return payload rows
  (``replicator.payload``) naming them; the driver collects those and the small results (summary counts,
  barrier events, dead letters, type maps, change-log files to commit);
- keys and barriers (``replicator.apply.barriers``), on the driver, from those small results;
- ``replicator.fold``: one Spark stage over the buckets the decode tasks wrote (``replicator.exchange``;
  the Arrow fold is ``replicator.fold.arrow``); only the net changes reach the driver;
- ``replicator.apply``: per table, in parallel threads: typing, guarded MERGE, DDL (``apply.schema``),
  tombstones, phases, history tables;
- ``replicator.state``: registry, change log, dead letters and the batch summary are recorded.

This module calls them in that order, with the batch's phases timed. benchmarks/LOG.md has the costs.
A streaming batch may be applied (the last two stages) while Spark decodes the next one
(:meth:`Engine.submit`, ``trigger.overlap``): its inputs are noted in the state until it is applied, so that
a crash after Spark committed it does not lose it (:meth:`Engine.recover`).
"""

from __future__ import annotations

import os
import time
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replicator import payload
from replicator.apply import (
    DeadRow,
    TableApplier,
    TableBatch,
    TableResult,
    advance_all,
    after_horizon,
    barrier_handler,
    bulk_load,
    declared_keys,
    expire_tombstones,
    inherited_key,
    plan_barriers,
    record_history,
    rename_units,
    table_activity,
    with_declared_types,
)
from replicator.config import JobConfig
from replicator.decode import DecodedBatch, DecodePlan
from replicator.dialects.base import DecodeOptions, may_leave_out, may_patch
from replicator.errors import RecordFailed
from replicator.fold import FoldPlan, fold_batch
from replicator.fold.arrow import Barrier, no_changes, seq_system
from replicator.logging import get_logger
from replicator.model import BARRIER_OPS, DML_OPS, TableId, table_label, table_labels, table_order
from replicator.paths import description, mappable, relative_under, table_parts
from replicator.sinks import writer_factory
from replicator.sources import batch_inputs
from replicator.state import DEAD_LETTER_SCHEMA, BatchSummary, State, TableState, now
from replicator.storage import ObjectPath, location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from replicator.catalog import Catalog
    from replicator.sinks.base import MirrorWriter

log = get_logger("replicator.engine")

# A table's DML events in a batch from which the fold tasks type its net changes (Engine._typing): fewer
# are typed on the driver, where reading the mirror's schema first would cost more than the typing.
TYPED_ON_EXECUTORS = 10_000
# Threads applying a batch's tables (Engine._apply_tables).
LANES = 8
# Kafka source options that set how Spark splits a batch into tasks: the job's choice, kept as it is.
SPLIT_OPTIONS = frozenset({"minPartitions", "maxRecordsPerPartition"})


def _kafka_reads(config: JobConfig) -> dict[str, Any]:
    """What a decode task needs to read Kafka ranges itself (DecodePlan.kafka_client)."""
    kafka = config.source.kafka
    settings = kafka.direct_settings() if kafka is not None else None
    if kafka is None or settings is None:
        return {}
    return {"kafka_client": tuple(sorted(settings.items())), "fail_on_data_loss": kafka.fail_on_data_loss}


class Phases:
    """Wall time per phase of a batch (read+decode, fold, apply, ...), reported in the batch log."""

    def __init__(self, started: float | None = None) -> None:
        self.ms: dict[str, int] = {}
        self._t = time.monotonic() if started is None else started

    def lap(self, name: str) -> None:
        t = time.monotonic()
        self.ms[name] = self.ms.get(name, 0) + int((t - self._t) * 1000)
        self._t = t


@dataclass
class BatchWork:
    """A decoded and folded batch on its way to the mirrors: what :meth:`Engine._finish` applies."""

    batch: DecodedBatch
    summary: BatchSummary
    phases: Phases
    started: float | None  # None: not recorded as a batch (replayed events)
    folded: dict[TableId, pa.Table] = field(default_factory=dict)
    files: dict[TableId, pa.Table] = field(default_factory=dict)  # written by the fold tasks (mirror_files)
    stages: dict[TableId, str] = field(default_factory=dict)  # their folder when staged (FoldPlan.stages)
    registry: dict[TableId, TableState] = field(default_factory=dict)
    activity: dict[TableId, Any] = field(default_factory=dict)
    by_table: dict[TableId, list[dict[str, Any]]] = field(default_factory=dict)
    links: list[tuple[TableId, TableId, str]] = field(default_factory=list)
    types: dict[TableId, dict[str, str]] = field(default_factory=dict)
    selected: dict[TableId, list[str]] = field(default_factory=dict)
    barrier_only: list[TableId] = field(default_factory=list)
    unkeyed_dml: list[TableId] = field(default_factory=list)
    refused: dict[TableId, str] = field(default_factory=dict)  # names that map to no folder of their own
    keyless: pa.Table | None = None  # DML events without a value for a key column (fold.arrow.keyless)
    excluded_events: int = 0
    changelog: Future[None] | None = None
    pending: bool = False  # noted in the state's pending folder until applied


class Engine:
    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.writer = writer_factory(config.target.writer)
        self.state = State(config.state.path, config.name, self.writer, config.target.path)
        self.options = DecodeOptions(
            timezone=config.source.timezone,
            zero_dates=config.source.zero_dates,
            avro_schema=config.source.avro_schema,
            max_decompressed_bytes=config.source.max_decompressed_bytes,
            max_columns=config.limits.columns,
            ddl_bytes=config.limits.ddl_bytes,
            table_changes_bytes=config.limits.table_changes_bytes,
            ddl_clauses=config.limits.ddl_clauses,
            ddl_nesting=config.limits.ddl_nesting,
        )
        self.on_barrier = barrier_handler(config)
        self._background = ThreadPoolExecutor(1, thread_name_prefix="changelog")
        # The batch applied while the next one is decoded (Engine.submit), one at a time.
        self._applying = ThreadPoolExecutor(1, thread_name_prefix="apply")
        # The tables' appliers: threads kept from batch to batch, a table on the same one each batch, so
        # that its mirror's and tombstones' loaded Delta states (sinks.delta_rs.handle, kept per thread)
        # are brought up to date, not loaded again: ~2.7 ms of driver CPU to open a small table against
        # ~0.3 to update it (benchmarks/LOG.md, "A thousand tables").
        self._lanes: list[ThreadPoolExecutor] = []
        self._pending: Future[BatchSummary] | None = None
        # Kafka batches reading a re-created topic from its start: their ranges and the topics, until applied.
        self._recreated: dict[int, tuple[dict[tuple[str, int], tuple[int, int]], list[Any]]] = {}
        self.on_batch: Callable[[BatchSummary], None] | None = None  # each batch's summary, once applied
        # Where the executors leave a batch's large results for the driver (payload.to_files): a folder of
        # this engine's own, since a `dead-letters retry` may run beside the mirror job on one state; a
        # folder per batch inside it, as one batch is applied while the next is decoded.
        self._catalog: Catalog | None = None  # replicator.catalog, made at the first sync
        self._noticed: set[tuple[TableId, str]] = set()  # the dialects' notices logged (once per table)
        spill_root = _spill_root(config)
        self._spill = str(spill_root / f"batch-{uuid.uuid4().hex}")
        _clear_stale(spill_root)
        # A state whose registry names mirrors outside target.path (another job folder's) stops the job
        # here, before anything is written (State._loaded).
        self.state.tables()

    def sync_catalog(self) -> None:
        """The catalog's entries in step with the registry (replicator.catalog), when the job file asks:
        after the batch's mirrors and registry are committed, so a catalog that fails changes no mirror."""
        if not self.config.catalog.enabled:
            return
        from replicator.catalog import Catalog
        from replicator.errors import CatalogFailed

        try:
            if self._catalog is None:
                self._catalog = Catalog(self.config, _spark(self.config))
            self._catalog.sync(self.state.tables())
        except CatalogFailed as exc:
            if self.config.catalog.on_error == "fail":
                raise
            log.warning("catalog not in step with the mirrors (tried again next batch)", error=str(exc))

    def mirror_path(self, table: TableId) -> Path | ObjectPath:
        """The folder of a table's mirror: target.path / its names encoded (replicator.paths)."""
        return location(self.state.mirror_path(table))

    # ---- the micro-batch ----------------------------------------------------------------------------------
    def process(self, frame: DataFrame, batch_id: int) -> BatchSummary:
        """A streaming micro-batch (the source's rows: a file listing or Kafka records) -> mirrors."""
        started = time.monotonic()
        kind, inputs = self._inputs(frame, batch_id)
        return self._run(inputs, kind, batch_id, started)

    def submit(self, frame: DataFrame, batch_id: int) -> None:
        """A streaming micro-batch decoded and folded now, applied in the background while the caller goes
        on with the next one (whose decoding overlaps it; its planning waits for it). Until applied, the
        batch's inputs are noted in the state (State.note_pending): a crash after Spark committed the
        batch leaves them for :meth:`recover`. Summaries go to :attr:`on_batch`; an error is raised by
        the next :meth:`submit`, :meth:`process` or :meth:`drain`."""
        started = time.monotonic()
        kind, inputs = self._inputs(frame, batch_id)
        work = self._start(inputs, kind, batch_id, started)
        try:
            self.state.note_pending(batch_id, kind, work.batch.manifest)
        except BaseException:
            self._abandon(work)
            raise
        work.pending = True
        self._pending = self._applying.submit(self._finish, work)

    def _inputs(self, frame: DataFrame, batch_id: int) -> tuple[str, DataFrame]:
        """A streamed batch's inputs; a Kafka batch sized by the offset ranges Spark planned for it (its
        checkpoint, written before the batch runs), unless the job sets how Spark splits partitions."""
        source = self.config.source
        planned = None
        kafka = source.kafka if source.type == "kafka" else None
        if kafka is not None:
            from replicator.kafka_topics import check_batch
            from replicator.sources import kafka_batch_ranges, kafka_range_frame, range_inputs

            planned = kafka_batch_ranges(self.state.checkpoint, batch_id)
            if planned is not None:
                # A topic deleted and re-created: stop, or its ranges from the new topic's start.
                planned, recreated = check_batch(frame.sparkSession, kafka, self.state.root, planned)
                if recreated:
                    self._recreated[batch_id] = (planned, recreated)
                    if any(end > start for start, end in planned.values()):  # (else nothing to read)
                        return "kafka", range_inputs(frame.sparkSession, self.config, planned)
            if SPLIT_OPTIONS & set(kafka.options):
                planned = None
            if planned is not None and kafka.direct_settings() is not None:
                # The decode tasks read the planned ranges themselves (replicator.kafka_reader); the
                # micro-batch's own DataFrame is never run.
                return "kafka", kafka_range_frame(frame.sparkSession, planned)
        return batch_inputs(source.type, frame, planned)

    def process_records(
        self, records: pa.Table, batch_id: int, spark: SparkSession | None = None
    ) -> BatchSummary:
        """Raw records (sources.raw_schema) made on the driver as one micro-batch (tests, dead-letter
        retries): handed to Spark as they are, then the same path as a streamed batch."""
        spark = spark or _spark(self.config)
        return self._run(payload.frame(spark, [("records", records)]), "records", batch_id, time.monotonic())

    def process_files(
        self, files: list[tuple[str, int]], batch_id: int, spark: SparkSession | None = None
    ) -> BatchSummary:
        """Message files ((uri, mtime ms), as sources.file_list gives them) as one micro-batch (bootstrap)."""
        from replicator.sources import listing_frame

        spark = spark or _spark(self.config)
        return self._run(listing_frame(spark, files), "files", batch_id, time.monotonic())

    def process_events(
        self, events: pa.Table, batch_id: int, spark: SparkSession | None = None
    ) -> BatchSummary:
        """Already decoded events (the change log, for replay) as one batch; not recorded as a batch."""
        spark = spark or _spark(self.config)
        return self._run(payload.frame(spark, [("events", events)]), "events", batch_id, None)

    def _run(self, inputs: DataFrame, kind: str, batch_id: int, started: float | None) -> BatchSummary:
        return self._finish(self._start(inputs, kind, batch_id, started))

    def _start(self, inputs: DataFrame, kind: str, batch_id: int, started: float | None) -> BatchWork:
        """Decode, plan and fold a batch (its apply is :meth:`_finish`)."""
        phases = Phases(started)
        source = self.config.source
        write_changelog = (
            self.config.changelog.enabled and kind != "events" and not self.state.done("changelog", batch_id)
        )
        spill = str(location(self._spill) / f"{batch_id}-{uuid.uuid4().hex[:8]}")
        plan = DecodePlan(
            source=kind,
            dialect=source.dialect,
            options=self.options,
            batch_id=batch_id,
            routes=tuple(self.config.tables.route),
            changelog=str(self.state.root / "changelog") if write_changelog else None,
            spill=spill,
            buckets=_buckets(inputs.sparkSession),
            landing=_landing(self.config),
            **_kafka_reads(self.config) if kind == "kafka" else {},
        )
        try:
            batch = DecodedBatch(inputs, plan)  # the previous batch may still be applied meanwhile
            phases.lap("read+decode")
            self.drain()  # its tables, keys and schemas are this batch's starting point
            phases.lap("wait")
            return self._plan(batch, batch_id, phases, started)
        except BaseException:
            _clear(spill)
            raise

    def _abandon(self, work: BatchWork) -> None:
        """A planned batch that will not be applied: its change-log commit awaited, its folder removed."""
        if work.changelog is not None:
            wait([work.changelog])
        _clear(work.batch.plan.spill)

    def close(self) -> None:
        """The engine's threads ended (after :meth:`drain`): a process that exits next has none left."""
        self._applying.shutdown(wait=True)
        for lane in self._lanes:
            lane.shutdown(wait=True)
        self._background.shutdown(wait=True)

    def drain(self) -> None:
        """Wait for the batch being applied in the background, if any; its error is raised here."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def failure(self) -> BaseException | None:
        """The error of the batch applied in the background, once it has failed (else None)."""
        pending = self._pending
        if pending is None or not pending.done():
            return None
        return pending.exception()

    def recover(self, spark: SparkSession) -> list[BatchSummary]:
        """Apply the batches a previous run left pending (noted, not yet applied: the process died while it
        applied them after Spark had committed them), each from its own inputs, in batch order."""
        from replicator.sources import pending_inputs

        summaries = []
        for batch_id, kind, inputs in self.state.pending():
            if self.state.done("batches", batch_id):  # recorded, then stopped before its note went
                self.state.clear_pending(batch_id)
                continue
            log.info("applying a batch left pending", batch_id=batch_id, inputs=inputs.num_rows)
            frame = pending_inputs(spark, self.config, kind, inputs)
            summaries.append(self._run(frame, kind, batch_id, time.monotonic()))
            self.state.clear_pending(batch_id)
        return summaries

    def _notices(self, notices: dict[tuple[TableId, str], None]) -> None:
        """What a dialect saw in a table's messages that the operator must act on (a capture setting that
        loses data, types unknown): a warning once per table and notice for this engine's life."""
        for table, text in notices:
            if (table, text) in self._noticed:
                continue
            self._noticed.add((table, text))
            log.warning(text, table=table_label(table))

    def _plan(self, batch: DecodedBatch, batch_id: int, phases: Phases, started: float | None) -> BatchWork:
        """The batch's small results -> summary, change-log commit, keys and barriers, fold (Spark)."""
        summary = BatchSummary(batch_id)
        work = BatchWork(batch, summary, phases, started)
        groups = batch.groups
        self._notices(batch.notices)
        summary.records_in = sum(int(g["records"] or 0) for g in groups)
        summary.filtered = sum(g["n"] for g in groups if g["ok"] and g["op"] == "filtered")
        if batch.dead.num_rows:
            dead = _dead_table(batch.dead, batch_id)
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
        # Barrier events first: a CREATE declares the key of a table before any of its DML.
        all_barriers = batch.barriers
        work.activity = table_activity(groups, all_barriers)  # phases: snapshot rows / incremental per table
        selected: dict[TableId, list[str]] = {}
        unkeyed: list[TableId] = []
        excluded_events = 0
        barrier_only: list[TableId] = []
        work.refused = self._refused(tables, registry)
        for table, key in tables.items():
            name = f"{table[0]}.{table[2]}"
            if table in work.refused:  # its events become dead letters (_finish)
                continue
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
            if not key:
                key = next((list(k) for r in own_barriers if (k := declared_keys(r))), [])
            if key:
                selected[table] = key
            else:
                unkeyed.append(table)
                if own_barriers:  # its DDL still applies (the DML waits for a key)
                    barrier_only.append(table)
        known_keys = {**{t: s.primary_key for t, s in registry.items()}, **selected}
        for table in list(unkeyed):  # renamed in this batch: the key goes with the table
            if key := list(inherited_key(table, all_barriers, known_keys)):
                selected[table] = key
                unkeyed.remove(table)
                if table in barrier_only:
                    barrier_only.remove(table)
        summary.filtered += excluded_events
        summary.events = sum(g["n"] for g in groups if g["ok"] and g["op"] != "filtered")
        work.excluded_events = excluded_events
        phases.lap("barriers")

        if batch.plan.changelog is not None:
            # The executors wrote the files; one commit with the batch's app transaction adds them, while
            # the batch is folded and applied (either commit may land first across a crash).
            work.changelog = self._background.submit(
                self.state.commit_changelog, batch.changelog_files, batch_id
            )
        try:  # whatever fails below, the change-log commit is waited for before the batch fails
            scope = {*selected, *barrier_only}
            barrier_rows = [r for r in all_barriers if (r["database"], r["schema"], r["table"]) in scope]
            barrier_rows = after_horizon(barrier_rows, registry)  # not at/before a truncate or snapshot point
            by_table, links = plan_barriers(barrier_rows, True)
            barriers = [
                Barrier(table, tuple(r["seq"]), seq_system(r))
                for table, rows in by_table.items()
                for r in rows
            ]
            types = with_declared_types(batch.types, selected, self.config.tables)  # tables.types
            dml_tables = {
                (g["database"], g["schema"], g["table"]) for g in groups if g["ok"] and g["op"] in DML_OPS
            }
            typing, writes, stages = self._typing(batch, groups, selected, by_table, links, registry, types)
            plan = FoldPlan(
                keys=tuple((t, tuple(k)) for t, k in selected.items() if t in dml_tables),
                barriers=tuple(barriers),
                buckets=batch.plan.buckets,
                events=sum(g["n"] for g in groups if g["ok"] and g["op"] in DML_OPS),
                spill=batch.plan.spill,
                typing=typing,
                writes=writes,
                stages=stages,
                timezone=self.options.timezone,
                zero_dates=self.options.zero_dates,
            )
            work.folded, work.files, work.keyless = fold_batch(batch.frame.sparkSession, batch.index, plan)
            work.stages = dict(stages)
            phases.lap("fold")
        except BaseException:
            if work.changelog is not None:
                wait([work.changelog])
            raise
        work.registry, work.by_table, work.links, work.types = registry, by_table, links, types
        work.selected, work.barrier_only = selected, barrier_only
        work.unkeyed_dml = [t for t in unkeyed if t in dml_tables]
        return work

    def _finish(self, work: BatchWork) -> BatchSummary:
        """A folded batch -> mirrors (per-table apply), history tables, dead letters, state, the batch's
        record; its folder is removed and, if it was pending, its note."""
        batch, summary, phases = work.batch, work.summary, work.phases
        batch_id = summary.batch_id
        try:
            try:  # whatever fails below, the change-log commit is waited for before the batch fails
                dead_rows: list[DeadRow] = []
                if work.unkeyed_dml:
                    dead_rows += _unkeyed(batch.select(work.unkeyed_dml, [*_TABLE, "coordinates"]))
                if work.refused:
                    dead_rows += _refused_rows(batch, work.refused)
                if work.keyless is not None:
                    dead_rows += _keyless_rows(work.keyless)
                keys = {**{t: [] for t in work.barrier_only}, **work.selected}
                results = self._apply_tables(work, keys)
            finally:
                if work.changelog is not None:
                    wait([work.changelog])
            phases.lap("apply")
            if work.changelog is not None:
                work.changelog.result()  # a failed change-log commit fails the batch (it is retried whole)
            self._record(work, results, dead_rows)
        finally:
            _clear(batch.plan.spill)
        self.sync_catalog()
        if work.started is not None:
            summary.duration_ms = int((time.monotonic() - work.started) * 1000)
            if batch.plan.source == "kafka":
                self._record_partitions(work)
            self.state.record_batch(summary)
            log.info("batch", **dict(summary.__dict__.items()))
        if work.pending:
            self.state.clear_pending(batch_id)
        if self.on_batch is not None:
            self.on_batch(summary)
        return summary

    def _record_partitions(self, work: BatchWork) -> None:
        """A Kafka batch's offsets per partition: the range Spark planned, what was read, the broker's newest
        offset (the lag) and the offsets Kafka no longer had (``fail_on_data_loss: false``: read past, so
        recorded and logged here, never skipped unseen)."""
        from replicator.sources import kafka_batch_ranges, kafka_latest_offsets, kafka_partition_rows

        batch_id = work.summary.batch_id
        again = self._recreated.pop(batch_id, None)
        ranges = kafka_batch_ranges(self.state.checkpoint, batch_id) if again is None else again[0]
        if ranges is None:  # a pending batch whose checkpoint offsets Spark no longer keeps
            return
        assert self.config.source.kafka is not None
        try:
            topics = sorted({topic for topic, _p in ranges})
            latest = kafka_latest_offsets(work.batch.frame.sparkSession, self.config.source.kafka, topics)
        except Exception as exc:  # the lag is information: a broker that does not answer now fails no batch
            log.warning("the Kafka brokers' newest offsets not read: lag unknown", error=str(exc)[:300])
            latest = {}
        rows = kafka_partition_rows(batch_id, ranges, work.batch.manifest, latest)
        for r in rows.filter(pc.is_valid(rows["lost_from"])).to_pylist():
            log.warning(
                "Kafka offsets lost: deleted before the job read them (fail_on_data_loss: false)",
                topic=r["topic"],
                partition=r["partition"],
                lost_from=r["lost_from"],
                lost_to=r["lost_to"],
                batch_id=batch_id,
            )
        self.state.record_partitions(rows, batch_id)
        if again is not None:  # the re-created topics' new IDs from now on (kafka_topics.check_batch)
            from replicator.kafka_topics import TopicIds

            TopicIds(self.state.root).replace(again[1], batch_id)

    def _record(self, work: BatchWork, results: list[TableResult], dead_rows: list[DeadRow]) -> None:
        """History tables, the tables' results in the summary, dead letters, the registry, tombstones."""
        batch, summary, phases = work.batch, work.summary, work.phases
        batch_id = summary.batch_id
        selected, barrier_only = work.selected, work.barrier_only
        history = [t for t in {*selected, *barrier_only} if self.config.tables.history_for(f"{t[0]}.{t[2]}")]
        if history:  # history tables (replicator.apply.history): every event, after the mirrors
            record_history(
                self.config,
                self.state,
                self.writer,
                _without(_history_events(batch, history, work.types), work.keyless),
                results,
                work.links,
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
                if result.before_horizon:  # at or before its snapshot position / TRUNCATE: not applied
                    summary.tables[name]["before_horizon"] = result.before_horizon
                if result.partial_documents:  # drs-mongo documents kept from patches alone (issue 35)
                    summary.tables[name]["partial_documents"] = result.partial_documents
                if result.partial_history_versions:  # their versions in the history table
                    summary.tables[name]["partial_history_versions"] = result.partial_history_versions
                if result.partial_updates:  # rows that kept unchanged TOASTed values (issue 51)
                    summary.tables[name]["partial_updates"] = result.partial_updates
                if result.unavailable_lost:  # such values of rows the mirror did not hold
                    summary.tables[name]["unavailable_lost"] = result.unavailable_lost
                if result.defaults:  # ADD COLUMN defaults given to the rows already there (apply.schema)
                    summary.tables[name]["defaults"] = result.defaults
        if dead_rows:
            dead = self._engine_dead_letters(batch, dead_rows, batch_id)
            self.state.write_dead_letters(dead, batch_id, ":apply")
            summary.dead_letters += dead.num_rows
        held_back = sum(r.before_horizon for r in results if not r.skipped)
        summary.applied = max(0, summary.events - work.excluded_events - len(dead_rows) - held_back)
        self.state.save_tables(advance_all(results, work.registry, work.activity), batch_id)
        expire_tombstones(
            self.state, [r.state for r in results if r.state is not None], self.config.tombstones, batch_id
        )
        phases.lap("state")
        summary.phases_ms = phases.ms
        self._fail_on_rows(dead_rows)

    # ---- helpers ------------------------------------------------------------------------------------------
    def _refused(
        self, tables: dict[TableId, list[str]], registry: dict[TableId, TableState]
    ) -> dict[TableId, str]:
        """The batch's tables whose names cannot be mirrored (replicator.paths): an empty or missing name,
        or a new table whose folder would lie inside another table's folder or hold it (``db.t`` and
        ``db.t.x`` of a schema ``t``: a drop or vacuum of one would delete the other). Why, per table."""
        refused = {t: why for t in tables if (why := mappable(t)) is not None}
        new = [t for t in tables if t not in registry and t not in refused]
        if not new:
            return refused
        refused.update(self._past_new_tables(new))
        new = [t for t in new if t not in refused]
        # Folders as tuples of components under target.path: a nesting is a proper prefix (no file system
        # call per pair: a first batch may bring thousands of tables).
        root = str(self.config.target.path)
        folders: dict[tuple[str, ...], TableId] = {}
        for t, s in registry.items():
            relative = relative_under(root, s.mirror) or os.path.relpath(s.mirror, root)
            folders.setdefault(tuple(relative.split("/")), t)
        for t in tables:
            if t not in refused and t not in registry:
                folders.setdefault(tuple(table_parts(t)), t)
        prefixes: dict[tuple[str, ...], TableId] = {}
        for folder, t in folders.items():
            for n in range(1, len(folder)):
                prefixes.setdefault(folder[:n], t)
        for table in new:
            mine = tuple(table_parts(table))
            same = folders.get(mine)
            other = next((folders[mine[:n]] for n in range(1, len(mine)) if mine[:n] in folders), None)
            other = other or prefixes.get(mine) or (same if same != table else None)
            if other is not None and other != table:
                refused[table] = (
                    f"table {table_label(table)}: its folder {'/'.join(mine)} would share or nest with the "
                    f"mirror of {table_label(other)} under target.path; its events cannot be mirrored"
                )
        return refused

    def _past_new_tables(self, new: list[TableId]) -> dict[TableId, str]:
        """The new tables (no mirror yet, selected) past ``limits.new_tables_per_batch``, in name order (the
        same ones on every run of the batch): each costs a mirror's creation and its state commits, so a
        forged batch of 100,000 tables would hold every table's changes for hours."""
        limit = self.config.limits.new_tables_per_batch
        tables = self.config.tables
        selected = sorted(
            (t for t in new if tables.selected(f"{t[0]}.{t[2]}") or tables.routed_target(table_label(t))),
            key=lambda t: (t[0], t[1] or "", t[2]),
        )
        if len(selected) <= limit:
            return {}
        past = selected[limit:]
        log.warning(
            "new tables past limits.new_tables_per_batch: their events are dead letters",
            limit=limit,
            new_tables=len(selected),
            refused=len(past),
            first_refused=[table_label(t) for t in past[:5]],
        )
        why = (
            f"one of {len(selected)} new tables in this batch, more than limits.new_tables_per_batch "
            f"({limit}): not created; retry the dead letters (replicator dead-letters retry) to create it"
        )
        return {t: f"table {table_label(t)}: {why}" for t in past}

    def _apply_tables(self, batch: BatchWork, keys: dict[TableId, list[str]]) -> list[TableResult]:
        folded, by_table, links, types = batch.folded, batch.by_table, batch.links, batch.types
        registry, activity, batch_id = batch.registry, batch.activity, batch.summary.batch_id
        work: list[TableBatch] = []
        # Tables in name order, not in the order their net changes came back (which follows the fold's
        # buckets): a batch applies its tables the same way every run (logs, crash points, thread units).
        for table in sorted({*folded, *batch.files}, key=table_order):
            # Taken out of the batch's dict: the table's applier holds the only reference to its rows and
            # frees their images once typed (TableApplier.run).
            rows = folded.pop(table, None)
            if table in keys:
                rows = no_changes() if rows is None else rows
                work.append(self._table_batch(table, rows, by_table, types, keys, registry, activity))
                work[-1].files = batch.files.get(table)
                work[-1].stage = batch.stages.get(table) if work[-1].files is not None else None
            del rows
        seen = {w.table for w in work}
        for table in sorted(set(by_table) - seen, key=table_order):
            if table in keys:
                work.append(self._table_batch(table, no_changes(), by_table, types, keys, registry, activity))

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
        if not self._lanes:
            self._lanes = [ThreadPoolExecutor(1, thread_name_prefix=f"apply-{i}") for i in range(LANES)]
        # A few units: one a lane, in name order (each lane keeps their handles too); many: by the hash of
        # the first table's name, the same lane every batch.
        few = len(units) <= LANES
        futures = [
            self._lanes[i if few else zlib.crc32(table_label(unit[0].table).encode()) % LANES].submit(
                run_unit, unit
            )
            for i, unit in enumerate(units)
        ]
        wait(futures)  # every table's apply ended before the batch fails on the first error
        return [r for future in futures for r in future.result()]

    def _typing(self, batch, groups, selected, by_table, links, registry, types):  # type: ignore[no-untyped-def]
        """The tables whose net changes the fold tasks type (FoldPlan.typing), with their mirror's schema:
        those with a mirror, at least TYPED_ON_EXECUTORS DML events in the batch, no barrier in it (their
        schema stays as read here until their rows are applied) and no document patches. Typing on the
        driver cost ~1 µs per net change on the 5M catch-up (3.3 s), one core while the executors wait.

        A table first seen in this batch is created here when it can be (:meth:`_created`), and the fold
        tasks write its upserts to its folder (FoldPlan.writes). Not when its rows carry more than one
        column set (a column added or dropped without a DDL within the batch: Debezium's PostgreSQL
        connector): the driver applies it, which gives a column's row-schema default to the rows older than
        the first carrying it (TableApplier.fill_row_defaults); the fold tasks' files would hold NULL."""
        if may_patch(batch.plan.dialect):
            return (), (), ()
        events: dict[TableId, int] = {}
        for g in groups:
            if g["ok"] and g["op"] in DML_OPS:
                table = (g["database"], g["schema"], g["table"])
                events[table] = events.get(table, 0) + g["n"]
        renamed = {t for link in links for t in link[:2]}
        typing, writes, stages = [], [], []
        for table in sorted(selected, key=table_order):
            known = registry.get(table)
            planned = events.get(table, 0) >= TYPED_ON_EXECUTORS and table not in by_table
            if not planned or table in renamed:
                continue
            if known is None:
                if batch.column_sets.get(table, 0) > 1:
                    continue
                seen = list(batch.types.get(table, {}))  # typed by its messages (not only declared)
                created = self._created(table, selected[table], types.get(table, {}), seen)
                if created is not None:
                    typing.append((table, created.schema()))
                    writes.append((table, payload.folder_uri(created.path)))
                continue
            mirror = self.writer(known.mirror, self.config.target.mirror_properties())
            if mirror.exists():
                typing.append((table, mirror.schema()))
                # its upserts staged in the batch's folder, MERGEd from there (not where updates may lack
                # columns: the driver fills them from the mirror, apply.table.keep_unavailable)
                if mirror.merges_staged and not may_leave_out(batch.plan.dialect):
                    stages.append((table, _stage_folder(batch.plan.spill, len(stages))))
        return tuple(typing), tuple(writes), tuple(stages)

    def _created(
        self, table: TableId, key: list[str], types: dict[str, str], seen: list[str]
    ) -> MirrorWriter | None:
        """The mirror of a table first seen in this batch, created now with the columns its messages typed
        (``seen``; ``types`` with the job file's declared types) as its first apply would create it, so
        that the fold tasks type and write its rows. None, and the driver applies them, when its writer
        writes no files, its messages type no column or not its key, or its mirror or tombstones exist
        already (a run that died before it recorded the table)."""
        mirror = self._mirror_writer(table, str(self.mirror_path(table)))
        if not mirror.writes_files or not seen or not set(key) <= set(seen):
            return None
        if mirror.exists() or self.state.tombstones(table).exists():
            return None
        state = TableState(table[0], table[1], table[2], mirror=mirror.path, primary_key=tuple(key))
        work = TableBatch(table, mirror, no_changes(), [], types, state)
        TableApplier(work, self.state, -1).ensure_table([*key, *seen])
        return mirror

    def _mirror_writer(self, table: TableId, path: str) -> MirrorWriter:
        """A table's mirror writer: created with the job's properties and its real names as description."""
        return self.writer(path, self.config.target.mirror_properties(), description(table))

    def _table_batch(self, table, rows, by_table, types, keys, registry, activity) -> TableBatch:  # type: ignore[no-untyped-def]
        state = registry.get(table) or TableState(
            table[0], table[1], table[2], mirror=str(self.mirror_path(table)), primary_key=tuple(keys[table])
        )
        if not state.primary_key:
            state = TableState(**{**state.__dict__, "primary_key": tuple(keys[table])})
        return TableBatch(
            table=table,
            mirror=self._mirror_writer(table, state.mirror),
            rows=rows,
            barriers=by_table.get(table, []),
            types=types.get(table, {}),
            state=state,
            bulk=bulk_load(registry.get(table), activity.get(table)),
        )

    def _engine_dead_letters(self, batch: DecodedBatch, dead: list[DeadRow], batch_id: int) -> pa.Table:
        """Dead letters of events that failed after decoding, with their raw records (read again from the
        source by a Spark job over the records at those coordinates only)."""
        wanted = {
            (d.coordinates["source"], d.coordinates["partition"], d.coordinates["offset"]) for d in dead
        }
        raw = batch.raw(wanted)
        rows = pa.Table.from_pylist(
            [
                {
                    "dialect": None,
                    "database": d.database,
                    "table": d.table,
                    "error": d.error,
                    "raw": _own_bytes(
                        raw.get(
                            (d.coordinates["source"], d.coordinates["partition"], d.coordinates["offset"])
                        ),
                        d.coordinates["index"],
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


def _own_bytes(record: bytes | None, index: int | None) -> bytes | None:
    """A dead letter's bytes: its element's, cut from an array document (issue 14), else the record."""
    from replicator.dialects.arrays import element_bytes

    return None if record is None else element_bytes(record, index or 0)


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


_TABLE = ["database", "schema", "table"]


def _history_events(
    batch: DecodedBatch, tables: list[TableId], types: dict[TableId, dict[str, str]]
) -> pa.Table:
    """Every event of the history tables (their DML from the decode tasks' files, their barrier events from
    the batch's small results), in the decoded columns the history reads; the type map of each table is
    the batch's merged one (the fold's events do not carry theirs)."""
    from replicator.decode import FOLD_COLUMNS
    from replicator.dialects.events import decoded_schema, with_seq_text

    schema = decoded_schema()
    columns = [*FOLD_COLUMNS, "seq_text", "source_types", "ddl_kind", "ddl_sql", "table_changes"]
    fields = pa.schema(
        [pa.field("seq_text", pa.string()) if c == "seq_text" else schema.field(c) for c in columns]
    )
    dml = with_seq_text(batch.select(tables, list(FOLD_COLUMNS)))
    parts = []
    if dml.num_rows:
        labels = table_labels(dml)
        maps = {table_label(t): list((types.get(t) or {}).items()) for t in tables}
        per_row = pa.array(
            [maps.get(label) for label in labels.to_pylist()], schema.field("source_types").type
        )
        n = dml.num_rows
        extra = {
            "source_types": per_row,
            **{c: pa.nulls(n, pa.string()) for c in ("ddl_kind", "ddl_sql", "table_changes")},
        }
        parts.append(
            pa.table([dml[c] if c in dml.column_names else extra[c] for c in columns], schema=fields)
        )
    own = [r for r in batch.barriers if (r["database"], r["schema"], r["table"]) in set(tables)]
    if own:
        rows = [
            {c: (list(r[c].items()) if isinstance(r.get(c), dict) else r.get(c)) for c in columns}
            for r in own
        ]
        parts.append(pa.Table.from_pylist(rows, schema=fields))
    return pa.concat_tables(parts) if parts else fields.empty_table()


def _refused_rows(batch: DecodedBatch, refused: dict[TableId, str]) -> list[DeadRow]:
    """The events (DML and DDL) of tables whose names map to no folder: dead letters saying why."""
    dml = batch.select(list(refused), [*_TABLE, "coordinates"]).to_pylist()
    ddl = [r for r in batch.barriers if (r["database"], r["schema"], r["table"]) in refused]
    return [
        DeadRow(
            r["coordinates"], refused[(r["database"], r["schema"], r["table"])], r["database"], r["table"]
        )
        for r in [*dml, *ddl]
    ]


def _without(events: pa.Table, dead: pa.Table | None) -> pa.Table:
    """``events`` less those at the coordinates of ``dead`` (the fold's events without a key value: dead
    letters, so not versions of a history table either)."""
    if dead is None or events.num_rows == 0:
        return events
    gone = {tuple(sorted(c.items())) for c in dead["coordinates"].to_pylist()}
    keep = [tuple(sorted(c.items())) not in gone for c in events["coordinates"].to_pylist()]
    return events.filter(pa.array(keep))


def _keyless_rows(rows: pa.Table) -> list[DeadRow]:
    """DML events lacking a value for a key column (fold.arrow.keyless): dead letters naming the column."""
    return [DeadRow(r["coordinates"], r["error"], r["database"], r["table"]) for r in rows.to_pylist()]


def _unkeyed(rows: pa.Table) -> list[DeadRow]:
    """DML of tables without a known primary key: dead letters asking for tables.keys."""
    return [
        DeadRow(
            r["coordinates"],
            f"no primary key known for {r['database']}.{r['table']}: the messages carry none; "
            "set tables.keys in the job file",
            r["database"],
            r["table"],
        )
        for r in rows.to_pylist()
    ]


def _stage_folder(spill: str, index: int) -> str:
    """A folder of the batch's for a table's staged upserts (FoldPlan.stages), made now: the fold tasks
    write into it, the MERGE reads it, the batch's end removes it with the batch's folder."""
    from pyarrow import fs

    uri = f"{payload.folder_uri(spill)}/staged/{index}"
    filesystem, root = fs.FileSystem.from_uri(uri)
    filesystem.create_dir(root, recursive=True)
    return uri


def _clear(folder: str) -> None:
    """Remove a batch's folder of payload files (and the engine's, when no other batch has one there) and
    give the memory its tables held back."""
    import os

    payload.clear(folder)
    try:
        os.rmdir(os.path.dirname(folder))
    except OSError:  # the next batch's folder is there already
        pass
    payload.release_memory()


def _spill_root(config: JobConfig) -> Path | ObjectPath:
    """Where the batches' payload folders go: ``state.path/tmp``, unless the state is on an object store and
    Spark's workers share this machine's disk (a local master), where a local temporary folder of this
    state's serves: a batch's decoded events went to the store and back, most of a batch's requests there
    and their time (benchmarks/LOG.md, "Requests per batch on S3"). On a cluster the executors and the
    driver share only the store."""
    import hashlib
    import tempfile

    state = location(config.state.path)
    if not isinstance(state, ObjectPath) or not _local_workers(config):
        return state / "tmp"
    # Named by a digest of the state's URI: one folder per state, whatever the job's name holds.
    digest = hashlib.sha256(str(state).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "replicator-spill" / digest


def _local_workers(config: JobConfig) -> bool:
    """Whether the job's Spark runs with a local master (its workers on this machine)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        return str(context.master).startswith("local")
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit, with whatever master it was given
        return False
    master = config.spark.master or os.environ.get("REPLICATOR_SPARK_MASTER") or "local[*]"
    return master.startswith("local")


def _clear_stale(folder: Path | ObjectPath, hours: float = 24) -> None:
    """Remove the payload folders of engines that died (kill -9) more than ``hours`` ago; a live engine's
    folder exists only while one of its batches runs."""
    import shutil

    if isinstance(folder, ObjectPath):
        newest: dict[str, float] = {}  # an object store has no folder times: a folder's newest object's
        for path, _size, mtime in folder.walk_files():
            name = path.relative_to(folder).split("/")[0]
            newest[name] = max(newest.get(name, 0.0), mtime)
        for name, mtime in newest.items():
            if name.startswith("batch-") and mtime < time.time() - hours * 3600:
                (folder / name).rmtree()
        return
    if not folder.is_dir():
        return
    cutoff = time.time() - hours * 3600
    for child in folder.glob("batch-*"):
        try:
            if child.stat().st_mtime < cutoff:
                shutil.rmtree(child, ignore_errors=True)
        except OSError:
            pass


def _landing(config: JobConfig) -> str | None:
    """The landing folder whose linked files the decode tasks skip (DecodePlan.landing)."""
    source = config.source
    if source.type != "files" or source.path is None or source.follow_symlinks:
        return None
    return str(source.path)


def _buckets(spark: SparkSession) -> int:
    """The fold's buckets: two per executor core (Spark's default parallelism), so that a task folds a
    few at a time and an uneven bucket does not hold the stage. Not ``spark.sql.shuffle.partitions``
    (200 unless set): the decode tasks write each bucket of each slice as a record batch of its own."""
    return 2 * max(1, spark.sparkContext.defaultParallelism)


def _spark(config: JobConfig) -> SparkSession:
    """The session of a batch made outside the streaming query (replay, dead-letter retries, a message
    bootstrap): the job's, with the jars its writer needs (a delta-spark job's MERGEs need Delta's)."""
    from replicator.spark import get_spark

    return get_spark(config)


__all__ = ["Engine"]
