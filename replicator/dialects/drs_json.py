"""drs-json: Huawei DRS "JSON" messages to Kafka (Huawei DRS «Kafka消息格式»), MySQL form and
PostgreSQL/GaussDB/Oracle/SQL
Server form.

Canal's keys with other meanings (Huawei DRS «Kafka消息格式»): ``id`` is DRS's monotonic event sequence
(ordering: id, then
es); the deleted row of a DELETE is in ``old``; full sync sends ``INIT`` rows and ``INIT_DDL`` statements
with ``jobId``/``shardId``/``identifier``/``eventId``; incremental DDL has ``type`` ``DDL`` (the kind is read
from the SQL text). ``mysqlType`` holds bare type names; binary values are byte lists ``"[106, 103]"`` and
MySQL TIMESTAMP values epoch seconds ``"1624614713.201"``. The other sources write ``columnType``,
``dbType``, ``schema`` and ``opType``; there ``sqlType`` holds DRS codes that are not java.sql.Types
(Huawei DRS «Kafka消息格式»: a ``timestamp without time zone`` column has 16, a boolean 8), so it is not used.
See docs/dialects.md (drs-json).
"""

from __future__ import annotations

import json
import re
from array import array
from typing import Any, ClassVar

import orjson

from replicator.dialects.canal_json import CanalJson, d_text, head_text, parameterised
from replicator.dialects.datetext import clock_text, day_text
from replicator.dialects.events import Image, epoch_millis
from replicator.dialects.jsontext import image, string

# Keys canal never writes (Huawei DRS «Kafka消息格式»): their presence makes a message surely DRS.
DRS_ONLY_KEYS = ("jobId", "shardId", "identifier", "eventId", "columnType", "dbType", "opType")
DRS_TYPES = ("DDL", "INIT", "INIT_DDL")
META_KEYS = ("jobId", "shardId", "identifier", "eventId", "dbType")

# Tested once per table's type map (TypeCache), never per value. Java regex semantics, as the Spark decoder
# had them: ASCII \s and \d.
BINARY_TYPE = re.compile(
    r"(?i)^\s*(binary|varbinary|tinyblob|blob|mediumblob|longblob|bytea|raw|long raw|image)\b", re.ASCII
)
TIMESTAMP_TYPE = re.compile(r"(?i)^\s*timestamp\s*(\(\s*\d+\s*\))?\s*$", re.ASCII)
MYSQL_ZERO_TIMESTAMP = "0000-00-00 00:00:00"

# Incremental DDL arrives as type "DDL": its kind comes from the statement's leading words, first match wins.
# ALTER TABLE ... RENAME [TO|AS] renames the table; RENAME COLUMN/INDEX/KEY/CONSTRAINT is an ALTER.
DDL_RULES: tuple[tuple[str, str], ...] = (
    (r"^TRUNCATE\b", "TRUNCATE"),
    (r"^RENAME\s+TABLES?\b", "RENAME"),
    (r"^ALTER\s+TABLE\b.*\sRENAME\s+(?!(COLUMN|INDEX|KEY|CONSTRAINT)\b)", "RENAME"),
    (r"^ALTER\s+TABLE\b", "ALTER"),
    (r"^CREATE\s+((UNIQUE|FULLTEXT|SPATIAL|BITMAP)\s+)?INDEX\b", "CINDEX"),
    (r"^DROP\s+INDEX\b", "DINDEX"),
    (r"^(CREATE|DROP)\s+(DATABASE|SCHEMA)\b", "QUERY"),
    (r"^CREATE\s+((GLOBAL\s+|LOCAL\s+)?(TEMPORARY|TEMP)\s+|UNLOGGED\s+)?TABLE\b", "CREATE"),
    (r"^DROP\s+(TEMPORARY\s+)?TABLE\b", "ERASE"),
)
# (?s) lets `.` cross newlines in the statement.
_DDL_PATTERNS = tuple((re.compile(pattern, re.DOTALL | re.ASCII), kind) for pattern, kind in DDL_RULES)
# Leading blanks and /* ... */ comments do not count; `.` stops at every line terminator, as in Java.
_LEADING = re.compile(r"^(\s+|/\*[^\n\r\u0085\u2028\u2029]*?\*/)+", re.ASCII)
_FIRST_VALUE = json.JSONDecoder()


def ddl_kind_of(sql: str | None) -> str:
    """CREATE/ALTER/RENAME/ERASE/TRUNCATE/CINDEX/DINDEX from a statement's leading words, else QUERY."""
    head = _LEADING.sub("", sql or "", count=1).upper()
    for pattern, kind in _DDL_PATTERNS:
        if pattern.match(head):
            return kind
    return "QUERY"


def byte_list_hex(value: str) -> str:
    """``"[106, 103]"`` (Java ``Arrays.toString(byte[])``, signed bytes) -> ``"6a67"``; hex stays hex
    (``\\x`` prefix dropped, lower case).

    A malformed list is left as it is so that applying it fails with the column named.
    """
    if not value.lstrip(" ").startswith("["):
        return (value[2:] if value.startswith("\\x") else value).lower()
    try:
        items = orjson.loads(value)
    except orjson.JSONDecodeError:
        # Spark's from_json read the first JSON value and ignored what follows it.
        try:
            items = _FIRST_VALUE.raw_decode(value, len(value) - len(value.lstrip(" ")))[0]
        except ValueError:
            return value
    hex_text = _bytes_hex(items) if type(items) is list else None
    return value if hex_text is None else hex_text


def _bytes_hex(items: list[Any]) -> str | None:
    """Whole numbers in -128..255 (signed or unsigned bytes) -> hex; else ``None``. Tested and converted by
    C loops (set, min, max, bytes, array): a blob's list has thousands of items."""
    if not items:
        return ""
    if set(map(type, items)) != {int}:
        return None
    low, high = min(items), max(items)
    if low < -128 or high > 255:
        return None
    if low >= 0:
        return bytes(items).hex()
    if high <= 127:
        return array("b", items).tobytes().hex()
    return bytes([x & 0xFF for x in items]).hex()


def epoch_iso(value: str) -> str | None:
    """Epoch seconds text ``"1624614713.201"`` -> ``"2021-06-25T09:51:53.201Z"`` exactly: integer seconds
    are formatted and the fraction digits are copied (for a negative value: complemented), never through a
    float. 0 is MySQL's zero TIMESTAMP (its range starts at 1 s), written as ``0000-00-00 00:00:00``.
    ``None`` when the text is not epoch seconds (``-?\\d{1,12}(\\.\\d{1,9})?``)."""
    negative = value.startswith("-")
    whole_text, dot, digits = (value[1:] if negative else value).partition(".")
    if not (len(whole_text) <= 12 and _digits(whole_text)):
        return None
    if dot and not (len(digits) <= 9 and _digits(digits)):
        return None
    whole = int(whole_text)
    has_frac = digits.strip("0") != ""
    if whole == 0 and not has_frac:
        return MYSQL_ZERO_TIMESTAMP
    borrow = negative and has_frac
    seconds = (-whole if negative else whole) - borrow
    fraction = str(10 ** len(digits) - int(digits)).zfill(len(digits)) if borrow else digits
    # The session zone was UTC in replicator's sessions: the text names the instant either way.
    return utc_text(seconds) + (f".{fraction}" if digits else "") + "Z"


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # "" is not digits


def utc_text(seconds: int) -> str:
    """Epoch seconds as ``yyyy-MM-dd'T'HH:mm:ss`` in UTC, as Spark's ``date_format`` wrote any instant:
    proleptic Gregorian, a year beyond 9999 with a ``+``, years before 1 astronomical (0000, -0001)."""
    days, rest = divmod(seconds, 86400)
    return f"{day_text(days)}T{clock_text(rest, 1)}"


class DrsJson(CanalJson):
    name = "drs-json"
    required_keys: ClassVar[frozenset[str]] = frozenset({"database", "table", "type", "isDdl", "id", "es"})
    any_keys: ClassVar[frozenset[str]] = frozenset({"mysqlType", "columnType"})
    forbidden_keys: ClassVar[frozenset[str]] = frozenset()
    ambiguous_with: ClassVar[frozenset[str]] = frozenset({"canal-json"})
    ignored_types: ClassVar[tuple[str, ...]] = ()
    ddl_types: ClassVar[tuple[str, ...]] = ("DDL", "INIT_DDL")
    delete_image: ClassVar[str] = "old"  # Huawei DRS «Kafka消息格式»: "如果是删除,则表示被删除的数据"
    epoch_timestamps: ClassVar[bool] = True  # JSON-C formats them instead

    def disambiguate(self, message: dict[str, Any]) -> bool:
        """Surely DRS: a DRS-only key, or a DRS-only ``type`` (DDL, INIT, INIT_DDL) without canal's signs
        (Flink's canal-json test data also writes INIT, with parameterised mysqlType)."""
        if any(k in message for k in DRS_ONLY_KEYS):
            return True
        kind = head_text(message.get("type"))
        drs_type = kind is not None and kind.upper() in DRS_TYPES
        canal_sign = parameterised(message.get("mysqlType")) or "gtid" in message or "_tidb" in message
        return drs_type and not canal_sign

    # ---- hooks -------------------------------------------------------------------------------------------
    def kind(self, m: dict[str, Any]) -> str | None:
        kind = string(m.get("type"))
        if kind is None:
            kind = string(m.get("opType"))
        return None if kind is None else kind.upper()

    def ddl_kind(self, m: dict[str, Any], kind: str) -> str | None:
        return kind if kind == "INIT_DDL" else ddl_kind_of(string(m.get("sql")))

    def database(self, m: dict[str, Any]) -> str | None:
        """Oracle sends an empty ``database`` (Huawei DRS «Kafka消息格式»: "dbType为Oracle时暂时为空"); its
        schema names it, as
        JSON-C does ("Oracle数据库填写schema")."""
        return string(m.get("database")) or self.schema(m)

    def schema(self, m: dict[str, Any]) -> str | None:
        return string(m.get("schema")) or None

    def build_types(self, m: dict[str, Any]) -> Image:
        """``columnType`` as it is, else canal's (mysqlType over jdbc:sqlType)."""
        column_types = image(m.get("columnType"))
        return column_types if column_types is not None else super().build_types(m)

    def types_key(self, m: dict[str, Any]) -> Any:
        return (m.get("columnType"), m.get("mysqlType"), m.get("sqlType"))

    def column_facts(self, types: Image) -> tuple[frozenset[str], frozenset[str]]:
        """The columns whose values :meth:`normalize` rewrites, and which of them are binary (byte lists,
        hex); the others are TIMESTAMP columns (epoch seconds text), when expected."""
        binary = frozenset(k for k, t in types.items() if t is not None and BINARY_TYPE.search(t))
        stamps: frozenset[str] = frozenset()
        if self.epoch_timestamps:
            stamps = frozenset(k for k, t in types.items() if t is not None and TIMESTAMP_TYPE.search(t))
        return binary | stamps, binary

    def normalize(self, row: Image | None, types: Image, facts: Any) -> Image | None:
        rewritten, binary = facts
        if row is None or not rewritten:
            return row
        changed = {}
        for k in row.keys() & rewritten:
            v = row[k]
            if v is not None:
                changed[k] = byte_list_hex(v) if k in binary else (epoch_iso(v) or v)
        return {**row, **changed} if changed else row

    def position(self, m: dict[str, Any], order: dict[str, int | None]) -> str | None:
        """Full-sync rows carry ``eventId`` (binlog file:pos;GTID set); otherwise the DRS sequence."""
        return string(m.get("eventId")) or f"id={d_text(order['id'])} es={d_text(order['es'])}"

    def order_key(self, m: dict[str, Any], order: dict[str, int | None]) -> tuple[int, ...]:
        """DRS ``id`` (monotonic sequence), then es (ms)."""
        return (order["id"] or 0, epoch_millis(order["es"]) or 0)

    def meta(self, m: dict[str, Any]) -> Image | None:
        values = {**(super().meta(m) or {}), **{k: string(m.get(k)) for k in META_KEYS}}
        return {k: v for k, v in values.items() if v}
