"""The job file (``conf/*.yaml``): pydantic models and a loader whose errors name the file and the key."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from replicator.storage import Location, ObjectPath, StorageError, is_uri, location

OnError = Literal["dead_letter", "fail"]
SchemaPolicy = Literal["lenient", "evolve", "ignore", "fail"]


class ConfigError(ValueError):
    """A job file that cannot be used; the message names the file, the key path and what was expected."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


def _location(value: Any) -> Any:
    """A configured path: a local folder (plain or ``file://``) or an object-store URI (``s3://bucket/prefix``;
    replicator.storage). Without this an ``s3://`` text became the relative local folder ``s3:``."""
    if isinstance(value, str | Path):
        try:
            return location(value)
        except StorageError as exc:
            raise ValueError(str(exc)) from None
    return value


# A folder or an object-store prefix (docs/object-storage.md).
PathOrUri = Annotated[Location, BeforeValidator(_location)]


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|m|min|minutes?|h|hours?|d|days?)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | int | float) -> dt.timedelta:
    """``"10 seconds"``, ``"500ms"``, ``"7d"`` or a number of seconds -> timedelta."""
    if isinstance(text, int | float):
        return dt.timedelta(seconds=float(text))
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"expected a duration like '10 seconds', '500ms' or '7 days', got {text!r}")
    number, unit = float(match.group(1)), match.group(2)
    key = unit if unit in _UNIT_SECONDS else unit[0]
    return dt.timedelta(seconds=number * _UNIT_SECONDS[key])


Duration = Annotated[dt.timedelta, Field()]


class KafkaOptions(_Model):
    bootstrap_servers: str = Field(
        description="host:port,... of the brokers (Spark's kafka.bootstrap.servers)"
    )
    topics: list[str] = Field(default_factory=list, description="the topics to read (or topic_pattern)")
    topic_pattern: str | None = Field(
        default=None, description="a regex: every topic whose name matches it, created later too (or topics)"
    )
    starting_offsets: str = Field(
        default="earliest", description="earliest, latest or Spark's JSON offsets; the first run only"
    )
    max_offsets_per_trigger: int | None = Field(
        default=100_000, description="records per micro-batch (null: everything available)"
    )
    fail_on_data_loss: bool = Field(
        default=True, description="offsets Kafka no longer has stop the job (true) or are logged and skipped"
    )
    options: dict[str, str] = Field(default_factory=dict, description="extra kafka.* / source options")
    reader: Literal["auto", "direct", "spark"] = Field(
        default="auto",
        description="who reads a batch's records: the decode tasks (direct) or Spark's Kafka source "
        "(replicator.kafka_reader; auto: direct unless a kafka.* option has no librdkafka equivalent)",
    )

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaOptions:
        if bool(self.topics) == bool(self.topic_pattern):
            raise ValueError("set exactly one of 'topics' or 'topic_pattern'")
        return self

    @model_validator(mode="after")
    def _readable_directly(self) -> KafkaOptions:
        if self.reader == "direct" and self.direct_settings() is None:
            from replicator.kafka_reader import unreadable_options

            raise ValueError(
                "reader: direct cannot use the option(s) "
                f"{', '.join(unreadable_options(self.options))} (no librdkafka equivalent); use reader: spark"
            )
        return self

    def direct_settings(self) -> dict[str, str] | None:
        """librdkafka's settings when the decode tasks read the records themselves, else None."""
        if self.reader == "spark":
            return None
        from replicator.kafka_reader import client_settings

        return client_settings({"kafka.bootstrap.servers": self.bootstrap_servers, **self.options})


class SourceConfig(_Model):
    type: Literal["files", "kafka"] = Field(
        default="files", description="files: a folder watched by Spark's file stream; kafka: Kafka topics"
    )
    path: PathOrUri | None = Field(
        default=None,
        description="the landing folder of a files source (*.jsonl, *.ndjson, *.json, *.avro, *.b64)",
    )
    dialect: str = Field(
        default="auto", description="the wire format (docs/dialects.md), or auto: detected per message"
    )
    timezone: str = Field(default="UTC", description="IANA zone of wall-clock TIMESTAMP text in the messages")
    max_files_per_trigger: int | None = Field(
        default=None,
        ge=1,
        description="files per micro-batch (bounds a catch-up's batches); unset: all new files",
    )
    follow_symlinks: bool = Field(
        default=False,
        description="read files reached through symbolic links under path (docs/configuration.md)",
    )
    zero_dates: Literal["null", "dead_letter"] = Field(
        default="null",
        description="MySQL zero dates (0000-00-00): stored as NULL, or the event is a dead letter",
    )
    avro_schema: Path | None = Field(
        default=None,
        description="an Avro schema file for dts-avro (the older 14-field layout); unset: Aliyun's Record",
    )
    max_decompressed_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="the most bytes one compressed block (a dts-avro container file's) may decompress to",
    )
    kafka: KafkaOptions | None = Field(default=None, description="the Kafka source's settings (type: kafka)")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f"unknown time zone {value!r} (expected an IANA name like 'Asia/Shanghai')"
            ) from exc
        return value

    @field_validator("dialect")
    @classmethod
    def _known_dialect(cls, value: str) -> str:
        from replicator.dialects import dialect_names

        names = dialect_names()
        if value != "auto" and value not in names:
            raise ValueError(did_you_mean(value, ["auto", *names], "dialect"))
        return value

    @model_validator(mode="after")
    def _source_location(self) -> SourceConfig:
        if self.type == "files" and self.path is None:
            raise ValueError("a files source needs 'path'")
        if self.type == "kafka" and self.kafka is None:
            raise ValueError("a kafka source needs a 'kafka' section (bootstrap_servers, topics)")
        return self


class TargetConfig(_Model):
    path: PathOrUri = Field(description="root of the mirror tables: <database>/<table> under it")
    writer: Literal["delta-rs", "delta-spark"] = Field(
        default="delta-rs",
        description="delta-rs (MERGE on the driver) or delta-spark (MERGE on the executors)",
    )
    change_data_feed: bool = Field(
        default=False, description="create mirrors with delta.enableChangeDataFeed=true (docs/history.md)"
    )

    deletion_vectors: bool = Field(
        default=False,
        description="create mirrors with delta.enableDeletionVectors=true, so a batch marks the rows it "
        "changes instead of rewriting their files (delta-spark's MERGE; with delta-rs, the engine's own "
        "commit: replicator.sinks.vectors; docs/configuration.md)",
    )

    def mirror_properties(self) -> dict[str, str]:
        """Delta table properties of the mirrors this job creates."""
        properties = {"delta.enableChangeDataFeed": "true"} if self.change_data_feed else {}
        if self.deletion_vectors:
            properties["delta.enableDeletionVectors"] = "true"
        return properties


class StateConfig(_Model):
    path: PathOrUri = Field(
        description="the job's own folder: checkpoint, dead letters, registry, tombstones, change log"
    )


class StorageConfig(_Model):
    """Object-store access shared by target.path, state.path and a files source (docs/object-storage.md).
    Unset fields leave the AWS variables, profiles and instance metadata to the clients. Secrets are named
    by environment variable, never written here."""

    endpoint: str | None = Field(
        default=None, description="an S3-compatible server's URL (http(s)://host:port)"
    )
    region: str | None = Field(default=None, description="the bucket's region")
    path_style: bool | None = Field(default=None, description="bucket in the path, not the host name")
    allow_http: bool | None = Field(default=None, description="allow an http:// endpoint")
    access_key_env: str | None = Field(default=None, description="the variable holding the access key id")
    secret_key_env: str | None = Field(default=None, description="the variable holding the secret key")
    session_token_env: str | None = Field(default=None, description="the variable holding a session token")
    lease_seconds: int = Field(
        default=60, ge=10, description="how long a job's lock on an object store lasts without a heartbeat"
    )


class TriggerConfig(_Model):
    interval: dt.timedelta = Field(
        default=dt.timedelta(seconds=10),
        description="micro-batch interval of a continuous job (500ms, 1 minute)",
    )
    overlap: bool = Field(
        default=True,
        description="apply a batch to the mirrors while Spark decodes the next one (docs/operations.md)",
    )

    @field_validator("interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> dt.timedelta:
        return value if isinstance(value, dt.timedelta) else parse_duration(value)


class TombstoneConfig(_Model):
    retention: dt.timedelta = Field(
        default=dt.timedelta(days=7),
        description="how long a delete's tombstone guards its key against older events",
    )
    expire_every_batches: int = Field(default=10, ge=1, description="batches between tombstone expiry runs")

    @field_validator("retention", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> dt.timedelta:
        return value if isinstance(value, dt.timedelta) else parse_duration(value)


class ChangelogConfig(_Model):
    enabled: bool = Field(
        default=True, description="append every decoded event to the change log (the source of replay)"
    )


class RouteRule(_Model):
    """Many source tables -> one mirror (sharding): ``match`` is a regex on ``database.table``
    (``database.schema.table`` for sources with schemas), matched whole; ``to`` the mirror's name."""

    match: str = Field(description="a regex on database.table (database.schema.table), matched whole")
    to: str = Field(pattern=r"^[^.]+\.[^.]+(\.[^.]+)?$", description="the mirror's name: database.table")
    source_in_key: bool = Field(
        default=False, description="add _cdc_source_database / _cdc_source_table to the key (colliding keys)"
    )

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value

    def target(self) -> tuple[str, str | None, str]:
        parts = self.to.split(".")
        return (parts[0], None, parts[1]) if len(parts) == 2 else (parts[0], parts[1], parts[2])


class TablesConfig(_Model):
    include: list[str] = Field(default_factory=lambda: ["*"], description="globs on database.table")
    exclude: list[str] = Field(default_factory=list, description="globs on database.table")
    keys: dict[str, list[str]] = Field(
        default_factory=dict,
        description="glob on database.table -> primary key columns, for formats whose messages carry none",
    )
    route: list[RouteRule] = Field(default_factory=list, description="source table regexes -> one mirror")
    types: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description=(
            "glob on database.table -> column -> source type text as in DDL (decimal(12,2)), for columns "
            "whose messages declare no type or only a bare one (docs/configuration.md)"
        ),
    )

    @field_validator("types")
    @classmethod
    def _known_types(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        from replicator.types import column_type

        for pattern, columns in value.items():
            for column, source_type in columns.items():
                if not column_type(source_type).known:
                    raise ValueError(f"{pattern}.{column}: unknown source type {source_type!r}")
        return value

    history: list[str] = Field(
        default_factory=list, description="globs on database.table: keep a history table (SCD type 2)"
    )
    history_track: dict[str, list[str]] = Field(
        default_factory=dict,
        description="glob on database.table -> the columns whose change opens a new history version",
    )

    def history_for(self, name: str) -> bool:
        """Whether the mirror ``database.table`` keeps a history table (docs/history.md)."""
        from fnmatch import fnmatchcase

        return any(fnmatchcase(name, p) for p in self.history)

    def tracked(self, name: str) -> list[str] | None:
        """The tracked columns of a history table (None: every column)."""
        from fnmatch import fnmatchcase

        for pattern, columns in self.history_track.items():
            if fnmatchcase(name, pattern):
                return list(columns)
        return None

    def routed_target(self, name: str) -> bool:
        return any(rule.to == name for rule in self.route)

    def selected(self, name: str) -> bool:
        from fnmatch import fnmatchcase

        return any(fnmatchcase(name, p) for p in self.include) and not any(
            fnmatchcase(name, p) for p in self.exclude
        )

    def types_for(self, name: str) -> dict[str, str]:
        """The declared column types of ``database.table``: the first matching glob's."""
        from fnmatch import fnmatchcase

        for pattern, columns in self.types.items():
            if fnmatchcase(name, pattern):
                return columns
        return {}

    def key_for(self, name: str) -> list[str] | None:
        from fnmatch import fnmatchcase

        for pattern, key in self.keys.items():
            if fnmatchcase(name, pattern):
                return key
        return None


class SchemaEvolutionConfig(_Model):
    """``schema_evolution: {default: lenient, tables: {"shop.audit*": ignore}}``; the first matching glob
    (on ``database.table``) wins."""

    default: SchemaPolicy = Field(default="lenient", description="the policy of tables no glob matches")
    tables: dict[str, SchemaPolicy] = Field(
        default_factory=dict, description="glob on database.table -> policy; the first matching glob wins"
    )

    def policy_for(self, name: str) -> SchemaPolicy:
        from fnmatch import fnmatchcase

        for pattern, policy in self.tables.items():
            if fnmatchcase(name, pattern):
                return policy
        return self.default


class LimitsConfig(_Model):
    """What one message may cost the job (docs/configuration.md, "Limits"): past a limit the message is a
    dead letter naming the limit, so a forged or runaway message never stalls every table."""

    columns: int = Field(
        default=30_000,
        ge=1,
        description="the most columns one row image may carry (above every database's own limit: SQL "
        "Server's wide tables hold 30,000, MySQL 4,096, PostgreSQL 1,600, Oracle 1,000)",
    )
    ddl_bytes: int = Field(default=1024 * 1024, ge=1024, description="the longest DDL text, in bytes")
    table_changes_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="the longest tableChanges document (Debezium, CloudCanal: about 300 bytes a column)",
    )
    ddl_clauses: int = Field(
        default=10_000,
        ge=1,
        description="the most clauses one DDL statement may have (ALTER's actions, CREATE's columns, keys)",
    )
    ddl_nesting: int = Field(
        default=32, ge=1, description="the deepest nesting of parentheses in a DDL text (DEFAULT expressions)"
    )
    new_tables_per_batch: int = Field(
        default=10_000,
        ge=1,
        description="the most tables one micro-batch may create; the events of the others are dead letters",
    )


class MetricsConfig(_Model):
    """A continuous job's figures for Prometheus (docs/operations.md, "Metrics")."""

    port: int = Field(ge=1, le=65535, description="the port of the /metrics endpoint")
    host: str = Field(default="127.0.0.1", description="the address it listens on (loopback by default)")


class CatalogConfig(_Model):
    """Mirrors (and history tables) registered as external Delta tables in Spark's session catalog, so that
    ``SELECT * FROM shop.orders`` finds them without their paths (docs/configuration.md, "Catalog")."""

    enabled: bool = Field(
        default=False, description="register each mirror (and history table) the job writes"
    )
    database_prefix: str = Field(
        default="", pattern=r"^[A-Za-z0-9_]*$", description="put before each catalog database's name"
    )
    naming: Literal["database_schema", "database"] = Field(
        default="database_schema",
        description="the catalog database of a table with a source schema: <database>_<schema>, or "
        "<database> alone (tables of two schemas may then collide: the second is refused)",
    )
    metastore: Path | None = Field(
        default=None, description="the embedded Derby metastore's folder (default: <state.path>/metastore)"
    )
    metastore_uri: str | None = Field(
        default=None, description="a Hive metastore service (thrift://host:9083) instead of the embedded one"
    )
    warehouse: str | None = Field(
        default=None, description="spark.sql.warehouse.dir (default: <state.path>/warehouse)"
    )
    history: bool = Field(default=True, description="register history tables too (<table>__history)")
    on_error: Literal["warn", "fail"] = Field(
        default="warn",
        description="a catalog that cannot be reached or refuses an entry: log a warning and retry at the "
        "next batch (warn), or fail the batch after its mirrors are committed (fail)",
    )

    @field_validator("metastore")
    @classmethod
    def _jdbc_safe(cls, value: Path | None) -> Path | None:
        # The folder goes into Derby's JDBC URL, whose attributes ';' separates.
        if value is not None and ";" in str(value):
            raise ValueError("a metastore folder whose name holds ';' cannot be given to Derby")
        return value

    def spark_settings(self) -> dict[str, str]:
        """What a session needs to hold the catalog: Spark's Hive support, with the embedded Derby metastore
        in ``metastore`` or the service at ``metastore_uri`` (static: read when the session starts;
        replicator.spark.jar_settings adds Delta Lake's catalog)."""
        if not self.enabled:
            return {}
        settings = {"spark.sql.catalogImplementation": "hive"}
        if self.warehouse:
            settings["spark.sql.warehouse.dir"] = self.warehouse
        if self.metastore_uri:
            settings["spark.hadoop.hive.metastore.uris"] = self.metastore_uri
        elif self.metastore is not None:
            url = f"jdbc:derby:;databaseName={self.metastore / 'metastore_db'};create=true"
            settings["spark.hadoop.javax.jdo.option.ConnectionURL"] = url
        return settings


class SparkConfig(_Model):
    master: str | None = Field(
        default=None,
        description="the embedded session's master (unset: REPLICATOR_SPARK_MASTER, else local[*])",
    )
    conf: dict[str, str] = Field(
        default_factory=dict, description="extra Spark settings (spark.driver.memory: 8g)"
    )


class JobConfig(_Model):
    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="letters, digits, . _ -; the Delta app-transaction id of every commit",
    )
    source: SourceConfig = Field(description="where the messages come from")
    target: TargetConfig = Field(description="where the mirror tables go")
    state: StateConfig = Field(description="where the job keeps its state")
    trigger: TriggerConfig = Field(default=TriggerConfig(), description="when micro-batches run")
    on_error: OnError = Field(
        default="dead_letter",
        description="a bad record: kept as a dead letter, or the job stops naming it (exit 3)",
    )
    dead_tables: Literal["fail", "warn"] = Field(
        default="fail",
        description=(
            "a table whose records of a `mirror --available-now` run all became dead letters and that was "
            "never applied: the run exits with code 4 (fail) or 0 (warn); both print the cause"
        ),
    )
    schema_evolution: SchemaPolicy | SchemaEvolutionConfig = Field(
        default="lenient",
        description="what DDL and new columns do: one policy, or per table (docs/schema-evolution.md)",
    )
    tables: TablesConfig = Field(
        default=TablesConfig(), description="which tables, their keys, types, routes, history"
    )
    changelog: ChangelogConfig = Field(
        default=ChangelogConfig(), description="the change log of decoded events"
    )
    tombstones: TombstoneConfig = Field(default=TombstoneConfig(), description="how deletes guard their keys")
    spark: SparkConfig = Field(default=SparkConfig(), description="the embedded Spark session")
    metrics: MetricsConfig | None = Field(
        default=None, description="serve /metrics for Prometheus (off unless set)"
    )
    catalog: CatalogConfig = Field(
        default=CatalogConfig(),
        description="register mirrors in Spark's session catalog (off unless enabled)",
    )
    storage: StorageConfig = Field(
        default=StorageConfig(), description="object-store access for s3:// paths (docs/object-storage.md)"
    )
    limits: LimitsConfig = Field(
        default=LimitsConfig(),
        description="what one message may cost the job (docs/configuration.md, Limits)",
    )
    config_file: Path | None = Field(default=None, exclude=True)

    def on_object_store(self) -> bool:
        """Whether any configured location is an object-store URI (Spark then needs s3a)."""
        source = self.source.path if self.source.type == "files" else None
        return any(is_uri(p) for p in (self.target.path, self.state.path, source) if p is not None)

    def storage_settings(self):  # type: ignore[no-untyped-def]
        """The job's :class:`replicator.storage.Storage` (its secrets read from their variables)."""
        from replicator import storage

        return storage.from_settings(self.storage.model_dump(exclude={"lease_seconds"}))

    def schema_policy(self, name: str) -> SchemaPolicy:
        """The schema-evolution policy of a mirror table (``database.table``)."""
        if isinstance(self.schema_evolution, SchemaEvolutionConfig):
            return self.schema_evolution.policy_for(name)
        return self.schema_evolution

    def require_source(self) -> None:
        """A files source's folder must exist when the job starts: a folder that is not there is nearly
        always a typo, and Spark would report it with a traceback (or, continuous, wait on it forever)."""
        path = self.source.path
        if self.source.type != "files" or path is None:
            return
        where = f"{self.config_file}: " if self.config_file else ""
        if not path.exists():
            raise ConfigError(f"{where}source.path: the landing folder {path} does not exist")
        if not path.is_dir():
            raise ConfigError(f"{where}source.path: {path} is not a folder")

    def resolved(self, base: Path) -> JobConfig:
        """Resolve relative paths against ``base`` (the job file's folder)."""

        def fix(path: Location | None) -> Location | None:
            if path is None or isinstance(path, ObjectPath):
                return path
            return path if path.is_absolute() else (base / path).resolve()

        source = self.source.model_copy(
            update={"path": fix(self.source.path), "avro_schema": fix(self.source.avro_schema)}
        )
        catalog = self.catalog
        if catalog.enabled:
            state = fix(self.state.path)
            assert state is not None
            catalog = catalog.model_copy(
                update={
                    "metastore": fix(catalog.metastore) or state / "metastore",
                    "warehouse": _location(catalog.warehouse, base) or str(state / "warehouse"),
                }
            )
        return self.model_copy(
            update={
                "catalog": catalog,
                "source": source,
                "target": self.target.model_copy(update={"path": fix(self.target.path)}),
                "state": self.state.model_copy(update={"path": fix(self.state.path)}),
            }
        )


def _location(text: str | None, base: Path) -> str | None:
    """A folder or a URI (``s3://...``) from the job file: a relative folder resolves against ``base``."""
    if text is None or "://" in text or Path(text).is_absolute():
        return text
    return str((base / text).resolve())


def _key_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """An unknown key's message: the nearest known key at that place ("did you mean"), else the known keys."""
    import typing

    models: list[type[BaseModel]] = [JobConfig]
    for part in loc[:-1]:
        inner: list[type[BaseModel]] = []
        for model in models:
            info = model.model_fields.get(str(part))
            if info is None:
                continue
            pending = [info.annotation]
            while pending:  # the models inside Optional/Union/list annotations
                kind = pending.pop()
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    inner.append(kind)
                else:
                    pending.extend(typing.get_args(kind))
        models = inner or models
    known = sorted({name for model in models for name in model.model_fields if name != "config_file"})
    return did_you_mean(str(loc[-1]), known, "key")


def did_you_mean(word: str, known: Sequence[str], what: str) -> str:
    """An unknown name's message: the nearest known one ("did you mean"), else every known one."""
    import difflib

    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if near:
        return f"unknown {what}; did you mean '{near[0]}'?"
    return f"unknown {what}; expected one of {', '.join(known)}"


def parse_config(data: Any, source: str = "<config>", base: Path | None = None) -> JobConfig:
    """Validate an already-loaded mapping. ``source`` names the file in error messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys (name, source, target, state), got {data!r}")
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: invalid job file"]
        for err in exc.errors():
            if err["type"] == "extra_forbidden":
                lines.append(f"  {_key_path(err['loc'])}: {_unknown_key(err['loc'])}")
                continue
            if err["type"] == "missing":
                lines.append(f"  {_key_path(err['loc'])}: a required key is missing")
                continue
            lines.append(f"  {_key_path(err['loc'])}: {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("\n".join(lines)) from None
    config = config.resolved(base or Path.cwd())
    _check_folders(config, source)
    if config.target.deletion_vectors and config.target.writer == "delta-rs" and is_uri(config.target.path):
        # replicator.sinks.vectors writes the vector files and its commit itself, on a local file system.
        raise ConfigError(
            f"{source}: target.deletion_vectors with the delta-rs writer needs a local target.path; on an "
            "object store use target.writer: delta-spark, or leave deletion vectors off "
            "(docs/object-storage.md)"
        )
    catalog = config.catalog
    if catalog.enabled and not catalog.metastore_uri and isinstance(catalog.metastore, ObjectPath):
        # Derby keeps its database in local files: it cannot live under an s3:// state.path.
        raise ConfigError(
            f"{source}: catalog.metastore: the embedded Derby metastore needs a local folder, and state.path "
            f"is {config.state.path}; give catalog.metastore (a local folder) or catalog.metastore_uri "
            "(a Hive metastore service, thrift://host:9083) (docs/object-storage.md)"
        )
    return config


def _check_folders(config: JobConfig, source: str) -> None:
    """target.path, state.path and a files source's path must be three separate folders, none inside
    another: a job whose mirrors live in its state (or its landing folder) would read, vacuum or
    overwrite its own files. Compared after symbolic links are resolved."""
    import os

    folders = [("target.path", config.target.path), ("state.path", config.state.path)]
    if config.source.type == "files" and config.source.path is not None:
        folders.append(("source.path", config.source.path))
    real = [(key, path if is_uri(path) else Path(os.path.realpath(path))) for key, path in folders]
    for i, (key, path) in enumerate(real):
        for other, other_path in real[i + 1 :]:
            if path == other_path:
                raise ConfigError(
                    f"{source}: {key} and {other} are the same folder ({path}); use separate ones"
                )
            for inner, inner_key, outer, outer_key in (
                (path, key, other_path, other),
                (other_path, other, path, key),
            ):
                if type(inner) is type(outer) and outer in inner.parents:
                    raise ConfigError(
                        f"{source}: {inner_key} ({inner}) is inside {outer_key} ({outer}); "
                        "use folders that do not contain each other"
                    )


def load_config(path: str | Path) -> JobConfig:
    """Read and validate a job file; relative paths resolve against its folder."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read job file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from None
    config = parse_config(data, str(file), file.resolve().parent)
    activate_storage(config, str(file))
    return config.model_copy(update={"config_file": file.resolve()})


def activate_storage(config: JobConfig, source: str = "<config>") -> None:
    """Make the job's storage settings the process's (replicator.storage.activate), before Spark starts."""
    if not config.on_object_store():
        return
    from replicator import storage

    try:
        storage.activate(config.storage_settings())
    except StorageError as exc:
        raise ConfigError(f"{source}: {exc}") from None
