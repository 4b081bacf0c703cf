"""The ``replicator`` command: mirror, bootstrap, replay, repair, optimize, decode, catalog, status,
dead-letters, show, jvm-archive."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

# Pydantic looks for its plugins (observability hooks) when the first model class is built, by scanning
# every installed distribution's entry points, spark-submit's zips included: ~40 ms of each driver's start.
# The job file's models are this command's own and no plugin has anything to observe there. Before the
# config models below; an explicit setting wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from replicator.config import ConfigError, JobConfig, load_config
from replicator.errors import JobRunning, StateDamaged
from replicator.logging import configure, get_logger
from replicator.model import table_label

if TYPE_CHECKING:
    from replicator.commands.brokerwatch import BrokerWatch
    from replicator.commands.joblock import JobLock


def _mirror(args: argparse.Namespace) -> int:
    config = load_config(args.config)  # fails before Spark starts
    config.require_source()
    _hold_lock(config, "mirror")
    from replicator.commands.preflight import check_state

    check_state(config)  # a damaged state file or a mirror that lost commits: named before Spark starts
    from replicator.commands.metrics import check_port

    check_port(config)  # a metrics.port taken: said now, not after Spark's start
    watch = None
    if config.source.kafka is not None and config.source.type == "kafka":
        from replicator.commands.brokerwatch import BrokerWatch

        watch = BrokerWatch(config.source.kafka).start()  # brokers that do not answer: said from the start
    try:
        return _run_mirror(args, config, watch)
    finally:
        if watch is not None:
            watch.stop()


def _run_mirror(args: argparse.Namespace, config: JobConfig, watch: BrokerWatch | None = None) -> int:
    import gc
    import threading

    from replicator.spark import get_spark

    # The start's objects (modules, classes, functions: pyspark, pandas, pyarrow, the engine's) live as
    # long as the driver. Collecting while they are made only walks them again (~40 ms), and so would
    # every full collection of a job that runs for days and the interpreter's exit (~0.15 s): they are
    # frozen out of the collector once the start is done (`gc.freeze`, which Python documents for this).
    gc.disable()
    try:
        # The engine's modules (the stages, the dialects, pyarrow, deltalake: ~0.4 s) load while the
        # driver waits for its JVM, instead of after it; none imports pyspark, which get_spark imports
        # meanwhile. An import that fails there fails again below, in the main thread.
        preload = threading.Thread(target=_preload, name="preload", daemon=True)
        preload.start()
        with _jvm_output_aside(config):
            spark = get_spark(config)
        preload.join()
        from replicator.commands.runner import MirrorJob

        job = MirrorJob(config, spark)
    finally:
        gc.freeze()
        gc.enable()
    try:
        code = job.run(available_now=args.available_now, checked=True)
    finally:
        job.engine.close()  # (drained by run) its apply and change-log threads end before the process does
        if watch is not None:
            watch.stop()  # no warning of its after the run's last lines
    if job.interrupted:  # what it applied is counted (--available-now), and where it stopped said once
        if args.available_now:
            from replicator.commands.outcome import summarize

            print(summarize(config, job.engine.state, job.summaries).line(args.config), flush=True)
        print(job.stopped_at(), file=sys.stderr, flush=True)
        return code
    if not args.available_now:
        return code
    from replicator.commands.outcome import DEAD_TABLES_EXIT, summarize

    outcome = summarize(config, job.engine.state, job.summaries)
    print(outcome.line(args.config), flush=True)
    if outcome.failed:
        print(outcome.failure(), file=sys.stderr, flush=True)
        if config.dead_tables == "fail":
            return DEAD_TABLES_EXIT
    return code


@contextlib.contextmanager
def _jvm_output_aside(config):  # type: ignore[no-untyped-def]
    """On a terminal, Spark's JVM (started by this driver) writes its start-up lines and later warnings into
    ``<state.path>/logs/spark-driver.log`` instead of over the screen: its standard error is this process's
    file 2 when it starts, so file 2 points at the log while it starts."""
    from replicator.storage import ObjectPath

    if (
        not sys.stderr.isatty()
        or "PYSPARK_GATEWAY_PORT" in os.environ
        or isinstance(config.state.path, ObjectPath)
    ):
        yield  # (a state on an object store: no local file to point file 2 at)
        return
    folder = config.state.path / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(folder / "spark-driver.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    os.close(log)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


_HELD: list[JobLock] = []  # the job's lock, held until the command ends


def _hold_lock(config: JobConfig, command: str) -> None:
    """Take the job's lock (replicator.commands.joblock) until the command ends (:func:`main`): a second
    writer of the same job is refused with exit code 2, before it starts Spark or touches anything."""
    from replicator.commands.joblock import JobLock

    _HELD.append(JobLock(config, command).acquire())


def _release_locks() -> None:
    while _HELD:
        _HELD.pop().release()


def _preload() -> None:
    import importlib

    try:
        for module in PRELOADED:
            importlib.import_module(module)
    except Exception:  # the main thread imports it again and reports the error
        pass


PRELOADED = (
    "replicator.engine",
    "replicator.commands.runner",
    "replicator.commands.progress",
    "replicator.sources",
    "replicator.dialects",
    "replicator.sinks.delta_rs",
    "deltalake",
)


def _decode(args: argparse.Namespace) -> int:
    from replicator.commands.inspect import decode_path, event_records
    from replicator.dialects import DecodeOptions, dialect_names

    if args.dialect != "auto" and args.dialect not in dialect_names():
        from replicator.config import did_you_mean

        raise ConfigError(f"--dialect: {did_you_mean(args.dialect, ['auto', *dialect_names()], 'dialect')}")
    from pathlib import Path

    from replicator.sources import FILE_SUFFIXES, message_files

    path = Path(args.file)
    if not path.exists():
        raise ConfigError(f"decode: {path}: no such file or folder")
    if not message_files(path):
        raise ConfigError(
            f"decode: {path}: no message files in it ({', '.join('*' + s for s in FILE_SUFFIXES)})"
        )
    options = DecodeOptions(timezone=args.timezone, avro_schema=args.avro_schema)
    fields = (
        "dialect",
        "op",
        "database",
        "schema",
        "table",
        "primary_key",
        "before",
        "after",
        "position",
        "event_time",
        "ddl_kind",
        "ddl_sql",
        "error",
        "coordinates",
    )
    keyless: dict[str, int] = {}
    for record in event_records(decode_path(args.file, args.dialect, options), fields):
        if record.get("op") == "filtered":
            continue
        if record.get("op") in ("insert", "update", "delete", "snapshot") and not record.get("primary_key"):
            name = ".".join(
                p for p in (record.get("database"), record.get("schema"), record.get("table")) if p
            )
            keyless[name] = keyless.get(name, 0) + 1
        if args.json:
            print(json.dumps(record, ensure_ascii=False, default=str))
        else:
            where = record.pop("coordinates", {})
            head = f"{where.get('source', '')}:{where.get('offset')}"
            print(head, json.dumps(record, ensure_ascii=False, default=str))
    for name, count in sorted(keyless.items()):
        print(
            f"replicator: warning: {count:,} events of {name} carry no primary key: a mirror job "
            f"dead-letters "
            f"them unless the job file gives one (tables.keys: {{'{name}': [...]}}, docs/configuration.md)",
            file=sys.stderr,
        )
    return 0


def _bootstrap(args: argparse.Namespace) -> int:
    from replicator.commands.bootstrap import bootstrap

    config = load_config(args.config)
    _hold_lock(config, "bootstrap")
    states = bootstrap(
        config, args.snapshot, args.position, restart=args.restart, progress=not args.no_progress
    )
    for s in states:
        name = table_label((s.database, s.schema, s.table))
        print(
            f"{name}: {s.phase}, {s.snapshot_rows} snapshot rows, mirror continues after "
            f"{s.last_position or s.truncate_seq or '-'}"
        )
    return 0


def _replay(args: argparse.Namespace) -> int:
    from replicator.commands.replay import replay, replay_mirror_version

    config = load_config(args.config)
    if args.mirror_version is not None:
        for name in replay_mirror_version(config, args.target_path, args.mirror_version, args.tables):
            print(f"{name}: copied as of {args.mirror_version}")
        return 0
    summary = replay(
        config,
        args.target_path,
        as_of=args.as_of,
        position=args.position,
        tables=args.tables,
    )
    print(f"replayed {summary.events} events into {len(summary.tables)} tables under {args.target_path}")
    return 0


def _repair(args: argparse.Namespace) -> int:
    from replicator.commands.repair import repair

    config = load_config(args.config)
    _hold_lock(config, "repair")
    rebuilt = repair(config, args.tables)
    for done in rebuilt:
        print(f"{done.table}: rebuilt from the change log, {done.rows} rows, as of batch {done.batch}")
    if not rebuilt:
        print(f"--tables {args.tables}: no mirror of this job that is behind matches it: nothing to repair")
    return 0


def _exit_now(code: int) -> int:
    """Leave without the interpreter's teardown: the native reader threads of delta-rs/Arrow can abort
    the process at exit ("terminate called without an active exception") after the work is done.
    Only for commands that start no Spark session and have written everything they print. The job's lock
    is released first: ``main``'s ``finally`` does not run after ``os._exit``, and a lease on an object
    store (unlike a ``flock``) does not end with the process: it refused every launch until it expired."""
    _release_locks()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_gone()
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(code)


def _reader_gone() -> int:
    """stdout's reader closed the pipe (``| head``): what is left to print goes nowhere, silently, and the
    exit code is a process's killed by SIGPIPE (128 + 13), as for other commands in such a pipe."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())  # the interpreter's own last flush finds no pipe
        os.close(null)
    return 141


def _optimize(args: argparse.Namespace) -> int:
    from replicator.commands.maintenance import optimize

    config = load_config(args.config)
    _hold_lock(config, "optimize")
    for done in optimize(config, args.tables, args.vacuum_hours, args.target_file_size):
        print(
            f"{done.table}: {done.files_removed} files rewritten as {done.files_added}, "
            f"{done.vacuumed} unreferenced files removed"
        )
    return _exit_now(0)


def _catalog(args: argparse.Namespace) -> int:
    from replicator.catalog import sync_all
    from replicator.spark import get_spark
    from replicator.state import State

    config = load_config(args.config)
    if not config.catalog.enabled:
        raise ConfigError(f"{args.config}: catalog.enabled is not true: there is no catalog to register in")
    _hold_lock(config, "catalog sync")  # the embedded metastore takes one process at a time
    with _jvm_output_aside(config):
        spark = get_spark(config)
    done = sync_all(config, spark, State.of(config).tables().values())
    for line in done.lines():
        print(line)
    print(
        f"catalog: {len(done.registered)} registered, {len(done.present)} already there, "
        f"{len(done.dropped)} dropped, {len(done.refused)} refused"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    from replicator.commands.status import print_status

    if args.html:
        from replicator.commands.report import write_report

        path = write_report(load_config(args.config), args.html, last_batches=args.batches or 500)
        print(f"wrote {path}")
        return _exit_now(0)
    config = load_config(args.config)
    return _exit_now(print_status(config, as_json=args.json, last_batches=args.batches or 10))


def _dead_letters(args: argparse.Namespace) -> int:
    from replicator.commands.deadletters import print_retry, print_summary

    if not getattr(args, "config", None):
        raise ConfigError("dead-letters: --config is required")
    config = load_config(args.config)
    if args.action == "retry":
        _hold_lock(config, "dead-letters retry")
        return _exit_now(print_retry(config, table=args.table, error=args.error, batch=args.batch))
    if args.action == "discard":
        from replicator.commands.deadletters import print_discard

        if not (args.table or args.error or args.batch is not None or args.id):
            raise ConfigError(
                "dead-letters discard: select what to discard: --table, --error, --batch or --id"
            )
        return _exit_now(
            print_discard(
                config, args.reason, table=args.table, error=args.error, batch=args.batch, ids=args.id
            )
        )
    return _exit_now(print_summary(config, as_json=args.json))


def _jvm_archive(args: argparse.Namespace) -> int:
    from pathlib import Path

    from replicator.commands.jvm_archive import write_archive, write_submit_defaults

    try:
        path = write_archive(Path(args.path) if args.path else None)
    except RuntimeError as exc:
        print(f"replicator: {exc}", file=sys.stderr)
        return 1
    print(path)
    print(f"{write_submit_defaults(path)} (for spark-submit --properties-file: the driver maps this archive)")
    return 0


def _jars(args: argparse.Namespace) -> int:
    from replicator import jars

    try:
        counts = jars.fetch(tuple(args.group or jars.GROUPS))
    except jars.JarsMissing as exc:
        print(f"replicator: {exc}", file=sys.stderr)
        return 1
    for group, count in counts.items():
        print(f"{group}: {count} jars in {jars.home() / group}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from replicator.commands.status import print_tables

    return _exit_now(print_tables(load_config(args.config), args.table, args.limit, history=args.history))


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (where it has one the help does not already give);
    descriptions and examples as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or "default" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


CONFIG_HELP = "the job file (YAML, docs/configuration.md)"
JOB = {"required": True}  # a command's --config: the job file it runs on
# A sub-command's --config under `dead-letters`: SUPPRESS keeps `dead-letters --config F retry`'s F (a
# sub-parser default would overwrite it).
KEPT = {"default": argparse.SUPPRESS}


def _command(  # type: ignore[no-untyped-def]
    sub,
    name: str,
    summary: str,
    example: str,
    func: Callable[[argparse.Namespace], int] | None = None,
    config: dict[str, Any] | None = None,
) -> argparse.ArgumentParser:
    """A command's parser: its summary and example; ``func`` runs it; ``config``: the keywords of its
    ``--config`` option, its first (None: it has none)."""
    parser = sub.add_parser(
        name, help=summary, description=summary, epilog=f"example:\n  {example}", formatter_class=_Help
    )
    if config is not None:
        parser.add_argument("--config", help=CONFIG_HELP, **config)
    if func is not None:
        parser.set_defaults(func=func)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("replicator")
    except PackageNotFoundError:
        return "unknown"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replicator",
        description="CDC messages -> Delta Lake mirror tables (docs/operations.md)",
        formatter_class=_Help,
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        help="log lines at this level and above",
    )
    parser.add_argument(
        "--log-file", default=None, metavar="FILE", help="also append every log line here, as JSON"
    )
    parser.add_argument("--version", action="version", version=f"replicator {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    mirror = _command(
        sub,
        "mirror",
        "stream change messages into mirror tables (continuous until SIGTERM, or --available-now)",
        "replicator mirror --config conf/shop.yaml --available-now",
        func=_mirror,
        config=JOB,
    )
    mirror.add_argument(
        "--available-now", action="store_true", help="process what is there, print a summary, then exit"
    )

    decode = _command(
        sub,
        "decode",
        "print the normalized change events of a file or folder of messages",
        "replicator decode landing/orders.jsonl --dialect auto --json",
        func=_decode,
    )
    decode.add_argument("file", help="a message file (*.json, *.jsonl, *.ndjson, *.avro, *.b64) or a folder")
    decode.add_argument("--dialect", default="auto", help="the wire format, or auto to detect it")
    decode.add_argument("--timezone", default="UTC", help="the source's time zone (IANA name)")
    decode.add_argument("--avro-schema", default=None, help="dts-avro: the record schema file (.avsc)")
    decode.add_argument("--json", action="store_true", help="one JSON object per line")

    boot = _command(
        sub,
        "bootstrap",
        "load a full snapshot into fresh mirrors, then hand over to mirror (docs/operations.md)",
        "replicator bootstrap --config conf/shop.yaml --snapshot dump/ --position mysql-bin.000070:6816",
        func=_bootstrap,
        config=JOB,
    )
    boot.add_argument("--snapshot", required=True, help="messages, <db>/<table>/*.parquet|csv or a manifest")
    boot.add_argument("--position", default=None, help="source position the snapshot was taken at")
    boot.add_argument("--restart", action="store_true", help="replace mirrors left by an earlier bootstrap")
    boot.add_argument("--no-progress", action="store_true", help="no progress bar on a terminal")

    rep = _command(
        sub,
        "replay",
        "rebuild mirrors as of a time or position from the change log, into another folder",
        "replicator replay --config conf/shop.yaml --as-of 2024-05-01T12:00:00Z --target-path asof/",
        func=_replay,
        config=JOB,
    )
    cut = rep.add_mutually_exclusive_group(required=True)
    cut.add_argument("--as-of", default=None, help="source event time: ISO-8601 or epoch ms (inclusive)")
    cut.add_argument("--position", default=None, help="source position (inclusive)")
    cut.add_argument("--mirror-version", default=None, help="Delta time travel: version or time")
    rep.add_argument("--target-path", required=True, help="the folder the replayed mirrors are written to")
    rep.add_argument("--tables", default=None, help="glob on database.table (default: every table)")

    fix = _command(
        sub,
        "repair",
        "rebuild mirrors that lost Delta commits (a mirror behind) from the change log",
        "replicator repair --config conf/shop.yaml --tables shop.orders",
        func=_repair,
        config=JOB,
    )
    fix.add_argument("--tables", required=True, help="glob on database.table: the mirrors to rebuild")

    opt = _command(
        sub,
        "optimize",
        "cluster mirrors by primary key (z-order) and vacuum them",
        "replicator optimize --config conf/shop.yaml --tables 'shop.*' --vacuum-hours 168",
        func=_optimize,
        config=JOB,
    )
    opt.add_argument("--tables", default=None, help="glob on database.table (default: every table)")
    opt.add_argument(
        "--vacuum-hours", type=int, default=None, help="also remove unreferenced files older than this"
    )
    opt.add_argument(
        "--target-file-size", type=int, default=None, help="bytes per data file (default: 100 MB)"
    )

    catalog = _command(
        sub,
        "catalog",
        "register every mirror the job owns in the catalog (catalog.enabled; docs/configuration.md)",
        "replicator catalog sync --config conf/shop.yaml",
        func=_catalog,
        config=JOB,
    )
    catalog.add_argument("action", choices=("sync",), help="sync: entries in step with the registry")

    status = _command(
        sub,
        "status",
        "tables, phases, positions, lag, dead letters and recent batches of a job",
        "replicator status --config conf/shop.yaml --html lag.html",
        func=_status,
        config=JOB,
    )
    status.add_argument("--json", action="store_true", help="one JSON document")
    status.add_argument(
        "--batches", type=int, default=None, help="how many recent micro-batches to show (10; --html: 500)"
    )
    status.add_argument("--html", default=None, metavar="FILE", help="write a self-contained HTML report")

    dead = _command(
        sub,
        "dead-letters",
        "dead letters by table and error; `retry` re-drives them (docs/operations.md)",
        "replicator dead-letters --config conf/shop.yaml retry --table 'shop.*'",
        config={},
    )
    dead.add_argument("--json", action="store_true", help="one JSON document")
    dead.set_defaults(func=_dead_letters, action=None)
    dead_sub = dead.add_subparsers(
        dest="action", metavar="ACTION", help="retry: re-drive them; discard: set them aside (optional)"
    )
    again = _command(
        dead_sub,
        "retry",
        "re-drive pending dead letters through the engine, once",
        "replicator dead-letters retry --config conf/shop.yaml --error 'no primary key'",
        config=KEPT,
    )
    again.add_argument("--table", default=None, help="glob on database.table (default: every table)")
    again.add_argument("--error", default=None, help="only dead letters whose error contains this text")
    again.add_argument("--batch", type=int, default=None, help="only dead letters of this batch")
    drop = _command(
        dead_sub,
        "discard",
        "set aside dead letters that can never succeed: kept, recorded with who/when/why, no longer pending",
        "replicator dead-letters discard --config conf/shop.yaml --error truncated --reason 'broken export'",
        config=KEPT,
    )
    drop.add_argument("--table", default=None, help="glob on database.table")
    drop.add_argument("--error", default=None, help="dead letters whose error contains this text")
    drop.add_argument("--batch", type=int, default=None, help="dead letters of this batch")
    drop.add_argument(
        "--id", action="append", default=None, help="a dead letter's id, as listed (repeatable)"
    )
    drop.add_argument("--reason", required=True, help="why: recorded with the discard")

    show = _command(
        sub,
        "show",
        "print mirror tables (rows ordered by primary key)",
        "replicator show --config conf/shop.yaml --table 'shop.orders' --limit 20",
        func=_show,
        config=JOB,
    )
    show.add_argument("--table", default=None, help="glob on database.table (default: every table)")
    show.add_argument("--limit", type=int, default=50, help="rows per table")
    show.add_argument("--history", action="store_true", help="print the history tables (docs/history.md)")

    archive = _command(
        sub,
        "jvm-archive",
        "write the class archive the Spark driver JVM starts from (docs/operations.md)",
        "replicator jvm-archive",
        func=_jvm_archive,
    )
    archive.add_argument("--path", default=None, help="where (default: the installation's, see the docs)")

    fetch = _command(
        sub,
        "jars",
        "fetch the JVM parts from Maven Central (Kafka connector, Delta, broker, Debezium)",
        "replicator jars --group spark",
        func=_jars,
    )
    fetch.add_argument(
        "--group", action="append", choices=("spark", "kafka", "connect"), help="only this group (repeatable)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from replicator.payload import keep_freed_memory

    keep_freed_memory()  # before any command loads Arrow
    args = build_parser().parse_args(argv)
    _on_signals()
    try:
        configure(args.log_level, log_file=args.log_file)
    except OSError as exc:
        print(f"replicator: --log-file: cannot write {args.log_file}: {exc.strerror}", file=sys.stderr)
        return 2
    log = get_logger("replicator")
    from replicator.paths import PathRefused

    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `| head` read what it wanted and left: not an error of this command
        return _reader_gone()
    except (ConfigError, PathRefused) as exc:
        print(f"replicator: {exc}", file=sys.stderr)
        return 2
    except (JobRunning, StateDamaged) as exc:  # refused to start, or stopped before it went on wrong
        print(f"replicator: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # SIGINT, or SIGTERM (_interrupt), outside a mirror's stream (Spark's start)
        # A driver JVM still starting holds nothing to save: ended now, before the line, so that its
        # start-up failure (a trace: its Python side is gone) is not printed after it.
        _end_children(now=True)
        print(f"replicator: interrupted ({_SIGNAL[0]}) before {args.command} began its work", file=sys.stderr)
        return 130
    except Exception as exc:
        from replicator.errors import CatalogFailed, RecordFailed, SourceFailed

        if isinstance(exc, SourceFailed):
            log.error("stopped: the source cannot be read", error=str(exc))
            print(f"replicator: {exc}", file=sys.stderr)
            return 4
        if isinstance(exc, CatalogFailed):
            log.error("stopped: the catalog", error=str(exc))
            print(f"replicator: {exc}", file=sys.stderr)
            return 4
        if isinstance(exc, RecordFailed):
            log.error("stopped on a bad record", error=str(exc))
            print(f"replicator: {exc}", file=sys.stderr)
            return 3
        raise
    finally:
        _release_locks()  # the command is over (a process that runs main again takes the lock again)


_SIGNAL = ["SIGINT"]  # the signal that interrupted the command


def _interrupt(signum: int, _frame: object) -> None:
    import signal

    _SIGNAL[0] = signal.Signals(signum).name
    raise KeyboardInterrupt


def _on_signals() -> None:
    """SIGTERM as SIGINT: the command ends through :func:`main`'s and :func:`run`'s steps (its Spark JVM and
    other children ended), not at once, which left the JVM of a start it cut short running on its own. A
    mirror's stream has handlers of its own (commands.runner)."""
    import signal

    if threading_main():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _interrupt)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``replicator`` command as a process: :func:`main`, then the process ends without the interpreter's
    teardown, once everything is written (see :func:`_shut_down`)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)  # as the interpreter does for sys.exit("message")
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _shut_down()
    os._exit(code)


def _shut_down() -> None:
    """End what still runs, in order, then leave the exit to ``os._exit``.

    A run that had printed its summary (its batches committed, its lock released) died now and then with
    ``terminate called without an active exception`` (SIGABRT, exit -6: issue 48, item 8): at the
    interpreter's exit, native thread pools still had live threads when their libraries' static destructors
    ran (at exit such a process holds a dozen of Arrow's C++ pool threads and a dozen of delta-rs's tokio
    workers, besides the engine's two executor threads and PySpark's py4j threads). What this process
    started is ended here in order: the driver's Kafka clients (JVM admin clients, librdkafka consumers),
    then the Spark session (its JVM, py4j's threads), then the exit handlers (PySpark's, logging's flush).
    What is left are the native libraries' own pools, which nothing here can join (Arrow: "Thread crash at
    exit in Arrow-15.0.0 dataset scan", apache/arrow#39862; delta-rs: "terminate called without an active
    exception", delta-io/delta-rs#2184); ``os._exit`` ends the process without running their destructors,
    as ``_exit_now`` does for the commands without Spark."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C does not cut the shutdown short
        signal.signal(sig, signal.SIG_IGN)
    sources = sys.modules.get("replicator.sources")  # (not imported at exit by a command that never did)
    if sources is not None:
        with contextlib.suppress(Exception):  # a client whose JVM is gone: nothing left to close
            sources.close_kafka_clients()
    pyspark = sys.modules.get("pyspark")
    if pyspark is not None:
        import logging

        from pyspark import SparkContext

        # The JVM goes away below: a py4j call still under way in another thread (py4j's finalizer
        # releasing a Java object) fails on the reset connection, which py4j reports through the root
        # logger (``logging.exception``, which first adds a stderr handler when the root has none). None of
        # that is the run's: the root gets a handler that drops it.
        logging.getLogger().addHandler(logging.NullHandler())
        context = SparkContext._active_spark_context
        if context is not None:
            with contextlib.suppress(Exception):
                # Without the accumulator server's shutdown, which waits for its handler's next poll (up to
                # 1 s: PySpark's handler polls every second) for a daemon thread os._exit ends anyway
                # (measured: 0.9 of the stop's 0.93 s, in every command run with Spark). The JVM's exit
                # hangs up the handler's connection: no traceback of that on stderr.
                server = context._accumulatorServer
                context._accumulatorServer = None
                if server is not None:
                    server.server_shutdown = True
                    server.handle_error = lambda *_: None
                context.stop()
    import atexit

    atexit._run_exitfuncs()  # PySpark's JVM child ended, logging flushed; they ran before os._exit
    if pyspark is not None:  # the driver JVM ends when its standard input closes (PythonGatewayServer)
        from pyspark import SparkContext

        proc = getattr(getattr(SparkContext, "_gateway", None), "proc", None)
        with contextlib.suppress(Exception):
            proc.stdin.close()  # type: ignore[union-attr]
    _end_children()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _end_children(grace: float = 5.0, now: bool = False) -> None:
    """Children still running at the end (a Spark driver JVM whose start was interrupted: PySpark had not
    handed it to a session yet, and it ignores SIGINT) get SIGTERM, then SIGKILL after ``grace`` seconds:
    nothing the command started outlives it. ``now``: SIGKILL at once."""
    import signal

    children = _children()
    if not now:
        children = _wait_gone(children, 2)  # the JVM's own exit first (its shutdown hooks run either way)
        _signal_all(children, signal.SIGTERM)
        children = _wait_gone(children, grace)
    _signal_all(children, signal.SIGKILL)
    _wait_gone(children, grace)


def _wait_gone(children: list[int], seconds: float) -> list[int]:
    """The children still running after up to ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while children and time.monotonic() < deadline:
        time.sleep(0.05)
        children = [pid for pid in children if _running(pid)]
    return children


def _signal_all(children: list[int], sig: int) -> None:
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _children() -> list[int]:
    """This process's child processes (Linux: /proc; elsewhere none are found)."""
    me = str(os.getpid())
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                        # pid (comm) state ppid ...: comm may hold spaces and brackets, so after the last ")"
                        if f.read().rsplit(")", 1)[1].split()[1] == me:
                            found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        waited, _status = os.waitpid(pid, os.WNOHANG)  # reaps it once it has ended
    except ChildProcessError:
        return False
    return waited == 0


if __name__ == "__main__":
    run()
