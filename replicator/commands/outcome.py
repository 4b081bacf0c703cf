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

    @property
    def failed(self) -> bool:
        return bool(self.dead_tables)

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
    return outcome


def _label(database: str | None, table: str | None) -> str:
    return ".".join(p for p in (database, table) if p)
