"""The LOAD DATA fast path (mysql.local_infile) must give what the row path gives."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.quarantine import Quarantine
from wal_sink.wal.writer import WalWriter

SCHEMA = (
    "k STRING, amount DECIMAL(12,2), label STRING, flag BOOLEAN, ts TIMESTAMP, "
    "seq BIGINT"
)
DDL = (
    "(k VARCHAR(16) PRIMARY KEY, amount DECIMAL(14,2) NOT NULL, label VARCHAR(12), "
    "flag TINYINT, ts DATETIME(6), seq BIGINT) ENGINE=InnoDB"
)


def rows(n: int, start: int = 0):
    ts = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=timezone.utc)
    return [
        (
            f"k{i % 37}",
            Decimal(i % 100) / 4,
            f"t\tb\\{i}" if i % 7 == 0 else None,
            i % 2 == 0,
            ts,
            (i * 7919) % 1000,
        )
        for i in range(start, start + n)
    ]


def run(
    spark,
    db,
    make_config,
    tmp_path,
    name: str,
    data,
    *,
    local_infile: bool,
    in_order: bool = False,
):
    """A fresh table ``name`` and a started sink on it, ``data`` staged as batch 0:
    spread over three files, or with ``in_order`` one file in ``data``'s order (its
    chunks of 400 rows are then ``data``'s)."""
    db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute(f"CREATE TABLE {name} {DDL}")
    sink_id = name
    config = make_config(
        table=name,
        sink_id=sink_id,
        merge={"amount": "add"},
        version_column="seq",
        chunk_rows=400,
        wal_path=tmp_path / name,
    )
    config = replace(config, mysql=replace(config.mysql, local_infile=local_infile))
    instance = SinkInstance(config)
    committer = instance.start()
    df = spark.createDataFrame(data, SCHEMA)
    stage(
        df.coalesce(1) if in_order else df.repartition(3),
        WalWriter(config.wal_path, sink_id),
        0,
    )
    return config, committer


@pytest.fixture(autouse=True)
def clean(db):
    for t in ("wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")


def test_fast_path_gives_the_row_path_result(
    spark, db, make_config, tmp_path, caplog, calls
):
    long_label = [
        ("k5", Decimal(1), "x" * 20, True, None, 999)
    ] * 3  # LOAD would truncate
    data = rows(700) + long_label + rows(800, start=700)
    _, slow = run(
        spark,
        db,
        make_config,
        tmp_path,
        "slow",
        data,
        local_infile=False,
        in_order=True,
    )
    _, fast = run(
        spark, db, make_config, tmp_path, "fast", data, local_infile=True, in_order=True
    )
    slow_result, fast_result = slow.apply(0), fast.apply(0)
    assert (slow_result.rows, slow_result.quarantined) == (1500, 3)
    assert (fast_result.rows, fast_result.quarantined) == (1500, 3)
    # Chunks of 400: the second holds the long labels and goes row by row on both
    # paths; the other 1103 rows went by multi-row INSERTs (slow), by LOAD DATA (fast).
    assert calls == {"multi_row": 1103, "local_infile": 1103}
    assert "refused" not in caplog.text
    cols = "k, amount, label, flag, ts, seq"
    assert db.rows(f"SELECT {cols} FROM fast ORDER BY k") == db.rows(
        f"SELECT {cols} FROM slow ORDER BY k"
    )
    assert db.rows("SELECT COUNT(*) FROM fast") == [(37,)]


def test_fast_path_quarantines_poison_rows_like_the_row_path(
    spark, db, make_config, tmp_path, calls
):
    """Chunks of 400: the first is clean, LOAD DATA takes it; the second ends with
    two rows MySQL refuses, so LOAD DATA and then the multi-row path fail it whole
    and row by row sets those two aside; the third is a null key's (row by row)."""
    data = rows(798) + [
        ("k1", None, "nullamt", True, None, 1),
        ("toolong-key-0123456789", Decimal(1), "x", True, None, 1),
        (None, Decimal(1), "nullkey", True, None, 1),
    ]
    config, fast = run(
        spark,
        db,
        make_config,
        tmp_path,
        "fastbad",
        data,
        local_infile=True,
        in_order=True,
    )
    result = fast.apply(0)
    assert (result.rows, result.quarantined) == (798, 3)
    assert calls == {"multi_row": 0, "local_infile": 400}
    entries = Quarantine(config.quarantine_path, "fastbad").read(10)
    record = {"flag": True, "seq": 1, "ts": None}
    assert sorted(
        (e["reason"].split(":")[0], json.loads(e["record"])) for e in entries
    ) == [
        ("MySQL error 1048", {**record, "k": "k1", "amount": None, "label": "nullamt"}),
        (
            "MySQL error 1406",
            {**record, "k": "toolong-key-0123456789", "amount": "1.00", "label": "x"},
        ),
        (
            "null key column(s)",
            {**record, "k": None, "amount": "1.00", "label": "nullkey"},
        ),
    ]


@contextmanager
def local_infile_off(mariadb):
    """The server refusing LOAD DATA LOCAL INFILE (local_infile = 0) inside."""
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = 0")
    try:
        yield
    finally:
        with mariadb.root() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 1")


def test_refused_local_infile_falls_back(
    spark, db, mariadb, make_config, caplog, tmp_path, calls
):
    with local_infile_off(mariadb):
        _, fast = run(
            spark, db, make_config, tmp_path, "refused", rows(500), local_infile=True
        )
        chunks: list[int] = []
        result = fast.apply(0, on_chunk=lambda done, total: chunks.append(done))
        assert result.rows == 500
    assert calls == {"multi_row": 500, "local_infile": 0}
    assert len(chunks) >= 2  # refused once, not once per chunk
    assert caplog.text.count("LOAD DATA LOCAL INFILE refused") == 1, caplog.text
    assert db.rows("SELECT COUNT(*) FROM refused") == [(37,)]


def test_load_data_refused_from_one_batch_on_is_tried_once_not_per_chunk(
    spark, db, mariadb, make_config, caplog, tmp_path, calls
):
    """LOAD DATA worked for batch 0; the server refuses it from batch 1 on. The
    prefetch thread decided batch 1's second chunk (LOAD DATA) while the first was
    being refused: that decision is made again, and LOAD DATA is not tried again."""
    config, committer = run(
        spark, db, make_config, tmp_path, "flip", rows(500), local_infile=True
    )
    assert committer.apply(0).rows == 500
    assert calls == {"multi_row": 0, "local_infile": 500}
    later = spark.createDataFrame(rows(2000, start=500), SCHEMA).repartition(3)
    stage(later, WalWriter(config.wal_path, "flip"), 1)
    with local_infile_off(mariadb):
        chunks: list[int] = []
        result = committer.apply(1, on_chunk=lambda done, total: chunks.append(done))
        assert result.rows == 2000
    assert calls == {"multi_row": 2000, "local_infile": 500}
    assert len(chunks) >= 3
    assert caplog.text.count("LOAD DATA LOCAL INFILE refused") == 1, caplog.text
    assert db.rows("SELECT COUNT(*) FROM flip") == [(37,)]


def test_fast_path_is_atomic(spark, db, make_config, tmp_path, calls):
    """I3 on the fast path: nothing visible before COMMIT."""
    _, fast = run(
        spark, db, make_config, tmp_path, "atomic", rows(2000), local_infile=True
    )
    seen = []
    fast.apply(
        0,
        on_chunk=lambda done, total: seen.append(
            db.rows("SELECT COUNT(*) FROM atomic")[0][0]
        ),
    )
    assert len(seen) >= 5 and set(seen) == {0}
    assert calls == {"multi_row": 0, "local_infile": 2000}
    assert db.rows("SELECT COUNT(*) FROM atomic") == [(37,)]
