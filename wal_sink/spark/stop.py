"""SIGTERM to the job (docs/protocol.md, on stop): the signal handlers, Python's
and the JVM's, which feed one signal counter (protocol/stop_signal.py) that sets
the job's stop signal, which the sink, its committer and the BatchRunner read.

The first SIGTERM stops taking batches after the one in progress and lets the
committer apply what is staged, for up to ``job.stop_timeout``; a second SIGTERM
gives up waiting at once. Either way nothing is lost: what is not applied stays
staged in the WAL for the next start.

Under spark-submit the driver JVM is the parent process and gets the signal too; its
default handler would run the shutdown hooks and stop Spark mid-batch. The JVM's TERM
handler is therefore replaced by one that only records the signal. A signal sent to
the whole process group reaches both processes: the two count as one
(SignalCounter's ``same_within``).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from wal_sink.protocol.stop_signal import SAME_SIGNAL_SECONDS, SignalCounter, StopSignal

log = logging.getLogger("wal_sink.job")


class GracefulStop:
    """Counts SIGTERMs (Python's and the JVM's) into ``stop``: the first asks it to
    stop taking batches, the second to stop now."""

    def __init__(
        self, stop: StopSignal, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stop = stop
        self.counter = SignalCounter(stop, SAME_SIGNAL_SECONDS, clock)

    def install(self, spark: SparkSession) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: self.record())
        ensure_callback_server_started(spark.sparkContext._gateway)
        jvm = spark.sparkContext._jvm
        self._jvm_handler = _JvmTermHandler(self)  # keep a reference: py4j needs it
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), self._jvm_handler)

    def record(self) -> None:
        counted = self.counter.record()
        if counted == 1:
            log.info("SIGTERM: stopping after the current batch")
        elif counted:
            log.warning("second SIGTERM: stopping now; staged batches stay staged")


class _JvmTermHandler:
    """A ``sun.misc.SignalHandler`` implemented in Python through py4j."""

    def __init__(self, stop: GracefulStop) -> None:
        self.stop = stop

    def handle(self, sig: object) -> None:
        self.stop.record()

    class Java:
        implements = ["sun.misc.SignalHandler"]
