"""Mirrors (and history tables) registered as external Delta tables in Spark's session catalog, so that a
downstream user reads ``spark.table("shop.orders")`` without knowing paths (docs/configuration.md,
"Catalog").

The registry (replicator.state) is the truth; the catalog follows it. After each batch, :meth:`Catalog.sync`
compares the registry's live mirrors with what this process registered: an entry is created for a mirror
that has none (``CREATE TABLE IF NOT EXISTS ... USING DELTA LOCATION``), and the entry of a table dropped or
renamed away is dropped when it still points at that table's folder. Dropping an external table's entry
leaves its files: the engine's own drop policy (schema_evolution) decides those. A restart checks each entry
once and creates only what is missing, so nothing is registered twice.

Names from messages reach the catalog only through :func:`replicator.paths.catalog_name` (letters, digits
and ``_``) and are quoted with backticks besides. An entry that points at another folder than the mirror's
(another table whose name maps to the same catalog name, or a table a user made) is never replaced: it is
refused with a warning.

The catalog is metadata beside the mirrors: a registration runs after the batch's mirrors and registry are
committed, so a catalog that fails never changes a mirror. ``catalog.on_error`` decides what the batch does
then: ``warn`` (default) logs and retries at the next batch, ``fail`` fails the batch (its restart skips the
mirrors that hold it, exactly once, and registers again).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from replicator import paths
from replicator.apply.history.table import SUFFIX as HISTORY_SUFFIX
from replicator.apply.history.table import history_path
from replicator.errors import CatalogFailed
from replicator.logging import get_logger
from replicator.model import table_label
from replicator.sinks.base import sql_string

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from replicator.config import JobConfig
    from replicator.model import TableId
    from replicator.state import TableState

log = get_logger("replicator.catalog")

Entry = tuple[str, str]  # (catalog database, table): catalog identifiers (paths.catalog_name)
Wanted = dict[Entry, list[tuple[str, str]]]  # entry -> [(a live mirror's location, its table's label)]
Gone = tuple[Entry, str, str]  # a dropped table's entry, its location, its label


def quote(name: str) -> str:
    """A Spark SQL identifier: in backticks, a backtick doubled."""
    return "`" + name.replace("`", "``") + "`"


def database_of(config: JobConfig, table: TableId) -> str:
    """The catalog database of a table: the prefix, the source database (and schema, by ``naming``)."""
    database, schema, _name = table
    name = f"{database}_{schema}" if schema and config.catalog.naming == "database_schema" else database
    return paths.catalog_name(config.catalog.database_prefix + name)


def entries(config: JobConfig, state: TableState) -> list[tuple[Entry, str]]:
    """The catalog entries of one registry table, with their locations: its mirror, and its history table
    when the job keeps one (``catalog.history``)."""
    database = database_of(config, state.id)
    name = paths.catalog_name(state.table)
    found = [((database, name), state.mirror)]
    if config.catalog.history and config.tables.history_for(f"{state.database}.{state.table}"):
        found.append(((database, name + HISTORY_SUFFIX), history_path(state.mirror)))
    return found


def same_location(stored: str, location: str) -> bool:
    """Whether the catalog's location (``file:/x``, ``s3a://b/p/``) names the folder ``location``."""

    def normal(text: str) -> str:
        parsed = urlparse(text)
        if parsed.scheme in ("", "file"):
            return os.path.normpath(parsed.path if parsed.scheme else text)
        scheme = "s3" if parsed.scheme in ("s3a", "s3n") else parsed.scheme
        return f"{scheme}://{parsed.netloc}{os.path.normpath(parsed.path or '/')}"

    return normal(stored) == normal(location)


def is_delta(location: str) -> bool:
    """Whether a Delta table is there yet (a table known only from DDL may have no mirror)."""
    if "://" in location and not location.startswith("file:"):
        from replicator.sinks.delta_rs import handle

        try:
            handle(location)
        except Exception:
            return False
        return True
    folder = urlparse(location).path if "://" in location else location
    return os.path.isdir(os.path.join(folder, "_delta_log"))


@dataclass
class Synced:
    """What one :meth:`Catalog.sync` did, as ``database.table`` names."""

    registered: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # one line each: the name and why
    failed: list[str] = field(default_factory=list)  # one line each: the name and the catalog's error

    def lines(self) -> list[str]:
        return (
            [f"registered {n}" for n in self.registered]
            + [f"dropped {n}" for n in self.dropped]
            + [f"refused {n}" for n in self.refused]
            + [f"failed {n}" for n in self.failed]
        )


class Catalog:
    """The job's catalog entries, kept in step with the registry by :meth:`sync` on the driver."""

    def __init__(self, config: JobConfig, spark: SparkSession) -> None:
        self.config = config
        self.spark = spark
        # What this process found or made: entry -> location (None: confirmed absent). Each entry is looked
        # up in the catalog once per process, then only when the registry changes it.
        self._known: dict[Entry, str | None] = {}
        self._databases: set[str] = set()
        self._refusals: set[str] = set()  # logged once per process (a refusal stands until names change)

    def _check_session(self) -> None:
        implementation = self.spark.conf.get("spark.sql.catalogImplementation", "in-memory")
        if implementation != "hive":
            raise CatalogFailed(
                "catalog.enabled, but the Spark session was started without Hive support "
                f"(spark.sql.catalogImplementation={implementation}): a session started before the job "
                "(spark-submit) needs --conf spark.sql.catalogImplementation=hive and Delta Lake's catalog "
                "(docs/configuration.md, Catalog)"
            )

    def _external(self):  # type: ignore[no-untyped-def]
        """Spark's external catalog (the metastore): entries read and dropped without loading the Delta
        table they point at, which may be gone (a renamed mirror's old folder)."""
        return self.spark._jsparkSession.sessionState().catalog().externalCatalog()  # type: ignore[attr-defined]

    def location(self, entry: Entry) -> str | None:
        """Where the catalog's entry points, None when there is none."""
        database, table = entry
        external = self._external()
        if not external.databaseExists(database) or not external.tableExists(database, table):
            return None
        found = external.getTable(database, table)
        location = found.storage().locationUri()
        return str(location.get().toString()) if location.isDefined() else ""

    def _drop(self, entry: Entry) -> None:
        """Remove an external table's entry; its files stay (the engine's drop policy decides those)."""
        database, table = entry
        external = self._external()
        kind = str(external.getTable(database, table).tableType().name())
        if kind != "EXTERNAL":
            raise ValueError(f"the entry is a {kind} table, not an external one: left as it is")
        external.dropTable(database, table, True, False)  # ignoreIfNotExists, no purge

    def _register(self, entry: Entry, location: str) -> bool:
        database, table = entry
        if database not in self._databases:
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote(database)}")
            self._databases.add(database)
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {quote(database)}.{quote(table)} USING DELTA "
            f"LOCATION {sql_string(location)}"
        )
        return True

    def sync(self, tables: Mapping[TableId, TableState], fail: bool | None = None) -> Synced:
        """Bring the catalog in step with ``tables`` (the registry). ``fail``: raise :class:`CatalogFailed`
        when an entry could not be made or dropped (default: ``catalog.on_error``)."""
        done = Synced()
        self._check_session()
        wanted, gone = self._plan(tables, done)
        # Entries of tables dropped or renamed away first: a new table may take the name.
        stopped = self._drop_gone(gone, wanted, done)
        stopped = self._register_wanted(wanted, done, stopped)
        for line in done.refused:
            if line not in self._refusals:
                self._refusals.add(line)
                log.warning("catalog entry refused", detail=line)
        if done.failed:
            log.warning("catalog entries not made (tried again at the next batch)", failed=done.failed[:20])
            if self.config.catalog.on_error == "fail" if fail is None else fail:
                raise CatalogFailed(f"catalog: {len(done.failed)} entries not made: {done.failed[0]}") from (
                    stopped
                )
        return done

    def _plan(self, tables: Mapping[TableId, TableState], done: Synced) -> tuple[Wanted, list[Gone]]:
        """The entries the live tables want (several for one entry: names that meet in the catalog, such
        as ``Orders`` and ``orders``; one keeps it) and those of tables dropped or renamed away."""
        wanted: Wanted = {}
        gone: list[Gone] = []
        for state in sorted(tables.values(), key=lambda s: table_label(s.id)):
            label = table_label(state.id)
            try:
                found = entries(self.config, state)
            except paths.UnmappableName as exc:
                done.refused.append(f"{label}: {exc}")
                continue
            for entry, location in found:
                if state.dropped:
                    gone.append((entry, location, label))
                else:
                    wanted.setdefault(entry, []).append((location, label))
        return wanted, gone

    def _drop_gone(self, gone: list[Gone], wanted: Wanted, done: Synced) -> BaseException | None:
        """Drop the entries that still point at a gone table's folder; returns the error that stopped it
        (the catalog itself failing: the rest waits for the next sync)."""
        from pyspark.errors import AnalysisException

        for entry, location, label in gone:
            if entry in self._known and self._known[entry] is None:
                continue
            if any(same_location(other, location) for other, _ in wanted.get(entry, [])):
                continue
            name = ".".join(entry)
            try:
                stored = self.location(entry)
                if stored is not None and same_location(stored, location):
                    self._drop(entry)
                    done.dropped.append(name)
                    log.info("catalog entry dropped", entry=name, table=label)
                self._known[entry] = None if stored is None or same_location(stored, location) else stored
            except (AnalysisException, ValueError) as exc:
                done.failed.append(f"{name} ({label}): {_first_line(exc)}")
            except Exception as exc:
                done.failed.append(f"{name} ({label}): {_first_line(exc)}")
                return exc
        return None

    def _register_wanted(
        self, wanted: Wanted, done: Synced, stopped: BaseException | None
    ) -> BaseException | None:
        """Register each live mirror that has no entry yet; returns the error that stopped it."""
        from pyspark.errors import AnalysisException

        for entry, candidates in wanted.items():
            name = ".".join(entry)
            if stopped is not None:
                done.failed += [f"{name} ({label}): not tried, the catalog failed" for _, label in candidates]
                continue
            known = self._known.get(entry)
            holder = next((c for c in candidates if known is not None and same_location(known, c[0])), None)
            try:
                if holder is None:
                    holder = self._claim(entry, candidates, done)
                    if holder is None:
                        continue
            except AnalysisException as exc:
                done.failed.append(f"{name} ({candidates[0][1]}): {_first_line(exc)}")
                continue
            except Exception as exc:
                stopped = exc
                done.failed.append(f"{name} ({candidates[0][1]}): {_first_line(exc)}")
                continue
            done.refused += [
                f"{name} ({label}): the name is {holder[1]}'s entry; {label} is not registered"
                for location, label in candidates
                if location != holder[0]
            ]
        return stopped

    def _claim(self, entry: Entry, candidates: list[tuple[str, str]], done: Synced) -> tuple[str, str] | None:
        """Which candidate holds the entry: the one it points at, else the first, registered now; None when
        no candidate has a mirror yet (a table known from DDL only) or the entry points elsewhere."""
        name = ".".join(entry)
        ready = [c for c in candidates if is_delta(c[0])]
        if not ready:
            return None
        stored = self.location(entry)
        holder = next((c for c in ready if stored and same_location(stored, c[0])), None)
        if stored is None:
            holder = ready[0]
            self._register(entry, holder[0])
            done.registered.append(name)
            log.info("catalog entry registered", entry=name, table=holder[1], location=holder[0])
        elif holder is not None:
            done.present.append(name)
        else:
            done.refused += [
                f"{name} ({label}): the catalog's entry points at {stored}, not at the mirror {location}; "
                "left as it is"
                for location, label in ready
            ]
            self._known[entry] = stored
            return None
        self._known[entry] = holder[0]
        return holder


def _first_line(exc: BaseException) -> str:
    """The error's message: for one from the JVM, its exception's line rather than py4j's preamble."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    java = [line.lstrip(": ") for line in lines if line.startswith(": ")]
    return (java or lines or [type(exc).__name__])[0][:300]


def sync_all(config: JobConfig, spark: SparkSession, tables: Iterable[TableState]) -> Synced:
    """Register every mirror the registry owns (``replicator catalog sync``); fails on any entry not made."""
    return Catalog(config, spark).sync({t.id: t for t in tables}, fail=True)
