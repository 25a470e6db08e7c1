"""Names of tables and columns in the SQL text the sink builds itself — its DDL (run
through ``text()`` or shown by ``--print-ddl``) and its hand-written reads — quoted
once, here. Statements made of SQLAlchemy's constructs (``Table``, ``insert``,
``select``) quote their names themselves.

SQLAlchemy's ``identifier_preparer.quote`` alone is not enough: for PyMySQL's
``%``-formatting it doubles a ``%`` in the name, and ``text()`` doubles every ``%``
of its text once more, so the driver's formatting, which undoes one doubling, sent a
column ``pct%`` to the server as ``pct%%``.
"""

from __future__ import annotations

from sqlalchemy.engine import Dialect

PERCENT_DOUBLING = ("format", "pyformat")
"""Parameter styles for which SQLAlchemy's quoting doubles a ``%``."""


def quoted(dialect: Dialect, name: str) -> str:
    """``name`` as SQLAlchemy quotes it (in backticks where MySQL needs them, a
    backtick doubled), without the doubled ``%``: as MySQL reads it, and as
    ``text()`` sends it."""
    quoted = dialect.identifier_preparer.quote(name)
    if dialect.paramstyle in PERCENT_DOUBLING:
        quoted = quoted.replace("%%", "%")
    return quoted
