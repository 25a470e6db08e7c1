"""Removing WAL files no table version references any more: batches purged earlier,
and what crashes left behind (Parquet written but never committed, temporary commit
files in ``_delta_log``). Files younger than the retention are kept, so a batch being
written right now is never touched — keep the retention above the longest stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from wal_sink.staging import delta_table

TEMP_LOG_SUFFIXES = (".tmp",)


@dataclass(frozen=True)
class VacuumResult:
    files: int
    bytes: int


def vacuum(
    spark: SparkSession, path: str, retain_seconds: float, *, dry_run: bool = False
) -> VacuumResult:
    """Delete (or, with ``dry_run``, count) unreferenced files older than the
    retention."""
    hours = retain_seconds / 3600.0
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    quoted = path.replace("`", "``")
    listed = spark.sql(
        f"VACUUM delta.`{quoted}` RETAIN {hours:.6f} HOURS DRY RUN"
    ).collect()
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    data_files = [jvm.org.apache.hadoop.fs.Path(row[0]) for row in listed]
    log_dir = jvm.org.apache.hadoop.fs.Path(path.rstrip("/") + "/_delta_log")
    fs = log_dir.getFileSystem(conf)
    cutoff_ms = jvm.System.currentTimeMillis() - int(retain_seconds * 1000)
    temp_logs = [
        s
        for s in fs.listStatus(log_dir)
        if s.getPath().getName().endswith(TEMP_LOG_SUFFIXES)
        and s.getModificationTime() < cutoff_ms
    ]
    size = sum(p.getFileSystem(conf).getFileStatus(p).getLen() for p in data_files)
    size += sum(s.getLen() for s in temp_logs)
    if not dry_run:
        delta_table(spark, path).vacuum(hours)
        for status in temp_logs:
            fs.delete(status.getPath(), False)
    return VacuumResult(files=len(data_files) + len(temp_logs), bytes=size)
