"""Which way a chunk goes to MySQL, decided in one place, and the ladder down from
a way that fails it, without MySQL: the statements are built from SQLAlchemy's
rendering for the dialect alone, and the ways that fail are fakes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from sqlalchemy import BigInteger, Column, Float, MetaData, String, Table
from sqlalchemy.exc import DBAPIError

from tests.helpers import dialect_connection
from wal_sink.config import MysqlConfig
from wal_sink.mysql.bulk_load import BulkLoader, BulkLoadRefused, BulkLoadWarned
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.mysql.upsert import build_upsert
from wal_sink.protocol.chunk_path import AppliedRows, ChunkPath, ChunkPaths, decide
from wal_sink.wal.quarantine import Entry

TABLE = Table(
    "totals",
    MetaData(),
    Column("k", String(8), primary_key=True),
    Column("amount", BigInteger),
    Column("ratio", Float),
)
MYSQL = MysqlConfig(
    url="mysql+pymysql://u@h/d", table="totals", key=("k",), merge={"amount": "add"}
).target
COLUMNS = ["k", "amount", "ratio"]
MULTI = MultiRowUpsert(
    dialect_connection(), build_upsert(TABLE, COLUMNS, MYSQL), COLUMNS
)
LOADER = BulkLoader(TABLE, COLUMNS, MYSQL, "unit")


def chunk(ks=("a", "b"), ratio=0.5) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "k": pa.array(list(ks), pa.string()),
            "amount": pa.array([1] * len(ks), pa.int64()),
            "ratio": pa.array([ratio] * len(ks), pa.float64()),
        }
    )


def way(rows, multi=MULTI, loader=LOADER, render=True, bulk_load=True) -> ChunkPath:
    return decide(rows, ("k",), multi, loader, render=render, bulk_load=bulk_load).path


@pytest.mark.parametrize(
    "rows, kwargs, expected",
    [
        (chunk(), {}, ChunkPath.BULK_LOAD),
        (chunk(), {"bulk_load": False}, ChunkPath.MULTI_ROW),  # the server refused
        (chunk(), {"loader": None}, ChunkPath.MULTI_ROW),  # mysql.local_infile off
        (chunk(), {"render": False}, ChunkPath.ROW_BY_ROW),  # not read back exactly
        (chunk(ks=("a", None)), {}, ChunkPath.ROW_BY_ROW),  # a null key: set aside
        (chunk(ratio=float("nan")), {"loader": None}, ChunkPath.ROW_BY_ROW),
        (chunk(ks=()), {"loader": None}, ChunkPath.ROW_BY_ROW),  # nothing to render
        (chunk(), {"multi": None, "loader": None}, ChunkPath.ROW_BY_ROW),  # CDC
    ],
)
def test_one_function_decides_the_way_of_a_chunk(rows, kwargs, expected):
    assert way(rows, **kwargs) is expected


def test_only_the_multi_row_way_renders_its_statements_with_the_decision():
    multi = decide(chunk(), ("k",), MULTI, None, render=True, bulk_load=True)
    assert multi.statements == MULTI.render(chunk())
    bulk = decide(chunk(), ("k",), MULTI, LOADER, render=True, bulk_load=True)
    assert bulk.statements is None


def test_a_decision_made_ahead_no_longer_holds_once_load_data_was_refused():
    """The prefetch thread decided the next chunk while the committer's thread was
    loading this one; the server refused LOAD DATA: the decision is made again."""
    ahead = decide(chunk(), ("k",), MULTI, LOADER, render=True, bulk_load=True)
    assert ahead.path is ChunkPath.BULK_LOAD
    assert ahead.holds(render=True, bulk_load=True)
    assert not ahead.holds(render=True, bulk_load=False)
    assert not ahead.holds(render=False, bulk_load=True)


class Savepoints:
    """A connection's savepoints, as the ladder opens, commits and rolls them back."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def begin_nested(self):
        log = self.log

        class Savepoint:
            def commit(self) -> None:
                log.append("commit")

            def rollback(self) -> None:
                log.append("rollback")

        return Savepoint()


class Ways:
    """A schema's fast ways, failing as told: the loader with ``load_fails`` (an
    exception), the multi-row statements with a row MySQL rejects (``rejects``)."""

    def __init__(self, load_fails=None, rejects=False) -> None:
        self.by_key = ()
        self.tried: list[str] = []
        outer = self

        class Loader:
            def apply(self, conn, chunk) -> int:
                outer.tried.append("bulk load")
                if load_fails is not None:
                    raise load_fails
                return chunk.num_rows

        class Multi:
            renders, render = MULTI.renders, MULTI.render

            def apply(self, conn, chunk, statements) -> int:
                outer.tried.append("multi-row")
                if rejects:
                    raise DBAPIError("INSERT", {}, Exception(1406, "Data too long"))
                return chunk.num_rows

        self.loader, self.multi = Loader(), Multi()


def ladder(ways: Ways, ahead=None):
    paths = ChunkPaths("unit", ("k",))
    by_rows = AppliedRows(upserted=1, set_aside=[Entry({"k": "b"}, "too long")])

    def row_by_row() -> AppliedRows:
        ways.tried.append("row by row")
        return by_rows

    applied = paths.apply(Savepoints(), chunk(), ways, ahead, row_by_row)
    return paths, applied


def test_apply_bulk_load_taken_applies_the_chunk_whole():
    ways = Ways()
    _, applied = ladder(ways)
    assert ways.tried == ["bulk load"]
    assert applied == AppliedRows(upserted=2)


def test_apply_bulk_load_refused_falls_to_multi_row_for_good(caplog):
    ways = Ways(load_fails=BulkLoadRefused("local_infile is off"))
    paths, applied = ladder(ways)
    assert ways.tried == ["bulk load", "multi-row"]
    assert applied == AppliedRows(upserted=2)
    assert not paths.bulk_load_allowed
    assert "local_infile is off; using multi-row INSERTs instead" in caplog.text


def test_apply_bulk_load_warned_falls_to_multi_row_for_this_chunk_only():
    ways = Ways(load_fails=BulkLoadWarned("1 warning"))
    paths, applied = ladder(ways)
    assert ways.tried == ["bulk load", "multi-row"]
    assert paths.bulk_load_allowed


def test_apply_row_rejected_by_multi_row_falls_to_row_by_row():
    ways = Ways(load_fails=BulkLoadWarned("1 warning"), rejects=True)
    _, applied = ladder(ways)
    assert ways.tried == ["bulk load", "multi-row", "row by row"]
    assert applied.upserted == 1 and applied.set_aside[0].reason == "too long"


def test_apply_decision_ahead_on_bulk_load_is_made_again_once_refused():
    ways = Ways()
    paths = ChunkPaths("unit", ("k",))
    ahead = paths.decide(chunk(), ways)
    assert ahead.path is ChunkPath.BULK_LOAD
    paths.bulk_load_allowed = False  # the server refused the chunk before
    paths.apply(Savepoints(), chunk(), ways, ahead, lambda: AppliedRows())
    assert ways.tried == ["multi-row"]
