"""The order a batch's tables are written in, when one stream lands in several tables
(docs/merge.md, "One stream, several tables"): parents before their children, as
the targets' foreign keys say, so that within a run of upserts a child row finds
its new parent, and within a run of deletes a parent goes only after its children.

A foreign key of a table to itself is no cycle (its rows keep their staged order); a
foreign key to a table outside the config is none of the sink's business. A cycle
between configured tables has no such order: refused at start, unless
``mysql.table_order`` gives one.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, text

from wal_sink.errors import ConfigError


def parents_first(
    conn: Connection, tables: Sequence[str], configured: Sequence[str] | None
) -> list[str]:
    """``tables`` with every parent before its children (``configured``, when
    given, is the order); ties keep the config's order.

    Raises:
        ConfigError: the foreign keys make a cycle and no order is configured.
    """
    if configured:
        return list(configured)
    parents: dict[str, set[str]] = {t: set() for t in tables}
    query = text(
        "SELECT TABLE_NAME, REFERENCED_TABLE_NAME FROM "
        "information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = "
        "DATABASE() AND TABLE_NAME IN :t AND REFERENCED_TABLE_NAME IN :t"
    ).bindparams(bindparam("t", expanding=True))
    for child, parent in conn.execute(query, {"t": list(tables)}):
        if child != parent:
            parents[child].add(parent)
    order: list[str] = []
    while len(order) < len(tables):
        ready = [t for t in tables if t not in order and parents[t] <= set(order)]
        if not ready:
            cycle = [t for t in tables if t not in order]
            raise ConfigError(
                f"the foreign keys between tables {', '.join(cycle)} make a cycle, so "
                "no order puts every parent before its children: give it with "
                "mysql.table_order (parents first)"
            )
        order.append(ready[0])
    return order
