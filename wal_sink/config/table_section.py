"""One target table's settings: ``[mysql.tables.NAME]`` (one stream, several
tables), or the single-table form's keys at ``[mysql]``; either way resolved into a
``Target``, which every part that knows a table takes (docs/merge.md, "One stream,
several tables")."""

from __future__ import annotations

from dataclasses import dataclass as plain_dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import BeforeValidator, Field, model_validator
from pydantic.dataclasses import dataclass

from wal_sink.config.values import SECTION, DurationText, Identifier, Text
from wal_sink.merge.modes import DEFAULT, MODES, MergeMode

TOMBSTONE_SUFFIX = "_tombstones"
TRUNCATE_SUFFIX = "_truncate"
Policy = Literal[tuple(MODES)]  # type: ignore[valid-type]
Conflicts = Literal["refuse", "quarantine"]
ScdType = Literal[1, 2]
START_AT = "__START_AT"
END_AT = "__END_AT"


def one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Key = Annotated[
    tuple[Identifier, ...], BeforeValidator(one_or_many), Field(min_length=1)
]


@dataclass(frozen=True, config=SECTION)
class TableConfig:
    key: Key
    """Columns of the table's PRIMARY KEY or a UNIQUE key."""
    merge: dict[Identifier, Policy] = Field(default_factory=dict)
    """Per-column merge mode, by name (docs/merge.md, "Per record"); overwrite
    where none is given."""
    version_column: Identifier | None = None
    """Rows update overwrite columns only when their version is >= the stored one."""
    ignore_null_updates: Annotated[bool, Field(strict=True)] = False
    """A NULL in an upsert keeps the stored value of an overwrite column (a partial
    update); a new key takes the NULL."""
    unique_conflicts: Conflicts = "refuse"
    """Another unique index the stream writes: refuse to start, or set aside records
    that would reach another row through it."""
    tombstone_table: Identifier | None = None
    """With [cdc] and version_column: deleted keys and versions (default: the
    table's name + "_tombstones")."""
    columns: tuple[Identifier, ...] | None = None
    """The stream columns this table takes (default: those the table has)."""
    except_columns: tuple[Identifier, ...] = ()
    """Stream columns this table never takes (instead of columns)."""
    route: Text | None = None
    """The value of mysql.route_column meaning this table (default: the section's
    name; Debezium's topic names hold dots, which a section name cannot)."""
    stored_as_scd_type: ScdType = 1
    """1: a row per key, as the newest record says; 2: a history, a row per
    version of the key (__START_AT, __END_AT), ordered by version_column."""
    track_history_column_list: tuple[Identifier, ...] | None = None
    """Type 2: the columns whose change opens a new version (default: all)."""
    track_history_except_column_list: tuple[Identifier, ...] = ()
    """Type 2: the columns whose change does not open a new version."""
    history_retention: DurationText | None = None
    """Type 2: how long purge keeps each event before folding it into its key's
    floor; an event older than its key's floor is then set aside (default: every
    event kept)."""

    @model_validator(mode="after")
    def _policies(self) -> TableConfig:
        check_policies(self.key, self.merge, self.version_column, "")
        check_excepted(self.except_columns, self.key, self.merge, self.version_column)
        check_history(self, "")
        if self.columns is not None and self.except_columns:
            raise ValueError("give columns or except_columns, not both")
        return self


class HistorySettings(Protocol):
    key: Any
    merge: dict[str, str]
    version_column: str | None
    stored_as_scd_type: int
    track_history_column_list: tuple[str, ...] | None
    track_history_except_column_list: tuple[str, ...]
    history_retention: str | None


def check_history(settings: HistorySettings, where: str) -> None:
    """Type 2 needs a version column and takes values as they are (no add or
    keep: a history holds each version's values, not a sum); the tracked-column
    lists belong to type 2, one of them, naming data columns."""
    tracked = settings.track_history_column_list
    untracked = settings.track_history_except_column_list
    if settings.stored_as_scd_type == 1:
        if tracked is not None or untracked or settings.history_retention:
            raise ValueError(
                f"{where}track_history_column_list, "
                f"track_history_except_column_list and history_retention need "
                "stored_as_scd_type = 2"
            )
        return
    if not settings.version_column:
        raise ValueError(
            f"{where}stored_as_scd_type = 2 needs {where}version_column: the "
            "history is ordered by it"
        )
    modes = {c: m for c, m in settings.merge.items() if m != DEFAULT}
    if modes:
        column, mode = next(iter(modes.items()))
        raise ValueError(
            f"{where}merge.{column}: {mode!r} with stored_as_scd_type = 2; a "
            "history keeps each version's values (overwrite only)"
        )
    if tracked is not None and untracked:
        raise ValueError(
            f"{where}give track_history_column_list or "
            "track_history_except_column_list, not both"
        )
    needed = {c.lower() for c in (*settings.key, settings.version_column)}
    for column in (*(tracked or ()), *untracked):
        if column.lower() in needed:
            raise ValueError(
                f"{where}track_history: {column!r} is a key or the version column; "
                "only data columns are tracked"
            )


def check_policies(
    key: tuple[str, ...],
    merge: dict[str, str],
    version_column: str | None,
    where: str,
) -> None:
    """A key column has no merge policy and is not the version column; the version
    column has no merge policy either. ``where`` prefixes the keys named."""
    for column in merge:
        if column in key:
            raise ValueError(
                f"{where}merge.{column}: a key column cannot have a merge policy"
            )
    if version_column in merge:
        raise ValueError(
            f"{where}merge.{version_column}: the version column cannot have a "
            "merge policy"
        )
    if version_column in key:
        raise ValueError(f"{where}version_column cannot be a key column")


def check_excepted(
    excepted: tuple[str, ...],
    key: tuple[str, ...],
    merge: dict[str, str],
    version_column: str | None,
) -> None:
    """A column left out of the table is none it needs: key, version, merge."""
    needed = {c.lower() for c in (*key, *merge, version_column or "")}
    for column in excepted:
        if column.lower() in needed:
            raise ValueError(
                f"except_columns: {column!r} is a key, version or merge column of "
                "the table; a table needs it"
            )


@plain_dataclass(frozen=True, eq=False)
class Target:
    """One target table and how rows merge into it."""

    table: str
    key: tuple[str, ...]
    merge: dict[str, str]
    version_column: str | None
    unique_conflicts: str
    tombstone_table: str | None
    columns: tuple[str, ...] | None
    """The stream columns it takes; None: those the table has."""
    route: str | None
    """The route value meaning it; None in the single-table form."""
    where: str
    """Where its settings are, for messages: ``mysql`` or ``mysql.tables.NAME``."""
    ignore_null_updates: bool = False
    except_columns: tuple[str, ...] = ()
    """Stream columns it never takes."""
    scd_type: int = 1
    tracked: tuple[str, ...] | None = None
    """Type 2: the columns whose change opens a version (None: every one but…)."""
    untracked: tuple[str, ...] = ()
    """Type 2: the columns whose change does not open a version."""
    history_retention: str | None = None
    """Type 2: how long purge keeps events (None: every one)."""

    def tracks(self, column: str) -> bool:
        """Type 2: whether a change of ``column`` opens a new version (the
        version column's never does: it changes with every record)."""
        if column.lower() == (self.version_column or "").lower():
            return False
        if self.tracked is not None:
            return column.lower() in {c.lower() for c in self.tracked}
        return column.lower() not in {c.lower() for c in self.untracked}

    @property
    def tombstones(self) -> str:
        """The tombstone table's name (used with [cdc] and a version column)."""
        return self.tombstone_table or f"{self.table}{TOMBSTONE_SUFFIX}"

    @property
    def truncates(self) -> str:
        """The table of its truncate tombstone, beside the tombstone table (used
        with ``cdc.truncate_values``)."""
        return f"{self.tombstones}{TRUNCATE_SUFFIX}"

    def mode(self, column: str) -> MergeMode:
        """The column's merge mode (``ignore_null_updates`` changes only columns
        that are neither key nor version: a NULL key is set aside, and a NULL
        version follows the version guard)."""
        mode = MODES[self.merge.get(column, DEFAULT)]
        data = column not in self.key and column != self.version_column
        return mode.ignoring_nulls() if self.ignore_null_updates and data else mode
