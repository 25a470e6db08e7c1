"""Tables the sink creates and evolves (``mysql.auto_create``, ``auto_evolve``;
docs/merge.md, "Tables the sink creates"), in process: from the WAL's schema as the
follower and ``recover`` see it, idempotent, under a named lock, never waiting long
for a table's metadata lock. The job's runs (the type mapping's round trip,
``--print-ddl``) are in test_created_tables_job.py."""

from __future__ import annotations

import threading
from datetime import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from tests.helpers import stage_rows
from wal_sink.config import config_from_dict
from wal_sink.errors import TransientError
from wal_sink.mysql import table_ddl
from wal_sink.mysql.table_ddl import TablePlan
from wal_sink.protocol import target_ddl
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.protocol.target_ddl import prepare_targets

SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("n", pa.int64()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("tags", pa.list_(pa.decimal128(20, 2))),
    ]
)


@pytest.fixture
def config(db, tmp_path):
    for t in ("made", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")

    def make(**mysql: Any):
        return config_from_dict(
            {
                "sink": {"id": "maker"},
                "wal": {"path": str(tmp_path / "wal")},
                "mysql": {"url": db.url, "table": "made", "key": ["k"], **mysql},
            }
        )

    return make


def create_table(db) -> str:
    return db.rows("SHOW CREATE TABLE made")[0][1]


def test_a_missing_target_is_created_from_the_wal_and_written(db, config):
    """As the follower (or recover) does: no query, the WAL's schema."""
    cfg = config(auto_create=True)
    at = pa.scalar(4_102_444_800_000_000, pa.timestamp("us", tz="UTC")).as_py()
    rows = [
        {"k": "a", "n": 1, "at": at, "tags": [Decimal("12345678901234567.89")]},
        {"k": "A", "n": 2, "at": None, "tags": None},
        {"k": "a ", "n": 3, "at": None, "tags": []},
    ]
    stage_rows(cfg, 0, rows, SCHEMA)
    sink = SinkInstance(cfg)
    sink.recover()
    sink.close()
    ddl = create_table(db)
    assert "`k` varchar(768)" in ddl and "PRIMARY KEY (`k`)" in ddl
    assert "utf8mb4_nopad_bin" in ddl and "ENGINE=InnoDB" in ddl
    assert "`at` datetime(6) DEFAULT NULL" in ddl and "`tags` longtext" in ddl
    stored = db.rows("SELECT k, n, CAST(at AS CHAR), tags FROM made ORDER BY n")
    assert stored == [
        ("a", 1, "2100-01-01 00:00:00.000000", "[12345678901234567.89]"),
        ("A", 2, None, None),
        ("a ", 3, None, "[]"),
    ], "'a', 'A' and 'a ' are three keys; decimals in JSON text stay exact"


def test_auto_evolve_adds_a_column_nullable_and_never_changes_one(db, config, caplog):
    db.execute(
        "CREATE TABLE made (k VARCHAR(8) PRIMARY KEY, n INT, at DATETIME(6)) "
        "ENGINE=InnoDB"
    )
    db.execute("INSERT INTO made (k, n) VALUES ('old', 7)")
    cfg = config(auto_evolve=True)
    stage_rows(
        cfg,
        0,
        [
            {"k": "a", "n": 1, "at": None, "tags": [Decimal(1)]},
            {"k": "b", "n": 2**40, "at": None, "tags": None},
        ],
        SCHEMA,
    )
    sink = SinkInstance(cfg)
    sink.recover()
    sink.close()
    ddl = create_table(db)
    assert "`tags` longtext" in ddl and "`n` int(11)" in ddl
    # An INT for the stream's BIGINT changes no value (one too large fails), a
    # VARCHAR(8) key no text (one too long fails): nothing to warn of.
    assert "column n of table made" not in caplog.text
    assert "column k of table made" not in caplog.text
    assert db.rows("SELECT k, n, tags FROM made ORDER BY k") == [
        ("a", 1, "[1.00]"),
        ("old", 7, None),
    ], "a value the old column cannot hold is set aside, not bent"
    assert db.rows("SELECT quarantined FROM wal_sink_ack") == [(1,)]


def test_ddl_runs_once_when_two_sinks_start_at_once(db, config, monkeypatch):
    """Four starts at once, each having found the table missing: one creates it
    (the server counts one CREATE TABLE), the others find it made under the lock."""
    cfg = config(auto_create=True, auto_evolve=True)
    sink = SinkInstance(cfg)
    plans: list[TablePlan] = []
    failures: list[BaseException] = []
    all_found_it_missing = threading.Barrier(4)

    def plan_then_wait(*args):
        plan = table_ddl.plan_table(*args)
        all_found_it_missing.wait(30)
        return plan

    monkeypatch.setattr(target_ddl, "plan_table", plan_then_wait)

    def start() -> None:
        try:
            (plan,) = prepare_targets(sink.engine, cfg, SCHEMA)
            plans.append(plan)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    def creates() -> int:
        return int(db.rows("SHOW GLOBAL STATUS LIKE 'Com_create_table'")[0][1])

    before = creates()
    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = creates() - before
    monkeypatch.undo()
    again = prepare_targets(sink.engine, cfg, SCHEMA)
    sink.close()
    assert failures == []
    assert created == 1, "one CREATE TABLE reached the server"
    assert sorted(p.create is not None for p in plans) == [False, False, False, True]
    assert [p.statements for p in again] == [[]], "nothing left to do: idempotent"


def test_an_alter_waits_for_the_tables_metadata_lock_only_so_long(
    db, config, monkeypatch
):
    """A reader's open transaction holds the table's metadata lock: the ALTER gives
    up after the bounded wait (a transient error the start retries), instead of
    queueing every later reader behind it."""
    db.execute("CREATE TABLE made (k VARCHAR(8) PRIMARY KEY, n BIGINT) ENGINE=InnoDB")
    monkeypatch.setattr(table_ddl, "LOCK_WAIT_SECONDS", 1)
    cfg = config(auto_evolve=True)
    sink = SinkInstance(cfg)
    reader = db.connect()
    try:
        with reader.cursor() as cur:
            cur.execute("START TRANSACTION")
            cur.execute("SELECT * FROM made")
            with pytest.raises(TransientError, match="stayed locked"):
                prepare_targets(sink.engine, cfg, SCHEMA)
        reader.rollback()
        prepare_targets(sink.engine, cfg, SCHEMA)
    finally:
        reader.close()
        sink.close()
    assert "`at` datetime(6)" in create_table(db)


def test_a_key_longer_than_its_column_is_set_aside_row_by_row(db, config):
    cfg = config(auto_create=True)
    stage_rows(
        cfg,
        0,
        [{"k": "x" * 769, "n": 1, "at": None, "tags": None}, {"k": "y", "n": 2}],
        SCHEMA,
    )
    sink = SinkInstance(cfg)
    sink.recover()
    sink.close()
    assert db.rows("SELECT k FROM made") == [("y",)]
    assert db.rows("SELECT quarantined FROM wal_sink_ack") == [(1,)]


@pytest.mark.parametrize(
    "fields, chars",
    [
        ([("k", pa.string()), ("n", pa.int64())], 766),
        (
            [
                ("k", pa.string()),
                ("j", pa.string()),
                ("d", pa.decimal128(38, 0)),
                ("at", pa.timestamp("us", tz="UTC")),
            ],
            380,
        ),
    ],
)
def test_a_compound_key_of_text_and_numbers_is_created_within_innodbs_key_length(
    db, config, fields, chars
):
    """The key's text columns share what its other columns leave of InnoDB's 3072
    bytes: a VARCHAR(768) key column beside a BIGINT failed with 1071 (key too
    long). A key as long as the column allows, of 4-byte characters, lands."""
    schema = pa.schema(fields)
    cfg = config(auto_create=True, key=schema.names)
    longest = "\N{GRINNING FACE}" * chars
    values = {"n": 1, "d": Decimal(10**37), "at": datetime(2001, 1, 1)}
    row = {f.name: longest if f.type == pa.string() else values[f.name] for f in schema}
    stage_rows(cfg, 0, [row], schema)
    sink = SinkInstance(cfg)
    sink.recover()
    sink.close()
    assert f"`k` varchar({chars})" in create_table(db)
    assert db.rows("SELECT CHAR_LENGTH(k), LENGTH(k) FROM made") == [(chars, 4 * chars)]


def test_columns_named_with_a_percent_sign_are_created_and_added_as_named(db, config):
    """The DDL's names were quoted for the driver's formatting ('%' doubled) and
    run as text(), which doubles it again: the sink created `pct%%`, then refused
    its own table (exit 2). --print-ddl shows the names as run."""
    cfg = config(auto_create=True, auto_evolve=True)
    first = pa.schema([("k", pa.string()), ("pct%", pa.int64())])
    later = first.append(pa.field("50%off", pa.string()))
    for batch_id, rows, schema in (
        (0, [{"k": "a", "pct%": 1}], first),
        (1, [{"k": "b", "pct%": 2, "50%off": "x"}], later),
    ):
        stage_rows(cfg, batch_id, rows, schema)
        sink = SinkInstance(cfg)
        (plan,) = prepare_targets(sink.engine, cfg, schema, run=False)
        assert plan.statements[0].startswith(
            "CREATE TABLE made (k VARCHAR(768) CHARACTER SET utf8mb4 COLLATE "
            "utf8mb4_nopad_bin NOT NULL, `pct%` BIGINT NULL"
            if batch_id == 0
            else "ALTER TABLE made ADD COLUMN `50%off` LONGTEXT"
        )
        sink.recover()
        sink.close()
    assert db.rows("SELECT k, `pct%`, `50%off` FROM made ORDER BY k") == [
        ("a", 1, None),
        ("b", 2, "x"),
    ]
