"""Which storage errors a retry can cure (docs/failures.md), like mysql_errors for
MySQL.

delta-rs, pyarrow and the OS raise many kinds of errors; what matters to the sink is
whether retrying the batch may help (a timeout, a dropped connection, a throttled or
briefly unavailable object store) or not (a missing or unreadable file, a corrupt
one, a refused permission), and the path it concerns.

The error's class and errno decide wherever the library gives one; only the generic
errors left (delta-rs's ``DeltaError`` and pyarrow's ``OSError`` wrapping an object
store's reply, with no errno) are told apart by their text.
"""

from __future__ import annotations

import errno
import re

from deltalake.exceptions import (
    DeltaProtocolError,
    SchemaMismatchError,
    TableNotFoundError,
)
from obstore.exceptions import (
    InvalidPathError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)

from wal_sink.errors import TerminalError, TransientError, WalSinkError, first_line

TRANSIENT_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EINTR,
        errno.EIO,
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
    }
)
# What object-store clients (delta-rs's object_store, pyarrow's S3) say when the
# store is slow, busy or briefly unreachable.
TRANSIENT_TEXT = re.compile(
    r"timed? ?out|timeout|connection (?:reset|refused|closed|aborted)|error sending "
    r"request|broken pipe|temporar|unavailable|slow ?down|throttl|too many requests|"
    r"\b(?:500|502|503|504)\b|internal ?error|dispatch failure|io error",
    re.IGNORECASE,
)
TERMINAL_TYPES = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    TableNotFoundError,
    DeltaProtocolError,
    SchemaMismatchError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    InvalidPathError,
)
"""Errors whose class says a retry cannot help: a missing table, file or object, a
refused permission or credential, a table this delta-rs cannot read or write."""


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, TERMINAL_TYPES):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return True
    if "not found" in str(exc).lower():
        return False
    return bool(TRANSIENT_TEXT.search(str(exc)))


def storage_error(
    exc: BaseException,
    location: str,
    *,
    sink_id: str | None = None,
    batch_id: int | None = None,
) -> WalSinkError:
    """The sink's error for ``exc`` raised while reaching ``location``: transient
    (the batch is retried) or terminal (one line naming the path)."""
    if isinstance(exc, WalSinkError):
        return exc
    path = getattr(exc, "filename", None) or location
    reason = f"storage error at {path}: {first_line(exc)}"
    kind = TransientError if is_transient(exc) else TerminalError
    return kind(reason, sink_id=sink_id, batch_id=batch_id)
