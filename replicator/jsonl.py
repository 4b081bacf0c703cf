"""JSON lines as their specifications define them: a line ends at LF (``\\n``) alone.

Python's ``str.splitlines`` also ends a line at U+2028, U+2029, U+0085, ``\\x1c``-``\\x1e``, ``\\x0b`` and
``\\x0c``. JSON allows U+2028, U+2029 and U+0085 unescaped inside a string, and delta-rs writes them so in a
commit's column statistics whenever a text value holds one: split there, a valid commit read as damaged
(issue 48). The Delta protocol ("Delta Transaction Log Protocol", Delta Log Entries: "newline (\\n)
delimited JSON") and JSON Lines ("Line Separator is '\\n'") split at LF; a CR before it is dropped, as
JSON Lines allows ``\\r\\n``.
"""

from __future__ import annotations

from typing import AnyStr

# JSON's whitespace (RFC 8259, section 2): a line of these alone is blank. Not str.isspace, which also
# counts the line separators above and \x0b, \x0c (not JSON: such a line is a bad record, not a blank one).
_JSON_SPACE = " \t\r"


def split_lines(text: AnyStr) -> list[AnyStr]:
    """Every line of ``text`` (str or bytes) split at LF only, a trailing CR of each dropped; no empty last
    line for a final LF. Line ``n`` (from 1) is ``result[n - 1]``."""
    newline, cr = ("\n", "\r") if isinstance(text, str) else (b"\n", b"\r")
    lines = text.split(newline)  # type: ignore[arg-type]
    if lines and not lines[-1]:
        lines.pop()
    return [line[:-1] if line.endswith(cr) else line for line in lines]  # type: ignore[arg-type]


def is_blank(line: str | bytes) -> bool:
    """Empty or JSON whitespace alone."""
    return not (line.strip(_JSON_SPACE) if isinstance(line, str) else line.strip(_JSON_SPACE.encode()))


def json_lines(text: AnyStr) -> list[tuple[int, AnyStr]]:
    """The non-blank lines of a JSON-lines text with their numbers (from 1)."""
    return [(n, line) for n, line in enumerate(split_lines(text), start=1) if not is_blank(line)]
