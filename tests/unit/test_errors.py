"""Every error class lives in errors.py, so an error the data source raised in a
Spark task comes back to the job as itself: the job finds its class by name in the
query's failure (sink_error_in, job/follower_path.py) and decides on it (terminal
errors stop the job, others go through the restart strategy)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import wal_sink
from wal_sink import errors
from wal_sink.errors import WalSinkError
from wal_sink.job.follower_path import sink_error_in


def every_module() -> None:
    """Import every module of the package, so that every error class is seen."""
    for module in pkgutil.walk_packages(wal_sink.__path__, "wal_sink."):
        importlib.import_module(module.name)


def subclasses(root: type) -> list[type]:
    found = []
    for kind in root.__subclasses__():
        found += [kind, *subclasses(kind)]
    return found


every_module()
ERRORS = sorted(set(subclasses(WalSinkError)), key=lambda kind: kind.__name__)


def test_every_error_class_is_defined_in_errors_py():
    outside = [
        f"{kind.__module__}.{kind.__name__}"
        for kind in ERRORS
        if kind.__module__ != errors.__name__
    ]
    assert not outside


@pytest.mark.parametrize("kind", ERRORS, ids=lambda kind: kind.__name__)
def test_rebuild_error_from_query_failure_keeps_class_and_line(kind):
    raised = kind("the line it said", sink_id="s", batch_id=4)
    failure = RuntimeError(
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker.\n"
        "Traceback (most recent call last):\n"
        '  File "stage_commit.py", line 1, in commit\n'
        f"{type(raised).__module__}.{type(raised).__name__}: {raised}\n"
    )
    rebuilt = sink_error_in(failure)
    assert type(rebuilt) is kind
    assert str(rebuilt) == "sink 's', batch 4: the line it said"


def test_rebuild_error_from_other_failure_returns_it():
    failure = RuntimeError("java.lang.OutOfMemoryError: Java heap space")
    assert sink_error_in(failure) is failure
