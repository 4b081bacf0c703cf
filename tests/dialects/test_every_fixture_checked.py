"""Every vendor example under tests/fixtures/<dialect>/ has a check written by hand from the vendor's rules,
beside the ``.expected.json`` snapshot of the code's own output (tests/dialects/golden.py): a fixture added
without one fails here. Each entry names the test that states its events (or, for a bad message, each
error's cause)."""

from __future__ import annotations

import importlib

from tests.dialects import test_ddl_examples, test_handmade_values, test_vector_values
from tests.dialects.golden import FIXTURES, cases

SEED = "test_seed_values"
NO_KEY = "_without_a_key_leaves_the_key_to_the_engine"  # the tests of an update without pks / pkNames
SEED_CHANGES = {
    **{f"canal-json/seed002-{k}.json": "test_canal_json_seed_rows" for k in ("insert", "update", "delete")},
    "canal-json/seed002-update-multirow.json": "test_canal_json_seed_multirow_update_and_delete",
    "canal-json/seed002-delete-multirow.json": "test_canal_json_seed_multirow_update_and_delete",
    "canal-json/seed004-canal-json-dml.json": "test_canal_json_seed004_update_with_full_old_row",
    **{f"ckafka/seed001-dml-{op}.json": "test_ckafka_seed_rows" for op in ("insert", "update", "delete")},
    "cloudcanal-json/seed004-dml.json": f"test_cloudcanal_seed_update{NO_KEY}",
    "debezium/seed004-dml-insert.json": "test_debezium_seed004_insert",
    "drs-json/seed003-mysql-init.json": "test_drs_seed_init_and_update",
    "drs-json/seed003-mysql-update.json": "test_drs_seed_init_and_update",
    "drs-json/seed003-gaussdb-update.json": f"test_drs_seed_gaussdb_update{NO_KEY}",
    "drs-json-c/seed003-mysql-init-as-json-c.json": "test_drs_seed_init_and_update",
    "drs-json-c/seed003-mysql-update-as-json-c.json": "test_drs_seed_init_and_update",
    **{
        f"drs-mongo/seed003-{kind}.json": "test_drs_mongo_seed_operations"
        for kind in ("insert", "remove", "replace", "update-set", "update-unset-set")
    },
    **{
        f"river-canal/seed000-{kind}.json": "test_river_canal_seed_rows"
        for kind in ("insert", "update", "delete")
    },
}

FLINK_STREAMS = ("data-schema-exclude", "data-schema-include")
FLINK_STREAMS += ("postgres-data-schema-exclude", "postgres-data-schema-include")

# fixture -> (module under tests/dialects, test function)
CHECKED: dict[str, tuple[str, str]] = {
    **{f: (SEED, test) for f, test in SEED_CHANGES.items()},
    **dict.fromkeys(test_ddl_examples.EXAMPLES, ("test_ddl_examples", "test_ddl_example")),
    **{
        f"debezium/{f}": ("test_vector_values", "test_debezium_examples") for f in test_vector_values.DEBEZIUM
    },
    **{
        f"debezium/{f}": ("test_vector_values", "test_debezium_examples_that_are_dead_letters")
        for f in test_vector_values.DEBEZIUM_ERRORS
    },
    **{f"canal-json/{f}": ("test_vector_values", "test_canal_examples") for f in test_vector_values.CANAL},
    **{f"ckafka/{f}": ("test_vector_values", "test_ckafka_examples") for f in test_vector_values.CKAFKA},
    "canal-json/flink-canal-data-with-init.jsonl": (
        "test_vector_values",
        "test_flinks_canal_stream_with_its_snapshot",
    ),
    **{
        f"debezium/flink-debezium-{name}.jsonl": (
            "test_vector_values",
            "test_flink_debezium_streams_give_flinks_changelog",
        )
        for name in FLINK_STREAMS
    },
    "debezium/flink-debezium-postgres-data-replica-identity.jsonl": (
        "test_vector_values",
        "test_flink_debezium_stream_without_replica_identity_full",
    ),
    **{
        f"cloudcanal-json/{f}": ("test_handmade_values", "test_cloudcanal_handmade_messages")
        for f in test_handmade_values.CLOUDCANAL
    },
    "cloudcanal-json/handmade-values.jsonl": ("test_handmade_values", "test_cloudcanal_handmade_values"),
    "cloudcanal-json/handmade-bad.jsonl": ("test_handmade_values", "test_cloudcanal_handmade_bad_messages"),
    "drs-json/constructed-mysql-dml.jsonl": ("test_handmade_values", "test_drs_constructed_mysql_dml"),
    "drs-json/constructed-pg-oracle.jsonl": (
        "test_handmade_values",
        "test_drs_constructed_postgresql_and_oracle",
    ),
    "drs-json-c/constructed-dml.jsonl": ("test_handmade_values", "test_drs_json_c_constructed_dml"),
    "drs-json/constructed-ddl.jsonl": ("test_fault_values", "test_drs_constructed_ddl"),
    "drs-json/bad-messages.jsonl": ("test_fault_values", "test_drs_bad_messages"),
    "drs-mongo/constructed-helpers.jsonl": ("test_fault_values", "test_drs_mongo_constructed_helpers"),
    "drs-mongo/bad-messages.jsonl": ("test_fault_values", "test_drs_mongo_bad_messages"),
    "debezium/bad-messages.jsonl": ("test_fault_values", "test_debezium_bad_messages"),
    "dts-avro/bad.b64": ("test_fault_values", "test_dts_avro_bad_records"),
    "dts-avro/dml.b64": ("test_fault_values", "test_dts_avro_dml"),
    "dts-avro/ddl.b64": ("test_fault_values", "test_dts_avro_ddl"),
    "dts-avro/container.avro": ("test_fault_values", "test_dts_avro_container_file"),
    "dts-avro/values.b64": ("test_fault_values", "test_dts_avro_value_record"),
    "dts-avro/postgres.b64": ("test_fault_values", "test_dts_avro_postgres_record"),
    "ckafka/bad-messages.jsonl": ("test_ckafka", "test_bad_messages_are_dead_letters"),
    "ckafka/values-edge.jsonl": ("test_ckafka", "test_format_one_values_and_time_zone"),
    "river-canal/bad-messages.jsonl": ("test_river_canal", "test_bad_messages_are_dead_letters"),
    "river-canal/values-edge.jsonl": ("test_river_canal", "test_value_edge_cases"),
    # a real capture: its schema events' rank, the filtered session statement, the history record
    "debezium/real-mariadb-3.5.jsonl": (
        "test_debezium",
        "test_real_snapshot_schema_events_rank_before_the_snapshot_rows",
    ),
}

# further hand-written checks of a fixture beside the one above
ALSO: dict[str, list[tuple[str, str]]] = {
    "ckafka/values-edge.jsonl": [
        ("test_ckafka", "test_tencent_canal_numbers_are_exact"),
        ("test_fault_values", "test_ckafka_value_edge_events"),
    ],
    "river-canal/values-edge.jsonl": [
        ("test_river_canal", "test_update_null_transitions"),
        ("test_fault_values", "test_river_canal_value_edge_events_and_the_keyless_row"),
    ],
    "river-canal/bad-messages.jsonl": [
        ("test_fault_values", "test_river_canal_value_edge_events_and_the_keyless_row"),
    ],
    "dts-avro/values.b64": [("test_dts_avro", "test_value_edges")],
    "dts-avro/postgres.b64": [("test_dts_avro", "test_postgres_values")],
    "debezium/real-mariadb-3.5.jsonl": [
        ("test_debezium", "test_real_session_statement_of_no_database_is_filtered"),
        ("test_debezium", "test_real_schema_history_record_is_a_dead_letter_naming_the_topic"),
    ],
}


def fixtures() -> set[str]:
    """Every input of every dialect folder (tests/fixtures/ddl holds test_ddl.py's own events, not a
    dialect's messages)."""
    folders = [p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name != "ddl"]
    return {f"{folder}/{case.name}" for folder in folders for case in cases(folder)}


def test_every_vendor_fixture_has_a_hand_written_check():
    found = fixtures()
    assert sorted(found - CHECKED.keys()) == [], "fixtures without a hand-written check"
    assert sorted((CHECKED.keys() | ALSO.keys()) - found) == [], "checks naming fixtures that are gone"


def test_each_named_check_exists():
    named = list(CHECKED.items())
    named += [(fixture, check) for fixture, checks in ALSO.items() for check in checks]
    for fixture, (module, test) in named:
        assert callable(getattr(importlib.import_module(f"tests.dialects.{module}"), test, None)), fixture
