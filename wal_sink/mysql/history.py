"""The tables of a type 2 target (``stored_as_scd_type = 2``): the history table
(the target: a row per version of a key, ``__START_AT`` and ``__END_AT``, its
primary key the key and ``__START_AT``) and, beside it, the events table that keeps
every event applied, from which each touched key's history is computed again
(merge/history.py says why the events are needed).

The events table (``<table>_events``) is made at start with ``CREATE TABLE …
SELECT`` from the history table, so its key and data columns have the history's
types and collations, plus ``_wal_sequence`` (of ``__START_AT``'s type), ``_wal_op``
(``U`` or ``D``; ``O`` or ``C`` for a key's floor), ``_wal_applied_by`` (the
chunk that applied the event and its row in it, indexed: the chunk finds its
events by it) and ``_wal_applied_at`` (UTC, for ``history_retention``); its
primary key is (key, ``_wal_sequence``), as the history's is (key,
``__START_AT``), so it fits wherever the history's key fits: an event seen again
is one row, and a delete replaces an upsert at its sequence (the delete wins
there, merge/history.py). Columns the history gains later are added at the next
start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    func,
    literal_column,
    or_,
    text,
)
from sqlalchemy import inspect as inspect_db
from sqlalchemy.dialects.mysql import Insert, insert
from sqlalchemy.exc import DBAPIError

from wal_sink import faults
from wal_sink.config import Target
from wal_sink.config.spelling import Spelling
from wal_sink.config.table_section import END_AT, START_AT
from wal_sink.errors import ConfigError, first_line
from wal_sink.mysql.engine import SESSION_SQL_MODE
from wal_sink.mysql.errors import error_code
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.tables import ACCESS_DENIED, table_comment

EVENTS_SUFFIX = "_events"
SEQUENCE = "_wal_sequence"
OP = "_wal_op"
APPLIED_BY = "_wal_applied_by"
APPLIED_AT = "_wal_applied_at"
UPSERT, DELETE = "U", "D"
FLOOR_OPEN, FLOOR_CLOSED = "O", "C"
"""A key's floor (history_retention): its events up to the floor's sequence
folded into one row, the record open there (its values) or none."""
TOKEN_INDEX = "_wal_applied_by"
"""The index of events by op and token: the statements that find a chunk's
events (ops U and D) or the floors (O and C) name it, so a growing table is never
scanned for a chunk."""
FLOOR = "floor"
"""The ``_wal_applied_by`` of every floor."""
ZERO_DATES_KEPT = ",".join(
    m
    for m in SESSION_SQL_MODE.split(",")
    if m not in ("NO_ZERO_DATE", "NO_ZERO_IN_DATE")
)
COMMENT = "wal_sink events of {}"
UNFILLED = "wal_sink: to fill from the history"
"""The comment of an events table's column added and not filled yet."""
SETTINGS = "; settings "


def events_table(target: Target) -> str:
    return f"{target.table}{EVENTS_SUFFIX}"


def events_upsert(events: Table) -> Insert:
    """The INSERT of events: one seen again changes nothing; a delete replaces an
    upsert at its sequence; the first at a floor's sequence marks the floor as its
    own (the chunk sets it aside: what was folded cannot be told apart; the first
    applied stays, as at any sequence). Left to
    right: the op last, as MySQL sees earlier results. Literals, not parameters:
    executemany sends one set per row."""
    stmt = insert(events)
    replaces = and_(
        stmt.inserted[OP] == literal_column(f"'{DELETE}'"),
        events.c[OP] == literal_column(f"'{UPSERT}'"),
    )
    # the first event at a floor marks it (the others there are seen again)
    floor = and_(
        events.c[OP].in_(
            [literal_column(f"'{FLOOR_OPEN}'"), literal_column(f"'{FLOOR_CLOSED}'")]
        ),
        events.c[APPLIED_BY] == literal_column(f"'{FLOOR}'"),
    )
    return stmt.on_duplicate_key_update(
        [
            (
                APPLIED_BY,
                func.if_(
                    or_(replaces, floor),
                    stmt.inserted[APPLIED_BY],
                    events.c[APPLIED_BY],
                ),
            ),
            (OP, func.if_(replaces, stmt.inserted[OP], events.c[OP])),
        ]
    )


def check_history_table(conn: Connection, target: Target) -> None:
    """Refuse (ConfigError, one line) a target of type 2 whose shape is not a
    history's: ``__START_AT`` and ``__END_AT``, and the primary key (key…,
    ``__START_AT``)."""
    inspector = inspect_db(conn)
    columns = Spelling(c["name"] for c in inspector.get_columns(target.table))
    primary = [
        c.lower()
        for c in inspector.get_pk_constraint(target.table)["constrained_columns"]
    ]
    wanted = [c.lower() for c in (*target.key, START_AT)]
    if START_AT in columns and END_AT in columns and primary == wanted:
        _check_span_types(conn, target)
        return
    raise ConfigError(
        f"table {target.table!r} is not a history table for {target.where}."
        f"stored_as_scd_type = 2: it needs columns {START_AT} and {END_AT} (of the "
        f"version column's type) and the primary key ({', '.join(target.key)}, "
        f"{START_AT}) (its primary key: ({', '.join(primary) or 'none'}))"
    )


def _check_span_types(conn: Connection, target: Target) -> None:
    """``__START_AT`` and ``__END_AT`` of the version column's own type: a
    narrower one (DATETIME beside DATETIME(6), BIGINT beside DECIMAL(10,2)) would
    make two versions one record, the second event counted as seen again."""
    types = {name: kind[0] for name, kind in _definitions(conn, target.table).items()}
    version = types.get((target.version_column or "").lower())
    if version is None:
        return  # the history does not keep the version: the stream's is checked
    for span in (START_AT, END_AT):
        if types[span.lower()] != version:
            raise ConfigError(
                f"table {target.table!r}: {span} is {types[span.lower()]} but the "
                f"version column {target.version_column} is {version}; a history's "
                f"{START_AT} and {END_AT} take the version column's type (two "
                "versions would become one record): ALTER TABLE … MODIFY them"
            )


def ensure_events(engine: Engine, target: Target) -> None:
    """Create the events table of ``target`` if it does not exist, and keep its
    columns in step with the history's (a column added, widened, recollated or
    given another default there is added or changed here): DDL, at start, never
    in a batch. The session allows zero dates meanwhile: a legacy history's zero
    default is copied as it is."""
    name = events_table(target)
    with engine.connect() as conn:
        # the history's defaults are copied, a legacy zero date's too
        conn.execute(text(f"SET SESSION sql_mode = '{ZERO_DATES_KEPT}'"))
        try:
            _keep_in_step(conn, target, name)
        finally:
            conn.execute(text(f"SET SESSION sql_mode = '{SESSION_SQL_MODE}'"))


def _keep_in_step(conn: Connection, target: Target, name: str) -> None:
    """``ensure_events``' work, on one connection."""
    quote = partial(quoted, conn.dialect)
    inspector = inspect_db(conn)
    history = [c["name"] for c in inspector.get_columns(target.table)]
    data = [c for c in history if c not in (START_AT, END_AT)]
    settings = f"{SETTINGS}{history_settings(target)}"
    if not inspector.has_table(name):
        _create_events(conn, target, name, data, settings)
    else:
        _check_settings(conn, target, name, settings)
    _refuse_foreign_rows(conn, target, name)
    indexes = {i["name"]: i["column_names"] for i in inspector.get_indexes(name)}
    alter = partial(_alter, conn, name)
    if indexes.get(TOKEN_INDEX) != [OP, APPLIED_BY]:  # made before the index
        drop = f"DROP KEY {TOKEN_INDEX}, " if TOKEN_INDEX in indexes else ""
        alter(f"{drop}ADD KEY {TOKEN_INDEX} ({OP}, {APPLIED_BY})", "its index")
    if APPLIED_AT not in {c["name"] for c in inspector.get_columns(name)}:
        # made before the time was kept: its events count as older than any
        # retention
        alter(f"ADD COLUMN {APPLIED_AT} DATETIME(6) NULL", "its applied time")
    keyed = {k.lower() for k in target.key}
    have = _definitions(conn, name)
    wanted = _definitions(conn, target.table)
    defaults, had = _defaults(conn, target.table), _defaults(conn, name)
    for column in [*data, START_AT]:
        mine = SEQUENCE if column == START_AT else column
        kind = wanted[column.lower()][:3]
        # a delete's event has no values: only its key and sequence are NOT NULL
        valued = column.lower() not in keyed and column != START_AT
        null = "NULL" if valued else "NOT NULL"
        # an event of a stream without the column takes what a record does
        default = defaults.get(column.lower()) if valued else None
        if have.get(mine.lower()) == (*kind, null) and (
            not valued or had.get(mine.lower()) == default
        ):
            continue
        change = "MODIFY" if mine.lower() in have else "ADD COLUMN"
        mark = f" COMMENT '{UNFILLED}'" if change == "ADD COLUMN" else ""
        alter(
            f"{change} {quote(mine)} {_column_type(kind)} {null}"
            f"{_default_clause(default)}{mark}",
            f"the history's column {column} as it is now",
        )
    _fill_from_records(conn, target, name, wanted, alter)


def _create_events(
    conn: Connection, target: Target, name: str, data: list[str], settings: str
) -> None:
    """``CREATE TABLE … SELECT`` from the history: its types and defaults (an
    event of a stream without a column takes what a record does)."""
    quote = partial(quoted, conn.dialect)
    keys = ", ".join(quote(k) for k in target.key)
    conn.execute(
        text(
            f"CREATE TABLE {quote(name)} ({OP} CHAR(1) NOT NULL, "
            f"{APPLIED_BY} CHAR(32) NOT NULL, {APPLIED_AT} DATETIME(6) NULL, "
            f"PRIMARY KEY ({keys}, {SEQUENCE}), KEY {TOKEN_INDEX} "
            f"({OP}, {APPLIED_BY})) ENGINE=InnoDB "
            f"COMMENT='{COMMENT.format(target.table)}{settings}' SELECT "
            + ", ".join(quote(c) for c in data)
            + f", {quote(START_AT)} AS {SEQUENCE}, '' AS {OP}, '' AS "
            f"{APPLIED_BY} FROM {quote(target.table)} WHERE FALSE"
        )
    )


def _alter(conn: Connection, events: str, change: str, needs: str) -> None:
    """``ALTER TABLE events change``, or one line naming the statement to run
    when this user may not (an events table of an earlier build, a history
    changed since)."""
    statement = f"ALTER TABLE {quoted(conn.dialect, events)} {change}"
    try:
        conn.execute(text(statement))
    except DBAPIError as e:
        if error_code(e) not in ACCESS_DENIED:
            raise
        raise ConfigError(
            f"the events table {events} needs {needs} and this user may not ALTER "
            f"it ({first_line(e.orig)}): run, as a user who may, {statement}"
        ) from None


def _defaults(conn: Connection, table: str) -> dict[str, str | None]:
    """Each column's DEFAULT as its DDL says it (None: none, or NULL), by
    lower-case name."""
    return {
        c["name"].lower(): c.get("default") for c in inspect_db(conn).get_columns(table)
    }


def _default_clause(default: str | None) -> str:
    return "" if default is None else f" DEFAULT {default}"


def _column_type(kind: tuple[str, ...]) -> str:
    """A column's type for its DDL, from ``_definitions``' (type, character
    set, collation, …)."""
    column_type, charset, collation = kind[:3]
    if not collation:
        return column_type
    return f"{column_type} CHARACTER SET {charset} COLLATE {collation}"


def _fill_from_records(
    conn: Connection,
    target: Target,
    events: str,
    kept: dict[str, tuple[str, ...]],
    alter: Callable[[str, str], None],
) -> None:
    """Columns the history gained (an ALTER filled its rows with the default):
    each event with values takes the value of the record it falls in, so a key's
    records computed again from its events keep what the rows hold. Such a
    column is added to the events table marked UNFILLED, the mark dropped once
    the fill is committed: a start stopped in between fills it at the next.
    ``kept``: the history's columns (``_definitions``')."""
    marked = list(
        conn.execute(
            text(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t AND "
                "COLUMN_COMMENT = :c"
            ),
            {"t": events, "c": UNFILLED},
        ).scalars()
    )
    if not marked:
        return
    faults.hit("history.before_fill", 0)
    quote = partial(quoted, conn.dialect)
    # one dropped from the history since: nothing to fill
    if filled := [c for c in marked if c.lower() in kept]:
        keys = " AND ".join(f"e.{quote(k)} = h.{quote(k)}" for k in target.key)
        sets = ", ".join(f"e.{quote(c)} = h.{quote(c)}" for c in filled)
        conn.execute(
            text(
                f"UPDATE {quote(events)} e JOIN {quote(target.table)} h ON {keys} "
                f"AND h.{quote(START_AT)} <= e.{SEQUENCE} AND (h.{quote(END_AT)} "
                f"IS NULL OR e.{SEQUENCE} < h.{quote(END_AT)}) SET {sets} WHERE "
                f"e.{OP} IN ('{UPSERT}', '{FLOOR_OPEN}')"
            )
        )
        conn.commit()
    have, defaults = _definitions(conn, events), _defaults(conn, events)
    for column in marked:
        kind = have[column.lower()]
        alter(
            f"MODIFY {quote(column)} {_column_type(kind)} {kind[3]}"
            f"{_default_clause(defaults.get(column.lower()))}",
            f"its column {column} marked filled",
        )


def history_settings(target: Target) -> str:
    """What makes a history of the same events differ: the tracked columns (as
    the config lists them, lower case) and ``ignore_null_updates``; a digest."""
    tracked = (
        "*" if target.tracked is None else sorted(c.lower() for c in target.tracked)
    )
    said = f"{tracked}|{sorted(c.lower() for c in target.untracked)}|"
    said += str(target.ignore_null_updates)
    return hashlib.sha256(said.encode()).hexdigest()[:12]


def _check_settings(conn: Connection, target: Target, name: str, settings: str) -> None:
    """Refuse an events table of another table, or one kept under other history
    settings (a second sink, or this one's changed: the records of keys touched
    since would follow the new settings, the others the old); take one made before
    the settings were recorded as this sink's."""
    comment = table_comment(conn, name)
    base, _, kept = comment.partition(SETTINGS)
    if base != COMMENT.format(target.table):
        raise ConfigError(
            f"table {name} is not the events table of {target.table}; rename "
            "it: a history table's events are kept under that name"
        )
    if not kept:
        conn.execute(
            text(f"ALTER TABLE {quoted(conn.dialect, name)} COMMENT = :c"),
            {"c": base + settings},
        )
    elif SETTINGS + kept != settings:
        raise ConfigError(
            f"the history {target.table} was kept with other settings than "
            f"{target.where}'s (track_history_column_list, "
            "track_history_except_column_list, ignore_null_updates): records "
            "computed under two would mix. Give every sink of the table the same "
            "settings; to change them, start from an empty history and events table"
        )


def _definitions(conn: Connection, table: str) -> dict[str, tuple[str, ...]]:
    """Each column's (type, character set, collation, NULL or NOT NULL), by
    lower-case name."""
    rows = conn.execute(
        text(
            "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, "
            "IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
            "DATABASE() AND TABLE_NAME = :t"
        ),
        {"t": table},
    )
    return {
        name.lower(): (
            kind,
            charset,
            collation,
            "NULL" if null == "YES" else "NOT NULL",
        )
        for name, kind, charset, collation, null in rows
    }


def _refuse_foreign_rows(conn: Connection, target: Target, events: str) -> None:
    """A history holding rows while its events table holds none (a table filled
    elsewhere, or events dropped by hand): each key's next event would replace
    its rows by the history of the sink's events alone."""
    quote = partial(quoted, conn.dialect)
    rows = conn.execute(text(f"SELECT 1 FROM {quote(target.table)} LIMIT 1")).first()
    kept = conn.execute(text(f"SELECT 1 FROM {quote(events)} LIMIT 1")).first()
    if rows and not kept:
        raise ConfigError(
            f"table {target.table} holds rows but its events table {events} holds "
            "no event: a history is computed from the events the sink applied, and "
            "each key's next event would replace its rows. Start from an empty "
            "history table"
        )
