"""Config: every mistake is one ConfigError line naming the key."""

from pathlib import Path

import pytest

from tests.helpers import config_dict
from wal_sink.config import config_from_dict, load_config, mysql_password
from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError
from wal_sink.mysql.tombstone_checks import refuse_shared


def test_valid_config_loads_typed_values():
    c = config_from_dict(
        config_dict(
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
    assert c.wal.driver_stage_rows == 10_000
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
        ({"wal__driver_stage_rows": -1}, "wal.driver_stage_rows"),
        ({"wal__driver_stage_rows": "many"}, "wal.driver_stage_rows"),
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
        ({"mysql__unique_conflicts": "overwrite"}, "mysql.unique_conflicts"),
        (
            {"mysql__table": "t" * 60, "cdc": {"op_column": "op", "order_by": "s"}},
            "mysql.tombstone_table: 'tttttttttt",
        ),
        ({"mysql__tombstone_table": "x; DROP"}, "mysql.tombstone_table"),
        (
            {
                "cdc": {
                    "op_column": "op",
                    "order_by": "s",
                    "tombstone_retention": "ever",
                }
            },
            "cdc.tombstone_retention",
        ),
        (
            {
                "mysql__version_column": None,
                "cdc": {"op_column": "op", "order_by": "s", "truncate_values": ["t"]},
            },
            "cdc.truncate_values needs mysql.version_column",
        ),
        (
            {
                "cdc": {
                    "op_column": "op",
                    "order_by": "s",
                    "delete_values": ["d", "t"],
                    "truncate_values": ["t"],
                }
            },
            "cdc.truncate_values and cdc.delete_values share",
        ),
        (
            {
                "mysql__tombstone_table": "t" * 60,
                "cdc": {"op_column": "op", "order_by": "s", "truncate_values": ["t"]},
            },
            "leaves no room for the truncate table",
        ),
        (
            {"mysql__stored_as_scd_type": 2, "mysql__version_column": None},
            "mysql.stored_as_scd_type = 2 needs mysql.version_column",
        ),
        (
            {"mysql__stored_as_scd_type": 2},
            "mysql.merge.amount: 'add' with stored_as_scd_type = 2",
        ),
        ({"mysql__stored_as_scd_type": 3}, "mysql.stored_as_scd_type"),
        (
            {"mysql__track_history_column_list": ["amount"]},
            "need stored_as_scd_type = 2",
        ),
        (
            {
                "mysql__merge": {},
                "mysql__stored_as_scd_type": 2,
                "mysql__track_history_except_column_list": ["seq"],
            },
            "'seq' is a key or the version column",
        ),
        (
            {"job": {"checkpoint": "c", "writer": "jdbc"}},
            "job.writer: Input should be 'foreach_batch' or 'datasource'",
        ),
    ],
)
def test_bad_config_names_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as info:
        config_from_dict(config_dict(**overrides))
    assert "\n" not in str(info.value)


def test_tombstone_table_defaults_to_the_target_s_name():
    cdc = {"op_column": "op", "order_by": "seq"}
    config = config_from_dict(config_dict(cdc=cdc))
    assert config.mysql.target.tombstones == "t_tombstones"
    assert config.cdc.tombstone_retention == "7 days"
    assert config.mysql.unique_conflicts == "refuse"
    named = config_from_dict(config_dict(cdc=cdc, mysql__tombstone_table="deleted"))
    assert named.mysql.target.tombstones == "deleted"


def test_spark_log_level_defaults_to_warn_and_takes_any_case():
    job = {"checkpoint": "c"}
    assert config_from_dict(config_dict(job=job)).job.spark_log_level == "WARN"
    job["spark_log_level"] = "info"
    assert config_from_dict(config_dict(job=job)).job.spark_log_level == "INFO"


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sink\nid=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_password_from_env_or_file(tmp_path, monkeypatch):
    c = config_from_dict(config_dict(mysql__password_env="MY_PW"))
    monkeypatch.delenv("MY_PW", raising=False)
    with pytest.raises(ConfigError, match="export MY_PW"):
        mysql_password(c.mysql)
    monkeypatch.setenv("MY_PW", "s3cret")
    assert mysql_password(c.mysql) == "s3cret"
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    c = config_from_dict(config_dict(mysql__password_file=str(pw)))
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


def test_relative_paths_resolve_against_the_config_files_directory(
    tmp_path, monkeypatch
):
    """Not the current directory: a job or CLI started elsewhere must find the same
    WAL and checkpoint, not new empty ones."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "sink.toml").write_text(
        "[sink]\nid = 's'\n[wal]\npath = '../var/wal'\n"
        "[mysql]\nurl = 'mysql+pymysql://u@h/d'\ntable = 't'\nkey = ['k']\n"
        "password_file = 'pw'\n[job]\ncheckpoint = 'cp'\n"
    )
    elsewhere = tmp_path / "elsewhere" / "deeper"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    c = load_config("../../conf/sink.toml")
    assert c.wal.path == str(tmp_path / "var" / "wal")
    assert c.quarantine_path == str(tmp_path / "var" / "wal_quarantine")
    assert c.job.checkpoint == str(conf / "cp")
    assert c.mysql.password_file == str(conf / "pw")


def test_relative_tls_files_resolve_against_the_config_files_directory(
    tmp_path, monkeypatch
):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "sink.toml").write_text(
        "[sink]\nid = 's'\n[wal]\npath = 'w'\n"
        "[mysql]\nurl = 'mysql+pymysql://u@h/d'\ntable = 't'\nkey = ['k']\n"
        "tls = { ssl_ca = 'certs/ca.pem', ssl_cert = '/etc/ssl/client.pem', "
        "ssl_key = '../keys/client.key', ssl_verify_cert = true }\n"
    )
    monkeypatch.chdir(tmp_path)
    assert load_config("conf/sink.toml").mysql.tls == {
        "ssl_ca": str(conf / "certs" / "ca.pem"),
        "ssl_cert": "/etc/ssl/client.pem",
        "ssl_key": str(tmp_path / "keys" / "client.key"),
        "ssl_verify_cert": True,
    }


def test_the_example_configs_point_into_the_checkouts_var(monkeypatch, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    for name in ("local", "invoices", "invoices_files", "debezium_shop"):
        c = load_config(repo / "conf" / f"{name}.toml")
        assert c.wal.path == str(repo / "var" / "wal" / name)
        assert c.job.checkpoint == str(repo / "var" / "checkpoints" / name)


@pytest.mark.parametrize(
    "orders, named",
    [
        ({"tombstone_table": "Deleted"}, "Deleted"),
        ({}, "orders_tombstones"),
    ],
)
def test_two_targets_of_one_tombstone_table_are_refused(orders, named):
    """Named alike but for case (one table where MySQL folds names), or a name
    that is another table's default: refused at start, before anything is made."""
    items = {"key": ["id"], "version_column": "seq", "tombstone_table": "deleted"}
    if not orders:
        items["tombstone_table"] = "orders_tombstones"
    raw = config_dict(cdc={"op_column": "op", "order_by": "seq"})
    raw["mysql"] = {
        "url": raw["mysql"]["url"],
        "route_column": "tbl",
        "tables": {
            "items": items,
            "orders": {"key": ["id"], "version_column": "seq", **orders},
        },
    }
    with pytest.raises(ConfigError) as info:
        refuse_shared(config_from_dict(raw))
    assert str(info.value) == (
        f"mysql.tables.orders.tombstone_table: table {named} would hold the "
        "tombstones of table items (mysql.tables.items) and of table orders, and "
        "one tombstone table serves one target: set "
        "mysql.tables.orders.tombstone_table to another name"
    )
    del raw["mysql"]["tables"]["orders"]["version_column"]
    refuse_shared(config_from_dict(raw))  # a table without tombstones shares none
