"""Which sink a WAL or quarantine table belongs to (I9): one, named in the table.

The owning sink id is a property of the Delta table (``wal_sink.sink_id``, in its
metadata's configuration), recorded when the sink creates the table. Every reader
and writer of the sink checks it: two configs sharing a ``wal.path`` (a copied
config) would otherwise mix their batches in one table, one sink's purge would
remove the other's unacked batches and its recovery would read the other's files.

A table written by wal_sink 0.2 or earlier has no owner: any sink may read it, and
the first that opens it for writing adopts it (``adopt``), with a log line.
``open_owned`` is the one way the sink's readers open a WAL or quarantine table.
"""

from __future__ import annotations

import logging

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from wal_sink.errors import ConfigError
from wal_sink.storage import Storage
from wal_sink.wal.format import delta_table
from wal_sink.wal.storage_errors import storage_error

log = logging.getLogger(__name__)

OWNER_PROPERTY = "wal_sink.sink_id"


def owner(table: DeltaTable) -> str | None:
    """The sink id recorded in the table, or None for a table without an owner."""
    return table.metadata().configuration.get(OWNER_PROPERTY)


def owned_configuration(sink_id: str) -> dict[str, str]:
    """The table property that names ``sink_id`` the owner of a new table."""
    return {OWNER_PROPERTY: sink_id}


WAL = "WAL"
QUARANTINE = "quarantine table"
ADVICE = {
    WAL: "two configs share wal.path? Give each sink a wal.path of its own",
    QUARANTINE: "two configs share it? Give each sink a wal.path, or a "
    "wal.quarantine_path, of its own",
}


def check_owner(table: DeltaTable, sink_id: str, location: str, what: str) -> None:
    """Raise ConfigError (one line naming both ids) when another sink owns the
    ``what`` (WAL or QUARANTINE) at ``location``."""
    found = owner(table)
    if found is not None and found != sink_id:
        raise ConfigError(
            f"the {what} at {location} belongs to sink {found!r}, not to sink "
            f"{sink_id!r}: {ADVICE[what]}",
            sink_id=sink_id,
        )


def open_owned(
    location: str, storage: Storage, sink_id: str | None, what: str
) -> DeltaTable | None:
    """The Delta table at ``location``, or None while there is none; a storage
    failure as the sink's error (storage_errors.py); with a ``sink_id``, refused
    (ConfigError) when another sink owns the ``what`` (WAL or QUARANTINE)."""
    try:
        table = delta_table(location, storage)
    except TableNotFoundError:
        return None
    except Exception as e:
        raise storage_error(e, location, sink_id=sink_id) from e
    if sink_id is not None:
        check_owner(table, sink_id, location, what)
    return table


def adopt(table: DeltaTable, sink_id: str, location: str, what: str) -> None:
    """Record ``sink_id`` as the owner of a table that has none yet.

    Of two sinks adopting one table at once, the second commit conflicts with the
    first; that sink then reads the first one's id and is refused (ConfigError).
    """
    check_owner(table, sink_id, location, what)
    if owner(table) is not None:
        return
    try:
        table.alter.set_table_properties(
            owned_configuration(sink_id), raise_if_not_exists=False
        )
    except CommitFailedError:
        table.update_incremental()
        check_owner(table, sink_id, location, what)
        if owner(table) is None:
            raise
        return
    log.warning(
        "the table at %s had no owner (written by wal_sink 0.2 or earlier); sink %r "
        "adopts it: other sink ids are refused from now on",
        location,
        sink_id,
    )
