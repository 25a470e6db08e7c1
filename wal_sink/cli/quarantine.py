"""``wal-sink quarantine list / retry / export``: quarantined records seen, applied
after all once the target is fixed (exactly once), or written out for fixing and
landing again when no row can be applied as it is."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import click

from wal_sink.cli.base import err, fail, one_line_errors, open_sink, out, show
from wal_sink.cli.render import entries_table, ids
from wal_sink.exit_status import FAILED, USAGE

BATCH = click.option(
    "--batch",
    "batch_id",
    type=click.IntRange(min=0),
    help="Only entries of batch N.",
)
REASON = click.option(
    "--reason", help="Only entries whose reason holds this text (in any case)."
)
TABLE = click.option(
    "--table",
    help="Only entries meant for this table (with several tables; '' for rows "
    "whose route named none).",
)


@click.group()
def quarantine() -> None:
    """See, retry and export quarantined records.

    The workflow: list what is set aside and why, fix the target (widen a column,
    add the missing parent row), retry; export what cannot be retried (records
    Spark could not parse) to fix and land again.

    Example: wal-sink -c conf/local.toml quarantine list --reason 1406
    """


@quarantine.command("list")
@BATCH
@REASON
@TABLE
@click.option("--json", "as_json", is_flag=True, help="JSON for scripts.")
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Entries to show, the newest batches last.",
)
@click.pass_context
@one_line_errors
def list_command(
    ctx: click.Context,
    batch_id: int | None,
    reason: str | None,
    table: str | None,
    as_json: bool,
    limit: int,
) -> None:
    """Quarantined records with their batch, reason, state (open, retried, failed
    again) and when.

    Example: wal-sink -c conf/local.toml quarantine list --batch 42 --json
    """
    from wal_sink.ops.quarantine_entries import list_entries

    with open_sink(ctx) as sink:
        listed = list_entries(sink, batch_id=batch_id, reason=reason, table=table)
        where = sink.config.quarantine_path
        several = sink.config.mysql.route_column is not None
    shown = listed[-limit:]
    if as_json:
        click.echo(json.dumps([e.to_json() for e in shown], indent=2, sort_keys=True))
        return
    show(entries_table(where, shown, len(listed), several))


@quarantine.command()
@BATCH
@REASON
@TABLE
@click.option(
    "--dry-run", is_flag=True, help="Say what would be retried; change nothing."
)
@click.option("--yes", is_flag=True, help="Do not ask before applying.")
@click.pass_context
@one_line_errors
def retry(
    ctx: click.Context,
    batch_id: int | None,
    reason: str | None,
    table: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Apply the selected open records through the sink's upserts, exactly once, in
    their batches' order; a record refused again stays open with its new reason.

    Does not take the lease: a running job of this sink goes on, taking turns with
    the retry's transactions. Exit 1 when any record was refused again.

    Example: wal-sink -c conf/local.toml quarantine retry --reason 1452 --dry-run
    """
    from wal_sink.ops.quarantine_entries import WHY_NOT
    from wal_sink.ops.quarantine_retry import plan_retry, run_retry

    with open_sink(ctx) as sink:
        plan = plan_retry(sink, batch_id=batch_id, reason=reason, table=table)
        batches = tuple(b for b, _ in plan.batches)
        verb = "would retry" if dry_run else "retrying"
        say(
            f"{verb} {plan.entries} open record(s) of {len(batches)} batch(es)"
            + (f": {ids(batches)}" if batches else "")
        )
        for kind, count in sorted(plan.not_retried.items()):
            say(f"not retrying {count} record(s): {WHY_NOT[kind]}")
        if plan.retried_before:
            say(f"{plan.retried_before} selected record(s) were retried before")
        if dry_run or not plan.entries:
            return
        tables = ", ".join(t.table for t in sink.config.mysql.targets)
        if not yes and not click.confirm(
            f"Apply {plan.entries} record(s) to {tables}?", err=True
        ):
            fail("retry cancelled; nothing changed", FAILED)
        results = run_retry(sink, plan)
    failed: dict[str, str] = {}
    for r in results:
        say(
            f"batch {r.batch_id}: {r.applied} applied"
            + (f" ({r.stale} stale: a newer delete)" if r.stale else "")
            + f", {len(r.failed)} failed again"
            + (
                f", {r.retried_meanwhile} retried meanwhile by another retry "
                "or superseded by a replay"
                if r.retried_meanwhile
                else ""
            )
        )
        failed.update(r.failed)
    for entry_id, why in list(failed.items())[:20]:
        err.print(f"  {entry_id}: {why}", markup=False, soft_wrap=True)
    if failed:
        fail(
            f"{len(failed)} record(s) were refused again and stay open with their new "
            "reason (wal-sink quarantine list); the others are applied",
            FAILED,
        )


@quarantine.command()
@BATCH
@REASON
@TABLE
@click.option(
    "--to",
    "path",
    required=True,
    help="File to write (one JSON object per line), or - for stdout.",
)
@click.pass_context
@one_line_errors
def export(
    ctx: click.Context,
    batch_id: int | None,
    reason: str | None,
    table: str | None,
    path: str,
) -> None:
    """Write the open records, one JSON object per line (entry_id, batch_id, kind,
    state, reason, recorded_at, record, ...), for fixing and landing again; records
    Spark could not parse have kind raw_text and their text in record.raw.

    Example: wal-sink -c conf/local.toml quarantine export --to bad.jsonl
    """
    from wal_sink.ops.quarantine_entries import RAW_TEXT, list_entries

    if path != "-" and os.path.exists(path):
        fail(f"{path} exists: give another --to, or remove it", USAGE)
    with open_sink(ctx) as sink:
        listed = list_entries(sink, batch_id=batch_id, reason=reason, table=table)
    lines = [
        json.dumps(e.to_json(), sort_keys=True, ensure_ascii=False) + "\n"
        for e in listed
        if e.is_open
    ]
    if path == "-":
        click.echo("".join(lines), nl=False)
        return
    try:
        _write_whole(Path(path), "".join(lines))
    except FileExistsError:
        fail(f"{path} exists: give another --to, or remove it", USAGE)
    except OSError as e:
        fail(f"cannot write {path}: {e.strerror}", USAGE)
    raw = sum(e.is_open and e.kind == RAW_TEXT for e in listed)
    say(f"exported {len(lines)} open record(s) to {path} ({raw} raw text)")


def say(line: str) -> None:
    """One line on stdout, as written: no markup, no wrapping (scripts read it)."""
    out.print(line, markup=False, soft_wrap=True)


def _write_whole(path: Path, text: str) -> None:
    """``text`` into a new file at ``path``, which appears whole or not at all."""
    fd, temp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.link(temp, path)  # refuses an existing file, unlike a rename
    finally:
        os.unlink(temp)
