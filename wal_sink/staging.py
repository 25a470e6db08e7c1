"""Step 1 of the protocol: Spark writes a micro-batch into the WAL Delta table.

Executors write in parallel; nothing is collected onto the driver. Delta's
idempotent-write options (``txnAppId`` = sink id, ``txnVersion`` = batch id) make a
re-delivered batch a no-op, so what was staged first is what gets applied (I4).
Removing batches (purge) also goes through delta-spark: one Delta implementation
writes the WAL.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from wal_sink.config import RESERVED_PREFIX
from wal_sink.errors import TerminalError
from wal_sink.wal import BATCH_COLUMN, SEQ_COLUMN

# Table properties, set when the first batch creates the WAL (writer options with the
# ``delta.`` prefix; the user's session and other tables are left alone). Deletion
# vectors would hide deleted rows from readers that only list files; the WAL deletes
# whole partitions anyway. Statistics: only ``_wal_seq``, whose minimum orders a
# batch's files (wal.py), and numRecords; statistics on every user column cost about
# a fifth of the write and serve data skipping, which the WAL never does.
WAL_TABLE_PROPERTIES = {
    "delta.enableDeletionVectors": "false",
    "delta.dataSkippingStatsColumns": SEQ_COLUMN,
}
# A partitioned write sorts each task's rows by the partition columns unless Spark
# may keep a file open per partition value; every staged row has the same one. With
# the sort, a large batch is buffered in the driver JVM (local mode) and, once it
# spills, rows with equal keys have no guaranteed order. Set for the write only; a
# limit of 1 still sorts here (measured), 2 does not.
CONCURRENT_WRITERS = ("spark.sql.maxConcurrentOutputFileWriters", "2")


def stage(
    df: DataFrame,
    *,
    sink_id: str,
    batch_id: int,
    path: str,
    order_by: str | None = None,
) -> None:
    """Append ``df`` as batch ``batch_id`` unless Delta already holds that version.

    With ``order_by`` (CDC) rows are range-partitioned and sorted on it first, so the
    ``_wal_seq`` given to each row follows ``order_by`` across the whole batch.
    """
    reserved = [c for c in df.columns if c.startswith(RESERVED_PREFIX)]
    if reserved:
        raise TerminalError(
            f"stream column(s) {', '.join(reserved)} use the reserved prefix "
            f"{RESERVED_PREFIX!r}; rename them in [transform]",
            sink_id=sink_id,
            batch_id=batch_id,
        )
    if order_by is not None:
        df = df.repartitionByRange(order_by).sortWithinPartitions(order_by)
    staged = df.select(
        F.monotonically_increasing_id().alias(SEQ_COLUMN),
        *[F.col(f"`{c}`") for c in df.columns],
        F.lit(batch_id).cast("long").alias(BATCH_COLUMN),
    )
    writer = (
        staged.write.format("delta")
        .mode("append")
        .partitionBy(BATCH_COLUMN)
        .option("txnAppId", sink_id)
        .option("txnVersion", batch_id)
        .options(**WAL_TABLE_PROPERTIES)
    )
    conf = df.sparkSession.conf
    key, writers = CONCURRENT_WRITERS
    before = conf.get(key, None)
    if before is None or int(before) < int(writers):
        conf.set(key, writers)
    try:
        writer.save(path)
    finally:
        if before is None:
            conf.unset(key)
        else:
            conf.set(key, before)


def delta_table(spark: SparkSession, path: str) -> DeltaTable:
    return DeltaTable.forPath(spark, path)


def delete_batches(spark: SparkSession, path: str, batch_ids: list[int]) -> None:
    """Remove whole batches from the WAL (callers must pass only acked ones: I5)."""
    if not batch_ids:
        return
    delta_table(spark, path).delete(F.col(BATCH_COLUMN).isin(batch_ids))
