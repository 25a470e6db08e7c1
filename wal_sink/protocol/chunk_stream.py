"""A batch's chunks on their way to MySQL: consecutive small chunks joined up to
``wal.chunk_rows`` rows, and each next chunk read (and prepared) on a thread of its
own while the current one is applied (batch_rows.py).

A batch of small files would otherwise cost a statement (and a savepoint) each, and
the client's reading and rendering would wait for MySQL and MySQL for the client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Executor, wait
from typing import Any, TypeVar

import pyarrow as pa

T = TypeVar("T")
U = TypeVar("U")


def coalesced(chunks: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """Consecutive chunks of one schema joined, in order, up to ``rows`` rows: a
    batch of small files would otherwise cost a statement (and a savepoint) each."""
    held: list[pa.RecordBatch] = []
    count = 0
    for chunk in chunks:
        if held and (
            count + chunk.num_rows > rows or not chunk.schema.equals(held[0].schema)
        ):
            yield _joined(held)
            held, count = [], 0
        held.append(chunk)
        count += chunk.num_rows
    if held:
        yield _joined(held)


def _joined(chunks: list[pa.RecordBatch]) -> pa.RecordBatch:
    return chunks[0] if len(chunks) == 1 else pa.concat_batches(chunks)


def prefetched(
    items: Iterator[T], prepare: Callable[[T], U], pool: Executor
) -> Iterator[tuple[T, U]]:
    """``(item, prepare(item))`` for each of ``items``, in order. The next item is
    taken and prepared on ``pool`` (one thread) while the caller works on the
    current one: one ahead, so at most two items are held besides the caller's.
    What taking or preparing an item raises is raised here, in order; when the
    caller stops early, the item in progress is finished and dropped."""
    end = object()

    def take() -> tuple[Any, Any]:
        item = next(items, end)
        return (item, None) if item is end else (item, prepare(item))

    ahead = pool.submit(take)
    try:
        while True:
            item, prepared = ahead.result()
            if item is end:
                return
            ahead = pool.submit(take)
            yield item, prepared
    finally:
        wait([ahead])  # ``items`` is never advanced by two threads at once
