"""Column names that differ only in case (docs/merge.md, "The target and its
columns"): MySQL's column names ignore case, and so does the sink, for the stream's,
the config's and the table's names alike — at the start check, in routing, in the
upsert and delete, for merge policies, the version column and the CDC op and order
columns. Driven in process, batches staged by pyarrow."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tests.helpers import settle, stage_rows, write_config
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.datasource import WalSinkDataSource
from wal_sink.spark.sink import WalSink

CDC = {"op_column": "op", "order_by": "v", "delete_values": ["D"]}


@pytest.fixture
def config(db, tmp_path):
    def make(cdc: dict | None = None, **mysql: Any):
        raw: dict[str, Any] = {
            "sink": {"id": "cased"},
            "wal": {"path": str(tmp_path / "wal")},
            "mysql": {"url": db.url, **mysql},
        }
        if cdc:
            raw["cdc"] = cdc
        return config_from_dict(raw, base_dir=tmp_path)

    return make


@pytest.fixture
def fresh(db):
    def create(*ddl: str) -> None:
        names = [r[0] for r in db.rows("SHOW TABLES")]
        for name in names:
            db.execute(f"DROP TABLE `{name}`")
        for statement in ddl:
            db.execute(statement)

    return create


def started_and_applied(cfg, schema: pa.Schema, *batches: list[dict]) -> None:
    """Start as the job does (the stream's columns known), then stage ``batches``
    and apply them."""
    sink = SinkInstance(cfg)
    try:
        sink.expect_columns(schema.names)
        sink.check_columns(schema.names)
        sink.check_types(schema)
        sink.start()
        for batch_id, rows in enumerate(batches):
            stage_rows(cfg, batch_id, rows, schema)
        sink.recover()
    finally:
        sink.close()


def test_a_column_spelt_apart_by_stream_config_and_table_is_one_column(
    db, fresh, config
):
    """Table `Amount`, stream `amount`, config `AMOUNT` (add): the start passed,
    the batch staged, and then it failed at every start (exit 1); the policy and
    the version guard apply whoever spells the name."""
    fresh(
        "CREATE TABLE t (ID BIGINT PRIMARY KEY, Amount DECIMAL(12,2), "
        "Note VARCHAR(8), Seq BIGINT) ENGINE=InnoDB"
    )
    cfg = config(table="t", key=["id"], merge={"AMOUNT": "add"}, version_column="SEQ")
    schema = pa.schema(
        [
            ("Id", pa.int64()),
            ("amount", pa.decimal128(12, 2)),
            ("NOTE", pa.string()),
            ("seq", pa.int64()),
        ]
    )

    def row(amount: str, note: str, seq: int) -> dict:
        return {"Id": 1, "amount": Decimal(amount), "NOTE": note, "seq": seq}

    started_and_applied(
        cfg,
        schema,
        [row("5.00", "a", 2)],
        [row("2.50", "older", 1)],  # adds; the older note and version stay out
        [row("1.00", "new", 3)],
    )
    assert db.rows("SELECT ID, Amount, Note, Seq FROM t") == [
        (1, Decimal("8.50"), "new", 3)
    ]


def test_cdc_op_order_and_version_columns_spelt_apart_delete_and_guard(
    db, fresh, config
):
    """Stream `OP` and `V`, config `op` and `v`, table `V`: deletes delete, leave
    their tombstone, and an older upsert after them is skipped as stale."""
    fresh("CREATE TABLE items (K BIGINT PRIMARY KEY, Label VARCHAR(8), V BIGINT)")
    cfg = config(cdc=CDC, table="items", key=["k"], version_column="v")
    schema = pa.schema(
        [
            ("OP", pa.string()),
            ("k", pa.int64()),
            ("LABEL", pa.string()),
            ("V", pa.int64()),
        ]
    )
    rows = [
        {"OP": "I", "k": 1, "LABEL": "a", "V": 1},
        {"OP": "I", "k": 2, "LABEL": "b", "V": 1},
        {"OP": "D", "k": 1, "LABEL": None, "V": 5},
        {"OP": "I", "k": 1, "LABEL": "stale", "V": 3},
    ]
    started_and_applied(cfg, schema, rows)
    assert db.rows("SELECT K, Label, V FROM items") == [(2, "b", 1)]
    assert db.rows("SELECT k, _wal_version FROM items_tombstones") == [(1, 5)]
    assert db.rows("SELECT deleted_count, skipped_count FROM wal_sink_ack") == [(1, 1)]


def test_routed_tables_take_the_stream_columns_they_have_whatever_the_case(
    db, fresh, config
):
    fresh(
        "CREATE TABLE a (Id BIGINT PRIMARY KEY, Name VARCHAR(8)) ENGINE=InnoDB",
        "CREATE TABLE b (id BIGINT PRIMARY KEY, total BIGINT) ENGINE=InnoDB",
    )
    cfg = config(
        route_column="tbl",
        tables={
            "a": {"key": ["ID"], "columns": ["id", "NAME"]},
            "b": {"key": ["Id"], "merge": {"Total": "add"}},
        },
    )
    schema = pa.schema(
        [
            ("TBL", pa.string()),
            ("ID", pa.int64()),
            ("name", pa.string()),
            ("TOTAL", pa.int64()),
        ]
    )
    rows = [
        {"TBL": "a", "ID": 1, "name": "x", "TOTAL": None},
        {"TBL": "b", "ID": 1, "name": None, "TOTAL": 2},
        {"TBL": "b", "ID": 1, "name": None, "TOTAL": 3},
    ]
    started_and_applied(cfg, schema, rows)
    assert db.rows("SELECT Id, Name FROM a") == [(1, "x")]
    assert db.rows("SELECT id, total FROM b") == [(1, 5)]


def test_two_stream_columns_equal_but_for_case_are_refused_at_start(db, fresh, config):
    """Spark with caseSensitive=true can hold `amount` and `AMOUNT`; both would
    write the table's one column."""
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, amount BIGINT) ENGINE=InnoDB")
    cfg = config(table="t", key=["k"])
    schema = pa.schema(
        [("k", pa.int64()), ("amount", pa.int64()), ("AMOUNT", pa.int64())]
    )
    sink = SinkInstance(cfg)
    try:
        with pytest.raises(ConfigError) as info:
            sink.check_columns(schema.names)
    finally:
        sink.close()
    assert str(info.value) == (
        "stream columns 'amount' and 'AMOUNT' are one column of table t (MySQL's "
        "column names ignore case): leave one of them out of the stream ([transform])"
    )


def test_a_table_made_for_a_key_spelt_apart_is_keyed_by_its_column(db, fresh, config):
    """Config `K`, stream `k`: auto_create made `k` a nullable LONGTEXT, not the
    key, and the PRIMARY KEY on it failed."""
    fresh()
    cfg = config(table="made", key=["K"], auto_create=True)
    schema = pa.schema([("k", pa.string()), ("n", pa.int64())])
    sink = SinkInstance(cfg)
    try:
        sink.prepare_tables(schema)
    finally:
        sink.close()
    started_and_applied(cfg, schema, [{"k": "a", "n": 1}])
    assert db.rows("SELECT k, n FROM made") == [("a", 1)]
    assert "PRIMARY KEY (`k`)" in db.rows("SHOW CREATE TABLE made")[0][1]


def test_cdc_order_by_spelt_apart_orders_what_is_staged(spark, db, fresh, config):
    """Under spark.sql.caseSensitive the stream's `V` is not `v` to Spark: staging
    ordered by the config's `v` and failed; it orders by the stream's column. The
    data source took the config's spelling for a column the stream lacks."""
    fresh("CREATE TABLE items (k BIGINT PRIMARY KEY, label VARCHAR(8), v BIGINT)")
    cfg = config(cdc=CDC, table="items", key=["k"], version_column="v")
    rows = [("I", 1, "b", 2), ("D", 1, None, 3), ("I", 1, "a", 1)]
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        df = spark.createDataFrame(rows, "op STRING, k BIGINT, label STRING, V BIGINT")
        sink = WalSink(cfg)
        try:
            sink.foreach_batch(df, 0)
            settle(sink)
        finally:
            sink.close()
    finally:
        spark.conf.unset("spark.sql.caseSensitive")
    assert db.rows("SELECT k FROM items") == []
    assert db.rows("SELECT k, _wal_version FROM items_tombstones") == [(1, 3)]
    path = write_config(
        Path(cfg.wal_path).with_name("cased.toml"),
        db,
        table="items",
        mysql='version_column = "v"',
        sections='[cdc]\nop_column = "op"\norder_by = "v"',
    )
    schema = StructType(
        [StructField("k", LongType()), StructField("op", StringType())]
        + [StructField("V", LongType())]
    )
    writer = WalSinkDataSource({"config": str(path)}).streamWriter(schema, False)
    assert writer.config.cdc.order_by == "V"
