"""Fault injection's contract (``WAL_SINK_FAULT=POINT[:BATCH[:ACTION]]``), short of
the kill the crash tests use: each point is one call in the code, a fault fires only
at its point and batch, and the ``-once`` actions fire once per process."""

from __future__ import annotations

import errno
import re
from collections import Counter
from pathlib import Path

import pytest

from wal_sink import TransientError, faults
from wal_sink.mysql.errors import mysql_error
from wal_sink.wal.storage_errors import storage_error

PACKAGE = Path(faults.__file__).parent


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    faults._raised.clear()
    yield
    faults._raised.clear()


def test_every_point_is_one_call_in_the_code():
    calls = Counter()
    for source in PACKAGE.rglob("*.py"):
        text = source.read_text()
        calls.update(re.findall(r'faults\.hit\(\s*"([^"]+)"', text))
        calls.update("stage.during" for _ in re.findall(r"faults\.watch_stage\(", text))
    assert calls == Counter(faults.POINTS)


def test_without_the_variable_every_point_is_a_no_op():
    for point in faults.POINTS:
        faults.hit(point, 0)


def test_a_fault_fires_only_at_its_point_and_batch(monkeypatch):
    monkeypatch.setenv(faults.ENV, "commit.before_commit:3:raise")
    faults.hit("commit.after_commit", 3)
    faults.hit("commit.before_commit", 2)
    for _ in range(2):  # raise: every time
        with pytest.raises(faults.InjectedFault, match="commit.before_commit, batch 3"):
            faults.hit("commit.before_commit", 3)


def test_without_a_batch_a_fault_fires_for_any(monkeypatch):
    monkeypatch.setenv(faults.ENV, "wal.read::raise-once")
    with pytest.raises(faults.InjectedFault):
        faults.hit("wal.read", 41)
    faults.hit("wal.read", 42)  # once per process


def test_lost_once_is_the_lost_reply_a_retry_cures(monkeypatch):
    monkeypatch.setenv(faults.ENV, "retry.after_commit:0:lost-once")
    with pytest.raises(Exception) as info:
        faults.hit("retry.after_commit", 0)
    error = mysql_error(info.value)
    assert isinstance(error, TransientError) and "MySQL error 2013" in str(error)
    faults.hit("retry.after_commit", 0)


def test_eio_once_is_the_storage_error_a_retry_cures(monkeypatch):
    monkeypatch.setenv(faults.ENV, "follow.poll:7:eio-once")
    with pytest.raises(OSError) as info:
        faults.hit("follow.poll", 7)
    assert info.value.errno == errno.EIO
    assert isinstance(storage_error(info.value, "/wal"), TransientError)
    faults.hit("follow.poll", 7)


@pytest.mark.parametrize(
    "spec", ["commit.nowhere", "wal.read:1:explode", "wal.read:one"]
)
def test_a_malformed_variable_names_the_forms(monkeypatch, spec):
    monkeypatch.setenv(faults.ENV, spec)
    with pytest.raises(ValueError, match=r"use POINT\[:BATCH\[:ACTION\]\]"):
        faults.hit("wal.read", 1)


def test_a_point_the_code_names_wrongly_is_refused():
    with pytest.raises(ValueError, match="'commit.before' is not a fault point"):
        faults.hit("commit.before", 0)
