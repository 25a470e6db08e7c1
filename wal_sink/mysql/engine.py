"""The SQLAlchemy engine every MySQL conversation of the sink goes through.

Sessions run in strict SQL mode (bad values fail instead of being truncated) and in
UTC, so timestamps staged by Spark land unchanged, with utf8mb4 text. The password
is taken from the environment or a file at engine creation and never appears in
config or logs; TLS options from ``mysql.tls`` go to PyMySQL unchanged. Connections
are ``GuardedConnection``: with ``mysql.local_infile`` on they send the server only
the file of the sink's own LOAD DATA (with it off the client does not even offer
local files), and the password goes in clear text only to a verified server.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from wal_sink.config import MysqlConfig, mysql_password
from wal_sink.errors import ConfigError, first_line
from wal_sink.mysql.guarded_connection import GuardedConnection

log = logging.getLogger(__name__)

SESSION_SQL_MODE = (
    "STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
    "NO_ENGINE_SUBSTITUTION"
)
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
            "init_command": f"SET SESSION sql_mode='{SESSION_SQL_MODE}', "
            "time_zone='+00:00'",
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
