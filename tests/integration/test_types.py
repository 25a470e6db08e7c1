"""Every Spark type the sink takes survives stage -> WAL (read back by delta-rs and
pyarrow) -> MySQL exactly, value by value, on each way a chunk reaches MySQL: the
multi-row INSERTs rendered in Arrow (default), LOAD DATA (``mysql.local_infile``) and
the driver's own value-by-value rendering."""

from __future__ import annotations

import struct
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Context, Decimal

import pyarrow.parquet as pq
import pytest

from wal_sink.mysql.bulk_load import BulkLoader
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import StageTimes, stage
from wal_sink.wal.reader import WalReader
from wal_sink.wal.writer import WalWriter

UTC = timezone.utc
OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
REBASE = "spark.sql.parquet.datetimeRebaseModeInWrite"

SCHEMA = (
    "k INT, ti TINYINT, si SMALLINT, i INT, bi BIGINT, d38 DECIMAL(38,0), "
    "d38s DECIMAL(38,18), d9 DECIMAL(9,2), d18 DECIMAL(18,4), d30 DECIMAL(38,30), "
    "f FLOAT, f_wide FLOAT, dbl DOUBLE, s STRING, flag BOOLEAN, day DATE, "
    "ts TIMESTAMP, ntz TIMESTAMP_NTZ, void_s STRING, void_d DECIMAL(10,2), "
    "void_ts TIMESTAMP"
)
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
D38 = Decimal("9" * 38)  # written out: unary minus would round to 28 digits
EXACT = Context(prec=80)
STRINGS = [
    "😀 emoji, 𝄞 clef, 中文, ü€",
    'it\'s "quoted" `back`',
    "back\\slash \\\\ \\N \\0 \\' end\\",
    "nul\0inside\0",
    "tab\tnewline\ncr\rctrl-z\x1a",
    "50% %s %(k)s {}",
    "'); DROP TABLE x; --",
    "",
    " trailing space ",
]


def f32(x: float) -> float:
    """The value a Spark FLOAT holds for ``x``."""
    return struct.unpack("f", struct.pack("f", x))[0]


def rows() -> list[tuple]:
    ts = datetime(2026, 3, 1, 12, 34, 56, 789012, tzinfo=UTC)
    edge = [
        # minimum values
        (
            1,
            -128,
            -32768,
            -(2**31),
            -(2**63),
            Decimal("-" + "9" * 38),
            Decimal("-99999999999999999999.999999999999999999"),
            Decimal("-9999999.99"),
            Decimal("-99999999999999.9999"),
            Decimal("-9.999999999999999999999999999999"),
            -3.4028234663852886e38,
            -3.4028234663852886e38,
            -1.7976931348623157e308,
            STRINGS[0],
            False,
            date(1000, 1, 1),
            datetime(1000, 1, 1, tzinfo=UTC),
            datetime(1000, 1, 1),
        ),
        # maximum values
        (
            2,
            127,
            32767,
            2**31 - 1,
            2**63 - 1,
            D38,
            Decimal("99999999999999999999.999999999999999999"),
            Decimal("9999999.99"),
            Decimal("99999999999999.9999"),
            Decimal("9.999999999999999999999999999999"),
            3.4028234663852886e38,
            3.4028234663852886e38,
            1.7976931348623157e308,
            STRINGS[1],
            True,
            date(9999, 12, 31),
            datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, 59, 999999),
        ),
        # zeros, negative zero, the epoch
        (
            3,
            0,
            0,
            0,
            0,
            Decimal(0),
            Decimal("0E-18"),
            Decimal("0.00"),
            Decimal("-0.0000"),
            Decimal("0E-30"),
            -0.0,
            0.0,
            -0.0,
            STRINGS[7],
            False,
            date(1970, 1, 1),
            datetime(1970, 1, 1, tzinfo=UTC),
            datetime(1970, 1, 1),
        ),
        # tiny magnitudes: smallest decimals, subnormal and smallest normal floats
        (
            4,
            -1,
            1,
            -1,
            1,
            Decimal(-1),
            Decimal("0.000000000000000001"),
            Decimal("-0.01"),
            Decimal("0.0001"),
            Decimal("0.000000123456789012345678901234"),
            1.401298464324817e-45,
            1.1754943508222875e-38,
            5e-324,
            STRINGS[2],
            True,
            date(1582, 10, 4),
            datetime(1582, 10, 4, 23, 59, 59, 1, tzinfo=UTC),
            datetime(1582, 10, 15, 0, 0, 0, 1),
        ),
        # ordinary values that have no exact binary form
        (
            5,
            42,
            -4242,
            123456789,
            -1234567890123456789,
            Decimal("12345678901234567890123456789012345678"),
            Decimal("-0.000000999999999999"),
            Decimal("1234567.89"),
            Decimal("-12345678901234.5678"),
            Decimal("-0.000000000000000000000000000001"),
            0.1,
            0.1,
            0.1,
            STRINGS[3],
            False,
            date(1969, 12, 31),
            datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(1899, 12, 31, 23, 59, 59, 999999),
        ),
        (
            6,
            7,
            7,
            7,
            7,
            Decimal(7),
            Decimal("1.5"),
            Decimal("1.50"),
            Decimal("1.5"),
            Decimal("1.5"),
            16777217.0,  # rounds to 16777216 as a FLOAT
            2.2250738585072014e-308,
            2.2250738585072014e-308,
            STRINGS[4],
            True,
            date(2000, 2, 29),
            ts,
            datetime(2026, 3, 1, 12, 34, 56, 789012),
        ),
    ]
    data = [(*row, None, None, None) for row in edge]
    data += [
        (
            10 + n,
            n,
            n,
            n,
            n,
            Decimal(n),
            Decimal(n) / 3,
            Decimal(n) / 4,
            Decimal(n) / 8,
            Decimal(n) / 7,
            n / 3,
            n / 3,
            n / 7,
            text,
            n % 2 == 0,
            date(2026, 1, 1 + n),
            ts.replace(microsecond=n),
            datetime(2026, 1, 1, 0, 0, 0, n),
            None,
            None,
            None,
        )
        for n, text in enumerate(STRINGS[4:], start=1)
    ]
    data.append((99, *[None] * 20))  # everything but the key NULL
    return data


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


@pytest.fixture
def calls(monkeypatch) -> dict[str, int]:
    """Rows each Arrow-rendered path applied."""
    counts = {"multi_row": 0, "local_infile": 0}
    for name, cls in (("multi_row", MultiRowUpsert), ("local_infile", BulkLoader)):
        real = cls.apply

        def counting(self, conn, chunk, real=real, name=name, **rendered):
            applied = real(self, conn, chunk, **rendered)
            counts[name] += applied
            return applied

        monkeypatch.setattr(cls, "apply", counting)
    return counts


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
@pytest.mark.parametrize("path", ["multi_row", "local_infile", "driver"])
def test_every_type_lands_exactly_on_each_path(
    spark, db, make_config, tmp_path, monkeypatch, calls, path, staging
):
    """Whichever way the batch was staged (Spark's write, or one file written from
    the driver) and whichever way a chunk reaches MySQL."""
    if path == "driver":
        monkeypatch.setattr(MultiRowUpsert, "for_schema", classmethod(lambda *a: None))
    data = rows()
    config, _ = run(
        spark,
        db,
        make_config,
        tmp_path,
        path,
        data,
        SCHEMA,
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
        for column, w, h in zip(SCHEMA.split(", "), want, have):
            assert h == w and type(h) is type(w), f"row {row[0]} {column}: {h!r}"
    if path == "driver":
        assert calls == {"multi_row": 0, "local_infile": 0}
    else:
        assert calls[path] == len(data), "no chunk fell back to the driver"


def test_binary_values_land_byte_for_byte(spark, db, make_config, tmp_path, calls):
    """Binary has no text form in Arrow here: the driver renders it."""
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
