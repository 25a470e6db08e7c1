"""Restart strategies decide from failures alone; a fake clock drives failure-rate."""

from wal_sink.config import RestartConfig
from wal_sink.job.restart import RestartPolicy


def test_fixed_delay_allows_exactly_its_attempts():
    policy = RestartPolicy(RestartConfig(strategy="fixed-delay", attempts=2, delay=3.0))
    assert [policy.allow_restart() for _ in range(3)] == [True, True, False]
    assert policy.delay == 3.0 and policy.describe() == "restart 2/2"


def test_failure_rate_counts_failures_inside_the_interval():
    now = [0.0]
    policy = RestartPolicy(
        RestartConfig(strategy="failure-rate", max_failures=2, interval=60.0),
        clock=lambda: now[0],
    )
    assert policy.allow_restart() and policy.allow_restart()
    now[0] = 30.0
    assert not policy.allow_restart(), "third failure within a minute"
    policy = RestartPolicy(
        RestartConfig(strategy="failure-rate", max_failures=2, interval=60.0),
        clock=lambda: now[0],
    )
    for t in (0.0, 50.0, 100.0, 150.0, 200.0):
        now[0] = t
        assert policy.allow_restart(), f"failures 50s apart never exceed 2/min (t={t})"


def test_none_never_restarts():
    assert not RestartPolicy(RestartConfig(strategy="none")).allow_restart()
