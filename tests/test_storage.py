"""The storage layer's locations (replicator.storage) and the name-to-path mapping on object-store URIs
(replicator.paths): no server needed. Against a real S3 server: tests/test_object_storage.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator import paths
from replicator.config import ConfigError, parse_config
from replicator.storage import ObjectPath, Storage, StorageError, is_uri, location


def test_an_s3_target_is_an_object_path_not_a_local_folder_named_s3(tmp_path):
    config = parse_config(
        {
            "name": "j",
            "source": {"path": "s3a://lake/landing"},
            "target": {"path": "s3://lake/mirrors"},
            "state": {"path": "s3://lake/state/"},
        },
        "job.yaml",
        tmp_path,
    )
    assert config.target.path == ObjectPath("s3://lake/mirrors")
    assert str(config.state.path) == "s3://lake/state"
    assert str(config.source.path) == "s3a://lake/landing"
    assert config.on_object_store()
    assert not (tmp_path / "s3:").exists()


def test_file_uris_and_plain_paths_stay_local_folders(tmp_path):
    config = parse_config(
        {
            "name": "j",
            "source": {"path": "in"},
            "target": {"path": f"file://{tmp_path}/lake"},
            "state": {"path": "st"},
        },
        "job.yaml",
        tmp_path,
    )
    assert config.target.path == tmp_path / "lake"
    assert config.state.path == tmp_path / "st"
    assert not config.on_object_store()


@pytest.mark.parametrize("uri", ["s3://lake/a/../b", "s3://lake/./a", "s3://", "ftp://host/x"])
def test_a_location_that_climbs_or_names_no_store_is_refused(uri):
    with pytest.raises(StorageError):
        ObjectPath(uri)


def test_a_target_with_dot_dot_is_a_config_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"target\.path"):
        parse_config(
            {
                "name": "j",
                "source": {"path": "in"},
                "target": {"path": "s3://lake/m/../x"},
                "state": {"path": "st"},
            },
            "job.yaml",
            tmp_path,
        )


def test_state_inside_target_on_one_bucket_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"inside target\.path"):
        parse_config(
            {
                "name": "j",
                "source": {"path": "in"},
                "target": {"path": "s3://lake/m"},
                "state": {"path": "s3://lake/m/state"},
            },
            "job.yaml",
            tmp_path,
        )


def test_table_keys_under_a_prefix_are_the_folders_a_local_target_gets(tmp_path):
    table = ("shop", None, "../etc passwd")
    local = paths.table_path(tmp_path, table)
    remote = paths.table_path("s3://lake/mirrors", table)
    assert isinstance(remote, ObjectPath)
    assert remote.relative_to(ObjectPath("s3://lake/mirrors")) == Path(local).relative_to(tmp_path).as_posix()
    assert str(remote) == "s3://lake/mirrors/shop/~2E~2E~2Fetc~20passwd"
    assert paths.inside("s3://lake/mirrors", remote)


def test_destructive_checks_on_uris_stay_under_the_prefix():
    assert paths.inside("s3://lake/m", "s3://lake/m/shop/t")
    assert not paths.inside("s3://lake/m", "s3://lake/m")
    assert not paths.inside("s3://lake/m", "s3://lake/mx/shop")  # a whole component, not a text prefix
    assert not paths.inside("s3://lake/m", "s3://other/m/shop")
    assert not paths.inside("s3://lake/m", "/lake/m/shop")
    assert not paths.inside("/lake/m", "s3://lake/m/shop")
    assert not paths.inside("s3://lake/m", "s3://lake/m/../x")
    with pytest.raises(paths.UnsafePath):
        paths.ensure_inside("s3://lake/m", "s3://lake/state/tables", "drop")
    assert paths.relative_under("s3://lake/m", "s3://lake/m/a/b") == "a/b"
    assert paths.relative_under("s3://lake/m", "s3://lake/n/a") is None


def test_an_object_path_has_no_fspath_so_local_calls_fail_loudly(tmp_path):
    with pytest.raises(TypeError):
        open(ObjectPath("s3://lake/x"))
    assert is_uri("s3://lake/x") and not is_uri(tmp_path) and not is_uri("file:///tmp/x")
    assert location("file:///tmp/x") == Path("/tmp/x")


def test_storage_settings_become_each_clients_settings(monkeypatch):
    monkeypatch.setenv("MY_KEY", "id")
    monkeypatch.setenv("MY_SECRET", "secret")
    config = parse_config(
        {
            "name": "j",
            "source": {"path": "in"},
            "target": {"path": "s3://lake/m"},
            "state": {"path": "st"},
            "storage": {
                "endpoint": "http://127.0.0.1:9000",
                "region": "eu-west-1",
                "path_style": True,
                "allow_http": True,
                "access_key_env": "MY_KEY",
                "secret_key_env": "MY_SECRET",
            },
        },
        "job.yaml",
        Path("/tmp"),
    )
    settings = config.storage_settings()
    env = settings.environment()
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert env["AWS_ACCESS_KEY_ID"] == "id" and env["AWS_SECRET_ACCESS_KEY"] == "secret"
    assert env["AWS_ALLOW_HTTP"] == "true" and env["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false"
    assert env["AWS_CONDITIONAL_PUT"] == "etag"
    hadoop = settings.hadoop()
    assert hadoop["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert hadoop["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert hadoop["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert "secret" not in str(hadoop)  # secrets reach s3a through the environment, not Spark's settings


def test_a_secret_named_by_a_missing_variable_is_an_error(monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    from replicator.storage import from_settings

    with pytest.raises(StorageError, match="NOT_SET_ANYWHERE"):
        from_settings({"access_key_env": "NOT_SET_ANYWHERE", "secret_key_env": "NOT_SET_ANYWHERE"})
    assert Storage().environment() == {"AWS_CONDITIONAL_PUT": "etag"}


def test_deletion_vectors_with_delta_rs_on_an_object_store_are_refused_with_the_reason(tmp_path):
    data = {
        "name": "j",
        "source": {"path": "in"},
        "target": {"path": "s3://lake/m", "deletion_vectors": True},
        "state": {"path": "st"},
    }
    with pytest.raises(ConfigError, match=r"needs a local target\.path"):
        parse_config(data, "job.yaml", tmp_path)
    data["target"]["writer"] = "delta-spark"  # Delta for Spark writes its vectors through Hadoop's s3a
    assert parse_config(data, "job.yaml", tmp_path).target.deletion_vectors


def test_a_catalog_with_the_state_on_an_object_store_needs_a_local_or_remote_metastore(tmp_path):
    """The embedded Derby metastore defaults to <state.path>/metastore: not a place Derby can write when
    the state is on S3. Refused when the job file is read, naming the two ways out."""
    data = {
        "name": "j",
        "source": {"path": "in"},
        "target": {"path": "s3://lake/m"},
        "state": {"path": "s3://lake/st"},
        "catalog": {"enabled": True},
    }
    with pytest.raises(ConfigError, match=r"catalog\.metastore: the embedded Derby metastore needs a local"):
        parse_config(data, "job.yaml", tmp_path)
    data["catalog"]["metastore"] = "metastore"
    assert parse_config(data, "job.yaml", tmp_path).catalog.metastore == tmp_path / "metastore"
    data["catalog"] = {"enabled": True, "metastore_uri": "thrift://hms:9083"}
    settings = parse_config(data, "job.yaml", tmp_path).catalog.spark_settings()
    assert settings["spark.hadoop.hive.metastore.uris"] == "thrift://hms:9083"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in settings
