"""What a ``mirror --available-now`` run did, in one line a person reads: records in, applied, filtered,
dead letters, and the most frequent dead-letter error (whose text says the fix); and whether the run
failed because some table only ever produced dead letters (docs/operations.md, "The end of a run")."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replicator.config import JobConfig
    from replicator.state import BatchSummary, State

# The exit code of a run that left a table with nothing but dead letters (dead_tables: fail).
DEAD_TABLES_EXIT = 4
ERROR_CHARS = 200


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 record``, ``2 records``; ``many`` where the plural is not ``word + "s"``."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


@dataclass
class RunOutcome:
    batches: int = 0
    records_in: int = 0
    applied: int = 0
    filtered: int = 0
    dead_letters: int = 0
    top_error: str | None = None
    top_error_count: int = 0
    dead_tables: list[str] = field(default_factory=list)  # only dead letters, and never applied
    undecodable: str | None = None  # every record undecodable: what the records look like (dialect_hint)

    @property
    def failed(self) -> bool:
        return bool(self.dead_tables) or self.undecodable is not None

    def line(self, config_file: str | None = None) -> str:
        if not self.batches:
            return "replicator: nothing new to mirror (no unread input)"
        batches = plural(self.batches, "batch", "batches")
        text = (
            f"replicator: {plural(self.records_in, 'record')} in {batches}: {self.applied:,} applied, "
            f"{self.filtered:,} filtered, {plural(self.dead_letters, 'dead letter')}"
        )
        if self.top_error:
            error = self.top_error
            error = error if len(error) <= ERROR_CHARS else error[:ERROR_CHARS] + "…"
            text += f"; most frequent error ({self.top_error_count:,}×): {error}"
            where = f" --config {config_file}" if config_file else ""
            text += f" (replicator dead-letters{where})"
        return text

    def failure(self) -> str:
        if self.undecodable is not None:
            return (
                "replicator: no record of this run could be decoded "
                f"({plural(self.dead_letters, 'dead letter')}): {self.undecodable}; exit code 4 "
                "(set dead_tables: warn in the job file to exit 0)"
            )
        tables = ", ".join(self.dead_tables[:5]) + (" …" if len(self.dead_tables) > 5 else "")
        return (
            f"replicator: every record of {plural(len(self.dead_tables), 'table')} ({tables}) became a dead "
            "letter and nothing of it was ever applied; exit code 4 (set dead_tables: warn in the job file "
            "to exit 0)"
        )


def summarize(config: JobConfig, state: State, summaries: list[BatchSummary]) -> RunOutcome:
    """The run's batches (their summaries) -> its outcome. Reads this run's dead letters (table and error
    columns only) and the table registry."""
    outcome = RunOutcome(batches=len(summaries))
    for s in summaries:
        outcome.records_in += s.records_in
        outcome.applied += s.applied
        outcome.filtered += s.filtered
        outcome.dead_letters += s.dead_letters
    if not outcome.dead_letters:
        return outcome
    dead = state.table("dead_letters")
    if not dead.exists():
        return outcome
    ids = {s.batch_id for s in summaries}
    columns = ["batch_id", "database", "table", "error"]
    rows = [r for r in dead.read(columns).to_pylist() if r["batch_id"] in ids]
    errors = Counter(r["error"] or "" for r in rows)
    if errors:
        outcome.top_error, outcome.top_error_count = errors.most_common(1)[0]
    # The registry holds every table the job ever applied something to (DML or DDL), this run's included.
    applied = {_label(t.database, t.table) for t in state.tables().values()}
    dead_tables = {_label(r["database"], r["table"]) for r in rows if r["table"]}
    outcome.dead_tables = sorted(name for name in dead_tables if name not in applied)
    if rows and not outcome.applied and not dead_tables:  # not one record read as a table's change
        examples = [
            r["raw_text"] for r in dead.read(["batch_id", "raw_text"]).to_pylist() if r["batch_id"] in ids
        ]
        outcome.undecodable = dialect_hint(config.source.dialect, examples[:HINT_RECORDS])
    return outcome


HINT_RECORDS = 20  # dead letters' records read to tell which dialect they look like


def dialect_hint(configured: str, texts: list[str | None]) -> str:
    """Which dialect records that ``configured`` could not decode look like (the auto-detection of
    source.dialect: auto, dialects.Decoder.detect), as the fix to make."""
    from collections import Counter

    from replicator.dialects import Decoder
    from replicator.dialects.jsontext import loads

    decoder = Decoder("auto")
    seen: Counter[str] = Counter()
    for text in texts:
        try:
            message = loads(text) if text else None
        except ValueError:
            continue
        if isinstance(message, dict):
            found, _why = decoder.detect(message)
            if found is not None:
                seen[found.name] += 1
    if seen:
        name = seen.most_common(1)[0][0]
        if name != configured:
            return f"the records look like {name}, not {configured}: set source.dialect: {name}"
        return f"the records look like {name}, but none decoded: see replicator dead-letters for the errors"
    return f"the records look like no known dialect (source.dialect: {configured}; docs/dialects.md)"


def _label(database: str | None, table: str | None) -> str:
    return ".".join(p for p in (database, table) if p)
