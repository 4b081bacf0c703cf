"""``replicator replay``: rebuild mirror tables as of a source time or position from the change log, or
copy a live mirror as of a Delta version / commit time.

The change-log events up to the cut go through the engine's own batch code (keys, barriers, fold,
``TableApplier`` with the schema-change hook) under a replay job (``<job>.replay``) whose target is the
output folder and whose state lives in ``<out>/_replicator_state``: the very code ``mirror`` runs, so a
replay to now equals the live mirror. A table bootstrapped from table files (whose rows are not in the
change log) starts from its mirror's Delta version at the end of the bootstrap.
"""

from __future__ import annotations

import datetime as dt
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pyarrow as pa

from replicator import paths
from replicator.apply.phases import SNAPSHOT_DONE
from replicator.commands.bootstrap import DONE_MARK
from replicator.config import ConfigError, JobConfig
from replicator.dialects.events import decoded_schema
from replicator.logging import get_logger
from replicator.model import table_label
from replicator.positions import horizon, parse_time
from replicator.state import BatchSummary, State, TableState
from replicator.storage import ObjectPath, location

log = get_logger("replicator.commands.replay")

STATE_DIR = "_replicator_state"


class ReplayError(ConfigError):
    """A replay that cannot be made (empty change log, a cut before a table's snapshot, a used target)."""


def _wanted(pattern: str | None, database: str, table: str) -> bool:
    return pattern is None or fnmatchcase(f"{database}.{table}", pattern)


def changelog_events(state: State, pattern: str | None) -> pa.Table | None:
    """The change log's events (Arrow) of the tables wanted, reading only their partitions."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    root = state.root / "changelog"
    if not DeltaTable.is_deltatable(str(root)):
        return None
    log_table = DeltaTable(str(root))
    actions = pa.table(log_table.get_add_actions(flatten=True)).to_pylist()
    # A database-level statement (CREATE DATABASE, USE; Debezium's snapshot writes them) has no table: its
    # partition changes no mirror and is left out.
    pairs = sorted(
        {
            (a.get("partition.database"), a.get("partition.table"))
            for a in actions
            if a.get("partition.database") is not None
            and a.get("partition.table") is not None
            and _wanted(pattern, a.get("partition.database"), a.get("partition.table"))
        }
    )
    if not pairs:
        return decoded_schema().empty_table()
    wanted = None
    for database, table in pairs:
        one = (ds.field("database") == database) & (ds.field("table") == table)
        wanted = one if wanted is None else wanted | one
    events = log_table.to_pyarrow_dataset().to_table(filter=wanted)
    n = events.num_rows
    columns = []
    for f in decoded_schema():
        if f.name in events.column_names:
            columns.append(pc.cast(events[f.name], f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.table(columns, schema=decoded_schema())


def replay_config(config: JobConfig, out: Path, keys: dict[str, list[str]]) -> JobConfig:
    tables = config.tables.model_copy(update={"keys": {**keys, **config.tables.keys}})
    return config.model_copy(
        update={
            "name": f"{config.name}.replay",
            "target": config.target.model_copy(update={"path": out}),
            "state": config.state.model_copy(update={"path": out / STATE_DIR}),
            "changelog": config.changelog.model_copy(update={"enabled": False}),
            "catalog": config.catalog.model_copy(update={"enabled": False}),  # copies, not the mirrors
            "tables": tables,
        }
    )


def _check_target(out: Path | ObjectPath) -> None:
    if out.exists() and any(out.iterdir()):
        raise ReplayError(
            f"--target-path {out} is not empty: replay writes fresh tables (choose a new folder)"
        )


def _bootstrap_base(
    state: TableState, out: Path, cut_seq: str | None, cut_time: dt.datetime | None
) -> str | None:
    """Copy a file-bootstrapped table's mirror as of its bootstrap into ``out``; returns its horizon."""
    from deltalake import DeltaTable, write_deltalake

    from replicator.sinks.delta_rs import read_table

    mirror = DeltaTable(state.mirror)
    done = next((h for h in mirror.history() if DONE_MARK in h), None)
    if done is None:
        return None
    seq = str(done[DONE_MARK])
    label = table_label((state.database, state.schema, state.table))
    if cut_seq is not None and cut_seq < seq:
        raise ReplayError(f"{label}: the cut is before its snapshot position; the change log starts after it")
    base = read_table(DeltaTable(state.mirror, version=int(done["version"])))
    if cut_time is not None and base.num_rows:
        import pyarrow.compute as pc

        snapshot_time = pc.max(base["_cdc_event_time"]).as_py()
        if snapshot_time is not None and cut_time < snapshot_time:
            raise ReplayError(f"{label}: the cut is before its snapshot time {snapshot_time.isoformat()}")
    copy = paths.table_path(out, (state.database, state.schema, state.table))
    write_deltalake(paths.ensure_inside(out, copy, "write a replayed table"), base, mode="overwrite")
    return seq


def replay(
    config: JobConfig,
    out: str | Path,
    *,
    as_of: str | None = None,
    position: str | None = None,
    tables: str | None = None,
) -> BatchSummary:
    """Rebuild the mirrors (``tables``: a glob on ``database.table``) as of ``as_of`` (ISO-8601 or epoch
    ms, inclusive) or ``position`` (inclusive) into ``out/<database>/<table>``."""
    import pyarrow.compute as pc

    from replicator.dialects.events import seq_texts
    from replicator.engine import Engine

    if (as_of is None) == (position is None):
        raise ReplayError("give exactly one of --as-of TIME or --position POS")
    out = location(out).resolve()
    _check_target(out)
    live = State.of(config)
    cut_time = parse_time(as_of) if as_of is not None else None
    cut_seq = horizon(position) if position is not None else None
    events = changelog_events(live, tables)
    if events is None:
        raise ReplayError(f"no change log under {live.root / 'changelog'} (is changelog.enabled off?)")
    events = events.append_column("seq_text", seq_texts(events["seq"]))  # the engine's batch needs it too
    if cut_time is not None:
        cut = pa.scalar(cut_time, pa.timestamp("us", tz="UTC"))
        keep = pc.or_kleene(pc.is_null(events["event_time"]), pc.less_equal(events["event_time"], cut))
    else:
        keep = pc.less_equal(events["seq_text"], pa.scalar(cut_seq, pa.string()))
    events = events.filter(pc.fill_null(keep, False))
    registry = {t: s for t, s in live.tables().items() if _wanted(tables, t[0], t[2])}
    keys = {f"{t[0]}.{t[2]}": list(s.primary_key) for t, s in registry.items() if s.primary_key}
    engine = Engine(replay_config(config, out, keys))
    seeded = []
    for table, known in registry.items():
        if (
            location(known.mirror).exists()
            and (seq := _bootstrap_base(known, out, cut_seq, cut_time)) is not None
        ):
            mirror = str(engine.mirror_path(table))
            seeded.append(
                TableState(
                    *table,
                    mirror=mirror,
                    primary_key=known.primary_key,
                    phase=SNAPSHOT_DONE,
                    truncate_seq=seq,
                    last_seq=seq,
                    last_position=known.last_position,
                )
            )
    if seeded:
        engine.state.save_tables(seeded, 0)
    summary = engine.process_events(events, 0)  # the engine's batch, on already decoded events
    engine.state.record_batch(summary)
    log.info("replayed", target=str(out), as_of=as_of, position=position, tables=sorted(summary.tables))
    return summary


def replay_mirror_version(
    config: JobConfig, out: str | Path, version: str, tables: str | None = None
) -> list[str]:
    """Copy each live mirror (``tables`` glob) as of a Delta version (an integer) or commit time (ISO-8601 /
    epoch ms) into ``out/<database>/<table>``; returns the tables written."""
    from deltalake import DeltaTable, write_deltalake

    from replicator.sinks.delta_rs import read_table

    out = location(out).resolve()
    _check_target(out)
    live = State.of(config)
    at: Any = int(version) if version.strip().isdigit() and len(version.strip()) < 10 else parse_time(version)
    written = []
    for table, known in sorted(live.tables().items(), key=lambda kv: kv[0]):
        if not _wanted(tables, table[0], table[2]) or not DeltaTable.is_deltatable(known.mirror):
            continue
        mirror = DeltaTable(known.mirror)
        try:
            mirror.load_as_version(at)
        except Exception as exc:  # delta-rs raises its own error types for a version out of range
            raise ReplayError(
                f"{table_label(table)}: no version {version!r} of {known.mirror}: {exc}"
            ) from None
        copy = paths.ensure_inside(out, paths.table_path(out, table), "write a replayed table")
        write_deltalake(copy, read_table(mirror), mode="overwrite")
        written.append(table_label(table))
    return written


__all__ = ["ReplayError", "replay", "replay_mirror_version"]
