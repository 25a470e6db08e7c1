"""Tombstones belong to the target (docs/merge.md, "Where tombstones live"): every
sink with [cdc] and a version column on a table honours every sink's deletes, a
sink that cannot honour them is refused, a delete MySQL refuses leaves none, and the
table follows the target's column types. Driven in process, batches staged by
pyarrow."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tests.helpers import short_lock_waits, stage_rows
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.ops.purge import expire_tombstones
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.protocol.sink_instance import SinkInstance

CDC = {"op_column": "op", "order_by": "v", "delete_values": ["D"]}
SCHEMA = pa.schema(
    [("op", pa.string()), ("k", pa.int64()), ("label", pa.string()), ("v", pa.int64())]
)


@pytest.fixture
def items(db):
    """A fresh `items` table (and a child table referencing it); returns a reader
    of {k: (label, v)}."""
    side = ("items_tombstones", "items_tombstones_truncate", "deleted")
    for t in ("child", "items", *side, "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE items (k BIGINT PRIMARY KEY, label VARCHAR(8), v BIGINT) "
        "ENGINE=InnoDB"
    )
    db.execute(
        "CREATE TABLE child (id INT PRIMARY KEY, k BIGINT, "
        "FOREIGN KEY (k) REFERENCES items (k)) ENGINE=InnoDB"
    )
    return lambda: {r[0]: r[1:] for r in db.rows("SELECT k, label, v FROM items")}


@pytest.fixture
def config(db, tmp_path):
    def make(sink: str, cdc: dict | None = CDC, **mysql: Any):
        raw: dict[str, Any] = {
            "sink": {"id": sink},
            "wal": {"path": str(tmp_path / f"wal_{sink}")},
            "mysql": {
                "url": db.url,
                "table": "items",
                "key": ["k"],
                "version_column": "v",
                **mysql,
            },
        }
        if cdc:
            raw["cdc"] = cdc
        return config_from_dict(raw, base_dir=tmp_path)

    return make


def ops(*rows: tuple) -> list[dict]:
    return [dict(zip(("op", "k", "label", "v"), r)) for r in rows]


def apply(config, *batches: list[dict]) -> None:
    """Stage ``batches`` after what the sink staged already, and recover them."""
    sink = SinkInstance(config)
    try:
        staged = sink.writer.staged_version()
        first = 0 if staged is None else staged + 1
        for i, rows in enumerate(batches):
            stage_rows(config, first + i, rows, SCHEMA)
        sink.recover()
    finally:
        sink.close()


def test_a_backfill_sink_honours_the_live_sinks_deletes(items, config):
    """Live CDC deletes key 1 at v10; a backfill, another sink on the same table,
    later sends v7: stale, the row stays deleted. At equal versions the delete
    wins too."""
    apply(config("live"), ops(("I", 1, "a", 5), ("D", 1, None, 10)))
    apply(config("backfill"), ops(("I", 1, "old", 7), ("I", 1, "same", 10)))
    assert items() == {}
    apply(config("backfill"), ops(("I", 1, "new", 11)))
    assert items() == {1: ("new", 11)}


def test_a_sink_that_cannot_honour_tombstones_is_refused(db, items, config):
    apply(config("live"), ops(("D", 1, None, 10)))
    for plain in (config("backfill", cdc=None), config("nov", version_column=None)):
        sink = SinkInstance(plain)
        with pytest.raises(ConfigError) as info:
            sink.start()
        sink.close()
        said = str(info.value)
        assert "guarded by tombstones (table items_tombstones)" in said
        assert "\n" not in said


def test_a_second_tombstone_table_for_one_target_is_refused(items, config):
    apply(config("live"), ops(("D", 1, None, 10)))
    sink = SinkInstance(config("other", tombstone_table="deleted"))
    with pytest.raises(ConfigError, match='tombstone_table = "items_tombstones"'):
        sink.start()
    sink.close()


def test_a_tombstone_table_of_0_4_is_migrated_keeping_each_keys_newest(
    db, items, config
):
    db.execute(
        "CREATE TABLE items_tombstones (_wal_sink_id VARCHAR(128) NOT NULL, "
        "_wal_deleted_at DATETIME(6) NOT NULL, k BIGINT NOT NULL, _wal_version "
        "BIGINT, PRIMARY KEY (_wal_sink_id, k), KEY wal_sink_expiry (_wal_sink_id, "
        "_wal_deleted_at)) ENGINE=InnoDB"
    )
    db.execute(
        "INSERT INTO items_tombstones VALUES ('live', NOW(6), 1, 5), "
        "('backfill', NOW(6), 1, 9), ('live', NOW(6), 2, 3)"
    )
    apply(config("live"), ops(("I", 1, "x", 8), ("I", 2, "y", 4)))
    assert items() == {2: ("y", 4)}, "key 1's newest delete (9, another sink's) wins"
    assert db.rows(
        "SELECT _wal_sink_id, k, _wal_version FROM items_tombstones ORDER BY k"
    ) == [("backfill", 1, 9), ("live", 2, 3)]
    [(comment,)] = db.rows(
        "SELECT TABLE_COMMENT FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'items_tombstones'"
    )
    assert comment == "wal_sink tombstones of items"


def test_the_tombstone_table_follows_the_targets_key_type(db, items, config):
    """A key widened after the tombstone table was made is widened there too: a
    tombstone of a key past INT is kept and matched."""
    db.execute("DROP TABLE child")
    db.execute("ALTER TABLE items MODIFY k INT")
    apply(config("live"), ops(("D", 1, None, 1)))
    db.execute("ALTER TABLE items MODIFY k BIGINT")
    big = 5_000_000_000
    apply(config("live"), ops(("D", big, None, 10)))
    apply(config("live"), ops(("I", big, "back", 7)))
    assert items() == {}
    assert db.rows("SELECT k FROM items_tombstones ORDER BY k") == [(1,), (big,)]


def test_a_timestamp_key_gets_its_tombstone_table_on_an_old_default_server(
    db, tmp_path
):
    """explicit_defaults_for_timestamp OFF (older servers' default): a TIMESTAMP
    NOT NULL key column copied into the tombstone table must not take an implicit
    default the server then refuses (1067). Found by the model fuzzer."""
    for t in ("ts_items", "ts_items_tombstones", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE ts_items (a INT NOT NULL, ts TIMESTAMP(6) NOT NULL, "
        "v BIGINT, PRIMARY KEY (a, ts)) ENGINE=InnoDB"
    )
    raw = {
        "sink": {"id": "ts"},
        "wal": {"path": str(tmp_path / "wal")},
        "mysql": {
            "url": db.url,
            "table": "ts_items",
            "key": ["a", "ts"],
            "version_column": "v",
        },
        "cdc": CDC,
    }
    db.execute("SET GLOBAL explicit_defaults_for_timestamp = OFF")
    try:
        sink = SinkInstance(config_from_dict(raw, base_dir=tmp_path))
        try:
            sink.start()
        finally:
            sink.close()
    finally:
        db.execute("SET GLOBAL explicit_defaults_for_timestamp = ON")
    assert db.rows(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
        "DATABASE() AND TABLE_NAME = 'ts_items_tombstones' ORDER BY 1"
    )[:2] == [("a",), ("ts",)]


def test_a_refused_delete_leaves_no_tombstone(db, items, config):
    """A delete a child row refuses (1451) is set aside; it leaves no tombstone,
    and an upsert after it in the same batch is judged without it."""
    apply(config("live"), ops(("I", 1, "a", 3)))
    db.execute("INSERT INTO child VALUES (1, 1)")
    apply(config("live"), ops(("D", 1, None, 5), ("I", 1, "b", 4)))
    assert items() == {1: ("b", 4)}
    assert db.rows("SELECT COUNT(*) FROM items_tombstones") == [(0,)]
    assert db.rows("SELECT quarantined, skipped_count FROM wal_sink_ack") == [
        (0, 0),
        (1, 0),
    ]
    apply(config("live"), ops(("I", 1, "c", 2)))
    assert items() == {1: ("b", 4)}, "the version guard, not a tombstone, keeps v4"
    assert db.rows("SELECT MAX(skipped_count) FROM wal_sink_ack") == [(0,)]


def versioned(db, tmp_path, name: str, columns: str, values: str):
    """A fresh table ``name`` (``columns``: key k, version v) holding ``values``, and
    the config of a CDC sink of its own on it."""
    for t in (name, f"{name}_tombstones"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(f"CREATE TABLE {name} ({columns}) ENGINE=InnoDB")
    db.execute(f"INSERT INTO {name} VALUES {values}")
    mysql = {"url": db.url, "table": name, "key": ["k"], "version_column": "v"}
    return config_from_dict(
        {
            "sink": {"id": name},
            "wal": {"path": str(tmp_path / f"wal_{name}")},
            "mysql": mysql,
            "cdc": CDC,
        }
    )


def recovered(db, cfg, schema: pa.Schema, rows: list[dict]) -> list[tuple]:
    """Stage ``rows`` as batch 0 and recover it; its (deleted, quarantined) counts."""
    stage_rows(cfg, 0, rows, schema)
    sink = SinkInstance(cfg)
    try:
        sink.recover()
    finally:
        sink.close()
    return db.rows(
        "SELECT deleted_count, quarantined FROM wal_sink_ack WHERE sink_id = %s",
        (cfg.sink.id,),
    )


def test_a_nan_version_on_a_delete_is_set_aside(db, tmp_path):
    cfg = versioned(db, tmp_path, "fl", "k BIGINT PRIMARY KEY, v DOUBLE", "(1,1),(2,1)")
    schema = pa.schema([("op", pa.string()), ("k", pa.int64()), ("v", pa.float64())])
    rows = [{"op": "D", "k": 1, "v": float("nan")}, {"op": "D", "k": 2, "v": 5.0}]
    assert recovered(db, cfg, schema, rows) == [(1, 1)]
    assert db.rows("SELECT k FROM fl") == [(1,)]


def test_a_delete_whose_version_timestamp_cannot_hold_is_set_aside(db, tmp_path):
    """A TIMESTAMP ends in 2038; the probe reads it as DATETIME (as the session sees
    it), which holds 2040 without a warning, so such a delete's tombstone failed
    (1292) and the batch with it, at every start (found by the reference model's
    fuzzer). It is set aside, as an upsert of that version is."""
    cfg = versioned(
        db,
        tmp_path,
        "ts",
        "k BIGINT PRIMARY KEY, v TIMESTAMP(6) NOT NULL",
        "(1, '2001-01-01'), (2, '2001-01-01')",
    )
    zoned = pa.timestamp("us", tz="UTC")
    schema = pa.schema([("op", pa.string()), ("k", pa.int64()), ("v", zoned)])
    late, fine = (pa.scalar(t * 1_000_000, zoned).as_py() for t in (2.2e9, 1.1e9))
    rows = [
        {"op": "D", "k": 1, "v": late},
        {"op": "D", "k": 2, "v": fine},
        {"op": "I", "k": 3, "v": late},
    ]
    assert recovered(db, cfg, schema, rows) == [(1, 2)]
    assert db.rows("SELECT k FROM ts") == [(1,)]
    assert db.rows("SELECT k FROM ts_tombstones") == [(2,)]


def test_an_expired_tombstone_stays_while_an_upsert_of_its_key_is_quarantined(
    db, items, config
):
    """An upsert set aside before its key's delete: expiring the delete's tombstone
    would let a retry bring the row back. Purge keeps it; the retry is stale."""
    cfg = config("live")
    apply(cfg, ops(("I", 1, "far too long", 3), ("D", 1, None, 5)))
    db.execute("UPDATE items_tombstones SET _wal_deleted_at = '2000-01-01'")
    db.execute("ALTER TABLE items MODIFY label VARCHAR(16)")
    sink = SinkInstance(cfg)
    try:
        assert expire_tombstones(sink) == 0
        assert db.rows("SELECT k FROM items_tombstones") == [(1,)]
        results = run_retry(sink, plan_retry(sink))
    finally:
        sink.close()
    assert [(r.applied, r.stale) for r in results] == [(1, 1)]
    assert items() == {}


def test_an_open_upsert_with_a_null_key_keeps_no_tombstone_from_expiring(
    db, items, config
):
    """A record with a NULL key is set aside and matches no tombstone. Kept in the
    purge's NOT IN list, its NULL made the condition unknown for every row, so no
    tombstone of the table ever expired while it was open (found by the reference
    model's fuzzer)."""
    cfg = config("live")
    apply(cfg, ops(("I", None, "no key", 3), ("D", 1, None, 5)))
    db.execute("UPDATE items_tombstones SET _wal_deleted_at = '2000-01-01'")
    sink = SinkInstance(cfg)
    try:
        assert expire_tombstones(sink) == 1
    finally:
        sink.close()
    assert db.rows("SELECT k FROM items_tombstones") == []


def test_an_open_upsert_keeps_its_tombstone_whatever_the_configs_spelling(
    db, items, config
):
    """The quarantined record holds the stream's names (k), the config says K:
    the key is still found, and its tombstone stays (found by the fuzzer)."""
    cfg = config("live", key=["K"])
    apply(cfg, ops(("I", 1, "far too long", 3), ("D", 1, None, 5)))
    db.execute("UPDATE items_tombstones SET _wal_deleted_at = '2000-01-01'")
    sink = SinkInstance(cfg)
    try:
        assert expire_tombstones(sink) == 0
    finally:
        sink.close()
    assert db.rows("SELECT k FROM items_tombstones") == [(1,)]


def test_a_quarantined_truncate_keeps_no_tombstone_from_expiring(db, items, config):
    """A truncate's key is not read: set aside (no version), it is no open upsert
    of its key (found by the fuzzer)."""
    cfg = config("live", cdc={**CDC, "truncate_values": ["T"]})
    apply(cfg, ops(("D", 1, None, 5), ("T", 1, None, None)))
    db.execute("UPDATE items_tombstones SET _wal_deleted_at = '2000-01-01'")
    sink = SinkInstance(cfg)
    try:
        assert expire_tombstones(sink) == 1
    finally:
        sink.close()


def test_a_stale_tombstone_table_is_not_altered_inside_a_batch(db, items, config):
    """A batch only reads and writes the tombstone table its start made. One whose
    comment went stale after the start was ALTERed on another connection inside
    the batch, where a reader of the table (or the batch's own transaction) held
    that ALTER for lock_wait_timeout, a day: the next start brings it up to date."""
    cfg = config("live")
    with short_lock_waits(db):
        sink = SinkInstance(cfg)
        try:
            sink.start()
            db.execute("ALTER TABLE items_tombstones COMMENT = ''")
            stage_rows(cfg, 0, ops(("D", 1, None, 10), ("I", 2, "b", 3)), SCHEMA)
            with db.connect() as reader, reader.cursor() as cur:
                cur.execute("START TRANSACTION")
                cur.execute("SELECT COUNT(*) FROM items_tombstones")
                sink.recover()
                reader.rollback()
        finally:
            sink.close()
    assert items() == {2: ("b", 3)}
    assert tombstone_comments(db) == {"items_tombstones": ""}
    apply(cfg)
    assert tombstone_comments(db) == {
        "items_tombstones": "wal_sink tombstones of items"
    }


def tombstone_comments(db) -> dict[str, str]:
    """The comments of the tombstone tables these tests make, by table."""
    return dict(
        db.rows(
            "SELECT TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN "
            "('items_tombstones', 'orders_tombstones', 'tomb')"
        )
    )


@pytest.fixture
def orders(db):
    """A second table, `orders`, shaped as `items`."""
    for t in ("orders", "orders_tombstones", "tomb"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE orders (k BIGINT PRIMARY KEY, label VARCHAR(8), v BIGINT) "
        "ENGINE=InnoDB"
    )
    return lambda: {r[0]: r[1:] for r in db.rows("SELECT k, label, v FROM orders")}


def test_a_tombstone_table_of_another_target_is_refused_and_left_alone(
    db, items, orders, config
):
    """Two sinks on two tables, one tombstone table: a new order 6 was skipped as
    stale because item 6 had been deleted, and each start renamed the table's
    target in its comment."""
    apply(config("items", tombstone_table="tomb"), ops(("D", 6, None, 10)))
    sink = SinkInstance(config("orders", table="orders", tombstone_table="tomb"))
    with pytest.raises(ConfigError) as info:
        sink.start()
    sink.close()
    said = str(info.value)
    assert "table tomb holds the tombstones of table items" in said
    assert "set mysql.tombstone_table to another name for table orders" in said
    assert "\n" not in said
    assert tombstone_comments(db) == {"tomb": "wal_sink tombstones of items"}


def test_one_stream_into_two_tables_of_one_tombstone_table_is_refused_at_start(
    db, items, orders, tmp_path
):
    """Two tables of one config sharing a tombstone table: each start wrote one
    target into the table's comment, and the batch then ALTERed it back for the
    other inside its transaction, which held the table's lock: the batch waited
    for lock_wait_timeout, a day."""
    tables = {
        "items": {"key": ["k"], "version_column": "v", "tombstone_table": "tomb"},
        "orders": {"key": ["k"], "version_column": "v", "tombstone_table": "tomb"},
    }
    raw = {
        "sink": {"id": "shop"},
        "wal": {"path": str(tmp_path / "wal")},
        "mysql": {"url": db.url, "route_column": "tbl", "tables": tables},
        "cdc": CDC,
    }
    schema = SCHEMA.insert(0, pa.field("tbl", pa.string()))
    rows = [
        {"tbl": "orders", **r} for r in ops(("I", 1, "o", 1), ("D", 2, None, 2))
    ] + [{"tbl": "items", **r} for r in ops(("I", 1, "i", 1), ("D", 2, None, 2))]
    with short_lock_waits(db), pytest.raises(ConfigError) as info:
        recovered(db, config_from_dict(raw, base_dir=tmp_path), schema, rows)
    assert str(info.value) == (
        "mysql.tables.orders.tombstone_table: table tomb would hold the tombstones "
        "of table items (mysql.tables.items) and of table orders, and one tombstone "
        "table serves one target: set mysql.tables.orders.tombstone_table to "
        "another name"
    )
    assert tombstone_comments(db) == {}


def test_a_target_made_from_a_later_batch_gets_its_tombstone_table_before_it(
    db, tmp_path
):
    """A target mysql.auto_create makes from the first batch staged after the
    start (a follower's) gets its tombstone table with it, before the batch's
    transaction, which only reads and writes it."""
    for t in ("later", "later_tombstones", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    mysql = {"url": db.url, "table": "later", "key": ["k"], "version_column": "v"}
    cfg = config_from_dict(
        {
            "sink": {"id": "later"},
            "wal": {"path": str(tmp_path / "wal")},
            "mysql": {**mysql, "auto_create": True},
            "cdc": CDC,
        }
    )
    sink = SinkInstance(cfg)
    try:
        sink.start()
        rows = ops(("I", 1, "a", 5), ("D", 1, None, 6), ("I", 1, "old", 4))
        stage_rows(cfg, 0, rows, SCHEMA)
        sink.recover()
    finally:
        sink.close()
    assert db.rows("SELECT k, _wal_version FROM later_tombstones") == [(1, 6)]
    assert db.rows("SELECT k FROM later") == []
