"""The ``wal-sink`` operations CLI. The click layer only parses options and calls
library functions; errors are one line on stderr (exit 1, or 2 for usage and
configuration errors)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from wal_sink.config import Config, load_config
from wal_sink.db import make_engine
from wal_sink.errors import ConfigError, WalSinkError
from wal_sink.schema import init_db as create_sink_tables

EXIT_FAILED = 1
EXIT_USAGE = 2


def _one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(EXIT_USAGE)
        except WalSinkError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(EXIT_FAILED)
    return wrapper


@click.group()
@click.option("-c", "--config", "config_path", envvar="WAL_SINK_CONFIG",
              type=click.Path(dir_okay=False), required=True,
              help="Sink config (TOML); or set WAL_SINK_CONFIG.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the library does.")
@click.pass_context
def main(ctx: click.Context, config_path: str, verbose: bool) -> None:
    """Operate a wal_sink write-ahead log and its MySQL acks.

    Example: wal-sink -c conf/local.toml init-db
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    ctx.obj = config_path


def _config(ctx: click.Context) -> Config:
    return load_config(ctx.obj)


@main.command("init-db")
@click.pass_context
@_one_line_errors
def init_db_command(ctx: click.Context) -> None:
    """Create the ack and lease tables if missing (idempotent).

    Example: wal-sink -c conf/local.toml init-db
    """
    config = _config(ctx)
    engine = make_engine(config.mysql)
    try:
        create_sink_tables(engine, config.mysql)
    finally:
        engine.dispose()
    click.echo(f"tables {config.mysql.ack_table} and {config.mysql.lease_table} are ready")
