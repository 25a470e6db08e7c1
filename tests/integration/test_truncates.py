"""Truncates (docs/merge.md, "Truncates"): with ``cdc.truncate_values`` a record at
version s removes every row of its table at or below s (or without a version) in
the batch's transaction, and an upsert at or below s stays out afterwards, in
whatever batch it arrives; a truncate without a version or refused by a child row
is set aside and removes nothing (a retry applies it once the child is gone)."""

from __future__ import annotations

import tomllib

import pyarrow as pa
import pytest

from tests.helpers import REPO, open_reasons
from tests.helpers import apply_staged as apply
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.protocol.sink_instance import SinkInstance

I64 = pa.int64()
SCHEMA = pa.schema([("op", pa.string()), ("k", I64), ("n", I64), ("v", I64)])
TABLE = "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, v BIGINT)"
CDC = {"op_column": "op", "order_by": "v", "truncate_values": ["T"]}


def up(k, n, v) -> dict:
    return {"op": "U", "k": k, "n": n, "v": v}


def truncate(v) -> dict:
    return {"op": "T", "k": None, "n": None, "v": v}


def acks(db) -> list[tuple]:
    return db.rows(
        "SELECT batch_id, row_count, deleted_count, skipped_count, quarantined "
        "FROM wal_sink_ack WHERE sink_id = 's1' ORDER BY batch_id"
    )


def test_a_truncate_removes_the_rows_at_or_below_it_and_keeps_older_upserts_out(
    db, fresh, config
):
    fresh(TABLE)
    cfg = config("t", ["k"], cdc=CDC, version_column="v")
    apply(cfg, SCHEMA, [up(1, 10, 1), up(2, 20, 5), up(3, 30, 10)])
    db.execute("INSERT INTO t VALUES (9, 90, NULL)")  # another writer's, no version
    apply(
        cfg,
        SCHEMA,
        # in version order: the upserts before the truncate land and go with it
        [up(7, 70, 2), up(4, 40, 3), truncate(5), up(7, 71, 5), up(5, 50, 6)],
        first=1,
    )
    assert db.rows("SELECT k, n, v FROM t ORDER BY k") == [(3, 30, 10), (5, 50, 6)]
    apply(cfg, SCHEMA, [up(6, 60, 4), up(1, 11, 5), up(8, 80, 7)], first=2)
    assert db.rows("SELECT k, n, v FROM t ORDER BY k") == [
        (3, 30, 10),
        (5, 50, 6),
        (8, 80, 7),
    ]
    assert acks(db) == [(0, 3, 0, 0, 0), (1, 3, 1, 1, 0), (2, 1, 0, 2, 0)]
    assert db.rows(
        "SELECT _wal_table, _wal_sink_id, _wal_version FROM t_tombstones_truncate"
    ) == [("t", "s1", 5)]


def test_an_older_truncate_leaves_the_newer_tombstone(db, fresh, config):
    fresh(TABLE)
    cfg = config("t", ["k"], cdc=CDC, version_column="v")
    apply(cfg, SCHEMA, [up(1, 10, 3), truncate(8)], [up(2, 20, 4), truncate(6)])
    assert db.rows("SELECT k FROM t") == []
    assert db.rows("SELECT _wal_version FROM t_tombstones_truncate") == [(8,)]


def test_a_truncate_without_a_version_is_set_aside(db, fresh, config):
    fresh(TABLE)
    cfg = config("t", ["k"], cdc=CDC, version_column="v")
    apply(cfg, SCHEMA, [up(1, 10, 1), truncate(None), up(2, 20, 2)])
    assert db.rows("SELECT k FROM t ORDER BY k") == [(1,), (2,)]
    assert open_reasons(cfg) == ["a truncate needs a version (v is NULL)"]
    assert acks(db) == [(0, 2, 0, 0, 1)]


def test_a_truncate_a_child_row_refuses_is_set_aside_whole(db, fresh, config):
    fresh(
        TABLE,
        "CREATE TABLE c (id BIGINT PRIMARY KEY, k BIGINT, "
        "FOREIGN KEY (k) REFERENCES t (k))",
    )
    cfg = config("t", ["k"], cdc=CDC, version_column="v")
    apply(cfg, SCHEMA, [up(1, 10, 1), up(2, 20, 2)])
    db.execute("INSERT INTO c VALUES (1, 2)")
    apply(cfg, SCHEMA, [truncate(5), up(3, 30, 3)], first=1)
    assert db.rows("SELECT k FROM t ORDER BY k") == [(1,), (2,), (3,)]
    assert [r.split(":")[0] for r in open_reasons(cfg)] == ["MySQL error 1451"]
    assert db.rows("SELECT * FROM t_tombstones_truncate") == []
    db.execute("DELETE FROM c")  # the child goes: a retry truncates
    sink = SinkInstance(cfg)
    try:
        assert [r.applied for r in run_retry(sink, plan_retry(sink))] == [1]
    finally:
        sink.close()
    assert db.rows("SELECT k FROM t ORDER BY k") == []
    assert db.rows("SELECT _wal_version FROM t_tombstones_truncate") == [(5,)]


def test_debeziums_truncates_go_children_first_and_keep_older_events_out(
    db, fresh, tmp_path
):
    """conf/debezium_shop.toml as shipped (its url and paths aside): op t, which
    Debezium sends without a row, truncates the table its topic names; a run of
    truncates goes children first, as deletes do, so orders' foreign key holds."""
    fresh(
        "CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR(64), seq BIGINT)",
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, "
        "amount DECIMAL(12,2), seq BIGINT, "
        "FOREIGN KEY (customer_id) REFERENCES customers (id))",
    )
    raw = tomllib.loads((REPO / "conf" / "debezium_shop.toml").read_text())
    raw["mysql"]["url"] = db.url
    raw["wal"]["path"] = str(tmp_path / "wal")
    raw["job"]["checkpoint"] = str(tmp_path / "checkpoint")
    cfg = config_from_dict(raw, base_dir=tmp_path)
    schema = pa.schema(
        [("topic", pa.string()), ("op", pa.string()), ("seq", I64), ("id", I64)]
        + [("name", pa.string()), ("customer_id", I64), ("amount", pa.int32())]
    )
    customers, orders = "dbserver1.shop.customers", "dbserver1.shop.orders"

    def event(topic, op, seq, id=None, name=None, customer_id=None, amount=None):
        return dict(
            topic=topic,
            op=op,
            seq=seq,
            id=id,
            name=name,
            customer_id=customer_id,
            amount=amount,
        )

    apply(
        cfg,
        schema,
        [
            event(customers, "c", 1, 1, "ann"),
            event(orders, "c", 2, 10, customer_id=1, amount=5),
        ],
        [
            event(customers, "t", 8),
            event(orders, "t", 9),
            event(customers, "c", 10, 2, "bob"),
        ],
        [event(orders, "c", 3, 11, customer_id=2, amount=7)],  # late: stays out
    )
    assert db.rows("SELECT id, name FROM customers") == [(2, "bob")]
    assert db.rows("SELECT id FROM orders") == []
    assert db.rows(
        "SELECT batch_id, table_name, row_count, deleted_count, skipped_count "
        "FROM wal_sink_ack_tables WHERE table_name <> '' ORDER BY 1, 2"
    ) == [
        (0, "customers", 1, 0, 0),
        (0, "orders", 1, 0, 0),
        (1, "customers", 1, 1, 0),
        (1, "orders", 0, 1, 0),
        (2, "orders", 0, 0, 1),
    ]


def test_a_sink_that_cannot_honour_a_truncate_is_refused_on_its_table(
    db, fresh, config
):
    fresh(TABLE)
    apply(config("t", ["k"], cdc=CDC, version_column="v"), SCHEMA, [truncate(5)])
    plain = {"op_column": "op", "order_by": "v"}
    other = config("t", ["k"], sink="s2", cdc=plain, version_column="v")
    with pytest.raises(ConfigError, match="cannot honour without cdc.truncate_values"):
        apply(other, SCHEMA, [up(1, 10, 4)])
    assert db.rows("SELECT k FROM t") == []
