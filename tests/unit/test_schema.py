import re
from pathlib import Path

from sqlalchemy.dialects import mysql
from sqlalchemy.schema import CreateIndex, CreateTable

from wal_sink.config import MysqlConfig, TableConfig
from wal_sink.mysql.tables import sink_tables

SQL_FILE = Path(__file__).resolve().parents[2] / "sql" / "wal_sink_tables.sql"


def _normalise(sql: str) -> list[str]:
    sql = "\n".join(
        line for line in sql.splitlines() if not line.lstrip().startswith("--")
    )
    return [re.sub(r"\s+", " ", s).strip() for s in sql.split(";") if s.strip()]


def test_sql_file_matches_schema_module():
    config = MysqlConfig(url="mysql+pymysql://u@h/d", table="t", key=("k",))
    tables = sink_tables(config)
    several = MysqlConfig(
        url="mysql+pymysql://u@h/d",
        route_column="tbl",
        tables={"t": TableConfig(key=("k",))},
    )
    dialect = mysql.dialect()
    expected = (
        [
            str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
            for t in (tables.ack, tables.lease, tables.outbox)
        ]
        + [
            str(CreateIndex(i, if_not_exists=True).compile(dialect=dialect))
            for i in tables.outbox.indexes
        ]
        + [str(CreateTable(tables.retry, if_not_exists=True).compile(dialect=dialect))]
        + [
            str(
                CreateTable(
                    sink_tables(several).ack_tables, if_not_exists=True
                ).compile(dialect=dialect)
            )
        ]
    )
    assert _normalise(SQL_FILE.read_text()) == _normalise(";".join(expected))
