"""Where a table's files go: the one mapping from names (database, schema, table) to path components, and
the checks every destructive file operation makes (docs/operations.md "Security and trust").

Names come from messages, which anyone who can write to the source can forge: a name never chooses a path.
:func:`component` encodes a name as one file name that cannot leave its parent folder. Letters and digits
(any script), ``_``, ``-`` and ``$`` stay as they are, so ordinary names keep the paths mirrors had before
this mapping; every other character becomes ``~XX`` per UTF-8 byte (``/`` -> ``~2F``, ``.`` -> ``~2E``,
``~`` -> ``~7E``). Not ``%``: delta-rs and pyarrow decode ``%2F`` in a local path into a ``/``. Names that
Delta or this project give a meaning inside a folder (``_delta_log``, ``_change_data``, a ``__history``
suffix) have that ``_`` escaped too. A component over :data:`MAX_BYTES` bytes keeps a prefix and ends in
``~~`` and a hash of the whole name. Every ``~`` the encoding writes is followed by two hex digits or by
``~`` (only there), so the encoding can be read back and distinct names never share a component.
"""

from __future__ import annotations

import hashlib
import os
import string
import unicodedata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from replicator.storage import ObjectPath, is_uri, location

if TYPE_CHECKING:
    from replicator.model import TableId

ESCAPE = "~"
SAFE = frozenset(string.ascii_letters + string.digits + "_-$")
# File names are at most 255 bytes (ext4, xfs, APFS); a component leaves room for the suffixes written
# beside a mirror (``__history``, ``.replaced-<seq>``: :func:`beside`) and the change log's ``table=``.
MAX_BYTES = 200
HASH_CHARS = 40  # hex digits of SHA-256 after ``~~`` in a shortened component
RESERVED_PREFIXES = ("_delta", "_change")  # Delta's folders inside a table (_delta_log, _change_data, ...)
RESERVED_SUFFIXES = ("__history",)  # apply.history: the history table beside its mirror


class UnmappableName(ValueError):
    """A name that maps to no path (None or empty): its events become dead letters."""


class PathRefused(ValueError):
    """A refusal the commands report in one line (exit 2), like a job file's error. Not a ConfigError:
    this module runs in the decode tasks, which do not import the job file's models (pydantic)."""


class UnsafePath(PathRefused):
    """A file operation refused: its path is not a mirror (or state table) this job owns."""


class StateMismatch(PathRefused):
    """The state names paths outside the job's folders (a copied or moved job folder)."""


def _escaped(ch: str) -> str:
    return "".join(f"{ESCAPE}{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def _kept(ch: str) -> bool:
    if ch in SAFE:
        return True
    # Letters and digits of other scripts stay readable; marks, spaces, symbols and controls are escaped
    # (so a combining sequence never looks like its precomposed letter on a normalizing file system).
    return ord(ch) > 127 and unicodedata.category(ch)[0] in "LN"


def component(name: str | None) -> str:
    """``name`` as one path component (see the module's doc); raises :class:`UnmappableName` for None or
    an empty name."""
    if not isinstance(name, str) or not name:
        raise UnmappableName(f"the name {name!r} cannot name a folder (empty)")
    parts = [ch if _kept(ch) else _escaped(ch) for ch in name]
    if name.startswith(RESERVED_PREFIXES):
        parts[0] = _escaped("_")
    for suffix in RESERVED_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            at = len(name) - len(suffix)
            parts[at] = _escaped(name[at])
    text = "".join(parts)
    if len(text.encode("utf-8")) <= MAX_BYTES:
        return text
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    room, prefix = MAX_BYTES - HASH_CHARS - 2, []
    for part in parts:  # whole characters (never half an escape)
        size = len(part.encode("utf-8"))
        if size > room:
            break
        prefix.append(part)
        room -= size
    return f"{''.join(prefix)}{ESCAPE}{ESCAPE}{digest}"


def table_parts(table: TableId) -> list[str]:
    """The components of a table's folder: database[/schema]/table."""
    database, schema, name = table
    return [component(p) for p in ([database, schema, name] if schema else [database, name])]


def relative_path(table: TableId) -> str:
    """A table's folder relative to target.path (or to state.path's tombstones/history folders)."""
    return "/".join(table_parts(table))


def table_path(root: str | Path | ObjectPath, table: TableId) -> Path | ObjectPath:
    """A table's folder under ``root``: a local folder or, under an object-store prefix, the same components
    as keys (replicator.storage)."""
    return location(root).joinpath(*table_parts(table))


def legacy_parts(table: TableId) -> list[str] | None:
    """The components a table had before this mapping (its raw names), when they differ from today's and
    are plain single folder names without a ``~`` (so that a folder found there can only be this table's:
    today's components without a ``~`` are raw names); else None."""
    database, schema, name = table
    raw = [database, schema, name] if schema else [database, name]
    plain = all(
        isinstance(p, str) and p not in ("", ".", "..") and not set(p) & {"/", "\\", "\x00", "~"} for p in raw
    )
    if not plain or raw == table_parts(table):
        return None
    return raw


def mappable(table: TableId) -> str | None:
    """None when the table's names map to a folder, else why not (a dead letter's error)."""
    try:
        table_parts(table)
    except UnmappableName as exc:
        return f"table {table!r}: {exc}; its events cannot be mirrored"
    return None


# Spark's session catalog with a Hive metastore takes names of ASCII letters, digits and ``_`` only, and
# keeps them in lower case (Spark's error INVALID_SCHEMA_OR_RELATION_NAME; Hive's metastore folds case).
CATALOG_SAFE = frozenset(string.ascii_lowercase + string.digits + "_")
CATALOG_MAX = 128  # the Hive metastore's column for a table's name is 128 characters (TBLS.TBL_NAME)


def catalog_name(name: str | None) -> str:
    """``name`` as a catalog identifier: lower case as it is when it has only letters, digits and ``_``;
    else its letters and digits, ``_`` for each run of anything else, and ``_`` and 8 hex digits of the
    name's hash, so that two names differing in what was replaced stay apart (``a.b`` and ``a b``). Names
    that still meet (``Orders`` and ``orders``) are kept apart by the catalog's own check: an entry that
    points at another table's folder is never replaced (replicator.catalog). Raises
    :class:`UnmappableName` for None or an empty name."""
    if not isinstance(name, str) or not name:
        raise UnmappableName(f"the name {name!r} cannot name a catalog table (empty)")
    lower = name.lower()
    if set(lower) <= CATALOG_SAFE and len(lower) <= CATALOG_MAX:
        return lower
    text, gap = [], False
    for ch in lower:
        if ch in CATALOG_SAFE:
            text.append(ch)
            gap = False
        elif not gap:
            text.append("_")
            gap = True
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{''.join(text).strip('_')[: CATALOG_MAX - 9]}_{digest}"


def description(table: TableId) -> str:
    """A mirror's Delta description: its real names (the folder holds them encoded), as JSON."""
    import json

    database, schema, name = table
    return json.dumps({"database": database, "schema": schema, "table": name}, ensure_ascii=True)


def beside(path: str | Path, suffix: str) -> str:
    """``path`` with ``suffix`` added to its last component (a table set aside: ``.replaced-<seq>``), kept
    within a file name's 255 bytes by shortening the component the way :func:`component` does."""
    path = location(path)
    name = path.name + suffix
    if len(name.encode("utf-8")) <= 255:
        return str(path.with_name(name))
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    keep = path.name.encode("utf-8")[: 255 - HASH_CHARS - 2].decode("utf-8", "ignore")
    return str(path.with_name(f"{keep}{ESCAPE}{ESCAPE}{digest}"))


# ---- checks ------------------------------------------------------------------------------------------------
def _real(path: str | Path | ObjectPath) -> str:
    if is_uri(path):
        return str(location(path))  # normalized; a ``..`` was refused when it was made
    return os.path.realpath(os.path.abspath(path))


def inside(root: str | Path | ObjectPath, path: str | Path | ObjectPath) -> bool:
    """Whether ``path`` lies strictly under ``root``, both resolved (links followed, ``..`` folded). An
    object-store key lies under a prefix of the same scheme and bucket; never under a local folder."""
    if is_uri(root) or is_uri(path):
        if not (is_uri(root) and is_uri(path)):
            return False
        try:
            return location(path).inside(location(root))  # type: ignore[union-attr]
        except ValueError:  # a ``..`` or an unknown scheme: not inside anything
            return False
    base, real = _real(root), _real(path)
    return real != base and os.path.commonpath([base, real]) == base


def ensure_inside(root: str | Path, path: str | Path, action: str) -> str:
    """``path`` when it lies strictly under ``root``; else :class:`UnsafePath` (nothing is done)."""
    if not inside(root, path):
        raise UnsafePath(
            f"refused to {action} {path}: it is not inside {root} (resolved: {_real(path)}); "
            "a job only changes the files of its own mirrors and state"
        )
    return str(path)


def relative_under(root: str | Path, path: str | Path) -> str | None:
    """``path`` relative to ``root`` (POSIX text) when it lies under it (lexically or resolved), else None."""
    if is_uri(root) or is_uri(path):
        return location(path).relative_to(location(root)) if inside(root, path) else None  # type: ignore[union-attr,arg-type]
    # The resolved pair only when the lexical one fails: realpath cost ~1 ms a call (the registry's save
    # asks once per table of the batch).
    for resolve in (os.path.normpath, _real):
        base, target = resolve(root), resolve(path)
        if target != base and os.path.commonpath([base, target]) == base:
            return PurePosixPath(Path(os.path.relpath(target, base))).as_posix()
    return None


def safe_relative(text: str) -> bool:
    """A stored relative path that stays under its root: no absolute path, no ``..``, no empty part."""
    parts = PurePosixPath(text).parts
    return bool(parts) and not os.path.isabs(text) and all(p not in ("", ".", "..") for p in parts)


def nested(a: TableId, b: TableId) -> bool:
    """Whether one table's folder would lie inside the other's (``db.t`` and ``db.t.x`` of a schema ``t``)."""
    first, second = table_parts(a), table_parts(b)
    n = min(len(first), len(second))
    return first != second and first[:n] == second[:n]


__all__ = [
    "MAX_BYTES",
    "PathRefused",
    "StateMismatch",
    "UnmappableName",
    "UnsafePath",
    "beside",
    "catalog_name",
    "component",
    "description",
    "ensure_inside",
    "inside",
    "legacy_parts",
    "mappable",
    "nested",
    "relative_path",
    "relative_under",
    "safe_relative",
    "table_parts",
    "table_path",
]
