"""What the CLI shows people: rich tables of a sink's status, a batch's rows and the
quarantine, and the small formats they share. Scripts get JSON instead."""

from __future__ import annotations

from typing import Any

from rich.table import Table as RichTable
from rich.text import Text

from wal_sink.ops.quarantine_entries import ListedEntry
from wal_sink.ops.status import SinkStatus
from wal_sink.protocol.committer import CommitResult
from wal_sink.wal.model import StagedBatch


def status_table(st: SinkStatus) -> RichTable:
    table = RichTable(
        title=f"sink {st.sink_id}", show_header=False, title_justify="left"
    )
    table.add_column(style="bold")
    table.add_column()
    unacked = ", ".join(map(str, st.unacked[:20])) + (
        " …" if len(st.unacked) > 20 else ""
    )
    for label, value in [
        ("WAL", st.wal_path + ("" if st.wal_exists else "  (nothing staged yet)")),
        (
            "staged batches",
            f"{st.staged_batches}  ({span(st.staged_first, st.staged_last)})",
        ),
        ("last staged", maybe(st.last_staged_txn)),
        (
            "acked batches",
            f"{st.acked_batches}  ({span(st.acked_first, st.acked_last)})",
        ),
        (
            "pending",
            f"{st.pending_batches} staged, not applied"
            + (f": {unacked}" if st.unacked else "")
            + (
                f"; the oldest waits {st.commit_lag_seconds:.1f}s"
                if st.commit_lag_seconds
                else ""
            ),
        ),
        (
            "rows applied",
            f"{st.rows_applied} upserted, {st.rows_deleted} deleted, "
            f"{st.rows_quarantined} quarantined"
            + (f" ({st.outbox_rows} on their way)" if st.outbox_rows else "")
            + (f", {st.rows_skipped} skipped as stale" if st.rows_skipped else ""),
        ),
        (
            "quarantine",
            f"{st.quarantine_open} open, {st.quarantine_retried} retried"
            + (
                f" ({st.quarantine_failed} of the open failed again)"
                if st.quarantine_failed
                else ""
            )
            + f", of {st.quarantine_entries} entries",
        ),
        (
            "set aside",
            f"{len(st.quarantined_batches)} batch(es) acked as quarantined, never "
            "applied"
            + (
                f": {ids(tuple(st.quarantined_batches))}"
                if st.quarantined_batches
                else ""
            ),
        ),
        *(
            [
                (
                    "repairs",
                    f"{st.repairs_applied} applied"
                    + (
                        f", {ids(tuple(st.repairs_pending))} staged, not applied"
                        if st.repairs_pending
                        else ""
                    ),
                )
            ]
            if st.repairs_applied or st.repairs_pending
            else []
        ),
        (
            "WAL size",
            f"{st.wal_rows} rows, {st.wal_files} files, {size(st.wal_bytes)}",
        ),
        (
            "last commit",
            maybe(st.last_commit_at)
            + (f"  ({st.lag_seconds:.1f}s ago)" if st.lag_seconds is not None else ""),
        ),
        ("lag", f"{maybe(st.lag_batches)} batch(es) staged beyond the last ack"),
        ("lease", f"epoch {maybe(st.lease_epoch)}, {maybe(st.lease_holder)}"),
        *(
            [("tombstones", f"{st.tombstones} deleted key(s) remembered")]
            if st.tombstones is not None
            else []
        ),
        *(
            (f"history {name}", f"about {c['history_events']} event(s) kept")
            for name, c in st.tables.items()
            if c.get("history_events") is not None
        ),
        *(
            [
                (
                    f"table {name or '(no table)'}",
                    f"{c['rows_applied']} upserted, {c['rows_deleted']} deleted, "
                    f"{c['rows_quarantined']} quarantined"
                    + (f", {c['rows_skipped']} skipped" if c["rows_skipped"] else ""),
                )
                for name, c in st.tables.items()
            ]
            if len(st.tables) > 1
            else []
        ),
    ]:
        table.add_row(label, value)
    return table


def quarantine_table(path: str, entries: list[dict[str, Any]]) -> RichTable:
    table = RichTable(
        title=f"quarantine {path}: showing {len(entries)}",
        title_justify="left",
    )
    for name in ("batch", "reason", "record", "recorded at"):
        table.add_column(name, overflow="fold")
    for e in entries:
        table.add_row(
            str(e["batch_id"]),
            Text(e["reason"]),
            Text(e["record"]),
            e["recorded_at"].isoformat(timespec="seconds"),
        )
    return table


def entries_table(
    path: str, entries: list[ListedEntry], total: int, several: bool = False
) -> RichTable:
    """``quarantine list``: each entry's batch (and table, with ``several``
    tables), kind, state, reason and when."""
    table = RichTable(
        title=f"quarantine {path}: {total} entries, showing {len(entries)}",
        title_justify="left",
    )
    columns = ["entry", "batch", *(["table"] if several else [])]
    for name in [*columns, "kind", "state", "reason", "when", "record"]:
        table.add_column(name, overflow="fold")
    for e in entries:
        table.add_row(
            e.entry.entry_id,
            str(e.entry.batch_id),
            *([e.table or "(none)"] if several else []),
            e.kind,
            e.state,
            Text(e.reason),
            e.when.isoformat(timespec="seconds"),
            Text(e.entry.record),
        )
    return table


def rows_table(
    batch: StagedBatch, rows: list[dict[str, Any]], kind: str = "batch"
) -> RichTable:
    """A staged batch's rows; ``kind`` names it (``repair``: verify --repair's)."""
    table = RichTable(
        title=f"{kind} {batch.batch_id}: {batch.rows} rows in "
        f"{len(batch.files)} file(s), showing {len(rows)}",
        title_justify="left",
    )
    for name in rows[0].keys() if rows else []:
        table.add_column(name)
    for row in rows:
        table.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    return table


def applied_counts(result: CommitResult) -> str:
    """What applying a batch did, as ``recover`` and ``replay`` say it."""
    return f"{result.rows} rows upserted, {result.deleted} deleted" + (
        f", {result.skipped} skipped as stale" if result.skipped else ""
    )


def span(first: int | None, last: int | None) -> str:
    return "none" if first is None else f"{first}..{last}"


def maybe(value: object) -> str:
    return "-" if value is None else str(value)


def ids(ids: tuple[int, ...]) -> str:
    shown = ", ".join(map(str, ids[:20]))
    return shown + (f" … ({len(ids)} in all)" if len(ids) > 20 else "")


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
