"""Merge modes: what an upsert of a key that has a row does to one of its columns
(docs/merge.md, "Per record"). A mode is one object owning everything that differs
between modes:

- its SQL: the column's assignment in ``ON DUPLICATE KEY UPDATE``;
- its start-up check: a column it cannot work on is refused (one line, exit 2);
- whether a record goes by key (an UPDATE) for a value the INSERT cannot carry;
- its replay rule: whether applying an acked batch again changes the column.

The reference model (tests/reference_model.py, plain Python by design) keeps its own
rule per mode, and a unit test holds its names to ``MODES``: adding a mode is adding
an object here, its rule there, its tests and its row in docs/merge.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import ColumnElement, case, func

NUMERIC_TYPES = frozenset(
    "tinyint smallint mediumint int integer bigint decimal numeric float double "
    "real".split()
)


class ColumnShape(Protocol):
    """What a mode's start-up check reads of a target column (the MySQL side's
    ``ColumnFacts``)."""

    name: str
    data_type: str
    column_type: str
    nullable: bool
    extra: str

    @property
    def on_update(self) -> bool: ...

    @property
    def unsigned(self) -> bool: ...


@dataclass(frozen=True)
class ByKey:
    """Values of a column that the upsert's INSERT cannot carry although the
    mode's assignment takes them: a record holding one goes by key (an UPDATE of
    its key's row; upsert.build_update), and only a new key meets the INSERT."""

    held: Callable[[Any], bool]
    """Whether a row's value is one."""
    in_chunk: Callable[[pa.Array], bool]
    """Whether a chunk's column holds one (the chunk then goes row by row)."""
    null_new_key: str | None = None
    """Why a record holding a NULL here is set aside when its key has no row
    (None: the upsert's INSERT judges it, as MySQL would)."""

    def joined(self, other: ByKey | None) -> ByKey:
        """These values and ``other``'s."""
        if other is None:
            return self
        return ByKey(
            lambda v: self.held(v) or other.held(v),
            lambda column: self.in_chunk(column) or other.in_chunk(column),
            self.null_new_key or other.null_new_key,
        )


def _negative(column: pa.Array) -> bool:
    lowest = pc.min(column).as_py()
    return lowest is not None and lowest < 0


NEGATIVE = ByKey(lambda v: v is not None and v < 0, _negative)
"""A negative amount: an UNSIGNED column refuses it in the INSERT's values, even
though the sum it is added to stays in range."""
NULL = ByKey(
    lambda v: v is None,
    lambda column: column.null_count > 0,
    "NULL in NOT NULL column(s) {columns}: a new key takes its NULLs, which the "
    "column refuses (ignore_null_updates keeps the stored value of a key that has "
    "a row)",
)
"""A NULL that keeps the stored value: a NOT NULL column refuses it in the INSERT's
values (MySQL's 1048; a TIMESTAMP NOT NULL would take the current time instead),
although the assignment keeps the stored value; a new key's is set aside."""


class MergeMode:
    """One mode; subclasses override what differs from ``overwrite``."""

    name: ClassVar[str]
    reapplying_changes: ClassVar[bool] = False
    """Applying an acked batch again (a forced replay) changes the column: the CLI
    warns and asks first."""

    def assignment(
        self,
        stored: ColumnElement,
        new: ColumnElement,
        newer: ColumnElement[bool] | None,
    ) -> ColumnElement:
        """The column's value after the upsert, from its ``stored`` value and the
        record's ``new`` one; ``newer`` is the version guard (None: no version)."""
        raise NotImplementedError

    def refusal(self, column: ColumnShape, where: str, table: str) -> str | None:
        """Why the mode cannot work on ``column`` of ``table`` (``where`` names the
        config section); None when it can."""
        return None

    def by_key(self, column: ColumnShape) -> ByKey | None:
        """Which values of ``column`` go by key (``ByKey``); None: none."""
        return None

    def ignoring_nulls(self) -> MergeMode:
        """The mode under ``mysql.ignore_null_updates``: a NULL in an upsert of a
        stored row keeps the stored value (a new key takes the NULL)."""
        return UnlessNull(self)


class Overwrite(MergeMode):
    """The record's value, when its version is at or above the stored one."""

    name = "overwrite"

    def assignment(self, stored, new, newer):
        return new if newer is None else case((newer, new), else_=stored)


class Add(MergeMode):
    """A running total: the stored value plus the record's, whatever the versions
    (the ack makes each apply add once); a NULL adds nothing, a NULL total becomes
    the record's value."""

    name = "add"
    reapplying_changes = True

    def assignment(self, stored, new, newer):
        return func.coalesce(stored + new, stored, new)

    def refusal(self, column, where, table):
        if column.data_type in NUMERIC_TYPES:
            return None
        return (
            f"{where}.merge.{column.name} is 'add' but column {column.name!r} of "
            f"{table!r} is {column.column_type.upper()}, not numeric"
        )

    def by_key(self, column):
        return NEGATIVE if column.unsigned else None


class Keep(MergeMode):
    """The stored value: the first one inserted stays."""

    name = "keep"

    def assignment(self, stored, new, newer):
        # Assigned to itself, so an ON UPDATE clause of the column cannot change it
        # either: MySQL leaves a column the statement assigns alone.
        return stored

    def refusal(self, column, where, table):
        if not column.on_update:
            return None
        return changes_by_itself(
            column,
            table,
            f"a keep column ({where}.merge)",
            ", or let the stream overwrite it",
        )


class UnlessNull(MergeMode):
    """A mode under ``mysql.ignore_null_updates``: a NULL keeps the stored value (a
    partial update), any other value merges as the mode says. MySQL refuses a
    NULL for a NOT NULL column in the INSERT's values (1048; a ``TIMESTAMP NOT
    NULL`` would take the current time) before it meets the row, so such NULLs go
    by key, and a new key's is set aside."""

    def __init__(self, mode: MergeMode) -> None:
        self.mode = mode
        self.name = mode.name  # type: ignore[misc]
        self.reapplying_changes = mode.reapplying_changes  # type: ignore[misc]

    def assignment(self, stored, new, newer):
        return case(
            (new.is_(None), stored), else_=self.mode.assignment(stored, new, newer)
        )

    def refusal(self, column, where, table):
        return self.mode.refusal(column, where, table)

    def by_key(self, column):
        own = self.mode.by_key(column)
        return own if column.nullable else NULL.joined(own)

    def ignoring_nulls(self):
        return self


def changes_by_itself(column: ColumnShape, table: str, role: str, or_else: str) -> str:
    """The refusal of a column MySQL changes on any update of its row (``ON
    UPDATE``) in a ``role`` that must never change."""
    return (
        f"column {column.name} of table {table} is {role} but has "
        f"{column.extra.upper()}: any update of the row, another writer's too, "
        f"changes it. Drop that clause (ALTER TABLE … MODIFY {column.name} …)"
        f"{or_else}"
    )


DEFAULT = "overwrite"
MODES: dict[str, MergeMode] = {m.name: m for m in (Overwrite(), Add(), Keep())}
"""Every mode, by the name ``mysql.merge`` gives it."""
