"""The client side of ``LOAD DATA LOCAL INFILE``, reduced to the sink's own file.

In the MySQL protocol the *server* names the file the client sends, in its reply to
any statement; PyMySQL, with ``local_infile`` on, sends whatever file is named. A
rogue server, or anyone in the middle of a connection whose server is not verified,
could ask for ``/proc/self/environ`` (the MySQL password and S3 keys live there) in
reply to the lease check. Every connection the sink's engine makes is a
``GuardedConnection``: it sends a file only while the sink executes the LOAD DATA of
that very file (``serving``), on that connection, and answers any other request with
an empty file, logs it and fails the statement.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from pymysql import err
from pymysql.connections import Connection, MySQLResult

log = logging.getLogger(__name__)

# CR_UNKNOWN_ERROR: neither transient nor a row's fault, so the sink stops.
REFUSED = 2000


class GuardedConnection(Connection):
    """A PyMySQL connection that serves LOAD DATA LOCAL only its current file."""

    _serving: bytes | None = None

    @contextmanager
    def serving(self, path: str) -> Iterator[None]:
        """Allow the server to ask for ``path`` (and nothing else) meanwhile."""
        self._serving = path.encode(self.encoding)
        try:
            yield
        finally:
            self._serving = None

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


class _GuardedResult(MySQLResult):
    def _read_load_local_packet(self, first_packet) -> None:
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
            REFUSED,
            f"the server asked for the local file {name!r}, which is not the sink's "
            "own; refused",
        )
