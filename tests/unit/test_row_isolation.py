"""Row isolation (row_by_row.isolating) without MySQL: the bisection finds exactly
the rows a statement refuses, sets each aside once with its reason, applies every
other row once and in order, and leaves errors that are not a row's to the
transaction. The savepoints are a stand-in connection's here; tests/integration
(test_merge, test_bad_input, test_quarantine_workflow) show the same against
MariaDB."""

from __future__ import annotations

import pymysql
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from wal_sink.protocol.row_by_row import isolating
from wal_sink.wal.quarantine import Entry

STMT = text("INSERT")  # never executed: the stand-in reads only the rows


class Savepoint:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.mark = len(conn.applied)

    def rollback(self) -> None:
        del self.conn.applied[self.mark :]

    def commit(self) -> None:
        pass


class Connection:
    """Applies rows in order; refuses a statement holding any row in ``refused``
    (MySQL's 1366, a row error), as a multi-row statement fails whole."""

    def __init__(self, refused: set[int], error: Exception | None = None) -> None:
        self.refused = refused
        self.error = error
        self.applied: list[int] = []
        self.statements = 0

    def begin_nested(self) -> Savepoint:
        return Savepoint(self)

    def execute(self, stmt: object, rows: list[dict]) -> None:
        self.statements += 1
        if self.error is not None:
            raise self.error
        for row in rows:
            self.applied.append(row["k"])
            if row["k"] in self.refused:
                orig = pymysql.err.DataError(1366, f"Incorrect value in row {row['k']}")
                raise DBAPIError("INSERT", None, orig)


@pytest.mark.parametrize(
    "refused", [set(), {0}, {99}, {3, 4}, {0, 50, 99}, set(range(0, 100, 7))]
)
def test_bisection_sets_aside_exactly_the_refused_rows_and_applies_the_rest(refused):
    conn = Connection(refused)
    rows = [{"k": i} for i in range(100)]
    bad: list[Entry] = []
    applied = isolating(conn, STMT, rows, bad)
    assert conn.applied == [i for i in range(100) if i not in refused]
    assert applied == 100 - len(refused)
    assert [e.record["k"] for e in bad] == sorted(refused)
    assert all(e.reason.startswith("MySQL error 1366: ") for e in bad)
    if not refused:
        assert conn.statements == 1  # no bisection without a refusal


def test_the_reason_given_is_the_one_recorded():
    conn = Connection({5})
    bad: list[Entry] = []
    isolating(conn, STMT, [{"k": i} for i in range(8)], bad, lambda c, row, e: "why")
    assert bad == [Entry({"k": 5}, "why")]


def test_an_error_that_is_not_a_rows_goes_to_the_transaction():
    """A lost link or a deadlock may have ended the transaction: no bisection."""
    lost = OperationalError("INSERT", None, pymysql.err.OperationalError(2013, "lost"))
    conn = Connection(set(), error=lost)
    bad: list[Entry] = []
    with pytest.raises(OperationalError):
        isolating(conn, STMT, [{"k": i} for i in range(8)], bad)
    assert conn.statements == 1 and bad == []
