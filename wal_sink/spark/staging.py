"""Step 1 of the protocol: executors write a micro-batch into the WAL, the driver
commits exactly those files.

Executors write the batch as plain Parquet into a directory of this attempt's own,
``_wal_batch_id=N/<attempt>/``; nothing is collected onto the driver. After the
write succeeded the driver lists that directory (Spark's ``part-*`` files only,
never a listing of the whole partition), reads each file's footer for its exact row
count and ``_wal_seq`` range, and hands them to ``WalWriter.commit``. A batch the
WAL already records is not written again: what was staged first stands (I4).

No Delta jar is involved: the job runs on whatever Spark the user has.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from wal_sink import faults
from wal_sink.config import RESERVED_PREFIX
from wal_sink.errors import TerminalError
from wal_sink.spark.driver_stage import collect_small, write_file
from wal_sink.storage import join, spark_uri
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN
from wal_sink.wal.model import StagedBatch, StagedFile
from wal_sink.wal.storage_errors import storage_error
from wal_sink.wal.writer import WalWriter, WrittenFile

# Set for the write only. Spark writes TIMESTAMP columns as INT96 unless told
# otherwise; INT96 is deprecated, has no statistics and is read as nanoseconds. A
# session in LEGACY rebase mode writes dates and timestamps before 1582 in the Julian
# calendar, which only Spark knows to undo: delta-rs and pyarrow would read other days.
WRITE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}
# Parquet's v2 pages delta-encode integers: ``_wal_seq``, a run of consecutive
# numbers in each file, takes a few KB per million rows, not 8 bytes a row. Being
# unique in the file, it would only build a dictionary to drop it after hashing a
# page's worth of values. Measured on 1,000,000 4-column rows (median of 15, one
# process, alternating): 248 ms against 279 ms with v1 pages and a dictionary tried,
# 222 ms for the same rows as plain Parquet without ``_wal_seq``. v2 pages change
# the other columns' fallback encodings too (docs/stack.md); pyarrow (the
# committer), delta-rs and delta-spark read them.
WRITE_OPTIONS = {
    f"parquet.enable.dictionary#{SEQ_COLUMN}": "false",
    "parquet.writer.version": "v2",
}
FOOTER_READERS = 8


@dataclass
class StageTimes:
    """Where one ``stage`` call's time went, in milliseconds; parts it did not reach
    stay 0 (a batch the WAL holds already stops after ``check_ms``)."""

    check_ms: float = 0.0
    """Reading the WAL's newest version: is this batch staged already?"""
    collect_ms: float = 0.0
    """With ``wal.driver_stage_rows``: collecting the batch as Arrow onto the
    driver (for a larger batch, finding out that it is larger)."""
    write_ms: float = 0.0
    """Spark's job: the executors writing the attempt's Parquet files (with the
    Hadoop commit protocol's task and job commits); or pyarrow writing the one
    file of a batch staged from the driver."""
    list_ms: float = 0.0
    """Listing the attempt's directory and reading its files' footers."""
    delta_ms: float = 0.0
    """The delta-rs commit of exactly those files."""
    from_driver: bool = False
    """Whether the batch was written from the driver (driver_stage.py)."""


class Laps:
    """Milliseconds since the last ``lap``."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.last = (now - self.last) * 1000, now
        return elapsed


def stage(
    df: DataFrame | Callable[[], DataFrame],
    writer: WalWriter,
    batch_id: int,
    order_by: str | None = None,
    times: StageTimes | None = None,
    driver_rows: int = 0,
    probe: DataFrame | None = None,
) -> StagedBatch | None:
    """Stage ``df`` as batch ``batch_id``; None when the WAL already holds it.

    With ``order_by`` (CDC) rows are range-partitioned and sorted on it first, so the
    ``_wal_seq`` given to each row follows ``order_by`` across the whole batch.
    A batch of at most ``driver_rows`` rows is written from the driver instead
    (driver_stage.py), collected from ``probe`` when given (the same rows as
    ``df``, in a plan of its own: observed metrics then tell the driver's collect
    from the executors' write); ``df`` may then be a function building its frame,
    called only when the executors write the batch. ``times``, when given,
    receives where the time went and which path wrote the batch.

    Returns:
        The batch as this call committed it, files in apply order.
    """
    times = times if times is not None else StageTimes()
    clock = Laps()
    if probe is None and callable(df):
        df = df()
    rows = probe if probe is not None else df  # a frame of the batch's rows
    reserved = [c for c in rows.columns if c.startswith(RESERVED_PREFIX)]
    if reserved:
        raise TerminalError(
            f"stream column(s) {', '.join(reserved)} use the reserved prefix "
            f"{RESERVED_PREFIX!r}; rename them in [transform]",
            sink_id=writer.sink_id,
            batch_id=batch_id,
        )
    staged = writer.staged_version()
    times.check_ms = clock.lap()
    if staged is not None and staged >= batch_id:
        return None
    attempt = f"{BATCH_COLUMN}={batch_id}/{uuid.uuid4().hex}"
    written = faults.watch_stage(
        join(writer.location, f"{BATCH_COLUMN}={batch_id}"), batch_id
    )
    small = collect_small(rows, driver_rows, order_by) if driver_rows else None
    times.collect_ms = clock.lap()
    if small is not None:
        files = [write_file(writer, attempt, small, batch_id)]
        written()
        schema = small.schema
        times.write_ms = clock.lap()
        times.from_driver = True
    else:
        if callable(df):
            df = df()
        if order_by is not None:
            df = df.repartitionByRange(order_by).sortWithinPartitions(order_by)
        # One expression string, not a Column per stream column: every Column is a
        # round trip to the JVM, and a small batch's stage is mostly fixed costs.
        frame = df.selectExpr(f"monotonically_increasing_id() AS {SEQ_COLUMN}", "*")
        writer.storage.configure_spark(df.sparkSession)
        with session_conf(df.sparkSession, WRITE_CONF):
            frame.write.mode("errorifexists").options(**WRITE_OPTIONS).parquet(
                spark_uri(join(writer.location, attempt))
            )
        times.write_ms = clock.lap()
        files, schema = attempt_files(writer, attempt, batch_id)
        times.list_ms = clock.lap()
    faults.hit("stage.before_commit", batch_id)
    committed = writer.commit(batch_id, files, schema)
    times.delta_ms = clock.lap()
    if not committed:
        return None
    faults.hit("stage.after", batch_id)
    return StagedBatch.ordered(
        batch_id,
        [
            StagedFile(
                join(writer.location, f.path), f.rows, f.size, f.min_seq, f.modified_ms
            )
            for f in files
        ],
    )


def attempt_files(
    writer: WalWriter, attempt: str, batch_id: int
) -> tuple[list[WrittenFile], pa.Schema]:
    """The Parquet files Spark wrote for this attempt, with their footers' facts.

    Only ``part-*`` files count: Spark's ``_SUCCESS``, and checksum or temporary
    files starting with ``.`` or ``_``, are no data.
    """
    fs, root = writer.storage.filesystem(writer.location)
    try:
        listed = fs.get_file_info(pafs.FileSelector(f"{root}/{attempt}"))
        parts = sorted(
            (i for i in listed if i.is_file and i.base_name.startswith("part-")),
            key=lambda i: i.base_name,
        )
        with ThreadPoolExecutor(FOOTER_READERS) as pool:
            footers = list(
                pool.map(lambda i: pq.read_metadata(fs.open_input_file(i.path)), parts)
            )
    except Exception as e:
        raise storage_error(
            e, join(writer.location, attempt), sink_id=writer.sink_id, batch_id=batch_id
        ) from e
    if not parts:
        raise TerminalError(
            f"Spark wrote no Parquet file into {join(writer.location, attempt)}",
            sink_id=writer.sink_id,
            batch_id=batch_id,
        )
    files = [
        WrittenFile(
            path=f"{attempt}/{info.base_name}",
            size=info.size,
            modified_ms=info.mtime_ns // 1_000_000,
            rows=footer.num_rows,
            **_seq_range(footer),
        )
        for info, footer in zip(parts, footers)
    ]
    return files, footers[0].schema.to_arrow_schema()


def _seq_range(footer: pq.FileMetaData) -> dict[str, int | None]:
    """Min and max ``_wal_seq`` over the file's row groups, from their statistics."""
    column = footer.schema.names.index(SEQ_COLUMN)
    lows, highs = [], []
    for i in range(footer.num_row_groups):
        group = footer.row_group(i)
        if group.num_rows == 0:
            continue
        stats = group.column(column).statistics
        if stats is None or not stats.has_min_max:
            return {"min_seq": None, "max_seq": None}
        lows.append(stats.min)
        highs.append(stats.max)
    return {"min_seq": min(lows, default=None), "max_seq": max(highs, default=None)}


@contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Set Spark SQL ``settings`` for a block, then put the previous values back."""
    conf = spark.conf
    before = {key: conf.get(key, None) for key in settings}
    for key, value in settings.items():
        conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)
