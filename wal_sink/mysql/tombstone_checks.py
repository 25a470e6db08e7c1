"""The start's refusals about tombstone tables (tombstones.py): one target per
tombstone table in a config, and no sink that cannot honour tombstones (or a
truncate's) on a target whose deletes another sink guards with them."""

from __future__ import annotations

from sqlalchemy import Connection, text

from wal_sink.config import Config, Target
from wal_sink.errors import ConfigError
from wal_sink.mysql.tombstones import guarding_tables
from wal_sink.mysql.truncates import COMMENT as TRUNCATES_COMMENT


def refuse_unguarded(conn: Connection, config: Config, mysql: Target) -> None:
    """Refuse a sink that cannot honour tombstones (no ``[cdc]`` or no version
    column) on a target whose deletes another sink guards with them: its upserts
    would bring deleted rows back."""
    if config.cdc and mysql.version_column:
        if not config.cdc.truncate_values:
            _refuse_untruncating(conn, mysql.table)
        return
    target = mysql.table
    found = guarding_tables(conn, target)
    if found:
        raise ConfigError(
            f"table {target}'s deletes are guarded by tombstones (table {found[0]}) "
            "that this sink cannot honour without [cdc] and mysql.version_column: "
            "its upserts would bring deleted rows back. Give it [cdc] and "
            f"mysql.version_column, or drop {found[0]} once no sink deletes from "
            f"{target}"
        )


def _refuse_untruncating(conn: Connection, target: str) -> None:
    """A sink without ``cdc.truncate_values`` does not read the truncate table:
    its upserts older than a truncate would bring truncated rows back."""
    found = conn.execute(
        text(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
            "DATABASE() AND TABLE_COMMENT = :c ORDER BY TABLE_NAME"
        ),
        {"c": TRUNCATES_COMMENT.format(target)},
    ).first()
    if found:
        raise ConfigError(
            f"table {target} keeps a truncate tombstone (table {found[0]}) that "
            "this sink cannot honour without cdc.truncate_values: its upserts "
            "older than a truncate would bring truncated rows back. Set "
            f"cdc.truncate_values, or drop {found[0]} once no sink truncates "
            f"{target}"
        )


def refuse_shared(config: Config) -> None:
    """Refuse two targets of ``config`` keeping tombstones in one table: each
    would judge the other's upserts by its deletes. Names compare as a server that
    folds table names compares them: ignoring case."""
    if not config.cdc:
        return
    owners: dict[str, Target] = {}
    for t in config.mysql.targets:
        if not t.version_column:
            continue
        owner = owners.setdefault(t.tombstones.lower(), t)
        if owner is not t:
            raise ConfigError(
                f"{t.where}.tombstone_table: table {t.tombstones} would hold the "
                f"tombstones of table {owner.table} ({owner.where}) and of table "
                f"{t.table}, and one tombstone table serves one target: set "
                f"{t.where}.tombstone_table to another name"
            )
