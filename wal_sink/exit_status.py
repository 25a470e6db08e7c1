"""How a process of wal_sink ends: the exit codes, which error ends it with which,
and leaving with the real exit status.

The contract's codes, the same for the ``wal-sink`` CLI, the streaming job and
``wal-sink follow``: 0 done, 1 failed, 2 usage or configuration error. The job's
follower child (job.writer = "datasource") tells the job one thing more, with 3:
it failed for good, and no restart can help. ``wal-sink verify`` tells one more,
with 4: it ran, and found what does not balance or differ.

A process that read Delta/Parquet through pyarrow can abort in native destructors at
interpreter exit ("terminate called without an active exception", exit 134) after
all its work succeeded (apache/arrow#34314, delta-io/delta-rs#2184). The entry
points therefore flush what they wrote and end with ``os._exit``.
"""

from __future__ import annotations

import logging
import os
import sys

from wal_sink.errors import ConfigError, TerminalError

OK = 0
"""Done: drained, or stopped (what is not applied stays staged for the next start)."""
FAILED = 1
"""Failed: a command that did not do what it was asked, a terminal error, a restart
strategy that gave up; from the follower child, a failure a restart may cure."""
USAGE = 2
"""A usage or configuration error (ConfigError): running it again as it is cannot
help."""
TERMINAL = 3
"""The follower child's only: it failed for good (fenced, the target dropped, ...).
The job then stops at once, and exits FAILED."""
FINDINGS = 4
"""``wal-sink verify`` only: it ran and found something (a count that does not
balance, a row that differs from the source); each is one line of its output."""


def exit_code(error: BaseException | None, *, terminal: int = FAILED) -> int:
    """The exit code of a process ending on ``error`` (None: it did its work);
    ``terminal`` for a terminal error that is not a configuration error."""
    if error is None:
        return OK
    if isinstance(error, ConfigError):
        return USAGE
    if isinstance(error, TerminalError):
        return terminal
    return FAILED


def exit_now(code: int) -> None:
    """Flush stdout, stderr and logging, then end the process with ``code``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
