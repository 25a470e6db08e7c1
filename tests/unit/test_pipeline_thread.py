"""The committer thread behind Spark without Spark or MySQL: backpressure, the stop
signal, close, and a committer's failure reaching the stage. The committer is a
stand-in that applies nothing: each group waits until the test lets it commit. A
thread is known to be blocked when it was seen waiting on the condition it waits
on, not after some time."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from wal_sink.errors import StopRequested, TerminalError
from wal_sink.protocol import pipeline as pipeline_module
from wal_sink.protocol import stop_signal
from wal_sink.protocol.committer import CommitResult
from wal_sink.protocol.pipeline import Handoff, Pipeline
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.wal.model import StagedBatch, StagedFile


class WatchedCondition(threading.Condition):
    """A condition that remembers which threads have waited on it."""

    def __init__(self, lock: Any = None) -> None:
        super().__init__(lock)
        self._seen = threading.Condition()
        self._waited: set[threading.Thread] = set()

    def wait(self, timeout: float | None = None) -> bool:
        with self._seen:
            self._waited.add(threading.current_thread())
            self._seen.notify_all()
        return super().wait(timeout)

    def until_waited(self, thread: threading.Thread, timeout: float = 5) -> bool:
        """Whether ``thread`` waits, or has waited, on this condition (within
        ``timeout`` seconds)."""
        with self._seen:
            return self._seen.wait_for(lambda: thread in self._waited, timeout)


class InThread(threading.Thread):
    """``call()`` on a thread of its own, as foreachBatch calls ``wait_for_room``
    or a part of the sink waits for its stop signal."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: Any = None
        self.raised: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as e:
            self.raised = e

    def waits_on(self, condition: WatchedCondition) -> bool:
        """Seen waiting on ``condition`` (it waits only while it cannot go on), and
        not returned since."""
        return condition.until_waited(self) and self.is_alive()


class GatedCommitter:
    """``apply_group`` announces each group, then waits for ``let_commit``."""

    sink_id = "unit"

    def __init__(self) -> None:
        self.started: queue.Queue[list[int]] = queue.Queue()
        self.committed: list[list[int]] = []
        self.fail_with: BaseException | None = None
        self._gate = threading.Semaphore(0)

    def apply_group(self, batches: list[StagedBatch | int]) -> list[CommitResult]:
        ids = [b.batch_id if isinstance(b, StagedBatch) else b for b in batches]
        self.started.put(ids)
        assert self._gate.acquire(timeout=10), "the test never let it commit"
        if self.fail_with is not None:
            raise self.fail_with
        self.committed.append(ids)
        return [CommitResult(i, True, rows=1) for i in ids]

    def let_commit(self, groups: int = 1) -> None:
        for _ in range(groups):
            self._gate.release()

    def group_started(self) -> list[int]:
        return self.started.get(timeout=5)


def handoff(batch_id: int) -> Handoff:
    """A staged batch of one row: with max_transaction_rows = 1, a group alone."""
    file = StagedFile(f"part-{batch_id}.parquet", 1, 100, 0)
    return Handoff(batch_id, StagedBatch(batch_id, (file,)), None)


@pytest.fixture
def committer():
    return GatedCommitter()


@pytest.fixture
def stop():
    return StopSignal()


@pytest.fixture
def pipeline(committer, stop, monkeypatch):
    with monkeypatch.context() as m:  # its condition watched, from the start
        watched = SimpleNamespace(Condition=WatchedCondition, Thread=threading.Thread)
        m.setattr(pipeline_module, "threading", watched)
        pipeline = Pipeline(committer, stop, max_pending=2, max_transaction_rows=1)
    yield pipeline
    committer.let_commit(10)  # nothing left waiting at the gate
    pipeline.close(timeout=5)


def test_wait_for_room_blocks_at_max_pending_and_resumes_when_a_group_commits(
    pipeline, committer
):
    pipeline.wait_for_room()  # room: nothing pending
    pipeline.submit(handoff(0))
    assert committer.group_started() == [0]
    pipeline.wait_for_room()  # one of two pending
    pipeline.submit(handoff(1))
    stage = InThread(pipeline.wait_for_room)
    assert stage.waits_on(pipeline._changed), "two pending of max_pending = 2: no room"
    committer.let_commit()
    stage.join(5)
    assert not stage.is_alive() and stage.raised is None
    assert committer.committed == [[0]]
    assert committer.group_started() == [1]


def test_a_stage_waiting_for_room_gives_up_when_asked_to_stop_taking_batches(
    pipeline, committer, stop
):
    for batch_id in (0, 1):
        pipeline.submit(handoff(batch_id))
    assert committer.group_started() == [0]
    stage = InThread(pipeline.wait_for_room)
    assert stage.waits_on(pipeline._changed)
    stop.stop_taking_batches()
    stage.join(5)
    assert not stage.is_alive()
    assert isinstance(stage.raised, StopRequested), stage.raised
    with pytest.raises(StopRequested):  # and so does the next, room or not
        pipeline.wait_for_room()
    committer.let_commit(2)  # what was submitted is still applied
    assert pipeline.drain(5)
    assert committer.committed == [[0], [1]]


def test_close_ends_the_thread_after_the_group_in_progress(pipeline, committer):
    for batch_id in (0, 1):
        pipeline.submit(handoff(batch_id))
    assert committer.group_started() == [0]
    assert not pipeline.close(timeout=0), "group 0 is still in its transaction"
    assert pipeline._thread.is_alive()
    committer.let_commit()
    assert pipeline.close(timeout=5)
    assert not pipeline._thread.is_alive()
    assert committer.committed == [[0]], "batch 1 stays staged"
    with pytest.raises(StopRequested):
        pipeline.submit(handoff(2))


def test_close_of_an_idle_pipeline_ends_its_thread_without_waiting(pipeline, committer):
    pipeline.submit(handoff(0))
    committer.group_started()
    committer.let_commit()
    assert pipeline.drain(5)
    assert pipeline.close(timeout=0)
    assert not pipeline._thread.is_alive()


def test_a_committer_failure_reaches_the_waiting_stage_and_the_next_submit(
    pipeline, committer
):
    committer.fail_with = TerminalError("the target table is gone")
    for batch_id in (0, 1):
        pipeline.submit(handoff(batch_id))
    committer.group_started()
    stage = InThread(pipeline.wait_for_room)
    assert stage.waits_on(pipeline._changed)
    committer.let_commit()
    stage.join(5)
    assert not stage.is_alive()
    assert stage.raised is committer.fail_with
    with pytest.raises(TerminalError, match="the target table is gone"):
        pipeline.submit(handoff(2))
    assert not pipeline.drain(1) and pipeline.failure is committer.fail_with
    assert pipeline.close(timeout=0), "the thread ended on the failure"


def test_stop_levels_rise_and_wake_whoever_waits(monkeypatch):
    monkeypatch.setattr(stop_signal, "WAKE_SECONDS", 60)  # only a wake-up is quick
    stop = StopSignal()
    stop._changed = WatchedCondition(threading.RLock())
    assert not stop.stopping and not stop.now
    assert not stop.wait(0.05)
    waiter = InThread(lambda: stop.wait(30))
    assert waiter.waits_on(stop._changed)
    stop.stop_taking_batches()
    waiter.join(5)
    assert not waiter.is_alive() and waiter.result is True
    assert stop.stopping and not stop.now
    assert not stop.wait(0.05, now=True), "stopping is not stopping now"
    waiter = InThread(lambda: stop.wait(30, now=True))
    assert waiter.waits_on(stop._changed)
    stop.stop_now()
    waiter.join(5)
    assert not waiter.is_alive() and waiter.result is True and stop.now
    stop.stop_taking_batches()
    assert stop.now, "a level never falls"


@pytest.mark.timeout(20)
def test_a_stop_set_by_a_signal_handler_inside_the_signals_lock_does_not_deadlock():
    """A signal handler runs in the main thread between two bytecodes, maybe while
    that thread holds the signal's own lock (inside ``wait``)."""
    stop = StopSignal()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: stop.stop_now())
    try:
        with stop._changed:  # as the main thread does inside wait()
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.1)  # the handler runs here, in this thread
        assert stop.now
    finally:
        signal.signal(signal.SIGUSR1, previous)
