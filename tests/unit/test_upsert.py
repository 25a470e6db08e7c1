"""The merge SQL as each server's dialect renders it."""

import pytest
from sqlalchemy import BigInteger, Column, DateTime, MetaData, Numeric, String, Table
from sqlalchemy.dialects.mysql import pymysql

from wal_sink.config import MysqlConfig
from wal_sink.errors import TerminalError
from wal_sink.mysql.target_profile import COLUMN_FACTS, ColumnFacts
from wal_sink.mysql.upsert import build_delete, build_upsert

TABLE = Table(
    "totals",
    MetaData(),
    Column("org", String(8), primary_key=True),
    Column("amount", Numeric(12, 2)),
    Column("label", String(8)),
    Column("first", String(8)),
    Column("seq", BigInteger),
)


def config(**kw):
    return MysqlConfig(
        url="mysql+pymysql://u@h/d", table="totals", key=("org",), **kw
    ).target


def render(stmt, server_version):
    dialect = pymysql.dialect()
    dialect.server_version_info = server_version
    dialect.is_mariadb = server_version[0] == 10
    # What MySQLDialect.initialize() decides from the server version on connect.
    dialect._requires_alias_for_on_duplicate_key = (
        not dialect.is_mariadb and server_version >= (8, 0, 20)
    )
    return str(stmt.compile(dialect=dialect)).split("ON DUPLICATE KEY UPDATE")[1]


COLUMNS = ["org", "amount", "label", "first", "seq"]


def test_mariadb_uses_values_function_and_version_last():
    stmt = build_upsert(
        TABLE,
        COLUMNS,
        config(merge={"amount": "add", "first": "keep"}, version_column="seq"),
    )
    sql = render(stmt, (10, 11, 0))
    assert (
        "amount = coalesce(totals.amount + VALUES(amount), totals.amount, "
        "VALUES(amount))" in sql
    ), "a NULL adds nothing; a NULL total takes the value"
    assert "first = totals.first" in sql, (
        "keep columns are assigned to themselves: ON UPDATE CURRENT_TIMESTAMP "
        "leaves an assigned column alone"
    )
    assert sql.count(" org = ") == 1, "key columns are never updated"
    assert sql.startswith(" org = CASE WHEN (totals.org = VALUES(org)) THEN totals.org")
    assert sql.index("label =") < sql.index("seq =") == sql.rindex("seq =")
    assert "VALUES(seq) >= totals.seq" in sql
    assert "%(" not in sql, "PyMySQL executemany needs a parameter-free UPDATE clause"


def test_mysql8_uses_row_alias():
    sql = render(build_upsert(TABLE, ["org", "label"], config()), (8, 0, 36))
    assert "new.label" in sql and "VALUES(" not in sql


def test_only_keys_still_valid_statement():
    sql = render(build_upsert(TABLE, ["org"], config()), (10, 11, 0))
    assert "THEN totals.org ELSE 1/0 END" in sql


@pytest.mark.parametrize("server", [(10, 11, 0), (8, 0, 36)])
def test_update_reaching_a_row_of_another_key_fails_the_statement(server):
    """Another unique index can route the update to another row: the first
    assignment compares every key column and divides by zero otherwise (an error in
    strict mode), before any other column is touched."""
    two_keys = Table(
        "t2",
        MetaData(),
        Column("a", String(8)),
        Column("b", String(8)),
        Column("v", String(8)),
    )
    cfg = MysqlConfig(url="mysql+pymysql://u@h/d", table="t2", key=("a", "b")).target
    sql = render(build_upsert(two_keys, ["a", "b", "v"], cfg), server)
    new = "new." if server[0] == 8 else "VALUES("
    close = "" if server[0] == 8 else ")"
    assert sql.startswith(
        f" a = CASE WHEN (t2.a = {new}a{close} AND t2.b = {new}b{close}) "
        "THEN t2.a ELSE 1/0 END, b = t2.b, v = "
    ), "every key column is assigned to itself, so ON UPDATE never changes it"


def test_unknown_and_missing_key_columns_are_clear_errors():
    with pytest.raises(TerminalError, match="colour.*do not exist"):
        build_upsert(TABLE, ["org", "colour"], config())
    with pytest.raises(TerminalError, match="key column.*org.*missing"):
        build_upsert(TABLE, ["amount"], config())


def test_delete_by_key_binds_values():
    sql = str(build_delete(TABLE, config()).compile(dialect=pymysql.dialect()))
    assert sql.endswith("WHERE totals.org = %s")


def test_delete_with_a_version_column_spares_newer_rows():
    stmt = build_delete(TABLE, config(version_column="seq"), versioned=True)
    sql = str(stmt.compile(dialect=pymysql.dialect()))
    assert sql.endswith(
        "WHERE totals.org = %s AND (totals.seq IS NULL OR totals.seq <= %s)"
    )
    assert list(stmt.compile().params) == ["org", "seq"]


def clock_facts(name: str, default: str | None, extra: str) -> dict:
    """A reflected DATETIME column's info, as MySQL 8 shows the clock: without
    parentheses, ``DEFAULT_GENERATED`` before ``on update``."""
    facts = ColumnFacts(name, "datetime", "datetime", True, default, extra, False)
    return {COLUMN_FACTS: facts}


def test_mysql8_datetime_columns_of_the_clock_take_the_servers_time():
    """DATETIME columns MySQL fills with the time and the stream does not write
    are assigned the server's wall clock (mysql/server_clock.py), the ON UPDATE one
    before the values it compares with the stored ones, parameter-free."""
    label = ColumnFacts("label", "varchar", "varchar(8)", True, None, "", False, "x_ci")
    clocked = Table(
        "clocked",
        MetaData(),
        Column("org", String(8), primary_key=True),
        Column("label", String(8), info={COLUMN_FACTS: label}),
        Column("made", DateTime, info=clock_facts("made", "CURRENT_TIMESTAMP", "")),
        Column(
            "touched",
            DateTime,
            info=clock_facts(
                "touched", None, "default_generated on update current_timestamp(3)"
            ),
        ),
    )
    stmt = build_upsert(clocked, ["org", "label"], config())
    clock = "CONVERT_TZ(UTC_TIMESTAMP({}), '+00:00', @@global.time_zone)"
    sql = render(stmt, (8, 0, 36))
    assert sql.index(
        " touched = CASE WHEN (NOT (CAST(CAST(new.label AS CHAR "
        "CHARACTER SET x) AS BINARY) <=> CAST(clocked.label AS BINARY))) "
        f"THEN {clock.format(3)} ELSE clocked.touched END"
    ) < sql.index(" label = new.label")
    assert "made" not in sql, "DEFAULT applies on insert only"
    assert "%(" not in sql
    executed = stmt.compile(dialect=pymysql.dialect(), column_keys=["org", "label"])
    assert str(executed).split(" ON DUPLICATE")[0] == (
        f"INSERT INTO clocked (org, label, made) VALUES (%s, %s, {clock.format(0)})"
    )
