"""The stop policy (protocol/stop_signal.py) without Spark or MySQL: signals counted
into the two levels of stopping, one SIGTERM that reaches both the JVM and Python
counted once, and the wait for what is staged (drain_within)."""

from __future__ import annotations

import pytest

from wal_sink.protocol.stop_signal import SignalCounter, StopSignal, drain_within
from wal_sink.spark.stop import GracefulStop, _JvmTermHandler


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_record_first_signal_stops_taking_batches_only():
    stop = StopSignal()
    assert SignalCounter(stop).record() == 1
    assert stop.stopping and not stop.now


def test_record_second_signal_stops_now():
    stop, clock = StopSignal(), Clock()
    counter = SignalCounter(stop, clock=clock)
    counter.record()
    clock.now += 0.01
    assert counter.record() == 2
    assert stop.now


def test_record_signal_within_same_window_counts_once():
    stop, clock = StopSignal(), Clock()
    counter = SignalCounter(stop, same_within=1.0, clock=clock)
    counter.record()
    clock.now += 0.5
    assert counter.record() == 0
    assert stop.stopping and not stop.now
    clock.now += 1.5
    assert counter.record() == 2
    assert stop.now


def test_sigterm_to_jvm_and_python_within_a_second_counts_once(caplog):
    stop, clock = StopSignal(), Clock()
    graceful = GracefulStop(stop, clock)
    jvm = _JvmTermHandler(graceful)
    caplog.set_level("INFO", "wal_sink.job")
    graceful.record()  # Python's handler
    clock.now += 0.2
    jvm.handle(None)  # the JVM's, for the same signal to the process group
    assert stop.stopping and not stop.now
    assert [r.getMessage() for r in caplog.records] == [
        "SIGTERM: stopping after the current batch"
    ]
    clock.now += 5
    jvm.handle(None)  # a second SIGTERM
    assert stop.now
    assert caplog.records[-1].getMessage().startswith("second SIGTERM: stopping now")


class Work:
    """Batches that the drain applies one per step; ``stuck`` ones never go."""

    def __init__(self, pending: int, stuck: bool = False, failure=None) -> None:
        self._pending = pending
        self.stuck = stuck
        self.failure = failure
        self.steps = 0

    @property
    def pending(self) -> int:
        return self._pending

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def drain(self, timeout: float | None = None) -> bool:
        self.steps += 1
        if not self.stuck and self._pending:
            self._pending -= 1
        return not self._pending


def test_drain_within_without_limit_applies_everything():
    assert drain_within(Work(5), StopSignal(), lambda: None) == 0


def test_drain_within_stop_now_leaves_the_rest_at_once():
    stop = StopSignal()
    stop.stop_now()
    work = Work(3)
    assert drain_within(work, stop, lambda: None) == 3
    assert work.steps == 0


def test_drain_within_timeout_passed_leaves_the_rest():
    clock = Clock()
    work = Work(2, stuck=True)

    def timeout() -> float:
        clock.now += 4  # each look at the time finds it later
        return 10.0

    assert drain_within(work, StopSignal(), timeout, clock=clock) == 2
    assert work.steps == 2


def test_drain_within_failed_work_raises_its_failure():
    with pytest.raises(RuntimeError, match="committer"):
        drain_within(
            Work(2, failure=RuntimeError("committer")), StopSignal(), lambda: None
        )
