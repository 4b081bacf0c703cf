"""The ``replicator`` command: mirror, decode, status (bootstrap and replay arrive with their issue)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from replicator.config import ConfigError, load_config
from replicator.logging import configure, get_logger


def _mirror(args: argparse.Namespace) -> int:
    from replicator.runner import MirrorJob
    from replicator.spark import get_spark

    config = load_config(args.config)  # fails before Spark starts
    spark = get_spark(config)
    return MirrorJob(config, spark).run(available_now=args.available_now)


def _decode(args: argparse.Namespace) -> int:
    from replicator.dialects import DecodeOptions, dialect_names
    from replicator.inspect import decode_path, event_records
    from replicator.spark import get_spark

    if args.dialect != "auto" and args.dialect not in dialect_names():
        raise ConfigError(f"--dialect: unknown dialect {args.dialect!r}; expected auto or {', '.join(dialect_names())}")
    options = DecodeOptions(timezone=args.timezone, avro_schema=args.avro_schema)
    spark = get_spark()
    fields = ("dialect", "op", "database", "schema", "table", "primary_key", "before", "after", "position",
              "event_time", "ddl_kind", "ddl_sql", "error", "coordinates")
    for record in event_records(decode_path(spark, args.file, args.dialect, options), fields):
        if record.get("op") == "filtered":
            continue
        if args.json:
            print(json.dumps(record, ensure_ascii=False, default=str))
        else:
            where = record.pop("coordinates", {})
            head = f"{where.get('source', '')}:{where.get('offset')}"
            print(head, json.dumps(record, ensure_ascii=False, default=str))
    return 0


def _status(args: argparse.Namespace) -> int:
    from replicator.status import print_status

    return print_status(load_config(args.config), as_json=args.json)


def _show(args: argparse.Namespace) -> int:
    from replicator.status import print_tables

    return print_tables(load_config(args.config), args.table, args.limit)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replicator", description="CDC messages -> Delta Lake mirror tables")
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

    status = sub.add_parser("status", help="tables, phases, positions, dead letters, recent batches")
    status.add_argument("--config", required=True)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)

    show = sub.add_parser("show", help="print mirror tables (rows ordered by primary key)")
    show.add_argument("--config", required=True)
    show.add_argument("--table", default=None, help="glob on database.table")
    show.add_argument("--limit", type=int, default=50)
    show.set_defaults(func=_show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level)
    log = get_logger("replicator")
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"replicator: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from replicator.engine import RecordFailed

        if isinstance(exc, RecordFailed):
            log.error("stopped on a bad record", error=str(exc))
            print(f"replicator: {exc}", file=sys.stderr)
            return 3
        raise


if __name__ == "__main__":
    sys.exit(main())
