"""Another unique index on the target besides mysql.key: an upsert must never reach a
row through it. Refused at start by default; with mysql.unique_conflicts =
"quarantine" such records are set aside, exactly once, and the rest commits."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from devtools.spark_job import JobProcess
from tests.helpers import cli, settle, wait_for_lock_waits
from wal_sink import WalSink
from wal_sink.errors import ConfigError
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.quarantine import Quarantine
from wal_sink.wal.writer import WalWriter

SCHEMA = "id BIGINT, email STRING, visits DECIMAL(12,2)"
SINK_TABLES = ("wal_sink_ack", "wal_sink_lease", "wal_sink_outbox", "wal_sink_retry")


@pytest.fixture
def users(db):
    for t in ("users", *SINK_TABLES):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(64), "
        "visits DECIMAL(14,2), UNIQUE KEY users_email (email)) ENGINE=InnoDB "
        "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
    )
    db.execute(
        "INSERT INTO users VALUES (1, 'ann@x', 10), (2, 'bob@x', 20), (3, NULL, 30)"
    )
    return lambda: {r[0]: (r[1], r[2]) for r in db.rows("SELECT * FROM users")}


def users_config(make_config, mode: str = "refuse", chunk_rows: int = 1000, **mysql):
    config = make_config(
        table="users", key=["id"], merge={"visits": "add"}, chunk_rows=chunk_rows
    )
    return replace(config, mysql=replace(config.mysql, unique_conflicts=mode, **mysql))


def sink_tables(db) -> list[str]:
    return [r[0] for r in db.rows("SHOW TABLES LIKE 'wal\\_sink\\_%'")]


def test_a_unique_index_the_stream_writes_is_refused_before_anything_is_written(
    spark, db, users, make_config
):
    before = users()
    sink = WalSink(users_config(make_config))
    sink.expect_columns(["id", "email", "visits"])
    with pytest.raises(ConfigError) as refused:
        sink.start()
    message = str(refused.value)
    assert "\n" not in message
    assert "table 'users'" in message and "users_email (email)" in message
    assert "mysql.key (id)" in message and "Leave email out" in message
    assert 'mysql.unique_conflicts = "quarantine"' in message
    assert sink_tables(db) == [], "no lease taken, no sink table created"
    # Without the columns announced, the first batch is refused before staging.
    sink = WalSink(users_config(make_config))
    df = spark.createDataFrame([(7, "ann@x", Decimal(1))], SCHEMA)
    with pytest.raises(ConfigError, match="users_email"):
        sink.foreach_batch(df, 0)
    assert sink.wal.staged_batches() == {}
    assert users() == before
    # A stream that does not write the e-mail cannot reach another row through it.
    sink = WalSink(users_config(make_config))
    sink.expect_columns(["id", "visits"])
    sink.start()
    sink.foreach_batch(
        spark.createDataFrame([(1, Decimal(5))], "id BIGINT, visits DECIMAL(12,2)"), 0
    )
    settle(sink)
    sink.close()
    assert users()[1] == ("ann@x", Decimal(15))


# Staged order of one batch, and what each row must do.
BATCH = [
    (7, "ANN@x", Decimal(1)),  # a new id, e-mail held by id 1 (case-insensitively)
    (8, "carl@x", Decimal(2)),  # new: inserted
    (9, "carl@x ", Decimal(3)),  # the e-mail an earlier row took (trailing space)
    (2, "bobby@x", Decimal(4)),  # id 2 moves from bob@x to bobby@x
    (10, "bob@x", Decimal(5)),  # ... which frees bob@x for a later row
    (11, None, Decimal(6)),  # NULLs never collide
    (12, None, Decimal(7)),
    (1, "carl@x", Decimal(8)),  # id 1 would take id 8's e-mail (1062 on update)
    (3, "dan@x", Decimal(9)),  # id 3 gets an e-mail
]
EXPECTED = {
    1: ("ann@x", Decimal(10)),
    2: ("bobby@x", Decimal(24)),
    3: ("dan@x", Decimal(39)),
    8: ("carl@x", Decimal(2)),
    10: ("bob@x", Decimal(5)),
    11: (None, Decimal(6)),
    12: (None, Decimal(7)),
}
SET_ASIDE = {
    7: "unique index users_email (email) already holds its value for the row with "
    "id=1: it would update that row",
    9: "unique index users_email (email) already holds its value for the row with "
    "id=8: it would update that row",
    1: "unique index users_email (email) already holds its value for the row with "
    "id=8: it would update that row",
}


@pytest.mark.parametrize(
    "path, fast",
    [
        ("multi-row", {"multi_row": 3, "local_infile": 0}),
        ("load-data", {"multi_row": 0, "local_infile": 3}),
        ("cdc", {"multi_row": 0, "local_infile": 0}),
    ],
)
def test_quarantine_sets_aside_records_that_would_reach_another_row(
    spark, db, users, make_config, calls, path, fast
):
    """Chunks of two rows: those holding a record that would reach another row
    (7, 9, 1) fall from the fast path to row by row, which sets it aside; the
    others (10 and 11, 3) go the fast way. CDC goes row by row throughout."""
    config = users_config(
        make_config, "quarantine", chunk_rows=2, local_infile=path == "load-data"
    )
    rows, schema = BATCH, SCHEMA
    if path == "cdc":  # the driver's row path, in cdc.order_by order
        config = replace(
            config,
            cdc=make_config(cdc={"op_column": "op", "order_by": "n"}).cdc,
        )
        rows = [(n, "U", *r) for n, r in enumerate(BATCH)]
        schema = f"n INT, op STRING, {SCHEMA}"
        db.execute("ALTER TABLE users ADD COLUMN n INT")
    sink = WalSink(config)
    df = spark.createDataFrame(rows, schema).coalesce(1)
    sink.foreach_batch(df, 0)
    settle(sink)
    sink.foreach_batch(df, 0)  # re-delivered: already staged, applied once
    settle(sink)
    sink.close()
    assert {k: v[:2] for k, v in users().items()} == EXPECTED
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [(6, 3)]
    assert calls == fast
    entries = Quarantine(config.quarantine_path, "s1").read(100)
    reasons = {json.loads(e["record"])["id"]: e["reason"] for e in entries}
    assert reasons == SET_ASIDE


def test_a_concurrent_writer_cannot_slip_in(spark, db, users, make_config):
    """Another session inserts the e-mail a new id of the batch carries and commits
    only while the batch waits: the batch's row is set aside, not applied to it."""
    config = users_config(make_config, "quarantine")
    sink = WalSink(config)
    sink.start()
    other = db.connect()
    with other.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO users VALUES (50, 'eve@x', 100)")
    seen: list[str] = []

    def commit_once_the_batch_waits() -> None:
        wait_for_lock_waits(db)  # the batch's INSERT, behind the uncommitted e-mail
        seen.append("the batch waited")
        other.commit()

    committed = threading.Thread(target=commit_once_the_batch_waits)
    committed.start()
    df = spark.createDataFrame(
        [(13, "eve@x", Decimal(1)), (14, "fay@x", Decimal(2))], SCHEMA
    )
    sink.foreach_batch(df.coalesce(1), 0)
    settle(sink)
    committed.join()
    assert seen == ["the batch waited"]
    other.close()
    sink.close()
    got = users()
    assert got[50] == ("eve@x", Decimal(100)) and 13 not in got
    assert got[14] == ("fay@x", Decimal(2))
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [(1, 1)]


@pytest.fixture
def other_tables(db):
    """Targets whose second unique index is, or is not, within a stream's reach."""
    tables = {
        # (DDL, key, stream columns, reachable index or None)
        "t_default": (
            "(id INT PRIMARY KEY, email VARCHAR(16), tenant INT NOT NULL DEFAULT 1, "
            "UNIQUE KEY t_default_et (email, tenant))",
            ["id"],
            ["id", "email"],
            "t_default_et (email, tenant) (tenant defaults to 1)",
        ),
        "t_null": (
            "(id INT PRIMARY KEY, email VARCHAR(16), tenant INT, "
            "UNIQUE KEY t_null_et (email, tenant))",
            ["id"],
            ["id", "email"],
            None,
        ),
        "t_auto": (
            "(id INT AUTO_INCREMENT PRIMARY KEY, code VARCHAR(16) NOT NULL, v INT, "
            "UNIQUE KEY t_auto_code (code))",
            ["code"],
            ["code", "v"],
            None,
        ),
        "t_pk": (
            "(id INT PRIMARY KEY, code VARCHAR(16) NOT NULL, v INT, "
            "UNIQUE KEY t_pk_code (code))",
            ["code"],
            ["id", "code", "v"],
            "PRIMARY (id)",
        ),
        "t_generated": (
            "(id INT PRIMARY KEY, a VARCHAR(16), g VARCHAR(16) AS (LOWER(a)) VIRTUAL, "
            "UNIQUE KEY t_generated_g (g))",
            ["id"],
            ["id", "a"],
            "t_generated_g (g) (g is generated)",
        ),
        "t_wider": (
            "(id INT PRIMARY KEY, email VARCHAR(16), "
            "UNIQUE KEY t_wider_ie (id, email))",
            ["id"],
            ["id", "email"],
            None,
        ),
    }
    for name, (ddl, *_) in tables.items():
        db.execute(f"DROP TABLE IF EXISTS {name}")
        db.execute(f"CREATE TABLE {name} {ddl} ENGINE=InnoDB")
    for t in SINK_TABLES:
        db.execute(f"DROP TABLE IF EXISTS {t}")
    return {name: spec[1:] for name, spec in tables.items()}


def test_reach_counts_defaults_and_generated_columns_not_fresh_or_null_values(
    db, other_tables, make_config
):
    for table, (key, columns, reachable) in other_tables.items():
        instance = SinkInstance(make_config(table=table, key=key, sink_id=table))
        instance.expect_columns(columns)
        if reachable is None:
            instance.start()
        else:
            with pytest.raises(ConfigError) as refused:
                instance.start()
            assert f"unique index {reachable} besides mysql.key" in str(refused.value)
        instance.close()


def test_quarantine_guards_defaults_and_generated_columns_too(
    spark, db, other_tables, make_config
):
    db.execute("INSERT INTO t_default VALUES (1, 'a', 1)")
    db.execute("INSERT INTO t_generated (id, a) VALUES (1, 'x')")
    for table, rows, columns in (
        ("t_default", [(2, "a"), (3, "b")], "id INT, email STRING"),
        ("t_generated", [(2, "X"), (3, "y")], "id INT, a STRING"),
    ):
        config = make_config(table=table, sink_id=f"q_{table}", key=["id"])
        config = replace(
            config,
            mysql=replace(config.mysql, unique_conflicts="quarantine"),
            wal=replace(config.wal, path=config.wal_path + table),
        )
        sink = WalSink(config)
        sink.foreach_batch(spark.createDataFrame(rows, columns).coalesce(1), 0)
        settle(sink)
        sink.close()
        assert sorted(r[0] for r in db.rows(f"SELECT id FROM {table}")) == [1, 3]
        entries = Quarantine(config.quarantine_path, f"q_{table}").read(10)
        assert [json.loads(e["record"])["id"] for e in entries] == [2]
        assert "besides mysql.key" in entries[0]["reason"]


def test_recover_refuses_a_staged_batch_that_reaches_another_row(
    spark, db, users, make_config, tmp_path
):
    """The CLI knows no query: the committer checks each staged schema before
    applying anything; exit 2, one line, nothing applied."""
    config_path = tmp_path / "users.toml"
    config_path.write_text(f"""
[sink]
id = "s1"

[wal]
path = "{tmp_path / "wal"}"

[mysql]
url = "{db.url}"
table = "users"
key = ["id"]
merge = {{ visits = "add" }}
""")
    before = users()
    stage(
        spark.createDataFrame([(7, "ann@x", Decimal(1))], SCHEMA),
        WalWriter(str(tmp_path / "wal"), "s1"),
        0,
    )
    done = cli(config_path, "recover")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "users_email (email)" in done.stderr
    assert "Traceback" not in done.stderr
    assert users() == before
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(0,)]
    config_path.write_text(
        config_path.read_text() + 'unique_conflicts = "quarantine"\n'
    )
    done = cli(config_path, "recover")
    assert done.returncode == 0, done.stderr
    assert users() == before, "the record is set aside, not applied to id 1"
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [(0, 1)]


def test_job_refuses_to_start_and_writes_nothing(db, users, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "f0.json").write_text(
        json.dumps({"id": 7, "email": "ann@x", "visits": "1.00"}) + "\n"
    )
    config = tmp_path / "users_job.toml"
    config.write_text(f"""
[sink]
id = "users_job"

[source]
format = "json"
path = "{landing}"
schema = "{SCHEMA}"

[wal]
path = "{tmp_path / "wal"}"

[mysql]
url = "{db.url}"
table = "users"
key = ["id"]
merge = {{ visits = "add" }}

[job]
checkpoint = "{tmp_path / "checkpoint"}"
""")
    before = users()
    job = JobProcess(config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 2, job.tail()
    errors = [ln for ln in job.text().splitlines() if "ERROR wal_sink.job" in ln]
    assert len(errors) == 1 and "users_email (email)" in errors[0], job.tail()
    assert "Traceback" not in job.text()
    assert users() == before
    assert sink_tables(db) == []
    assert not Path(tmp_path / "wal").exists()


def test_a_session_where_division_by_zero_is_no_error_is_refused(
    db, users, make_config
):
    """The guard fails the statement with a division by zero: a session whose
    sql_mode lets it pass (NULL and a warning) is refused at start."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from devtools.mariadb import SINK_PASSWORD

    config = users_config(make_config, "quarantine")
    engine = create_engine(
        make_url(config.mysql.url).set(password=SINK_PASSWORD),
        connect_args={"init_command": "SET SESSION sql_mode='STRICT_ALL_TABLES'"},
    )
    with pytest.raises(ConfigError, match="lacks ERROR_FOR_DIVISION_BY_ZERO"):
        SinkInstance(config, engine).start()
    engine.dispose()


def test_an_index_added_while_the_sink_runs_never_routes_a_record_elsewhere(
    spark, db, users, make_config
):
    """The refusal is decided at start; an index a DBA adds later is still never a
    way to another row: the upsert's own guard sets the record aside."""
    db.execute("ALTER TABLE users DROP INDEX users_email")
    sink = WalSink(users_config(make_config))
    df = spark.createDataFrame([(4, "dan@x", Decimal(1))], SCHEMA)
    sink.foreach_batch(df, 0)
    settle(sink)
    db.execute("ALTER TABLE users ADD UNIQUE KEY users_email (email)")
    df = spark.createDataFrame(
        [(7, "ann@x", Decimal(1)), (8, "eve@x", Decimal(2))], SCHEMA
    )
    sink.foreach_batch(df.coalesce(1), 1)
    settle(sink)
    sink.close()
    got = users()
    assert got[1] == ("ann@x", Decimal(10)) and 7 not in got
    assert got[8] == ("eve@x", Decimal(2))
    assert db.rows("SELECT batch_id, quarantined FROM wal_sink_ack") == [(0, 0), (1, 1)]
