"""Coverage-guided fuzzing of the apply step: any canal-json batch through the whole engine into real mirrors.

decode.py fuzzes what a record decodes to; this target fuzzes what the engine then does with it: schema
changes, typing, the sequence guard and the MERGE into Delta tables, on the driver. Each input is one
micro-batch of the canal-json dialect (the input's lines are its records), run by the real engine (a local
Spark session, delta-rs mirrors in a temporary folder that lives for the whole run, so that later inputs meet
tables earlier ones created). The outcome of every input must be a summary: no exception, whatever the
message content (names, DDL texts, values, widths), and every record and event has an outcome (applied,
filtered or a dead letter: docs/operations.md "Accounting and dead letters").

    python fuzz/apply.py --seconds 60            # make fuzz runs it after the decode targets
    python fuzz/apply.py fuzz-out/apply/crash-... # replay one input

An input takes ~0.1-0.5 s (a Spark job per batch): this target finds few inputs per second, so its corpus
starts from messages that already reach the apply (tests/fixtures/canal-json and tests/fixtures/ddl's
statements wrapped as canal DDL messages) and mutations stay close to them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
OUT = REPO / "fuzz-out" / "apply"
MAX_LEN = 16_384
TIMEOUT_S = 60  # a batch runs Spark jobs: a hang is a minute, not seconds
RSS_LIMIT_MB = 4_096
DICTIONARY = Path(__file__).resolve().parent / "json.dict"


def seeds() -> list[bytes]:
    """canal-json fixture files, and DDL statements of the DDL fixtures as canal DDL messages."""
    found = []
    for path in sorted((FIXTURES / "canal-json").glob("*.json*")):
        if path.name.endswith(".expected.json"):
            continue
        if path.suffix == ".jsonl":
            found.append(path.read_bytes())
            continue
        try:  # one document (a message or an array of them): one line per message, as the files source reads
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        items = data if isinstance(data, list) else [data]
        found.append("\n".join(json.dumps(i, ensure_ascii=False) for i in items).encode())
    statements = [
        "ALTER TABLE `shop`.`orders` ADD COLUMN `V` varchar(8)",
        "ALTER TABLE `shop`.`orders` RENAME COLUMN `name` TO `NAME`",
        "ALTER TABLE `shop`.`orders` ADD COLUMN `_cdc_op` int DEFAULT ((1))",
        "RENAME TABLE `shop`.`orders` TO `shop`.`orders2`",
        "TRUNCATE TABLE `shop`.`orders`",
    ]

    def collect(node: object) -> None:  # every statement text of the DDL fixtures, wherever it stands
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("sql", "ddl_sql") and isinstance(value, str):
                    statements.append(value)
                else:
                    collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for path in sorted((FIXTURES / "ddl").glob("*.json")):
        try:
            collect(json.loads(path.read_text(encoding="utf-8")))
        except ValueError:
            continue
    for i, sql in enumerate(statements):
        message = {
            "data": None,
            "database": "shop",
            "es": 1_700_000_000_000 + i,
            "id": i,
            "isDdl": True,
            "sql": sql,
            "table": "orders",
            "ts": 1_700_000_000_000 + i,
            "type": "ALTER",
        }
        found.append(json.dumps(message).encode())
    return found


def target(root: Path):  # type: ignore[no-untyped-def]
    """The function libFuzzer calls with each input (one engine for the run: batches one after another)."""
    from replicator.config import parse_config
    from replicator.engine import Engine
    from replicator.sources import FILE_GLOB, binary_file_schema
    from replicator.spark import get_spark

    spark = get_spark(app_name="replicator-fuzz-apply")
    config = parse_config(
        {
            "name": "fuzz-apply",
            "source": {"type": "files", "path": "landing", "dialect": "canal-json"},
            "target": {"path": "lake"},
            "state": {"path": "state"},
            "changelog": {"enabled": False},
        },
        "fuzz",
        root,
    )
    engine = Engine(config)
    batches = iter(range(10**9))

    def one_input(data: bytes) -> None:
        batch_id = next(batches)
        folder = root / "in" / str(batch_id)
        folder.mkdir(parents=True)
        (folder / "m.jsonl").write_bytes(data)
        frame = (
            spark.read.format("binaryFile")
            .schema(binary_file_schema())
            .option("pathGlobFilter", FILE_GLOB)
            .load(str(folder))
        )
        summary = engine.process(frame, batch_id)  # an exception here is the finding
        # Every record has an outcome, every decoded event too (a record that does not decode is one dead
        # letter and no event; a change at or before its table's truncate point is counted per table as
        # ``before_horizon``: docs/operations.md "Accounting and dead letters").
        held_back = sum(t.get("before_horizon", 0) for t in summary.tables.values())
        outcomes = summary.applied + summary.filtered + summary.dead_letters + held_back
        assert outcomes >= summary.records_in and outcomes >= summary.events, vars(summary)

    return one_input


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", "60")))
    options, extra = parser.parse_known_args()
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("REPLICATOR_SPARK_MASTER", "local[2]")
    import atheris

    with atheris.instrument_imports(include=["replicator"]):
        import replicator.apply.schema
        import replicator.apply.table
        import replicator.ddl
        import replicator.types  # noqa: F401
    corpus = OUT / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds()):
        (corpus / f"seed-{i:03d}").write_bytes(seed[:MAX_LEN])
    replay = [a for a in extra if not a.startswith("-")]
    args = (
        [sys.argv[0], *extra]
        if replay
        else [
            sys.argv[0],
            str(corpus),
            f"-max_total_time={options.seconds}",
            f"-timeout={TIMEOUT_S}",
            f"-rss_limit_mb={RSS_LIMIT_MB}",
            f"-max_len={MAX_LEN}",
            f"-artifact_prefix={OUT}/",
            f"-dict={DICTIONARY}",
            "-print_final_stats=1",
            *extra,
        ]
    )
    with tempfile.TemporaryDirectory(prefix="replicator-fuzz-apply-") as work:
        atheris.Setup(args, target(Path(work)))
        atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
