"""[storage]: one place for the S3 settings, handed to delta-rs, pyarrow and Spark;
credentials never in it."""

import pyarrow.fs as pafs
import pytest

from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.storage import Storage, is_s3, spark_uri


def raw(wal_path="s3a://bucket/wal", storage=None):
    config = {
        "sink": {"id": "s"},
        "wal": {"path": wal_path},
        "mysql": {"url": "mysql+pymysql://u@h/db", "table": "t", "key": ["k"]},
    }
    if storage is not None:
        config["storage"] = storage
    return config


LOCAL_S3 = {
    "endpoint": "http://127.0.0.1:9000/",
    "region": "eu-west-1",
    "path_style": True,
}


def test_one_storage_section_configures_every_side():
    storage = config_from_dict(raw(storage=LOCAL_S3)).storage
    assert storage == Storage("http://127.0.0.1:9000", "eu-west-1", True)
    assert storage.delta_options == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
    }
    assert storage.spark_conf() == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    fs, path = storage.filesystem("s3a://bucket/wal/_wal_batch_id=0/x.parquet")
    assert (
        isinstance(fs, pafs.S3FileSystem)
        and path == "bucket/wal/_wal_batch_id=0/x.parquet"
    )
    assert fs.region == "eu-west-1"


def test_https_endpoint_keeps_tls_and_aws_needs_no_endpoint():
    https = Storage("https://minio.example:9000", "us-east-1")
    assert "AWS_ALLOW_HTTP" not in https.delta_options
    assert https.hadoop_conf()["fs.s3a.connection.ssl.enabled"] == "true"
    aws = Storage(region="eu-central-1")
    assert aws.delta_options == {"AWS_REGION": "eu-central-1"}
    assert aws.hadoop_conf() == {
        "fs.s3a.path.style.access": "false",
        "fs.s3a.endpoint.region": "eu-central-1",
    }


def test_no_storage_section_leaves_spark_settings_alone():
    config = config_from_dict(raw(wal_path="var/wal"))
    assert config.storage == Storage() and config.storage.spark_conf() == {}
    assert config.storage.delta_options == {}


@pytest.mark.parametrize(
    "wal_path, storage, message",
    [
        ("s3a://b/wal", None, "wal.path is on S3: set storage.region"),
        ("s3://b/wal", {"endpoint": "http://h:1"}, "set storage.region"),
        (
            "s3a://b/wal",
            {"region": "r", "secret_access_key": "s3cr3t"},
            "storage.secret_access_key: credentials never go in the config file",
        ),
        ("s3a://b/wal", {"region": "r", "access_key": "s3cr3t"}, "credentials never"),
        (
            "s3a://b/wal",
            {"region": "r", "endpoint": "127.0.0.1:9000"},
            "must be an http:// or https:// URL",
        ),
        ("s3a://b/wal", {"region": "r", "path_style": "yes"}, "true or false"),
        ("s3a://b/wal", {"region": "r", "bucket": "b"}, "unknown config key"),
    ],
)
def test_storage_mistakes_are_one_line(wal_path, storage, message):
    with pytest.raises(ConfigError) as e:
        config_from_dict(raw(wal_path=wal_path, storage=storage))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert "s3cr3t" not in str(e.value)


def test_s3_uris_are_named_for_each_side():
    assert is_s3("s3a://b/p") and is_s3("S3://b/p") and not is_s3("/tmp/s3a")
    assert spark_uri("s3://b/wal") == "s3a://b/wal"
    assert spark_uri("s3a://b/wal") == "s3a://b/wal"
    assert spark_uri("/tmp/wal") == "/tmp/wal"


def test_a_local_path_may_come_as_a_file_uri_in_either_form():
    """Spark passes a checkpointLocation as Hadoop qualified it: file:/p."""
    for location in ("/tmp/cp", "file:/tmp/cp", "file:///tmp/cp"):
        fs, path = Storage().filesystem(location)
        assert isinstance(fs, pafs.LocalFileSystem) and path == "/tmp/cp", location
