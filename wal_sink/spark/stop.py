"""SIGTERM to the job (docs/protocol.md, on stop): the signal handling, which sets
the job's stop signal (protocol/stop_signal.py) that the sink, its committer and the
BatchRunner read.

The first SIGTERM stops taking batches after the one in progress and lets the
committer apply what is staged, for up to ``job.stop_timeout``; a second SIGTERM
gives up waiting at once. Either way nothing is lost: what is not applied stays
staged in the WAL for the next start.

Under spark-submit the driver JVM is the parent process and gets the signal too; its
default handler would run the shutdown hooks and stop Spark mid-batch. The JVM's TERM
handler is therefore replaced by one that only records the signal. A signal sent to
the whole process group reaches both processes: the two count as one.
"""

from __future__ import annotations

import logging
import signal
import time

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from wal_sink.protocol.stop_signal import StopSignal

log = logging.getLogger("wal_sink.job")

SAME_SIGNAL_SECONDS = 1.0


class GracefulStop:
    """Counts SIGTERMs (Python's and the JVM's) into ``stop``: the first asks it to
    stop taking batches, the second to stop now."""

    def __init__(self, stop: StopSignal) -> None:
        self.stop = stop
        self.signals = 0
        self._last_signal = float("-inf")

    def install(self, spark: SparkSession) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: self.record())
        ensure_callback_server_started(spark.sparkContext._gateway)
        jvm = spark.sparkContext._jvm
        self._jvm_handler = _JvmTermHandler(self)  # keep a reference: py4j needs it
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), self._jvm_handler)

    def record(self) -> None:
        now = time.monotonic()
        if now - self._last_signal > SAME_SIGNAL_SECONDS:
            self.signals += 1
            if self.signals == 1:
                log.info("SIGTERM: stopping after the current batch")
                self.stop.stop_taking_batches()
            else:
                log.warning("second SIGTERM: stopping now; staged batches stay staged")
                self.stop.stop_now()
        self._last_signal = now


class _JvmTermHandler:
    """A ``sun.misc.SignalHandler`` implemented in Python through py4j."""

    def __init__(self, stop: GracefulStop) -> None:
        self.stop = stop

    def handle(self, sig: object) -> None:
        self.stop.record()

    class Java:
        implements = ["sun.misc.SignalHandler"]
