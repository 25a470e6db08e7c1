"""Prometheus metrics of one sink, labelled by sink id, for dashboards and alerts.

The job serves them over HTTP when ``[job] metrics_port`` is set (prometheus-client's
own server, a daemon thread); ``conf/grafana_dashboard.json`` is built on exactly
these names. Each sink instance keeps its own registry, so a process may run
several sinks, and tests may read the values without a server.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from wal_sink.errors import first_line

log = logging.getLogger(__name__)

DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600)


class SinkMetrics:
    """What the sink, its committer and the job report, as Prometheus metrics."""

    def __init__(self, sink_id: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.sink_id = sink_id
        sink = {"labelnames": ("sink",), "registry": self.registry}

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, **sink).labels(sink_id)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, **sink).labels(sink_id)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, buckets=buckets, **sink).labels(sink_id)

        self.batches_staged = counter(
            "wal_sink_batches_staged", "Batches this process staged into the WAL."
        )
        self.batches_applied = counter(
            "wal_sink_batches_applied",
            "Batches this process applied to MySQL with their ack row.",
        )
        self.repairs_applied = counter(
            "wal_sink_repairs_applied",
            "Repairs (verify --against --repair) this process applied to MySQL with "
            "their ack row.",
        )
        by_table = {"labelnames": ("sink", "table"), "registry": self.registry}
        self.rows_applied = Counter(
            "wal_sink_rows_applied", "Rows upserted into a target table.", **by_table
        )
        self.rows_deleted = Counter(
            "wal_sink_rows_deleted",
            "Rows deleted from a target table (CDC).",
            **by_table,
        )
        self.rows_quarantined = Counter(
            "wal_sink_rows_quarantined",
            'Rows set aside for the quarantine table (table "": rows whose route '
            "named no table).",
            **by_table,
        )
        self.rows_skipped = Counter(
            "wal_sink_rows_skipped",
            "CDC upserts a newer delete made stale (not applied, not bad data).",
            **by_table,
        )
        self.batches_pending = gauge(
            "wal_sink_batches_pending",
            "Batches staged and not yet applied (waiting for the committer).",
        )
        self.last_staged_batch = gauge(
            "wal_sink_last_staged_batch_id", "Id of the last batch staged."
        )
        self.last_applied_batch = gauge(
            "wal_sink_last_applied_batch_id", "Id of the last batch applied."
        )
        self.stage_seconds = histogram(
            "wal_sink_stage_duration_seconds",
            "Time to stage one batch (Parquet write and Delta commit).",
            DURATION_BUCKETS,
        )
        self.part_seconds = Histogram(
            "wal_sink_batch_part_duration_seconds",
            "Where a foreachBatch call's time went, by part: plan (Spark planning "
            "the batch, before the call), lease, wait (backpressure), check, write "
            "(the executors' Parquet write), list (listing and footers), delta (the "
            "delta-rs commit), handoff.",
            labelnames=("sink", "part"),
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.commit_seconds = histogram(
            "wal_sink_commit_duration_seconds",
            "Time of one MySQL transaction applying one or more batches.",
            DURATION_BUCKETS,
        )
        self.lag_seconds = histogram(
            "wal_sink_lag_seconds",
            "From Spark planning a batch to its MySQL COMMIT.",
            LAG_BUCKETS,
        )
        self.retries = counter(
            "wal_sink_transient_retries",
            "Retries of a batch transaction or of the start-up after transient "
            "MySQL or storage errors.",
        )
        self.restarts = counter(
            "wal_sink_query_restarts", "Restarts of the streaming query by the job."
        )
        self.batches_quarantined = gauge(
            "wal_sink_batches_quarantined",
            "Batches set aside whole by wal-sink quarantine-batch (acked as "
            "quarantined, never applied), as the ack table held them at start.",
        )
        self.quarantine_open = gauge(
            "wal_sink_quarantine_open",
            "Quarantine entries no retry applied yet (failed again included), read "
            "when scraped, at most every 15 s.",
        )
        self.quarantine_retried = gauge(
            "wal_sink_quarantine_retried",
            "Quarantine entries wal-sink quarantine retry applied (resolved), read "
            "when scraped, at most every 15 s.",
        )
        self.lease_epoch = gauge(
            "wal_sink_lease_epoch", "Fencing epoch of the lease this process took."
        )
        self.lease_held = gauge(
            "wal_sink_lease_held",
            "1 while this process holds the sink's lease, 0 once fenced.",
        )

        self.housekeeping_runs = Counter(
            "wal_sink_housekeeping_runs",
            "Scheduled purges ([housekeeping]) by outcome: ok, failed.",
            labelnames=("sink", "outcome"),
            registry=self.registry,
        )
        self.housekeeping_removed = Counter(
            "wal_sink_housekeeping_removed",
            "What scheduled purges removed, by what: batches, ack_rows, "
            "quarantine_entries, tombstones, history_events, vacuum_files.",
            labelnames=("sink", "what"),
            registry=self.registry,
        )

    def count_rows(
        self, table: str, upserted: int, deleted: int, quarantined: int, skipped: int
    ) -> None:
        """What a batch did to ``table``: a configured table's name, or ``""``."""
        self.rows_applied.labels(self.sink_id, table).inc(upserted)
        self.rows_deleted.labels(self.sink_id, table).inc(deleted)
        self.rows_quarantined.labels(self.sink_id, table).inc(quarantined)
        self.rows_skipped.labels(self.sink_id, table).inc(skipped)

    def observe_parts(self, parts: dict[str, float]) -> None:
        """One batch's parts, in milliseconds, by name (``part_seconds``)."""
        for part, ms in parts.items():
            self.part_seconds.labels(self.sink_id, part).observe(ms / 1000)

    def follow_quarantine(
        self, read: Callable[[], tuple[int, int]], every: float = 15.0
    ) -> None:
        """Have the quarantine gauges show ``read()`` (open, retried) when scraped:
        it reads the quarantine table's log and the retry table, so at most every
        ``every`` seconds; a failed reading keeps the last one (NaN before any)."""
        reading = _Cached(read, every, self.sink_id)
        self.quarantine_open.set_function(lambda: reading()[0])
        self.quarantine_retried.set_function(lambda: reading()[1])

    def serve(self, port: int, host: str) -> None:
        """Serve the metrics at http://host:port/metrics from a daemon thread."""
        start_http_server(port, addr=host, registry=self.registry)


class _Cached:
    """A reading taken again only once it is ``every`` seconds old."""

    def __init__(
        self, read: Callable[[], tuple[int, int]], every: float, sink_id: str
    ) -> None:
        self.read = read
        self.every = every
        self.sink_id = sink_id
        self.lock = threading.Lock()
        self.value: tuple[float, float] = (math.nan, math.nan)
        self.taken = -math.inf

    def __call__(self) -> tuple[float, float]:
        with self.lock:
            if time.monotonic() - self.taken >= self.every:
                self.taken = time.monotonic()
                try:
                    self.value = tuple(map(float, self.read()))
                except Exception as e:  # a scrape must not fail: keep the last one
                    log.warning(
                        "sink %s: quarantine counts not read: %s",
                        self.sink_id,
                        first_line(e),
                    )
            return self.value
