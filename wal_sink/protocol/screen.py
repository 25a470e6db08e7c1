"""A chunk's rows MySQL cannot be sent, set aside before anything is sent, so that no
row can block its batch at every start (mysql/row_screen.py says why each would).

Struct, list and map columns become JSON text first (refused at the first chunk
unless their target column is JSON or text); then rows holding text that is not
UTF-8, upserts with a NULL for a ``TIMESTAMP NOT NULL`` column (MySQL would store
the current time), upserts holding a value its column would change (a column
narrower than the stream's type: mysql/value_fit.py), and rows whose statement
would exceed the server's ``max_allowed_packet``, go to the quarantine with their
reason. The rest keep their staged order.

With CDC and a version column (``defer``), an upsert's NULL for a ``TIMESTAMP NOT
NULL`` column and a value its column would change are judged after staleness
instead: the row stays in the chunk, marked ``late``, and the row path sets it
aside only if no tombstone makes it stale (versioned_cdc.py): stale history is
skipped before its values are judged, or it would sit in the quarantine for good,
holding its key's tombstone against purge. CDC chunks always go row by row, so no
marked row is ever sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, Table, text

from wal_sink.config import Config, Target
from wal_sink.mysql.row_screen import (
    RECORD_CUT,
    as_json_text,
    check_json_targets,
    invalid_utf8,
    nested_columns,
    null_into_now,
    oversized,
    row_record,
)
from wal_sink.mysql.target_profile import ColumnFacts, read_profile
from wal_sink.mysql.value_fit import Fit, roles_of, table_fit
from wal_sink.wal.quarantine import Entry


@dataclass(frozen=True)
class Screened:
    chunk: pa.RecordBatch
    """The rows to send, nested columns as JSON text."""
    set_aside: list[Entry]
    read: int
    """Rows the chunk had before screening, for progress."""
    late: dict[int, Entry] = field(default_factory=dict)
    """Rows of ``chunk`` (by index) to set aside unless they are stale."""


def target_screen(
    conn: Connection,
    config: Config,
    target: Target,
    table: Table,
    defer: bool = False,
    kept_nulls: frozenset[str] = frozenset(),
) -> Screen:
    """The screen of ``target`` (``table`` reflected), on the server ``conn``
    reaches: its max_allowed_packet and columns read once."""
    packet = conn.execute(text("SELECT @@max_allowed_packet")).scalar_one()
    return Screen(
        config,
        target.key,
        table,
        int(packet),
        read_profile(conn, target.table).columns,
        roles_of(config, target),
        defer=defer,
        kept_nulls=kept_nulls,
    )


class Screen:
    """Screens the chunks of one sink's batches against one server."""

    def __init__(
        self,
        config: Config,
        key: tuple[str, ...],
        target: Table,
        max_packet: int,
        columns: dict[str, ColumnFacts],
        roles: list[tuple[str, str]],
        defer: bool = False,
        kept_nulls: frozenset[str] = frozenset(),
    ) -> None:
        """``columns``: the target's, by lower-case name (target_profile.py);
        ``roles``: (stream column, role) of its key, version, order and route
        columns, which may not narrow; ``kept_nulls``: columns whose NULLs keep
        the stored value and go by key (merge/modes.py)."""
        self.config = config
        self.key = key
        self.target = target
        self.max_packet = max_packet
        self.columns = columns
        self.roles = roles
        self.defer = defer
        self.kept_nulls = kept_nulls
        self._fits: list[Fit] = []

    def fit(self, schema: pa.Schema) -> Fit:
        """What the target's columns do to values of ``schema`` (once per
        schema)."""
        for known in self._fits:  # one per schema the WAL ever had: a few
            if known.schema.equals(schema):
                return known
        found = table_fit(self.target.name, schema, self.columns, self.roles)
        self._fits.append(found)
        return found

    def __call__(self, chunk: pa.RecordBatch) -> Screened:
        read = chunk.num_rows
        reasons: dict[int, str] = {}
        nested = nested_columns(chunk.schema)
        if nested:
            check_json_targets(self.target, nested)
            chunk, reasons = as_json_text(chunk)
        for i, reason in invalid_utf8(chunk).items():
            reasons.setdefault(i, reason)
        deletes = self._deletes(chunk)
        judged = null_into_now(chunk, self.target, deletes, self.kept_nulls)
        fit = self.fit(chunk.schema)
        if fit.narrowings:
            for i, reason in fit.changed(chunk, deletes).items():
                judged.setdefault(i, reason)
        if not self.defer:
            for i, reason in judged.items():
                reasons.setdefault(i, reason)
        too_big = oversized(chunk, self.key, self.max_packet, deletes)
        cut = {i for i in too_big if i not in reasons}
        for i in cut:
            reasons[i] = too_big[i]
        late = (
            {i: why for i, why in judged.items() if i not in reasons}
            if self.defer
            else {}
        )
        if not reasons and not late:
            return Screened(chunk, [], read)
        set_aside = [
            Entry(row_record(chunk, i, RECORD_CUT if i in cut else None), reasons[i])
            for i in sorted(reasons)
        ]
        kept = [i for i in range(chunk.num_rows) if i not in reasons]
        marked = {
            at: Entry(row_record(chunk, i), late[i])
            for at, i in enumerate(kept)
            if i in late
        }
        keep = pa.array([i not in reasons for i in range(chunk.num_rows)])
        return Screened(chunk.filter(keep), set_aside, read, marked)

    def _deletes(self, chunk: pa.RecordBatch) -> pa.Array | None:
        """CDC rows that delete or truncate (and so send their key only), if any."""
        cdc = self.config.cdc
        if cdc is None or cdc.op_column not in chunk.schema.names:
            return None  # a stream without it is refused before anything is sent
        try:
            return pc.is_in(
                chunk.column(cdc.op_column), value_set=pa.array(cdc.removing)
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None  # an op column of another type: counted as upserts
