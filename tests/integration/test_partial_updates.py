"""Partial updates (docs/merge.md, "Partial updates"): with
``mysql.ignore_null_updates`` a NULL in an upsert keeps the stored value of an
overwrite column, a new key takes the NULL, and everything else merges as without
it — on every path a chunk can take, and for NOT NULL columns, whose NULLs the
upsert's INSERT cannot carry."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from sqlalchemy import text

from tests.helpers import apply_staged as apply
from tests.helpers import open_reasons
from wal_sink.merge.modes import NULL
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.upsert import (
    build_stored,
    build_update,
    build_upsert,
    build_values_check,
)
from wal_sink.protocol.row_by_row import ByKeyWay, updating
from wal_sink.protocol.sink_instance import SinkInstance

I64 = pa.int64()
STR = pa.string()
SCHEMA = pa.schema(
    [("k", I64), ("label", pa.string()), ("n", I64), ("req", I64), ("v", I64)]
)
TABLE = (
    "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(4), n BIGINT, "
    "req BIGINT NOT NULL, v BIGINT)"
)


def row(k, label=None, n=None, req=None, v=None) -> dict:
    return {"k": k, "label": label, "n": n, "req": req, "v": v}


def stored(db) -> list[tuple]:
    return db.rows("SELECT k, label, n, req, v FROM t ORDER BY k")


@pytest.mark.parametrize("local_infile", [False, True])
def test_a_null_keeps_the_stored_value_and_a_new_key_takes_it(
    db, fresh, config, calls, local_infile
):
    fresh(TABLE)
    cfg = config(
        "t",
        ["k"],
        merge={"n": "add"},
        ignore_null_updates=True,
        local_infile=local_infile,
    )
    apply(cfg, SCHEMA, [row(1, "a", 1, 10, 1), row(2, "b", 2, 20, 1)])
    apply(
        cfg,
        SCHEMA,
        [row(1, None, 5, 11, 2), row(2, "c", None, 21, None), row(3, None, None, 3)],
        first=1,
    )
    assert stored(db) == [
        (1, "a", 6, 11, 2),  # label kept, n added, req and v overwritten
        (2, "c", 2, 21, 1),  # n adds nothing, v kept
        (3, None, None, 3, None),  # a new key takes its NULLs
    ]
    assert sum(calls.values()) == 5, "every chunk took a fast path"


def test_without_it_a_null_overwrites(db, fresh, config):
    fresh(TABLE)
    cfg = config("t", ["k"])
    apply(cfg, SCHEMA, [row(1, "a", 1, 10, 1)], [row(1, None, None, 10, None)])
    assert stored(db) == [(1, None, None, 10, None)]


def test_the_version_guard_still_holds_and_a_null_never_wins(db, fresh, config):
    fresh(TABLE)
    cfg = config("t", ["k"], version_column="v", ignore_null_updates=True)
    apply(
        cfg,
        SCHEMA,
        [row(1, "a", 1, 10, 5)],
        [row(1, "old", 2, 11, 4)],  # older: nothing changes
        [row(1, None, 3, 12, 6)],  # newer: label kept, the rest taken
        [row(1, "new", None, 13, 6)],  # equal version: n kept
    )
    assert stored(db) == [(1, "new", 3, 13, 6)]


def test_a_null_for_a_not_null_column_keeps_it_and_a_new_key_is_set_aside(
    db, fresh, config, calls
):
    """The upsert's INSERT refuses a NULL for a NOT NULL column (MySQL's 1048)
    before it meets the stored row: such a record goes by key, an UPDATE whose
    assignment keeps the stored value; its other values are still judged as the
    upsert would (a text too long is set aside), and a new key takes the NULL,
    which the column refuses."""
    fresh(TABLE)
    cfg = config("t", ["k"], ignore_null_updates=True, local_infile=True)
    apply(cfg, SCHEMA, [row(1, "a", 1, 10), row(2, "b", 2, 20)])
    apply(
        cfg,
        SCHEMA,
        [
            row(1, "c", 3, None),  # kept by key
            row(2, "toolong", 4, None),  # by key, but the label is too long
            row(3, "d", 5, None),  # a new key: NULL into NOT NULL
            row(4, "e", 6, 40),
        ],
        first=1,
    )
    assert stored(db) == [
        (1, "c", 3, 10, None),
        (2, "b", 2, 20, None),
        (4, "e", 6, 40, None),
    ]
    acks = db.rows("SELECT row_count, quarantined FROM wal_sink_ack ORDER BY batch_id")
    assert acks == [(2, 0), (2, 2)]
    too_long, new_key = open_reasons(cfg)
    assert too_long.startswith("MySQL error 1406") and "label" in too_long
    assert new_key.startswith("NULL in NOT NULL column(s) req: a new key takes")
    assert calls["local_infile"] == 2, "the chunk holding such NULLs went row by row"


def test_a_cdc_table_keeps_nulls_and_deletes_as_before(db, fresh, config):
    fresh(TABLE)
    schema = SCHEMA.append(pa.field("op", pa.string()))
    cfg = config(
        "t",
        ["k"],
        version_column="v",
        ignore_null_updates=True,
        cdc={"op_column": "op", "order_by": "v"},
    )
    apply(
        cfg,
        schema,
        [{**row(1, "a", 1, 10, 1), "op": "u"}, {**row(2, "b", 2, 20, 1), "op": "u"}],
        [
            {**row(1, None, None, None, 2), "op": "u"},
            {**row(2, None, None, None, 2), "op": "D"},
        ],
    )
    assert stored(db) == [(1, "a", 1, 10, 2)]


def test_a_timestamp_not_null_keeps_its_value_and_a_new_key_is_set_aside(
    db, fresh, config
):
    """MariaDB stores the current time for a NULL into TIMESTAMP NOT NULL instead
    of refusing it: a kept NULL goes by key, where the UPDATE keeps the stored
    instant, and a new key's is set aside rather than stamped."""
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, at TIMESTAMP NOT NULL, n BIGINT)")
    schema = pa.schema([("k", I64), ("at", pa.timestamp("us", "UTC")), ("n", I64)])
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    cfg = config("t", ["k"], ignore_null_updates=True)
    apply(
        cfg,
        schema,
        [{"k": 1, "at": at, "n": 1}],
        [{"k": 1, "at": None, "n": 2}, {"k": 2, "at": None, "n": 3}],
    )
    assert db.rows("SELECT k, UNIX_TIMESTAMP(at), n FROM t") == [
        (1, int(at.timestamp()), 2)
    ]
    assert open_reasons(cfg) == [
        "NULL in NOT NULL column(s) at: a new key takes its NULLs, which the column "
        "refuses (ignore_null_updates keeps the stored value of a key that has a "
        "row)"
    ]


def test_add_and_keep_columns_not_null_keep_their_values_too(db, fresh, config):
    """Their NULLs keep the stored value without the setting; with it, a NOT NULL
    column's NULL reaches that rule by key instead of MySQL's 1048."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, made BIGINT NOT NULL, "
        "total BIGINT UNSIGNED NOT NULL, label VARCHAR(4))"
    )
    merge = {"made": "keep", "total": "add"}
    cfg = config("t", ["k"], merge=merge, ignore_null_updates=True)
    schema = pa.schema([("k", I64), ("made", I64), ("total", I64), ("label", STR)])
    apply(
        cfg,
        schema,
        [{"k": 1, "made": 7, "total": 5, "label": "a"}],
        [
            {"k": 1, "made": None, "total": None, "label": "b"},
            {"k": 1, "made": 8, "total": -2, "label": None},
            {"k": 1, "made": None, "total": -1, "label": "c"},
        ],
    )
    assert db.rows("SELECT k, made, total, label FROM t") == [(1, 7, 2, "c")]
    assert open_reasons(cfg) == []


def test_a_row_another_writer_inserts_during_the_batch_is_found_by_key(
    db, fresh, config
):
    """The by-key UPDATE is a locking read: a row another writer committed after
    the batch's transaction took its snapshot is updated, its NOT NULL value kept
    (a read of the snapshot would not see it, and the record would be set aside
    as a new key's); a row deleted meanwhile is a new key, set aside."""
    fresh(TABLE)
    db.execute("INSERT INTO t VALUES (3, 'x', 3, 30, NULL)")
    cfg = config("t", ["k"], ignore_null_updates=True)
    columns = ["k", "label", "n", "req", "v"]
    sink = SinkInstance(cfg)
    try:
        table, target = reflect_target(sink.engine, "t"), cfg.mysql.target
        way = ByKeyWay(
            (("req", NULL),),
            build_update(table, columns, target),
            build_values_check(table, columns, target),
            build_stored(table, ["req"], target),
        )
        upsert = build_upsert(table, columns, target)
        bad: list = []
        with sink.engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT COUNT(*) FROM t"))  # the snapshot
            db.execute("INSERT INTO t VALUES (2, 'b', 2, 20, NULL)")
            db.execute("DELETE FROM t WHERE k = 3")
            assert updating(conn, way, upsert, row(2, "c", 4, None), bad) == 1
            assert updating(conn, way, upsert, row(3, "d", 5, None), bad) == 0
    finally:
        sink.close()
    assert stored(db) == [(2, "c", 4, 20, None)]
    assert [e.reason.split(":")[0] for e in bad] == ["NULL in NOT NULL column(s) req"]
