"""The merge SQL as each server's dialect renders it."""

import pytest
from sqlalchemy import BigInteger, Column, MetaData, Numeric, String, Table
from sqlalchemy.dialects.mysql import pymysql

from wal_sink.config import MysqlConfig
from wal_sink.errors import TerminalError
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
    return MysqlConfig(url="mysql+pymysql://u@h/d", table="totals", key=("org",), **kw)


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
    cfg = MysqlConfig(url="mysql+pymysql://u@h/d", table="t2", key=("a", "b"))
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
