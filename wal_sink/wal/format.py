"""The WAL's format on storage, shared by its writer, its reader and its
maintenance: a Delta table partitioned by ``_wal_batch_id`` whose rows carry
``_wal_seq``, the order of the rows of a batch (I4), and how that table and its
Parquet files are opened.
"""

from __future__ import annotations

import pyarrow.parquet as pq
from deltalake import DeltaTable

from wal_sink.storage import Storage

BATCH_COLUMN = "_wal_batch_id"
"""The partition column: the Spark batch id the row was staged for."""
SEQ_COLUMN = "_wal_seq"
"""Orders the rows of one batch: rising within a file, and the files of a batch
cover disjoint ranges of it."""
WAL_COLUMNS = (BATCH_COLUMN, SEQ_COLUMN)
"""The WAL's own columns; every other column is the stream's."""


def delta_table(
    location: str, storage: Storage, version: int | None = None
) -> DeltaTable:
    """delta-rs's handle on the Delta table at ``location`` (raises
    TableNotFoundError when there is none), reached with ``storage``'s options."""
    return DeltaTable(
        location, version=version, storage_options=storage.delta_options or None
    )


def table_exists(location: str, storage: Storage) -> bool:
    """Whether a Delta table is at ``location`` now: after a failed creation, tells
    a race lost to another creator (delta-rs says so only in its message) from a
    real failure. False too when the location cannot be read."""
    try:
        delta_table(location, storage)
    except Exception:
        return False
    return True


def parquet_write_options(columns: list[str]) -> dict[str, object]:
    """pyarrow's Parquet writer settings for a WAL file with ``columns``: snappy, as
    Spark writes; ``_wal_seq``, a run of consecutive numbers in each file, delta-
    encoded (a few bytes instead of 8 per row) and without a dictionary, which a
    column unique in the file would only build to drop. Spark's write does the same
    with Parquet's v2 pages (spark/staging.py)."""
    return {
        "compression": "snappy",
        "use_dictionary": [c for c in columns if c != SEQ_COLUMN],
        "column_encoding": {SEQ_COLUMN: "DELTA_BINARY_PACKED"},
    }


def open_parquet(uri: str, storage: Storage) -> pq.ParquetFile:
    """One Parquet file of a table, opened for streaming reads."""
    filesystem, path = storage.filesystem(uri)
    return pq.ParquetFile(filesystem.open_input_file(path))
