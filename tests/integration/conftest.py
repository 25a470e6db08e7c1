"""Fixtures of the integration tests beyond tests/conftest.py's: the S3 server and
a bucket on it, the Kafka broker, counts of the rows each Arrow-rendered path
applied, a module's tables made afresh and single-table configs."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from devtools.kafka import KafkaBroker
from devtools.s3proxy import S3Proxy
from wal_sink.config import config_from_dict
from wal_sink.mysql.bulk_load import BulkLoader
from wal_sink.mysql.multi_row import MultiRowUpsert


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The server, its credentials in this process's environment (and so in every
    job and CLI process the tests start) for the module's duration."""
    server = S3Proxy(tmp_path_factory.mktemp("s3proxy"))
    server.start()
    saved = {k: os.environ.get(k) for k in server.credentials()}
    os.environ.update(server.credentials())
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """One private broker (KRaft, loopback) for the session's Kafka tests."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def bucket(s3) -> str:
    return s3.create_bucket(f"wal-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def calls(monkeypatch) -> dict[str, int]:
    """Rows each Arrow-rendered path applied."""
    counts = {"multi_row": 0, "local_infile": 0}
    for name, cls in (("multi_row", MultiRowUpsert), ("local_infile", BulkLoader)):
        real = cls.apply

        def counting(self, conn, chunk, real=real, name=name, **rendered):
            applied = real(self, conn, chunk, **rendered)
            counts[name] += applied
            return applied

        monkeypatch.setattr(cls, "apply", counting)
    return counts


@pytest.fixture
def fresh(db):
    """Drop the module's tables; returns ``create(*ddl)``."""

    def create(*ddl: str) -> None:
        db.execute("SET FOREIGN_KEY_CHECKS = 0")
        names = [r[0] for r in db.rows("SHOW TABLES")]
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute("SET FOREIGN_KEY_CHECKS = 0")
            for name in names:
                cur.execute(f"DROP TABLE `{name}`")
        for statement in ddl:
            db.execute(statement)

    return create


@pytest.fixture
def config(db, tmp_path):
    """Factory of configs: ``config(table, key, sink="s1", **mysql, cdc=None)``."""

    def make(table: str, key: list[str], sink: str = "s1", cdc=None, **mysql: Any):
        raw: dict[str, Any] = {
            "sink": {"id": sink},
            "wal": {"path": str(tmp_path / f"wal_{sink}")},
            "mysql": {"url": db.url, "table": table, "key": key, **mysql},
        }
        if cdc:
            raw["cdc"] = cdc
        return config_from_dict(raw, base_dir=tmp_path)

    return make
