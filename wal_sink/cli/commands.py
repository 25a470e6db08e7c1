"""The ``wal-sink`` operations CLI: ``wal-sink -c FILE COMMAND``.

The click layer only parses options, calls library functions and renders their
results (rich for people, JSON for scripts). Errors are one line on stderr: exit 1
when the command failed, 2 for usage and configuration errors. No command starts a
JVM: delta-rs reads and writes the WAL.
"""

from __future__ import annotations

import json
import logging

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from wal_sink.cli.base import err, out, show
from wal_sink.cli.base import fail as _fail
from wal_sink.cli.base import one_line_errors as _one_line_errors
from wal_sink.cli.base import open_sink as _instance
from wal_sink.cli.follow import follow as follow_command
from wal_sink.cli.purge import purge as purge_command
from wal_sink.cli.quarantine import quarantine as quarantine_group
from wal_sink.cli.render import (
    applied_counts,
    ids,
    quarantine_table,
    rows_table,
    status_table,
)
from wal_sink.cli.verify import verify as verify_command
from wal_sink.exit_status import FAILED, exit_now


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c",
    "--config",
    "config_path",
    envvar="WAL_SINK_CONFIG",
    type=click.Path(dir_okay=False),
    help="Sink config (TOML); or set WAL_SINK_CONFIG. Every command but "
    "config-schema needs one; config-schema validates it when given.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log what the library does.")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, verbose: bool) -> None:
    """See, recover, replay, purge and inspect a wal_sink write-ahead log, set
    aside a batch that cannot be applied, and see, retry and export quarantined
    records.

    Example: wal-sink -c conf/local.toml status
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    ctx.obj = config_path


@main.command("init-db")
@click.pass_context
@_one_line_errors
def init_db_command(ctx: click.Context) -> None:
    """Create the sink's tables if missing, or bring them up to date (idempotent):
    the ack, lease, outbox and retry tables, with several target tables the
    per-table ack table; with [cdc] and a version column each target's tombstone
    table (with cdc.truncate_values its truncate table too); for a history, its
    events table. Each is named as it is ready.

    Example: wal-sink -c conf/local.toml init-db
    """
    from wal_sink.mysql.tables import init_db
    from wal_sink.mysql.tombstones import ensure_side_tables

    with _instance(ctx) as sink:
        sink.check_owners()  # a copied config is refused before any table is made
        *names, last = init_db(sink.engine, sink.config.mysql)
        out.print(f"tables {', '.join(names)} and {last} are ready")
        config = sink.config
        for kind, name in ensure_side_tables(sink.engine, config, config.mysql.targets):
            out.print(f"{kind} table {name} is ready")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Stable JSON for scripts.")
@click.option(
    "--watch",
    is_flag=True,
    help="Read again every --interval seconds until Ctrl-C: pending batches, commit "
    "lag, last commit, rows/s. In place on a terminal, else (or with --json) one "
    "line per reading.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    help="Seconds between readings, with --watch (default 2).",
)
@click.pass_context
@_one_line_errors
def status(
    ctx: click.Context, as_json: bool, watch: bool, interval: float | None
) -> None:
    """Staged, acked and unacked batches, rows, WAL size, lag and lease.

    Example: wal-sink -c conf/local.toml status --json

    Example: wal-sink -c conf/local.toml status --watch --interval 5
    """
    from wal_sink.ops.status import collect_status

    if interval is not None and not watch:
        raise click.UsageError("--interval goes with --watch")
    if watch:
        from wal_sink.cli.watch import watch as watch_status

        with _instance(ctx) as sink:
            watch_status(sink, interval or 2.0, out, as_json)
        return
    with _instance(ctx) as sink:
        st = collect_status(sink)
    if as_json:
        click.echo(json.dumps(st.to_json(), sort_keys=True, indent=2))
        return
    show(status_table(st))
    if not st.ack_tables_exist:
        err.print("note: the ack and lease tables do not exist yet; run init-db")


@main.command()
@click.pass_context
@_one_line_errors
def recover(ctx: click.Context) -> None:
    """Apply every staged batch without an ack, in order (the job's start-up path),
    then every repair (verify --repair) staged and not applied.

    Takes the lease: a running job of this sink is fenced and stops. Refuses (exit
    2) when Spark's commit log at job.checkpoint holds a batch above everything the
    WAL and the ack table know: the WAL it was staged into is gone.

    Example: wal-sink -c conf/local.toml recover
    """
    from wal_sink.ops.recover import recover_sink
    from wal_sink.ops.verify_repair import complete_pending

    with _instance(ctx) as sink:
        results = recover_sink(sink)
        repairs = complete_pending(sink)
    if not results:
        out.print("nothing to recover: every staged batch has an ack")
    for r in results:
        out.print(f"batch {r.batch_id}: {applied_counts(r)}")
    for repair in repairs:
        out.print(repair.line(), markup=False)


@main.command()
@click.option(
    "--from", "first", type=click.IntRange(min=0), required=True, help="First batch id."
)
@click.option(
    "--to",
    "last",
    type=click.IntRange(min=0),
    required=True,
    help="Last batch id (inclusive).",
)
@click.option(
    "--force", is_flag=True, help="Re-apply batches that already have an ack."
)
@click.option("--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask before re-adding `add` columns.")
@click.pass_context
@_one_line_errors
def replay(
    ctx: click.Context, first: int, last: int, force: bool, dry_run: bool, yes: bool
) -> None:
    """Re-apply staged batches --from N --to M, in order, through the committer.

    Acked batches are skipped unless --force. Takes the lease: a running job of this
    sink is fenced and stops.

    Example: wal-sink -c conf/local.toml replay --from 10 --to 12 --force --dry-run
    """
    from wal_sink.ops.replay import plan_replay, run_replay

    if first > last:
        raise click.UsageError(f"--from {first} is after --to {last}")
    with _instance(ctx) as sink:
        plan = plan_replay(sink, first, last, force=force)
        verb = "would apply" if dry_run else "applying"
        out.print(
            f"{verb} {len(plan.apply)} batch(es), {plan.rows} rows"
            + (f": {ids(plan.apply)}" if plan.apply else "")
        )
        if plan.skipped_acked:
            out.print(
                f"skipping acked batch(es) {ids(plan.skipped_acked)} "
                "(use --force to re-apply)"
            )
        if plan.missing:
            out.print(f"not in the WAL (never staged or purged): {ids(plan.missing)}")
        if plan.changes_again:
            warning = (
                f"batch(es) {ids(plan.reapplied_acked)} are already applied: "
                f"replaying changes {', '.join(plan.changing_columns)} AGAIN "
                "(their merge mode adds up what is applied)"
            )
            err.print(f"warning: {warning}")
            if not dry_run and not yes and not click.confirm("Continue?", err=True):
                _fail("replay cancelled; nothing changed", FAILED)
        if dry_run or not plan.apply:
            return
        with Progress(
            TextColumn("batch {task.fields[batch]}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as progress:
            task = progress.add_task("replay", total=plan.rows or 1, batch="")
            base = {"rows": 0}

            def chunk_done(done: int, total: int) -> None:
                progress.update(task, completed=base["rows"] + done)

            def batch_done(result) -> None:
                base["rows"] += result.rows + result.deleted
                progress.update(task, completed=base["rows"], batch=result.batch_id)

            results = run_replay(
                sink, plan, force=force, on_chunk=chunk_done, on_batch=batch_done
            )
    for r in results:
        out.print(
            f"batch {r.batch_id}: "
            + (applied_counts(r) if r.applied else "already applied, skipped")
        )


@main.command()
@click.argument("batch_id", type=click.IntRange(min=0), required=False)
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows to show.",
)
@click.option(
    "--quarantine",
    is_flag=True,
    help="Show quarantined records and why (of batch N, if given).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Show the rows of repair N (verify --repair) instead of batch N.",
)
@click.pass_context
@_one_line_errors
def inspect(
    ctx: click.Context,
    batch_id: int | None,
    limit: int,
    quarantine: bool,
    repair: bool,
) -> None:
    """Show the rows of staged batch N in apply order, quarantined records, or the
    rows of repair N.

    Example: wal-sink -c conf/local.toml inspect 42 --limit 5
    Example: wal-sink -c conf/local.toml inspect --quarantine
    Example: wal-sink -c conf/local.toml inspect 1 --repair
    """
    if batch_id is None and not quarantine:
        raise click.UsageError("give a batch id, or --quarantine")
    if repair and (quarantine or batch_id is None):
        raise click.UsageError("--repair takes a repair id, without --quarantine")
    with _instance(ctx) as sink:
        if quarantine:
            entries = sink.quarantine.read(limit, batch_id)
            show(quarantine_table(sink.config.quarantine_path, entries))
            return
        if repair:
            from wal_sink.ops.verify_repair import Repairs

            reader = Repairs(sink, writing=False).reader
            staged = reader.staged_batch(batch_id)
            if staged is None:
                _fail(f"repair {batch_id} is not staged ({reader.path})", FAILED)
            show(rows_table(staged, reader.head(staged, limit), "repair"))
            return
        batch = sink.wal.staged_batch(batch_id)
        if batch is None:
            _fail(
                f"batch {batch_id} is not in the WAL (never staged, or purged)",
                FAILED,
            )
        rows = sink.wal.head(batch, limit)
        mysql = sink.config.mysql
        if mysql.route_column:  # several tables: each row's, by its route
            tables = {t.route: t.table for t in mysql.targets}
            rows = [
                {"(table)": tables.get(r.get(mysql.route_column), "(none)"), **r}
                for r in rows
            ]
    show(rows_table(batch, rows))


@main.command("quarantine-batch")
@click.argument("batch_id", type=click.IntRange(min=0))
@click.option("--yes", is_flag=True, help="Do not ask before setting it aside.")
@click.pass_context
@_one_line_errors
def quarantine_batch(ctx: click.Context, batch_id: int, yes: bool) -> None:
    """Set staged batch N aside whole: its rows go to the quarantine table, its ack
    row says quarantined, and it is never applied.

    For a batch that fails for a reason no row carries. Only the lowest staged batch
    without an ack; exactly once. Takes the lease: a running job of this sink is
    fenced and stops.

    Example: wal-sink -c conf/local.toml quarantine-batch 42
    """
    from wal_sink.ops.quarantine_batch import plan_set_aside, set_aside_batch

    with _instance(ctx) as sink:
        plan = plan_set_aside(sink, batch_id)
        where = sink.config.quarantine_path
        out.print(
            f"batch {batch_id}: its {plan.rows} row(s) go to the quarantine table "
            f"{where} and the batch is acked as quarantined; it is never applied"
        )
        if not yes and not click.confirm(f"Set batch {batch_id} aside?", err=True):
            _fail("quarantine-batch cancelled; nothing changed", FAILED)
        result = set_aside_batch(sink, plan)
    if not result.applied:
        _fail(f"batch {batch_id} has an ack already; nothing changed", FAILED)
    out.print(
        f"batch {batch_id}: {result.quarantined} row(s) set aside, acked as quarantined"
    )


@main.command("config-schema")
@click.pass_context
@_one_line_errors
def config_schema_command(ctx: click.Context) -> None:
    """Print the JSON Schema of the config file, for editors that check and complete
    TOML (e.g. Taplo, or VS Code's Even Better TOML with a `#:schema` line). With
    -c FILE (or WAL_SINK_CONFIG), FILE is validated first, as every command reads
    it (nothing is connected to): an invalid one is one line, exit 2.

    Example: wal-sink config-schema > wal_sink.schema.json

    Example: wal-sink -c conf/local.toml config-schema > /dev/null
    """
    from wal_sink.config import config_schema, load_config

    if ctx.obj is not None:
        load_config(ctx.obj)
        click.echo(f"config {ctx.obj} is valid", err=True)
    click.echo(json.dumps(config_schema(), indent=2, sort_keys=True))


main.add_command(follow_command)
main.add_command(purge_command)
main.add_command(quarantine_group)
main.add_command(verify_command)


def run() -> None:
    """Console entry point: click's exit status, kept through ``exit_now``."""
    try:
        main(standalone_mode=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    exit_now(code)
