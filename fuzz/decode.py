"""Coverage-guided fuzzing of the decode entry point (replicator.dialects.base.decode), a target per dialect.

Any bytes -> events or dead letters: never an exception, never a hang (libFuzzer's -timeout per input),
memory bounded (-rss_limit_mb). The input is a file's content: for a JSON dialect its lines are the
batch's records (as the files source reads a ``.jsonl`` file), for a binary one (dts-avro) it is one
record. The corpus starts from the golden fixtures (tests/fixtures/<dialect>/: each ``.jsonl`` file, each
``.json`` file, each line of a ``.b64`` file, each ``.avro`` file).

    python fuzz/decode.py --dialect canal-json --seconds 60     # one target (libFuzzer, in this process)
    python fuzz/decode.py --dialect all --seconds 60            # every target in turn (make fuzz)
    python fuzz/decode.py --dialect ddl --seconds 60            # the DDL parser (replicator.ddl)
    python fuzz/decode.py --dialect canal-json fuzz-out/canal-json/crash-...   # replay one input

Work files go to fuzz-out/<dialect>/ (corpus/, and crash-*/timeout-*/oom-* inputs). A crash found becomes
a regression test (tests/hostile/test_values.py, or the dialect's tests) before it is fixed.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
OUT = REPO / "fuzz-out"
MAX_LEN = 65_536  # 64 KB inputs: deep nesting and 10,000-digit numbers fit
TIMEOUT_S = 10  # one input taking longer is a hang
RSS_LIMIT_MB = 2_048
DICTIONARY = Path(__file__).resolve().parent / "json.dict"  # JSON's tokens, for the JSON dialects
SQL_DICTIONARY = Path(__file__).resolve().parent / "sql.dict"  # DDL's tokens, for the ddl target
# The ddl target's seeds: statements of each kind replicator.ddl reads (MySQL and PostgreSQL), a MongoDB
# command, and the shapes issue 48 found (a DEFAULT nested 40 deep).
DDL_SEEDS = [
    "CREATE TABLE `shop`.`orders` (`id` int(11) NOT NULL, `amount` decimal(12,2) DEFAULT '0.00', "
    "`ts` datetime(3), PRIMARY KEY (`id`)) ENGINE=InnoDB",
    'CREATE TABLE "public"."t" (id serial PRIMARY KEY, at timestamp(6) without time zone, v numeric)',
    "ALTER TABLE t ADD COLUMN c varchar(10) NOT NULL DEFAULT 'x', DROP COLUMN d, MODIFY e bigint unsigned",
    "ALTER TABLE t CHANGE a b int, RENAME COLUMN x TO y, ADD PRIMARY KEY (a, b), ADD INDEX i (c)",
    "ALTER TABLE t ALTER COLUMN c TYPE numeric(20,4), ALTER COLUMN d SET DEFAULT now()",
    "ALTER TABLE t RENAME TO u",
    "RENAME TABLE a TO b, `c`.`d` TO `e`.`f`",
    "DROP TABLE IF EXISTS a, b",
    "TRUNCATE TABLE t",
    "CREATE INDEX i ON t (a)",
    "DROP DATABASE d",
    '{"renameCollection": "db.a", "to": "db.b"}',
    "ALTER TABLE t ADD COLUMN c int DEFAULT " + "(" * 40 + "1" + ")" * 40,
]


def dialects() -> list[str]:
    sys.path.insert(0, str(REPO))
    from replicator.dialects.base import dialect_names

    return [*dialect_names(), "auto", "ddl"]


def seeds(dialect: str) -> list[bytes]:
    """The fixture inputs of a dialect (``auto``: of every JSON dialect; ``ddl``: DDL_SEEDS)."""
    if dialect == "ddl":
        return [text.encode() for text in DDL_SEEDS]
    folders = (
        [p for p in sorted(FIXTURES.iterdir()) if p.is_dir() and p.name not in ("ddl", "dts-avro")]
        if dialect == "auto"
        else [FIXTURES / dialect]
    )
    found: list[bytes] = []
    for folder in folders:
        for path in sorted(folder.glob("*")) if folder.is_dir() else []:
            if path.name.startswith("_") or path.name.endswith(".expected.json"):
                continue
            if path.suffix == ".b64":
                found += [base64.b64decode(line) for line in path.read_bytes().splitlines() if line.strip()]
            elif path.suffix in (".json", ".jsonl", ".avro"):
                found.append(path.read_bytes())
    return found


def records(data: bytes, binary: bool):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    raws = [data] if binary else data.split(b"\n")
    n = len(raws)
    return pa.table(
        {
            "raw": pa.array(raws, pa.binary()),
            "source": pa.array(["fuzz.jsonl"] * n, pa.string()),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(1, n + 1), pa.int64()),
        }
    )


def get_binary(dialect: str) -> bool:
    from replicator.dialects.base import get_dialect

    return dialect not in ("auto", "ddl") and get_dialect(dialect).binary


def ddl_target():  # type: ignore[no-untyped-def]
    """Any text as a DDL event's statement (MySQL and PostgreSQL) -> schema changes or a DdlError, never
    another exception; a text past the default limits (config.LimitsConfig) is refused before the parser,
    as the decode does (dialects.guards)."""
    import logging

    from replicator import ddl
    from replicator.config import LimitsConfig

    limits = LimitsConfig()
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its warning per unsupported statement

    def one_input(data: bytes) -> None:
        text = data.decode("utf-8", "replace")
        if ddl.oversized(text, limits.ddl_bytes, limits.ddl_clauses, limits.ddl_nesting) is not None:
            return
        for schema in (None, "public"):
            event = {"op": "ddl", "ddl_kind": "ALTER", "ddl_sql": text, "schema": schema}
            try:
                ddl.parse_event(event)
            except ddl.DdlError:
                pass

    return one_input


def target(dialect: str):  # type: ignore[no-untyped-def]
    """The function libFuzzer calls with each input."""
    if dialect == "ddl":
        return ddl_target()
    from replicator.dialects.base import decode
    from replicator.dialects.events import decoded_schema

    binary = get_binary(dialect)
    schema = decoded_schema()

    def one_input(data: bytes) -> None:
        batch = records(data, binary)
        table = decode(batch, dialect, sort_keys=True)
        # every record has an outcome (an event, a filtered message or a dead letter), in the contract
        assert table.num_rows >= 1 or batch.num_rows == 0, "a record without an outcome"
        assert [table.schema.field(f.name).type for f in schema] == schema.types, table.schema

    return one_input


def fuzz(dialect: str, seconds: int, extra: list[str]) -> None:
    """Run libFuzzer on one target in this process (atheris exits the process when it is done)."""
    import atheris

    with atheris.instrument_imports(include=["replicator", *(["sqlglot"] if dialect == "ddl" else [])]):
        import replicator.ddl
        import replicator.dialects  # every dialect's module, instrumented
        import replicator.dialects.base  # noqa: F401
    one_input = target(dialect)
    folder = OUT / dialect
    corpus = folder / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds(dialect)):
        (corpus / f"seed-{i:03d}").write_bytes(seed[:MAX_LEN])
    replay = [a for a in extra if not a.startswith("-")]
    args = (
        [sys.argv[0], *extra]
        if replay
        else [
            sys.argv[0],
            str(corpus),
            f"-max_total_time={seconds}",
            f"-timeout={TIMEOUT_S}",
            f"-rss_limit_mb={RSS_LIMIT_MB}",
            f"-max_len={MAX_LEN}",
            f"-artifact_prefix={folder}/",
            "-print_final_stats=1",
            *([] if get_binary(dialect) else [f"-dict={SQL_DICTIONARY if dialect == 'ddl' else DICTIONARY}"]),
            *extra,
        ]
    )
    atheris.Setup(args, one_input)
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dialect", default="all", help="a dialect name, auto, or all (each in turn)")
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", "60")))
    options, extra = parser.parse_known_args()
    sys.path.insert(0, str(REPO))
    if options.dialect != "all":
        fuzz(options.dialect, options.seconds, extra)
        return 0
    failed = []
    for name in dialects():
        print(f"fuzz: {name} for {options.seconds} s", flush=True)
        run = [sys.executable, __file__, "--dialect", name, "--seconds", str(options.seconds), *extra]
        if subprocess.run(run, cwd=REPO, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"fuzz: inputs that fail are in {OUT}/<dialect>/ for {', '.join(failed)}", file=sys.stderr)
    shutil.rmtree(OUT / "tmp", ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
