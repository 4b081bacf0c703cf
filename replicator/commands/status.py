"""``replicator status``: per table phase, position, lag, dead letters; the last micro-batches."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from typing import TYPE_CHECKING, Any

from replicator.columns import ColumnMap, renamed_columns
from replicator.config import JobConfig
from replicator.kafka_topics import TopicIds
from replicator.model import table_label
from replicator.state import State

if TYPE_CHECKING:
    import pyarrow as pa


def collect_status(config: JobConfig, last_batches: int = 10) -> dict[str, Any]:
    state = State.of(config)
    now = dt.datetime.now(dt.UTC)
    dead_by_table: dict[str, int] = {}
    undecodable: dict[int, int] = {}  # batch id -> its records that did not decode
    dead_total = 0
    discarded_total = 0
    dead = state.table("dead_letters")
    if dead.exists():
        from replicator.commands.deadletters import IDENTITY, read_discards, read_marks

        retried = read_marks(state)  # re-driven by `dead-letters retry`: no longer pending
        discarded = read_discards(state)  # set aside by `dead-letters discard`: counted apart
        for row in dead.read(["database", "table", *IDENTITY]).to_pylist():
            identity = tuple(row[k] for k in IDENTITY)
            if row["table"] is None:  # a record that did not decode at all: no table to count it under
                undecodable[row["batch_id"]] = undecodable.get(row["batch_id"], 0) + 1
            if identity in discarded:
                discarded_total += 1
            if identity in retried or identity in discarded:
                continue
            dead_total += 1
            name = ".".join(p for p in (row["database"], row["table"]) if p) or "(undecodable)"
            dead_by_table[name] = dead_by_table.get(name, 0) + 1
    from replicator.commands.preflight import behind_mirrors

    behind = {b.name: b.message for b in behind_mirrors(config)}  # mirrors whose log lost commits
    tables = []
    for table in sorted(state.tables().values(), key=lambda t: t.id):
        mirror = state.writer(table.mirror)
        exists = mirror.exists()
        rows = mirror.read(["_cdc_seq"]).num_rows if exists else 0
        name = table_label((table.database, table.schema, table.table))
        lag = (now - table.last_event_time).total_seconds() if table.last_event_time else None
        tables.append(
            {
                "table": name,
                "phase": "dropped" if table.dropped else table.phase,
                "rows": rows,
                "snapshot_rows": table.snapshot_rows,
                "last_seq": table.last_seq,
                "horizon": table.truncate_seq,
                "primary_key": list(table.primary_key),
                "last_position": table.last_position,
                "last_event_time": table.last_event_time.isoformat() if table.last_event_time else None,
                "lag_seconds": lag,
                "dead_letters": dead_by_table.get(f"{table.database}.{table.table}", 0),
                "mirror": table.mirror,
                # source column -> mirror column where they differ (replicator.columns)
                "columns": renamed_columns(mirror.schema()) if exists else [],
                "behind": behind.get(name),
            }
        )
    batches = []
    log = state.table("batches")
    if log.exists():
        # The most recent by when they ended: a retry's batch id (10^12 + n) says nothing of its time.
        rows = sorted(log.read().to_pylist(), key=lambda r: (r["finished_at"], r["batch_id"]))[-last_batches:]
        for row in rows:
            row["finished_at"] = row["finished_at"].isoformat()
            row["tables"] = json.loads(row["tables"])
            row["undecodable"] = undecodable.get(row["batch_id"], 0)
            batches.append(row)
    # Batches Spark committed whose apply a run did not finish (trigger.overlap): the next run applies them.
    pending = [batch_id for batch_id, _kind, _inputs in state.pending()]
    return {
        "job": config.name,
        "tables": tables,
        "dead_letters": dead_total,
        "discarded_dead_letters": discarded_total,
        "undecodable_dead_letters": dead_by_table.get("(undecodable)", 0),
        "batches": batches,
        "pending": pending,
        "kafka": kafka_partitions(state),
        # Kafka topics deleted and re-created, read again from their start (fail_on_data_loss: false)
        "kafka_topics_recreated": TopicIds(state.root).events(),
        # Landing-folder entries the stream does not read (hidden, links, other suffixes), as of the last scan
        "skipped_files": state.skipped(),
    }


_UNITS = (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def human_duration(seconds: float | None) -> str:
    """``23 s``, ``4 min 3 s``, ``2 h 5 min``, ``2y 11d`` style: the two largest units, rounded down;
    ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 0:  # an event time ahead of this clock (a producer's clock, a zone set wrong)
        return "-" + human_duration(-seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    left, parts = int(seconds), []
    for unit, size in _UNITS:
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
        if len(parts) == 2 or (parts and not left):
            break
    return " ".join(parts)


def kafka_partitions(state: State) -> list[dict[str, Any]]:
    """Per Kafka topic partition, from the batches' accounts (sources.partitions_schema): the next offset
    to read, the last one read, the broker's newest offset when the last batch ran and the lag then, and
    every range of offsets lost (deleted by Kafka before the job read them; fail_on_data_loss: false)."""
    log = state.table("kafka_partitions")
    if not log.exists():
        return []
    partitions: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(log.read().to_pylist(), key=lambda r: r["batch_id"]):
        p = partitions.setdefault(
            (r["topic"], r["partition"]),
            {
                "topic": r["topic"],
                "partition": r["partition"],
                "last_read": None,
                "lost": [],
                "lost_offsets": 0,
            },
        )
        p.update(next_offset=r["end"], latest=r["latest"], batch_id=r["batch_id"])
        p["lag"] = r["latest"] - r["end"] if r["latest"] is not None else None
        if r["last_read"] is not None:
            p["last_read"] = max(p["last_read"] or -1, r["last_read"])
        if r["lost_from"] is not None:
            p["lost"].append([r["lost_from"], r["lost_to"]])
            p["lost_offsets"] += r["lost_to"] - r["lost_from"]
    return [partitions[k] for k in sorted(partitions)]


def print_status(config: JobConfig, as_json: bool = False, last_batches: int = 10) -> int:
    status = collect_status(config, last_batches)
    if as_json:
        print(json.dumps(status, indent=1, default=str))
        return 0
    from replicator.commands.outcome import plural

    print(
        f"job {status['job']}: {plural(len(status['tables']), 'table')}, "
        f"{plural(status['dead_letters'], 'pending dead letter')}"
        + (f", {status['discarded_dead_letters']:,} discarded" if status["discarded_dead_letters"] else "")
    )
    if status["pending"]:
        ids = ", ".join(str(b) for b in status["pending"])
        print(f"batches left pending by the last run (applied first by the next one): {ids}")
    skipped = status["skipped_files"]
    if skipped and skipped.get("skipped"):
        examples = "; ".join(f"{r}: {', '.join(n)}" for r, n in skipped.get("examples", {}).items())
        print(
            f"files not read in the landing folder: {skipped['skipped']} ({skipped.get('hidden', 0)} hidden, "
            f"{skipped.get('links', 0)} symbolic links, {skipped.get('other', 0)} other) e.g. {examples}"
        )
    print(
        f"{'table':32} {'phase':18} {'rows':>10} {'snapshot':>10} {'dead':>6} {'lag':>12}  "
        "last position @ event time"
    )
    for t in status["tables"]:
        lag = human_duration(t["lag_seconds"])
        print(
            f"{t['table']:32} {t['phase']:18} {t['rows']:>10,} {t['snapshot_rows']:>10,} "
            f"{t['dead_letters']:>6,} {lag:>12}  {t['last_position'] or '-'} @ {t['last_event_time'] or '-'}"
        )
    for t in status["tables"]:
        if t["columns"]:
            print(f"{t['table']}: columns: {', '.join(t['columns'])}")
    for t in status["tables"]:
        if t["behind"]:
            print(f"NOT UP TO DATE: {t['behind']}")
    if status["undecodable_dead_letters"]:
        count = status["undecodable_dead_letters"]
        print(
            f"{'(undecodable records)':32} {plural(count, 'pending dead letter')}: not UTF-8, not JSON or no "
            "known format, so of no table (replicator dead-letters)"
        )
    print("lag: now minus the newest applied source event time (it grows while nothing new arrives)")
    if status["kafka"]:
        print(
            f"{'kafka topic':32} {'partition':>9} {'next offset':>12} {'last read':>10} {'lag':>8}  "
            "lost offsets"
        )
        for p in status["kafka"]:
            lag = p["lag"] if p["lag"] is not None else "-"
            last = p["last_read"] if p["last_read"] is not None else "-"
            lost = ", ".join(f"{a}-{b - 1}" for a, b in p["lost"]) or "none"
            print(f"{p['topic']:32} {p['partition']:>9} {p['next_offset']:>12} {last:>10} {lag:>8}  {lost}")
    for r in status["kafka_topics_recreated"]:
        print(
            f"kafka topic {r['topic']} was deleted and re-created (topic ID {r['old_id']} -> {r['new_id']}): "
            f"read from its start in batch #{r['batch_id']}, {r['at']}"
        )
    print("recent batches:")
    for b in status["batches"]:
        # The accounting rule (docs/operations.md): decoded items = applied + filtered + dead letters.
        items = b["applied"] + b["filtered"] + b["dead_letters"]
        print(
            f"  #{b['batch_id']}: {plural(b['records_in'], 'record')} in, {plural(items, 'item')} = "
            f"{b['applied']:,} applied + {b['filtered']:,} filtered + "
            f"{plural(b['dead_letters'], 'dead letter')}"
            + (f" ({b['undecodable']:,} of them undecodable records)" if b.get("undecodable") else "")
            + f"; {human_duration(b['duration_ms'] / 1000)}"
        )
        partial = _partial_updates(b.get("tables"))
        if partial:
            print(f"    {partial}")
    return 0


_NUMBER = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")


def by_key(data: pa.Table, key: list[str]) -> pa.Table:
    """Rows in the order of their key's values: a key column stored as text whose every value is a number
    (types unknown: Debezium without schemas) orders as numbers (1, 2, 10), not as text (1, 10, 2)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    key = [k for k in key if k in data.column_names]
    if not key or data.num_rows == 0:
        return data
    numeric = [
        k
        for k in key
        if pa.types.is_string(data.schema.field(k).type)
        and all(_NUMBER.fullmatch(v) for v in data[k].to_pylist() if v is not None)
    ]
    if not numeric:
        return data.take(pc.sort_indices(data, [(k, "ascending") for k in key]))
    from decimal import Decimal

    columns = [(k in numeric, data[k].to_pylist()) for k in key]

    def sort_key(i: int) -> tuple[Any, ...]:
        parts: list[Any] = []
        for as_number, values in columns:
            value = values[i]
            parts.append((1,) if value is None else (0, Decimal(value) if as_number else value))
        return tuple(parts)

    return data.take(pa.array(sorted(range(data.num_rows), key=sort_key), pa.int64()))


def _partial_updates(tables: dict[str, Any] | None) -> str | None:
    """The batch's updates that did not carry every column (PostgreSQL's unchanged TOAST values, issue 51)."""
    tables = tables if isinstance(tables, dict) else {}
    kept = sum(t.get("partial_updates", 0) for t in tables.values())
    lost = sum(t.get("unavailable_lost", 0) for t in tables.values())
    if not kept and not lost:
        return None
    return f"{kept:,} partial updates kept unsent values from the mirror" + (
        f", {lost:,} unsent values of rows the mirror did not hold left NULL" if lost else ""
    )


def print_tables(
    config: JobConfig, pattern: str | None = None, limit: int = 50, history: bool = False
) -> int:
    """The mirror tables (``history``: their history tables, docs/history.md), rows ordered by key."""
    from fnmatch import fnmatchcase

    state = State.of(config)
    tables = sorted(state.tables().values(), key=lambda t: t.id)
    names = [table_label((t.database, t.schema, t.table)) for t in tables]
    if not tables:
        print(
            f"replicator: no mirror tables yet (job {config.name}, state {config.state.path})",
            file=sys.stderr,
        )
        return 1
    if pattern and not any(fnmatchcase(name, pattern) for name in names):
        listed = ", ".join(names[:10]) + (" …" if len(names) > 10 else "")
        print(f"replicator: no mirror table matches {pattern!r}; the tables: {listed}", file=sys.stderr)
        return 1
    for table, name in zip(tables, names, strict=True):
        if pattern and not fnmatchcase(name, pattern):
            continue
        if history:
            from replicator.apply.history import history_path

            path = history_path(table.mirror)
            mirror = state.writer(path)
            if not mirror.exists():
                print(f"== {name}: no history table (tables.history does not name it, or nothing yet)")
                continue
            data = mirror.read()
            names = ColumnMap(mirror.schema())
            key = [names.assign(k) for k in table.primary_key]
            data = by_key(data, [*key, "_cdc_valid_from"])
            print(f"== {name} history ({data.num_rows} versions, key {', '.join(table.primary_key)}) {path}")
            frame = data.slice(0, limit).drop_columns(["_cdc_seq"]).to_pandas()
            with __import__("pandas").option_context("display.width", 200, "display.max_columns", 50):
                print(frame.to_string(index=False) if data.num_rows else "(empty)")
            print()
            continue
        mirror = state.writer(table.mirror)
        if not mirror.exists():
            print(f"== {name}: no mirror table ({'dropped' if table.dropped else 'nothing applied yet'})")
            continue
        data = mirror.read()
        schema = mirror.schema()
        if table.primary_key:
            names = ColumnMap(schema)
            key = [names.assign(k) for k in table.primary_key]
            data = by_key(data, key)
        print(f"== {name}  ({data.num_rows} rows, key {', '.join(table.primary_key)}) {table.mirror}")
        if renamed := renamed_columns(schema):
            print(f"columns: {', '.join(renamed)}")
        frame = data.slice(0, limit).drop_columns(["_cdc_seq"]).to_pandas()
        with __import__("pandas").option_context("display.width", 200, "display.max_columns", 50):
            print(frame.to_string(index=False) if data.num_rows else "(empty)")
        print()
    return 0
