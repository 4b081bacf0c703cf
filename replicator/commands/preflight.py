"""Checks of the job's state before a run starts: damaged files named, lost mirror commits found.

- Spark's checkpoint (``<state.path>/checkpoint``): ``metadata`` and the newest files of ``offsets/``,
  ``commits/`` and each ``sources/<n>/`` log: a version line, then JSON lines. A truncated one made Spark
  fail with misleading errors ("Multiple streaming queries...") that did not name it.
- Delta tables (the state's and the mirrors under ``target.path``): the newest ``_delta_log/*.json``
  commit and ``_last_checkpoint`` parse, each line a JSON object (a truncated one made delta-rs report a
  "concurrent update" or a parse error without the file).
- Each mirror the registry recorded a batch for (TableState.last_batch) holds that batch's app
  transaction in its log: a newest log file deleted by hand lost its changes, and a run that went on
  would have left them out for good (apply.table.TableApplier.check_behind does the same per batch).

Each problem stops the command with :class:`~replicator.errors.StateDamaged`, naming the file and how to
recover (docs/operations.md, "Recovering from damaged state").
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from replicator.apply.table import behind_message
from replicator.config import JobConfig
from replicator.errors import StateDamaged
from replicator.jsonl import is_blank, split_lines
from replicator.logging import get_logger
from replicator.model import table_label
from replicator.state import State, TableState
from replicator.storage import ObjectPath, location

log = get_logger("replicator.commands.preflight")

RECOVER = 'docs/operations.md, "Recovering from damaged state"'


def check_state(config: JobConfig) -> None:
    """Every check above; raises StateDamaged at the first problem."""
    root = location(config.state.path)
    problem = check_checkpoint(root / "checkpoint")  # type: ignore[arg-type]
    if problem is None:
        for table in delta_tables(root, location(config.target.path)):  # type: ignore[arg-type]
            problem = check_delta_log(table)
            if problem is not None:
                break
    if problem is not None:
        raise StateDamaged(problem)
    check_mirrors(config)
    for warning in key_warnings(config):
        log.warning("tables.keys names a column the mirror lacks", warning=warning)


# ---- Spark's checkpoint -----------------------------------------------------------------------------------


def _numbered(folder: Path) -> list[Path]:
    """A metadata log's batch files (``N``, ``N.compact``) newest first; Spark's temporary and .crc files
    (hidden names) left out."""
    files = []
    for entry in folder.iterdir() if folder.is_dir() else ():
        head = entry.name.split(".", 1)[0]
        if entry.is_file() and head.isdigit() and not entry.name.startswith("."):
            files.append((int(head), entry))
    return [path for _n, path in sorted(files, reverse=True)]


def _log_file_problem(path: Path, json_lines: int) -> str | None:
    """A Spark metadata log file: ``v<N>`` (after the NUL byte the Kafka source's first file starts with),
    then at least ``json_lines`` lines, each JSON (or ``-``, a source without an offset)."""
    try:
        text = path.read_bytes().lstrip(b"\x00").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read ({exc})"
    lines = split_lines(text)
    if not lines or not lines[0].startswith("v") or not lines[0][1:].isdigit():
        return "has no version line (empty or truncated)"
    body = lines[1:]
    for number, line in enumerate(body, start=2):
        if line.strip() == "-":
            continue
        try:
            json.loads(line)
        except ValueError:
            return f"line {number} is not JSON (truncated?)"
    if len(body) < json_lines:
        return f"has {len(body)} entries, expected at least {json_lines} (truncated?)"
    return None


def check_checkpoint(checkpoint: Path) -> str | None:
    if not checkpoint.is_dir():
        return None
    checks: list[tuple[Path, int]] = []
    if (checkpoint / "metadata").exists():
        metadata = checkpoint / "metadata"
        try:
            json.loads(split_lines(metadata.read_text(encoding="utf-8"))[0])
        except (OSError, ValueError, IndexError):
            return _checkpoint_message(metadata, "is not a JSON line (truncated?)")
    # offsets/N: metadata and one offset per source; commits/N: one line; sources/<n>/N: a file or range
    checks += [(p, 2) for p in _numbered(checkpoint / "offsets")[:2]]
    checks += [(p, 1) for p in _numbered(checkpoint / "commits")[:2]]
    sources = checkpoint / "sources"
    for source in sorted(sources.iterdir()) if sources.is_dir() else ():
        checks += [(p, 1) for p in _numbered(source)[:1]]
    for path, lines in checks:
        problem = _log_file_problem(path, lines)
        if problem is not None:
            return _checkpoint_message(path, problem)
    return None


def _checkpoint_message(path: Path, problem: str) -> str:
    return (
        f"damaged checkpoint file {path}: {problem}. Restore it from a backup, or remove it together with "
        f"the newer files of offsets/, commits/ and sources/ so that Spark plans that batch again ({RECOVER})"
    )


# ---- Delta logs -------------------------------------------------------------------------------------------


def delta_tables(*roots: Path) -> list[Path]:
    """The Delta tables (folders with a ``_delta_log``) under the roots, without walking into them."""
    found = []
    for root in roots:
        if isinstance(root, ObjectPath):  # keys, not folders: a table is a prefix holding ``_delta_log/``
            skip = ("checkpoint", "tmp", "pending")
            tables = {
                str(path).split("/_delta_log/", 1)[0]
                for path, _size, _mtime in root.walk_files()
                if "/_delta_log/" in str(path) and path.relative_to(root).split("/", 1)[0] not in skip
            }
            found.extend(ObjectPath(t) for t in tables if ObjectPath(t) != root)  # type: ignore[misc]
            continue
        if not root.is_dir():
            continue
        for folder, dirs, _files in os.walk(root):
            if "_delta_log" in dirs:
                found.append(Path(folder))
                dirs[:] = []
                continue
            dirs[:] = [d for d in dirs if d not in ("checkpoint", "tmp", "pending")]
    return sorted(found, key=str)


def check_delta_log(table: Path) -> str | None:
    """The newest commit (``NNN.json``) and ``_last_checkpoint`` of a Delta table: each line a JSON object."""
    folder = table / "_delta_log"
    listed = folder.iterdir() if folder.is_dir() else ()
    commits = sorted((p for p in listed if p.name.endswith(".json") and p.name[:-5].isdigit()), key=str)
    files = commits[-1:]
    if (folder / "_last_checkpoint").exists():
        files.append(folder / "_last_checkpoint")
    for path in files:
        try:
            lines = split_lines(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            return _delta_message(table, path, f"cannot be read ({exc})")
        if all(is_blank(line) for line in lines):
            return _delta_message(table, path, "is empty")
        for number, line in enumerate(lines, start=1):
            if is_blank(line):
                continue
            try:
                action = json.loads(line)
            except ValueError:
                return _delta_message(table, path, f"line {number} is not JSON (truncated?)")
            if not isinstance(action, dict):
                return _delta_message(table, path, f"line {number} is not a JSON object")
    return None


def _delta_message(table: Path, path: Path, problem: str) -> str:
    if path.name == "_last_checkpoint":
        fix = "remove it (Delta then reads the log from its JSON commits)"
    else:
        fix = (
            "restore it from a backup, or remove it: the table goes back one version, and the next run "
            "finds a mirror behind (or the state table's batch is redone)"
        )
    return f"damaged Delta log file {path} of the table {table}: {problem}. To recover, {fix} ({RECOVER})"


# ---- mirrors behind their recorded batch ------------------------------------------------------------------


@dataclass(frozen=True)
class Behind:
    """A mirror whose log holds an older batch (``done``) than the registry recorded for it (``state``)."""

    name: str
    state: TableState
    done: int | None

    @property
    def message(self) -> str:
        s = self.state
        assert s.last_batch is not None and s.last_app is not None
        return behind_message(self.name, s.mirror, self.done, s.last_batch, s.last_app)


def behind_mirrors(config: JobConfig) -> list[Behind]:
    """The mirrors whose log holds an older batch than the registry recorded for them."""
    from concurrent.futures import ThreadPoolExecutor

    state = State.of(config)  # registry paths are relative to target.path: resolved by State.tables()
    writer = state.writer
    tables = [t for t in state.tables().values() if not t.dropped and t.last_batch is not None and t.last_app]

    def one(table: TableState) -> Behind | None:
        mirror = writer(table.mirror)
        if not mirror.exists():
            return None
        done = mirror.applied_version(str(table.last_app))
        if done is not None and table.last_batch is not None and done >= table.last_batch:
            return None
        return Behind(table_label((table.database, table.schema, table.table)), table, done)

    with ThreadPoolExecutor(max_workers=8) as pool:  # a Delta log read each: many tables start in parallel
        return [b for b in pool.map(one, tables) if b is not None]


def check_mirrors(config: JobConfig) -> None:
    behind = behind_mirrors(config)
    if behind:
        for other in behind[1:]:
            log.error("mirror behind", error=other.message)
        more = f" (and {len(behind) - 1} more mirrors: see the log)" if behind[1:] else ""
        raise StateDamaged(behind[0].message + more)


# ---- tables.keys against the mirrors ----------------------------------------------------------------------


def key_warnings(config: JobConfig) -> list[str]:
    """The mirrors a ``tables.keys`` entry applies to whose columns lack one of its key columns: their
    events that carry no key of their own will be dead letters naming the column (fold.arrow.keyless).
    Known only for tables the job has mirrored already; a new table's columns are known once its events
    come."""
    from concurrent.futures import ThreadPoolExecutor

    if not config.tables.keys:
        return []
    state = State.of(config)
    writer = state.writer
    keyed = []
    for table in state.tables().values():
        key = config.tables.key_for(f"{table.database}.{table.table}")
        if key and not table.dropped:
            keyed.append((table, key))

    def one(item: tuple[TableState, list[str]]) -> str | None:
        table, key = item
        mirror = writer(table.mirror)
        if not mirror.exists():
            return None
        from replicator.columns import ColumnMap

        names = ColumnMap(mirror.schema())  # (the key names source columns: replicator.columns)
        missing = [c for c in key if c not in names]
        if not missing:
            return None
        name = table_label((table.database, table.schema, table.table))
        return (
            f"tables.keys gives {name} the key {key}, but its mirror has no column {missing[0]!r}: its "
            f"events that carry no key of their own will be dead letters (docs/configuration.md, tables.keys)"
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [w for w in pool.map(one, keyed) if w is not None]
