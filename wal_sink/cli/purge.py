"""``wal-sink purge``: the options and the lines it prints; what is selected and
removed, and in which order, is ops/purge.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from wal_sink.cli.base import one_line_errors, open_sink, out
from wal_sink.cli.render import ids, size
from wal_sink.durations import parse_duration

if TYPE_CHECKING:
    from wal_sink.ops.purge import Purge, PurgeReport


@click.command()
@click.option("--before", type=click.IntRange(min=0), help="Batches with id < N.")
@click.option(
    "--older-than", "older_than", help="Batches acked longer ago, e.g. '7 days'."
)
@click.option(
    "--dry-run", is_flag=True, help="Say what would be removed; change nothing."
)
@click.option(
    "--vacuum",
    "do_vacuum",
    is_flag=True,
    help="Also delete unreferenced files (purged batches, crash leftovers).",
)
@click.option(
    "--quarantine-older-than",
    "quarantine_older_than",
    help="Also remove quarantine entries set aside longer ago, open ones included, "
    "e.g. '30 days'. Without it only retried entries of the purged batches go.",
)
@click.option(
    "--retain",
    default="1 hour",
    show_default=True,
    help="--vacuum keeps unreferenced files younger than this (in whole hours, "
    "rounded up); at least wal.min_vacuum_retention (default 1 hour), and above "
    "your slowest stage while a job runs.",
)
@click.pass_context
@one_line_errors
def purge(
    ctx: click.Context,
    before: int | None,
    older_than: str | None,
    dry_run: bool,
    do_vacuum: bool,
    retain: str,
    quarantine_older_than: str | None,
) -> None:
    """Remove acked batches from the WAL; batches without an ack are never removed.

    Retried quarantine entries of those batches go too (and of batches purged
    before them); open ones only with --quarantine-older-than. With [cdc] and a
    version column, also tombstones older than cdc.tombstone_retention.

    Example: wal-sink -c conf/local.toml purge --older-than '7 days' --vacuum
    """
    from wal_sink.ops.purge import run_purge, select_purge

    if (before is not None and older_than is not None) or (
        before is None and older_than is None and quarantine_older_than is None
    ):
        raise click.UsageError(
            "give one of --before N or --older-than DURATION, and/or "
            "--quarantine-older-than DURATION"
        )
    try:
        age = parse_duration(older_than) if older_than is not None else None
        retain_seconds = parse_duration(retain)
        quarantine_age = (
            parse_duration(quarantine_older_than)
            if quarantine_older_than is not None
            else None
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    with open_sink(ctx) as sink:
        selected = select_purge(
            sink,
            before=before,
            older_than=age,
            quarantine_older_than=quarantine_age,
            dry_run=dry_run,
            retain=retain if do_vacuum else None,
            retain_seconds=retain_seconds if do_vacuum else None,
        )
        show_selected(selected, quarantine_older_than)
        report = run_purge(sink, selected)
        retention = sink.config.cdc.tombstone_retention if sink.config.cdc else ""
    show_report(report, dry_run, retention)


def show_selected(selected: Purge, quarantine_older_than: str | None) -> None:
    """What the purge is about to remove (or, dry, would)."""
    verb = "would remove" if selected.dry_run else "removing"
    plan = selected.batches
    if plan is not None:
        out.print(
            f"{verb} {len(plan.remove)} acked batch(es), {plan.rows} rows, "
            f"{size(plan.bytes)}" + (f": {ids(plan.remove)}" if plan.remove else "")
        )
        if plan.kept_unacked:
            out.print(
                f"keeping unacked batch(es) {ids(plan.kept_unacked)}: "
                "run `wal-sink recover` to apply them"
            )
    entries = selected.quarantine
    if entries.entries or selected.quarantine_older_than is not None:
        out.print(
            f"{verb} {entries.entries} quarantine entr(ies): "
            f"{len(entries.retried)} retried of the purged batches"
            + (
                f", {entries.older} set aside before {quarantine_older_than} ago "
                f"({entries.older_open} of them open)"
                if selected.quarantine_older_than is not None
                else ""
            )
        )


def show_report(report: PurgeReport, dry_run: bool, tombstone_retention: str) -> None:
    """What the purge removed (or, dry, would)."""
    if report.tombstones is not None:
        out.print(
            f"{'would remove' if dry_run else 'removed'} {report.tombstones} "
            f"tombstone(s) older than {tombstone_retention}"
        )
    for folded in report.folded:
        out.print(
            f"{'would fold' if dry_run else 'folded'} {folded.events} event(s) of "
            f"{folded.keys} key(s) of history {folded.table} older than its "
            "history_retention"
        )
    if report.retry_rows is not None:
        out.print(f"dropped {report.retry_rows} retry row(s) of removed entries")
    if report.ack_rows is not None:
        out.print(f"dropped {report.ack_rows} ack row(s) of purged batches")
    if report.vacuum is not None:
        verb = "vacuum would free" if dry_run else "vacuum freed"
        out.print(
            f"{verb} {size(report.vacuum.bytes)} in {report.vacuum.files} file(s)"
        )
