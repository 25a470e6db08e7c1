"""The target table, reflected from the server: refused when missing or not InnoDB,
since only a transactional table lets a batch and its ack row commit together."""

from __future__ import annotations

from sqlalchemy import Engine, MetaData, Table, text
from sqlalchemy.exc import NoSuchTableError

from wal_sink.errors import TerminalError


def reflect_target(engine: Engine, name: str) -> Table:
    """Reflect the target table, refusing a missing or non-transactional one."""
    with engine.connect() as conn:
        engine_name = conn.execute(
            text(
                "SELECT ENGINE FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
            ),
            {"t": name},
        ).scalar_one_or_none()
        if engine_name is None:
            raise TerminalError(
                "target table does not exist; create it first", table=name
            )
        if engine_name.upper() != "INNODB":
            raise TerminalError(
                f"target table uses {engine_name}; it must be InnoDB (transactional) "
                "for batches to be applied atomically",
                table=name,
            )
        try:
            return Table(name, MetaData(), autoload_with=conn)
        except NoSuchTableError:
            raise TerminalError("target table does not exist", table=name) from None
