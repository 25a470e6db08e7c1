"""What every ``wal-sink`` command shares: the consoles, one-line errors with the
contract's exit codes (exit_status.py), and the sink instance its config
describes."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config, load_config
from wal_sink.errors import WalSinkError
from wal_sink.exit_status import FAILED, exit_code
from wal_sink.mysql.errors import mysql_error

if TYPE_CHECKING:
    from wal_sink.protocol.sink_instance import SinkInstance

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def show(table: RichTable, console: Console = out) -> None:
    """Print a table with its title on a line of its own that is never wrapped: as a
    rich title it would be folded to the table's width, and a path or a count in it
    split across lines, which a reader's grep or copy then misses."""
    title, table.title = table.title, None
    if title:
        console.print(Text(str(title)), soft_wrap=True)
    console.print(table)


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn expected failures into one line on stderr and the contract's exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except WalSinkError as e:
            fail(str(e), exit_code(e))
        except DBAPIError as e:
            fail(str(mysql_error(e)), FAILED)

    return wrapper


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@contextmanager
def open_sink(ctx: click.Context) -> Iterator[SinkInstance]:
    """The sink of the config the command was given (``-c``)."""
    # Imported here: delta-rs and pyarrow are not needed for --help or usage errors.
    from wal_sink.protocol.sink_instance import SinkInstance

    if ctx.obj is None:
        raise click.UsageError("give the sink's config: -c FILE (or WAL_SINK_CONFIG)")
    config: Config = load_config(ctx.obj)
    instance = SinkInstance(config)
    try:
        yield instance
    finally:
        instance.close()
