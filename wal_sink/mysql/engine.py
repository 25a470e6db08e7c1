"""The SQLAlchemy engine every MySQL conversation of the sink goes through.

Every session pins the server settings that change what a write does (docs/merge.md,
"The target's shape"), whatever the server's defaults: strict SQL mode (bad values
fail instead of being truncated), ``NO_AUTO_VALUE_ON_ZERO`` (an AUTO_INCREMENT key of
0 is the key 0, not the next value), UTC (timestamps staged by Spark land unchanged),
utf8mb4 text, unique and foreign key checks on, ``sql_auto_is_null`` off, plain
COMMITs, no limit on the rows a SELECT returns (the sink decides by what it reads:
tombstones, acks), REPEATABLE READ, and ``explicit_defaults_for_timestamp`` on
where the server lets a session set it (the TIMESTAMP columns of tables the sink
creates are then what their DDL says; a NULL for a ``TIMESTAMP NOT NULL`` column,
which MariaDB stores as NOW() whatever the setting, is set aside before it is sent:
protocol/screen.py).

The password is taken from the environment or a file at engine creation and never
appears in config or logs; TLS options from ``mysql.tls`` go to PyMySQL unchanged.
Connections are ``GuardedConnection``: with ``mysql.local_infile`` on they send the
server only the file of the sink's own LOAD DATA (with it off the client does not
even offer local files), and the password goes in clear text only to a verified
server.
"""

from __future__ import annotations

import logging
from typing import Any

import pymysql
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from wal_sink.config import MysqlConfig, mysql_password
from wal_sink.errors import ConfigError, first_line
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.guarded_connection import GuardedConnection

log = logging.getLogger(__name__)

SESSION_SQL_MODE = (
    "STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
    "NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO"
)
# The largest limit, "none": a session's DEFAULT would be the server's own.
SELECT_ANY = 2**64 - 1
SESSION_SETTINGS = (
    f"SET SESSION sql_mode='{SESSION_SQL_MODE}', time_zone='+00:00', "
    "unique_checks=1, foreign_key_checks=1, sql_auto_is_null=0, "
    f"completion_type='NO_CHAIN', sql_select_limit={SELECT_ANY}"
)
# MySQL 8 lets only a user with SESSION_VARIABLES_ADMIN set it, MariaDB < 10.10 no
# session at all: tried on its own, and left as the server has it when refused.
EXPLICIT_DEFAULTS = "SET SESSION explicit_defaults_for_timestamp = ON"
# read-only variable, access denied (needs a privilege), unknown variable
CANNOT_SET = frozenset({1238, 1227, 1193})
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def make_engine(mysql: MysqlConfig) -> Engine:
    """Create the engine for ``mysql``; raises ConfigError when no password is set."""
    url = make_url(mysql.url).set(password=mysql_password(mysql))
    if mysql.local_infile:
        _warn_unless_verified(url.host, mysql)
    engine = create_engine(
        url,
        pool_pre_ping=True,
        pool_size=3,
        isolation_level="REPEATABLE READ",
        hide_parameters=True,
        connect_args={
            "init_command": SESSION_SETTINGS,
            "charset": "utf8mb4",
            "local_infile": mysql.local_infile,
            "read_timeout": mysql.read_timeout,
            **mysql.tls,
        },
    )

    @event.listens_for(engine, "do_connect")
    def _guarded(dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
        try:
            return GuardedConnection(*cargs, **cparams)
        except OSError as e:  # network errors arrive as the driver's own errors
            raise ConfigError(
                "mysql.tls: PyMySQL cannot load the TLS files "
                f"({', '.join(f'{k} = {v!r}' for k, v in mysql.tls.items())}): "
                f"{first_line(e)}"
            ) from None

    @event.listens_for(engine, "connect")
    def _explicit_defaults(dbapi_connection: Any, record: Any) -> None:
        try:
            with dbapi_connection.cursor() as cursor:
                cursor.execute(EXPLICIT_DEFAULTS)
        except pymysql.err.MySQLError as e:
            if error_code(e) not in CANNOT_SET:
                raise

    return engine


def _warn_unless_verified(host: str | None, mysql: MysqlConfig) -> None:
    """Local infile lets the server ask the client for files: on a link to another
    machine, only a verified server is known to be the right one."""
    verified = mysql.tls.get("ssl_verify_cert") and mysql.tls.get("ssl_verify_identity")
    if verified or host is None or host in LOOPBACK:
        return
    log.warning(
        "mysql.local_infile is on without verified TLS (mysql.tls ssl_verify_cert "
        "and ssl_verify_identity): whoever answers for %s, an impostor or anyone in "
        "the middle, may ask this client for local files. The sink sends only the "
        "temporary file of its own LOAD DATA and refuses other requests; verify the "
        "server, or set mysql.local_infile = false",
        host,
    )
