"""Careless configs are refused with one line naming the key, never a secret's value:
passwords in the URL's query, secrets in job.spark_conf, URLs for other drivers,
durations that are zero, negative or endless, files that are not UTF-8."""

from __future__ import annotations

import pytest

from tests.helpers import config_dict
from wal_sink.config import config_from_dict, load_config, mysql_password
from wal_sink.errors import ConfigError

SECRET = "s3cr3t-value-9d2c"
URL = "mysql+pymysql://sink@127.0.0.1:3306/shop"


def refused(raw) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    line = str(info.value)
    assert "\n" not in line and SECRET not in line, line
    return line


@pytest.mark.parametrize(
    "url, says",
    [
        (f"{URL}?password={SECRET}", "query key 'password': a password never goes"),
        (f"{URL}?passwd={SECRET}", "query key 'passwd': a password never goes"),
        (f"{URL}?ssl_key_password={SECRET}", "a password never goes in the URL"),
        (f"mysql+pymysql://sink:{SECRET}@h/shop", "must not contain a password"),
        (f"mysql+pymysql://sink:{SECRET}@h:port/shop", "is not a URL of the form"),
        (f"{URL}?local_infile=1", "set mysql.local_infile instead"),
        (f"{URL}?client_flag=128", "the sink sets the client's capabilities"),
        (f"{URL}?colour=red", "'colour' is not a PyMySQL connection option"),
        (f"{URL}?connect_timeout=soon", "a query value is not of its option's type"),
        ("mysql://sink@h/shop", "must start with mysql+pymysql:// or mariadb+pym"),
        ("mariadb://sink@h/shop", "not mariadb://"),
        ("mysql+mysqldb://sink@h/shop", "not mysql+mysqldb://"),
        ("MySQL+PyMySQL://sink@h/shop", "must start with mysql+pymysql://"),
    ],
)
def test_mysql_url_refusals(url, says):
    assert says in refused(config_dict(mysql__url=url))


def test_accepted_urls():
    for url in (URL, "mariadb+pymysql://sink@h/shop", f"{URL}?connect_timeout=5"):
        assert config_from_dict(config_dict(mysql__url=url)).mysql.url == url


@pytest.mark.parametrize(
    "key",
    [
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.s3a.session.token",
        "spark.hadoop.fs.s3a.bucket.wal.secret.key",
        "spark.ssl.keyStorePassword",
        "spark.authenticate.secret",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    ],
)
def test_spark_conf_refuses_keys_that_hold_secrets(key):
    line = refused(config_dict(job={"checkpoint": "c", "spark_conf": {key: SECRET}}))
    assert line.startswith(f"job.spark_conf: '{key}' may hold a secret")


def test_spark_conf_takes_ordinary_settings():
    # the credentials provider names a class, not a secret
    provider = "spark.hadoop.fs.s3a.aws.credentials.provider"
    chain = "software.amazon.awssdk.auth.credentials.ContainerCredentialsProvider"
    settings = {"spark.sql.shuffle.partitions": 4, provider: chain}
    job = {"checkpoint": "c", "spark_conf": settings}
    assert config_from_dict(config_dict(job=job)).job.spark_conf == {
        "spark.sql.shuffle.partitions": "4",
        provider: chain,
    }


POSITIVE = [
    ("mysql", "read_timeout"),
    ("mysql", "retry_backoff"),
    ("mysql", "retry_backoff_max"),
    ("mysql", "outage_budget"),
    ("housekeeping", "interval"),
]


def with_duration(section: str, key: str, value):
    if section == "mysql":
        return config_dict(**{f"mysql__{key}": value})
    if section == "restart":
        return config_dict(job={"checkpoint": "c", "restart": {key: value}})
    if section == "housekeeping":
        return config_dict(housekeeping={key: value})
    return config_dict(job={"checkpoint": "c", key: value})


@pytest.mark.parametrize(
    "section, key",
    [*POSITIVE, ("job", "trigger"), ("restart", "interval")],
)
@pytest.mark.parametrize("value", [0, "0 seconds", 0.0])
def test_zero_durations_are_refused_where_they_mean_nothing(section, key, value):
    if key == "trigger" and not isinstance(value, str):
        value = "0ms"
    line = refused(with_duration(section, key, value))
    assert f"{key}: must be more than 0 seconds" in line


@pytest.mark.parametrize(
    "section, key",
    [
        *POSITIVE,
        ("job", "stop_timeout"),
        ("restart", "delay"),
        ("restart", "interval"),
    ],
)
@pytest.mark.parametrize(
    "value", [-1, -0.5, "-5 seconds", float("nan"), float("inf"), 1e12, "400 days"]
)
def test_negative_and_endless_durations_are_refused(section, key, value):
    assert key in refused(with_duration(section, key, value))


def test_housekeeping_vacuum_under_the_retention_floor_is_refused():
    line = refused(
        config_dict(housekeeping={"vacuum": True, "vacuum_retain": "10 minutes"})
    )
    assert line == (
        "housekeeping.vacuum_retain is under wal.min_vacuum_retention (3600 s): a "
        "stage still writing has files younger than itself, which vacuum would delete"
    )
    kept = config_from_dict(
        config_dict(
            wal={"path": "w", "min_vacuum_retention": "5 minutes"},
            housekeeping={"vacuum": True, "vacuum_retain": "10 minutes"},
        )
    ).housekeeping
    assert kept.vacuum_retain == 600 and kept.interval == 3600


def test_zero_is_a_duration_where_it_means_at_once():
    c = config_from_dict(
        config_dict(job={"checkpoint": "c", "stop_timeout": 0, "restart": {"delay": 0}})
    )
    assert c.job.stop_timeout == 0 and c.job.restart.delay == 0
    assert "job.trigger" in refused(
        config_dict(job={"checkpoint": "c", "trigger": "-1s"})
    )


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('[sink]\nid = "s"\n# caf\xe9\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 0xe9 on line 3\)"):
        load_config(path)


def test_a_byte_order_mark_is_not_a_mistake(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(
        b"\xef\xbb\xbf[sink]\nid = 's'\n[wal]\npath = 'w'\n[mysql]\n"
        b"url = 'mysql+pymysql://u@h/d'\ntable = 't'\nkey = ['k']\n"
    )
    assert load_config(path).sink.id == "s"


def test_a_password_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "pw"
    path.write_bytes(b"p\xe4ss\xff\n")
    config = config_from_dict(config_dict(mysql__password_file=str(path)))
    with pytest.raises(ConfigError, match="is not UTF-8 text") as info:
        mysql_password(config.mysql)
    assert "\n" not in str(info.value) and "p\xe4ss" not in str(info.value)


KAFKA = {"format": "kafka", "schema": "k STRING", "options": {"subscribe": "t"}}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="sink" password="{SECRET}";'
)


@pytest.mark.parametrize(
    "key, value",
    [
        ("kafka.sasl.jaas.config", JAAS),
        ("kafka.ssl.keystore.password", SECRET),
        ("kafka.ssl.truststore.password", SECRET),
        ("kafka.sasl.client.secret", SECRET),
    ],
)
def test_source_options_refuse_secrets_and_name_the_way_out(key, value):
    source = {**KAFKA, "options": {"subscribe": "t", key: value}}
    line = refused(config_dict(source=source))
    assert line.startswith(f"source.options: {key!r} holds a secret"), line
    assert f'source.options_env ({{ "{key}" = "VARIABLE" }})' in line


def test_source_secrets_come_from_the_environment_when_the_query_starts(monkeypatch):
    source = {
        **KAFKA,
        "options": {"subscribe": "t", "kafka.ssl.key.location": "/etc/k.pem"},
        "options_env": {"kafka.sasl.jaas.config": "TEST_KAFKA_JAAS"},
    }
    config = config_from_dict(config_dict(source=source))
    monkeypatch.delenv("TEST_KAFKA_JAAS", raising=False)
    with pytest.raises(ConfigError) as unset:
        config.source.reader_options()
    assert str(unset.value) == (
        "source.options_env names the environment variable 'TEST_KAFKA_JAAS', "
        "which is not set"
    )
    monkeypatch.setenv("TEST_KAFKA_JAAS", JAAS)
    assert config.source.reader_options() == {
        "subscribe": "t",
        "kafka.ssl.key.location": "/etc/k.pem",
        "kafka.sasl.jaas.config": JAAS,
    }
    both = {**source, "options": {"kafka.sasl.jaas.config": "x"}}
    assert "'kafka.sasl.jaas.config' is in both options and options_env" in refused(
        config_dict(source=both)
    )
