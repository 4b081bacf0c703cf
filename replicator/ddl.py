"""Schema changes as data: DDL text (sqlglot) or a structural ``tableChanges`` -> frozen change objects.

A barrier event (``op = ddl | truncate``) becomes a list of changes from one union (pyiceberg style), which
replicator.apply.schema applies to the mirror under the job's policy. Column types keep the source text
(``decimal(12,2)``, ``varchar(255)``, ``timestamp without time zone``) so that ``types.column_type`` maps
them like the types DML messages carry. A statement that cannot be read raises :class:`DdlError`: a schema
change is never skipped silently.

Example:
    >>> parse_ddl("ALTER TABLE t ADD COLUMN c decimal(12,2)")
    [AddColumn(kind='add_column', table=TableRef(namespace=None, name='t'), column=Column(name='c', \
type='decimal(12,2)', nullable=True, default=None))]
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Literal

# The change objects live in replicator.changes; they are re-exported here.
from replicator.changes import (
    NO_OPS,
    AddColumn,
    AddPrimaryKey,
    ChangeType,
    Column,
    CreateDatabase,
    CreateIndex,
    CreateTable,
    DeclareSchema,
    Default,
    DropColumn,
    DropDatabase,
    DropIndex,
    DropPrimaryKey,
    DropTable,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TableRef,
    TruncateTable,
)

Dialect = Literal["mysql", "postgres"]


class DdlError(ValueError):
    """A DDL statement (or tableChanges document) that cannot be turned into schema changes."""


__all__ = [
    "NO_OPS",
    "AddColumn",
    "AddPrimaryKey",
    "ChangeType",
    "Column",
    "CreateDatabase",
    "CreateIndex",
    "CreateTable",
    "DdlError",
    "DeclareSchema",
    "Default",
    "DropColumn",
    "DropDatabase",
    "DropIndex",
    "DropPrimaryKey",
    "DropTable",
    "RenameColumn",
    "RenameTable",
    "SchemaChange",
    "TableRef",
    "TruncateTable",
    "event_dialect",
    "oversized",
    "parse_ddl",
    "parse_event",
    "parse_table_changes",
]

# ---- SQL text ---------------------------------------------------------------------------------------------

# MySQL RENAME TABLE is not in sqlglot's grammar (it falls back to an opaque Command): read it here.
_NAME = r"(?:`[^`]+`|\"[^\"]+\"|[\w$]+)"
_QUALIFIED = rf"({_NAME}(?:\s*\.\s*{_NAME})?)"
_RENAME = re.compile(r"^\s*RENAME\s+TABLES?\s+(.+?)\s*;?\s*$", re.I | re.S)
_RENAME_PAIR = re.compile(rf"^\s*{_QUALIFIED}\s+TO\s+{_QUALIFIED}\s*$", re.I | re.S)
_LEADING_COMMENTS = re.compile(r"^\s*(?:/\*.*?\*/\s*|--[^\n]*\n\s*|#[^\n]*\n\s*)*", re.S)


def _unquote(name: str) -> str:
    name = name.strip()
    return name[1:-1] if name[:1] in '`"' and name[-1:] == name[:1] else name


def _ref_from_text(text: str) -> TableRef:
    parts = [_unquote(p) for p in re.findall(_NAME, text)]
    return TableRef(namespace=parts[0], name=parts[1]) if len(parts) == 2 else TableRef(name=parts[0])


def _rename_statement(sql: str) -> list[SchemaChange] | None:
    match = _RENAME.match(_LEADING_COMMENTS.sub("", sql, count=1))
    if not match:
        return None
    changes: list[SchemaChange] = []
    for pair in match.group(1).split(","):
        names = _RENAME_PAIR.match(pair)
        if not names:
            raise DdlError(f"cannot read RENAME TABLE clause {pair.strip()!r}")
        changes.append(RenameTable(old=_ref_from_text(names.group(1)), new=_ref_from_text(names.group(2))))
    return changes


def _type_text(data_type: Any, dialect: Dialect) -> str:
    """sqlglot DataType -> source type text that ``types.column_type`` maps like the DML types."""
    from sqlglot import exp

    text = data_type.sql(dialect=dialect).lower()
    text = re.sub(r",\s+", ",", text)
    if dialect == "postgres":
        # PostgreSQL's bare TIMESTAMP has no zone; sqlglot prints it bare, which reads as MySQL's instant.
        if data_type.this == exp.DataType.Type.TIMESTAMP:
            text = re.sub(r"^timestamp(\(\d+\))?", r"timestamp\1 without time zone", text)
        elif data_type.this == exp.DataType.Type.TIMESTAMPTZ:
            text = re.sub(r"^timestamptz(\(\d+\))?", r"timestamp\1 with time zone", text)
    return text


def _ref(table: Any) -> TableRef | None:
    from sqlglot import exp

    if not isinstance(table, exp.Table) or not table.name:
        return None
    return TableRef(namespace=table.db or None, name=table.name)


def _column(definition: Any, dialect: Dialect, added: bool = False) -> tuple[Column, bool]:
    """ColumnDef -> (Column, declared inline as primary key); ``added`` (ADD COLUMN): with the default the
    rows already in the table take (replicator.defaults)."""
    from sqlglot import exp

    from replicator import defaults

    kind = definition.args.get("kind")
    constraints = [c.args.get("kind") for c in definition.args.get("constraints") or []]
    not_null = any(
        isinstance(c, exp.NotNullColumnConstraint) and not c.args.get("allow_null") for c in constraints
    )
    primary = any(isinstance(c, exp.PrimaryKeyColumnConstraint) for c in constraints)
    type_text = _type_text(kind, dialect) if kind is not None else None
    nullable = not (not_null or primary)
    column = Column(
        name=definition.name,
        type=type_text,
        nullable=nullable,
        default=defaults.from_column(definition, type_text, nullable, dialect) if added else None,
    )
    return column, primary


def _key_columns(node: Any) -> tuple[str, ...]:
    from sqlglot import exp

    names = []
    for e in node.expressions:
        target = e.this if isinstance(e, exp.Ordered) else e
        names.append(target.name)
    return tuple(names)


def _create(node: Any, dialect: Dialect) -> list[SchemaChange]:
    from sqlglot import exp

    kind = (node.args.get("kind") or "").upper()
    if kind in ("DATABASE", "SCHEMA"):
        return [CreateDatabase(name=node.this.name)]
    if kind == "INDEX":
        index = node.this
        return [CreateIndex(table=_ref(index.args.get("table")), name=index.name or None)]
    if kind != "TABLE":
        raise DdlError(f"CREATE {kind} is not a table change")
    schema = node.this
    if not isinstance(schema, exp.Schema):
        raise DdlError("CREATE TABLE without a column list (CREATE TABLE ... AS / LIKE) cannot be mirrored")
    columns: list[Column] = []
    key: tuple[str, ...] = ()
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            column, primary = _column(item, dialect)
            columns.append(column)
            if primary:
                key = (column.name,)
        elif isinstance(item, exp.PrimaryKey):
            key = _key_columns(item)
        elif isinstance(item, exp.Constraint):
            for inner in item.expressions:
                if isinstance(inner, exp.PrimaryKey):
                    key = _key_columns(inner)
    keyed = set(key)
    columns = [c.model_copy(update={"nullable": False}) if c.name in keyed else c for c in columns]
    return [CreateTable(table=_ref(schema.this), columns=tuple(columns), primary_key=key)]


def _drop(node: Any) -> list[SchemaChange]:
    kind = (node.args.get("kind") or "").upper()
    tables = node.args.get("tables") or []
    if kind in ("DATABASE", "SCHEMA"):
        return [DropDatabase(name=t.name) for t in tables]
    if kind == "INDEX":
        on = node.args.get("cluster")
        return [DropIndex(table=_ref(on.this) if on is not None else None, name=t.name) for t in tables]
    if kind == "TABLE":
        return [DropTable(table=_ref(t)) for t in tables]
    raise DdlError(f"DROP {kind} is not a table change")


def _alter_action(action: Any, table: TableRef | None, dialect: Dialect) -> list[SchemaChange]:
    from sqlglot import exp

    if isinstance(action, exp.ColumnDef):
        column, primary = _column(action, dialect, added=True)
        changes: list[SchemaChange] = [AddColumn(table=table, column=column)]
        return [*changes, AddPrimaryKey(table=table, columns=(column.name,))] if primary else changes
    if isinstance(action, exp.Schema):  # ADD COLUMN (a int, b text)
        return [c for e in action.expressions for c in _alter_action(e, table, dialect)]
    if isinstance(action, exp.Drop):
        kind = (action.args.get("kind") or "COLUMN").upper()
        names = [t.name for t in action.args.get("tables") or []]
        if kind == "COLUMN":
            return [DropColumn(table=table, name=n) for n in names]
        if kind in ("INDEX", "KEY"):
            return [DropIndex(table=table, name=n) for n in names]
        if kind == "CONSTRAINT":  # PostgreSQL names its key constraint; which one is not known here
            return [DropIndex(table=table, name=n) for n in names]
        raise DdlError(f"cannot read ALTER TABLE ... DROP {kind}")
    if isinstance(action, exp.DropPrimaryKey):
        return [DropPrimaryKey(table=table)]
    if isinstance(action, exp.RenameColumn):
        return [RenameColumn(table=table, old=action.this.name, new=action.args["to"].name)]
    if isinstance(action, exp.AlterRename):
        new = _ref(action.this)
        assert new is not None and table is not None
        return [RenameTable(old=table, new=new)]
    if isinstance(action, exp.ModifyColumn):  # MySQL MODIFY / CHANGE
        definition = action.this
        column, _primary = _column(definition, dialect)
        renamed = action.args.get("rename_from")
        result: list[SchemaChange] = []
        if renamed is not None and renamed.name != column.name:
            result.append(RenameColumn(table=table, old=renamed.name, new=column.name))
        if column.type:
            result.append(ChangeType(table=table, name=column.name, type=column.type))
        return result
    if isinstance(action, exp.AlterColumn):  # PostgreSQL ALTER COLUMN ... TYPE / SET / DROP
        dtype = action.args.get("dtype")
        if dtype is not None:
            return [ChangeType(table=table, name=action.this.name, type=_type_text(dtype, dialect))]
        return []  # defaults, NOT NULL, comments: nothing the mirror keeps
    if isinstance(action, exp.AddConstraint):
        result = []
        for e in action.expressions:
            inner = e.expressions if isinstance(e, exp.Constraint) else [e]
            for c in inner:
                if isinstance(c, exp.PrimaryKey):
                    result.append(AddPrimaryKey(table=table, columns=_key_columns(c)))
                else:
                    result.append(
                        CreateIndex(table=table, name=e.name if isinstance(e, exp.Constraint) else None)
                    )
        return result
    if isinstance(action, exp.IndexColumnConstraint | exp.UniqueColumnConstraint):
        return [CreateIndex(table=table, name=action.name or None)]
    if isinstance(action, exp.AlterSet | exp.Comment | exp.Properties):
        return []  # table options (ENGINE, COMMENT, storage): nothing the mirror keeps
    raise DdlError(f"cannot read ALTER TABLE action {action.sql(dialect=dialect)!r}")


def _statement(node: Any, sql: str, dialect: Dialect) -> list[SchemaChange]:
    from sqlglot import exp

    if isinstance(node, exp.Create):
        return _create(node, dialect)
    if isinstance(node, exp.Drop):
        return _drop(node)
    if isinstance(node, exp.TruncateTable):
        return [TruncateTable(table=_ref(t)) for t in node.expressions]
    if isinstance(node, exp.Alter):
        if (node.args.get("kind") or "TABLE").upper() != "TABLE":
            raise DdlError(f"ALTER {node.args.get('kind')} is not a table change")
        table = _ref(node.this)
        return [c for action in node.args.get("actions") or [] for c in _alter_action(action, table, dialect)]
    raise DdlError(f"not a table DDL statement ({type(node).__name__})")


# What costs sqlglot time, read without it: quoted text (skipped), parentheses and commas.
_STRUCTURE = re.compile(r"\\.|['\"`(),]")


def shape(sql: str) -> tuple[int, int]:
    """(clauses, nesting) of a statement, in one linear pass: the commas outside parentheses and inside the
    first level (ALTER's clauses, CREATE's column definitions) plus one, and the deepest parenthesis; quoted
    text counts for neither."""
    clauses, depth, deepest, quote = 1, 0, 0, ""
    for match in _STRUCTURE.finditer(sql):
        char = match.group()
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == ",":
            clauses += depth <= 1
    return clauses, deepest


def oversized(text: str, max_bytes: int, max_clauses: int, max_nesting: int) -> str | None:
    """Which limit (job file ``limits``) a DDL text exceeds, or None: checked before sqlglot reads it, whose
    time grows with the clauses (20,000 ADD COLUMN: seconds) and whose recursion the nesting exhausts."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return f"the DDL text is {size} bytes, more than limits.ddl_bytes ({max_bytes})"
    clauses, nesting = shape(text)
    if clauses > max_clauses:
        return f"the DDL text has {clauses} clauses, more than limits.ddl_clauses ({max_clauses})"
    if nesting > max_nesting:
        return f"the DDL text nests parentheses {nesting} deep, more than limits.ddl_nesting ({max_nesting})"
    return None


@lru_cache(maxsize=1024)
def _parse_sql(sql: str, dialect: Dialect) -> tuple[SchemaChange, ...]:
    try:
        return _read_sql(sql, dialect)
    except DdlError:
        raise
    except (RecursionError, MemoryError) as exc:  # a statement sqlglot cannot hold (nested too deeply)
        raise DdlError(f"sqlglot ({dialect}) cannot read the statement ({type(exc).__name__})") from None
    except Exception as exc:  # a shape the reading here did not foresee: the message's, never the job's
        raise DdlError(f"cannot read the statement ({type(exc).__name__}: {exc})") from None


def _read_sql(sql: str, dialect: Dialect) -> tuple[SchemaChange, ...]:
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ErrorLevel, SqlglotError

    renamed = _rename_statement(sql)
    if renamed is not None:
        return tuple(renamed)
    try:
        nodes = [n for n in sqlglot.parse(sql, read=dialect, error_level=ErrorLevel.RAISE) if n is not None]
    except SqlglotError as exc:
        raise DdlError(f"sqlglot ({dialect}) cannot read the statement: {str(exc).splitlines()[0]}") from None
    if not nodes:
        raise DdlError("empty DDL statement")
    changes: list[SchemaChange] = []
    for node in nodes:
        if isinstance(node, exp.Command):
            raise DdlError(f"sqlglot ({dialect}) cannot read the statement (unsupported syntax)")
        changes.extend(_statement(node, sql, dialect))
    return tuple(changes)


def parse_ddl(sql: str, dialect: Dialect = "mysql") -> list[SchemaChange]:
    """DDL text -> schema changes; raises :class:`DdlError` when the statement cannot be read."""
    if not sql or not sql.strip():
        raise DdlError("empty DDL statement")
    return list(_parse_sql(sql, dialect))


# ---- structural tableChanges (CloudCanal, canal-json from CloudCanal, Debezium) --------------------------


def _tc_type(column: dict[str, Any]) -> str | None:
    """The same type text the Debezium decoder gives ``source_types`` (typeExpression, else typeName with
    length/scale)."""
    expression = column.get("typeExpression") or column.get("typeName")
    if expression is None:
        return f"jdbc:{column['jdbcType']}" if column.get("jdbcType") is not None else None
    text = str(expression)
    if "(" not in text and column.get("length") is not None:
        scale = column.get("scale")
        text = f"{text}({column['length']}{'' if scale is None else f',{scale}'})"
    return text.lower()


def parse_table_changes(text: str | dict[str, Any] | list[Any]) -> list[SchemaChange]:
    """A ``tableChanges`` document (an object or a list) -> CreateTable / DeclareSchema / DropTable."""
    try:
        data = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as exc:
        raise DdlError(f"tableChanges is not JSON: {exc}") from None
    except RecursionError:
        raise DdlError("tableChanges is nested too deeply") from None
    try:
        return _table_changes(data)
    except DdlError:
        raise
    except Exception as exc:  # a column without a name, a list where an object belongs, ...
        raise DdlError(f"cannot read tableChanges ({type(exc).__name__}: {exc})") from None


def _table_changes(data: Any) -> list[SchemaChange]:
    items = data if isinstance(data, list) else [data]
    changes: list[SchemaChange] = []
    for item in items:
        if not isinstance(item, dict):
            raise DdlError("tableChanges: expected an object with 'type' and 'table'")
        kind = str(item.get("type") or "ALTER").upper()
        table = item.get("table") or {}
        if kind in ("DROP", "ERASE"):
            changes.append(DropTable())
            continue
        raw_columns = sorted(table.get("columns") or [], key=lambda c: c.get("position") or 0)
        key = tuple(table.get("primaryKeyColumnNames") or ())
        columns = tuple(
            Column(
                name=c["name"],
                type=_tc_type(c),
                nullable=bool(c.get("optional", True)) and c["name"] not in key,
            )
            for c in raw_columns
        )
        if kind == "CREATE":
            changes.append(CreateTable(columns=columns, primary_key=key))
        else:
            changes.append(DeclareSchema(columns=columns, primary_key=key))
    return changes


# ---- barrier events ---------------------------------------------------------------------------------------


def _mongo_command(text: str) -> list[SchemaChange]:
    """A MongoDB command document (drs-mongo DDL, Huawei DRS «Kafka消息格式»): collection create / drop /
    rename."""
    try:
        command = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DdlError(f"MongoDB command is not JSON: {exc}") from None
    except RecursionError:
        raise DdlError("MongoDB command is nested too deeply") from None
    if not isinstance(command, dict) or not command:
        raise DdlError("MongoDB command: expected a non-empty object")
    name, value = next(iter(command.items()))
    if name == "drop":
        return [DropTable(table=TableRef(name=str(value)))]
    if name == "create":
        return [CreateTable(table=TableRef(name=str(value)), primary_key=("_id",))]
    if name == "dropDatabase":
        return [DropDatabase(name="")]
    if name == "renameCollection":
        return [RenameTable(old=_ref_from_text(str(value)), new=_ref_from_text(str(command.get("to", ""))))]
    if name in ("createIndexes", "dropIndexes", "collMod"):
        return (
            [CreateIndex(table=TableRef(name=str(value)))]
            if name == "createIndexes"
            else [DropIndex(table=TableRef(name=str(value)))]
            if name == "dropIndexes"
            else []
        )
    raise DdlError(f"MongoDB command {name!r} is not a collection change")


def event_dialect(event: dict[str, Any]) -> Dialect:
    """PostgreSQL-family sources carry a ``schema`` (DRS PG/GaussDB, Debezium PG); MySQL ones do not."""
    return "postgres" if event.get("schema") else "mysql"


def parse_event(event: dict[str, Any]) -> list[SchemaChange]:
    """One barrier event row (database, schema, table, op, ddl_kind, ddl_sql, table_changes) -> changes.

    The statement is read first (in the event's SQL dialect, then the other one); a structural
    ``tableChanges`` completes it (DeclareSchema after an ALTER) or replaces a statement that cannot be read.
    Whatever the message holds, the outcome is changes or a :class:`DdlError` (the event's dead letter):
    an exception of any other kind would stop the batch of every table (fuzz/decode.py, target ``ddl``).
    """
    try:
        return _parse_event(event)
    except DdlError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise DdlError(f"cannot read the statement ({type(exc).__name__})") from None
    except Exception as exc:  # e.g. {"renameCollection": "a"} without "to" (an IndexError, found by fuzzing)
        raise DdlError(f"cannot read the statement ({type(exc).__name__}: {exc})") from None


def _parse_event(event: dict[str, Any]) -> list[SchemaChange]:
    if event.get("op") == "truncate" or event.get("ddl_kind") == "TRUNCATE":
        if not event.get("ddl_sql"):
            return [TruncateTable()]
    sql, structure = event.get("ddl_sql"), event.get("table_changes")
    changes: list[SchemaChange] = []
    error: DdlError | None = None
    if sql and sql.lstrip().startswith("{"):
        changes = _mongo_command(sql)
    elif sql and sql.strip():
        first = event_dialect(event)
        second: Dialect = "mysql" if first == "postgres" else "postgres"
        try:
            changes = parse_ddl(sql, first)
        except DdlError as exc:
            try:
                changes = parse_ddl(sql, second)
            except DdlError:
                error = exc
    if structure:
        declared = parse_table_changes(structure)
        have = {type(c) for c in changes}
        for change in declared:
            if type(change) not in have:
                changes.append(change)
        return changes
    if error is not None:
        raise error
    if not sql or not sql.strip():
        if event.get("ddl_kind") in ("CINDEX", "DINDEX", "QUERY"):
            return []
        raise DdlError(f"{event.get('ddl_kind') or 'DDL'} event without a statement or tableChanges")
    if event.get("ddl_kind") == "INIT_DDL" and not any(isinstance(c, CreateTable) for c in changes):
        raise DdlError("INIT_DDL is not a CREATE TABLE statement")
    return changes
