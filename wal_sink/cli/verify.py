"""``wal-sink verify``: the options and the lines it prints; the checks are
ops/verify_books.py's, the comparison with a source ops/verify_against.py's."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from wal_sink.cli.base import err, fail, one_line_errors, open_sink, out
from wal_sink.exit_status import FINDINGS

if TYPE_CHECKING:
    from wal_sink.ops.verify_against import TableReport
    from wal_sink.ops.verify_read import Source
    from wal_sink.protocol.sink_instance import SinkInstance


@click.command()
@click.option(
    "--against",
    "source",
    metavar="SOURCE",
    help="Compare the target with what SOURCE holds: a Delta table (path or "
    "s3a:// URI), a Parquet directory, or mysql://DATABASE.TABLE on the sink's "
    "server.",
)
@click.option("--table", help="With --against: only this table of the sink.")
@click.option(
    "--columns",
    help="With --against: the columns compared, e.g. 'a,b' (the key "
    "always); default: every column of the target the source has.",
)
@click.option(
    "--where",
    help="With --against: compare only the rows this SQL condition holds for, on "
    "both sides (MySQL's SQL; for a Delta source, delta-rs's).",
)
@click.option(
    "--chunk-rows",
    type=click.IntRange(min=1),
    default=1_000,
    show_default=True,
    help="With --against: rows per checksummed chunk.",
)
@click.option(
    "--repair",
    is_flag=True,
    help="With --against: write the differences to MySQL as one repair "
    "(upserts, deletes), exactly once; takes the lease (a running job stops).",
)
@click.option("--yes", is_flag=True, help="With --repair: do not ask first.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON for scripts.")
@click.pass_context
@one_line_errors
def verify(
    ctx: click.Context,
    source: str | None,
    table: str | None,
    columns: str | None,
    where: str | None,
    chunk_rows: int,
    repair: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Check that the sink's books balance (acks against the WAL, the outbox, the
    quarantine, tombstones), or with --against that the target holds what SOURCE
    holds, by key, in checksummed chunks. One line per finding or difference; exit
    0 when there is none, 4 when there are. With --repair, the differences are
    written to MySQL as one repair, applied exactly once (exit 0 once written).

    Example: wal-sink -c conf/local.toml verify

    Example: wal-sink -c conf/local.toml verify --against s3a://lake/invoices --json
    """
    if source is None:
        for given, name in (
            (table, "--table"),
            (columns, "--columns"),
            (where, "--where"),
            (repair or None, "--repair"),
        ):
            if given is not None:
                raise click.UsageError(f"{name} goes with --against")
        _books(ctx, as_json)
        return
    from wal_sink.ops.verify_against import verify_against
    from wal_sink.ops.verify_read import Source

    wanted = tuple(c.strip() for c in (columns or "").split(",") if c.strip())
    options: dict[str, Any] = {
        "table": table,
        "columns": wanted,
        "where": where,
        "chunk_rows": chunk_rows,
    }
    with open_sink(ctx) as sink:
        reports = verify_against(sink, Source.parse(source), **options)
        if as_json:
            click.echo(
                json.dumps([r.to_json() for r in reports], indent=2, sort_keys=True)
            )
        else:
            for report in reports:
                for d in report.differences:
                    line = f"{report.table}: {d.line()}"
                    out.print(line, soft_wrap=True, markup=False)
                out.print(report.summary(), soft_wrap=True, markup=False)
        if repair:
            _repair(sink, Source.parse(source), reports, yes, options, as_json)
            return
    if any(r.differences for r in reports):
        sys.exit(FINDINGS)


def _repair(
    sink: SinkInstance,
    source: Source,
    reports: list[TableReport],
    yes: bool,
    options: dict[str, Any],
    as_json: bool,
) -> None:
    """Say what the repair writes, ask, and write it (verify_repair.py). With
    ``as_json`` stdout holds the JSON alone: what was written goes to stderr."""
    said = err if as_json else out
    from wal_sink.ops.verify_against import DIFFERENT, EXTRA, MISSING
    from wal_sink.ops.verify_repair import Repairs, run_repair
    from wal_sink.protocol.recovery import unacked_batches

    sink.wal.refresh()
    staged = sink.wal.staged_batches() if sink.wal.exists() else {}
    with sink.engine.connect() as conn:
        pending = Repairs(sink).counts(conn).pending
        unacked = unacked_batches(sink.wal, sink.acks, conn, staged) if staged else []
    if unacked:
        err.print(
            f"batch(es) {', '.join(map(str, unacked))} staged and not applied: "
            "applied first, then the rows compared again",
            soft_wrap=True,
        )
    if pending:
        err.print(
            f"repair(s) {', '.join(map(str, pending))} staged and not applied (a "
            "repair stopped half-way): applied first",
            soft_wrap=True,
        )
    found = [r for r in reports if r.differences]
    if not found and not pending and not unacked:
        return
    for r in found:
        err.print(
            f"{r.table}: {r.count(MISSING) + r.count(DIFFERENT)} upsert(s), "
            f"{r.count(EXTRA)} delete(s)",
            soft_wrap=True,
        )
    err.print(
        "the repair takes the sink's lease: a running job of this sink stops "
        "(fenced) and must be started again; the rows are compared again under "
        "the lease and what differs then is written",
        soft_wrap=True,
    )
    if not yes and not click.confirm("Write the repair to MySQL?", err=True):
        fail("repair cancelled; nothing changed", FINDINGS)
    results, compared = run_repair(sink, source, **options)
    if unacked:  # what the staged batches left to repair
        for report in compared:
            for d in report.differences:
                line = f"{report.table}: {d.line()}"
                said.print(line, soft_wrap=True, markup=False)
    for result in results:
        said.print(result.line(), soft_wrap=True, markup=False)
    if len(results) == len(pending):
        said.print("nothing differs any more: no repair staged", soft_wrap=True)


def _books(ctx: click.Context, as_json: bool) -> None:
    from wal_sink.ops.verify_books import check_books

    with open_sink(ctx) as sink:
        findings = check_books(sink)
    if as_json:
        click.echo(
            json.dumps([f.to_json() for f in findings], indent=2, sort_keys=True)
        )
    else:
        for f in findings:
            out.print(f.line(), soft_wrap=True, markup=False)
        out.print(
            f"{len(findings)} finding(s)" if findings else "the books balance",
            soft_wrap=True,
        )
    if findings:
        sys.exit(FINDINGS)
