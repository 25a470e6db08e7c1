"""Shared fixtures: one private MariaDB and one SparkSession per test session (per
worker: `make test` runs two, and a module runs whole on one), a fresh database per
test module, and a factory for sink configs. Helpers that are not fixtures are in
helpers.py."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from devtools.mariadb import SINK_PASSWORD, MariaDB
from tests.helpers import REPO

QUICK_JVM_START = "-XX:TieredStopAtLevel=1 -Dspark.ui.enabled=false"
"""For every JVM the tests start through spark-submit (the jobs, the writers, the
shared session, the Connect server): the JIT's first tier only, and no web UI (a
``spark.*`` system property is a Spark default that any ``--conf`` or
``job.spark_conf`` still overrides). A job that runs for seconds spends much of its
start compiling with the second tier and starting the UI's server; without them it
starts about a seventh sooner (docs/operations.md). The program run is the same."""


@pytest.fixture(scope="session", autouse=True)
def quick_jvm_starts() -> Iterator[None]:
    saved = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{saved or ''} {QUICK_JVM_START}".strip()
    yield
    if saved is None:
        os.environ.pop("SPARK_SUBMIT_OPTS", None)
    else:
        os.environ["SPARK_SUBMIT_OPTS"] = saved


@pytest.fixture(autouse=True)
def no_job_left_running():
    """A test that fails half-way leaves no spark-submit job running."""
    yield
    from devtools.spark_job import JobProcess

    JobProcess.reap()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    server = MariaDB(tmp_path_factory.mktemp("mariadb"))
    server.start()
    os.environ["WAL_SINK_MYSQL_PASSWORD"] = SINK_PASSWORD
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from pyspark.sql import SparkSession

    # Python workers (the wal_sink data source, its lookup) run this virtualenv's
    # Python: the JVM takes it from the environment it starts with.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("wal_sink tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


class Database:
    """A test module's own database, reached as root for setting up and checking."""

    def __init__(self, server: MariaDB, name: str) -> None:
        self.server = server
        self.name = name
        self.url = server.sink_url(name)

    def connect(self) -> pymysql.connections.Connection:
        conn = self.server.root(self.name)
        with conn.cursor() as cur:  # a leaked lock fails the test instead of hanging it
            cur.execute("SET SESSION lock_wait_timeout = 30")
        return conn

    def execute(self, sql: str, args: Any = None) -> None:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql, args)

    def run_sql_file(
        self, name: str, replacements: dict[str, str] | None = None
    ) -> None:
        """Execute a file from sql/: comment lines dropped, split on ';'."""
        text = (REPO / "sql" / name).read_text()
        for old, new in (replacements or {}).items():
            text = text.replace(old, new)
        code = "\n".join(
            ln for ln in text.splitlines() if not ln.lstrip().startswith("--")
        )
        for statement in code.split(";"):
            if statement.strip():
                self.execute(statement)

    def rows(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())


@pytest.fixture(scope="module")
def db(mariadb: MariaDB, request: pytest.FixtureRequest) -> Database:
    name = re.sub(r"\W", "_", request.module.__name__.split(".")[-1])[:60]
    mariadb.create_database(name)
    return Database(mariadb, name)


@pytest.fixture
def make_config(db: Database, tmp_path: Path):
    """Factory: ``make_config(table=..., key=[...], merge={...}, ...)`` -> Config."""
    from wal_sink.config import config_from_dict

    def factory(
        *,
        sink_id: str = "s1",
        table: str = "totals",
        key: list[str] | None = None,
        merge: dict[str, str] | None = None,
        version_column: str | None = None,
        cdc: dict[str, Any] | None = None,
        wal_path: Path | None = None,
        checkpoint: Path | None = None,
        chunk_rows: int = 1000,
        source: dict[str, Any] | None = None,
    ):
        mysql: dict[str, Any] = {
            "url": db.url,
            "table": table,
            "key": key or ["k"],
            "merge": merge or {},
        }
        if version_column:
            mysql["version_column"] = version_column
        raw: dict[str, Any] = {
            "sink": {"id": sink_id},
            "wal": {
                "path": str(wal_path or tmp_path / "wal"),
                "chunk_rows": chunk_rows,
            },
            "mysql": mysql,
        }
        if checkpoint:
            raw["job"] = {"checkpoint": str(checkpoint)}
        if cdc:
            raw["cdc"] = cdc
        if source:
            raw["source"] = source
        return config_from_dict(raw, base_dir=tmp_path)

    return factory
