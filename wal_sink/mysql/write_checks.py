"""What a stream may write into the target: each property of the target (its
profile, target_profile.py) that would make an upsert mean something else than the
config says is refused here, with one line naming it and the way out, before
anything is written (docs/merge.md, "The target's shape").

The rest is made to mean what the config says elsewhere: the engine pins the session
(engine.py), and every upsert assigns each key and ``keep`` column to itself
(upsert.py). What is left here is what no statement can repair:

- a stream column the table lacks (without ``mysql.auto_evolve``);
- a column the config names (key, merge, version, CDC op and order) that the stream
  lacks: a version guard or a merge policy would silently not apply;
- a key or ``keep`` column MySQL updates by itself (``ON UPDATE CURRENT_TIMESTAMP``):
  any update of the row, another writer's included, changes it;
- a stream column MySQL computes (generated), or a NOT NULL column without a
  default that the stream does not write: every upsert is refused;
- an AUTO_INCREMENT column the stream writes on a session without
  ``NO_AUTO_VALUE_ON_ZERO`` (a 0 becomes the next value): only with an engine that
  is not the sink's (the sink's pins it);
- a BEFORE INSERT / UPDATE trigger that sets ``NEW.<column>`` of a column the
  stream writes, itself or through a procedure (trigger_writes.py): the row would
  end as the trigger says;
- another unique index the stream reaches (unique_keys.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sqlalchemy import Connection

from wal_sink.config import Config, Target
from wal_sink.config.table_section import END_AT, START_AT
from wal_sink.errors import ConfigError
from wal_sink.merge.modes import changes_by_itself
from wal_sink.mysql.table_ddl import table_columns
from wal_sink.mysql.target_profile import TargetProfile, read_profile
from wal_sink.mysql.trigger_writes import assignments
from wal_sink.mysql.unique_keys import refuse_unique_conflicts


def check_writes(
    conn: Connection, config: Config, target: Target, columns: Iterable[str]
) -> TargetProfile:
    """Raise ConfigError when a stream of ``columns`` (the columns ``target``
    receives; empty: not known yet) cannot be written into it as the config says;
    return the profile read."""
    columns = list(columns)
    if columns:
        refuse_missing_named(config, target, columns)
    profile = read_profile(conn, target.table)
    written = [c for c in columns if not config.cdc or c != config.cdc.op_column]
    if target.scd_type == 2 and written:
        # a history: the sink writes each record's span, and it keys the rows
        written += [START_AT, END_AT]
        target = dataclasses.replace(target, key=(*target.key, START_AT))
    _refuse_by_role(profile, target)
    if written:
        _refuse_computed(profile, written)
        _refuse_unfilled(profile, written)
        _refuse_unpinned(profile, written)
        _refuse_rewriting_triggers(conn, profile, written)
    refuse_unique_conflicts(conn, target, profile, written)
    return profile


def refuse_lacking(
    conn: Connection, config: Config, target: Target, received: list[str]
) -> None:
    """Refuse a stream column ``target`` receives and does not have (before, the
    first batch failed to apply); names compare ignoring case."""
    op = config.cdc.op_column.lower() if config.cdc else None
    have = {c.lower() for c in table_columns(conn, target.table)}
    lacking = [c for c in received if c.lower() not in have | {op}]
    if lacking:
        raise ConfigError(
            f"stream column {lacking[0]!r} is not a column of table "
            f"{target.table}: add it to the table, leave it out of the stream "
            "([transform]), or set mysql.auto_evolve = true"
        )


def refuse_missing_named(
    config: Config, target: Target, columns: Iterable[str]
) -> None:
    """Every column the config names for ``target`` must be one it receives."""
    columns = list(columns)
    have = {c.lower() for c in columns}
    cdc, where = config.cdc, target.where
    named = [(f"{where}.key", k) for k in target.key]
    named += [(f"{where}.merge.{c}", c) for c in target.merge]
    if target.version_column:
        named.append((f"{where}.version_column", target.version_column))
    if cdc:
        named.append(("cdc.op_column", cdc.op_column))
        if not config.mysql.route_column:
            named.append(("cdc.order_by", cdc.order_by))
    for setting, column in named:
        if column.lower() not in have:
            them = "the stream" if target.route is None else f"table {target.table}"
            raise ConfigError(
                f"{setting} names column {column!r}, which {them} does not have "
                f"(its columns: {', '.join(columns)}): the setting would silently "
                "not apply. Add the column to the stream ([transform]) or remove "
                "the setting"
            )


def _refuse_by_role(profile: TargetProfile, target: Target) -> None:
    """A key column MySQL changes by itself, and a column its merge mode cannot
    work on (merge/modes.py), are refused."""
    for key in target.key:
        facts = profile.column(key)
        if facts is not None and facts.on_update:
            raise ConfigError(
                changes_by_itself(facts, profile.table, "a key column", "")
            )
    for column in target.merge:
        facts = profile.column(column)
        refusal = facts and target.mode(column).refusal(
            facts, target.where, profile.table
        )
        if refusal:
            raise ConfigError(refusal)


def _refuse_computed(profile: TargetProfile, written: list[str]) -> None:
    for column in written:
        facts = profile.column(column)
        if facts is not None and facts.generated:
            raise ConfigError(
                f"column {facts.name} of table {profile.table} is generated: MySQL "
                "refuses a value for it. Leave it out of the stream"
            )


def _refuse_unfilled(profile: TargetProfile, written: list[str]) -> None:
    have = {c.lower() for c in written}
    for facts in profile.columns.values():
        if facts.name.lower() not in have and not facts.fills_itself:
            raise ConfigError(
                f"column {facts.name} of table {profile.table} is NOT NULL without a "
                "default and the stream does not write it: MySQL refuses every "
                "upsert without it (error 1364). Add it to the stream, or give it "
                "a default"
            )


def _refuse_unpinned(profile: TargetProfile, written: list[str]) -> None:
    """The engine pins NO_AUTO_VALUE_ON_ZERO; an engine that is not the sink's
    may leave it out."""
    for column in written:
        facts = profile.column(column)
        if (
            facts is not None
            and facts.auto_increment
            and "NO_AUTO_VALUE_ON_ZERO" not in profile.sql_mode
        ):
            raise ConfigError(
                "the session's sql_mode lacks NO_AUTO_VALUE_ON_ZERO: a 0 written into "
                f"{profile.table}.{facts.name} (AUTO_INCREMENT) would take the next "
                "value instead. Let the sink set sql_mode (use its own engine)"
            )


def _refuse_rewriting_triggers(
    conn: Connection, profile: TargetProfile, written: list[str]
) -> None:
    have = {c.lower() for c in written}
    for trigger in profile.triggers or ():
        if trigger.timing.upper() != "BEFORE" or trigger.event.upper() == "DELETE":
            continue
        for found in assignments(conn, trigger):
            if found.column.lower() not in have:
                continue
            name = found.column
            verb, see = "sets", ""
            if not found.certain:
                verb = "may set"
                see = (
                    ", or let this user see the procedure's parameters (GRANT "
                    f"EXECUTE ON PROCEDURE {found.procedure})"
                )
            raise ConfigError(
                f"trigger {trigger.name} ({trigger.timing} {trigger.event}) on "
                f"table {profile.table} {verb} NEW.{name}, a column the stream "
                f"writes{found.through}: rows would end as the trigger says, not "
                f"as mysql.merge does. Leave {name} out of the stream, or drop the "
                f"trigger{see}"
            )


def visibility_warnings(profile: TargetProfile) -> list[str]:
    """What the profile could not see: said at start, not assumed absent."""
    if profile.triggers is not None:
        return []
    return [
        f"user {profile.user} holds no TRIGGER privilege on table {profile.table}, "
        "so the server hides its triggers: a trigger that rewrites the rows the sink "
        "writes cannot be checked. GRANT TRIGGER ON the table to this user lets the "
        "sink check them"
    ]
