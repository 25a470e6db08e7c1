"""CDC with a version column, whatever the delivery order: applied to each chunk of
a batch inside its transaction, around the row path of batch_rows.py.

1. Upserts a delete of a newer or equal version makes stale — one recorded before
   (a tombstone, by any sink writing the target) or one earlier in the piece — are
   dropped and counted as skipped: they are not bad data, they are history the
   target has moved past.
2. Deletes only remove a row whose stored version is not newer (upsert.py), and each
   delete with a version that MySQL applied leaves a tombstone (``record``, called
   by the row applier after each run of deletes). A delete MySQL refuses (a child
   row still referencing it, a trigger) is set aside and leaves none; where the
   target can refuse a delete at all (``deletes_may_fail``), a piece ends after each
   run of deletes, so no upsert after it is judged by a delete that did not happen.

Upserts older than the stored row are still guarded by the upsert itself (the
version guard); the tombstone is what remembers a row that is gone. Without a
version column deletes and upserts apply as they come, the last in batch order
winning, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection

from wal_sink.config import Config, Target
from wal_sink.mysql import tombstone_probe
from wal_sink.mysql.tombstone_probe import Document, StaleProbe
from wal_sink.mysql.tombstones import Tombstones
from wal_sink.wal.quarantine import Entry


class VersionedCdc:
    """Stale upserts and tombstones of one sink (``[cdc]`` and a version column)."""

    def __init__(self, config: Config, target: Target) -> None:
        cdc = config.cdc
        if cdc is None or not target.version_column:
            raise ValueError("VersionedCdc needs [cdc] and a version column")
        self.op_column = cdc.op_column
        self.delete_values = cdc.delete_values
        self.key = target.key
        self.version = target.version_column
        self.tombstones = Tombstones(config, target)
        self._probe: StaleProbe | None = None

    def pieces(
        self,
        conn: Connection,
        rows: list[dict[str, Any]],
        cut_after_deletes: bool = False,
    ) -> Iterator[tuple[list[dict[str, Any]], int, list[Entry]]]:
        """A chunk's ``rows`` (in staged order) in pieces of one read each (the
        whole chunk unless its document passes ``DOCUMENT_BYTES``), every piece
        read only once the caller applied the one before it, whose deletes'
        tombstones it then sees: each without its stale upserts, with how many
        were dropped, and the rows set aside because MySQL cannot take their key
        or version as the target's types (an insert would fail on them). With
        ``cut_after_deletes`` a piece also ends after each run of deletes."""
        if self._probe is None:
            self.tombstones.reflect(conn)  # made at start: no DDL in a batch
            self._probe = StaleProbe(conn, self.tombstones)
        pending = list(reversed(self._cut(rows) if cut_after_deletes else [rows]))
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
            yield self._drop_stale(conn, piece, keyed, document)

    def _drop_stale(
        self,
        conn: Connection,
        rows: list[dict[str, Any]],
        keyed: list[int],
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
        return kept, len(stale), bad

    def record(self, conn: Connection, applied: list[dict[str, Any]]) -> None:
        """Step 2's tombstones, of the deletes MySQL applied (those with a
        version): only the next piece's read sees them, and it comes after this
        run of deletes."""
        self.tombstones.record(
            conn, [r for r in applied if r.get(self.version) is not None]
        )

    def _cut(self, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """``rows`` in pieces ending after each run of deletes."""
        pieces: list[list[dict[str, Any]]] = [[]]
        for row, after in zip(rows, [*rows[1:], None]):
            pieces[-1].append(row)
            is_delete = row.get(self.op_column) in self.delete_values
            if is_delete and (
                after is None or after.get(self.op_column) not in self.delete_values
            ):
                pieces.append([])
        return [p for p in pieces if p]
