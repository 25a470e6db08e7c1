"""The PyMySQL connection every session of the sink's engine is: a hostile server, or
anyone in the middle of a connection whose server is not verified, cannot make it
hand over local files or the password.

Local files. In the MySQL protocol the *server* names the file the client sends for
``LOAD DATA LOCAL INFILE``, in its reply to any statement; PyMySQL, with
``local_infile`` on, sends whatever file is named — ``/proc/self/environ`` (the MySQL
password and S3 keys live there) in reply to the lease check, say. This connection
sends a file only while the sink executes the LOAD DATA of that very file on it
(``serving``), and answers any other request with an empty file, logs it and fails
the statement.

The password. A server may switch authentication to a plugin that takes the
password in clear text (``mysql_clear_password``, ``dialog``); PyMySQL sends it. This
connection does so only over TLS that verified the server (``mysql.tls``
``ssl_verify_cert`` and ``ssl_verify_identity``), as the MySQL client does only when
told to.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pymysql import err
from pymysql.connections import Connection, MySQLResult
from pymysql.constants import CR

log = logging.getLogger(__name__)

# CR_UNKNOWN_ERROR: neither transient nor a row's fault, so the sink stops.
FILE_REFUSED = CR.CR_UNKNOWN_ERROR
CLEAR_TEXT_PLUGINS = (b"mysql_clear_password", b"dialog")


class GuardedConnection(Connection):
    """A PyMySQL connection that serves LOAD DATA LOCAL only its current file and
    gives the password in clear text only to a verified server."""

    _serving: bytes | None = None

    @contextmanager
    def serving(self, path: str) -> Iterator[None]:
        """Allow the server to ask for ``path`` (and nothing else) meanwhile."""
        self._serving = path.encode(self.encoding)
        try:
            yield
        finally:
            self._serving = None

    @property
    def verified(self) -> bool:
        """TLS is on and checked the server's certificate and name."""
        ctx: ssl.SSLContext | None = getattr(self, "ctx", None)
        return bool(
            self._secure
            and ctx is not None
            and ctx.verify_mode == ssl.CERT_REQUIRED
            and ctx.check_hostname
        )

    def _read_query_result(self, unbuffered: bool = False) -> int:
        # PyMySQL's own, with the guarded reader of the server's first reply: the
        # one place a request for a local file arrives.
        self._result = None
        result = _GuardedResult(self)
        if unbuffered:
            result.init_unbuffered_query()
        else:
            result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows

    def _process_auth(self, plugin_name: bytes, auth_packet: Any, handler=None) -> Any:
        # Every authentication method the server switches to passes here.
        if plugin_name in CLEAR_TEXT_PLUGINS and not self.verified:
            log.error(
                "the MySQL server asked for the password in clear text (%s) over a "
                "connection whose server is not verified; refused",
                plugin_name.decode("ascii", "replace"),
            )
            raise err.OperationalError(
                CR.CR_AUTH_PLUGIN_ERR,
                f"the server asked for the password in clear text "
                f"({plugin_name.decode('ascii', 'replace')}) but TLS does not verify "
                "it (mysql.tls ssl_verify_cert and ssl_verify_identity); refused",
            )
        return super()._process_auth(plugin_name, auth_packet, handler)


class _GuardedResult(MySQLResult):
    def _read_load_local_packet(self, first_packet: Any) -> None:
        conn: GuardedConnection = self.connection
        requested = first_packet.get_all_data()[1:]
        if conn._local_infile and requested == conn._serving:
            super()._read_load_local_packet(first_packet)
            return
        name = requested.decode("utf-8", "replace")[:200]
        log.error(
            "the MySQL server asked for the local file %r, which is not the file of "
            "a LOAD DATA the sink is running; refused (nothing sent)",
            name,
        )
        conn.write_packet(b"")  # an empty file ends the transfer
        conn._read_packet()  # the server's reply (an error is raised here)
        raise err.OperationalError(
            FILE_REFUSED,
            f"the server asked for the local file {name!r}, which is not the sink's "
            "own; refused",
        )
