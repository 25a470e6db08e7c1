"""Tables the sink creates, through the real job: every Spark type's extreme values
round-trip through a table ``mysql.auto_create`` made (read back with the plain
``mariadb`` client, compared value by value with what was sent), and
``--print-ddl`` says what it would run and changes nothing."""

from __future__ import annotations

import shutil
import subprocess
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from devtools.spark_job import JobProcess
from tests.helpers import JOB, write_config

UTC = timezone.utc
D38 = Decimal("9" * 38)
# (column, Arrow type, values, the SQL the client reads it with, the value as the
# client's text reads: text, or a float for the floating types)
COLUMNS = [
    ("i8", pa.int8(), [-128, 127, 0], "CAST(i8 AS CHAR)", str),
    ("i16", pa.int16(), [-(2**15), 2**15 - 1, 0], "CAST(i16 AS CHAR)", str),
    ("i32", pa.int32(), [-(2**31), 2**31 - 1, 0], "CAST(i32 AS CHAR)", str),
    ("i64", pa.int64(), [-(2**63), 2**63 - 1, 0], "CAST(i64 AS CHAR)", str),
    (
        "f32",
        pa.float32(),
        [3.4028234663852886e38, 1.1754943508222875e-38, 0.10000000149011612],
        "CAST(CAST(f32 AS DOUBLE) AS CHAR)",
        float,
    ),
    (
        "f64",
        pa.float64(),
        [1.7976931348623157e308, 5e-324, -2.2250738585072014e-308],
        "CAST(f64 AS CHAR)",
        float,
    ),
    (
        "d38",
        pa.decimal128(38, 0),
        [D38, Decimal("-" + "9" * 38), Decimal(0)],
        "CAST(d38 AS CHAR)",
        str,
    ),
    (
        "d3838",
        pa.decimal128(38, 38),
        [Decimal("0." + "9" * 38), Decimal("-0." + "0" * 37 + "1"), Decimal(0)],
        "CAST(d3838 AS CHAR)",
        lambda v: format(v, "f") if v else "0." + "0" * 38,
    ),
    (
        "flag",
        pa.bool_(),
        [True, False, None],
        "CAST(flag AS CHAR)",
        lambda v: "1" if v else "0",
    ),
    (
        "txt",
        pa.string(),
        ["a b ", "\U0001f600 'q' \\ \n\t\0", "x" * 70_000],
        "HEX(txt)",
        lambda v: v.encode().hex().upper(),
    ),
    (
        "bin",
        pa.binary(),
        [b"\x00\xff\x00", b"", b"\x00" * 300],
        "HEX(bin)",
        lambda v: v.hex().upper(),
    ),
    (
        "day",
        pa.date32(),
        [date(1, 1, 1), date(9999, 12, 31), date(1582, 10, 10)],
        "CAST(day AS CHAR)",
        lambda v: v.isoformat().rjust(10, "0"),
    ),
    (
        "ts",
        pa.timestamp("us", tz="UTC"),
        [
            datetime(1000, 1, 1, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(2038, 1, 19, 3, 14, 8, 1, tzinfo=UTC),
        ],
        "CAST(ts AS CHAR)",
        lambda v: v.strftime("%Y-%m-%d %H:%M:%S.%f"),
    ),
    (
        "ntz",
        pa.timestamp("us"),
        [
            datetime(1970, 1, 1, 0, 0, 0, 1),
            datetime(9999, 12, 31),
            datetime(2100, 6, 1),
        ],
        "CAST(ntz AS CHAR)",
        lambda v: v.strftime("%Y-%m-%d %H:%M:%S.%f"),
    ),
    (
        "nums",
        pa.list_(pa.decimal128(38, 2)),
        [[Decimal("123456789012345678901234567890123456.78")], [], None],
        "HEX(nums)",
        lambda v: (
            ("[" + ",".join(format(d, "f") for d in v) + "]").encode().hex().upper()
        ),
    ),
]
KEYS = ["a", "A", "a "]  # three keys to Spark, so three to MySQL
SPARK_SCHEMA = (
    "k STRING, i8 TINYINT, i16 SMALLINT, i32 INT, i64 BIGINT, f32 FLOAT, f64 DOUBLE, "
    "d38 DECIMAL(38,0), d3838 DECIMAL(38,38), flag BOOLEAN, txt STRING, bin BINARY, "
    "day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, nums ARRAY<DECIMAL(38,2)>"
)


def extremes(landing: Path) -> None:
    landing.mkdir()
    arrays = [pa.array(KEYS, pa.string())] + [
        pa.array(values, kind) for _, kind, values, _, _ in COLUMNS
    ]
    names = ["k"] + [c[0] for c in COLUMNS]
    pq.write_table(pa.Table.from_arrays(arrays, names=names), landing / "x.parquet")


def client_rows(db, sql: str) -> list[list[str]]:
    """``sql`` through the plain ``mariadb`` client, as the lines it prints."""
    client = shutil.which("mariadb") or "/usr/bin/mariadb"
    done = subprocess.run(
        [client, "-uroot", f"--socket={db.server.socket}", "-B", "-N", db.name],
        input=sql,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.split("\t") for line in done.stdout.splitlines()]


def config_for(db, tmp_path: Path, landing: Path, mysql: str) -> Path:
    return write_config(
        tmp_path / "made.toml",
        db,
        table="made",
        source=f'[source]\nformat = "parquet"\npath = "{landing}"\n'
        f'schema = "{SPARK_SCHEMA}"',
        mysql=mysql,
        job=JOB,
    )


def test_extreme_values_round_trip_through_a_table_the_sink_created(db, tmp_path):
    db.execute("DROP TABLE IF EXISTS made")
    landing = tmp_path / "landing"
    extremes(landing)
    config = config_for(db, tmp_path, landing, "auto_create = true")
    job = JobProcess(config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 0, job.tail()
    assert db.rows("SELECT quarantined FROM wal_sink_ack WHERE sink_id = 'made'") == [
        (0,)
    ]
    selects = ", ".join(f"IFNULL({sql}, 'NULL')" for _, _, _, sql, _ in COLUMNS)
    got = client_rows(db, f"SELECT HEX(k), {selects} FROM made ORDER BY HEX(k)")
    sent = sorted(
        (
            [k.encode().hex().upper()]
            + ["NULL" if c[2][i] is None else c[4](c[2][i]) for c in COLUMNS]
            for i, k in enumerate(KEYS)
        ),
    )
    assert len(got) == 3
    for row_sent, row_got in zip(sent, got):
        for (name, *_), want, have in zip([("k",), *COLUMNS], row_sent, row_got):
            if isinstance(want, float):
                have = float(have)
            assert have == want, f"column {name}: sent {want!r}, read {have!r}"


def test_print_ddl_says_what_it_would_run_and_changes_nothing(db, tmp_path):
    db.execute("DROP TABLE IF EXISTS made")
    landing = tmp_path / "landing"
    extremes(landing)
    config = config_for(db, tmp_path, landing, "")
    job = JobProcess(config, tmp_path / "job.log", "--print-ddl")
    assert job.wait() == 0, job.tail()
    printed = job.text()
    assert "CREATE TABLE made (k VARCHAR(768) CHARACTER SET utf8mb4" in printed
    assert "ts DATETIME(6) NULL" in printed and "PRIMARY KEY (k)" in printed
    assert db.rows("SHOW TABLES LIKE 'made'") == []
    assert not (tmp_path / "wal").exists() and not (tmp_path / "checkpoint").exists()
    # The table made by hand with a DATETIME for the stream's timestamps: nothing
    # to run, and the column that would change values is said.
    create = printed[printed.index("CREATE TABLE made") :].split(";")[0]
    db.execute(create.replace("ts DATETIME(6)", "ts DATETIME"))
    job = JobProcess(config, tmp_path / "again.log", "--print-ddl")
    assert job.wait() == 0, job.tail()
    printed = job.text()
    assert "-- table made: nothing to do" in printed
    assert "-- column ts of table made is datetime, which drops fractions" in printed
