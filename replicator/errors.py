"""Errors that stop a batch, raised by the stages and reported by the commands."""

from __future__ import annotations


class RecordFailed(RuntimeError):
    """``on_error: fail``: a record could not be applied; the message names it."""


class SchemaChangeFailed(RecordFailed):
    """``schema_evolution: fail`` met a DDL that changes a mirror; the message names statement, table and
    position."""


class SourceFailed(RuntimeError):
    """The source cannot be read as the job file asks (Kafka offsets deleted before the job read them, the
    Kafka connector's jars not found): one line that says what and how to go on."""


class JobRunning(RuntimeError):
    """Another process holds the job's lock (replicator.commands.joblock); the message names it."""


class StateDamaged(RuntimeError):
    """A file of the job's state or of a mirror cannot be used as it is (truncated, deleted): the message
    names the file and how to recover (docs/operations.md, "Recovering from damaged state")."""


class CatalogFailed(RuntimeError):
    """``catalog.on_error: fail`` (or ``replicator catalog sync``): a catalog entry could not be made or
    dropped; the mirrors are committed and unchanged, the message names the entry and the catalog's error."""
