"""How a batch's rows reach the statements, without MySQL: the prefetch one chunk
ahead, small chunks joined, CDC rows split into runs of upserts and deletes, and the
rows set aside before MySQL sees them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait

import pyarrow as pa
import pytest

from wal_sink.protocol import chunk_stream
from wal_sink.protocol.chunk_stream import coalesced, prefetched
from wal_sink.protocol.row_by_row import drop_non_finite, drop_null_keys, split_runs


@pytest.fixture
def pool():
    with ThreadPoolExecutor(1) as executor:
        yield executor


def test_prefetch_prepares_one_item_ahead_in_order(pool):
    taken: list[int] = []
    prepared_on: set[str] = set()

    def items():
        for i in range(4):
            taken.append(i)
            yield i

    def prepare(i: int) -> int:
        prepared_on.add(threading.current_thread().name)
        return i * 10

    seen = []
    for item, prepared in prefetched(items(), prepare, pool):
        seen.append((item, prepared))
        # while the caller holds item i, item i + 1 is taken (one ahead, no more)
        pool.submit(lambda: None).result()  # the prefetch before it has finished
        assert taken[-1] == min(item + 1, 3)
    assert seen == [(0, 0), (1, 10), (2, 20), (3, 30)]
    assert threading.current_thread().name not in prepared_on


def test_prefetch_raises_what_preparing_raised_in_its_place(pool):
    def prepare(i: int) -> int:
        if i == 2:
            raise ValueError("chunk 2 is bad")
        return i

    seen = []
    with pytest.raises(ValueError, match="chunk 2 is bad"):
        for item, _ in prefetched(iter(range(5)), prepare, pool):
            seen.append(item)
    assert seen == [0, 1]


def test_prefetch_stopped_early_finishes_the_item_in_progress(pool, monkeypatch):
    """Item 1 is let finish only once the caller's stop waits for it: a stop that
    returned without waiting would find it unfinished."""
    started, release = threading.Event(), threading.Event()
    finished = []

    def prepare(i: int) -> int:
        if i == 1:
            started.set()
            release.wait(5)
        finished.append(i)
        return i

    def waiting_lets_it_finish(futures):
        release.set()
        return wait(futures)

    monkeypatch.setattr(chunk_stream, "wait", waiting_lets_it_finish)
    items = prefetched(iter(range(3)), prepare, pool)
    assert next(items) == (0, 0)
    assert started.wait(5)
    items.close()  # the caller stops: returns once item 1 is prepared, not before
    assert finished == [0, 1]


def batch(ks: list[int], name: str = "k") -> pa.RecordBatch:
    return pa.record_batch({name: pa.array(ks, pa.int64())})


def test_small_chunks_are_joined_up_to_the_limit_in_order():
    chunks = [batch([1, 2]), batch([3]), batch([4, 5]), batch([6, 7, 8, 9])]
    joined = list(coalesced(iter(chunks), rows=3))
    assert [c.column("k").to_pylist() for c in joined] == [
        [1, 2, 3],
        [4, 5],
        [6, 7, 8, 9],  # larger than the limit: alone, never cut
    ]


def test_chunks_of_another_schema_are_not_joined():
    chunks = [batch([1]), batch([2], name="other"), batch([3], name="other")]
    joined = list(coalesced(iter(chunks), rows=10))
    assert [(c.schema.names, c.num_rows) for c in joined] == [
        (["k"], 1),
        (["other"], 2),
    ]


def test_cdc_rows_split_into_runs_of_upserts_and_deletes_in_order():
    rows = [
        {"op": "I", "k": 1},
        {"op": "U", "k": 2},
        {"op": "D", "k": 1},
        {"op": "X", "k": 3},
        {"op": "I", "k": 4},
    ]
    runs = [
        (is_delete, [r["k"] for r in run], sorted(ops.values()))
        for is_delete, run, ops in split_runs(rows, "op", ("D", "X"))
    ]
    assert runs == [
        (False, [1, 2], ["I", "U"]),
        (True, [1, 3], ["D", "X"]),
        (False, [4], ["I"]),
    ]
    assert all("op" not in r for r in rows), "the op column leaves the rows"


def test_without_cdc_the_rows_are_one_run_of_upserts():
    rows = [{"k": 1}, {"k": 2}]
    assert list(split_runs(rows, None, ())) == [(False, rows, {})]


def test_rows_with_a_null_key_or_a_non_finite_float_are_set_aside():
    bad = []
    run = [
        {"k": 1, "j": "a", "x": 1.0},
        {"k": None, "j": "a", "x": 1.0},
        {"k": 2, "j": None, "x": 1.0},
        {"k": 3, "j": "a", "x": float("nan")},
        {"k": 4, "j": "a", "x": float("-inf")},
    ]
    kept = drop_non_finite(drop_null_keys(run, ("k", "j"), bad), bad)
    assert [r["k"] for r in kept] == [1]
    assert [e.reason for e in bad] == [
        "null key column(s): k",
        "null key column(s): j",
        "NaN or infinity in column(s): x; MySQL cannot store it",
        "NaN or infinity in column(s): x; MySQL cannot store it",
    ]
    assert [e.record["k"] for e in bad] == [None, 2, 3, 4]
