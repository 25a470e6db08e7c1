"""Which columns of the row being written a BEFORE trigger may set, read from its
body: ``SET NEW.col =`` (or ``NEW.col :=`` in a SET list), ``SELECT … INTO
NEW.col``, and ``CALL proc(…, NEW.col, …)`` where the procedure's parameter in that
position is OUT or INOUT (information_schema.PARAMETERS; an IN parameter only reads
the value). A procedure this user cannot see, or whose parameter in that position
it cannot see, may set the column: it counts as setting it, and says so.

The body is read as text, not parsed: such words in a string or a comment count
too, so a trigger is refused once too often rather than once too few.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import Connection, text

from wal_sink.mysql.target_profile import Trigger

NAME = r"`(?:[^`]|``)+`|\w+"
# ``SET NEW.col =``, ``…, NEW.col :=`` in a SET list, ``SELECT … INTO NEW.col``
NEW_ASSIGNED = re.compile(
    rf"(?:(?:\bSET|,)\s*NEW\s*\.\s*({NAME})\s*:?=)|(?:\bINTO\s+NEW\s*\.\s*({NAME}))",
    re.IGNORECASE,
)
CALL = re.compile(rf"\bCALL\s+({NAME})(?:\s*\.\s*({NAME}))?\s*\(", re.IGNORECASE)
NEW_COLUMN = re.compile(rf"NEW\s*\.\s*({NAME})", re.IGNORECASE)
WRITING_MODES = ("OUT", "INOUT")


@dataclass(frozen=True)
class Assignment:
    """A column the trigger sets (``certain``) or may set, and how."""

    column: str
    through: str
    """How, when not by ``SET`` or ``INTO``: the procedure and its parameter."""
    certain: bool = True
    procedure: str = ""
    """The procedure this user cannot see (with ``certain`` False)."""


def assignments(conn: Connection, trigger: Trigger) -> Iterator[Assignment]:
    """Each column of NEW that ``trigger``'s body sets or may set."""
    for match in NEW_ASSIGNED.finditer(trigger.statement):
        yield Assignment(_unquoted(match.group(1) or match.group(2)), "")
    for match in CALL.finditer(trigger.statement):
        schema, name = match.group(1, 2) if match.group(2) else (None, match.group(1))
        schema, procedure = schema and _unquoted(schema), _unquoted(name)
        arguments = _arguments(trigger.statement, match.end())
        passed = {
            position: _unquoted(found.group(1))
            for position, argument in enumerate(arguments, 1)
            if (found := NEW_COLUMN.fullmatch(argument.strip()))
        }
        if not passed:
            continue
        modes = _modes(conn, schema, procedure)
        for position, column in passed.items():
            mode = modes.get(position)
            if mode is None:
                yield Assignment(
                    column,
                    f", through procedure {procedure}, whose parameters this user "
                    "cannot see",
                    certain=False,
                    procedure=f"{schema}.{procedure}" if schema else procedure,
                )
            elif mode.upper() in WRITING_MODES:
                yield Assignment(
                    column,
                    f", through procedure {procedure} (its {mode.upper()} parameter "
                    f"{position})",
                )


def _modes(conn: Connection, schema: str | None, procedure: str) -> dict[int, str]:
    """The procedure's parameter modes by position, those this user can see (the
    server shows a user only the routines it holds a privilege on)."""
    return dict(
        conn.execute(
            text(
                "SELECT ORDINAL_POSITION, PARAMETER_MODE "
                "FROM information_schema.PARAMETERS "
                "WHERE SPECIFIC_SCHEMA = COALESCE(:s, DATABASE()) "
                "AND SPECIFIC_NAME = :n AND ROUTINE_TYPE = 'PROCEDURE'"
            ),
            {"s": schema, "n": procedure},
        ).all()
    )


def _arguments(body: str, start: int) -> list[str]:
    """The arguments of the call whose ``(`` ends at ``start``, split at its own
    commas (not those inside parentheses or quotes)."""
    arguments: list[str] = []
    current: list[str] = []
    depth, quote, i = 0, "", start
    while i < len(body):
        ch = body[i]
        current.append(ch)
        if quote:
            if ch == "\\" and quote != "`":
                current.append(body[i + 1 : i + 2])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif depth and ch == ")":
            depth -= 1
        elif not depth and ch in ",)":
            arguments.append("".join(current[:-1]))
            current = []
            if ch == ")":
                break
        i += 1
    return arguments


def _unquoted(name: str) -> str:
    return name.strip("`").replace("``", "`") if name.startswith("`") else name
