"""``wal-sink verify``: the sink's own books balance — what the ack rows say against
what the WAL, the outbox, the quarantine table and the tombstones hold — read from
the Delta logs and a few aggregate queries, so it answers in seconds on a long WAL.

Each check yields findings, one line each; none means the books balance:

1. ``ack-counts``: every acked batch still in the WAL accounts for each of its rows
   once — upserted, deleted, skipped as stale or set aside (a batch set aside whole:
   set aside, all of them); with several tables, the per-table counts add up to the
   ack rows'.
2. ``unacked``: no staged batch at or below the newest ack lacks an ack row (batches
   are applied in order, I8: one left behind was skipped, or its ack deleted).
3. ``outbox``: no set-aside row waits in the outbox for the quarantine table.
4. ``quarantine``: an acked batch's entries are those its ack counts, set aside by
   the apply its ack names; an entry of another apply has a marker saying a forced
   replay superseded it, and no marker names the apply an ack still names.
5. ``tombstones``: none is older than ``cdc.tombstone_retention`` (what ``purge``
   expires), and no target row is back at a version a tombstone says was deleted.

A plain read throughout but for the acks' counts, read under a short locking read
(committer.py, step 2) so a batch still committing is seen as it ends.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.exc import ProgrammingError

from wal_sink.errors import ConfigError
from wal_sink.mysql.acks import Ack, TableCounts
from wal_sink.mysql.errors import error_code, mysql_error
from wal_sink.mysql.identifiers import quoted
from wal_sink.mysql.retry_state import marker
from wal_sink.mysql.tombstones import VERSION, Tombstones
from wal_sink.ops.purge import expire_tombstones
from wal_sink.ops.status import NO_SUCH_TABLE
from wal_sink.protocol.recovery import unacked_batches
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.format import open_parquet
from wal_sink.wal.model import StagedBatch

log = logging.getLogger(__name__)

ACK_COUNTS = "ack-counts"
UNACKED = "unacked"
OUTBOX = "outbox"
QUARANTINE = "quarantine"
TOMBSTONES = "tombstones"


@dataclass(frozen=True)
class Finding:
    """One thing that does not balance."""

    check: str
    """Which check found it: ACK_COUNTS, UNACKED, OUTBOX, QUARANTINE, TOMBSTONES."""
    message: str
    batch_id: int | None = None
    table: str | None = None

    def line(self) -> str:
        where = [f"batch {self.batch_id}"] if self.batch_id is not None else []
        where += [f"table {self.table}"] if self.table else []
        return f"{self.check}: {', '.join(where) + ': ' if where else ''}{self.message}"

    def to_json(self) -> dict[str, object]:
        return {
            "check": self.check,
            "batch_id": self.batch_id,
            "table": self.table,
            "message": self.message,
        }


def check_books(sink: SinkInstance) -> list[Finding]:
    """Every finding of the five checks, in their order (module docstring).

    Raises ConfigError when the sink's tables do not exist (yet): nothing to
    verify before ``init-db`` or a first start."""
    wal = sink.wal
    wal.refresh()
    staged = wal.staged_batches()
    try:
        with sink.engine.connect() as conn:
            findings = _kept(sink, conn, staged)
    except ProgrammingError as e:
        if error_code(e) != NO_SUCH_TABLE:
            raise
        raise ConfigError(
            f"{mysql_error(e)}: the sink's tables are missing or older than "
            "this version; run `wal-sink init-db` (or start the job) first"
        ) from None
    return findings + list(_expired(sink))


def _kept(
    sink: SinkInstance, conn: Connection, staged: dict[int, StagedBatch]
) -> list[Finding]:
    """The findings of what MySQL keeps."""
    with conn.begin():
        acks = sink.acks.locked(conn, min(staged), max(staged)) if staged else {}
    # acks between the WAL's batches of none in it: an empty batch of 0.1 (no
    # file), or a batch purged while it was the newest
    acks = {b: ack for b, ack in acks.items() if b in staged}
    whole = set(sink.acks.set_aside(conn))
    findings = list(_ack_counts(sink, staged, acks, whole))
    findings += _per_table(sink, conn)
    findings += _unacked(sink, conn, staged)
    waiting = sink.parts.outbox.waiting(conn)
    in_outbox = sink.parts.outbox.applies(conn)
    if waiting:
        batches = sorted({b for _, b in in_outbox})
        findings.append(
            Finding(
                OUTBOX,
                f"{waiting} set-aside row(s) of batch(es) "
                f"{', '.join(map(str, batches))} wait in the outbox for the "
                "quarantine table",
            )
        )
    findings += _quarantine(sink, conn, acks, in_outbox)
    findings += _resurrected(sink, conn)
    return findings


def _ack_counts(
    sink: SinkInstance,
    staged: dict[int, StagedBatch],
    acks: dict[int, Ack],
    whole: set[int],
) -> Iterator[Finding]:
    for batch_id, ack in sorted(acks.items()):
        rows = _staged_rows(sink, staged[batch_id])
        counted = ack.rows + ack.deleted + ack.skipped + ack.quarantined
        if batch_id in whole and (ack.quarantined != rows or counted != rows):
            yield Finding(
                ACK_COUNTS,
                f"set aside whole, the WAL holds {rows} row(s) but its ack counts "
                f"{ack.quarantined} set aside of {counted}",
                batch_id,
            )
        elif counted != rows:
            yield Finding(
                ACK_COUNTS,
                f"the WAL holds {rows} row(s) but its ack counts {counted} "
                f"({ack.rows} upserted, {ack.deleted} deleted, {ack.skipped} "
                f"skipped, {ack.quarantined} set aside)",
                batch_id,
            )


def _staged_rows(sink: SinkInstance, batch: StagedBatch) -> int:
    """The batch's rows by the Delta log's statistics; a file written without
    them (a WAL of 0.1) by its Parquet footer."""
    return sum(
        f.rows or open_parquet(f.uri, sink.wal.storage).metadata.num_rows
        for f in batch.files
    )


def _per_table(sink: SinkInstance, conn: Connection) -> Iterator[Finding]:
    """With several tables, the per-table counts of the ack rows kept add up to
    the ack rows' own."""
    if not sink.config.mysql.route_column:
        return
    summary = sink.acks.summary(conn)
    tables = sum(sink.acks.table_counts(conn).values(), TableCounts())
    acked = TableCounts(
        summary.rows, summary.deleted, summary.skipped, summary.quarantined
    )
    if tables != acked:
        yield Finding(
            ACK_COUNTS,
            f"the per-table counts ({_counts(tables)}) do not add up to the ack "
            f"rows' ({_counts(acked)})",
        )


def _counts(c: TableCounts) -> str:
    return (
        f"{c.upserted} upserted, {c.deleted} deleted, {c.skipped} skipped, "
        f"{c.set_aside} set aside"
    )


def _unacked(
    sink: SinkInstance, conn: Connection, staged: dict[int, StagedBatch]
) -> Iterator[Finding]:
    newest = sink.acks.newest(conn)
    if newest is None:
        return
    for batch_id in unacked_batches(sink.wal, sink.acks, conn, staged):
        if batch_id <= newest:
            yield Finding(
                UNACKED,
                f"staged and not acked, below the newest ack (batch {newest}): "
                "later batches were applied without it",
                batch_id,
            )


def _quarantine(
    sink: SinkInstance,
    conn: Connection,
    acks: dict[int, Ack],
    in_outbox: set[tuple[str, int]],
) -> Iterator[Finding]:
    entries = [e for e in sink.quarantine.entries() if e.apply_id is not None]
    by_apply = Counter((e.apply_id, e.batch_id) for e in entries)
    for batch_id, ack in sorted(acks.items()):
        if ack.apply_id is None or (ack.apply_id, batch_id) in in_outbox:
            continue  # an ack of 0.1, or rows still on their way (the outbox)
        found = by_apply[(ack.apply_id, batch_id)]
        if found != ack.quarantined:
            yield Finding(
                QUARANTINE,
                f"its ack counts {ack.quarantined} row(s) set aside, the quarantine "
                f"holds {found} of its apply",
                batch_id,
            )
    batches = [b for _, b in by_apply]
    named = sink.acks.apply_ids(conn, min(batches), max(batches)) if batches else {}
    superseded = sink.retries.superseded(conn, by_apply)
    for apply_id, batch_id in sorted(by_apply, key=lambda a: (a[1], a[0])):
        now = named.get(batch_id)
        if now not in (None, apply_id) and (apply_id, batch_id) not in superseded:
            yield Finding(
                QUARANTINE,
                f"{by_apply[(apply_id, batch_id)]} entry(ies) set aside by apply "
                f"{apply_id}, but the ack names apply {now} and no marker says a "
                "replay superseded them (a retry would apply them again)",
                batch_id,
            )
    markers = [i for i in sink.retries.all_ids(conn) if i.endswith("/*")]
    for apply_id, batch_id in _marked(markers):
        if named.get(batch_id) == apply_id or (
            batch_id in acks and acks[batch_id].apply_id == apply_id
        ):
            yield Finding(
                QUARANTINE,
                f"a marker says apply {apply_id} was superseded, but the ack still "
                "names it (its entries are never retried)",
                batch_id,
            )


def _marked(markers: list[str]) -> Iterator[tuple[str, int]]:
    """(apply id, batch id) of each marker row's id (retry_state.marker)."""
    for entry_id in markers:
        apply_id, _, batch = entry_id[:-2].rpartition("/")
        if batch.isdigit() and marker(apply_id, int(batch)) == entry_id:
            yield apply_id, int(batch)


def _resurrected(sink: SinkInstance, conn: Connection) -> Iterator[Finding]:
    """Rows of a target at or below the version of their key's tombstone: a delete
    the sink applied, undone by another writer (or a restore)."""
    config = sink.config
    q = lambda name: quoted(conn.dialect, name)  # noqa: E731
    for target in config.mysql.targets:
        if not config.keeps_tombstones(target):
            continue
        tombstones = Tombstones(config, target)
        if not conn.dialect.has_table(conn, tombstones.name):
            continue
        on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in target.key)
        back = conn.execute(
            text(
                f"SELECT COUNT(*) FROM {q(target.table)} t JOIN {q(tombstones.name)} "
                f"s ON {on} WHERE t.{q(target.version_column)} <= s.{VERSION}"
            )
        ).scalar_one()
        if back:
            yield Finding(
                TOMBSTONES,
                f"{back} row(s) are present at or below the version of their key's "
                "tombstone: deleted by the sink, written back since by another "
                "writer or a restore",
                table=target.table,
            )


def _expired(sink: SinkInstance) -> Iterator[Finding]:
    over = expire_tombstones(sink, dry_run=True)
    if over:
        retention = sink.config.cdc.tombstone_retention
        yield Finding(
            TOMBSTONES,
            f"{over} tombstone(s) older than cdc.tombstone_retention ({retention}): "
            "`wal-sink purge` expires them",
        )
