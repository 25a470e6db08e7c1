"""Multi-row INSERTs rendered in Arrow must store exactly what the driver's own
value-by-value rendering stores, in staged order, and fall back to it when needed."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from wal_sink.mysql import multi_row
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

SCHEMA = (
    "k STRING, amount DECIMAL(12,2), label STRING, ratio DOUBLE, flag BOOLEAN, "
    "day DATE, ts TIMESTAMP, seq BIGINT"
)
DDL = (
    "(k VARCHAR(16) PRIMARY KEY, amount DECIMAL(14,2), label VARCHAR(40) CHARACTER "
    "SET utf8mb4, ratio DOUBLE, "
    "flag TINYINT, day DATE, ts DATETIME(6), seq BIGINT) ENGINE=InnoDB"
)
COLUMNS = "k, amount, label, ratio, flag, day, ts, seq"
LABELS = [
    "it's",
    'say "hi"',
    "back\\slash",
    "nul\0",
    "a\nb\rc\x1a\t",
    "50% %s %(k)s",
    "",
    None,
    "ü€😀",
    "'); DROP TABLE x; --",
]


def rows(n: int):
    ts = datetime(2026, 1, 2, 3, 4, 5, 600001, tzinfo=timezone.utc)
    return [
        (
            f"k{i % 23}",
            Decimal(i % 100) / 4 - 10,
            LABELS[i % len(LABELS)],
            (i % 9) / 7 if i % 5 else None,
            i % 3 == 0,
            date(2026, 1, 1 + i % 28),
            ts,
            (i * 7919) % 1000,
        )
        for i in range(n)
    ]


@pytest.fixture(autouse=True)
def clean(db):
    for t in ("wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")


def apply(spark, db, make_config, tmp_path, name: str, data):
    db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute(f"CREATE TABLE {name} {DDL}")
    config = make_config(
        table=name,
        sink_id=name,
        merge={"amount": "add"},
        version_column="seq",
        chunk_rows=300,
        wal_path=tmp_path / name,
    )
    committer = SinkInstance(config).start()
    stage(
        spark.createDataFrame(data, SCHEMA).repartition(3),
        WalWriter(config.wal_path, name),
        0,
    )
    return committer.apply(0)


@pytest.fixture
def rendered_calls(monkeypatch):
    calls = []
    real = MultiRowUpsert.apply

    def counting(self, conn, chunk, **rendered):
        calls.append(chunk.num_rows)
        return real(self, conn, chunk, **rendered)

    monkeypatch.setattr(MultiRowUpsert, "apply", counting)
    return calls


def test_rendered_rows_store_what_the_driver_stores(
    spark, db, make_config, tmp_path, monkeypatch, rendered_calls
):
    data = rows(1000)
    monkeypatch.setattr(multi_row, "MAX_STATEMENT_BYTES", 2000)  # many statements
    rendered = apply(spark, db, make_config, tmp_path, "rendered", data)
    assert sum(rendered_calls) == 1000  # every chunk went this way
    monkeypatch.setattr(MultiRowUpsert, "for_schema", classmethod(lambda *a: None))
    driver = apply(spark, db, make_config, tmp_path, "driver", data)
    assert (
        (rendered.rows, rendered.quarantined)
        == (driver.rows, driver.quarantined)
        == (1000, 0)
    )
    assert db.rows(f"SELECT {COLUMNS} FROM rendered ORDER BY k") == db.rows(
        f"SELECT {COLUMNS} FROM driver ORDER BY k"
    )
    assert {r[0] for r in db.rows("SELECT label FROM rendered")} <= set(LABELS)


def test_rejected_rows_are_isolated_by_the_driver_path(
    spark, db, make_config, tmp_path, rendered_calls
):
    data = rows(600) + [
        ("k1", Decimal(1), "x" * 41, None, True, None, None, 1),
        (None, Decimal(1), "null key", None, True, None, None, 1),
    ]
    result = apply(spark, db, make_config, tmp_path, "rejected", data)
    assert (result.rows, result.quarantined) == (600, 2)
    assert rendered_calls  # tried first, then left to the driver for the bad chunk


def test_nan_and_infinity_are_quarantined_not_rendered(
    spark, db, make_config, tmp_path, rendered_calls
):
    data = [
        (
            f"n{i}",
            Decimal(1),
            "x",
            {3: float("nan"), 5: float("-inf")}.get(i, 1.0),
            True,
            None,
            None,
            i,
        )
        for i in range(10)
    ]
    result = apply(spark, db, make_config, tmp_path, "nans", data)
    assert sum(rendered_calls) < 10  # chunks holding NaN or infinity were not rendered
    assert (result.rows, result.quarantined) == (8, 2)
    assert sorted(r[0] for r in db.rows("SELECT k FROM nans")) == [
        f"n{i}" for i in range(10) if i not in (3, 5)
    ]


@pytest.mark.parametrize("statement_bytes", [2000, multi_row.MAX_STATEMENT_BYTES])
def test_rejected_statement_leaves_nothing_behind(
    spark, db, make_config, tmp_path, monkeypatch, rendered_calls, statement_bytes
):
    """A chunk MySQL rejects, sent as several statements (under a savepoint) or as
    one (InnoDB undoes the failed statement), is applied once by the driver path:
    ``amount`` is added exactly once for every row of it."""
    data = rows(600) + [("k1", Decimal(1), "x" * 41, None, True, None, None, 1)]
    monkeypatch.setattr(multi_row, "MAX_STATEMENT_BYTES", statement_bytes)
    result = apply(spark, db, make_config, tmp_path, "partial", data)
    assert (result.rows, result.quarantined) == (600, 1)
    assert rendered_calls
    monkeypatch.setattr(MultiRowUpsert, "for_schema", classmethod(lambda *a: None))
    apply(spark, db, make_config, tmp_path, "partial_driver", data)
    assert db.rows(f"SELECT {COLUMNS} FROM partial ORDER BY k") == db.rows(
        f"SELECT {COLUMNS} FROM partial_driver ORDER BY k"
    )
