"""``replicator status``: per table phase, position, lag, dead letters; the last micro-batches."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from replicator.config import JobConfig
from replicator.model import table_label
from replicator.state import State


def collect_status(config: JobConfig, last_batches: int = 10) -> dict[str, Any]:
    state = State.of(config)
    now = dt.datetime.now(dt.UTC)
    dead_by_table: dict[str, int] = {}
    dead_total = 0
    dead = state.table("dead_letters")
    if dead.exists():
        from replicator.commands.deadletters import IDENTITY, read_marks

        retried = read_marks(state)  # re-driven by `dead-letters retry`: no longer pending
        for row in dead.read(["database", "table", *IDENTITY]).to_pylist():
            if tuple(row[k] for k in IDENTITY) in retried:
                continue
            dead_total += 1
            name = ".".join(p for p in (row["database"], row["table"]) if p) or "(undecodable)"
            dead_by_table[name] = dead_by_table.get(name, 0) + 1
    tables = []
    for table in sorted(state.tables().values(), key=lambda t: t.id):
        mirror = state.writer(table.mirror)
        rows = mirror.read(["_cdc_seq"]).num_rows if mirror.exists() else 0
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
            }
        )
    batches = []
    log = state.table("batches")
    if log.exists():
        rows = sorted(log.read().to_pylist(), key=lambda r: r["batch_id"])[-last_batches:]
        for row in rows:
            row["finished_at"] = row["finished_at"].isoformat()
            row["tables"] = json.loads(row["tables"])
            batches.append(row)
    # Batches Spark committed whose apply a run did not finish (trigger.overlap): the next run applies them.
    pending = [batch_id for batch_id, _kind, _inputs in state.pending()]
    return {
        "job": config.name,
        "tables": tables,
        "dead_letters": dead_total,
        "batches": batches,
        "pending": pending,
    }


def print_status(config: JobConfig, as_json: bool = False, last_batches: int = 10) -> int:
    status = collect_status(config, last_batches)
    if as_json:
        print(json.dumps(status, indent=1, default=str))
        return 0
    print(f"job {status['job']}: {len(status['tables'])} tables, {status['dead_letters']} dead letters")
    if status["pending"]:
        ids = ", ".join(str(b) for b in status["pending"])
        print(f"batches left pending by the last run (applied first by the next one): {ids}")
    print(
        f"{'table':32} {'phase':18} {'rows':>10} {'snapshot':>10} {'dead':>6} {'lag(s)':>10}  "
        "last position @ event time"
    )
    for t in status["tables"]:
        lag = f"{t['lag_seconds']:.0f}" if t["lag_seconds"] is not None else "-"
        print(
            f"{t['table']:32} {t['phase']:18} {t['rows']:>10} {t['snapshot_rows']:>10} "
            f"{t['dead_letters']:>6} {lag:>10}  {t['last_position'] or '-'} @ {t['last_event_time'] or '-'}"
        )
    print("recent batches:")
    for b in status["batches"]:
        print(
            f"  #{b['batch_id']}: {b['records_in']} records, {b['events']} events, {b['applied']} applied, "
            f"{b['filtered']} filtered, {b['dead_letters']} dead letters, {b['duration_ms']} ms"
        )
    return 0


def print_tables(config: JobConfig, pattern: str | None = None, limit: int = 50) -> int:
    from fnmatch import fnmatchcase

    import pyarrow.compute as pc

    state = State.of(config)
    for table in sorted(state.tables().values(), key=lambda t: t.id):
        name = table_label((table.database, table.schema, table.table))
        if pattern and not fnmatchcase(name, pattern):
            continue
        mirror = state.writer(table.mirror)
        if not mirror.exists():
            print(f"== {name}: no mirror table ({'dropped' if table.dropped else 'nothing applied yet'})")
            continue
        data = mirror.read()
        if table.primary_key:
            data = data.take(pc.sort_indices(data, [(k, "ascending") for k in table.primary_key]))
        print(f"== {name}  ({data.num_rows} rows, key {', '.join(table.primary_key)}) {table.mirror}")
        frame = data.slice(0, limit).drop_columns(["_cdc_seq"]).to_pandas()
        with __import__("pandas").option_context("display.width", 200, "display.max_columns", 50):
            print(frame.to_string(index=False) if data.num_rows else "(empty)")
        print()
    return 0
