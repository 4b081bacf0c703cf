"""Dialect base class, the registry, detection, and the decode pipeline.

A dialect turns one message of its wire format into change events appended to an
:class:`~replicator.dialects.events.Events` builder; a micro-batch's raw records become one Arrow table in
the contract's columns (model.EVENT_COLUMNS plus ``error``/``raw``). The pipeline here does what every
format shares: UTF-8 and JSON checks, JSON array documents holding several messages, detection for
``dialect: auto``, and turning anything a dialect cannot read into an error row that keeps the raw record.

Decoding is plain Python over parsed messages (orjson), run by Spark's Python workers on the executors
(replicator.decode). benchmarks/LOG.md has the measurements behind this choice:
per message it costs a quarter of Spark SQL's ``from_json`` + map expressions, and it has no query plan to
compile for every micro-batch.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from replicator.dialects.arrays import Document, Element
from replicator.dialects.events import At, Events
from replicator.dialects.guards import guard
from replicator.dialects.jsontext import TOO_DEEP, Inexact, Refused, loads, loads_exact
from replicator.dialects.record_keys import keys_from_record_key

if TYPE_CHECKING:
    import pyarrow as pa

_REGISTRY: dict[str, type[Dialect]] = {}
# A raw record as the decoder reads it: (raw, source, partition, offset, Kafka key)
RawTuple = tuple[bytes | None, str | None, int | None, int | None, bytes | None]

NOT_UTF8 = "not valid UTF-8"
NOT_JSON = "not JSON: the record does not parse as a JSON document"
NOT_OBJECT = "not a JSON object: a message must be an object"
JSON_LINES = (
    "; it holds {n} lines that each parse as JSON: a *.json file is one document (a message or an array), "
    "name a file of one message per line *.jsonl"
)


def _lines_hint(raw: bytes) -> str:
    """Why a document did not parse, where it is JSON lines in a ``*.json`` file (a common mistake)."""
    lines = [line for line in raw.split(b"\n", 3)[:3] if line.strip()]
    if len(lines) < 2:
        return ""
    try:
        for line in lines:
            loads(line)
    except ValueError:
        return ""
    return JSON_LINES.format(n=raw.count(b"\n") + (not raw.endswith(b"\n")))


# dts-avro: the most bytes one compressed block of a container file may decompress to (a decompression bomb
# otherwise fills the worker's memory; source.max_decompressed_bytes).
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class DecodeOptions:
    """What decoding needs from the job file."""

    timezone: str = "UTC"
    zero_dates: str = "null"  # "null" | "dead_letter"
    avro_schema: Path | None = None
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES
    # limits.* of the job file (config.LimitsConfig; replicator.dialects.guards)
    max_columns: int = 30_000
    ddl_bytes: int = 1024 * 1024
    table_changes_bytes: int = 16 * 1024 * 1024
    ddl_clauses: int = 10_000
    ddl_nesting: int = 32


class Dialect:
    """One wire format. Subclasses set the class constants and implement :meth:`decode` (JSON formats) or
    :meth:`decode_raw` (binary formats).

    Detection (``dialect: auto``) looks only at a message's top-level keys: a dialect matches when all
    ``required_keys`` and none of ``forbidden_keys`` are present, and ``any_keys`` (if set) has one
    present. ``ambiguous_with`` names dialects whose messages can carry the very same keys with different
    meaning: such a message is never guessed, it is a dead letter asking to pin the dialect.
    """

    name: ClassVar[str] = ""
    binary: ClassVar[bool] = False  # raw records are not JSON text (Avro)
    detectable: ClassVar[bool] = True  # False: only by name
    required_keys: ClassVar[frozenset[str]] = frozenset()
    any_keys: ClassVar[frozenset[str]] = frozenset()
    forbidden_keys: ClassVar[frozenset[str]] = frozenset()
    ambiguous_with: ClassVar[frozenset[str]] = frozenset()
    # Its updates may be patches of a stored document (meta ``mongo_update``), resolved by the applier
    # against the whole document, not typed from the row image alone (replicator.apply.documents).
    patches: ClassVar[bool] = False
    # Its updates may leave out columns the source did not send (PostgreSQL's unchanged TOAST values behind
    # Debezium: replicator.dialects.unavailable), filled by the applier on the driver from the mirror.
    partial_updates: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            _REGISTRY[cls.name] = cls

    def __init__(self, options: DecodeOptions | None = None) -> None:
        self.options = options or DecodeOptions()

    # -- detection -------------------------------------------------------------------------------------
    def matches(self, keys: Iterable[str]) -> bool:
        """Does a message with these top-level keys look like this dialect?"""
        keys = keys if isinstance(keys, set | frozenset) else set(keys)
        return (
            self.required_keys <= keys
            and not (self.forbidden_keys & keys)
            and (not self.any_keys or bool(self.any_keys & keys))
        )

    def disambiguate(self, message: dict[str, Any]) -> bool:
        """True when this message is surely this dialect although an ``ambiguous_with`` dialect also
        matched it. The default trusts nothing."""
        return False

    # -- decoding --------------------------------------------------------------------------------------
    def decode(self, message: dict[str, Any], at: At, out: Events) -> None:
        """Append the events of one message (a JSON object) to ``out``; a row that cannot be decoded is
        ``out.fail(...)`` naming why. Values that are JSON numbers go through ``jsontext.text`` (which
        raises Inexact for a float: the pipeline then parses the message again, keeping numbers as
        written)."""
        raise NotImplementedError

    def decode_raw(self, raw: bytes | None, at: At, out: Events) -> None:
        """Binary dialects decode a whole raw record."""
        raise NotImplementedError

    def read_records(
        self,
        records: Iterable[RawTuple],
        batch_id: int,
        out: Events,
        general: Callable[[Any, At, Events], None],
    ) -> None:
        """A pinned JSON dialect's raw records -> events: each record goes to ``general(raw, at, out)`` (the
        parse and :meth:`decode`). A dialect may read the usual record its own way first (canal-json:
        dialects/canal_plain.py), handing the others to ``general`` in their turn."""
        for raw, source, partition, offset, key in records:
            general(raw, At(batch_id, source, partition, offset, 0, raw, key), out)

    def check(self) -> None:
        """Raise ValueError when the job file lacks something this dialect needs (before any batch)."""


def dialect_names() -> list[str]:
    import replicator.dialects  # noqa: F401  (registers the built-in dialects)

    return sorted(_REGISTRY)


def may_leave_out(name: str) -> bool:
    """Can a source of this dialect (``auto``: of any) carry updates without some columns
    (:attr:`Dialect.partial_updates`)?"""
    dialect_names()
    return (
        any(c.partial_updates for c in _REGISTRY.values())
        if name == "auto"
        else _REGISTRY[name].partial_updates
    )


def may_patch(name: str) -> bool:
    """Can a source of this dialect (``auto``: of any) carry document patches (:attr:`Dialect.patches`)?"""
    dialect_names()
    return any(cls.patches for cls in _REGISTRY.values()) if name == "auto" else _REGISTRY[name].patches


def get_dialect(name: str, options: DecodeOptions | None = None) -> Dialect:
    dialect_names()
    try:
        return _REGISTRY[name](options)
    except KeyError:
        raise ValueError(
            f"unknown dialect {name!r}; expected one of {', '.join(sorted(_REGISTRY))}"
        ) from None


# ---- the pipeline ----------------------------------------------------------------------------------------


class Decoder:
    """Raw records -> decoded events for one configured dialect (or ``auto``)."""

    def __init__(self, dialect: str = "auto", options: DecodeOptions | None = None) -> None:
        self.options = options or DecodeOptions()
        if dialect == "auto":
            self.fixed: Dialect | None = None
            self.candidates = [
                d
                for d in (get_dialect(n, self.options) for n in dialect_names())
                if d.detectable and not d.binary
            ]
        else:
            self.fixed = get_dialect(dialect, self.options)
            self.fixed.check()
            self.candidates = []

    def records(self, records: Iterable[RawTuple], batch_id: int):  # type: ignore[no-untyped-def]
        """Decode (raw, source, partition, offset, key) tuples; returns the Events builder."""
        out = Events()
        fixed = self.fixed
        if fixed is not None and not fixed.binary:
            fixed.read_records(records, batch_id, out, self._json_record)
            return out
        for raw, source, partition, offset, key in records:
            at = At(batch_id, source, partition, offset, 0, raw, key)
            if fixed is not None:
                self._guarded(fixed, None, at, out)
            else:
                self._json_record(raw, at, out)
        return out

    def _json_record(self, raw: bytes | None, at: At, out: Events) -> None:
        try:
            if not raw:
                raise ValueError("empty")
            document = loads(raw)
        except Refused as exc:  # JSON, but nested too deeply or with an integer no column holds
            out.fail(at, self.fixed.name if self.fixed else None, str(exc))
            return
        except ValueError:
            if not self._elements_apart(raw, at, out):
                out.fail(at, None, (NOT_JSON + _lines_hint(raw)) if _utf8(raw) else NOT_UTF8)
            return
        if type(document) is list:
            if not document:
                out.filtered(at, None)  # an empty array document holds no message
                return
            # Each element's At carries a lazy cut of its own bytes (a dead letter's raw is the element,
            # not the document), and the document is parsed exactly at most once (arrays.Document).
            whole = Document(raw)
            for index, message in enumerate(document):
                element = Element(whole, index)  # type: ignore[arg-type]
                where = At(at.batch_id, at.source, at.partition, at.offset, index, element, at.key)
                self._message(message, where, out)
        else:
            self._message(document, at, out)

    def _elements_apart(self, raw: bytes | None, at: At, out: Events) -> bool:
        """An array document refused as a whole (one element's lone-surrogate escape, which is not Unicode
        text) read element by element: only the bad elements become dead letters. False when ``raw`` is
        not an array document."""
        whole = Document(raw)  # type: ignore[arg-type]
        count = whole.elements() if raw else None
        if not count:
            return False
        for index in range(count):
            element = Element(whole, index)
            where = At(at.batch_id, at.source, at.partition, at.offset, index, element, at.key)
            try:
                message = whole.exact(index)
            except ValueError as exc:
                out.fail(where, self.fixed.name if self.fixed else None, f"cannot decode the message ({exc})")
                continue
            self._message(message, where, out)
        return True

    def _message(self, message: Any, at: At, out: Events) -> None:
        dialect = self.fixed
        if type(message) is not dict:
            out.fail(at, dialect.name if dialect else None, NOT_OBJECT)
            return
        if dialect is None:
            dialect, error = self.detect(message)
            if dialect is None:
                out.fail(at, None, error)
                return
        self._guarded(dialect, message, at, out)

    def _guarded(self, dialect: Dialect, message: dict[str, Any] | None, at: At, out: Events) -> None:
        """Run the dialect; a float seen by the fast parser re-runs it on the exact parse; anything the
        dialect did not foresee becomes an error row naming the exception (never a lost batch)."""
        mark = out.mark()
        raw = at.raw
        try:
            if message is None:
                dialect.decode_raw(None if raw is None else bytes(raw), at, out)
            else:
                try:
                    dialect.decode(message, at, out)
                    if at.key is not None:
                        keys_from_record_key(at.key, out, mark)
                except Inexact:
                    out.rollback(mark)
                    if type(raw) is Element:  # an element of an array document: its document's exact parse
                        exact = raw.document.exact(raw.index)
                    else:
                        exact = loads_exact(bytes(raw))  # type: ignore[arg-type]
                    dialect.decode(exact, at, out)
                    if at.key is not None:
                        keys_from_record_key(at.key, out, mark)
        except Refused as exc:  # the exact parse refused the message: the reason, as for the first parse
            out.rollback(mark)
            out.fail(at, dialect.name, str(exc))
        except RecursionError:  # a value nested too deeply for the dialect's (recursive) reading of it
            out.rollback(mark)
            out.fail(at, dialect.name, TOO_DEEP)
        except Exception as exc:  # a shape the dialect did not foresee: a dead letter, not a crash
            out.rollback(mark)
            out.fail(at, dialect.name, f"cannot decode the message ({type(exc).__name__}: {exc})")

    def detect(self, message: dict[str, Any]) -> tuple[Dialect | None, str]:
        keys = set(message)
        candidates = [d for d in self.candidates if d.matches(keys)]
        if not candidates:
            return None, "unknown message format: no dialect recognises its keys; pin source.dialect"
        if len(candidates) == 1:
            return candidates[0], ""
        names = {d.name for d in candidates}
        sure = [d for d in candidates if d.ambiguous_with and d.disambiguate(message)]
        if len(sure) == 1:
            return sure[0], ""
        listed = ", ".join(sorted(names))
        return (
            None,
            f"ambiguous message format: it reads as any of {listed}; pin source.dialect in the job file",
        )


def _utf8(raw: Any) -> bool:
    try:
        bytes(raw or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class RecordRows(Protocol):
    """Raw records as Python objects (kafka_reader.Records): decoded without an Arrow table."""

    @property
    def num_rows(self) -> int: ...

    def tuples(self) -> Iterator[RawTuple]: ...


def record_tuples(records: pa.Table | RecordRows) -> Iterator[RawTuple]:
    """The rows of a raw-record table (sources.raw_schema: raw, key, source, partition, offset) as
    (raw, source, partition, offset, key) tuples; a table without ``key`` (files) has NULL keys. A column
    whose rows all hold one value (a file's path and time, files' NULL keys) gives that one object to every
    row instead of a Python object per row. Records still in Python objects (RecordRows: a Kafka read's)
    give their own tuples."""
    import pyarrow as pa

    if not isinstance(records, pa.Table):
        return records.tuples()
    n = records.num_rows
    columns = [_values(records.column(name)) for name in ("raw", "source", "partition", "offset")]
    keys = _values(records.column("key")) if "key" in records.column_names else repeat(None, n)
    return zip(*columns, keys, strict=True)


def _values(column: pa.ChunkedArray) -> Iterable[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(column)
    if n > 1 and not pa.types.is_binary(column.type):
        if column.null_count == n:
            return repeat(None, n)
        first = column[0]
        if first.is_valid and column.null_count == 0 and pc.all(pc.equal(column, first)).as_py():
            return repeat(first.as_py(), n)
    return column.to_pylist()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: decoding only allocates (nothing to free until the batch is
    done), and with a batch's objects alive its passes cost a third of the decode time (measured)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def decode(
    records: pa.Table | RecordRows,
    dialect: str = "auto",
    options: DecodeOptions | None = None,
    batch_id: int = 0,
    sort_keys: bool = False,
    seq_text: bool = True,
    decoder: Decoder | None = None,
) -> pa.Table:
    """Raw records (raw, source, partition, offset) -> decoded events and error rows, in one process.

    ``sort_keys`` adds the engine's derived columns ``seq_text`` (unless not ``seq_text``: the decode
    tasks leave it to the fold) and ``type_key`` (computed where the decoding runs, in parallel).
    ``decoder``: one already made for ``dialect`` and ``options``, whose per-table caches (a table's type
    map, parsed once while it does not change) carry over from the slices it decoded before."""
    with gc_paused():
        options = options or DecodeOptions()
        decoder = decoder or Decoder(dialect, options)
        events = decoder.records(record_tuples(records), batch_id)
        table = guard(events.to_arrow(), records, options)
        if sort_keys:
            from replicator.dialects.events import seq_texts

            if seq_text:
                table = table.append_column("seq_text", seq_texts(table["seq"]))
            table = table.append_column("type_key", events.type_keys())
        if events.notices:
            from replicator.dialects.events import NOTICES
            from replicator.dialects.jsontext import to_json

            notices = [list(notice) for notice in events.notices]
            table = table.replace_schema_metadata({NOTICES: to_json(notices)})
        return table
