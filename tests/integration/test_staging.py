"""Staging (Step 1) writes the WAL as the reader and purge expect it; the reader
refuses a WAL whose rows are not in staged order."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from wal_sink.errors import TerminalError
from wal_sink.staging import stage
from wal_sink.wal import WalReader
from wal_sink.wal_writer import WalWriter


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
