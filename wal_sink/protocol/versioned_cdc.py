"""CDC with a version column, whatever the delivery order: applied to each chunk of
a batch inside its transaction, around the row path of batch_rows.py.

1. Upserts a delete of a newer or equal version makes stale — one recorded before
   (a tombstone) or one earlier in the chunk — are dropped and counted as skipped:
   they are not bad data, they are history the target has moved past.
2. Deletes only remove a row whose stored version is not newer (upsert.py), and each
   delete with a version leaves a tombstone.

Upserts older than the stored row are still guarded by the upsert itself (the
version guard); the tombstone is what remembers a row that is gone. Without a
version column deletes and upserts apply as they come, the last in batch order
winning, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection

from wal_sink.config import Config
from wal_sink.mysql import tombstone_probe
from wal_sink.mysql.tombstone_probe import Document, StaleProbe
from wal_sink.mysql.tombstones import Tombstones
from wal_sink.wal.quarantine import Entry


class VersionedCdc:
    """Stale upserts and tombstones of one sink (``[cdc]`` and a version column)."""

    def __init__(self, config: Config) -> None:
        cdc = config.cdc
        if cdc is None or not config.mysql.version_column:
            raise ValueError("VersionedCdc needs [cdc] and mysql.version_column")
        self.op_column = cdc.op_column
        self.delete_values = cdc.delete_values
        self.key = config.mysql.key
        self.version = config.mysql.version_column
        self.tombstones = Tombstones(config)
        self._probe: StaleProbe | None = None

    def pieces(
        self, conn: Connection, rows: list[dict[str, Any]]
    ) -> Iterator[tuple[list[dict[str, Any]], int, list[Entry]]]:
        """A chunk's ``rows`` (in staged order) in pieces of one read each (the
        whole chunk unless its document passes ``DOCUMENT_BYTES``), every piece
        read only once the caller applied the one before it, whose deletes'
        tombstones it then sees: each without its stale upserts, with how many
        were dropped, and the rows set aside because MySQL cannot take their key
        or version as the target's types (an insert would fail on them)."""
        if self._probe is None:
            self.tombstones.ensure(conn.engine)
            self._probe = StaleProbe(conn, self.tombstones)
        pending = [rows]
        while pending:
            piece = pending.pop()
            keyed = [
                i
                for i, r in enumerate(piece)
                if all(r.get(k) is not None for k in self.key)
            ]
            deletes = [
                piece[i].get(self.op_column) in self.delete_values for i in keyed
            ]
            document = self._probe.document([piece[i] for i in keyed], deletes)
            if len(document.text) > tombstone_probe.DOCUMENT_BYTES and len(piece) > 1:
                middle = len(piece) // 2
                pending += [piece[middle:], piece[:middle]]
                continue
            yield self._drop_stale(conn, piece, keyed, deletes, document)

    def _drop_stale(
        self,
        conn: Connection,
        rows: list[dict[str, Any]],
        keyed: list[int],
        deletes: list[bool],
        document: Document,
    ) -> tuple[list[dict[str, Any]], int, list[Entry]]:
        stale, invalid = self._probe.stale(conn, document)
        dropped = {keyed[i] for i in stale} | {keyed[i] for i in invalid}
        bad = [
            Entry(
                rows[keyed[i]],
                f"its key or version does not fit the target's columns: {warning}",
            )
            for i, warning in sorted(invalid.items())
        ]
        kept = [r for i, r in enumerate(rows) if i not in dropped]
        # Step 2's tombstones, all of the piece's at once: only the next piece's
        # read sees them, and it comes after this piece is applied.
        self.tombstones.record(
            conn,
            [
                rows[i]
                for i, is_delete in zip(keyed, deletes)
                if is_delete
                and i not in dropped
                and rows[i].get(self.version) is not None
            ],
        )
        return kept, len(stale), bad
