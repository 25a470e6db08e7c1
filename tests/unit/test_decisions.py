"""Pure decisions the job reaches only through Spark and MySQL, tested alone: the
checkpoint-reset check (I7), the grouping of batches into transactions, which MySQL
and storage errors a retry can cure, and the outage budget."""

from __future__ import annotations

import errno

import pymysql
import pytest
from deltalake.exceptions import (
    DeltaProtocolError,
    SchemaMismatchError,
    TableNotFoundError,
)
from obstore.exceptions import (
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from sqlalchemy.exc import OperationalError, ProgrammingError

from wal_sink.config import MysqlConfig
from wal_sink.errors import (
    CheckpointResetError,
    RetryStopped,
    TerminalError,
    TransientError,
)
from wal_sink.mysql.errors import is_row_error, is_transient, mysql_error
from wal_sink.protocol.recovery import (
    KnownBatches,
    check_checkpoint,
    check_commit_log,
    groups,
    pending_batches,
)
from wal_sink.protocol.retry import OutageBudget
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.spark.source import scaled_rate_limits
from wal_sink.wal.storage_errors import storage_error


@pytest.mark.parametrize(
    "planned, known, refused",
    [
        (None, None, False),  # a new sink on a new checkpoint
        (5, 5, False),  # Spark re-runs its last planned batch
        (6, 5, False),  # or plans the next
        (None, 3, True),  # a new checkpoint for a sink that staged batch 3
        (2, 3, True),  # a checkpoint from before batch 3
    ],
)
def test_checkpoint_behind_what_the_sink_knows_is_refused(planned, known, refused):
    if refused:
        with pytest.raises(CheckpointResetError, match="reset or replaced"):
            check_checkpoint("s", "/cp", planned, known)
    else:
        check_checkpoint("s", "/cp", planned, known)


@pytest.mark.parametrize(
    "committed, staged, acked, refused",
    [
        (None, None, None, False),  # a new sink on a new checkpoint
        (4, 4, 3, False),  # batch 4 staged, not applied yet: recovery applies it
        (4, 5, 4, False),  # batch 5 staged, Spark died before its commit log
        (4, None, 4, False),  # the WAL lost once everything was applied
        (4, 2, 1, True),  # batches 3 and 4 were staged into a WAL now gone
        (0, None, None, True),  # the whole WAL lost before anything was acked
    ],
)
def test_commit_log_ahead_of_what_the_sink_knows_is_refused(
    committed, staged, acked, refused
):
    known = KnownBatches(staged=staged, acked=acked)
    if refused:
        with pytest.raises(CheckpointResetError, match="WAL that is gone") as info:
            check_commit_log("s", "/cp", committed, known)
        assert "\n" not in str(info.value)
    else:
        check_commit_log("s", "/cp", committed, known)


@pytest.mark.parametrize(
    "staged, acked, last, newest, staged_without_files, pending",
    [
        ({3, 4, 5}, {3}, 5, 3, set(), [4, 5]),  # applied up to 3
        ({3, 4, 5}, {3, 5}, 5, 5, set(), [4]),  # a gap: 4 is listed, 5 is not
        ({4, 5}, set(), 5, None, set(), [4, 5]),  # nothing acked yet
        (set(), set(), 7, 7, {8}, []),  # all applied, files purged
        ({6}, set(), 8, 5, {7, 8}, [6, 7, 8]),  # 7, 8: empty or missing files
        ({6}, set(), 8, 5, {8}, [6, 8]),  # 7 was never staged (a skipped id)
        (set(), set(), 9, None, {9}, [9]),  # the only batch lost its files
        ({2}, set(), 4, 1, {1, 3, 4}, [2, 3, 4]),  # 1: acked, its files purged
    ],
)
def test_pending_batches_are_the_staged_ones_without_an_ack(
    staged, acked, last, newest, staged_without_files, pending
):
    assert (
        pending_batches(staged, acked, last, newest, staged_without_files.__contains__)
        == pending
    )


def test_groups_are_consecutive_and_bounded_by_rows():
    batches = [(3, 10), (4, 10), (5, 100), (6, 1), (8, 1), (9, 0)]
    assert groups(batches, max_rows=25) == [[3, 4], [5], [6], [8, 9]]
    assert groups([(1, 500)], max_rows=10) == [[1]], "a big batch goes alone"


def _mysql(code: int, cls=OperationalError):
    return cls("SQL", None, pymysql.err.OperationalError(code, "message"))


@pytest.mark.parametrize("code", [1213, 1205, 1020, 2003, 2006, 2013, 1040, 1290, 1836])
def test_mysql_errors_a_retry_can_cure(code):
    error = mysql_error(_mysql(code), sink_id="s", batch_id=1)
    assert is_transient(_mysql(code)) and isinstance(error, TransientError)
    assert str(error) == f"sink 's', batch 1: MySQL error {code}: message"


@pytest.mark.parametrize("code", [1146, 1142, 1054])
def test_mysql_errors_that_stop_the_sink(code):
    error = mysql_error(_mysql(code, ProgrammingError), table="t")
    assert not is_transient(_mysql(code)) and isinstance(error, TerminalError)
    assert "table 't'" in str(error)


def test_row_errors_are_told_apart():
    assert is_row_error(_mysql(1406)) and not is_row_error(_mysql(1213))


@pytest.mark.parametrize("code", [1265, 1690, 1451, 3140, 4025])
def test_errors_one_row_causes_are_row_errors_not_terminal(code):
    """Bad ENUM/SET value or truncated number, a computed value out of range, a
    deleted parent still referenced, invalid JSON (MySQL 8), a failed CHECK (MariaDB's
    JSON columns): the row is set aside, the batch goes on."""
    assert is_row_error(_mysql(code)) and not is_transient(_mysql(code))


@pytest.mark.parametrize(
    "error, transient",
    [
        (OSError(errno.EIO, "Input/output error"), True),
        (ConnectionResetError("reset"), True),
        (OSError("Generic S3 error: error sending request for url"), True),
        (OSError("Generic S3 error: 503 Slow Down"), True),
        (FileNotFoundError(errno.ENOENT, "No such file", "/wal/x.parquet"), False),
        (PermissionError(errno.EACCES, "denied"), False),
        (OSError("Parquet magic bytes not found in footer"), False),
        (OSError("Object at location wal/x.parquet not found: 404"), False),
    ],
)
def test_storage_errors_are_transient_or_terminal(error, transient):
    wrapped = storage_error(error, "/wal", sink_id="s", batch_id=2)
    assert isinstance(wrapped, TransientError if transient else TerminalError)
    assert wrapped.batch_id == 2 and "\n" not in str(wrapped)


@pytest.mark.parametrize(
    "error",
    [
        TableNotFoundError("no log files; connection reset"),
        DeltaProtocolError("unsupported reader feature; try again, timed out"),
        SchemaMismatchError("cannot cast; 503"),
        NotFoundError("Object at location wal/x: error sending request"),
        PermissionDeniedError("Access Denied: 503 Slow Down"),
        UnauthenticatedError("expired token; temporarily unavailable"),
    ],
)
def test_a_storage_errors_class_decides_before_its_text(error):
    """Errors whose class says a retry cannot help stop the sink, whatever words
    of a passing outage their message holds."""
    assert isinstance(storage_error(error, "/wal"), TerminalError)


def test_outage_budget_backs_off_then_gives_up():
    mysql = MysqlConfig(
        url="mysql+pymysql://u@h/d",
        table="t",
        key=("k",),
        outage_budget=10,
        retry_backoff=1,
        retry_backoff_max=4,
    )
    now = [0.0]
    waits: list[float] = []

    class Clock(StopSignal):
        def wait(self, timeout, **level):
            waits.append(timeout)
            now[0] += timeout
            return False

    budget = OutageBudget(mysql, "work", stop=Clock(), clock=lambda: now[0])
    error = TransientError("down")
    with pytest.raises(TransientError):
        while True:
            budget.wait(error)
    assert all(0 < w <= 4 for w in waits) and now[0] == pytest.approx(10)
    assert waits[0] <= 1 and max(waits) > 1, "doubling, capped"


def test_outage_budget_stops_waiting_when_asked_to_stop_now():
    mysql = MysqlConfig(
        url="mysql+pymysql://u@h/d", table="t", key=("k",), retry_backoff=0.01
    )
    stop = StopSignal()
    stop.stop_taking_batches()  # not enough: the outage is still waited out
    budget = OutageBudget(mysql, "work", stop=stop)
    budget.wait(TransientError("down"))
    stop.stop_now()
    with pytest.raises(RetryStopped, match="stopped while retrying work"):
        budget.wait(TransientError("down"))


def test_the_parse_error_query_takes_scaled_rate_limits():
    options = {
        "maxFilesPerTrigger": 1,
        "maxOffsetsPerTrigger": "5000",
        "maxBytesPerTrigger": "1g",
        "minOffsetsPerTrigger": 100,
        "latestFirst": True,
    }
    assert scaled_rate_limits(options, 10) == {
        "maxFilesPerTrigger": "10",
        "maxOffsetsPerTrigger": "50000",
        "maxBytesPerTrigger": "1g",
        "minOffsetsPerTrigger": "100",
        "latestFirst": "True",
    }
