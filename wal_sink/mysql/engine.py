"""The SQLAlchemy engine every MySQL conversation of the sink goes through.

Sessions run in strict SQL mode (bad values fail instead of being truncated) and in
UTC, so timestamps staged by Spark land unchanged. The password is taken from the
environment or a file at engine creation and never appears in config or logs; TLS
options from ``mysql.tls`` go to PyMySQL unchanged.
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from wal_sink.config import MysqlConfig, mysql_password

SESSION_SQL_MODE = (
    "STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
    "NO_ENGINE_SUBSTITUTION"
)


def make_engine(mysql: MysqlConfig) -> Engine:
    """Create the engine for ``mysql``; raises ConfigError when no password is set."""
    url = make_url(mysql.url).set(password=mysql_password(mysql))
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=3,
        isolation_level="REPEATABLE READ",
        hide_parameters=True,
        connect_args={
            "init_command": f"SET SESSION sql_mode='{SESSION_SQL_MODE}', "
            "time_zone='+00:00'",
            "charset": "utf8mb4",
            "local_infile": mysql.local_infile,
            "read_timeout": mysql.read_timeout,
            **mysql.tls,
        },
    )
