"""Every Spark type the sink takes survives stage -> WAL (read back by delta-rs and
pyarrow) -> MySQL exactly, value by value, on each way a chunk reaches MySQL: the
multi-row INSERTs rendered in Arrow (default), LOAD DATA (``mysql.local_infile``) and
row by row, PyMySQL rendering each value."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime
from decimal import Context, Decimal

import pyarrow.parquet as pq
import pytest

from tests.fixtures.spark_types import TYPES_SCHEMA, UTC, f32, type_rows
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import StageTimes, stage
from wal_sink.wal.reader import WalReader
from wal_sink.wal.writer import WalWriter

OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
REBASE = "spark.sql.parquet.datetimeRebaseModeInWrite"

DDL = (
    "(k INT PRIMARY KEY, ti TINYINT, si SMALLINT, i INT, bi BIGINT, "
    "d38 DECIMAL(38,0), d38s DECIMAL(38,18), d9 DECIMAL(9,2), d18 DECIMAL(18,4), "
    "d30 DECIMAL(38,30), f FLOAT, f_wide DOUBLE, dbl DOUBLE, "
    "s VARCHAR(200) CHARACTER SET utf8mb4, flag BOOLEAN, day DATE, ts DATETIME(6), "
    "ntz DATETIME(6), void_s VARCHAR(10), void_d DECIMAL(10,2), void_ts DATETIME(6)"
    ") ENGINE=InnoDB"
)
# FLOAT columns come back from MariaDB with 6 digits; as DOUBLE they are exact.
SELECT = (
    "SELECT k, ti, si, i, bi, d38, d38s, d9, d18, d30, CAST(f AS DOUBLE), f_wide, "
    "dbl, s, flag, day, ts, ntz, void_s, void_d, void_ts FROM {} ORDER BY k"
)
EXACT = Context(prec=80)


def expected(row: tuple) -> tuple:
    """What MariaDB holds for a staged row: decimals rounded to the column's scale
    as Spark does, FLOATs to single precision, zoned timestamps as naive UTC."""
    (k, ti, si, i, bi, d38, d38s, d9, d18, d30, f, f_wide, dbl, s, flag, day, ts,
     ntz, *void) = row  # fmt: skip
    q = lambda d, e: None if d is None else d.quantize(Decimal(e), context=EXACT)  # noqa: E731
    return (
        k,
        ti,
        si,
        i,
        bi,
        d38,
        q(d38s, "1E-18"),
        q(d9, "0.01"),
        q(d18, "0.0001"),
        q(d30, "1E-30"),
        None if f is None else f32(f),
        None if f_wide is None else f32(f_wide),
        dbl,
        s,
        None if flag is None else int(flag),
        day,
        None if ts is None else ts.astimezone(UTC).replace(tzinfo=None),
        ntz,
        *void,
    )


@pytest.fixture(autouse=True)
def clean(db):
    for t in ("wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")


def run(spark, db, make_config, tmp_path, name, data, schema, ddl, path, driver_rows=0):
    db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute(f"CREATE TABLE {name} {ddl}")
    config = make_config(
        table=name, sink_id=name, chunk_rows=4, wal_path=tmp_path / name
    )
    config = replace(
        config, mysql=replace(config.mysql, local_infile=path == "local_infile")
    )
    committer = SinkInstance(config).start()
    times = StageTimes()
    staged = stage(
        spark.createDataFrame(data, schema).repartition(3),
        WalWriter(config.wal_path, name),
        0,
        times=times,
        driver_rows=driver_rows,
    )
    assert times.from_driver is (driver_rows >= len(data))
    result = committer.apply(0)
    assert (result.rows, result.quarantined) == (len(data), 0)
    return config, staged


@pytest.mark.parametrize("staging", ["executors", "driver"])
@pytest.mark.parametrize("path", ["multi_row", "local_infile", "row_by_row"])
def test_every_type_lands_exactly_on_each_path(
    spark, db, make_config, tmp_path, monkeypatch, calls, path, staging
):
    """Whichever way the batch was staged (Spark's write, or one file written from
    the driver) and whichever way a chunk reaches MySQL."""
    if path == "row_by_row":
        monkeypatch.setattr(MultiRowUpsert, "for_schema", classmethod(lambda *a: None))
    data = type_rows()
    config, _ = run(
        spark,
        db,
        make_config,
        tmp_path,
        path,
        data,
        TYPES_SCHEMA,
        DDL,
        path,
        driver_rows=len(data) if staging == "driver" else 0,
    )

    # The WAL gives back what Spark was given (delta-rs lists, pyarrow reads).
    reader = WalReader(config.wal_path)
    wal_rows = [
        row
        for chunk in reader.read_batch(reader.staged_batch(0), chunk_rows=4)
        for row in chunk.to_pylist()
    ]
    assert len(wal_rows) == len(data)
    got = {r["k"]: tuple(r.values()) for r in wal_rows}
    for row in data:
        assert expected(got[row[0]]) == expected(row), f"WAL row {row[0]}"

    # MySQL holds exactly those values, whichever path took them.
    stored = db.rows(SELECT.format(path))
    assert [r[0] for r in stored] == sorted(r[0] for r in data)
    for row, have in zip(sorted(data), stored):
        want = expected(row)
        for column, w, h in zip(TYPES_SCHEMA.split(", "), want, have):
            assert h == w and type(h) is type(w), f"row {row[0]} {column}: {h!r}"
    if path == "row_by_row":
        assert calls == {"multi_row": 0, "local_infile": 0}
    else:
        assert calls[path] == len(data), "no chunk fell back to row by row"


def test_binary_values_land_byte_for_byte(spark, db, make_config, tmp_path, calls):
    """Binary has no text form in Arrow here: it goes row by row."""
    everything = bytes(range(256))
    data = [
        (1, everything),
        (2, b"\x00"),
        (3, b"'"),
        (4, b"\\"),
        (5, b"\x00'\\\"\n\r\x1a\t%s"),
        (6, b""),
        (7, None),
        (8, "😀".encode() + b"\xff\xfe"),  # not valid UTF-8
    ]
    run(
        spark,
        db,
        make_config,
        tmp_path,
        "bin",
        data,
        "k INT, b BINARY",
        "(k INT PRIMARY KEY, b VARBINARY(300)) ENGINE=InnoDB",
        "multi_row",
    )
    assert db.rows("SELECT k, b FROM bin ORDER BY k") == [
        (k, None if b is None else bytes(b)) for k, b in data
    ]
    assert calls == {"multi_row": 0, "local_infile": 0}


def test_staged_timestamps_are_int64_micros_and_session_conf_is_restored(
    spark, tmp_path
):
    """Whatever the user's session says (Spark's default INT96, or dates rebased to
    the Julian calendar as Spark 2 wrote them), the WAL holds INT64 microseconds in
    the proleptic calendar every Parquet reader uses, and the session keeps its
    settings."""
    data = [
        (
            datetime(1000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
            datetime(1200, 3, 1, 12, 0, 0, 999999),
            date(1000, 1, 1),
        )
    ]
    df = spark.createDataFrame(data, "ts TIMESTAMP, ntz TIMESTAMP_NTZ, day DATE")
    user_sessions = [
        {OUTPUT_TIMESTAMP_TYPE: None, REBASE: None},  # Spark's defaults
        {OUTPUT_TIMESTAMP_TYPE: "INT96", REBASE: "LEGACY"},
    ]
    try:
        for n, settings in enumerate(user_sessions):
            for key, value in settings.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)
            before = {key: spark.conf.get(key) for key in settings}
            wal = str(tmp_path / f"wal{n}")
            staged = stage(df.repartition(2), WalWriter(wal, "s"), 0)
            assert {key: spark.conf.get(key) for key in settings} == before
            for staged_file in staged.files:
                schema = pq.ParquetFile(staged_file.uri).schema
                for name, adjusted in (("ts", "true"), ("ntz", "false")):
                    column = schema.column(schema.names.index(name))
                    assert column.physical_type == "INT64"
                    assert str(column.logical_type).startswith(
                        f"Timestamp(isAdjustedToUTC={adjusted}, timeUnit=microseconds,"
                    )
            reader = WalReader(wal)
            (chunk,) = reader.read_batch(reader.staged_batch(0), chunk_rows=10)
            assert chunk.to_pylist() == [dict(zip(("ts", "ntz", "day"), data[0]))], (
                settings
            )
    finally:
        for key in (OUTPUT_TIMESTAMP_TYPE, REBASE):
            spark.conf.unset(key)
