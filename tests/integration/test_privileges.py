"""The grants docs/security.md gives each feature, held by a real user holding
exactly those (sql/grants.sql, and the feature's lines besides): the feature works,
and what the grants leave out is said in one line."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pytest

from tests.helpers import apply_staged, documented_user, stage_rows
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.mysql.engine import make_engine
from wal_sink.mysql.tables import init_db
from wal_sink.ops.purge import execute_purge, expire_tombstones, plan_purge
from wal_sink.ops.quarantine_entries import list_entries
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.ops.status import collect_status
from wal_sink.protocol.sink_instance import SinkInstance

SCHEMA = pa.schema(
    [("tbl", pa.string()), ("swjg_dm", pa.string()), ("fpzt", pa.string())]
    + [("hjje", pa.decimal128(20, 2)), ("fs", pa.int64())]
)
KEY = ["swjg_dm", "fpzt"]
ADD = {"hjje": "add", "fs": "add"}
ROWS = [
    {"tbl": t, "swjg_dm": f"1110{i}", "fpzt": "0", "hjje": 9, "fs": 1}
    for t in ("kpxxb_hzb", "other_hzb")
    for i in range(40)
]

ONE_TABLE = SCHEMA.remove(0)
ONE_TABLE_ROWS = [{k: v for k, v in r.items() if k != "tbl"} for r in ROWS[:40]]


@pytest.fixture
def tables(db):
    """The demo's target, a copy of it, and the sink's tables, made by the DBA."""
    for t in ("kpxxb_hzb", "other_hzb", "wal_sink_ack", "wal_sink_ack_tables"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.run_sql_file("demo_kpxxb_hzb.sql")
    db.execute("CREATE TABLE other_hzb LIKE kpxxb_hzb")
    db.run_sql_file("wal_sink_tables.sql")


def config(tmp_path, url: str, **mysql: Any):
    return config_from_dict(
        {
            "sink": {"id": "granted"},
            "wal": {"path": str(tmp_path / "wal")},
            "mysql": {"url": url, **mysql},
        }
    )


def landed(db, table: str) -> tuple:
    return db.rows(f"SELECT COUNT(*), SUM(hjje), SUM(fs) FROM {table}")[0]


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_routed_sink_works_with_the_documented_grants(db, tables, tmp_path):
    url = documented_user(
        db,
        "routed",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.other_hzb TO 'sink'@'%'",
    )
    routed = {name: {"key": KEY, "merge": ADD} for name in ("kpxxb_hzb", "other_hzb")}
    cfg = config(tmp_path, url, route_column="tbl", tables=routed)
    apply_staged(cfg, SCHEMA, ROWS, ROWS)
    assert landed(db, "kpxxb_hzb") == landed(db, "other_hzb") == (40, 720, 80)
    assert db.rows("SELECT COUNT(*), SUM(row_count) FROM wal_sink_ack_tables") == [
        (4, 160)
    ]


def test_local_infile_without_temporary_tables_says_so_once_and_lands(
    db, tables, tmp_path, caplog, calls
):
    """The documented grants without CREATE TEMPORARY TABLES: one warning at start,
    naming the grant; the batches land through multi-row INSERTs (before, every
    batch failed with MySQL's 1044 and the job exited 1)."""
    url = documented_user(db, "no_temp")
    cfg = config(
        tmp_path, url, table="kpxxb_hzb", key=KEY, merge=ADD, local_infile=True
    )
    for batch_id in (0, 1):
        stage_rows(cfg, batch_id, ONE_TABLE_ROWS, ONE_TABLE)
    sink = SinkInstance(cfg)
    try:
        sink.start()
        said = [w for w in warnings(caplog) if "local_infile" in w]
        sink.recover()
    finally:
        sink.close()
    assert landed(db, "kpxxb_hzb") == (40, 720, 80)
    assert len(said) == 1 and said == [
        w for w in warnings(caplog) if "local_infile" in w
    ], warnings(caplog)
    assert "CREATE TEMPORARY TABLE refused" in said[0]
    assert "GRANT CREATE TEMPORARY TABLES" in said[0]
    assert calls == {"multi_row": 80, "local_infile": 0}


def test_local_infile_with_temporary_tables_loads_without_a_warning(
    db, tables, tmp_path, caplog, calls
):
    url = documented_user(
        db, "with_temp", "GRANT CREATE TEMPORARY TABLES ON shop.* TO 'sink'@'%'"
    )
    cfg = config(
        tmp_path, url, table="kpxxb_hzb", key=KEY, merge=ADD, local_infile=True
    )
    apply_staged(cfg, ONE_TABLE, ONE_TABLE_ROWS, ONE_TABLE_ROWS)
    assert landed(db, "kpxxb_hzb") == (40, 720, 80)
    assert not [w for w in warnings(caplog) if "local_infile" in w]
    assert calls == {"multi_row": 0, "local_infile": 80}


def test_a_quarantine_retry_with_local_infile_without_temporary_tables_lands(
    db, tables, tmp_path, caplog, calls
):
    """A retry takes no lease and runs no start check: its load table refused
    sends the chunk to multi-row INSERTs, with one warning."""
    url = documented_user(db, "no_temp_retry")
    cfg = config(
        tmp_path, url, table="kpxxb_hzb", key=KEY, merge=ADD, local_infile=True
    )
    wide = [{**r, "fpzt": "wide"} for r in ONE_TABLE_ROWS]
    far_too_wide = [{**r, "fpzt": "far too wide"} for r in ONE_TABLE_ROWS]
    apply_staged(cfg, ONE_TABLE, wide + far_too_wide)
    assert landed(db, "kpxxb_hzb") == (40, 360, 40)
    db.execute("ALTER TABLE kpxxb_hzb MODIFY fpzt VARCHAR(16) NOT NULL")
    caplog.clear()
    sink = SinkInstance(cfg)
    try:
        retried = run_retry(sink, plan_retry(sink))
    finally:
        sink.close()
    assert [r.applied for r in retried] == [40]
    assert landed(db, "kpxxb_hzb") == (80, 720, 80)
    said = [w for w in warnings(caplog) if "local_infile" in w]
    assert len(said) == 1 and "GRANT CREATE TEMPORARY TABLES" in said[0], said


ITEMS = pa.schema(
    [("op", pa.string()), ("k", pa.int64()), ("n", pa.int64()), ("v", pa.int64())]
)


def event(op: str, k: int | None, n: int | None, v: int) -> dict:
    return {"op": op, "k": k, "n": n, "v": v}


def items_config(tmp_path, url: str, cdc: dict, **mysql: Any):
    return config_from_dict(
        {
            "sink": {"id": "items"},
            "wal": {"path": str(tmp_path / "items_wal")},
            "mysql": {"url": url, "table": "items", "key": ["k"], **mysql},
            "cdc": {"op_column": "op", "order_by": "v", **cdc},
        }
    )


@pytest.fixture
def items(db, tables):
    for t in ("items", "items_tombstones", "items_tombstones_truncate", "items_events"):
        db.execute(f"DROP TABLE IF EXISTS {t}")


def test_tombstones_and_truncates_work_with_their_grants(db, items, tmp_path):
    """With CREATE in the grants, the start makes both tables itself."""
    db.execute("CREATE TABLE items (k BIGINT PRIMARY KEY, n BIGINT, v BIGINT)")
    url = documented_user(
        db,
        "cdc_user",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items TO 'sink'@'%'",
        "GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON shop.items_tombstones "
        "TO 'sink'@'%'",
        "GRANT CREATE, SELECT, INSERT, UPDATE ON shop.items_tombstones_truncate "
        "TO 'sink'@'%'",
    )
    cfg = items_config(tmp_path, url, {"truncate_values": ["T"]}, version_column="v")
    apply_staged(
        cfg,
        ITEMS,
        [event("U", 1, 1, 1), event("D", 1, None, 2), event("U", 2, 1, 3)],
        [event("T", None, None, 4), event("U", 3, 1, 5)],
    )
    assert db.rows("SELECT k, n, v FROM items") == [(3, 1, 5)]
    assert db.rows("SELECT k, _wal_version FROM items_tombstones") == [(1, 2)]
    assert db.rows("SELECT _wal_version FROM items_tombstones_truncate") == [(4,)]


def test_purge_works_with_the_sinks_grants(db, items, tmp_path):
    """The acks of purged batches and expired tombstones go, by the grants of a
    sink keeping tombstones."""
    db.execute("CREATE TABLE items (k BIGINT PRIMARY KEY, n BIGINT, v BIGINT)")
    url = documented_user(
        db,
        "purger",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items TO 'sink'@'%'",
        "GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON shop.items_tombstones "
        "TO 'sink'@'%'",
    )
    cfg = items_config(
        tmp_path, url, {"tombstone_retention": "0 seconds"}, version_column="v"
    )
    apply_staged(cfg, ITEMS, [event("U", 1, 1, 1)], [event("D", 1, None, 2)])
    sink = SinkInstance(cfg)
    try:
        execute_purge(sink, plan_purge(sink, before=1))
        expired = expire_tombstones(sink)
    finally:
        sink.close()
    assert db.rows("SELECT batch_id FROM wal_sink_ack WHERE sink_id = 'items'") == [
        (1,)
    ]
    assert expired == 1 and db.rows("SELECT * FROM items_tombstones") == []


def test_a_history_works_with_its_grants(db, items, tmp_path):
    db.execute(
        "CREATE TABLE items (k BIGINT NOT NULL, n BIGINT, v BIGINT, __START_AT "
        "BIGINT NOT NULL, __END_AT BIGINT, PRIMARY KEY (k, __START_AT))"
    )
    url = documented_user(
        db,
        "history_user",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items TO 'sink'@'%'",
        "GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON shop.items_events "
        "TO 'sink'@'%'",
    )
    cfg = items_config(tmp_path, url, {}, version_column="v", stored_as_scd_type=2)
    apply_staged(cfg, ITEMS, [event("U", 1, 1, 1), event("U", 1, 3, 3)])
    apply_staged(cfg, ITEMS, [event("U", 1, 2, 2)], first=1)
    assert db.rows("SELECT n, __START_AT, __END_AT FROM items ORDER BY 2") == [
        (1, 1, 2),
        (2, 2, 3),
        (3, 3, None),
    ]


def test_an_events_table_this_user_may_not_alter_names_the_statement(
    db, items, tmp_path
):
    """A column the DBA added to the history must reach its events table: without
    ALTER there, the start says what to run, in one line; once run, the next start
    fills it and says the statement that marks it filled; once run, it starts."""
    db.execute(
        "CREATE TABLE items (k BIGINT NOT NULL, n BIGINT, v BIGINT, __START_AT "
        "BIGINT NOT NULL, __END_AT BIGINT, PRIMARY KEY (k, __START_AT))"
    )
    url = documented_user(
        db,
        "history_no_alter",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items TO 'sink'@'%'",
        "GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON shop.items_events "
        "TO 'sink'@'%'",
    )
    cfg = items_config(tmp_path, url, {}, version_column="v", stored_as_scd_type=2)
    apply_staged(cfg, ITEMS, [event("U", 1, 1, 1)])
    db.execute("ALTER TABLE items ADD COLUMN note VARCHAR(8) NULL")
    with pytest.raises(ConfigError) as refused:
        apply_staged(cfg, ITEMS, [event("U", 1, 2, 2)], first=1)
    said = str(refused.value)
    assert "\n" not in said and "may not ALTER" in said
    db.execute(said.split("run, as a user who may, ")[1])
    with pytest.raises(ConfigError, match="note marked filled") as refused:
        apply_staged(cfg, ITEMS)
    db.execute(str(refused.value).split("run, as a user who may, ")[1])
    apply_staged(cfg, ITEMS)
    assert db.rows("SELECT n, __START_AT, __END_AT FROM items ORDER BY 2") == [
        (1, 1, 2),
        (2, 2, None),
    ]


def test_auto_create_and_auto_evolve_work_with_their_grants(db, tables, tmp_path):
    """CREATE with the row grants, given before the table exists; then ALTER."""
    db.execute("DROP TABLE IF EXISTS made")
    url = documented_user(
        db,
        "ddl_user",
        "GRANT CREATE, SELECT, INSERT, UPDATE ON shop.made TO 'sink'@'%'",
    )
    made = {"table": "made", "key": ["k"], "auto_create": True}
    apply_staged(
        config(tmp_path, url, **made), ITEMS.remove(0), [{"k": 1, "n": 1, "v": 1}]
    )
    db.execute(f"GRANT ALTER ON {db.name}.made TO 'ddl_user'@'127.0.0.1'")
    wider = ITEMS.remove(0).append(pa.field("note", pa.string()))
    evolving = config(tmp_path, url, **made, auto_evolve=True)
    apply_staged(evolving, wider, [{"k": 2, "n": 2, "v": 2, "note": "x"}], first=1)
    assert db.rows("SELECT k, n, v, note FROM made ORDER BY k") == [
        (1, 1, 1, None),
        (2, 2, 2, "x"),
    ]


def test_init_db_makes_the_sinks_tables_with_create_and_index(db, tables, tmp_path):
    """Grants given while the tables existed outlive them: init-db makes them
    again with CREATE on each and INDEX on the outbox."""
    sink_tables = (
        "wal_sink_ack",
        "wal_sink_lease",
        "wal_sink_outbox",
        "wal_sink_retry",
    )
    url = documented_user(
        db,
        "init_user",
        *(f"GRANT CREATE ON shop.{t} TO 'sink'@'%'" for t in sink_tables),
        "GRANT INDEX ON shop.wal_sink_outbox TO 'sink'@'%'",
    )
    for t in sink_tables:
        db.execute(f"DROP TABLE {t}")
    cfg = config(tmp_path, url, table="kpxxb_hzb", key=KEY, merge=ADD)
    apply_staged(cfg, ONE_TABLE, ONE_TABLE_ROWS)
    assert landed(db, "kpxxb_hzb") == (40, 360, 40)


def test_read_only_commands_need_only_select_on_the_sinks_tables(db, tables, tmp_path):
    apply_staged(
        config(tmp_path, db.url, table="kpxxb_hzb", key=KEY, merge=ADD),
        ONE_TABLE,
        ONE_TABLE_ROWS,
    )
    url = documented_user(
        db,
        "reader",
        *(
            f"GRANT SELECT ON shop.{t} TO 'sink'@'%'"
            for t in (
                "wal_sink_ack",
                "wal_sink_lease",
                "wal_sink_outbox",
                "wal_sink_retry",
            )
        ),
        documented=False,
    )
    sink = SinkInstance(config(tmp_path, url, table="kpxxb_hzb", key=KEY, merge=ADD))
    try:
        status = collect_status(sink)
        entries = list_entries(sink)
    finally:
        sink.close()
    assert (status.acked_batches, status.rows_applied, entries) == (1, 40, [])


def test_init_db_without_a_grant_on_the_retry_table_says_which(db, tables, tmp_path):
    """The table exists but this user holds nothing on it (so it cannot see it):
    one line naming both ways out, not only the upgrade script."""
    url = documented_user(db, "no_retry_grant")
    account = "'no_retry_grant'@'127.0.0.1'"
    db.execute(f"REVOKE ALL PRIVILEGES ON {db.name}.wal_sink_retry FROM {account}")
    cfg = config(tmp_path, url, table="kpxxb_hzb", key=KEY, merge=ADD)
    engine = make_engine(cfg.mysql)
    try:
        with pytest.raises(ConfigError, match="holds no grant on it") as refused:
            init_db(engine, cfg.mysql)
    finally:
        engine.dispose()
    assert "sql/grants.sql" in str(refused.value) and "\n" not in str(refused.value)
