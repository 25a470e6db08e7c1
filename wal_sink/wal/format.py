"""The WAL's format on storage, shared by its writer, its reader and its
maintenance: a Delta table partitioned by ``_wal_batch_id`` whose rows carry
``_wal_seq``, the order of the rows of a batch (I4), and how that table and its
Parquet files are opened.
"""

from __future__ import annotations

import pyarrow as pa
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


def parquet_write_options(schema: pa.Schema) -> dict[str, object]:
    """pyarrow's Parquet writer settings for a WAL file of ``schema``: snappy, as
    Spark writes; ``_wal_seq``, a run of consecutive numbers in each file, delta-
    encoded (a few KB per million rows instead of 8 bytes per row) and without a
    dictionary, which a column unique in the file would only build to drop; every
    other column, nested ones leaf by leaf, with pyarrow's default dictionary.
    Spark's write does the same with Parquet's v2 pages (spark/staging.py)."""
    return {
        "compression": "snappy",
        "use_dictionary": [p for p in _leaf_paths(schema) if p != SEQ_COLUMN],
        "column_encoding": {SEQ_COLUMN: "DELTA_BINARY_PACKED"},
    }


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet's leaf columns for ``schema`` as pyarrow names them (a list column
    ``tags`` is ``tags.list.element``): its per-column settings take these paths."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    parquet = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return [parquet.column(i).path for i in range(len(parquet))]


def open_parquet(uri: str, storage: Storage) -> pq.ParquetFile:
    """One Parquet file of a table, opened for streaming reads."""
    filesystem, path = storage.filesystem(uri)
    return pq.ParquetFile(filesystem.open_input_file(path))
