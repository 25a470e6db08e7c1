"""The multi-row upsert's statement, built from SQLAlchemy's own rendering of the
row path's upsert (no MySQL needed: the dialect renders it)."""

import pyarrow as pa
import pytest
from sqlalchemy import BigInteger, Column, MetaData, String, Table

from tests.helpers import dialect_connection
from wal_sink.config import MysqlConfig
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.mysql.upsert import build_upsert

TABLE = Table(
    "totals",
    MetaData(),
    Column("k", String(8), primary_key=True),
    Column("amount", BigInteger),
    Column("my label", String(8)),
    Column("odd)name", String(8)),
    Column("per%cent", BigInteger),
)
MYSQL = MysqlConfig(
    url="mysql+pymysql://u@h/d", table="totals", key=("k",), merge={"amount": "add"}
).target


@pytest.mark.parametrize("server", [(10, 11, 0), (8, 0, 36)])
def test_statement_is_the_row_paths_upsert_with_its_values_list_rendered(server):
    columns = ["odd)name", "amount", "k", "my label"]
    upsert = build_upsert(TABLE, columns, MYSQL)
    multi = MultiRowUpsert(dialect_connection(server), upsert, columns)
    assert multi.columns == ["k", "amount", "my label", "odd)name"]  # table order
    assert multi.prefix == (
        "INSERT INTO totals (k, amount, `my label`, `odd)name`) VALUES "
    )
    alias = " AS new" if server[0] == 8 else ""
    assert multi.postfix.startswith(f"{alias} ON DUPLICATE KEY UPDATE k = CASE")
    chunk = pa.record_batch(
        {
            "odd)name": ["x", "y"],
            "amount": [1, 2],
            "k": ["a", "b"],
            "my label": ["l", None],
        }
    )
    (statement,) = multi.render(chunk)
    assert statement == (
        multi.prefix + "('a',1,'l','x'),('b',2,NULL,'y')" + multi.postfix
    )


@pytest.mark.parametrize("server", [(10, 11, 0), (8, 0, 36)])
def test_a_percent_sign_in_a_name_is_sent_once(server):
    """SQLAlchemy doubles it for the driver's formatting; the statement is sent
    without parameters, so it is undoubled as the driver would."""
    columns = ["k", "per%cent"]
    upsert = build_upsert(TABLE, columns, MYSQL)
    multi = MultiRowUpsert(dialect_connection(server), upsert, columns)
    assert multi.prefix == "INSERT INTO totals (k, `per%cent`) VALUES "
    assert multi.postfix.endswith("`per%cent` = values(totals.`per%cent`)")
    assert "%%" not in multi.prefix + multi.postfix


def test_statement_fetches_nothing_back_from_a_server_with_returning():
    """MariaDB 10.5+ has INSERT ... RETURNING: the statement must not ask for the
    upserted keys back (it did once, and the commit ratio fell from 0.81 to 0.62)."""
    conn = dialect_connection((10, 11, 0))
    conn.dialect.insert_returning = True  # as the dialect sets it for such a server
    columns = ["k", "amount"]
    multi = MultiRowUpsert(conn, build_upsert(TABLE, columns, MYSQL), columns)
    assert "RETURNING" not in multi.prefix + multi.postfix
    assert multi.postfix.startswith(" ON DUPLICATE KEY UPDATE k = CASE")
