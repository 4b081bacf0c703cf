"""The ``replicator`` command: mirror, bootstrap, replay, optimize, decode, status, dead-letters, show,
jvm-archive."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

# Pydantic looks for its plugins (observability hooks) when the first model class is built, by scanning
# every installed distribution's entry points, spark-submit's zips included: ~40 ms of each driver's start.
# The job file's models are this command's own and no plugin has anything to observe there. Before the
# config models below; an explicit setting wins.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from replicator.config import ConfigError, load_config
from replicator.logging import configure, get_logger
from replicator.model import table_label


def _mirror(args: argparse.Namespace) -> int:
    import gc
    import threading

    from replicator.spark import get_spark

    config = load_config(args.config)  # fails before Spark starts
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
        spark = get_spark(config)
        preload.join()
        from replicator.commands.runner import MirrorJob

        job = MirrorJob(config, spark)
    finally:
        gc.freeze()
        gc.enable()
    return job.run(available_now=args.available_now)


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
        raise ConfigError(
            f"--dialect: unknown dialect {args.dialect!r}; expected auto or {', '.join(dialect_names())}"
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
    for record in event_records(decode_path(args.file, args.dialect, options), fields):
        if record.get("op") == "filtered":
            continue
        if args.json:
            print(json.dumps(record, ensure_ascii=False, default=str))
        else:
            where = record.pop("coordinates", {})
            head = f"{where.get('source', '')}:{where.get('offset')}"
            print(head, json.dumps(record, ensure_ascii=False, default=str))
    return 0


def _bootstrap(args: argparse.Namespace) -> int:
    from replicator.commands.bootstrap import bootstrap

    config = load_config(args.config)
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


def _exit_now(code: int) -> int:
    """Leave without the interpreter's teardown: the native reader threads of delta-rs/Arrow can abort
    the process at exit ("terminate called without an active exception") after the work is done.
    Only for commands that start no Spark session and have written everything they print."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _optimize(args: argparse.Namespace) -> int:
    from replicator.commands.maintenance import optimize

    for done in optimize(load_config(args.config), args.tables, args.vacuum_hours, args.target_file_size):
        print(
            f"{done.table}: {done.files_removed} files rewritten as {done.files_added}, "
            f"{done.vacuumed} unreferenced files removed"
        )
    return _exit_now(0)


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
        return _exit_now(print_retry(config, table=args.table, error=args.error, batch=args.batch))
    return _exit_now(print_summary(config, as_json=args.json))


def _jvm_archive(args: argparse.Namespace) -> int:
    from pathlib import Path

    from replicator.commands.jvm_archive import write_archive

    try:
        path = write_archive(Path(args.path) if args.path else None)
    except RuntimeError as exc:
        print(f"replicator: {exc}", file=sys.stderr)
        return 1
    print(path)
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

    return _exit_now(print_tables(load_config(args.config), args.table, args.limit))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replicator", description="CDC messages -> Delta Lake mirror tables"
    )
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    mirror = sub.add_parser("mirror", help="stream change messages into mirror tables")
    mirror.add_argument("--config", required=True, help="job file (YAML)")
    mirror.add_argument("--available-now", action="store_true", help="process what is there, then exit")
    mirror.set_defaults(func=_mirror)

    decode = sub.add_parser("decode", help="print the normalized change events of a file of messages")
    decode.add_argument("file")
    decode.add_argument("--dialect", default="auto")
    decode.add_argument("--timezone", default="UTC")
    decode.add_argument("--avro-schema", default=None)
    decode.add_argument("--json", action="store_true", help="one JSON object per line")
    decode.set_defaults(func=_decode)

    boot = sub.add_parser("bootstrap", help="load a full snapshot into fresh mirrors (docs/operations.md)")
    boot.add_argument("--config", required=True)
    boot.add_argument("--snapshot", required=True, help="messages, <db>/<table>/*.parquet|csv or a manifest")
    boot.add_argument("--position", default=None, help="source position the snapshot was taken at")
    boot.add_argument("--restart", action="store_true", help="replace mirrors left by an earlier bootstrap")
    boot.add_argument("--no-progress", action="store_true")
    boot.set_defaults(func=_bootstrap)

    rep = sub.add_parser("replay", help="rebuild mirrors as of a time or position from the change log")
    rep.add_argument("--config", required=True)
    cut = rep.add_mutually_exclusive_group(required=True)
    cut.add_argument("--as-of", default=None, help="source event time: ISO-8601 or epoch ms (inclusive)")
    cut.add_argument("--position", default=None, help="source position (inclusive)")
    cut.add_argument("--mirror-version", default=None, help="Delta time travel: version or time")
    rep.add_argument("--target-path", required=True)
    rep.add_argument("--tables", default=None, help="glob on database.table")
    rep.set_defaults(func=_replay)

    opt = sub.add_parser("optimize", help="cluster mirrors by primary key (z-order) and vacuum them")
    opt.add_argument("--config", required=True)
    opt.add_argument("--tables", default=None, help="glob on database.table")
    opt.add_argument(
        "--vacuum-hours", type=int, default=None, help="also remove unreferenced files older than this"
    )
    opt.add_argument(
        "--target-file-size", type=int, default=None, help="bytes per data file (default 100 MB)"
    )
    opt.set_defaults(func=_optimize)

    status = sub.add_parser("status", help="tables, phases, positions, dead letters, recent batches")
    status.add_argument("--config", required=True)
    status.add_argument("--json", action="store_true")
    status.add_argument(
        "--batches", type=int, default=None, help="how many recent micro-batches to show (10; --html: 500)"
    )
    status.add_argument("--html", default=None, metavar="FILE", help="write a self-contained HTML report")
    status.set_defaults(func=_status)

    dead = sub.add_parser(
        "dead-letters", help="dead letters by table and error; `retry` re-drives them (docs/operations.md)"
    )
    dead.add_argument("--config", help="job file (YAML)")
    dead.add_argument("--json", action="store_true")
    dead.set_defaults(func=_dead_letters, action=None)
    dead_sub = dead.add_subparsers(dest="action")
    again = dead_sub.add_parser("retry", help="re-drive pending dead letters through the engine, once")
    # SUPPRESS: `dead-letters --config F retry` keeps F (a sub-parser default would overwrite it)
    again.add_argument("--config", default=argparse.SUPPRESS, help="job file (YAML)")
    again.add_argument("--table", default=None, help="glob on database.table")
    again.add_argument("--error", default=None, help="only dead letters whose error contains this text")
    again.add_argument("--batch", type=int, default=None, help="only dead letters of this batch")

    show = sub.add_parser("show", help="print mirror tables (rows ordered by primary key)")
    show.add_argument("--config", required=True)
    show.add_argument("--table", default=None, help="glob on database.table")
    show.add_argument("--limit", type=int, default=50)
    show.set_defaults(func=_show)

    archive = sub.add_parser(
        "jvm-archive", help="write the class archive the Spark driver JVM starts from (docs/operations.md)"
    )
    archive.add_argument("--path", default=None, help="where (default: the installation's, see the docs)")
    archive.set_defaults(func=_jvm_archive)

    fetch = sub.add_parser(
        "jars", help="fetch the JVM parts from Maven Central (Kafka connector, Delta, broker, Debezium)"
    )
    fetch.add_argument(
        "--group", action="append", choices=("spark", "kafka", "connect"), help="only this group (repeatable)"
    )
    fetch.set_defaults(func=_jars)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level)
    log = get_logger("replicator")
    from replicator.paths import PathRefused

    try:
        return int(args.func(args) or 0)
    except (ConfigError, PathRefused) as exc:
        print(f"replicator: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from replicator.errors import RecordFailed

        if isinstance(exc, RecordFailed):
            log.error("stopped on a bad record", error=str(exc))
            print(f"replicator: {exc}", file=sys.stderr)
            return 3
        raise


if __name__ == "__main__":
    sys.exit(main())
