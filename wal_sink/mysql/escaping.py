"""Whether values written as SQL text are read back as written on a session.

The fast paths render values with backslash escapes in utf8mb4 text
(``arrow_text``). That is exact only on a session without ``NO_BACKSLASH_ESCAPES``
(there a backslash is an ordinary character and the quote after it ends the string)
and whose client character set is utf8mb4 (in gbk, big5 or sjis the byte before a
backslash may swallow it: ``0xbf 0x5c`` is one character, and the escaped quote
becomes a real one). The sink's own engine sets both, but a caller may hand
``WalSink``/``SinkInstance`` an engine of its own, and any connection can be changed
by a ``SET NAMES``; so each batch checks the connection it writes through.

The driver's own escaping knows ``NO_BACKSLASH_ESCAPES`` (from the server's status
flag) and is exact in any character set it encodes with itself; it is not when the
server reads another one than the driver writes, which no escaping can repair.
"""

from __future__ import annotations

from pymysql.charset import charset_by_name
from sqlalchemy import Connection

from wal_sink.errors import TerminalError

RENDERED_CHARSET = "utf8mb4"


def renders_exactly(conn: Connection, sink_id: str | None = None) -> bool:
    """True when the project's rendering may be sent on ``conn``; False leaves the
    values to the driver.

    Raises:
        TerminalError: the server reads the client's text in another character set
            than the driver encodes it in: no value can be sent safely.
    """
    charset, sql_mode = conn.exec_driver_sql(
        "SELECT @@character_set_client, @@sql_mode"
    ).one()
    driver = getattr(conn.connection.dbapi_connection, "encoding", None)
    try:
        read_as = charset_by_name(charset).encoding
    except KeyError:
        read_as = None
    if driver is not None and read_as != driver:
        raise TerminalError(
            f"the MySQL session reads client text as {charset} but the driver writes "
            f"{driver}: values would change, and quotes in them could end a string. "
            "Leave the session's character set to the engine (no SET NAMES)",
            sink_id=sink_id,
        )
    return (
        charset == RENDERED_CHARSET
        and "NO_BACKSLASH_ESCAPES" not in sql_mode.upper().split(",")
    )
