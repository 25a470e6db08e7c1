"""The target's profile: what about the table and the server changes what an
``INSERT … ON DUPLICATE KEY UPDATE`` or a delete by key does, read from
information_schema in one place (docs/merge.md, "The target's shape").

Columns (types, NULLability, defaults, ``ON UPDATE``, AUTO_INCREMENT, generated),
foreign keys both ways with their actions, triggers, and the session settings the
engine pins (engine.py) as the session really has them. ``write_checks.py`` decides
from it what a stream may write; unique indexes are ``unique_keys.py``'s.

The server shows a user only the triggers of tables it holds the TRIGGER privilege
on, so "no trigger" is known only with that privilege: ``triggers`` is None without
it, and the checks say so instead of assuming there are none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Column, Connection, text

# As information_schema shows them: MariaDB ``current_timestamp()``,
# ``current_timestamp(3)``; MySQL 8 ``CURRENT_TIMESTAMP``, ``CURRENT_TIMESTAMP(3)``.
NOW = re.compile(r"current_timestamp(?:\((\d*)\))?", re.IGNORECASE)
ON_UPDATE_NOW = re.compile(r"on update " + NOW.pattern, re.IGNORECASE)


@dataclass(frozen=True)
class ColumnFacts:
    name: str
    data_type: str
    """Lower case, e.g. ``int``, ``timestamp``."""
    column_type: str
    """As the server shows it, e.g. ``int(10) unsigned``, ``enum('a','B')``."""
    nullable: bool
    default: str | None
    """As information_schema has it: None when there is none, ``NULL`` for a
    NULL default, a quoted literal or an expression otherwise."""
    extra: str
    """Lower case: ``auto_increment``, ``on update current_timestamp()``,
    ``stored generated``…"""
    generated: bool
    collation: str | None = None
    """Lower case; None for a column that holds no text."""

    @property
    def on_update(self) -> bool:
        return "on update" in self.extra

    @property
    def auto_increment(self) -> bool:
        return "auto_increment" in self.extra

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type.lower()

    @property
    def now_on_insert(self) -> int | None:
        """A DATETIME column whose default is CURRENT_TIMESTAMP: the fractional
        digits of that default (None for any other column). MySQL fills it with the
        inserting session's wall clock; a TIMESTAMP holds an instant instead."""
        if self.data_type != "datetime" or self.default is None:
            return None
        return _digits(NOW.fullmatch(self.default.strip()))

    @property
    def now_on_update(self) -> int | None:
        """A DATETIME column with ON UPDATE CURRENT_TIMESTAMP: the fractional digits
        of that clause (None for any other column)."""
        if self.data_type != "datetime":
            return None
        return _digits(ON_UPDATE_NOW.search(self.extra))

    @property
    def fills_itself(self) -> bool:
        """An insert that does not name it still gives it a value."""
        return (
            self.nullable
            or self.default is not None
            or self.auto_increment
            or self.generated
        )


@dataclass(frozen=True)
class ForeignKey:
    name: str
    child: str
    columns: tuple[str, ...]
    parent: str
    on_delete: str
    """CASCADE, SET NULL, RESTRICT, NO ACTION or SET DEFAULT."""


@dataclass(frozen=True)
class Trigger:
    name: str
    timing: str
    """BEFORE or AFTER."""
    event: str
    """INSERT, UPDATE or DELETE."""
    statement: str


@dataclass(frozen=True)
class TargetProfile:
    table: str
    columns: dict[str, ColumnFacts]
    parents: tuple[ForeignKey, ...]
    """The target's own foreign keys: a row without its parent is refused (1452)."""
    children: tuple[ForeignKey, ...]
    """Other tables' foreign keys to the target: a delete cascades or is refused."""
    triggers: tuple[Trigger, ...] | None
    """None when this user may not see them (no TRIGGER privilege)."""
    user: str
    sql_mode: frozenset[str]
    """As this session has it."""

    def column(self, name: str) -> ColumnFacts | None:
        return self.columns.get(name.lower())


def deletes_may_fail(profile: TargetProfile) -> bool:
    """Whether MySQL may refuse a delete of the target's rows: a child table's
    foreign key that neither cascades nor sets NULL, a trigger on delete, or
    triggers this user cannot see."""
    return (
        profile.triggers is None
        or any(t.event.upper() == "DELETE" for t in profile.triggers)
        or any(k.on_delete not in ("CASCADE", "SET NULL") for k in profile.children)
    )


def read_profile(conn: Connection, table: str) -> TargetProfile:
    """The profile of ``table`` (in the connection's database) as seen on ``conn``."""
    columns = read_columns(conn, table)
    keys = _foreign_keys(conn, table)
    user, sql_mode = conn.execute(
        text("SELECT CURRENT_USER(), @@SESSION.sql_mode")
    ).one()
    return TargetProfile(
        table=table,
        columns=columns,
        parents=tuple(k for k in keys if k.child.lower() == table.lower()),
        children=tuple(k for k in keys if k.parent.lower() == table.lower()),
        triggers=_triggers(conn, table, user),
        user=user,
        sql_mode=frozenset(m for m in (sql_mode or "").upper().split(",") if m),
    )


COLUMN_FACTS = "wal_sink_column_facts"
"""Where a column the sink reflected keeps its ColumnFacts, in its ``info``."""


def facts_of(column: Column) -> ColumnFacts | None:
    """What information_schema says of a reflected column (mysql/target.py)."""
    return column.info.get(COLUMN_FACTS)


def read_columns(conn: Connection, table: str) -> dict[str, ColumnFacts]:
    """The columns of ``table`` by lower-case name, in the table's order."""
    return {
        name.lower(): ColumnFacts(
            name,
            data_type.lower(),
            column_type,
            nullable == "YES",
            default,
            (extra or "").lower(),
            bool(generation) or "generated" in (extra or "").lower(),
            collation.lower() if collation else None,
        )
        for name, data_type, column_type, nullable, default, extra, generation, (
            collation
        ) in (
            conn.execute(
                text(
                    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, "
                    "COLUMN_DEFAULT, EXTRA, GENERATION_EXPRESSION, COLLATION_NAME "
                    "FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t "
                    "ORDER BY ORDINAL_POSITION"
                ),
                {"t": table},
            )
        )
    }


def _foreign_keys(conn: Connection, table: str) -> list[ForeignKey]:
    """The foreign keys from ``table`` and to it, within its database."""
    rows = conn.execute(
        text(
            "SELECT r.CONSTRAINT_NAME, r.TABLE_NAME, r.REFERENCED_TABLE_NAME, "
            "r.DELETE_RULE, k.COLUMN_NAME "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS r "
            "JOIN information_schema.KEY_COLUMN_USAGE k "
            "ON k.CONSTRAINT_SCHEMA = r.CONSTRAINT_SCHEMA "
            "AND k.CONSTRAINT_NAME = r.CONSTRAINT_NAME AND k.TABLE_NAME = r.TABLE_NAME "
            "WHERE r.CONSTRAINT_SCHEMA = DATABASE() "
            "AND (r.TABLE_NAME = :t OR r.REFERENCED_TABLE_NAME = :t) "
            "ORDER BY r.TABLE_NAME, r.CONSTRAINT_NAME, k.ORDINAL_POSITION"
        ),
        {"t": table},
    ).all()
    found: dict[tuple[str, str], ForeignKey] = {}
    for name, child, parent, on_delete, column in rows:
        known = found.get((child, name))
        columns = (*known.columns, column) if known else (column,)
        found[(child, name)] = ForeignKey(name, child, columns, parent, on_delete)
    return list(found.values())


def _triggers(conn: Connection, table: str, user: str) -> tuple[Trigger, ...] | None:
    """The table's triggers, or None when this user may not see them."""
    if not _may_see_triggers(conn, table, user):
        return None
    return tuple(
        Trigger(*row)
        for row in conn.execute(
            text(
                "SELECT TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, "
                "ACTION_STATEMENT FROM information_schema.TRIGGERS "
                "WHERE EVENT_OBJECT_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = :t "
                "ORDER BY ACTION_ORDER"
            ),
            {"t": table},
        )
    )


def _may_see_triggers(conn: Connection, table: str, user: str) -> bool:
    """Whether ``user`` holds TRIGGER on the table, its database or globally: only
    then does information_schema.TRIGGERS show the table's triggers."""
    name, _, host = user.rpartition("@")
    grantee = f"'{name}'@'{host}'"
    return bool(
        conn.execute(
            text(
                "SELECT 1 FROM information_schema.USER_PRIVILEGES "
                "WHERE GRANTEE = :g AND PRIVILEGE_TYPE = 'TRIGGER' "
                "UNION ALL SELECT 1 FROM information_schema.SCHEMA_PRIVILEGES "
                "WHERE GRANTEE = :g AND PRIVILEGE_TYPE = 'TRIGGER' "
                "AND TABLE_SCHEMA = DATABASE() "
                "UNION ALL SELECT 1 FROM information_schema.TABLE_PRIVILEGES "
                "WHERE GRANTEE = :g AND PRIVILEGE_TYPE = 'TRIGGER' "
                "AND TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
            ),
            {"g": grantee, "t": table},
        ).first()
    )


def _digits(found: re.Match[str] | None) -> int | None:
    """The fractional digits a ``CURRENT_TIMESTAMP(n)`` match names (0 without n)."""
    return None if found is None else int(found.group(1) or 0)
