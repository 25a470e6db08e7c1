"""The job's supervisor (job/supervisor.py) without Spark: fake attempts fail, drain
or stop, and the restart loop decides the exit code."""

from __future__ import annotations

from wal_sink.config import RestartConfig
from wal_sink.errors import ConfigError, FencedError, TransientError
from wal_sink.exit_status import FAILED, OK, USAGE
from wal_sink.job.restart import RestartPolicy
from wal_sink.job.supervisor import supervise
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.stop_signal import StopSignal


class Path:
    def __init__(self, log: list[str], finish: int = OK) -> None:
        self.log = log
        self.finished_with = finish

    def check(self) -> None:
        pass

    def finish(self, stop: StopSignal) -> int:
        self.log.append("finish")
        return self.finished_with

    def cause(self, error: BaseException) -> BaseException:
        return error

    def close(self) -> None:
        self.log.append("close")


class Queries:
    """Runs ``turns`` looks, then ends; or fails at start with ``failure``."""

    def __init__(self, log: list[str], failure=None, turns: int = 2, stop=None):
        self.log = log
        self.failure = failure
        self.turns = turns
        self.stop_on_turn = stop

    def start(self) -> None:
        self.log.append("start")
        if self.failure is not None:
            raise self.failure

    def running(self, seconds: float) -> bool:
        self.turns -= 1
        if self.stop_on_turn is not None and self.turns == 0:
            self.stop_on_turn.stop_taking_batches()
        return self.turns >= 0

    def stop_between_batches(self) -> None:
        self.log.append("stop between batches")

    def stop(self) -> None:
        self.log.append("stop")


def run(attempts, strategy="fixed-delay", attempts_allowed=2, stop=None):
    policy = RestartPolicy(
        RestartConfig(strategy=strategy, attempts=attempts_allowed, delay=0.0)
    )
    made = iter(attempts)
    return supervise(lambda: next(made), stop or StopSignal(), policy, SinkMetrics("s"))


def test_supervise_drained_attempt_exits_ok_after_closing():
    log: list[str] = []
    assert run([(Path(log), Queries(log))]) == OK
    assert log == ["start", "finish", "stop", "close"]


def test_supervise_transient_failures_restart_until_the_strategy_gives_up():
    log: list[str] = []
    attempts = [(Path(log), Queries(log, TransientError("down"))) for _ in range(3)]
    assert run(attempts, attempts_allowed=2) == FAILED
    assert log.count("start") == 3 and log.count("close") == 3


def test_supervise_transient_failure_then_drain_exits_ok():
    log: list[str] = []
    attempts = [
        (Path(log), Queries(log, TransientError("down"))),
        (Path(log), Queries(log)),
    ]
    assert run(attempts) == OK
    assert log.count("start") == 2 and log[-3:] == ["finish", "stop", "close"]


def test_supervise_terminal_error_exits_failed_without_restart():
    log: list[str] = []
    attempts = [(Path(log), Queries(log, FencedError("fenced")))] * 2
    assert run(attempts) == FAILED
    assert log == ["start", "stop", "close"]


def test_supervise_config_error_exits_usage():
    log: list[str] = []
    assert run([(Path(log), Queries(log, ConfigError("bad key")))]) == USAGE


def test_supervise_stop_signal_stops_between_batches_then_finishes():
    log: list[str] = []
    stop = StopSignal()
    assert run([(Path(log), Queries(log, turns=3, stop=stop))], stop=stop) == OK
    assert log == ["start", "stop between batches", "finish", "stop", "close"]


def test_supervise_failure_while_stopping_finishes_instead_of_restarting():
    log: list[str] = []
    stop = StopSignal()
    stop.stop_taking_batches()
    attempts = [(Path(log), Queries(log, TransientError("down")))]
    assert run(attempts, stop=stop) == OK
    assert log == ["start", "finish", "stop", "close"]
