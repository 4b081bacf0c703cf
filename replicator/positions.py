"""Source positions typed by users (``bootstrap --position``, ``replay --position``) -> sequence horizons.

A position is compared with the leading parts of an event's ``seq`` (the dialect's ordering key, see
docs/operations.md "Bootstrap"). Accepted forms:

- a binlog position ``mysql-bin.000070:6816`` (``;GTID`` or `` gtid=...`` suffixes ignored) -> (70, 6816);
- a ``_cdc_seq`` value copied from a mirror (fixed-width, dot-separated) -> that sequence;
- anything else: its integers in order, e.g. DRS ``27677`` or ``id=27677 es=1624614713000``, canal
  ``1700000000000,17`` or ``es=1700000000000 id=17``, PostgreSQL ``lsn:24023128``.
"""

from __future__ import annotations

import datetime as dt
import re

from replicator.config import ConfigError
from replicator.model import SEQ_WIDTH, parse_seq_text, seq_text

_BINLOG = re.compile(r"^\s*[^:;\s]*?(\d+):(\d+)")
_SEQ_TEXT = re.compile(rf"^\d{{{SEQ_WIDTH}}}(\.\d{{{SEQ_WIDTH}}})*$")
# Sorts after "." and every digit: a horizon holds every sequence that starts with the position's parts.
INCLUSIVE = "~"


class PositionError(ConfigError):
    """A position or time that cannot be read; the message says which forms are accepted."""


def parse_position(text: str) -> tuple[int, ...]:
    """Example:
    >>> parse_position("mysql-bin.000070:6816;2bf665dc:1-5")
    (70, 6816)
    >>> parse_position("id=27677 es=1624614713000")
    (27677, 1624614713000)
    """
    value = str(text).strip()
    if _SEQ_TEXT.match(value):
        return parse_seq_text(value)
    match = _BINLOG.match(value)
    if match:
        return (int(match.group(1)), int(match.group(2)))
    numbers = tuple(int(n) for n in re.findall(r"\d+", value))
    if not numbers:
        raise PositionError(
            f"cannot read position {text!r}: expected a binlog position (mysql-bin.000070:6816), "
            "a _cdc_seq value, or the dialect's ordering numbers (DRS id; canal es,id; lsn)"
        )
    return numbers


def horizon(text: str) -> str:
    """The ``_cdc_seq`` text that every event at or before the position sorts under (inclusive)."""
    return seq_text(parse_position(text)) + INCLUSIVE


def parse_time(text: str) -> dt.datetime:
    """ISO-8601 (no offset means UTC) or epoch milliseconds -> an aware UTC datetime."""
    value = str(text).strip()
    if re.fullmatch(r"-?\d+", value):
        return dt.datetime.fromtimestamp(int(value) / 1000, dt.UTC)
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise PositionError(
            f"cannot read time {text!r}: expected ISO-8601 (2024-05-01T12:00:00Z) or epoch milliseconds"
        ) from None
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
