"""Reading the write-ahead log with delta-rs: no JVM, so the CLI and the committer
start fast.

Within a file rows are stored in ``_wal_seq`` order and files of one batch cover
disjoint ``_wal_seq`` ranges (format.py), so reading the files by their minimum
``_wal_seq`` replays a batch in its staged order (I4).

Files are streamed with ``ParquetFile.iter_batches`` in bounded chunks, never loaded
whole (docs/stack.md: pyarrow scans abort at exit).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from wal_sink import faults
from wal_sink.errors import TerminalError, WalSinkError
from wal_sink.storage import Storage
from wal_sink.wal.format import (
    BATCH_COLUMN,
    SEQ_COLUMN,
    WAL_COLUMNS,
    delta_table,
    open_parquet,
)
from wal_sink.wal.model import BatchState, StagedBatch, StagedFile
from wal_sink.wal.ownership import WAL, check_owner, open_owned
from wal_sink.wal.storage_errors import storage_error


class WalReader:
    """Read-only view of one WAL table; ``refresh()`` picks up new commits.

    With a ``sink_id``, a WAL another sink owns is refused (ConfigError, I9)."""

    def __init__(
        self, path: str, sink_id: str | None = None, storage: Storage = Storage()
    ) -> None:
        self.path = path
        self.storage = storage
        self.sink_id = sink_id
        """The sink reading: named in errors, and the owner the WAL must have."""
        self._table: DeltaTable | None = None

    def exists(self) -> bool:
        return self.table() is not None

    def table(self) -> DeltaTable | None:
        """The current snapshot, or None while nothing was ever staged."""
        if self._table is None:
            self._table = open_owned(self.path, self.storage, self.sink_id, WAL)
        return self._table

    def stream_schema(self) -> pa.Schema | None:
        """The stream's columns as staged: the WAL's schema without its own
        columns; None while nothing was ever staged."""
        table = self.table()
        if table is None:
            return None
        arrow = pa.schema(table.schema().to_arrow())
        return pa.schema([f for f in arrow if f.name not in WAL_COLUMNS])

    def refresh(self) -> None:
        if self._table is None:
            self.table()
            return
        try:
            self._table.update_incremental()
        except Exception as e:
            raise storage_error(e, self.path, sink_id=self.sink_id) from e
        self._check_owner(self._table)

    def _check_owner(self, table: DeltaTable) -> None:
        if self.sink_id is not None:
            check_owner(table, self.sink_id, self.path, WAL)

    def last_staged(self, sink_id: str) -> int | None:
        """Highest batch id whose stage committed (Delta's txn version for the app)."""
        table = self.table()
        return None if table is None else table.transaction_version(sink_id)

    def staged_batches(self, only: int | None = None) -> dict[int, StagedBatch]:
        """Every batch present in the WAL (or just batch ``only``), by id, with its
        files in apply order. Filtering happens on the Arrow table, so looking up one
        batch does not turn the whole WAL's file list into Python objects."""
        table = self.table()
        if table is None:
            return {}
        actions = pa.table(table.get_add_actions(flatten=True))
        partition = f"partition.{BATCH_COLUMN}"
        if only is not None:
            actions = actions.filter(pc.equal(actions[partition], only))
        base = table.table_uri.rstrip("/")
        by_batch: dict[int, list[StagedFile]] = {}
        min_col = f"min.{SEQ_COLUMN}"
        has_min = min_col in actions.column_names
        for row in actions.to_pylist():
            batch_id = int(row[partition])
            by_batch.setdefault(batch_id, []).append(
                StagedFile(
                    uri=_join_uri(base, row["path"]),
                    rows=int(row["num_records"] or 0),
                    size_bytes=int(row["size_bytes"]),
                    modified_ms=int(row["modification_time"]),
                    min_seq=row[min_col] if has_min else None,
                )
            )
        return {
            b: StagedBatch.ordered(b, files) for b, files in sorted(by_batch.items())
        }

    def staged_batch(self, batch_id: int) -> StagedBatch | None:
        return self.staged_batches(only=batch_id).get(batch_id)

    def state_without_files(self, batch_id: int, app_id: str) -> BatchState:
        """Tell an empty batch from a missing one, for a batch with no files now.

        The WAL's application transaction says whether the batch was staged; the
        commit that staged it (the first table version whose transaction reached
        ``batch_id``) says whether it had files. Batches staged with no rows have
        none (by the data source, and by wal_sink 0.1), and files can be lost
        since (I1: never acked empty).
        """
        table = self.table()
        if table is None or (table.transaction_version(app_id) or -1) < batch_id:
            return BatchState.NOT_STAGED
        try:
            low, high = 0, table.version()
            while low < high:
                middle = (low + high) // 2
                reached = self._at(middle).transaction_version(app_id)
                if reached is not None and reached >= batch_id:
                    high = middle
                else:
                    low = middle + 1
            staging = self._at(low)
            if staging.transaction_version(app_id) != batch_id:
                return BatchState.NOT_STAGED
            actions = pa.table(staging.get_add_actions(flatten=True))
            partition = actions[f"partition.{BATCH_COLUMN}"]
            had_files = pc.any(pc.equal(partition, batch_id)).as_py()
        except Exception:  # history no longer readable: assume the worst
            return BatchState.MISSING
        return BatchState.MISSING if had_files else BatchState.EMPTY

    def _at(self, version: int) -> DeltaTable:
        return delta_table(self.path, self.storage, version)

    def read_batch(
        self, batch: StagedBatch, chunk_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """Yield the batch's rows in staged order, at most ``chunk_rows`` at a time.

        The WAL's own columns are dropped; only the stream's columns are yielded.
        ``_wal_seq`` is checked to rise throughout: rows out of their staged order
        (I4) stop the batch instead of being applied.
        """
        last = -1
        for staged_file in batch.files:
            try:
                faults.hit("wal.read", batch.batch_id)
                parquet = open_parquet(staged_file.uri, self.storage)
                user_columns = [
                    n for n in parquet.schema_arrow.names if n not in WAL_COLUMNS
                ]
                chunks = parquet.iter_batches(
                    batch_size=chunk_rows, columns=[*user_columns, SEQ_COLUMN]
                )
                for chunk in chunks:
                    seq = chunk.column(SEQ_COLUMN)
                    if len(seq) and (seq[0].as_py() <= last or not _rising(seq)):
                        raise TerminalError(
                            "the WAL holds this batch's rows out of their staged "
                            f"order (in {staged_file.uri}); it is not applied",
                            sink_id=self.sink_id,
                            batch_id=batch.batch_id,
                        )
                    last = seq[-1].as_py() if len(seq) else last
                    yield chunk.drop_columns([SEQ_COLUMN])
            except WalSinkError:
                raise
            except Exception as e:
                raise storage_error(
                    e, staged_file.uri, sink_id=self.sink_id, batch_id=batch.batch_id
                ) from e

    def head(self, batch: StagedBatch, limit: int) -> list[dict]:
        """The first ``limit`` rows of a batch in apply order, as Python values."""
        rows: list[dict] = []
        for chunk in self.read_batch(batch, min(limit, 10_000)):
            rows.extend(chunk.slice(0, limit - len(rows)).to_pylist())
            if len(rows) >= limit:
                break
        return rows


def _rising(seq: pa.Array) -> bool:
    return (
        len(seq) < 2
        or pc.all(pc.less(seq.slice(0, len(seq) - 1), seq.slice(1))).as_py()
    )


def _join_uri(base: str, relative: str) -> str:
    if "://" in relative or relative.startswith("/"):
        return relative
    return f"{base}/{unquote(relative)}"
