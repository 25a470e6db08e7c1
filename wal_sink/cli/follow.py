"""``wal-sink follow``: the follower (protocol/follower.py) in the foreground, with
its metrics, until SIGTERM or Ctrl-C (the stop policy: protocol/stop_signal.py)."""

from __future__ import annotations

import logging
import signal

import click

from wal_sink.cli.base import one_line_errors, open_sink
from wal_sink.protocol.stop_signal import SignalCounter, StopSignal


@click.command()
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="Serve Prometheus metrics on this port (default: job.metrics_port).",
)
@click.pass_context
@one_line_errors
def follow(ctx: click.Context, metrics_port: int | None) -> None:
    """Apply staged batches to MySQL as they appear in the WAL, until SIGTERM.

    The MySQL side of format("wal_sink"): recovers unacked batches first, then
    applies each new one in batch order with its ack row. Takes the lease: a
    running job or follower of this sink is fenced and stops. SIGTERM (or Ctrl-C)
    applies what is staged, for up to job.stop_timeout, and exits 0; a second one
    exits at once, leaving the rest staged.

    Example: wal-sink -c conf/local.toml follow
    """
    from wal_sink.errors import RetryStopped
    from wal_sink.ops.housekeeping import scheduled
    from wal_sink.protocol.follower import Follower

    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    logging.getLogger("wal_sink").setLevel(logging.INFO)
    with open_sink(ctx) as sink:
        follower = Follower(sink)
        on_signal(follower.stop_signal)
        job = sink.config.job
        port = metrics_port or (job.metrics_port if job else None)
        if port is not None:
            host = job.metrics_host if job else "0.0.0.0"
            sink.metrics.serve(port, host)
            logging.getLogger("wal_sink.follow").info(
                "metrics at http://%s:%d/metrics", host, port
            )
        try:
            with scheduled(sink.config, sink.metrics):
                follower.run()
        except RetryStopped as e:  # a second signal while MySQL was unreachable
            logging.getLogger("wal_sink.follow").warning("%s", e)


def on_signal(stop: StopSignal) -> None:
    """SIGTERM or SIGINT: stop after applying what is staged; a second: at once."""
    counter = SignalCounter(stop)
    signal.signal(signal.SIGTERM, lambda signum, frame: counter.record())
    signal.signal(signal.SIGINT, lambda signum, frame: counter.record())
