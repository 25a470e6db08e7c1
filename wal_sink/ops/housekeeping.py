"""Housekeeping: ``wal-sink purge`` run on a schedule by the process that commits
(the job with ``job.writer = "foreach_batch"``, and ``wal-sink follow``), with the
retentions of the ``[housekeeping]`` section.

Every ``interval`` a thread of its own selects and carries out one purge
(purge.py's ``select_purge`` and ``run_purge``, in their order): tombstones and
history events by their own retentions, quarantine entries, WAL batches acked
longer than ``acked_batches_older_than`` ago and their ack rows but the newest,
then vacuum. The run has a sink instance of its own (its own MySQL connections and
WAL snapshot), so it is never part of a batch's transaction; what it removes is
only ever acked, which a batch being applied is not yet. A killed run is safe as a
killed ``wal-sink purge`` is: batches leave the WAL before their ack rows.

Each run logs one line and counts in ``wal_sink_housekeeping_runs`` (by outcome)
and ``wal_sink_housekeeping_removed`` (by what); a failed run logs its first line
and is tried again at the next interval, without stopping the sink.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from wal_sink.config import Config, HousekeepingConfig
from wal_sink.errors import first_line
from wal_sink.metrics import SinkMetrics
from wal_sink.ops.purge import Purge, PurgeReport, run_purge, select_purge
from wal_sink.protocol.sink_instance import SinkInstance

log = logging.getLogger("wal_sink.housekeeping")


class Housekeeping:
    """The scheduled purges of one sink, with its ``[housekeeping]`` settings."""

    def __init__(
        self, config: Config, settings: HousekeepingConfig, metrics: SinkMetrics
    ) -> None:
        self.config = config
        self.settings = settings
        self.metrics = metrics
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            name=f"wal-sink-housekeeping-{config.sink.id}",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No further run; waits for the one in progress to end."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self.settings.interval):
            self.run_once()

    def run_once(self) -> PurgeReport | None:
        """One scheduled purge; None when it failed (logged and counted)."""
        sink_id = self.config.sink.id
        try:
            sink = SinkInstance(self.config)
            try:
                selected = select_purge(
                    sink,
                    older_than=self.settings.acked_batches_older_than,
                    quarantine_older_than=self.settings.quarantine_older_than,
                    retain=f"{self.settings.vacuum_retain:g} s",
                    retain_seconds=(
                        self.settings.vacuum_retain if self.settings.vacuum else None
                    ),
                )
                report = run_purge(sink, selected)
            finally:
                sink.close()
        except Exception as e:  # tried again at the next interval
            self.metrics.housekeeping_runs.labels(sink_id, "failed").inc()
            log.warning(
                "sink %s: housekeeping failed (tried again in %g s): %s",
                sink_id,
                self.settings.interval,
                first_line(e),
            )
            return None
        removed = _removed(selected, report)
        self.metrics.housekeeping_runs.labels(sink_id, "ok").inc()
        for what, count in removed.items():
            self.metrics.housekeeping_removed.labels(sink_id, what).inc(count)
        log.info(
            "sink %s: housekeeping removed %s",
            sink_id,
            " ".join(f"{what}={count}" for what, count in removed.items()),
        )
        return report


def _removed(selected: Purge, report: PurgeReport) -> dict[str, int]:
    """What one purge removed, by the ``what`` label of the metric."""
    batches = selected.batches
    return {
        "batches": len(batches.remove) if batches is not None else 0,
        "ack_rows": report.ack_rows or 0,
        "quarantine_entries": selected.quarantine.entries,
        "tombstones": report.tombstones or 0,
        "history_events": sum(f.events for f in report.folded),
        "vacuum_files": report.vacuum.files if report.vacuum is not None else 0,
    }


@contextmanager
def scheduled(config: Config, metrics: SinkMetrics) -> Iterator[Housekeeping | None]:
    """Scheduled purges while the block runs, when ``[housekeeping]`` is set."""
    settings = config.housekeeping
    if settings is None:
        yield None
        return
    housekeeping = Housekeeping(config, settings, metrics)
    housekeeping.start()
    log.info("sink %s: housekeeping every %g s", config.sink.id, settings.interval)
    try:
        yield housekeeping
    finally:
        housekeeping.stop()
