"""Values reach MySQL as written, whatever session the sink writes through, and never
reach the logs: the fast paths' backslash escapes only where the session reads them
(no NO_BACKSLASH_ESCAPES, utf8mb4 client text), PyMySQL's escaping elsewhere, a
refusal where no escaping is safe; column names any table may have; -0.0; a
terminal error's chain without the statement's row values."""

from __future__ import annotations

import logging
import traceback
from dataclasses import replace

import pyarrow as pa
import pymysql
import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.engine import make_url

from devtools.mariadb import SINK_PASSWORD
from tests.helpers import settle
from wal_sink.errors import TerminalError
from wal_sink.mysql.arrow_text import sql_rows, tsv
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.sink import WalSink
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

TARGET = (
    "(k VARCHAR(64) PRIMARY KEY, label VARCHAR(200) CHARACTER SET utf8mb4, "
    "n BIGINT) ENGINE=InnoDB"
)
SCHEMA = "k STRING, label STRING, n BIGINT"
INTRUDER = "0x696e747275646572"  # 'intruder', written without a quote
# On a NO_BACKSLASH_ESCAPES session the backslash-escaped quote ends the string:
# the rest adds a row of its own and comments out the statement's end.
ESCAPED_QUOTE_ENDS = f"',0),({INTRUDER},0x6f776e6564,9)#"
# Read as gbk, the UTF-8 bytes of these two characters swallow the backslash
# before the quote (... 0xbf 0x5c), which then ends the string.
BACKSLASH_SWALLOWED = f"丁¿',0),({INTRUDER},0x6f776e6564,9)#"
TRICKY = [
    "it's",
    'say "hi"',
    "back\\slash",
    "\\",
    "\\'",
    "''",
    "end\\",
    "縗'",  # 0xbf5c in gbk
    "中文\\'",
    "'); DELETE FROM bystander; --",
    "50% %s %(k)s",
]


@pytest.fixture(autouse=True)
def tables(db):
    for t in ("wal_sink_ack", "wal_sink_lease", "wal_sink_outbox", "target"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(f"CREATE TABLE target {TARGET}")
    db.execute("INSERT INTO target VALUES ('victim', 'original', 0)")
    db.execute("DROP TABLE IF EXISTS bystander")
    db.execute("CREATE TABLE bystander (k INT PRIMARY KEY, v TEXT) ENGINE=InnoDB")
    db.execute("INSERT INTO bystander VALUES (1, 'a'), (2, 'b\\\\c')")


def caller_engine(config, *, charset: str = "utf8mb4", later: str = ""):
    """An engine of the caller's own, as ``SinkInstance(config, engine)`` takes;
    ``later`` runs on each new connection once SQLAlchemy has set it up."""
    engine = create_engine(
        make_url(config.mysql.url).set(password=SINK_PASSWORD),
        connect_args={
            "charset": charset,
            # the strict modes the sink needs (preflight), nothing else
            "init_command": "SET SESSION sql_mode='STRICT_ALL_TABLES,"
            "ERROR_FOR_DIVISION_BY_ZERO'",
        },
    )
    if later:

        @event.listens_for(engine, "connect")
        def _later(dbapi_connection, record) -> None:
            with dbapi_connection.cursor() as cur:
                cur.execute(later)

    return engine


def staged_rows(spark, make_config, tmp_path, values: list[str]):
    config = make_config(table="target", wal_path=tmp_path / "wal", chunk_rows=5000)
    rows = [(f"r{i:02d}", v, i) for i, v in enumerate(values)]
    stage(spark.createDataFrame(rows, SCHEMA), WalWriter(config.wal_path, "s1"), 0)
    return config, rows


def others(db) -> list:
    """Everything the batch must not change (an injected row shows here)."""
    return [
        db.rows("SELECT * FROM target WHERE k NOT LIKE 'r%' ORDER BY k"),
        db.rows("CHECKSUM TABLE bystander"),
    ]


@pytest.mark.parametrize(
    "charset, later",
    [
        (
            "utf8mb4",
            "SET SESSION sql_mode='STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,"
            "NO_BACKSLASH_ESCAPES'",
        ),
        ("gbk", ""),
    ],
    ids=["no_backslash_escapes", "gbk"],
)
def test_a_session_that_reads_escapes_otherwise_gets_the_drivers_escaping(
    spark, db, make_config, tmp_path, charset, later
):
    values = ([ESCAPED_QUOTE_ENDS] if charset == "utf8mb4" else []) + TRICKY
    config, rows = staged_rows(spark, make_config, tmp_path, values)
    before = others(db)
    engine = caller_engine(config, charset=charset, later=later)
    assert SinkInstance(config, engine).start().apply(0).rows == len(rows)
    assert db.rows("SELECT k, label, n FROM target WHERE k LIKE 'r%' ORDER BY k") == [
        tuple(r) for r in rows
    ]
    assert others(db) == before


def test_a_session_reading_another_charset_than_the_driver_writes_is_refused(
    spark, db, make_config, tmp_path
):
    config, _ = staged_rows(
        spark, make_config, tmp_path, [BACKSLASH_SWALLOWED, *TRICKY]
    )
    before = others(db)
    engine = caller_engine(config, later="SET NAMES gbk")
    committer = SinkInstance(config, engine).start()
    with pytest.raises(TerminalError, match="reads client text as gbk") as info:
        committer.apply(0)
    assert "\n" not in str(info.value)
    assert others(db) == before
    assert db.rows("SELECT COUNT(*) FROM target") == [(1,)]
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(0,)]


@pytest.mark.parametrize("path", ["multi_row", "local_infile"])
def test_column_names_with_a_space_hyphen_or_backtick_take_the_fast_path(
    spark, db, make_config, tmp_path, calls, path
):
    db.execute("DROP TABLE IF EXISTS odd")
    db.execute(
        "CREATE TABLE odd (k VARCHAR(8) PRIMARY KEY, `a b` VARCHAR(8), `a-b` BIGINT,"
        " `a``b` VARCHAR(8)) ENGINE=InnoDB"
    )
    config = make_config(table="odd", wal_path=tmp_path / "odd")
    config = replace(
        config, mysql=replace(config.mysql, local_infile=path == "local_infile")
    )
    rows = [(f"k{i}", f"s{i}", i, f"t{i}") for i in range(5)]
    stage(
        spark.createDataFrame(
            rows, "k STRING, `a b` STRING, `a-b` BIGINT, `a``b` STRING"
        ),
        WalWriter(config.wal_path, "s1"),
        0,
    )
    assert SinkInstance(config).start().apply(0).rows == 5
    assert calls[path] == 5
    assert db.rows("SELECT * FROM odd ORDER BY k") == rows


@pytest.mark.parametrize("path", ["multi_row", "local_infile"])
def test_column_names_with_a_percent_sign_land_in_their_own_columns(
    spark, db, make_config, tmp_path, calls, path
):
    """SQLAlchemy doubles a '%' of a column name for the driver's formatting, twice
    in the ON DUPLICATE KEY UPDATE part: the row path undoubles it once (the
    bulk-load path leaves such tables to it), and a second batch updates in place."""
    db.execute("DROP TABLE IF EXISTS pct")
    db.execute(
        "CREATE TABLE pct (k VARCHAR(8) PRIMARY KEY, `a%b` VARCHAR(8),"
        " `%s` BIGINT, `%(k)s` VARCHAR(8)) ENGINE=InnoDB"
    )
    config = make_config(table="pct", wal_path=tmp_path / "pct")
    config = replace(
        config, mysql=replace(config.mysql, local_infile=path == "local_infile")
    )
    schema = "k STRING, `a%b` STRING, `%s` BIGINT, `%(k)s` STRING"
    first = [(f"k{i}", f"p{i}", i, f"q{i}") for i in range(4)]
    second = [(f"k{i}", f"P{i}", -i, f"Q{i}") for i in range(2, 6)]
    writer = WalWriter(config.wal_path, "s1")
    stage(spark.createDataFrame(first, schema), writer, 0)
    stage(spark.createDataFrame(second, schema), writer, 1)
    committer = SinkInstance(config).start()
    assert committer.apply(0).rows == 4 and committer.apply(1).rows == 4
    assert calls["multi_row"] == 8 and calls["local_infile"] == 0
    assert db.rows("SELECT * FROM pct ORDER BY k") == first[:2] + second


def test_negative_zero_reaches_the_server_with_its_sign_on_every_path(db):
    """MariaDB stores every zero of a DOUBLE column as 0 (CAST(col AS CHAR) is '0'
    for -0e0 too), so the sign is read where the server still has it: in the value
    each path's text gives, before it is stored."""
    with db.connect() as conn, conn.cursor() as cur:

        def negative(expression: str, *args) -> bool:
            cur.execute(f"SELECT ATAN2({expression}, -1) < 0", args)
            return cur.fetchone()[0] == 1

        for kind in (pa.float64(), pa.float32()):
            chunk = pa.record_batch({"d": pa.array([-0.0], kind)})
            (multi_row,) = sql_rows(chunk, ["d"], 1_000_000)  # "(literal)"
            assert negative(multi_row[1:-1]), multi_row
            field = tsv(chunk, ["d"]).to_pybytes().decode().split("\t")[0]
            assert negative("CAST(%s AS DOUBLE)", field), field  # LOAD DATA's text
        assert negative(conn.escape(-0.0))  # the driver's
        assert not negative("0e0")


def test_a_terminal_error_keeps_row_values_out_of_logs_and_tracebacks(
    spark, db, make_config, tmp_path, caplog
):
    """A multi-row statement holds the chunk's values; a non-row error on it (here a
    trigger's SIGNAL of an error that is no row's refusal) stops the sink, and the
    chain Spark prints must not hold them."""
    db.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON target FOR EACH ROW IF NEW.k = 'boom'"
        " THEN SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 1105, "
        "MESSAGE_TEXT = 'refused by trigger'; END IF"
    )
    caplog.set_level(logging.DEBUG)
    config = make_config(table="target", wal_path=tmp_path / "wal")
    rows = [(f"r{i}", f"NEEDLE-{i:04d}", i) for i in range(200)] + [("boom", "x", 0)]
    sink = WalSink(config)
    try:
        sink.foreach_batch(spark.createDataFrame(rows, SCHEMA), 0)
        with pytest.raises(TerminalError):
            settle(sink)
        with pytest.raises(TerminalError) as info:  # the next batch, as Spark sees
            sink.foreach_batch(spark.createDataFrame(rows[:1], SCHEMA), 1)
    finally:
        sink.close(timeout=0)
    printed = "".join(traceback.format_exception(info.value)) + caplog.text
    assert "MySQL error 1105: refused by trigger" in printed
    assert "NEEDLE" not in printed
    assert isinstance(info.value.__cause__.orig, pymysql.err.OperationalError)
