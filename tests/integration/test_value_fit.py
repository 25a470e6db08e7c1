"""A value lands as sent, or is set aside (docs/merge.md, "Values MySQL would
change"): for columns narrower than the stream's type, what MariaDB really stores is
held against the sink's verdicts (mysql/narrowing.py), and the real committer sets
aside exactly the values the column would change; a narrowing key or version
column is refused at start and by recovery, nothing written."""

from __future__ import annotations

import json
import re
import uuid
from datetime import date, datetime, time, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from tests.helpers import stage_rows
from wal_sink.errors import ConfigError
from wal_sink.ops.quarantine_entries import list_entries
from wal_sink.protocol.sink_instance import SinkInstance

UTC = timezone.utc
US = pa.timestamp("us", tz="UTC")
T = datetime(2001, 1, 1, 10, 0, 0, tzinfo=UTC)

CASES = [
    # (column type, stream type, values that land as sent, values that change)
    ("DECIMAL(12,2)", pa.decimal128(12, 4), [Decimal("1.23"), Decimal("-7")],
     [Decimal("1.2345"), Decimal("9.9999"), Decimal("0.005")]),
    ("INT", pa.decimal128(6, 2), [Decimal("12")], [Decimal("1.5"), Decimal("-0.49")]),
    ("DECIMAL(10,2)", pa.float64(), [0.1, 12.25], [0.125, 1 / 3]),
    ("BIGINT", pa.float64(), [3.0, -2.0], [1.5, 2.5]),
    ("DOUBLE", pa.int64(), [2**53, -5], [2**53 + 1, 2**63 - 1]),
    ("DATETIME", US, [T], [T.replace(microsecond=999999), T.replace(microsecond=1)]),
    ("TIMESTAMP(3) NULL", US, [T.replace(microsecond=5000)],
     [T.replace(microsecond=5001)]),
    ("DATE", US, [T.replace(hour=0)], [T]),
    ("CHAR(5)", pa.string(), ["ab", " ab"], ["ab ", " "]),
    ("ENUM('a','B')", pa.string(), ["a", "B"], ["A", "b", "a "]),
    ("INT", pa.string(), ["12", "-3"], ["1.5", "2.5"]),
    ("DATETIME", pa.string(), ["2001-01-01 10:00:00"], ["2001-01-01 10:00:00.6"]),
    ("BINARY(4)", pa.binary(), [b"abcd"], [b"ab"]),
]  # fmt: skip


def _stored(db, column_type: str, value: Any) -> Any:
    """What the column stores for ``value`` sent as PyMySQL renders it."""
    db.execute("DROP TABLE IF EXISTS probe")
    db.execute(f"CREATE TABLE probe (c {column_type}) ENGINE=InnoDB")
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("INSERT INTO probe VALUES (%s)", (_sent(value),))
        cur.execute("SELECT c FROM probe")
        return cur.fetchone()[0]


def _sent(value: Any) -> Any:
    return value.replace(tzinfo=None) if isinstance(value, datetime) else value


def _same(column_type: str, sent: Any, stored: Any) -> bool:
    """Whether ``stored`` is ``sent``, as a value of the column's kind."""
    if isinstance(sent, datetime) and isinstance(stored, date):
        if not isinstance(stored, datetime):
            return sent.replace(tzinfo=None) == datetime.combine(stored, time())
        return sent.replace(tzinfo=None) == stored
    if isinstance(sent, str) and column_type.startswith(("INT", "DATETIME")):
        return str(stored) == sent
    if isinstance(sent, float):
        return Decimal(repr(sent)) == Decimal(str(stored))
    return sent == stored  # an int and a float compare exactly


@pytest.mark.parametrize("column_type, kind, fits, changes", CASES)
def test_mariadb_changes_exactly_the_values_the_sink_says_it_would(
    db, column_type, kind, fits, changes
):
    """The ground truth of each verdict, value by value."""
    for value in fits:
        assert _same(column_type, value, _stored(db, column_type, value)), value
    for value in changes:
        assert not _same(column_type, value, _stored(db, column_type, value)), value


@pytest.fixture
def sink_config(make_config, tmp_path):
    """A sink of its own per call: ack rows stay in the module's database."""

    def make(table: str, key: list[str], **more: Any):
        name = f"vf_{uuid.uuid4().hex[:8]}"
        return make_config(
            sink_id=name, table=table, key=key, wal_path=tmp_path / name, **more
        )

    return make


def _recover(config, schema: pa.Schema, rows: list[dict]) -> SinkInstance:
    stage_rows(config, 0, rows, schema)
    sink = SinkInstance(config)
    sink.recover()
    return sink


@pytest.mark.parametrize("column_type, kind, fits, changes", CASES)
def test_a_value_its_column_would_change_is_set_aside_the_rest_lands_as_sent(
    db, sink_config, column_type, kind, fits, changes
):
    db.execute("DROP TABLE IF EXISTS narrow")
    db.execute(
        f"CREATE TABLE narrow (k BIGINT PRIMARY KEY, c {column_type}) ENGINE=InnoDB"
    )
    schema = pa.schema([("k", pa.int64()), ("c", kind)])
    rows = [{"k": i, "c": v} for i, v in enumerate([*fits, *changes])]
    config = sink_config("narrow", ["k"])
    sink = _recover(config, schema, rows)
    try:
        entries = [e for e in list_entries(sink) if e.is_open]
        set_aside = sorted(json.loads(e.entry.record)["k"] for e in entries)
        assert set_aside == list(range(len(fits), len(rows)))
        assert all(
            f"in column c ({column_type.split(' ')[0].lower()}"
            in e.entry.reason.lower()
            for e in entries
        ), [e.entry.reason for e in entries]
        ack = db.rows(
            "SELECT row_count, quarantined FROM wal_sink_ack WHERE sink_id = %s",
            (config.sink.id,),
        )
        assert ack == [(len(fits), len(changes))]
    finally:
        sink.close()
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SELECT k, c FROM narrow ORDER BY k")
        stored = dict(cur.fetchall())
    assert sorted(stored) == list(range(len(fits)))
    for k, value in enumerate(fits):
        assert _same(column_type, value, stored[k]), (value, stored[k])


@pytest.mark.parametrize(
    "ddl, key, mysql, schema, named",
    [
        (
            "k DATETIME PRIMARY KEY, n BIGINT",
            ["k"],
            {},
            [("k", US), ("n", pa.int64())],
            "column k of table shape is datetime",
        ),
        (
            "k BIGINT PRIMARY KEY, v DECIMAL(12,2)",
            ["k"],
            {"version_column": "v"},
            [("k", pa.int64()), ("v", pa.decimal128(12, 4))],
            "column v of table shape is decimal(12,2)",
        ),
        (
            "k BIGINT PRIMARY KEY, v DOUBLE",
            ["k"],
            {"version_column": "v"},
            [("k", pa.int64()), ("v", pa.int64())],
            "column v of table shape is double",
        ),
        (
            "k BIGINT PRIMARY KEY, seq DATETIME(3), n BIGINT",
            ["k"],
            {"cdc": {"op_column": "op", "order_by": "seq"}},
            [("k", pa.int64()), ("seq", US), ("n", pa.int64()), ("op", pa.string())],
            "column seq of table shape is datetime(3)",
        ),
    ],
)
def test_a_narrowing_key_version_or_order_column_is_refused_nothing_written(
    db, sink_config, ddl, key, mysql, schema, named
):
    for table in ("shape", "shape_tombstones", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {table}")
    db.execute(f"CREATE TABLE shape ({ddl}) ENGINE=InnoDB")
    config = sink_config("shape", key, **mysql)
    schema = pa.schema(schema)
    sink = SinkInstance(config)
    try:
        with pytest.raises(ConfigError) as info:
            sink.check_types(schema)
    finally:
        sink.close()
    said = str(info.value)
    assert "\n" not in said and named in said and "transform.sql" in said
    # The CLI knows no query: its start checks the staged schema before it writes
    # anything (a tombstone table left behind would refuse another sink).
    row = {n: None for n in schema.names} | {"k": T if key == ["k"] and
           schema.field("k").type == US else 1}  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(named)):
        _recover(config, schema, [row])
    assert db.rows("SELECT COUNT(*) FROM shape") == [(0,)]
    tables = {r[0] for r in db.rows("SHOW TABLES")}
    assert not tables & {"shape_tombstones", "wal_sink_ack"}


def test_a_narrow_version_refuses_a_start_before_auto_evolve_changes_the_table(
    db, config
):
    """The staged schema is checked before the start's DDL: auto_evolve would
    have added the stream's new column, and the tombstone table been made."""
    for table in ("evolving", "evolving_tombstones", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {table}")
    db.execute("CREATE TABLE evolving (k BIGINT PRIMARY KEY, v DECIMAL(12,2))")
    cdc = {"op_column": "op", "order_by": "v"}
    cfg = config("evolving", ["k"], version_column="v", auto_evolve=True, cdc=cdc)
    schema = pa.schema(
        [("k", pa.int64()), ("v", pa.decimal128(12, 4)), ("extra", pa.string())]
        + [("op", pa.string())]
    )
    row = {"k": 1, "v": Decimal("1.2345"), "extra": "x", "op": "U"}
    with pytest.raises(ConfigError, match="column v of table evolving"):
        _recover(cfg, schema, [row])
    assert [r[0] for r in db.rows("SHOW COLUMNS FROM evolving")] == ["k", "v"]
    tables = {r[0] for r in db.rows("SHOW TABLES")}
    assert not tables & {"evolving_tombstones", "wal_sink_ack"}


def test_with_versioned_cdc_a_stale_upsert_is_skipped_before_its_values_are_judged(
    db, sink_config
):
    """Stale history is skipped, not set aside (it would sit in the quarantine for
    good, holding its key's tombstone against purge); a fresh upsert with a value
    its column would change is set aside."""
    db.execute("DROP TABLE IF EXISTS cdc_narrow")
    db.execute(
        "CREATE TABLE cdc_narrow (k BIGINT PRIMARY KEY, n DECIMAL(12,2), v BIGINT, "
        "seq BIGINT) "
        "ENGINE=InnoDB"
    )
    config = sink_config(
        "cdc_narrow",
        ["k"],
        version_column="v",
        cdc={"op_column": "op", "order_by": "seq"},
    )
    schema = pa.schema(
        [("k", pa.int64()), ("n", pa.decimal128(12, 4)), ("v", pa.int64()),
         ("op", pa.string()), ("seq", pa.int64())]
    )  # fmt: skip
    odd, even = Decimal("1.2345"), Decimal("1.2300")
    rows = [
        {"k": 1, "n": None, "v": 5, "op": "D", "seq": 0},
        {"k": 1, "n": odd, "v": 3, "op": "U", "seq": 1},
        {"k": 2, "n": odd, "v": 1, "op": "U", "seq": 2},
        {"k": 3, "n": even, "v": 1, "op": "U", "seq": 3},
    ]
    sink = _recover(config, schema, rows)
    try:
        entries = [e for e in list_entries(sink) if e.is_open]
        assert [json.loads(e.entry.record)["k"] for e in entries] == [2]
    finally:
        sink.close()
    assert db.rows(
        "SELECT row_count, deleted_count, quarantined, skipped_count "
        "FROM wal_sink_ack WHERE sink_id = %s",
        (config.sink.id,),
    ) == [(1, 1, 1, 1)]
    assert db.rows("SELECT k, n FROM cdc_narrow") == [(3, even)]
