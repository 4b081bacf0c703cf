"""Mirrors registered in Spark's session catalog (catalog.enabled; replicator.catalog, docs/configuration.md
"Catalog"): a real Derby metastore in tmp_path, real Delta tables, a second Spark process that reads them by
name knowing only the metastore folder and Delta's settings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator import paths
from replicator.catalog import database_of, same_location
from tests.helpers import Runner, canal, cli, ddl, job, job_file, order, write_jsonl

T = 1_700_000_000_000
WEIRD = "we`ird.na me"  # a backtick, a dot and a space


# ---- names and settings (no Spark) ------------------------------------------------------------------------
@given(st.text(min_size=1, max_size=300))
def test_any_name_maps_to_a_catalog_identifier(name):
    mapped = paths.catalog_name(name)
    assert re.fullmatch(r"[a-z0-9_]{1,128}", mapped), mapped


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_names_that_need_replacing_stay_apart(a, b):
    if a != b and not (re.fullmatch(r"[A-Za-z0-9_]+", a) and re.fullmatch(r"[A-Za-z0-9_]+", b)):
        assert paths.catalog_name(a) != paths.catalog_name(b) or a.lower() == b.lower()


def test_plain_names_stay_readable_and_odd_ones_are_replaced():
    assert paths.catalog_name("Orders") == "orders"
    assert paths.catalog_name("order_items2") == "order_items2"
    weird = paths.catalog_name(WEIRD)
    assert weird.startswith("we_ird_na_me_") and len(weird) == len("we_ird_na_me_") + 8
    assert paths.catalog_name("a.b") != paths.catalog_name("a b")
    with pytest.raises(paths.UnmappableName):
        paths.catalog_name("")


def test_the_job_file_section(tmp_path):
    config = job(tmp_path)
    assert not config.catalog.enabled and config.catalog.spark_settings() == {}
    config = job(tmp_path, catalog={"enabled": True, "database_prefix": "cdc_"})
    settings = config.catalog.spark_settings()
    assert settings["spark.sql.catalogImplementation"] == "hive"
    metastore = tmp_path / "state" / "metastore" / "metastore_db"
    assert settings["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
        f"jdbc:derby:;databaseName={metastore};create=true"
    )
    assert settings["spark.sql.warehouse.dir"] == str(tmp_path / "state" / "warehouse")
    assert database_of(config, ("Shop", None, "orders")) == "cdc_shop"
    assert database_of(config, ("erp", "public", "orders")) == "cdc_erp_public"
    remote = job(tmp_path, catalog={"enabled": True, "metastore_uri": "thrift://meta:9083"})
    assert remote.catalog.spark_settings()["spark.hadoop.hive.metastore.uris"] == "thrift://meta:9083"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in remote.catalog.spark_settings()
    with pytest.raises(ValueError, match="database_prefix"):
        job(tmp_path, catalog={"enabled": True, "database_prefix": "x`; DROP"})


def test_catalog_sync_without_a_catalog_is_refused_before_spark_starts(tmp_path):
    (tmp_path / "landing").mkdir()
    result = cli("catalog", "sync", "--config", str(job_file(tmp_path)))
    assert result.returncode == 2
    assert "catalog.enabled is not true" in result.stderr


def test_locations_compare_as_the_metastore_writes_them():
    assert same_location("file:/tmp/lake/shop/orders", "/tmp/lake/shop/orders")
    assert same_location("file:///tmp/lake/shop/orders/", "/tmp/lake/shop/./orders")
    assert same_location("s3a://bucket/lake/shop/orders", "s3://bucket/lake/shop/orders/")
    assert not same_location("file:/tmp/lake/shop/orders", "/tmp/lake/shop/orders2")


# ---- what Spark reads --------------------------------------------------------------------------------------
def test_a_delta_rs_mirror_with_a_datetime_and_a_key_is_readable_by_delta_spark(spark, tmp_path):
    """deltalake moves a table with a timestamp without time zone to writer version 7 listing only
    timestampNtz; Delta Lake for Spark reads NOT NULL columns as invariants and refuses such a table
    (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH) unless the protocol lists ``invariants`` too."""
    from deltalake import DeltaTable

    config = job(tmp_path)
    runner = Runner(spark, config)
    runner.messages(tmp_path, [canal("INSERT", [order(1, "a"), order(2, "b")], es=T)])
    path = str(tmp_path / "lake" / "shop" / "orders")
    protocol = DeltaTable(path).protocol()
    assert protocol.min_writer_version == 7 and "invariants" in protocol.writer_features
    rows = spark.read.format("delta").load(path).orderBy("id").select("id", "name").collect()
    assert [tuple(r) for r in rows] == [(1, "a"), (2, "b")]


# ---- a catalog that cannot be used: the mirror is committed all the same -----------------------------------
@pytest.mark.parametrize("on_error", ["warn", "fail"])
def test_a_catalog_that_fails_leaves_the_mirror_committed(spark, tmp_path, on_error):
    """The shared test session has no Hive support: the catalog cannot be used. ``warn`` applies the batch;
    ``fail`` fails it after the mirror's commit, and the batch again (a restart) applies nothing twice."""
    from replicator.errors import CatalogFailed

    config = job(tmp_path, catalog={"enabled": True, "on_error": on_error})
    runner = Runner(spark, config)
    messages = [canal("INSERT", [order(1), order(2)], es=T)]
    if on_error == "warn":
        runner.messages(tmp_path, messages)
    else:
        with pytest.raises(CatalogFailed, match="without Hive support"):
            runner.messages(tmp_path, messages, batch_id=0)
        with pytest.raises(CatalogFailed):
            runner.messages(tmp_path, messages, batch_id=0)
    assert [r["id"] for r in runner.mirror()] == [1, 2]


# ---- the whole way: the CLI registers, another process reads -----------------------------------------------
READER = """
import json, sys
from pyspark.sql import SparkSession
metastore, warehouse, jars, weird = sys.argv[1:5]
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.jars", jars)
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .config("spark.databricks.delta.snapshotPartitions", "1")
    .config("spark.sql.catalogImplementation", "hive")
    .config("spark.sql.warehouse.dir", warehouse)
    .config("spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={metastore}/metastore_db;create=false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
out = {
    "tables": sorted(r.tableName for r in spark.sql("SHOW TABLES IN shop").collect()),
    "orders": [r.asDict() for r in spark.sql("SELECT id, name FROM shop.orders ORDER BY id").collect()],
    "clients": [r.id for r in spark.sql("SELECT id FROM shop.clients ORDER BY id").collect()],
    "weird": [r.id for r in spark.table(f"shop.{weird}").orderBy("id").collect()],
    "history": spark.sql("SELECT count(*) AS n FROM shop.orders__history").collect()[0].n,
}
print("RESULT " + json.dumps(out))
"""


def _registered(output: str) -> list[str]:
    found = []
    for line in output.splitlines():
        if "catalog entry registered" in line:
            found.append(json.loads(line)["entry"] if line.startswith("{") else line)
    return found


@pytest.mark.slow
@pytest.mark.cluster  # a second Spark application on the metastore: make test-cluster
def test_mirrors_are_readable_by_name_from_another_spark_process(tmp_path):
    from replicator import jars

    config = job_file(
        tmp_path, "catalog: {enabled: true}\ntables: {history: ['shop.orders']}\n", trigger=None
    )
    landing = tmp_path / "landing"
    customer = {"id": "int(11)", "name": "varchar(64)"}
    write_jsonl(
        landing / "1.jsonl",
        [
            canal("INSERT", [order(1, "a"), order(2, "b")], es=T),
            canal("INSERT", [{"id": "7", "name": "c"}], es=T + 1, table="customers", types=customer),
            canal("INSERT", [{"id": "9", "name": "d"}], es=T + 2, table="audit", types=customer),
            canal("INSERT", [{"id": "5", "name": "w"}], es=T + 3, table=WEIRD, types=customer),
        ],
    )
    first = cli("--log-level", "INFO", "mirror", "--config", str(config), "--available-now")
    assert first.returncode == 0, first.stderr[-3000:]
    weird = paths.catalog_name(WEIRD)
    assert sorted(_registered(first.stderr)) == sorted(
        ["shop.orders", "shop.orders__history", "shop.customers", "shop.audit", f"shop.{weird}"]
    )

    write_jsonl(
        landing / "2.jsonl",
        [
            canal("INSERT", [order(3, "c")], es=T + 10),
            ddl("RENAME", "RENAME TABLE `customers` TO `clients`", es=T + 11, table="clients"),
            canal("INSERT", [{"id": "8", "name": "e"}], es=T + 12, table="clients", types=customer),
            ddl("ERASE", "DROP TABLE `audit`", es=T + 13, table="audit"),
            # Another table whose name meets shop.orders in the catalog: refused, never registered over it.
            canal("INSERT", [order(99, "z")], es=T + 14, table="Orders"),
        ],
    )
    second = cli("--log-level", "INFO", "mirror", "--config", str(config), "--available-now")
    assert second.returncode == 0, second.stderr[-3000:]
    # The restart found the first run's entries: only the renamed table's new name is registered.
    assert _registered(second.stderr) == ["shop.clients"]
    dropped = [json.loads(x)["entry"] for x in second.stderr.splitlines() if "catalog entry dropped" in x]
    assert sorted(dropped) == ["shop.audit", "shop.customers"]
    assert (tmp_path / "lake" / "shop" / "audit" / "_delta_log").is_dir()  # lenient drop: files kept
    refused = [json.loads(x)["detail"] for x in second.stderr.splitlines() if "catalog entry refused" in x]
    assert refused == [
        "shop.orders (shop.Orders): the name is shop.orders's entry; shop.Orders is not registered"
    ]

    reader = tmp_path / "reader.py"
    reader.write_text(textwrap.dedent(READER), encoding="utf-8")
    spark_jars = ",".join(str(p) for p in jars.require("spark"))
    metastore, warehouse = tmp_path / "state" / "metastore", tmp_path / "state" / "warehouse"
    read = subprocess.run(
        [sys.executable, str(reader), str(metastore), str(warehouse), spark_jars, weird],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert read.returncode == 0, read.stderr[-3000:]
    result = json.loads(next(x for x in read.stdout.splitlines() if x.startswith("RESULT "))[7:])
    assert result["tables"] == sorted(["clients", "orders", "orders__history", weird])
    assert result["orders"] == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]
    assert result["clients"] == [7, 8]
    assert result["weird"] == [5]
    assert result["history"] == 3

    # Turned on later, or after a failed sync: the command registers what is missing, here nothing.
    synced = cli("catalog", "sync", "--config", str(config))
    assert synced.returncode == 0, synced.stderr[-3000:]
    assert synced.stdout.splitlines()[-1] == "catalog: 0 registered, 4 already there, 0 dropped, 1 refused"
    assert not (Path(__file__).resolve().parent.parent / "derby.log").exists()
