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

3. Truncates (``cdc.truncate_values``) cut the rows: those before one are applied
   first, then the truncate removes the table's rows at or below its version and
   records the table's tombstone (truncates.py), which the next piece's read sees.
   A truncate without a version, or one MySQL refuses (a child row), is set aside.

Upserts older than the stored row are still guarded by the upsert itself (the
version guard); the tombstone is what remembers a row that is gone. Without a
version column deletes and upserts apply as they come, the last in batch order
winning, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config, Target
from wal_sink.mysql import tombstone_probe
from wal_sink.mysql.errors import is_row_error
from wal_sink.mysql.tombstone_probe import Document, StaleProbe
from wal_sink.mysql.tombstones import Tombstones
from wal_sink.mysql.truncates import Truncates
from wal_sink.protocol.row_by_row import refused
from wal_sink.wal.quarantine import Entry


@dataclass
class Piece:
    """Rows to apply, read once the piece before was applied."""

    rows: list[dict[str, Any]]
    stale: int = 0
    """Rows dropped as stale."""
    set_aside: list[Entry] = field(default_factory=list)
    truncated: int = 0
    """Truncates applied before this piece's rows."""


class VersionedCdc:
    """Stale upserts and tombstones of one sink (``[cdc]`` and a version column)."""

    def __init__(self, config: Config, target: Target) -> None:
        cdc = config.cdc
        if cdc is None or not target.version_column:
            raise ValueError("VersionedCdc needs [cdc] and a version column")
        self.op_column = cdc.op_column
        self.delete_values = cdc.delete_values
        self.truncate_values = cdc.truncate_values
        self.key = target.key
        self.version = target.version_column
        self.tombstones = Tombstones(config, target)
        self.truncates = Truncates(config, target) if cdc.truncate_values else None
        self._probe: StaleProbe | None = None

    def pieces(
        self,
        conn: Connection,
        rows: list[dict[str, Any]],
        cut_after_deletes: bool = False,
    ) -> Iterator[Piece]:
        """A chunk's ``rows`` (in staged order) in pieces of one read each (the
        whole chunk unless its document passes ``DOCUMENT_BYTES``), every piece
        read only once the caller applied the one before it, whose deletes'
        tombstones it then sees: each without its stale upserts, with how many
        were dropped, and the rows set aside because MySQL cannot take their key
        or version as the target's types (an insert would fail on them). With
        ``cut_after_deletes`` a piece also ends after each run of deletes; a
        truncate always ends one, and is applied before the next (step 3)."""
        if self._probe is None:
            self.tombstones.reflect(conn)  # made at start: no DDL in a batch
            self._probe = StaleProbe(
                conn, self.tombstones, self.truncates.name if self.truncates else None
            )
        stretch: list[dict[str, Any]] = []
        for row in rows:
            if row.get(self.op_column) not in self.truncate_values:
                stretch.append(row)
                continue
            yield from self._pieces(conn, stretch, cut_after_deletes)
            stretch = []
            yield self._truncate(conn, row)
        yield from self._pieces(conn, stretch, cut_after_deletes)

    def _truncate(self, conn: Connection, row: dict[str, Any]) -> Piece:
        """Apply the truncate ``row`` under a savepoint; set aside when it has no
        version or MySQL refuses it."""
        version = row.get(self.version)
        if version is None:
            reason = f"a truncate needs a version ({self.version} is NULL)"
            return Piece([], set_aside=[Entry(row, reason)])
        savepoint = conn.begin_nested()
        try:
            self.truncates.apply(conn, version)
        except DBAPIError as e:
            if not is_row_error(e):
                raise
            savepoint.rollback()
            return Piece([], set_aside=[Entry(row, refused(conn, row, e))])
        savepoint.commit()
        return Piece([], truncated=1)

    def _pieces(
        self, conn: Connection, rows: list[dict[str, Any]], cut_after_deletes: bool
    ) -> Iterator[Piece]:
        """The pieces of a stretch without truncates."""
        if not rows:
            return
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
    ) -> Piece:
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
        return Piece(kept, len(stale), bad)

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
