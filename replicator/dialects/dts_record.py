"""The layout of an Aliyun DTS subscription record, ``com.alibaba.dts.formats.avro.Record`` (CloudCanal
«MQ 消息同步格式说明»).

The wire format is plain Avro without a schema id, so the reader must know the writer's layout; it is a fact
of the format (the fields, their order, their Avro types), declared here so ``dts-avro`` works without the
vendor's ``Record.avsc`` file. This is the 15-field layout (``bornTimestamp`` last) that Aliyun's subscribe
examples publish; ``source.avro_schema`` still names a file for the older 14-field SDK variant or any
override. Named types are inlined at their first use (Avro's rule), so the schema can also head an object
container file. Field ``doc`` strings are left out: they do not change a single byte on the wire.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "com.alibaba.dts.formats.avro"


def _name(short: str) -> str:
    return f"{NAMESPACE}.{short}"


def _record(short: str, *fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": _name(short), "fields": [{"name": n, "type": t} for n, t in fields]}


def _optional(name: str, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None}


def _value_types() -> list[Any]:
    """The union of one image's column values; the first use defines each named type."""
    date_time = {
        "type": "record",
        "name": _name("DateTime"),
        "fields": [
            _optional(n, "int") for n in ("year", "month", "day", "hour", "minute", "second", "millis")
        ],
    }
    return [
        "null",
        _record("Integer", ("precision", "int"), ("value", "string")),
        _record("Character", ("charset", "string"), ("value", "bytes")),
        _record("Decimal", ("value", "string"), ("precision", "int"), ("scale", "int")),
        _record("Float", ("value", "double"), ("precision", "int"), ("scale", "int")),
        _record("Timestamp", ("timestamp", "long"), ("millis", "int")),
        date_time,
        _record("TimestampWithTimeZone", ("value", _name("DateTime")), ("timezone", "string")),
        _record("BinaryGeometry", ("type", "string"), ("value", "bytes")),
        _record("TextGeometry", ("type", "string"), ("value", "string")),
        _record("BinaryObject", ("type", "string"), ("value", "bytes")),
        _record("TextObject", ("type", "string"), ("value", "string")),
        {"type": "enum", "name": _name("EmptyObject"), "symbols": ["NULL", "NONE"]},
    ]


SOURCE_TYPES = ["MySQL", "Oracle", "SQLServer", "PostgreSQL", "MongoDB", "Redis", "DB2", "PPAS", "DRDS"]
SOURCE_TYPES += ["HBASE", "HDFS", "FILE", "OTHER"]
OPERATIONS = ["INSERT", "UPDATE", "DELETE", "DDL", "BEGIN", "COMMIT", "ROLLBACK", "ABORT", "HEARTBEAT"]
OPERATIONS += ["CHECKPOINT", "COMMAND", "FILL", "FINISH", "CONTROL", "RDB", "NOOP", "INIT"]


def record_schema(born_timestamp: bool = True) -> dict[str, Any]:
    """The Record schema as one self-contained JSON schema (15 fields; 14 without ``bornTimestamp``)."""
    source = _record(
        "Source",
        ("sourceType", {"type": "enum", "name": _name("SourceType"), "symbols": SOURCE_TYPES}),
        ("version", "string"),
    )
    field = _record("Field", ("name", "string"), ("dataTypeNumber", "int"))
    values = _value_types()
    refs = ["null", *(value["name"] for value in values[1:])]
    fields: list[dict[str, Any]] = [
        {"name": "version", "type": "int"},
        {"name": "id", "type": "long"},
        {"name": "sourceTimestamp", "type": "long"},
        {"name": "sourcePosition", "type": "string"},
        {"name": "safeSourcePosition", "type": "string", "default": ""},
        {"name": "sourceTxid", "type": "string", "default": ""},
        {"name": "source", "type": source},
        {"name": "operation", "type": {"type": "enum", "name": _name("Operation"), "symbols": OPERATIONS}},
        _optional("objectName", "string"),
        _optional("processTimestamps", {"type": "array", "items": "long"}),
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
        {"name": "fields", "type": ["null", "string", {"type": "array", "items": field}], "default": None},
        {
            "name": "beforeImages",
            "type": ["null", "string", {"type": "array", "items": values}],
            "default": None,
        },
        # the named types are defined in beforeImages (their first use); afterImages names them
        {
            "name": "afterImages",
            "type": ["null", "string", {"type": "array", "items": refs}],
            "default": None,
        },
    ]
    if born_timestamp:
        fields.append({"name": "bornTimestamp", "type": "long", "default": 0})
    return {"type": "record", "name": _name("Record"), "fields": fields}
