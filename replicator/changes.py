"""Schema changes as data: frozen pydantic models in one union (pyiceberg style), made by replicator.ddl
from DDL text or tableChanges and applied by replicator.apply.schema."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TableRef(_Frozen):
    """A table named in a statement. ``namespace`` is the qualifier written there (MySQL database,
    PostgreSQL schema), None when the statement leaves it to the event's own database/schema."""

    namespace: str | None = None
    name: str


class Default(_Frozen):
    """What the rows already in a table take when the column is added (replicator.defaults): ``value``,
    canonical text for the column's type; ``now``, CURRENT_TIMESTAMP (the DDL's time); ``expression``,
    one the mirror cannot evaluate (``sql``: as written, for the summary's note)."""

    kind: Literal["value", "now", "expression"]
    value: str | None = None
    sql: str = ""


class Column(_Frozen):
    name: str
    type: str | None = None  # source type text; None when the statement gives none
    nullable: bool = True
    default: Default | None = None  # for existing rows at an ADD COLUMN; None: they stay NULL


class CreateTable(_Frozen):
    kind: Literal["create_table"] = "create_table"
    table: TableRef | None = None
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()


class DeclareSchema(_Frozen):
    """The table's full schema after an ALTER, as a structural ``tableChanges`` declares it."""

    kind: Literal["declare_schema"] = "declare_schema"
    table: TableRef | None = None
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()


class AddColumn(_Frozen):
    kind: Literal["add_column"] = "add_column"
    table: TableRef | None = None
    column: Column


class DropColumn(_Frozen):
    kind: Literal["drop_column"] = "drop_column"
    table: TableRef | None = None
    name: str


class RenameColumn(_Frozen):
    kind: Literal["rename_column"] = "rename_column"
    table: TableRef | None = None
    old: str
    new: str


class ChangeType(_Frozen):
    kind: Literal["change_type"] = "change_type"
    table: TableRef | None = None
    name: str
    type: str


class AddPrimaryKey(_Frozen):
    kind: Literal["add_primary_key"] = "add_primary_key"
    table: TableRef | None = None
    columns: tuple[str, ...]


class DropPrimaryKey(_Frozen):
    kind: Literal["drop_primary_key"] = "drop_primary_key"
    table: TableRef | None = None


class RenameTable(_Frozen):
    kind: Literal["rename_table"] = "rename_table"
    old: TableRef
    new: TableRef


class DropTable(_Frozen):
    kind: Literal["drop_table"] = "drop_table"
    table: TableRef | None = None


class TruncateTable(_Frozen):
    kind: Literal["truncate_table"] = "truncate_table"
    table: TableRef | None = None


class CreateIndex(_Frozen):
    kind: Literal["create_index"] = "create_index"
    table: TableRef | None = None
    name: str | None = None


class DropIndex(_Frozen):
    kind: Literal["drop_index"] = "drop_index"
    table: TableRef | None = None
    name: str | None = None


class CreateDatabase(_Frozen):
    kind: Literal["create_database"] = "create_database"
    name: str


class DropDatabase(_Frozen):
    kind: Literal["drop_database"] = "drop_database"
    name: str


SchemaChange = Annotated[
    CreateTable
    | DeclareSchema
    | AddColumn
    | DropColumn
    | RenameColumn
    | ChangeType
    | AddPrimaryKey
    | DropPrimaryKey
    | RenameTable
    | DropTable
    | TruncateTable
    | CreateIndex
    | DropIndex
    | CreateDatabase
    | DropDatabase,
    Field(discriminator="kind"),
]
NO_OPS = (CreateIndex, DropIndex, CreateDatabase, DropDatabase)
