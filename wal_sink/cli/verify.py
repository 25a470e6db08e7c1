"""``wal-sink verify``: the options and the lines it prints; the checks are
ops/verify_books.py's, the comparison with a source ops/verify_against.py's."""

from __future__ import annotations

import json
import sys

import click

from wal_sink.cli.base import one_line_errors, open_sink, out
from wal_sink.exit_status import FINDINGS


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
    as_json: bool,
) -> None:
    """Check that the sink's books balance (acks against the WAL, the outbox, the
    quarantine, tombstones), or with --against that the target holds what SOURCE
    holds, by key, in checksummed chunks. One line per finding or difference; exit
    0 when there is none, 4 when there are.

    Example: wal-sink -c conf/local.toml verify

    Example: wal-sink -c conf/local.toml verify --against s3a://lake/invoices --json
    """
    if source is None:
        for given, name in (
            (table, "--table"),
            (columns, "--columns"),
            (where, "--where"),
        ):
            if given is not None:
                raise click.UsageError(f"{name} goes with --against")
        _books(ctx, as_json)
        return
    from wal_sink.ops.verify_against import verify_against
    from wal_sink.ops.verify_read import Source

    wanted = tuple(c.strip() for c in (columns or "").split(",") if c.strip())
    with open_sink(ctx) as sink:
        reports = verify_against(
            sink,
            Source.parse(source),
            table=table,
            columns=wanted,
            where=where,
            chunk_rows=chunk_rows,
        )
    if as_json:
        click.echo(json.dumps([r.to_json() for r in reports], indent=2, sort_keys=True))
    else:
        for report in reports:
            for d in report.differences:
                out.print(f"{report.table}: {d.line()}", soft_wrap=True, markup=False)
            out.print(report.summary(), soft_wrap=True, markup=False)
    if any(r.differences for r in reports):
        sys.exit(FINDINGS)


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
