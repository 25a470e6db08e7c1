"""Which way a chunk goes to MySQL, decided in one place, without MySQL: the
statements are built from SQLAlchemy's rendering for the dialect alone."""

from __future__ import annotations

import pyarrow as pa
import pytest
from sqlalchemy import BigInteger, Column, Float, MetaData, String, Table

from tests.unit.test_multi_row import connection
from wal_sink.config import MysqlConfig
from wal_sink.mysql.bulk_load import BulkLoader
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.mysql.upsert import build_upsert
from wal_sink.protocol.chunk_path import ChunkPath, decide

TABLE = Table(
    "totals",
    MetaData(),
    Column("k", String(8), primary_key=True),
    Column("amount", BigInteger),
    Column("ratio", Float),
)
MYSQL = MysqlConfig(
    url="mysql+pymysql://u@h/d", table="totals", key=("k",), merge={"amount": "add"}
)
COLUMNS = ["k", "amount", "ratio"]
MULTI = MultiRowUpsert(connection(), build_upsert(TABLE, COLUMNS, MYSQL), COLUMNS)
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
        (chunk(), {"render": False}, ChunkPath.DRIVER),  # not read back exactly
        (chunk(ks=("a", None)), {}, ChunkPath.DRIVER),  # a null key: set aside
        (chunk(ratio=float("nan")), {"loader": None}, ChunkPath.DRIVER),
        (chunk(ks=()), {"loader": None}, ChunkPath.DRIVER),  # nothing to render
        (chunk(), {"multi": None, "loader": None}, ChunkPath.DRIVER),  # CDC
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
