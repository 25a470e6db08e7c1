"""``wal-sink verify``: the options and the lines it prints; the checks are
ops/verify_books.py's."""

from __future__ import annotations

import json
import sys

import click

from wal_sink.cli.base import one_line_errors, open_sink, out
from wal_sink.exit_status import FINDINGS


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Stable JSON for scripts.")
@click.pass_context
@one_line_errors
def verify(
    ctx: click.Context,
    as_json: bool,
) -> None:
    """Check that the sink's books balance (acks against the WAL, the outbox, the
    quarantine, tombstones). One line per finding; exit 0 when there is none, 4
    when there are.

    Example: wal-sink -c conf/local.toml verify
    """
    _books(ctx, as_json)


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
