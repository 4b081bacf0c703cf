"""The elements of a JSON array document (a ``*.json`` file, or one Kafka value, holding many messages).

A document is parsed once whatever happens to its elements: the fast parse (orjson) of the whole record
gives the messages; when one of them needs the exact parse (a number with a fraction, jsontext.Inexact) or
its own bytes (a dead letter), :class:`Document` parses the record once more with the standard library,
noting each element's span, and serves every element from that. Re-parsing the record per element made
decoding quadratic in the document's size (issue 14: 500 messages of a 4 MB document took 12.8 s).

:func:`element_bytes` is the same cut as a pure function, for a stage that has only the raw record and a
dead letter's coordinates (the engine's apply-stage dead letters).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from replicator.dialects.jsontext import Num, unicode_only

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_float=Num)


def _spans(raw: bytes) -> tuple[list[tuple[int, int]], list[Any]] | None:
    """(byte span, exact value) of each element of an array document; None when ``raw`` is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    at = _SPACE.match(text, 1 if text.startswith("\ufeff") else 0).end()  # type: ignore[union-attr]
    if text[at : at + 1] != "[":
        return None
    spans: list[tuple[int, int]] = []
    values: list[Any] = []
    at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    if text[at : at + 1] == "]":
        return spans, values
    # Character offsets are byte offsets in ASCII text; otherwise each boundary is converted once, from
    # the previous one (offsets only grow), so the conversion stays linear.
    ascii_only = len(text) == len(raw)
    byte_at = char_at = 0
    while True:
        try:
            value, end = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):  # not JSON, an integer too long, nested too deeply
            return None
        if ascii_only:
            spans.append((at, end))
        else:
            first = byte_at + len(text[char_at:at].encode("utf-8"))
            byte_at, char_at = first + len(text[at:end].encode("utf-8")), end
            spans.append((first, byte_at))
        values.append(value)
        at = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        if text[at : at + 1] == "]":
            return spans, values
        if text[at : at + 1] != ",":
            return None
        at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]


def element_bytes(raw: bytes, index: int) -> bytes:
    """The bytes of element ``index`` of an array document, exactly as written; the whole record when it
    is not an array document (a single message, a binary record) or has no such element.

    The spans of the last few records are cached (by value; a bytes object keeps its hash), so cutting
    many elements out of one document parses it once."""
    spans = _byte_spans(bytes(raw))
    if spans is None or not 0 <= index < len(spans):
        return bytes(raw)
    start, end = spans[index]
    return bytes(raw[start:end])


@lru_cache(maxsize=8)
def _byte_spans(raw: bytes) -> tuple[tuple[int, int], ...] | None:
    found = _spans(raw)
    return None if found is None else tuple(found[0])


class Document:
    """One array document's raw bytes, with each element's span and exact value computed on first need
    (once per document)."""

    __slots__ = ("_found", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._found: tuple[list[tuple[int, int]], list[Any]] | bool | None = False

    def _get(self) -> tuple[list[tuple[int, int]], list[Any]] | None:
        if self._found is False:
            self._found = _spans(bytes(self.raw))
        return self._found  # type: ignore[return-value]

    def elements(self) -> int | None:
        """How many elements the document holds; None when it is not an array document."""
        found = self._get()
        return None if found is None else len(found[0])

    def element(self, index: int) -> bytes:
        found = self._get()
        if found is None or not 0 <= index < len(found[0]):
            return bytes(self.raw)
        start, end = found[0][index]
        return bytes(self.raw[start:end])

    def exact(self, index: int) -> Any:
        """Element ``index`` parsed keeping numbers as written (jsontext.loads_exact's reading)."""
        found = self._get()
        if found is None:
            raise ValueError("not a JSON array document")
        return unicode_only(self.element(index), found[1][index])


class Element:
    """An element's bytes, cut from its document only when asked for (``bytes(element)``): a dead
    letter's raw bytes. Stands in for ``At.raw``."""

    __slots__ = ("document", "index")

    def __init__(self, document: Document, index: int) -> None:
        self.document = document
        self.index = index

    def __bytes__(self) -> bytes:
        return self.document.element(self.index)
