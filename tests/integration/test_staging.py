"""Staging (Step 1) writes the WAL as the reader and purge expect it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from wal_sink.errors import TerminalError
from wal_sink.staging import stage
from wal_sink.wal import WalReader


def test_wal_table_has_row_counts_no_column_stats_no_deletion_vectors(spark, tmp_path):
    wal = str(tmp_path / "wal")
    df = spark.createDataFrame([("a", 1), ("b", 2), ("c", 3)], "k STRING, amount INT")
    stage(df, sink_id="s", batch_id=0, path=wal)
    stage(df, sink_id="s", batch_id=1, path=wal)

    table = DeltaTable(wal)
    assert table.metadata().configuration == {
        "delta.enableDeletionVectors": "false", "delta.dataSkippingNumIndexedCols": "0"}
    stats = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    assert sum(stats["num_records"]) == 6
    assert not [c for c in stats if c.startswith(("min.", "max.", "null_count."))]
    assert WalReader(wal).staged_batch(1).rows == 3
    # set on the table, not on the user's session
    assert spark.conf.get(
        "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols", None) is None


def test_reserved_column_prefix_is_refused_before_writing(spark, tmp_path):
    df = spark.createDataFrame([("a", 1)], "k STRING, _wal_x INT")
    with pytest.raises(TerminalError, match="reserved prefix"):
        stage(df, sink_id="s", batch_id=0, path=str(tmp_path / "wal"))
    assert not (tmp_path / "wal").exists()
