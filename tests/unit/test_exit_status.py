"""The one exit-code table (exit_status.py): the CLI, the job and the follower child
map errors to codes through ``exit_code``."""

from __future__ import annotations

import pytest

from wal_sink.errors import (
    CheckpointResetError,
    ConfigError,
    FencedError,
    RetryStopped,
    StopRequested,
    TerminalError,
    TransientError,
)
from wal_sink.exit_status import FAILED, OK, TERMINAL, USAGE, exit_code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (None, OK),
        (ConfigError("x"), USAGE),
        (CheckpointResetError("x"), USAGE),
        (TerminalError("x"), FAILED),
        (FencedError("x"), FAILED),
        (RetryStopped("x"), FAILED),
        (TransientError("x"), FAILED),
        (StopRequested("x"), FAILED),
        (OSError("x"), FAILED),
    ],
)
def test_exit_code_of_error_follows_the_contract(error, code):
    assert exit_code(error) == code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConfigError("x"), USAGE),
        (FencedError("x"), TERMINAL),
        (TransientError("x"), FAILED),
        (OSError("x"), FAILED),
    ],
)
def test_exit_code_of_follower_child_tells_terminal_from_retryable(error, code):
    assert exit_code(error, terminal=TERMINAL) == code
