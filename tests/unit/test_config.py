"""Config: every mistake is one ConfigError line naming the key."""

import pytest

from wal_sink.config import config_from_dict, load_config, mysql_password
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError


def base(**overrides):
    raw = {
        "sink": {"id": "invoices"},
        "wal": {"path": "var/wal"},
        "mysql": {
            "url": "mysql+pymysql://sink@127.0.0.1:3306/shop",
            "table": "t",
            "key": ["org"],
            "merge": {"amount": "add"},
            "version_column": "seq",
        },
    }
    for dotted, value in overrides.items():
        section, _, key = dotted.partition("__")
        if key:
            raw.setdefault(section, {})[key] = value
        else:
            raw[section] = value
    return raw


def test_valid_config_loads_typed_values():
    c = config_from_dict(
        base(
            job={
                "checkpoint": "var/cp",
                "trigger": "5 seconds",
                "restart": {"strategy": "none"},
            },
            cdc={"op_column": "op", "order_by": "seq"},
        )
    )
    assert c.mysql.key == ("org",) and c.mysql.merge == {"amount": "add"}
    assert c.mysql.ack_table == "wal_sink_ack" and c.wal.chunk_rows == 20_000
    assert c.job.restart.strategy == "none" and c.cdc.delete_values == ("D",)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sink__colour": "red"}, "unknown config key 'sink.colour'"),
        ({"extra": {}}, "unknown config key 'extra'"),
        ({"sink": {}}, "sink.id is missing"),
        ({"sink__id": "bad id!"}, "sink.id"),
        (
            {"mysql__url": "mysql+pymysql://sink:secret@h/db"},
            "must not contain a password",
        ),
        ({"mysql__url": "postgresql://u@h/db"}, "mysql.url"),
        ({"mysql__url": "mysql+pymysql://u@h"}, "must name a database"),
        ({"mysql__table": "t; DROP TABLE x"}, "mysql.table"),
        ({"mysql__key": []}, "mysql.key"),
        ({"mysql__key": ["ok", "no-dash"]}, "mysql.key"),
        ({"mysql__merge": {"amount": "sum"}}, "mysql.merge.amount"),
        ({"mysql__merge": {"org": "add"}}, "key column"),
        ({"mysql__version_column": "org"}, "version_column"),
        ({"wal__chunk_rows": 0}, "wal.chunk_rows"),
        ({"source": {"format": "xml"}}, "source.format"),
        ({"source": {"format": "json", "schema": "a INT"}}, "source.path is required"),
        ({"job": {"checkpoint": "c", "trigger": "soon"}}, "job.trigger"),
        (
            {"job": {"checkpoint": "c", "restart": {"strategy": "maybe"}}},
            "job.restart.strategy",
        ),
        ({"cdc": {"op_column": "op"}}, "cdc.order_by is missing"),
        (
            {"job": {"checkpoint": "c", "spark_log_level": "LOUD"}},
            "job.spark_log_level: 'LOUD' must be one of OFF, FATAL, ERROR, WARN, INFO",
        ),
        ({"mysql__key": ["_wal_seq"]}, "reserved"),
        (
            {"job": {"checkpoint": "c", "writer": "jdbc"}},
            "job.writer: Input should be 'foreach_batch' or 'datasource'",
        ),
    ],
)
def test_bad_config_names_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as info:
        config_from_dict(base(**overrides))
    assert "\n" not in str(info.value)


def test_spark_log_level_defaults_to_warn_and_takes_any_case():
    job = {"checkpoint": "c"}
    assert config_from_dict(base(job=job)).job.spark_log_level == "WARN"
    job["spark_log_level"] = "info"
    assert config_from_dict(base(job=job)).job.spark_log_level == "INFO"


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sink\nid=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_password_from_env_or_file(tmp_path, monkeypatch):
    c = config_from_dict(base(mysql__password_env="MY_PW"))
    monkeypatch.delenv("MY_PW", raising=False)
    with pytest.raises(ConfigError, match="export MY_PW"):
        mysql_password(c.mysql)
    monkeypatch.setenv("MY_PW", "s3cret")
    assert mysql_password(c.mysql) == "s3cret"
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    c = config_from_dict(base(mysql__password_file=str(pw)))
    assert mysql_password(c.mysql) == "from-file"


@pytest.mark.parametrize(
    "text, seconds",
    [("2 seconds", 2), ("500ms", 0.5), ("1.5 minutes", 90), ("7d", 604800)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration_says_the_form():
    with pytest.raises(ValueError, match="e.g. '10 seconds'"):
        parse_duration("ten")
