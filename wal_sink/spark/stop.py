"""Stopping the job on SIGTERM (docs/protocol.md, on stop).

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
import threading
import time

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("wal_sink.job")

SAME_SIGNAL_SECONDS = 1.0


class GracefulStop:
    def __init__(self) -> None:
        self.signals = 0
        self._last_signal = float("-inf")
        self.now = threading.Event()
        """Set by a second SIGTERM: stop waiting for MySQL."""
        self.stopping = False
        self.batch_lock = threading.Lock()
        """Held while a batch runs through the sink."""

    @property
    def requested(self) -> bool:
        return self.signals > 0

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
            else:
                log.warning("second SIGTERM: stopping now; staged batches stay staged")
                self.now.set()
        self._last_signal = now

    def stop_between_batches(self, queries: list[StreamingQuery]) -> None:
        """Stop the queries once the batch in progress has been handed over."""
        with self.batch_lock:
            self.stopping = True
        for query in queries:
            query.stop()


class _JvmTermHandler:
    """A ``sun.misc.SignalHandler`` implemented in Python through py4j."""

    def __init__(self, stop: GracefulStop) -> None:
        self.stop = stop

    def handle(self, sig: object) -> None:
        self.stop.record()

    class Java:
        implements = ["sun.misc.SignalHandler"]
