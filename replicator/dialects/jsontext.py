"""JSON messages -> Python values, and values -> the contract's canonical text, exactly.

A message is parsed with orjson. orjson turns a JSON number with a fraction or an exponent into a double,
which would mangle a decimal (``12345678901234567890.12``) and re-render ``1.50`` as ``1.5``. So the texts
here refuse floats (:class:`Inexact`) and the decode pipeline parses that message again with the standard
library, keeping every such number as written (:class:`Num`). Messages without fractional numbers (canal
writes every value as a JSON string) never pay for the second parse.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import orjson


class Inexact(Exception):
    """A float came from the fast parser: parse the message again with :func:`loads_exact`."""


class Num(str):
    """A JSON number with a fraction or an exponent, kept as its text (``1.50``, ``2.0e3``)."""

    __slots__ = ()


class Refused(ValueError):
    """JSON the engine does not read, with the reason (the record's dead letter says it, not "not JSON")."""


# orjson refuses documents nested deeper than 1024 levels; the standard library's parser (the exact one)
# and msgspec recurse in Python and raise RecursionError at about 1,000 (the interpreter's recursion
# limit, less the caller's frames), which is no ValueError: caught, it is this refusal.
MAX_DEPTH = 1024
TOO_DEEP = f"arrays or objects nested too deeply to read (orjson's limit: {MAX_DEPTH} levels, ~1,000 exactly)"


def too_long() -> str:
    return (
        f"a JSON integer of more than {sys.get_int_max_str_digits():,} digits (Python's limit for"
        " integers): no column holds it"
    )


def loads(raw: bytes | memoryview | str) -> Any:
    """orjson (which reads an integer beyond 64 bits as a float: Inexact sends it to the exact parser)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):  # orjson's own words (orjson 3.x): its nesting limit
            raise Refused(TOO_DEEP) from None
        # raises ValueError (UnicodeDecodeError included) when not JSON
        return loads_exact(bytes(raw) if isinstance(raw, memoryview) else raw)


def loads_exact(raw: bytes | str) -> Any:
    """The standard library's parser, numbers with a fraction or exponent kept as :class:`Num`. Raises
    ValueError when not JSON, :class:`Refused` for JSON nested too deeply or an integer too long for
    Python's ``int`` (the parser raises a plain ValueError, not JSONDecodeError, for it)."""
    try:
        if not isinstance(raw, str):
            # json.loads(bytes) decodes with "surrogatepass": bytes that encode a lone surrogate (ED A0 80,
            # invalid UTF-8, which orjson refuses) would become one, with no \u escape for unicode_only to
            # see. Decoded strictly here, they are not JSON (found by CI's fuzzing of drs-json-c).
            raw = raw.decode(json.detect_encoding(raw))
        return unicode_only(raw, json.loads(raw, parse_float=Num))
    except RecursionError:
        raise Refused(TOO_DEEP) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if isinstance(exc, UnicodeDecodeError) or "surrogate" in str(exc):
            raise
        raise Refused(too_long()) from None


# A \u escape of a UTF-16 surrogate (D800-DFFF): half of a pair, or a lone one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")


def unicode_only(raw: bytes | str, value: Any) -> Any:
    """``value`` parsed from ``raw`` by the standard library, refused (ValueError) when an escape made a
    lone UTF-16 surrogate (``"\\ud800"``): such a string is not Unicode text, no column can hold it, and
    orjson and msgspec refuse the same message. The record becomes a dead letter, not a failed batch."""
    pattern = _SURROGATE_ESCAPE if isinstance(raw, bytes) else _SURROGATE_ESCAPE_TEXT
    if pattern.search(raw) is None:  # type: ignore[arg-type]
        return value
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"a \\u escape makes a lone UTF-16 surrogate, not Unicode text ({exc.reason})"
        ) from None
    return value


def _fragment(value: Any) -> Any:
    if isinstance(value, Num):
        return orjson.Fragment(str.__str__(value))
    raise TypeError(f"not JSON: {type(value).__name__}")


def dumps(value: Any) -> str:
    """Compact JSON text of a nested value (an object or array column), numbers as written."""
    if _has_float(value):
        raise Inexact
    try:
        return orjson.dumps(value, default=_fragment, option=orjson.OPT_PASSTHROUGH_SUBCLASS).decode()
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, which orjson does not write
        return _dumps_slow(value)


def _dumps_slow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{_dumps_slow(str(k))}:{_dumps_slow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dumps_slow(v) for v in value) + "]"
    if isinstance(value, Num):
        return str.__str__(value)
    if type(value) is int:
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _has_float(value: Any) -> bool:
    if type(value) is float:
        return True
    if type(value) is dict:
        return any(_has_float(v) for v in value.values())
    if type(value) is list:
        return any(_has_float(v) for v in value)
    return False


def text(value: Any) -> str | None:
    """The canonical text of a JSON value: strings as they are, numbers as written, ``true``/``false``,
    objects and arrays as compact JSON; JSON null is ``None`` (SQL NULL)."""
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    if value is None:
        return None
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is Num:
        return str.__str__(value)
    if kind is float:
        raise Inexact
    return dumps(value)


def image(value: Any) -> dict[str, str | None] | None:
    """A row image (a JSON object) with every value as canonical text; ``None`` when not an object."""
    if type(value) is not dict:
        return None
    if TEXT_OR_NULL.issuperset(map(type, value.values())):
        return value  # every value is text or NULL already (canal): no copy
    return {k: text(v) for k, v in value.items()}


TEXT_OR_NULL = frozenset((str, type(None)))


def string(value: Any) -> str | None:
    """A scalar field read as text (Spark ``from_json`` into STRING did the same): NULL stays ``None``."""
    return value if type(value) is str else text(value)


INT64 = range(-(2**63), 2**63)  # BIGINT
ORDER = range(2**63)  # an ordering field (canal es / id): a non-negative BIGINT
INT32 = range(-(2**31), 2**31)  # INT
BLANKS = "".join(map(chr, range(33)))  # what Spark trims before casting text to a number


def json_integer(value: Any, bounds: range = INT64) -> int | None:
    """A field Spark's ``from_json`` read as BIGINT (INT with ``bounds=INT32``): a JSON whole number in range,
    else ``None`` (a string or a fraction included)."""
    return value if type(value) is int and value in bounds else None


def cast_bigint(value: str | None, bounds: range = INT64, blanks: str = BLANKS) -> int | None:
    """Text -> a 64-bit integer (or one in ``bounds``), else ``None``: Spark's ``try_cast(... AS BIGINT)``,
    surrounding ``blanks`` ignored, an optional sign, ASCII digits, no fraction, no exponent, no overflow.

    More than 19 significant digits is ``None`` without converting them (so text beyond Python's ``int()``
    digit limit never raises).
    """
    if value is None:
        return None
    stripped = value.strip(blanks)
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    if not (digits.isascii() and digits.isdigit()):
        return None
    if len(digits.lstrip("0")) > 19:
        return None
    number = int(stripped)
    return number if number in bounds else None


def to_json(value: Any) -> str:
    """JSON text of a value for error messages (``["X"]``), as Spark's ``to_json`` wrote it."""
    return orjson.dumps(value, default=_fragment, option=orjson.OPT_PASSTHROUGH_SUBCLASS).decode()
