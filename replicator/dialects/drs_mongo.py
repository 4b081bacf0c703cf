"""drs-mongo: Huawei DRS messages of DDS/MongoDB sources (Huawei DRS «Kafka消息格式»).

One message is one oplog change of one document: ``op`` INSERT/UPDATE/DELETE with ``recordType`` insert,
replace, update (``$set``/``$unset``) or doc (a document delete); ``value``/``where`` are mongo shell text
(``ObjectId("...")`` is not JSON) and are rewritten to relaxed Extended JSON. The mirror has two columns,
``_id`` (ObjectId as its 24 hex digits, any other id as its JSON text) and ``document`` (JSON text); an
update carries only ``_id`` plus the update spec in ``meta['mongo_update']``, which the engine applies to
the stored document in order. Order: clusterTime seconds, increment, then ``id``.
See docs/dialects.md (drs-mongo).
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any, ClassVar

from replicator.dialects.base import Dialect
from replicator.dialects.events import At, Events, Image, epoch_micros
from replicator.dialects.jsontext import INT64, cast_bigint, json_integer, string, to_json, unicode_only

PATCH_META = "mongo_update"  # replicator.fold.arrow reads it
DOCUMENT_META = "mongo_doc"  # on every DML event (its action): the fold keeps what the document merge needs
# what DRS emits (Huawei DRS «Kafka消息格式») and replicator.apply.documents
# applies
PATCH_OPERATORS = ("$set", "$unset")
HELPERS = "ObjectId, ISODate, NumberLong, NumberInt, NumberDecimal, UUID, BinData"
NOT_JSON = "'{}' is not JSON (after rewriting the shell helpers " + HELPERS + ")"

# The patterns are Java's (the Spark decoder ran them with regexp_replace): ASCII \s and \d, and `.` stops
# at every line terminator.
_ANY = r"[^\n\r\u0085\u2028\u2029]"
JAVA_END = r"(?:\r\n|[\n\r\u0085\u2028\u2029])?\Z"  # Java's `$`: the end, or before a final line terminator
JSON_BLANKS = " \t\n\r"
# A JSON string literal, matched possessively (no deep backtracking on long strings).
_STRING = r'("[^"\\]*+(?:\\' + _ANY + r'[^"\\]*+)*+")'
# Shell helpers whose argument is quoted: an unescaped `"` never occurs inside a JSON string, so these
# cannot match inside one. (pattern, replacement)
_QUOTED_HELPERS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.ASCII), replacement)
    for pattern, replacement in (
        (r'ObjectId\(\s*"([0-9a-fA-F]*)"\s*\)', r'{"$oid":"\g<1>"}'),
        (r'ISODate\(\s*"([^"\\]*)"\s*\)', r'{"$date":"\g<1>"}'),
        (r'NumberDecimal\(\s*"([^"\\]*)"\s*\)', r'{"$numberDecimal":"\g<1>"}'),
        (r'UUID\(\s*"([0-9a-fA-F-]*)"\s*\)', r'{"$uuid":"\g<1>"}'),
        (
            r'BinData\(\s*([0-9])\s*,\s*"([A-Za-z0-9+/=]*)"\s*\)',
            r'{"$binary":{"base64":"\g<2>","subType":"0\g<1>"}}',
        ),
    )
)
# NumberLong(5) / NumberInt(5) may occur as text inside a string: string literals are matched first and
# written back unchanged (group 1), a helper becomes its bare number (group 2).
_NUMBER_HELPERS = re.compile(_STRING + r'|Number(?:Long|Int)\(\s*"?(-?\d+)"?\s*\)', re.ASCII)
# Compact form (what replicator.apply.documents writes back): whitespace outside strings removed.
_BLANKS = re.compile(_STRING + r"|\s+", re.ASCII)


def shell_to_json(text: str | None) -> str | None:
    """Mongo shell text -> compact relaxed Extended JSON text (key order kept)."""
    if text is None:
        return None
    for pattern, replacement in _QUOTED_HELPERS:
        text = pattern.sub(replacement, text)
    text = _NUMBER_HELPERS.sub(r"\g<1>\g<2>", text)
    return _BLANKS.sub(r"\g<1>", text)


# ---- JSON as Spark's VARIANT read and wrote it (parse_json, json_object_keys, to_json) ------------------


class _Number(str):
    """A JSON number, kept as written."""

    __slots__ = ()


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")  # parse_json refuses duplicate keys
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity: not JSON


_VARIANT = json.JSONDecoder(
    object_pairs_hook=_unique, parse_float=_Number, parse_int=_Number, parse_constant=_no_constant
)


def parse_json(text: str | None) -> tuple[bool, Any]:
    """Spark's ``try_parse_json``: (parsed, value). Jackson reads the first JSON value and ignores what
    follows it, unless that is glued to a root number or literal (``5x``, ``truex``)."""
    if text is None:
        return False, None
    try:
        value, end = _VARIANT.raw_decode(text, len(text) - len(text.lstrip(JSON_BLANKS)))
        unicode_only(text, value)
    except ValueError:
        return False, None
    after = text[end : end + 1]
    if after and type(value) is _Number and after not in JSON_BLANKS:
        return False, None
    if after and type(value) in (bool, type(None)) and (after.isalnum() or after in "_$"):
        return False, None
    return True, value


_JSON_ESCAPES = {i: f"\\u{i:04X}" for i in range(32)} | {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    8: "\\b",
    9: "\\t",
    10: "\\n",
    12: "\\f",
    13: "\\r",
}


def _variant_number(text: str) -> str:
    """A JSON number as a VARIANT holds and writes it: a long; else a decimal of at most 38 digits (38
    fraction digits), written without trailing zeros (``1.0`` -> ``1``); else a double, as Java writes it."""
    if "e" not in text and "E" not in text:
        whole, _, fraction = text.partition(".")
        digits = (whole + fraction).lstrip("-").lstrip("0")
        if not fraction and cast_bigint(whole) is not None:
            return str(int(whole))
        if len(fraction) <= 38 and len(digits) <= 38:
            fraction = fraction.rstrip("0")
            if not (whole + fraction).lstrip("-").strip("0"):
                return "0"
            return whole + ("." + fraction if fraction else "")
    return _java_double(float(text))


def _java_double(value: float) -> str:
    """Java's ``Double.toString`` (shortest digits): plain within [1e-3, 1e7), else ``d.dddE<n>``."""
    if not math.isfinite(value):  # 1e400; a JSON number is never NaN
        return '"-Infinity"' if value < 0 else '"Infinity"'
    if value == 0:
        return repr(value)  # 0.0, -0.0
    sign = "-" if value < 0 else ""
    _, numerals, exponent = Decimal(repr(abs(value))).as_tuple()  # the shortest digits
    if len("".join(map(str, numerals)).strip("0")) == 1:
        # Java writes at least two digits, the closer pair: 4.9E-324, not 5.0E-324
        _, numerals, exponent = Decimal(f"{abs(value):.1e}").as_tuple()
    digits = "".join(map(str, numerals)).rstrip("0")
    point = len(numerals) + int(exponent)  # the value is 0.<digits> times 10**point
    if not 1e-3 <= abs(value) < 1e7:
        return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    return f"{sign}{digits[:point].ljust(point, '0')}.{digits[point:] or '0'}"


def variant_json(value: Any) -> str:
    """``to_json`` of a VARIANT: compact, object keys sorted (by UTF-16 code units), canonical numbers."""
    if type(value) is _Number:
        return _variant_number(value)
    if type(value) is str:
        return '"' + value.translate(_JSON_ESCAPES) + '"'
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is list:
        return "[" + ",".join(variant_json(v) for v in value) + "]"
    keys = sorted(value, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
    return "{" + ",".join(f"{variant_json(k)}:{variant_json(value[k])}" for k in keys) + "}"


def document_id(doc: Any) -> str | None:
    """``_id`` of a parsed document as canonical text: an ObjectId's hex digits, else the JSON text of the
    value (``None`` when there is none)."""
    if type(doc) is not dict or "_id" not in doc:
        return None
    value = doc["_id"]
    if type(value) is dict and len(value) == 1 and value.get("$oid") is not None:
        oid = value["$oid"]
        if type(oid) is str:
            return oid
        return variant_json(oid)
    return variant_json(value)


class DrsMongo(Dialect):
    name = "drs-mongo"
    patches = True  # UPDATE:update rows ($set/$unset) patch the stored document (Huawei DRS «Kafka消息格式»)
    required_keys: ClassVar[frozenset[str]] = frozenset({"op", "db", "coll", "recordType"})
    # (op, recordType) -> (contract op, how the row is built); Huawei DRS «Kafka消息格式»'s table of
    # recordType values.
    record_ops: ClassVar[dict[str, str]] = {
        "INSERT:insert": "insert",
        "UPDATE:replace": "replace",
        "UPDATE:update": "patch",
        "DELETE:doc": "delete",
    }
    contract_ops: ClassVar[dict[str, str]] = {"replace": "update", "patch": "update"}
    source_types: ClassVar[Image] = {"_id": "string", "document": "json"}
    # clusterTime "seconds:increment"
    cluster_time: ClassVar[re.Pattern[str]] = re.compile(r"^\s*(\d+):(\d+)\s*" + JAVA_END, re.ASCII)

    def action(self, op: str | None, record_type: str | None) -> str | None:
        """``ddl``, a ``record_ops`` value, or ``None`` for an unknown pair (``recordType`` falls back to
        ``extra``: Huawei DRS «Kafka消息格式» says it "一般和recordType保持一致")."""
        if op is not None and op.upper() == "DDL":
            return "ddl"
        parts = [x for x in (op and op.upper(), record_type and record_type.lower()) if x is not None]
        return self.record_ops.get(":".join(parts))

    @staticmethod
    def event_time(m: dict[str, Any]) -> int | None:
        """``es`` (commit time, ms); ``None`` past the microseconds a timestamp holds (Spark failed there)."""
        micros = epoch_micros(json_integer(m.get("es")))
        return micros if micros is not None and micros in INT64 else None

    def decode(self, m: dict[str, Any], at: At, out: Events) -> None:
        name = self.name
        op_text = string(m.get("op"))
        record_type = string(m.get("recordType"))
        action = self.action(op_text, record_type if record_type is not None else string(m.get("extra")))
        db = string(m.get("db"))
        coll = string(m.get("coll"))
        ident: dict[str, Any] = {"database": db or None, "table": coll or None}
        is_dml = action is not None and action != "ddl"
        cluster_text = string(m.get("clusterTime"))
        cluster = self.cluster_time.match(cluster_text) if cluster_text is not None else None
        if op_text is None:
            out.fail(at, name, "wrong shape: no 'op' in the message", **ident)
            return
        if action is None:
            out.fail(at, name, f"unknown op/recordType {to_json([op_text, record_type])}", **ident)
            return
        if not db:
            out.fail(at, name, "missing db", **ident)
            return
        if is_dml and not coll:
            out.fail(at, name, "missing coll", **ident)
            return
        if cluster is None:
            out.fail(at, name, "missing or malformed clusterTime (expected 'seconds:increment')", **ident)
            return
        value = shell_to_json(string(m.get("value")))
        where = shell_to_json(string(m.get("where")))
        value_ok, value_doc = parse_json(value)
        where_ok, where_doc = parse_json(where)
        if is_dml and action != "delete" and not value_ok:
            out.fail(at, name, NOT_JSON.format("value"), **ident)
            return
        if action == "patch" and where is not None and not where_ok:
            out.fail(at, name, NOT_JSON.format("where"), **ident)
            return
        keys = list(value_doc) if type(value_doc) is dict else None
        if action in ("insert", "replace") and keys is None:
            out.fail(at, name, "'value' is not a JSON object", **ident)
            return
        if action == "patch" and not (keys and all(k in PATCH_OPERATORS for k in keys)):
            error = f"unsupported update spec keys {to_json(keys or [])} (only $set and $unset)"
            out.fail(at, name, error, **ident)
            return
        doc_id = document_id(value_doc) if action != "patch" else None
        if doc_id is None:
            doc_id = document_id(where_doc)
        if is_dml and doc_id is None:
            out.fail(at, name, "missing _id (in 'value', or 'where' for updates)", **ident)
            return
        ts = json_integer(m.get("ts"))
        meta = {
            "ts": None if ts is None else str(ts),
            PATCH_META: value if action == "patch" else None,
            DOCUMENT_META: action if is_dml else None,
        }
        common: dict[str, Any] = {
            **ident,
            "order": (
                cast_bigint(cluster.group(1)) or 0,
                cast_bigint(cluster.group(2)) or 0,
                json_integer(m.get("id")) or 0,
            ),
            "event_time": self.event_time(m),
            "position": cluster_text,
            "meta": {k: v for k, v in meta.items() if v is not None},
        }
        if action == "ddl":
            # DDL on a collection changes no mirror column: recorded, nothing to alter.
            ddl_sql = string(m.get("value"))
            ddl_sql = ddl_sql if ddl_sql is not None else string(m.get("where"))
            out.add(at, name, "ddl", ddl_kind="QUERY", ddl_sql=ddl_sql, **common)
            return
        after: Image | None = None
        before: Image | None = None
        if action in ("insert", "replace"):
            after = {"_id": doc_id, "document": value}
        elif action == "patch":
            after = {"_id": doc_id}
        else:
            before = {"_id": doc_id}
        op = self.contract_ops.get(action, action)
        out.add(
            at,
            name,
            op,
            primary_key=["_id"],
            after=after,
            before=before,
            source_types=self.source_types,
            **common,
        )
