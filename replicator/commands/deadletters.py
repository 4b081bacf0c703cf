"""``replicator dead-letters``: dead letters grouped by cause, and ``retry``, which re-drives them through the
engine once their cause is fixed (docs/operations.md).

A retry is a micro-batch of its own: the dead letters' raw records go through ``Engine.process_records``
(decode with today's job file, fold, sequence-guarded MERGE), so a retried event is ordered by its ``seq``
like any late event and never overwrites newer data. Its writes carry the app transaction
``(<job>.retry, RETRY_BATCH_BASE + n)``: a namespace of its own (the streaming query's ``(<job>, batch)``
versions are untouched, so no streaming batch is mistaken for done) and batch ids far above any streaming
batch id, so the batch log and the dead-letter table tell retries apart.

Marks live in the Delta table ``<state.path>/dead_letter_retries`` (the dead-letter table keeps its schema:
older tables stay readable): one row per retried dead letter, naming it by batch and coordinates, with the
retry batch that re-drove it. The marks of retry n are committed (app transaction ``<job>.retry:plan``, n)
before retry n runs; a retry whose batch summary is missing (a crash in between) is run again, with the
same records and batch id, before anything new: every write of that batch is idempotent, so the records
are applied exactly once. An event that fails again is a new dead letter of the retry batch (its new
error), pending for the next retry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from replicator.config import ConfigError
from replicator.sinks.base import Txn
from replicator.state import DEAD_LETTER_SCHEMA, State, now

if TYPE_CHECKING:
    from replicator.config import JobConfig

RETRY_JOB_SUFFIX = ".retry"
RETRY_BATCH_BASE = 10**12  # retry n has batch id RETRY_BATCH_BASE + n; streaming batches never get there
IDENTITY = ("batch_id", "source", "partition", "offset", "index", "row")
RETRIES_SCHEMA = pa.schema(
    [
        *(DEAD_LETTER_SCHEMA.field(name) for name in IDENTITY),
        ("retried_by", pa.int64()),
        ("retried_at", pa.timestamp("us", tz="UTC")),
    ]
)
DISCARDS_SCHEMA = pa.schema(
    [
        *(DEAD_LETTER_SCHEMA.field(name) for name in IDENTITY),
        ("discarded_at", pa.timestamp("us", tz="UTC")),
        ("discarded_by", pa.string()),
        ("reason", pa.string()),
    ]
)
EXAMPLE_CHARS = 160


def _state(config: JobConfig) -> State:
    return State.of(config)


def _identity(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[name] for name in IDENTITY)


def table_name(row: dict[str, Any]) -> str:
    return ".".join(p for p in (row.get("database"), row.get("table")) if p) or "(undecodable)"


def read_marks(state: State) -> dict[tuple[Any, ...], int]:
    """Retried dead letters: identity -> the retry batch that re-drove them."""
    marks = state.table("dead_letter_retries")
    if not marks.exists():
        return {}
    return {_identity(r): r["retried_by"] for r in marks.read().to_pylist()}


def read_discards(state: State) -> set[tuple[Any, ...]]:
    """Dead letters set aside by ``dead-letters discard`` (kept, never re-driven, not pending)."""
    marks = state.table("dead_letter_discards")
    if not marks.exists():
        return set()
    return {_identity(r) for r in marks.read(list(IDENTITY)).to_pylist()}


def dead_letter_id(row: dict[str, Any]) -> str:
    """A dead letter's short id (a hash of its batch and coordinates): what `discard --id` takes."""
    import hashlib

    return hashlib.sha256(repr(_identity(row)).encode()).hexdigest()[:12]


def read_dead_letters(state: State, columns: list[str] | None = None) -> list[dict[str, Any]]:
    dead = state.table("dead_letters")
    if not dead.exists():
        return []
    return dead.read(columns).to_pylist()


def pending(state: State) -> list[dict[str, Any]]:
    """Dead letters no retry has re-driven, in batch and coordinate order."""
    marks = read_marks(state)
    discarded = read_discards(state)
    rows = [
        r for r in read_dead_letters(state) if _identity(r) not in marks and _identity(r) not in discarded
    ]
    return sorted(rows, key=lambda r: tuple((v is None, v if v is not None else 0) for v in _identity(r)))


# ---- the summary ----------------------------------------------------------------------------------------
def summarize(config: JobConfig) -> dict[str, Any]:
    """Pending dead letters by table and error: count, first and last batch, a shortened example."""
    state = _state(config)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    rows = pending(state)
    for r in rows:
        group = groups.setdefault(
            (table_name(r), r["error"] or ""),
            {
                "table": table_name(r),
                "error": r["error"],
                "count": 0,
                "first_batch": r["batch_id"],
                "last_batch": r["batch_id"],
                "example": _example(r),
                "example_at": _where(r),
                "example_id": dead_letter_id(r),
            },
        )
        group["count"] += 1
        group["first_batch"] = min(group["first_batch"], r["batch_id"])
        group["last_batch"] = max(group["last_batch"], r["batch_id"])
    return {
        "job": config.name,
        "pending": len(rows),
        "retried": len(read_marks(state)),
        "discarded": len(read_discards(state)),
        "groups": sorted(groups.values(), key=lambda g: (-g["count"], g["table"], g["error"] or "")),
    }


def _example(row: dict[str, Any]) -> str:
    """The start of the record's text; of a Debezium envelope with schemas, its ``payload`` (the row), not
    the schema that opens every such message."""
    text = row.get("raw_text")
    if text is None:
        text = repr(row["raw"][:EXAMPLE_CHARS]) if row.get("raw") is not None else "(no raw bytes)"
    elif text.lstrip().startswith('{"schema"') and len(text) < 4_000_000:
        from replicator.dialects.jsontext import loads

        try:
            document = loads(text)
        except ValueError:
            document = None
        if isinstance(document, dict) and "payload" in document:
            text = json.dumps({"payload": document["payload"]}, ensure_ascii=False, default=str)
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."


def _where(row: dict[str, Any]) -> str:
    """Where the record came from: ``file:line`` (an array document's element too) or
    ``topic[partition]@offset``."""
    source, partition, offset = row.get("source"), row.get("partition"), row.get("offset")
    if source is None:
        return "-"
    if str(source).startswith("file:"):
        document = str(source).endswith(".json") and row.get("index") is not None  # an array's element
        element = f" element {row['index']}" if document else ""
        return f"{str(source)[len('file:') :]}:{offset}{element}"
    return f"{source}[{partition}]@{offset}"


def print_summary(config: JobConfig, as_json: bool = False) -> int:
    summary = summarize(config)
    if as_json:
        print(json.dumps(summary, indent=1, ensure_ascii=False, default=str))
        return 0
    print(
        f"job {summary['job']}: {summary['pending']} dead letters pending, {summary['retried']} retried, "
        f"{summary['discarded']} discarded"
    )
    for g in summary["groups"]:
        batches = (
            f"batch {g['first_batch']}"
            if g["first_batch"] == g["last_batch"]
            else f"batches {g['first_batch']}-{g['last_batch']}"
        )
        print(f"{g['count']:>8}  {g['table']}  ({batches})")
        print(f"          error:   {g['error']}")
        print(f"          example: {g['example']}")
        print(f"          at:      {g['example_at']} (id {g['example_id']})")
    return 0


# ---- discard --------------------------------------------------------------------------------------
def discard(
    config: JobConfig,
    reason: str,
    table: str | None = None,
    error: str | None = None,
    batch: int | None = None,
    ids: list[str] | None = None,
) -> int:
    """Set aside pending dead letters that can never succeed: they stay in the dead-letter table, a row in
    ``dead_letter_discards`` names each with who, when and why, and they are no longer pending (nor
    retried). Returns how many were discarded."""
    import getpass
    import socket

    if table is None and error is None and batch is None and not ids:
        raise ValueError("discard needs a selection: --table, --error, --batch or --id")
    state = _state(config)
    chosen = select(pending(state), table, error, batch)
    if ids:
        chosen = [r for r in chosen if dead_letter_id(r) in set(ids)]
        missing = set(ids) - {dead_letter_id(r) for r in chosen}
        if missing:
            raise ConfigError(_not_pending(state, sorted(missing)))
    if not chosen:
        return 0
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    stamp = {"discarded_at": now(), "discarded_by": who, "reason": reason}
    rows = [{**{k: r[k] for k in IDENTITY}, **stamp} for r in chosen]
    state.table("dead_letter_discards").append(pa.Table.from_pylist(rows, DISCARDS_SCHEMA), None)
    return len(rows)


def _not_pending(state: State, ids: list[str]) -> str:
    """Why ``--id`` names no pending dead letter: retried (a retry gives those that fail again new ids),
    discarded already, or no such id; nothing is discarded."""
    marks, discarded = read_marks(state), read_discards(state)
    known = {dead_letter_id(r): r for r in read_dead_letters(state, [*IDENTITY, "database", "table"])}
    reasons = []
    for i in ids:
        row = known.get(i)
        if row is None:
            reasons.append(f"{i}: no dead letter has this id")
        elif _identity(row) in marks:
            reasons.append(
                f"{i}: re-driven by retry batch {marks[_identity(row)]}; those that failed again are dead "
                "letters of that batch, with new ids"
            )
        elif _identity(row) in discarded:
            reasons.append(f"{i}: discarded already")
        else:
            reasons.append(f"{i}: not selected by the other options")
    return (
        "dead-letters discard: nothing discarded: "
        + "; ".join(reasons)
        + " (replicator dead-letters lists the pending ones with their ids)"
    )


def print_discard(config: JobConfig, reason: str, **selection: Any) -> int:
    count = discard(config, reason, **selection)
    if not count:
        print("no pending dead letters match: nothing discarded")
        return 0
    print(f"discarded {count} dead letters (kept in dead_letters, listed in dead_letter_discards)")
    return 0


# ---- retry ----------------------------------------------------------------------------------------
@dataclass
class RetryResult:
    batch_id: int | None = None  # the retry batch (None: nothing to retry)
    selected: int = 0  # dead letters re-driven
    records: int = 0  # distinct raw records re-driven (a message may hold several dead rows)
    applied: int = 0
    filtered: int = 0
    dead_letters: int = 0  # events that failed again: new dead letters of the retry batch
    unretryable: int = 0  # selected dead letters without raw bytes (nothing to re-drive)
    resumed: list[int] = field(default_factory=list)  # unfinished retries run again first


def retry_job(config: JobConfig) -> JobConfig:
    """The job as a retry runs it: its own app-transaction namespace, and a failing record is a dead letter
    (with its new error) even under ``on_error: fail``, so a retry always completes and is marked."""
    # No catalog: a retry may run beside the job, whose next batch registers what the retry made (the
    # embedded metastore opens in one process at a time).
    catalog = config.catalog.model_copy(update={"enabled": False})
    return config.model_copy(
        update={"name": config.name + RETRY_JOB_SUFFIX, "on_error": "dead_letter", "catalog": catalog}
    )


def select(
    rows: list[dict[str, Any]], table: str | None = None, error: str | None = None, batch: int | None = None
) -> list[dict[str, Any]]:
    """``--table`` a glob on database.table, ``--error`` a substring of the error, ``--batch`` a batch id."""
    return [
        r
        for r in rows
        if (table is None or fnmatchcase(table_name(r), table))
        and (error is None or error in (r["error"] or ""))
        and (batch is None or r["batch_id"] == batch)
    ]


def raw_records(rows: list[dict[str, Any]]) -> pa.Table:
    """The distinct raw records (source, partition, offset) of dead letters, as sources.raw_schema (extra
    columns of it, such as a message key the dead letter did not keep, are NULL)."""
    from replicator.sources import raw_schema

    schema = raw_schema()
    seen: dict[tuple[Any, ...], bytes] = {}
    for r in rows:
        seen.setdefault((r["source"], r["partition"], r["offset"]), r["raw"])
    records = [
        {"raw": raw, "source": s, "partition": p, "offset": o}
        for (s, p, o), raw in sorted(seen.items(), key=str)
    ]
    return pa.Table.from_pylist(records, schema)


def _done_batches(state: State) -> set[int]:
    log = state.table("batches")
    if not log.exists():
        return set()
    return {b for b in log.read(["batch_id"])["batch_id"].to_pylist() if b >= RETRY_BATCH_BASE}


def retry(
    config: JobConfig, table: str | None = None, error: str | None = None, batch: int | None = None
) -> RetryResult:
    """Re-drive the selected pending dead letters as one retry batch; first finish any planned retry whose
    batch did not complete."""
    from replicator.engine import Engine

    state = _state(config)
    engine = Engine(retry_job(config))
    result = RetryResult()
    marks = read_marks(state)
    done = _done_batches(state)
    dead = read_dead_letters(state)
    by_identity = {_identity(r): r for r in dead}
    for unfinished in sorted(set(marks.values()) - done):
        rows = [by_identity[i] for i, by in marks.items() if by == unfinished and i in by_identity]
        engine.process_records(raw_records(rows), unfinished)
        result.resumed.append(unfinished)

    # A discarded dead letter is final: never pending again, so never re-driven (docs/operations.md).
    discarded = read_discards(state)
    chosen = select(
        [r for r in dead if _identity(r) not in marks and _identity(r) not in discarded], table, error, batch
    )
    result.unretryable = sum(1 for r in chosen if r["raw"] is None)
    chosen = [r for r in chosen if r["raw"] is not None]
    if not chosen:
        return result
    n = max([RETRY_BATCH_BASE, *marks.values(), *done]) + 1
    plan = pa.Table.from_pylist(
        [{**{k: r[k] for k in IDENTITY}, "retried_by": n, "retried_at": now()} for r in chosen],
        RETRIES_SCHEMA,
    )
    state.table("dead_letter_retries").append(plan, Txn(config.name + RETRY_JOB_SUFFIX + ":plan", n))
    records = raw_records(chosen)
    summary = engine.process_records(records, n)
    result.batch_id = n
    result.selected = len(chosen)
    result.records = records.num_rows
    result.applied = summary.applied
    result.filtered = summary.filtered
    result.dead_letters = summary.dead_letters
    return result


def print_retry(config: JobConfig, **selection: Any) -> int:
    result = retry(config, **selection)
    for n in result.resumed:
        print(f"finished the interrupted retry batch {n}")
    if result.unretryable:
        print(f"{result.unretryable} selected dead letters have no raw bytes and cannot be re-driven")
    if result.batch_id is None:
        print("no pending dead letters match: nothing retried")
        return 0
    print(
        f"retry batch {result.batch_id}: {result.selected} dead letters ({result.records} records) "
        f"re-driven: {result.applied} events applied, {result.filtered} filtered, "
        f"{result.dead_letters} dead letters again"
    )
    return 0
