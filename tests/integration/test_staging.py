"""Staging (Step 1) writes the WAL as the reader and purge expect it; the reader
refuses a WAL whose rows are not in staged order; the WAL's schema may gain nullable
columns between batches, and refuses anything else with one line naming the
column."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.helpers import settle
from wal_sink.errors import TerminalError
from wal_sink.spark.sink import WalSink
from wal_sink.spark.staging import StageTimes, stage
from wal_sink.wal.reader import WalReader
from wal_sink.wal.writer import WalWriter


def test_wal_keeps_row_counts_and_seq_ranges_only_and_no_deletion_vectors(
    spark, tmp_path
):
    wal = str(tmp_path / "wal")
    df = spark.createDataFrame([("a", 1), ("b", 2), ("c", 3)], "k STRING, amount INT")
    stage(df.repartition(3), WalWriter(wal, "s"), 0)
    stage(df, WalWriter(wal, "s"), 1)

    table = DeltaTable(wal)
    assert table.metadata().configuration == {
        "delta.enableDeletionVectors": "false",
        "delta.dataSkippingStatsColumns": "_wal_seq",
        "wal_sink.sink_id": "s",  # the owner (I9)
    }
    stats = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    assert sum(stats["num_records"]) == 6
    assert {c for c in stats if c.startswith(("min.", "max."))} == {
        "min._wal_seq",
        "max._wal_seq",
    }
    batch = WalReader(wal).staged_batch(0)
    assert batch.rows == 3 and len(batch.files) >= 2
    assert all(f.min_seq is not None for f in batch.files)  # files ordered by it
    # set on the table and for the write only, not left on the user's session
    assert spark.conf.get("spark.sql.maxConcurrentOutputFileWriters", None) in (
        None,
        "0",
    )


def test_wal_seq_is_delta_encoded_without_a_dictionary_on_either_path(spark, tmp_path):
    """``_wal_seq``, a run of consecutive numbers in each file, is delta-encoded (a
    few KB per million rows, not 8 bytes per row): the executors write Parquet's
    v2 pages, the driver asks pyarrow for the encoding. Being unique in the file,
    it gets no dictionary, which would only be built to be dropped. Every other
    column, a nested one's leaf too, keeps a dictionary where values repeat."""
    wal = str(tmp_path / "wal")
    df = spark.createDataFrame(
        [("a", 1, ["x"])] * 3, "k STRING, amount INT, tags ARRAY<STRING>"
    )
    for batch_id, driver_rows in enumerate((0, 10)):
        times = StageTimes()
        staged = stage(
            df.coalesce(1), WalWriter(wal, "s"), batch_id, None, times, driver_rows
        )
        assert times.from_driver is bool(driver_rows)
        (file,) = staged.files
        group = pq.read_metadata(file.uri).row_group(0)
        columns = {
            group.column(i).path_in_schema: group.column(i)
            for i in range(group.num_columns)
        }
        seq = columns.pop("_wal_seq")
        assert "DELTA_BINARY_PACKED" in seq.encodings, file.uri
        assert not seq.has_dictionary_page, file.uri
        assert set(columns) == {"k", "amount", "tags.list.element"}
        assert all(c.has_dictionary_page for c in columns.values()), file.uri


def test_reserved_column_prefix_is_refused_before_writing(spark, tmp_path):
    df = spark.createDataFrame([("a", 1)], "k STRING, _wal_x INT")
    with pytest.raises(TerminalError, match="reserved prefix"):
        stage(df, WalWriter(str(tmp_path / "wal"), "s"), 0)
    assert not (tmp_path / "wal").exists()


@pytest.mark.parametrize(
    "seqs",
    [[[0, 2, 1]], [[0, 1, 2], [1, 3]]],
    ids=["within a file", "overlapping files"],
)
def test_rows_out_of_staged_order_are_refused_not_applied(tmp_path, seqs):
    wal = str(tmp_path / "wal")
    for seq in seqs:  # one file per write
        write_deltalake(
            wal,
            pa.table(
                {
                    "_wal_seq": seq,
                    "k": [f"k{s}" for s in seq],
                    "_wal_batch_id": [0] * len(seq),
                }
            ),
            mode="append",
            partition_by=["_wal_batch_id"],
        )
    reader = WalReader(wal)
    with pytest.raises(TerminalError, match="out of their staged order"):
        list(reader.read_batch(reader.staged_batch(0), chunk_rows=2))
    write_deltalake(
        str(tmp_path / "ok"),
        pa.table(
            {"_wal_seq": [0, 1, 2], "k": ["a", "b", "c"], "_wal_batch_id": [0] * 3}
        ),
        partition_by=["_wal_batch_id"],
    )
    ok = WalReader(str(tmp_path / "ok"))
    assert [c.to_pydict() for c in ok.read_batch(ok.staged_batch(0), chunk_rows=2)] == [
        {"k": ["a", "b"]},
        {"k": ["c"]},
    ]


def commits(wal: Path) -> list[list[dict]]:
    """The WAL's Delta log: the actions of each commit, in version order."""
    return [
        [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted((wal / "_delta_log").glob("*.json"))
    ]


@pytest.fixture
def evolving_sink(db, make_config, tmp_path):
    for t in ("evolve", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE evolve (k VARCHAR(8) PRIMARY KEY, amount DECIMAL(14,2), "
        "note VARCHAR(20), at DATETIME(6)) ENGINE=InnoDB"
    )
    config = make_config(table="evolve", sink_id="evolve", merge={"amount": "add"})
    sink = WalSink(config)
    yield sink
    sink.close()


def test_batch_adding_nullable_columns_evolves_the_wal_in_its_own_commit(
    spark, db, evolving_sink, tmp_path
):
    sink, wal = evolving_sink, tmp_path / "wal"
    at = datetime(2026, 5, 1, 12, 0, 0, 1)
    batches = [
        spark.createDataFrame([("a", Decimal(1))], "k STRING, amount DECIMAL(12,2)"),
        spark.createDataFrame(  # adds a string and a TIMESTAMP_NTZ column
            [("a", Decimal(2), "two", at), ("b", Decimal(5), None, None)],
            "k STRING, amount DECIMAL(12,2), note STRING, at TIMESTAMP_NTZ",
        ),
        spark.createDataFrame(  # the same columns in another order
            [(None, Decimal(3), "three", "a")],
            "at TIMESTAMP_NTZ, amount DECIMAL(12,2), note STRING, k STRING",
        ),
    ]
    for batch_id, df in enumerate(batches):
        sink.foreach_batch(df.repartition(2), batch_id)
        assert sink.last_stage.rows == df.count()

    # The commit that stages batch 1 also carries the schema with its columns.
    (staging_1,) = [
        c for c in commits(wal) if {"txn": {"appId": "evolve", "version": 1}} in c
    ]
    (metadata,) = [a["metaData"] for a in staging_1 if "metaData" in a]
    assert [f["name"] for f in json.loads(metadata["schemaString"])["fields"]] == [
        "_wal_seq",
        "k",
        "amount",
        "_wal_batch_id",
        "note",
        "at",
    ]
    assert {
        a["add"]["partitionValues"]["_wal_batch_id"] for a in staging_1 if "add" in a
    } == {"1"}
    table = DeltaTable(str(wal))
    configuration = table.metadata().configuration
    assert configuration["delta.enableDeletionVectors"] == "false"
    assert configuration["wal_sink.sink_id"] == "evolve", "kept by schema changes"
    assert table.transaction_version("evolve") == 2

    # Earlier batches read back without the new columns, later ones with them.
    reader = WalReader(str(wal))
    read = {
        b: [
            r
            for c in reader.read_batch(reader.staged_batch(b), 10)
            for r in c.to_pylist()
        ]
        for b in range(3)
    }
    assert read[0] == [{"k": "a", "amount": Decimal("1.00")}]
    assert sorted(read[1], key=lambda r: r["k"]) == [
        {"k": "a", "amount": Decimal("2.00"), "note": "two", "at": at},
        {"k": "b", "amount": Decimal("5.00"), "note": None, "at": None},
    ]
    assert read[2] == [
        {"at": None, "amount": Decimal("3.00"), "note": "three", "k": "a"}
    ]
    settle(sink)
    assert db.rows("SELECT k, amount, note, at FROM evolve ORDER BY k") == [
        ("a", Decimal("6.00"), "three", None),
        ("b", Decimal("5.00"), None, None),
    ]


@pytest.mark.parametrize(
    "schema, row, says",
    [
        (
            "k STRING, amount DECIMAL(12,2)",
            ("b", Decimal(1)),
            "column 'at' is missing from this batch",
        ),
        (
            "k STRING, amount DECIMAL(14,2)",
            ("b", Decimal(1)),
            "column 'amount' changes type from decimal(12,2) to decimal(14,2)",
        ),
        (
            "k STRING, amount DECIMAL(12,2), at TIMESTAMP",
            ("b", Decimal(1), datetime(2026, 1, 1)),
            "column 'at' changes type from timestamp_ntz to timestamp",
        ),
    ],
    ids=["missing", "decimal widened", "timestamp zoned"],
)
def test_batch_missing_a_column_or_changing_its_type_is_refused_in_one_line(
    spark, db, evolving_sink, tmp_path, schema, row, says
):
    sink, wal = evolving_sink, tmp_path / "wal"
    sink.foreach_batch(
        spark.createDataFrame(
            [("a", Decimal(1), datetime(2026, 1, 1))],
            "k STRING, amount DECIMAL(12,2), at TIMESTAMP_NTZ",
        ),
        0,
    )
    settle(sink)
    log_before = commits(wal)
    with pytest.raises(TerminalError) as refused:
        sink.foreach_batch(spark.createDataFrame([row], schema), 1)
    message = str(refused.value)
    assert says in message and "\n" not in message
    assert message.startswith("sink 'evolve', batch 1: stream column")
    # Nothing committed: no Delta commit, no ack, MySQL as it was.
    assert commits(wal) == log_before
    assert DeltaTable(str(wal)).transaction_version("evolve") == 0
    assert db.rows("SELECT batch_id FROM wal_sink_ack") == [(0,)]
    assert db.rows("SELECT k, amount FROM evolve") == [("a", Decimal("1.00"))]
    # The refused attempt's files are not part of batch 1 once it is staged right.
    sink.foreach_batch(
        spark.createDataFrame(
            [("c", Decimal(7), None)],
            "k STRING, amount DECIMAL(12,2), at TIMESTAMP_NTZ",
        ),
        1,
    )
    settle(sink)
    assert sink.last_stage.rows == 1
    assert db.rows("SELECT k, amount FROM evolve ORDER BY k") == [
        ("a", Decimal("1.00")),
        ("c", Decimal("7.00")),
    ]


def test_small_batches_are_staged_from_the_driver_until_a_larger_one(
    spark, db, evolving_sink
):
    """The first batch and one right after a larger batch go to the executors
    without a collect; after a batch of at most ``wal.driver_stage_rows`` rows: one
    file from the driver, or, one row more, the executors; every batch applied
    exactly."""
    sink = evolving_sink
    sink.config = replace(
        sink.config, wal=replace(sink.config.wal, driver_stage_rows=3)
    )
    sizes = [2, 3, 4, 2, 3]  # executors, driver, executors, executors, driver
    key = 0
    for batch_id, size in enumerate(sizes):
        rows = [(f"k{key + i}", Decimal(1)) for i in range(size)]
        key += size
        df = spark.createDataFrame(rows, "k STRING, amount DECIMAL(12,2)")
        sink.foreach_batch(df.repartition(2), batch_id)
        report = sink.last_stage
        assert report.rows == size
        assert report.from_driver is (batch_id in (1, 4)), batch_id
        assert (report.parts["collect"] >= 1) is (batch_id in (1, 2, 4)), batch_id
    assert sink.drain(60)
    assert db.rows("SELECT COUNT(*), SUM(amount) FROM evolve") == [(14, Decimal(14))]


def test_a_frame_built_on_demand_is_built_only_for_the_executors_write(
    spark, db, evolving_sink
):
    """With a probe for the driver's collect, the write's frame comes from a
    function (the parse-error fold builds each plan at tens of JVM round trips):
    called for a batch the executors write, never for one staged from the driver."""
    sink = evolving_sink
    sink.config = replace(
        sink.config, wal=replace(sink.config.wal, driver_stage_rows=3)
    )
    built: list[int] = []
    key = 0
    for batch_id, size in enumerate([2, 2, 4]):  # executors, driver, executors
        rows = [(f"k{key + i}", Decimal(1)) for i in range(size)]
        key += size
        df = spark.createDataFrame(rows, "k STRING, amount DECIMAL(12,2)")

        def write(df=df, batch_id=batch_id):
            built.append(batch_id)
            return df

        sink.foreach_batch(write, batch_id, probe=df)
        assert sink.last_stage.rows == size
        assert sink.last_stage.from_driver is (batch_id == 1), batch_id
    assert built == [0, 2]
    assert sink.drain(60)
    assert db.rows("SELECT COUNT(*), SUM(amount) FROM evolve") == [(8, Decimal(8))]
