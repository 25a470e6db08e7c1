"""A hostile server, or one in the middle of the connection, gets neither files nor
the password: mysql.local_infile hands the server no file but the temporary file of
the sink's own LOAD DATA (not in reply to another statement, not in place of that
file, not through an engine the sink did not make), and the password goes in clear
text only to a server TLS verified."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from pymysql.constants import CLIENT
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from devtools.mariadb import SINK_PASSWORD
from tests.integration.hostile_server import FileRequestingProxy, PasswordAskingProxy
from wal_sink.errors import TerminalError
from wal_sink.mysql.bulk_load import BulkLoader
from wal_sink.mysql.engine import make_engine
from wal_sink.mysql.errors import is_transient
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

SECRET_FILE_TEXT = "hostile-test-secret-7f3a"


@pytest.fixture(autouse=True)
def clean(db):
    for t in ("wal_sink_ack", "wal_sink_lease", "wal_sink_outbox", "loaded"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE loaded (k VARCHAR(16) PRIMARY KEY, amount BIGINT) ENGINE=InnoDB"
    )


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    """A file the server must never get (like /proc/self/environ)."""
    path = tmp_path / "secret.txt"
    path.write_text(SECRET_FILE_TEXT + "\n")
    return path


def config_with(make_config, tmp_path, *, local_infile: bool, url: str | None = None):
    config = make_config(table="loaded", wal_path=tmp_path / "wal")
    mysql = replace(
        config.mysql, local_infile=local_infile, url=url or config.mysql.url
    )
    return replace(config, mysql=mysql)


def staged(spark, config, rows):
    stage(
        spark.createDataFrame(rows, "k STRING, amount BIGINT"),
        WalWriter(config.wal_path, config.sink.id),
        0,
    )


@pytest.mark.parametrize("which", ["/etc/hostname", "secret_file"])
def test_server_request_for_another_file_sends_nothing(
    db, make_config, tmp_path, secret_file, caplog, which
):
    path = secret_file if which == "secret_file" else which
    config = config_with(make_config, tmp_path, local_infile=True)
    with make_engine(config.mysql).connect() as conn:
        with pytest.raises(OperationalError, match="refused"):
            conn.exec_driver_sql(
                f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE loaded (k)"
            )
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM loaded").scalar() == 0
        # the exchange was ended properly: the connection goes on
        assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    assert f"asked for the local file '{path}'" in caplog.text


def test_connections_without_the_option_do_not_offer_local_files(
    db, make_config, tmp_path
):
    for on in (False, True):
        config = config_with(make_config, tmp_path, local_infile=on)
        with make_engine(config.mysql).connect() as conn:
            offered = conn.connection.dbapi_connection.client_flag & CLIENT.LOCAL_FILES
            assert bool(offered) is on


def test_hostile_server_asking_for_a_file_at_start_up_gets_nothing(
    db, mariadb, make_config, tmp_path, secret_file
):
    proxy = FileRequestingProxy(
        mariadb.port, b"information_schema.TABLES", str(secret_file).encode()
    )
    try:
        url = db.url.replace(f":{mariadb.port}/", f":{proxy.port}/")
        config = config_with(make_config, tmp_path, local_infile=True, url=url)
        with pytest.raises(TerminalError, match="asked for the local file") as info:
            SinkInstance(config).start()
    finally:
        proxy.close()
    assert proxy.answered.is_set() and proxy.received == b""
    assert "\n" not in str(info.value)


def test_hostile_server_asking_for_another_file_in_place_of_the_load_gets_nothing(
    spark, db, mariadb, make_config, tmp_path, secret_file
):
    proxy = FileRequestingProxy(
        mariadb.port, b"LOAD DATA LOCAL INFILE", str(secret_file).encode()
    )
    try:
        url = db.url.replace(f":{mariadb.port}/", f":{proxy.port}/")
        config = config_with(make_config, tmp_path, local_infile=True, url=url)
        staged(spark, config, [("a", 1), ("b", 2)])
        committer = SinkInstance(config).start()
        with pytest.raises(TerminalError, match="asked for the local file"):
            committer.apply(0)
    finally:
        proxy.close()
    assert proxy.answered.is_set() and proxy.received == b""
    assert db.rows("SELECT COUNT(*) FROM loaded") == [(0,)]
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(0,)]


def test_an_engine_the_sink_did_not_make_never_loads_files(
    spark, db, make_config, tmp_path, monkeypatch, caplog
):
    loads = []
    monkeypatch.setattr(BulkLoader, "apply", lambda *a: loads.append(a) or 0)
    config = config_with(make_config, tmp_path, local_infile=True)
    staged(spark, config, [("a", 1), ("b", 2)])
    own = create_engine(
        make_url(config.mysql.url).set(password=SINK_PASSWORD),
        connect_args={"local_infile": True, "charset": "utf8mb4"},
    )
    caplog.set_level(logging.WARNING)
    assert SinkInstance(config, own).start().apply(0).rows == 2
    assert loads == [] and "engine was not made by the sink" in caplog.text
    assert db.rows("SELECT k, amount FROM loaded ORDER BY k") == [("a", 1), ("b", 2)]


def test_verified_tls_is_asked_for_when_the_server_is_not_local(
    make_config, tmp_path, caplog
):
    remote = "mysql+pymysql://sink@db.example.invalid:3306/shop"
    for tls, warned in (
        ({}, True),
        ({"ssl_verify_cert": True, "ssl_verify_identity": True}, False),
    ):
        caplog.clear()
        config = config_with(make_config, tmp_path, local_infile=True, url=remote)
        make_engine(replace(config.mysql, tls=tls))  # connects to nothing yet
        assert ("without verified TLS" in caplog.text) is warned
    caplog.clear()
    make_engine(
        config_with(make_config, tmp_path, local_infile=False, url=remote).mysql
    )
    make_engine(config_with(make_config, tmp_path, local_infile=True).mysql)  # loopback
    assert "without verified TLS" not in caplog.text


def test_a_server_asking_for_the_password_in_clear_text_does_not_get_it(
    db, mariadb, make_config, tmp_path, caplog
):
    proxy = PasswordAskingProxy(mariadb.port)
    try:
        url = db.url.replace(f":{mariadb.port}/", f":{proxy.port}/")
        config = config_with(make_config, tmp_path, local_infile=False, url=url)
        with pytest.raises(OperationalError, match="password in clear text") as info:
            make_engine(config.mysql).connect()
        assert proxy.answered.wait(30)
    finally:
        proxy.close()
    assert SINK_PASSWORD.encode() not in proxy.received
    assert not is_transient(info.value)  # the sink stops instead of retrying
    assert SINK_PASSWORD not in str(info.value) + caplog.text
