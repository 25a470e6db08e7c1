"""One rule for column names: MySQL's ignore case, and so does the sink. A name the
config, the stream and the table spell apart (``amount``, ``AMOUNT``, ``Amount``)
is one column, at the start's checks, in routing, in the upsert and the delete, for
merge policies, the version column and the CDC op and order columns.

The stream's rows are applied in the table's spelling: routed_rows.py renames a
chunk's columns to it and gives each table's applier the config's names spelt so
(``spelled_target``, ``spelled_config``); the CDC op and route columns, which are
no table's, take the config's spelling. Staging orders by ``cdc.order_by`` as the
stream spells it. Two stream columns equal but for case would write one column:
refused (``refuse_twins``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

from wal_sink.config.sections import Config
from wal_sink.config.table_section import Target
from wal_sink.errors import ConfigError


class Spelling:
    """Names as one side spells them, found by any spelling."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names: dict[str, str] = {}
        for name in names:
            self._names.setdefault(name.lower(), name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._names

    def get(self, name: str) -> str | None:
        """``name`` as spelt here; None when it is not here."""
        return self._names.get(name.lower())

    def of(self, name: str) -> str:
        """``name`` as spelt here, or as given when it is not here."""
        return self._names.get(name.lower(), name)


def not_excepted(target: Target, names: Iterable[str]) -> list[str]:
    """``names`` without ``target``'s ``except_columns`` (in any spelling)."""
    excepted = Spelling(target.except_columns)
    return [n for n in names if n not in excepted]


def refuse_twins(names: Sequence[str], table: str) -> None:
    """Refuse two of ``names`` (the stream columns ``table`` receives) equal but
    for case: both would write one column."""
    seen: dict[str, str] = {}
    for name in names:
        twin = seen.setdefault(name.lower(), name)
        if twin != name:
            raise ConfigError(
                f"stream columns {twin!r} and {name!r} are one column of table "
                f"{table} (MySQL's column names ignore case): leave one of them out "
                "of the stream ([transform])"
            )


def spelled_target(target: Target, spelling: Spelling) -> Target:
    """``target`` with the columns it names spelt as in ``spelling`` (a table's)."""
    return dataclasses.replace(
        target,
        key=tuple(spelling.of(k) for k in target.key),
        merge={spelling.of(c): p for c, p in target.merge.items()},
        version_column=target.version_column and spelling.of(target.version_column),
        columns=None
        if target.columns is None
        else tuple(spelling.of(c) for c in target.columns),
        except_columns=tuple(spelling.of(c) for c in target.except_columns),
    )


def spelled_config(config: Config, spelling: Spelling) -> Config:
    """``config`` with ``cdc.order_by`` spelt as in ``spelling``: a table's, in
    the rows its applier gets; the stream's, where staging orders by it."""
    cdc = config.cdc
    if cdc is None or spelling.of(cdc.order_by) == cdc.order_by:
        return config
    return dataclasses.replace(
        config, cdc=dataclasses.replace(cdc, order_by=spelling.of(cdc.order_by))
    )
