"""``replicator bootstrap``: load a full snapshot into fresh mirrors, then hand over to ``mirror``.

Two kinds of snapshot (docs/operations.md "Bootstrap"):

- **messages** (DRS INIT_DDL/INIT, Debezium ``r``, any dialect): the folder's files go through the engine
  in batches of files, under the app id ``<job>.bootstrap``; a batch already recorded is skipped on a re-run.
- **table files**: ``<db>/<table>/*.parquet|*.csv`` or a manifest (JSON) naming each table's files, key,
  types and position. Each file is one Delta append carrying the app transaction (``<job>.bootstrap``,
  file index), so a re-run skips the files already in and never duplicates a row. The rows get
  ``_cdc_op = snapshot`` and ``_cdc_seq`` = the position's horizon.

Afterwards each table's horizon (``truncate_seq``) is the declared position: ``mirror`` skips incremental
events at or before it and merges later ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from replicator.apply.phases import INCREMENTAL, LOADING, SNAPSHOT_DONE, SNAPSHOT_LOADING, SNAPSHOT_SCHEMA
from replicator.apply.table import CDC_FIELDS
from replicator.columns import ColumnMap, with_source
from replicator.config import ConfigError, JobConfig, _key_path
from replicator.logging import get_logger
from replicator.model import CDC_EVENT_TIME, CDC_OP, CDC_POSITION, CDC_SEQ
from replicator.paths import description
from replicator.positions import horizon, parse_time
from replicator.sources import FILE_SUFFIXES, message_files
from replicator.state import State, TableState
from replicator.types import column_type, parse_values

log = get_logger("replicator.commands.bootstrap")

TABLE_FILES = (".parquet", ".csv")
DONE_MARK = "replicator.commands.bootstrap"  # commit metadata of a table file snapshot's last commit


class BootstrapError(ConfigError):
    """A snapshot that cannot be loaded (layout, missing key, a mirror that is not fresh)."""


@dataclass
class TableSnapshot:
    database: str
    table: str
    files: list[Path]
    key: list[str]
    format: str = "parquet"
    types: dict[str, str] = field(default_factory=dict)
    position: str | None = None
    event_time: str | None = None

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


def app_id(config: JobConfig) -> str:
    return f"{config.name}.bootstrap"


# ---- table files -------------------------------------------------------------------------------------------
def _key(config: JobConfig, name: str, declared: list[str] | None) -> list[str]:
    key = declared or config.tables.key_for(name)
    if not key:
        raise BootstrapError(
            f"no primary key for {name}: give 'key' in the manifest or tables.keys in the job file"
        )
    return list(key)


class _ManifestModel(BaseModel):
    # Positions and times may be written as JSON numbers (a DRS id, epoch ms): kept as their text.
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


def _readable_position(value: str | None) -> str | None:
    if value is not None:
        horizon(value)  # PositionError (a ValueError) names the forms accepted
    return value


def _readable_time(value: str | None) -> str | None:
    if value is not None:
        parse_time(value)
    return value


class ManifestTable(_ManifestModel):
    """One table of a manifest (docs/operations.md, "Bootstrap")."""

    database: str
    table: str
    files: list[str] | None = Field(None, description="globs relative to the manifest's folder")
    key: list[str] | None = Field(None, description="primary key columns; default: tables.keys")
    format: Literal["parquet", "csv"] | None = None
    types: dict[str, str] = Field(default_factory=dict, description="column -> source type (CSV)")
    position: str | None = None
    event_time: str | None = None

    _position = field_validator("position")(_readable_position)
    _event_time = field_validator("event_time")(_readable_time)

    @field_validator("types")
    @classmethod
    def _known_types(cls, value: dict[str, str]) -> dict[str, str]:
        for column, source_type in value.items():
            if not column_type(source_type).known:
                raise ValueError(f"{column}: unknown source type {source_type!r}")
        return value


class Manifest(_ManifestModel):
    position: str | None = None
    event_time: str | None = None
    tables: list[ManifestTable]

    _position = field_validator("position")(_readable_position)
    _event_time = field_validator("event_time")(_readable_time)


def parse_manifest(data: Any, source: str) -> Manifest:
    """Validate a manifest's JSON value; errors name the file and each key path, one line each, as the job
    file's do (replicator.config.parse_config)."""
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: invalid manifest"]
        for err in exc.errors():
            got = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
            lines.append(f"  {_key_path(err['loc'])}: {err['msg']}{got}")
        raise BootstrapError("\n".join(lines)) from None


def read_manifest(config: JobConfig, path: Path, position: str | None) -> list[TableSnapshot]:
    """``{"position": ..., "event_time": ..., "tables": [{"database", "table", "files": [globs], "key",
    "format", "types", "position", "event_time"}]}``; file globs are relative to the manifest's folder."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BootstrapError(f"{path}: cannot read the manifest: {exc}") from None
    manifest = parse_manifest(data, str(path))
    result = []
    for i, entry in enumerate(manifest.tables):
        database, table = entry.database, entry.table
        files = sorted(
            {
                f
                for pattern in entry.files or [f"{database}/{table}/*"]
                for f in path.parent.glob(pattern)
                if f.suffix in TABLE_FILES
            }
        )
        if not files:
            raise BootstrapError(f"{path}: tables.{i} ({database}.{table}) names no .parquet/.csv file")
        result.append(
            TableSnapshot(
                database,
                table,
                files,
                _key(config, f"{database}.{table}", entry.key),
                entry.format or files[0].suffix[1:],
                {**config.tables.types_for(f"{database}.{table}"), **entry.types},
                entry.position or manifest.position or position,
                entry.event_time or manifest.event_time,
            )
        )
    return result


def scan_folder(config: JobConfig, root: Path, position: str | None) -> list[TableSnapshot]:
    """``<root>/<database>/<table>/*.parquet|*.csv``."""
    result = []
    for folder in sorted(p for p in root.glob("*/*") if p.is_dir()):
        files = sorted(f for f in folder.iterdir() if f.suffix in TABLE_FILES)
        if files:
            database, table = folder.parent.name, folder.name
            key = _key(config, f"{database}.{table}", None)
            types = dict(config.tables.types_for(f"{database}.{table}"))
            result.append(
                TableSnapshot(database, table, files, key, files[0].suffix[1:], types, position=position)
            )
    return result


def read_table_file(snapshot: TableSnapshot, path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    import pyarrow.csv as pcsv

    if not snapshot.types:
        return _no_guessed_floats(pcsv.read_csv(path), snapshot, path)
    # Declared source types (the manifest's, else tables.types): the CSV holds canonical value text, parsed
    # like event values.
    text = pcsv.read_csv(
        path,
        convert_options=pcsv.ConvertOptions(
            column_types=dict.fromkeys(snapshot.types, pa.string()), strings_can_be_null=True
        ),
    )
    _no_guessed_floats(text, snapshot, path)
    columns = {}
    for name in text.column_names:
        target = column_type(snapshot.types.get(name)).arrow
        typed, errors = parse_values(text[name].combine_chunks(), target)
        if errors:
            raise BootstrapError(f"{path}: line {errors[0].row + 2}, column {name!r}: {errors[0].message}")
        columns[name] = typed
    return pa.table(columns)


def _no_guessed_floats(data: pa.Table, snapshot: TableSnapshot, path: Path) -> pa.Table:
    """A CSV column of no declared type that reads as numbers with a fraction would become an approximate
    double: often a DECIMAL column (money), which later events declare exactly. Refused: the type is asked
    for rather than guessed."""
    guessed = [f.name for f in data.schema if pa.types.is_floating(f.type) and f.name not in snapshot.types]
    if guessed:
        raise BootstrapError(
            f"{path}: columns {guessed} hold fractional numbers and have no declared type: a CSV gives none, "
            f"and read as approximate doubles a DECIMAL would lose digits. Declare them (e.g. "
            f"'decimal(10,2)' or 'double') in tables.types of the job file for {snapshot.name}, or in the "
            "manifest's 'types'"
        )
    return data


def with_cdc(data: pa.Table, snapshot: TableSnapshot, seq: str) -> pa.Table:
    n = data.num_rows
    event_time = parse_time(snapshot.event_time) if snapshot.event_time else None
    values = {
        CDC_OP: pa.array(["snapshot"] * n, pa.string()),
        CDC_SEQ: pa.array([seq] * n, pa.string()),
        CDC_EVENT_TIME: pa.array([event_time] * n, pa.timestamp("us", tz="UTC")),
        CDC_POSITION: pa.array([snapshot.position] * n, pa.string()),
    }
    for f in CDC_FIELDS:
        data = data.append_column(f, values[f.name])
    return data


def mirror_columns(data: pa.Table, schema: pa.Schema | None, key: list[str]) -> tuple[pa.Table, list[str]]:
    """A snapshot file's columns (source names) under their mirror names (replicator.columns: the
    mirror's, or given now in the engine's order, the key first), and the key's mirror names."""
    names = ColumnMap(schema if schema is not None else CDC_FIELDS)
    for k in key:
        names.assign(k)
    fields = [with_source(f.with_name(names.assign(f.name)), f.name) for f in data.schema]
    return pa.Table.from_arrays(data.columns, schema=pa.schema(fields)), [names.name(k) for k in key]


def _mirror_schema(data: pa.Table, key: list[str]) -> pa.Schema:
    missing = [k for k in key if k not in data.column_names]
    if missing:
        raise BootstrapError(f"key columns {missing} are not in the snapshot (columns: {data.column_names})")
    fields = [data.schema.field(k).with_nullable(False) for k in key]
    fields += [f for f in data.schema if f.name not in key]
    return pa.schema([*fields, *CDC_FIELDS])


def files_time(files: list[Path]) -> str:
    """The time a snapshot was taken, where none is given (manifest ``event_time``): its oldest file's
    modification time (written by the export), so the history's first versions start then, never at NULL."""
    import datetime as dt

    oldest = min(f.stat().st_mtime for f in files)
    return dt.datetime.fromtimestamp(oldest, dt.UTC).isoformat()


def load_table(
    state: State, config: JobConfig, snapshot: TableSnapshot, restart: bool, bar: Any
) -> TableState:
    """Load one table's files; returns its state (phase ``snapshot_done``, horizon = the position)."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    if not snapshot.position:
        raise BootstrapError(
            f"{snapshot.name}: a snapshot of table files needs --position (or 'position' in "
            "the manifest): the source position the snapshot was taken at"
        )
    if not snapshot.event_time:
        snapshot = replace(snapshot, event_time=files_time(snapshot.files))
    table_id = (snapshot.database, None, snapshot.table)
    # The job's table properties (change data feed, deletion vectors), as the engine creates a mirror with.
    properties = config.target.mirror_properties()
    mirror = state.writer(state.mirror_path(table_id), properties, description(table_id))
    known = state.tables().get(table_id)
    app = app_id(config)
    seq = horizon(snapshot.position)
    # An interrupted bootstrap of ours left the table loading at the same position: resume it.
    ours = known is not None and known.phase in LOADING and known.truncate_seq == seq
    if restart or (mirror.exists() and not ours):
        if mirror.exists() and not restart:
            raise BootstrapError(
                f"{snapshot.name}: the mirror {mirror.path} is neither fresh nor an interrupted bootstrap "
                "at this position; rerun with --restart to replace it"
            )
        tombstones = state.tombstones(table_id)
        state.check_mirror(table_id, mirror.path, "replace (--restart)")
        state.check_state_path(tombstones.path, "replace (--restart)")
        mirror.drop()
        tombstones.drop()
        known = None
    done = mirror.applied_version(app)
    base = TableState(
        snapshot.database,
        None,
        snapshot.table,
        mirror=mirror.path,
        primary_key=tuple(snapshot.key),
        phase=SNAPSHOT_SCHEMA,
        truncate_seq=seq,
    )
    table_state = (
        replace(base, phase=SNAPSHOT_LOADING, snapshot_rows=known.snapshot_rows)
        if (known is not None and done is not None)
        else base
    )
    state.save_tables([table_state], 0)
    for index, path in enumerate(snapshot.files):
        if done is not None and index <= done:
            bar.update(1)
            continue
        data = read_table_file(snapshot, path)
        data, key = mirror_columns(data, mirror.schema() if mirror.exists() else None, snapshot.key)
        if not mirror.exists():
            mirror.create(_mirror_schema(data, key))
        schema = mirror.schema()
        data = with_cdc(data, snapshot, seq)
        data = data.select(schema.names).cast(schema)
        last = index == len(snapshot.files) - 1
        write_deltalake(
            mirror.path,
            data,
            mode="append",
            schema_mode="merge",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app, index)],
                custom_metadata={DONE_MARK: seq} if last else None,
            ),
        )
        if config.tables.history_for(snapshot.name):  # the first version of each row (docs/history.md)
            from replicator.apply.history import markers_root, seed_snapshot
            from replicator.sinks.base import Txn

            truncates = state.writer(markers_root(state, table_id) / "truncates")
            seed_snapshot(state.writer, mirror, data, Txn(app, index), truncates)
        table_state = replace(
            table_state, phase=SNAPSHOT_LOADING, snapshot_rows=table_state.snapshot_rows + data.num_rows
        )
        state.save_tables([table_state], 0)
        bar.update(1)
    from replicator.sinks.delta_rs import count_rows

    rows = count_rows(DeltaTable(mirror.path)) if mirror.exists() else 0  # (deletion vectors applied)
    event_time = parse_time(snapshot.event_time) if snapshot.event_time else None
    final = replace(
        table_state,
        phase=SNAPSHOT_DONE,
        snapshot_rows=rows,
        last_seq=seq,
        last_position=snapshot.position,
        last_event_time=event_time,
    )
    state.save_tables([final], 0)
    log.info("table snapshot loaded", table=snapshot.name, rows=rows, position=snapshot.position)
    return final


# ---- messages ---------------------------------------------------------------------------------------------
def load_messages(
    config: JobConfig,
    files: list[Path],
    position: str | None,
    files_per_batch: int,
    bar: Any,
) -> list[TableState]:
    from replicator.engine import Engine
    from replicator.sources import file_list

    # The catalog is the mirror job's: its start registers what the bootstrap made (docs: "Catalog").
    catalog = config.catalog.model_copy(update={"enabled": False})
    engine = Engine(config.model_copy(update={"name": app_id(config), "catalog": catalog}))
    before = engine.state.tables()
    for batch_id, start in enumerate(range(0, len(files), files_per_batch)):
        chunk = files[start : start + files_per_batch]
        if engine.state.done("batches", batch_id):  # a re-run: this batch is in already
            bar.update(len(chunk))
            continue
        engine.process_files(file_list(chunk), batch_id)
        bar.update(len(chunk))
    seq = horizon(position) if position else None
    finished = []
    for table, known in engine.state.tables().items():
        old = before.get(table)
        if known.phase == INCREMENTAL and old is not None and old.phase == INCREMENTAL:
            continue
        phase = SNAPSHOT_DONE if known.phase in LOADING else known.phase
        update: dict[str, Any] = {"phase": phase}
        if seq and (known.truncate_seq or "") < seq:
            update["truncate_seq"] = seq
        finished.append(replace(known, **update))
    engine.state.save_tables(finished, 0)
    return finished


# ---- entry point ------------------------------------------------------------------------------------------
def bootstrap(
    config: JobConfig,
    snapshot: str | Path,
    position: str | None = None,
    *,
    restart: bool = False,
    progress: bool = True,
    files_per_batch: int = 32,
) -> list[TableState]:
    """Load ``snapshot`` (a folder or a manifest file); returns the loaded tables' states."""
    from tqdm import tqdm

    from replicator.commands.progress import is_terminal

    bar_shown = progress and is_terminal()  # a bar's redraws are noise in a file or a pipe

    root = Path(snapshot)
    if not root.exists():
        raise BootstrapError(f"--snapshot {root}: no such file or folder")
    state = State.of(config)
    manifest = (
        root
        if root.is_file()
        and (root.name == "manifest.json" or (root.suffix == ".json" and _is_manifest(root)))
        else (root / "manifest.json" if (root / "manifest.json").is_file() else None)
    )
    tables = (
        read_manifest(config, manifest, position)
        if manifest
        else (scan_folder(config, root, position) if root.is_dir() else [])
    )
    tables = [t for t in tables if config.tables.selected(t.name)]
    if tables:
        from replicator.spark import writer_session

        writer_session(config)  # a delta-spark job's mirrors (and history tables) are made through Spark
        total = sum(len(t.files) for t in tables)
        with tqdm(total=total, unit="file", desc="bootstrap", disable=not bar_shown) as bar:
            return [load_table(state, config, t, restart, bar) for t in tables]
    files = message_files(root)
    if not files:
        raise BootstrapError(
            f"--snapshot {root}: no table files (<db>/<table>/*.parquet|*.csv, manifest.json) "
            f"and no message files ({', '.join(FILE_SUFFIXES)})"
        )
    if restart:
        raise BootstrapError(
            "--restart replaces mirrors loaded from table files; a message snapshot resumes "
            "where it stopped when run again (delete the mirrors and state to start over)"
        )
    with tqdm(total=len(files), unit="file", desc="bootstrap", disable=not bar_shown) as bar:
        return load_messages(config, files, position, files_per_batch, bar)


def _is_manifest(path: Path) -> bool:
    """A JSON object with a manifest's top-level key (then validated, so another misspelt one is an
    error); a change message or an array of them is not. A file named manifest.json always is one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and not set(data).isdisjoint(Manifest.model_fields)
