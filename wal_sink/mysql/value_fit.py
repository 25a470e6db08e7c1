"""Whether a stream may write into a table whose columns are narrower than its
types, by each column's role (docs/merge.md, "Values MySQL would change"); which
pairs narrow and which values they change is narrowing.py's.

``Fit`` holds a stream's narrowings for one table:

- a key, version, order or route column that narrows is refused at start
  (``Fit.refuse``): two keys would become one row, an older version would win;
  a cast in ``transform.sql`` makes the stream fit, so rounding is always the
  user's explicit choice;
- any other column: one warning at start (``Fit.warnings``), and at run time each
  value the column would change is set aside with its reason (``Fit.changed``).
  Where nothing narrows, no row is looked at.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from wal_sink.config import Config, Target
from wal_sink.errors import ConfigError
from wal_sink.mysql.narrowing import Narrowing, column_fit
from wal_sink.mysql.target_profile import ColumnFacts

log = logging.getLogger(__name__)

VALUE_TEXT = 60
"""Longest text of a value quoted in a reason."""

ROLES = {
    "key": "a key column: two stream keys could become one row",
    "version": "the version column: an older record could win over a newer one",
    "order": "the cdc.order_by column: rows could land in another order",
    "route": "the route column: a row could land in another table",
}


@dataclass(frozen=True)
class Fit:
    """What one table's columns do to a stream's values."""

    table: str
    schema: pa.Schema
    """The stream's (or a chunk's), whose fields were compared."""
    narrowings: tuple[tuple[str, Narrowing], ...]
    """(stream column, its narrowing), in stream order."""
    roles: tuple[tuple[str, str], ...] = ()
    """(stream column, role) of the columns a narrowing refuses (ROLES)."""
    _checked: tuple[tuple[str, Narrowing], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        checked = tuple((c, n) for c, n in self.narrowings if n.check is not None)
        object.__setattr__(self, "_checked", checked)

    def refuse(self) -> None:
        """Raise ConfigError (one line) for a narrowing key, version, order or
        route column."""
        roles = dict(self.roles)
        for name, narrowing in self.narrowings:
            role = roles.get(name)
            if role is None or (role == "key" and narrowing.key_safe):
                continue
            raise ConfigError(
                f"column {narrowing.column} of table {self.table} is "
                f"{narrowing.column_type}, which {narrowing.what} of the stream's "
                f"{narrowing.stream_type}; it is {ROLES[role]}. Make it "
                f"{narrowing.fix}, or cast the stream's column in transform.sql to "
                "the column's type"
            )

    def warnings(self) -> list[str]:
        """One line per column whose values may change (said at start)."""
        return [
            f"column {n.column} of table {self.table} is {n.column_type}, which "
            f"{n.what} of the stream's {n.stream_type}: "
            + (
                "a value it would change is set aside, not written"
                if n.check is not None
                else "MySQL converts the values as it does, unchecked"
            )
            + f" (make it {n.fix} to take every value)"
            for _, n in self.narrowings
        ]

    def changed(
        self, chunk: pa.RecordBatch, skip: pa.Array | None = None
    ) -> dict[int, str]:
        """Rows of ``chunk`` holding a value its column would change, with the
        reason; ``skip`` marks rows not to look at (CDC deletes, which send their
        key and version only)."""
        found: dict[int, list[str]] = {}
        for name, narrowing in self._checked:
            if name not in chunk.schema.names:
                continue
            values = chunk.column(name)
            hit = pc.fill_null(narrowing.check(values), False)
            if skip is not None:
                hit = pc.and_(hit, pc.invert(pc.fill_null(skip, False)))
            for i in pc.indices_nonzero(hit).to_pylist():
                found.setdefault(i, []).append(
                    f"{_shown(values[i].as_py())} in column {narrowing.column} "
                    f"({narrowing.column_type}), which {narrowing.what}"
                )
        return {
            i: "; ".join(parts) + ": set aside rather than written changed"
            for i, parts in found.items()
        }


def table_fit(
    table: str,
    schema: pa.Schema,
    columns: dict[str, ColumnFacts],
    roles: Iterable[tuple[str, str]] = (),
) -> Fit:
    """The fit of ``schema``'s fields into the table's ``columns`` (by lower-case
    name; fields the table lacks are left out). ``roles``: (stream column, role)."""
    narrowings = []
    for f in schema:
        facts = columns.get(f.name.lower())
        found = column_fit(f.type, facts) if facts is not None else None
        if found is not None:
            narrowings.append((f.name, found))
    names = {n for n, _ in narrowings}
    lower = {n.lower(): n for n in names}  # names ignore case, as MySQL's do
    roles = tuple((lower[c.lower()], r) for c, r in roles if c.lower() in lower)
    return Fit(table, schema, tuple(narrowings), roles)


def _shown(value: object) -> str:
    """A value in a reason: text and bytes quoted, other values as they read."""
    text = repr(value) if isinstance(value, (str, bytes)) else str(value)
    return text if len(text) <= VALUE_TEXT else text[: VALUE_TEXT - 1] + "…"


def roles_of(config: Config, target: Target) -> list[tuple[str, str]]:
    """(column, role) of ``target``'s key, version, order and route columns."""
    named = [
        (target.version_column, "version"),
        (config.cdc.order_by if config.cdc else None, "order"),
        (config.mysql.route_column, "route"),
    ]
    return [(k, "key") for k in target.key] + [(c, r) for c, r in named if c]


_said: set[tuple[str, str]] = set()
"""Warnings said in this process: the job's start and its committer's first batch
(or a follower's every schema) find the same narrowings."""


def say_warnings(sink_id: str, fit: Fit) -> None:
    """Log each of ``fit``'s warnings, once per process."""
    for warning in fit.warnings():
        if (sink_id, warning) not in _said:
            _said.add((sink_id, warning))
            log.warning("sink %s: %s", sink_id, warning)
