"""What a new user sees (issue 33): a run that applies nothing says so and fails, user mistakes are one line
with exit code 2, silent no-ops speak."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import canal, order, write_jsonl

ES = 1_700_000_000_000


def job_file(root: Path, extra: str = "") -> Path:
    return helpers.job_file(root, extra, name="first-hour", trigger=None)


def unkeyed(i: int) -> dict:
    message = canal("INSERT", [order(i)], es=ES + i, table="events")
    message["pkNames"] = None  # canal-json without keys: a table whose key the job file must give
    return message


def test_a_run_that_dead_letters_every_record_of_a_new_table_says_so_and_exits_4(
    in_process, tmp_path, capsys
):
    write_jsonl(tmp_path / "landing" / "a.jsonl", [unkeyed(i) for i in range(1, 6)])
    write_jsonl(tmp_path / "landing" / "b.jsonl", [canal("INSERT", [order(1), order(2)], es=ES)])
    code = in_process(["mirror", "--config", str(job_file(tmp_path)), "--available-now"])
    out, err = capsys.readouterr()
    assert code == 4
    line = out.strip().splitlines()[-1]
    assert "6 records in 1 batch: 2 applied, 0 filtered, 5 dead letters" in line, line
    assert "most frequent error (5×): no primary key known for shop.events" in line
    assert "replicator dead-letters --config" in line
    assert "every record of 1 table (shop.events) became a dead letter" in err
    assert "dead_tables: warn" in err


def test_a_wrong_dialect_exits_4_naming_the_dialect_the_records_look_like(in_process, tmp_path, capsys):
    """Issue 53, item 4: canal-json files read as debezium: no record has a table, every one a dead letter."""
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(i)], es=ES + i) for i in range(3)])
    config = helpers.job_file(tmp_path, name="first-hour", trigger=None, dialect="debezium")
    code = in_process(["mirror", "--config", str(config), "--available-now"])
    out, err = capsys.readouterr()
    assert code == 4, (out, err)
    assert "3 records in 1 batch: 0 applied, 0 filtered, 3 dead letters" in out
    assert (
        "replicator: no record of this run could be decoded (3 dead letters): the records look like "
        "canal-json, not debezium: set source.dialect: canal-json; exit code 4" in err
    ), err


def test_dead_tables_warn_exits_0_with_the_same_summary(in_process, tmp_path, capsys):
    write_jsonl(tmp_path / "landing" / "a.jsonl", [unkeyed(1)])
    code = in_process(
        ["mirror", "--config", str(job_file(tmp_path, "dead_tables: warn\n")), "--available-now"]
    )
    out, err = capsys.readouterr()
    assert code == 0
    assert "1 record in 1 batch: 0 applied, 0 filtered, 1 dead letter;" in out
    assert "every record of 1 table (shop.events)" in err


def test_a_clean_run_prints_its_summary_and_a_table_applied_before_is_no_failure(
    in_process, tmp_path, capsys
):
    config = job_file(tmp_path)
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(1)], es=ES)])
    assert in_process(["mirror", "--config", str(config), "--available-now"]) == 0
    assert "1 record in 1 batch: 1 applied, 0 filtered, 0 dead letters" in capsys.readouterr().out
    # The same table later sends a value its column cannot hold: dead letters, but the table was applied.
    bad = canal("INSERT", [order(2, amount="not a number")], es=ES + 1)
    write_jsonl(tmp_path / "landing" / "b.jsonl", [bad, "{not json"])
    assert in_process(["mirror", "--config", str(config), "--available-now"]) == 0
    out = capsys.readouterr().out
    assert "0 applied, 0 filtered, 2 dead letters;" in out
    assert in_process(["mirror", "--config", str(config), "--available-now"]) == 0
    assert "nothing new to mirror" in capsys.readouterr().out
    # status: human lag, plurals, and each batch's counts adding up as printed.
    from replicator.commands.status import print_status
    from replicator.config import load_config

    assert print_status(load_config(config)) == 0
    out = capsys.readouterr().out
    assert "job first-hour: 1 table, 2 pending dead letters" in out
    assert "#0: 1 record in, 1 item = 1 applied + 0 filtered + 0 dead letters;" in out
    assert "#1: 2 records in, 2 items = 0 applied + 0 filtered + 2 dead letters (1 of them undecodable" in out
    undecodable = next(line for line in out.splitlines() if line.startswith("(undecodable records)"))
    assert undecodable.split(maxsplit=2)[2].startswith("1 pending dead letter: not UTF-8, not JSON"), out
    lag = next(line for line in out.splitlines() if line.startswith("shop.orders"))
    assert " y " in lag and " d " in lag, lag  # the event time is from 2023: years and days, not seconds


def test_human_durations():
    from replicator.commands.status import human_duration

    cases = {None: "-", 0.25: "0.2 s", 23: "23 s", 63: "1 min 3 s", 3600: "1 h", 3725: "1 h 2 min"}
    cases |= {
        3 * 86400 + 4 * 3600 + 59: "3 d 4 h",
        2 * 365 * 86400 + 11 * 86400 + 5: "2 y 11 d",
        -30: "-30 s",
    }
    assert {k: human_duration(k) for k in cases} == cases


def test_user_mistakes_are_one_line_with_exit_code_2(tmp_path, capsys):
    from replicator.commands.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--log-level", "chatty", "status", "--config", "x.yaml"])
    assert exc.value.code == 2
    assert "invalid choice: 'CHATTY'" in capsys.readouterr().err
    assert main(["decode", str(tmp_path / "missing.jsonl")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"replicator: decode: {tmp_path / 'missing.jsonl'}: no such file or folder"
    )
    (tmp_path / "empty").mkdir()
    assert main(["decode", str(tmp_path / "empty")]) == 2
    assert "no message files in it" in capsys.readouterr().err
    bad = job_file(tmp_path, "tables: {key: {'shop.*': [id]}}\n")
    assert main(["status", "--config", str(bad)]) == 2
    assert "tables.key: unknown key; did you mean 'keys'?" in capsys.readouterr().err


def test_version_and_every_option_has_help(capsys):
    from replicator.commands.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.startswith("replicator ")
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, command in commands.items():
        assert command.description and "example:" in (command.epilog or ""), name
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings}"


def test_decode_reads_ndjson_and_warns_of_events_without_a_key(tmp_path, capsys):
    from replicator.commands.cli import main

    message = unkeyed(1)
    write_jsonl(tmp_path / "m.ndjson", [message])
    assert main(["decode", str(tmp_path / "m.ndjson"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert '"op": "insert"' in out or '"error"' in out
    keyed = canal("INSERT", [order(1)], es=ES)
    write_jsonl(tmp_path / "k.ndjson", [keyed])
    assert main(["decode", str(tmp_path / "k.ndjson"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert '"op": "insert"' in out and "carry no primary key" not in err


def test_json_lines_in_a_json_file_get_a_hint(tmp_path, capsys):
    from replicator.commands.cli import main

    write_jsonl(tmp_path / "m.json", [canal("INSERT", [order(1)], es=ES), canal("INSERT", [order(2)], es=ES)])
    assert main(["decode", str(tmp_path / "m.json"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "holds 2 lines that each parse as JSON" in out and "*.jsonl" in out


def test_dead_letters_show_the_debezium_row_and_where_it_came_from_and_discard_sets_them_aside(
    spark, tmp_path, capsys
):
    from replicator.commands.cli import main
    from replicator.commands.deadletters import pending, summarize
    from replicator.commands.status import collect_status
    from replicator.sinks import writer_factory
    from replicator.state import State
    from tests.helpers import Runner, job

    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": []}]}
    envelope = {
        "schema": schema,
        "payload": {
            "before": None,
            "after": {"id": 7, "name": "seven"},
            "source": {"connector": "mysql", "db": "shop", "table": "items", "file": "b.000001", "pos": 4},
            "op": "c",
            "ts_ms": ES,
        },
    }
    config = job(tmp_path, source={"dialect": "debezium"})
    Runner(spark, config).messages(tmp_path, [envelope, "{truncated"])
    groups = {g["table"]: g for g in summarize(config)["groups"]}
    row = groups["shop.items"]
    assert row["example"].startswith('{"payload": {"before": null, "after": {"id": 7'), row["example"]
    assert row["example_at"].endswith("/m.jsonl:1") and len(row["example_id"]) == 12
    broken = groups["(undecodable)"]
    assert broken["example_at"].endswith("/m.jsonl:2")

    (tmp_path / "job.yaml").write_text(
        "name: test-job\nsource: {type: files, path: landing, dialect: debezium}\n"
        "target: {path: lake}\nstate: {path: state}\n"
    )
    with pytest.raises(SystemExit):  # a discard needs a reason
        main(
            ["dead-letters", "discard", "--config", str(tmp_path / "job.yaml"), "--id", broken["example_id"]]
        )
    capsys.readouterr()
    state = State(config.state.path, config.name, writer_factory("delta-rs"))
    from replicator.commands.deadletters import discard

    assert discard(config, "a half-written line", ids=[broken["example_id"]]) == 1
    assert [r["error"] for r in pending(state)] == [row["error"]]
    status = collect_status(config)
    assert (status["dead_letters"], status["discarded_dead_letters"]) == (1, 1)
    assert summarize(config)["discarded"] == 1
    marks = state.table("dead_letter_discards").read().to_pylist()
    assert marks[0]["reason"] == "a half-written line" and "@" in marks[0]["discarded_by"]
    from replicator.config import ConfigError

    with pytest.raises(ConfigError, match="discarded already"):  # no longer pending
        discard(config, "again", ids=[broken["example_id"]])


def test_a_running_job_can_be_scraped_for_its_metrics(spark, tmp_path):
    """A continuous job with metrics.port: scraped while it runs, the figures follow its batches."""
    import threading
    import urllib.request

    from replicator.commands.runner import MirrorJob
    from replicator.testing.broker import free_port
    from tests.helpers import job

    port = free_port()
    config = job(tmp_path, trigger={"interval": "0.5 seconds"}, metrics={"port": port})
    write_jsonl(tmp_path / "landing" / "a.jsonl", [canal("INSERT", [order(i) for i in range(1, 4)], es=ES)])
    write_jsonl(tmp_path / "landing" / "b.jsonl", [unkeyed(1)])
    running = MirrorJob(config, spark)
    seen: dict[str, str] = {}

    def scrape() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                time.sleep(0.5)
                continue
            if 'replicator_rows_total{change="inserted",job="test-job",table="shop.orders"} 3.0' in text:
                seen["text"] = text
                break
            time.sleep(0.5)
        running._stop.set()

    import time

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    assert running.run(available_now=False) == 0
    scraper.join()
    text = seen["text"]
    assert 'replicator_events_total{job="test-job",outcome="applied"} 3.0' in text
    assert 'replicator_events_total{job="test-job",outcome="dead_letter"} 1.0' in text
    assert 'replicator_records_read_total{job="test-job"} 2.0' in text
    assert 'replicator_batches_total{job="test-job"}' in text
    assert 'replicator_last_batch_seconds{job="test-job",phase="total"}' in text
    lag = next(line for line in text.splitlines() if line.startswith("replicator_lag_seconds{"))
    assert 'table="shop.orders"' in lag and float(lag.split()[-1]) > 86400  # events from 2023
    with pytest.raises(OSError):  # the endpoint goes with the job
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_declared_types_widen_an_existing_column_or_say_why_not(spark, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable

    from replicator.apply.schema import reconcile_declared_types
    from replicator.commands.runner import MirrorJob
    from tests.helpers import Runner, job

    Runner(spark, job(tmp_path)).messages(tmp_path, [canal("INSERT", [order(1, amount="12.50")], es=ES)])
    types = {"shop.orders": {"amount": "decimal(14,3)", "name": "int", "id": "bigint"}}
    declared = job(tmp_path, tables={"types": types})
    notes = reconcile_declared_types(declared, MirrorJob(declared, spark).engine.state)
    assert any("amount (decimal(14,3)): applied: widened from decimal128(10, 2)" in n for n in notes), notes
    assert any("id (bigint): applied: widened from int32" in n for n in notes), notes
    assert any("name (int): not applied: the mirror's column is string" in n for n in notes), notes
    mirror = DeltaTable(str(tmp_path / "lake" / "shop" / "orders")).to_pyarrow_table()
    assert mirror.schema.field("amount").type == pa.decimal128(14, 3)
    assert mirror.column("amount").to_pylist()[0] == __import__("decimal").Decimal("12.500")
    assert mirror.schema.field("name").type == pa.string()
    assert reconcile_declared_types(declared, MirrorJob(declared, spark).engine.state) == [
        n for n in notes if "not applied" in n
    ]  # done once; the refusal is said again at each start


def test_history_turned_on_for_a_mirror_with_rows_starts_from_every_row(spark, tmp_path, capsys):
    """Seeded: one current version per existing row, so a later delete of an older key leaves its trace."""
    from pathlib import Path as P

    from replicator.apply.history import seed_history
    from replicator.commands.runner import MirrorJob
    from replicator.commands.status import print_tables
    from tests.helpers import Runner, delta_table, job

    Runner(spark, job(tmp_path)).messages(
        tmp_path, [canal("INSERT", [order(i, name=f"n{i}") for i in range(1, 6)], es=ES)]
    )
    config = job(tmp_path, tables={"history": ["shop.*"]})
    assert seed_history(config, MirrorJob(config, spark).engine.state) == {"shop.orders": 5}
    assert seed_history(config, MirrorJob(config, spark).engine.state) == {}  # once
    runner = Runner(spark, config)
    runner.batch_id = 1
    runner.messages(
        tmp_path,
        [
            canal("DELETE", [order(2, name="n2")], es=ES + 10),
            canal("UPDATE", [order(3, name="n3b")], old=[{"name": "n3"}], es=ES + 20),
        ],
    )
    history = delta_table(P(config.target.path) / "shop" / "orders__history", cdc=True).to_pylist()
    current = sorted((r["id"], r["name"]) for r in history if r["_cdc_current"])
    mirror = sorted((r["id"], r["name"]) for r in runner.mirror())
    assert current == mirror == [(1, "n1"), (3, "n3b"), (4, "n4"), (5, "n5")]
    closed = sorted((r["id"], r["name"], r["_cdc_op"]) for r in history if not r["_cdc_current"])
    assert closed == [(2, "n2", "seeded"), (3, "n3", "seeded")]  # the older keys' traces
    assert all(r["_cdc_valid_to"] is not None for r in history if not r["_cdc_current"])

    assert print_tables(config, "shop.orders", history=True) == 0
    out = capsys.readouterr().out
    assert "== shop.orders history (6 versions" in out and "seeded" in out  # 5 seeded + n3b
