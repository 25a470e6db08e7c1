"""One stream, several tables, one transaction per batch (docs/merge.md, "One
stream, several tables"): rows routed by ``mysql.route_column``, parents before
children in a run of upserts and after them in a run of deletes, strays set aside,
per-table counts and retries. In process, batches staged by pyarrow; the job's runs
are in test_many_tables_job.py."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from tests.helpers import stage_rows
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.ops.quarantine_entries import list_entries
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.ops.replay import plan_replay
from wal_sink.ops.status import collect_status
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.reader import WalReader

SCHEMA = pa.schema(
    [
        ("tbl", pa.string()),
        ("op", pa.string()),
        ("id", pa.int64()),
        ("name", pa.string()),
        ("customer_id", pa.int64()),
        ("amount", pa.decimal128(10, 2)),
        ("seq", pa.int64()),
    ]
)


@pytest.fixture
def shop(db):
    """customers(id, name, total) <- orders(id, customer_id, amount)."""
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET FOREIGN_KEY_CHECKS = 0")
        for t in ("orders", "customers", "wal_sink_ack", "wal_sink_ack_tables"):
            cur.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR(8), "
        "amount DECIMAL(12,2), seq BIGINT) ENGINE=InnoDB"
    )
    db.execute(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, "
        "amount DECIMAL(12,2), seq BIGINT, FOREIGN KEY (customer_id) REFERENCES "
        "customers (id)) ENGINE=InnoDB"
    )
    return lambda: (
        db.rows("SELECT id, name, amount FROM customers ORDER BY id"),
        db.rows("SELECT id, customer_id, amount FROM orders ORDER BY id"),
    )


@pytest.fixture
def config(db, tmp_path):
    def make(cdc: bool = False, **mysql: Any):
        raw: dict[str, Any] = {
            "sink": {"id": "shop"},
            "wal": {"path": str(tmp_path / "wal")},
            "mysql": {
                "url": db.url,
                "route_column": "tbl",
                "tables": {
                    "customers": {"key": ["id"], "merge": {"amount": "add"}},
                    "orders": {
                        "key": ["id"],
                        "columns": ["id", "customer_id", "amount", "seq"],
                    },
                },
                **mysql,
            },
        }
        if cdc:
            raw["cdc"] = {"op_column": "op", "order_by": "seq"}
        return config_from_dict(raw, base_dir=tmp_path)

    return make


def row(tbl, op="I", id=None, name=None, customer_id=None, amount=None, seq=0):
    return {
        "tbl": tbl,
        "op": op,
        "id": id,
        "name": name,
        "customer_id": customer_id,
        "amount": None if amount is None else Decimal(amount),
        "seq": seq,
    }


def apply(config, *batches: list[dict]) -> SinkInstance:
    """Stage ``batches`` (without the op column unless the config has [cdc]) and
    recover them; returns the sink instance (to close)."""
    sink = SinkInstance(config)
    staged = sink.writer.staged_version()
    first = 0 if staged is None else staged + 1
    schema = SCHEMA if config.cdc else pa.schema([f for f in SCHEMA if f.name != "op"])
    for i, rows in enumerate(batches):
        picked = [{c: r[c] for c in schema.names} for r in rows]
        stage_rows(config, first + i, picked, schema)
    sink.recover()
    return sink


def test_ignore_null_updates_is_each_tables_own(shop, config):
    """customers keep their stored values for NULLs, orders take the NULLs (docs/
    merge.md, "Partial updates")."""
    tables = {
        "customers": {"key": ["id"], "ignore_null_updates": True},
        "orders": {"key": ["id"], "columns": ["id", "customer_id", "amount", "seq"]},
    }
    sink = apply(
        config(tables=tables),
        [
            row("customers", id=1, name="ann", amount="5"),
            row("orders", id=10, customer_id=1, amount="5"),
        ],
        [row("customers", id=1), row("orders", id=10, customer_id=1)],
    )
    sink.close()
    assert shop() == ([(1, "ann", Decimal(5))], [(10, 1, None)])


def test_a_tables_except_columns_leave_its_column_alone(db, shop, config):
    """customers never take the stream's amount (another writer keeps it);
    orders do (docs/merge.md, "The target and its columns")."""
    tables = {
        "customers": {"key": ["id"], "except_columns": ["AMOUNT", "customer_id"]},
        "orders": {"key": ["id"], "columns": ["id", "customer_id", "amount", "seq"]},
    }
    db.execute("INSERT INTO customers (id, name, amount) VALUES (1, 'ann', 7)")
    sink = apply(
        config(tables=tables),
        [
            row("customers", id=1, name="bob", amount="5"),
            row("orders", id=10, customer_id=1, amount="5"),
        ],
    )
    sink.close()
    assert shop() == ([(1, "bob", Decimal(7))], [(10, 1, Decimal(5))])


def test_a_forced_replay_names_the_add_columns_by_table(shop, config):
    """replay --force warns that these columns add again (the CLI asks first)."""
    sink = apply(config(), [row("customers", id=1, name="ann", amount="5")])
    try:
        plan = plan_replay(sink, 0, 0, force=True)
    finally:
        sink.close()
    assert plan.changes_again and plan.changing_columns == ("customers.amount",)


def test_a_child_row_before_its_new_parent_lands_with_it(shop, config):
    sink = apply(
        config(),
        [
            row("orders", id=10, customer_id=1, amount="5"),
            row("customers", id=1, name="ann", amount="5"),
        ],
    )
    sink.close()
    assert shop() == ([(1, "ann", Decimal("5.00"))], [(10, 1, Decimal("5.00"))])


def test_a_parent_deleted_with_its_children_goes_after_them(shop, config):
    cfg = config(cdc=True)
    sink = apply(
        cfg,
        [
            row("customers", id=1, name="ann", seq=1),
            row("orders", id=10, customer_id=1, amount="5", seq=2),
            row("customers", op="D", id=1, seq=3),
            row("orders", op="D", id=10, seq=4),
            row("customers", id=2, name="bob", seq=5),
        ],
    )
    status = collect_status(sink)
    sink.close()
    assert shop() == ([(2, "bob", None)], [])
    assert status.tables["customers"]["rows_deleted"] == 1
    assert status.tables["orders"]["rows_deleted"] == 1
    assert status.tables["customers"]["rows_applied"] == 2


def test_rows_whose_route_names_no_table_are_set_aside_and_counted(db, shop, config):
    sink = apply(
        config(),
        [
            row("customers", id=1, name="ann", amount="1"),
            row("refunds", id=7, amount="1"),
            row(None, id=8, amount="1"),
        ],
    )
    listed = list_entries(sink)
    status = collect_status(sink)
    sink.close()
    assert shop()[0] == [(1, "ann", Decimal("1.00"))]
    reasons = sorted(e.entry.reason for e in listed)
    assert reasons == [
        "its route is NULL names no table of mysql.tables",
        "route 'refunds' names no table of mysql.tables",
    ]
    assert {e.table for e in listed} == {""}
    assert status.tables[""]["rows_quarantined"] == 2
    assert db.rows("SELECT quarantined FROM wal_sink_ack") == [(2,)]
    assert db.rows(
        "SELECT table_name, row_count, quarantined FROM wal_sink_ack_tables "
        "ORDER BY table_name"
    ) == [("", 0, 2), ("customers", 1, 0)]


def test_a_child_whose_parent_was_set_aside_is_retried_after_it(db, shop, config):
    """The parent's name is too long, so it is set aside, and its order with it
    (no parent): once the column is widened, one retry applies both, parent first."""
    cfg = config()
    sink = apply(
        cfg,
        [
            row("orders", id=10, customer_id=1, amount="5"),
            row("customers", id=1, name="far too long", amount="5"),
        ],
    )
    assert {e.table for e in list_entries(sink)} == {"customers", "orders"}
    db.execute("ALTER TABLE customers MODIFY name VARCHAR(32)")
    results = run_retry(sink, plan_retry(sink))
    by_table = {e.table: e.state for e in list_entries(sink, table="orders")}
    sink.close()
    assert [(r.applied, r.failed) for r in results] == [(2, {})]
    assert shop() == (
        [(1, "far too long", Decimal("5.00"))],
        [(10, 1, Decimal("5.00"))],
    )
    assert by_table == {"orders": "retried"}


def test_a_long_batch_is_read_again_per_table_and_stays_in_order(
    shop, config, monkeypatch
):
    """A run longer than mysql.max_transaction_rows is not held: each table's rows
    are read again from the WAL, parents first (the orders come first in the
    batch; their customers must be there before them)."""
    reads: list[int] = []
    real = WalReader.read_batch

    def counted(self, batch, chunk_rows):
        reads.append(batch.batch_id)
        return real(self, batch, chunk_rows)

    monkeypatch.setattr(WalReader, "read_batch", counted)
    rows = [row("orders", id=100 + i, customer_id=i, amount="1") for i in range(5)]
    rows += [row("customers", id=i, name=f"c{i}", amount=f"{i}") for i in range(5)]
    sink = apply(config(max_transaction_rows=3), rows)
    sink.close()
    assert reads == [0, 0, 0], "read once, then once per table"
    assert shop() == (
        [(i, f"c{i}", Decimal(i)) for i in range(5)],
        [(100 + i, i, Decimal(1)) for i in range(5)],
    )


@pytest.mark.parametrize(
    "mysql, says",
    [
        ({"table": "customers"}, "mysql.table is a key of the single-table form"),
        ({"route_column": None}, "several tables need both mysql.route_column"),
        ({"table_order": ["orders"]}, "must name each table of mysql.tables once"),
    ],
)
def test_a_config_mixing_the_forms_is_refused_in_one_line(config, mysql, says):
    with pytest.raises(ConfigError) as info:
        config(**mysql)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_stream_column_no_table_takes_is_refused_before_anything(shop, config):
    sink = SinkInstance(config())
    try:
        with pytest.raises(ConfigError, match="stream column 'colour' belongs to no"):
            sink.check_columns([n for n in SCHEMA.names if n != "op"] + ["colour"])
    finally:
        sink.close()


def test_a_foreign_key_cycle_is_refused_unless_the_order_is_given(db, shop, config):
    """customers.first_order -> orders.id -> customers.id: no order puts every
    parent first; mysql.table_order gives one."""
    db.execute(
        "ALTER TABLE customers ADD COLUMN first_order BIGINT, ADD FOREIGN KEY "
        "(first_order) REFERENCES orders (id)"
    )
    with pytest.raises(ConfigError, match="make a cycle"):
        apply(config(), [row("customers", id=1, name="ann", amount="1")])
    sink = apply(
        config(table_order=["customers", "orders"]),
        [row("customers", id=1, name="ann", amount="1")],
    )
    sink.close()
    # the refused start left its batch staged: applied once the order is given
    assert shop()[0] == [(1, "ann", Decimal("2.00"))]


def test_quarantine_export_names_each_entrys_table(shop, config):
    sink = apply(config(), [row("orders", id=10, customer_id=99, amount="1")])
    listed = list_entries(sink, table="orders")
    sink.close()
    assert [e.to_json()["table"] for e in listed] == ["orders"]
    assert json.loads(listed[0].entry.record)["tbl"] == "orders"
