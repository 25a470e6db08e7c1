"""How many quarantine entries there are, and where they stand: open, retried,
failed again. The sink instance's metrics follow them, and ``wal-sink status``
shows them.

Counting is cheap: the quarantine table's entries come from its Delta log's file
statistics, the retried and failed ones from a count of retry rows; no data file is
read.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from wal_sink.mysql.retry_state import RetryStates
from wal_sink.wal.quarantine import Quarantine


@dataclass(frozen=True)
class QuarantineCounts:
    entries: int
    retried: int
    """Applied by a retry (resolved)."""
    failed: int
    """Tried by a retry and refused again (still open)."""

    @property
    def open(self) -> int:
        # A crash in a purge between the quarantine and the retry rows can leave
        # retry rows of removed entries for a while (the next purge drops them).
        return max(0, self.entries - self.retried)


def quarantine_counts(
    engine: Engine, quarantine: Quarantine, states: RetryStates
) -> QuarantineCounts:
    """How many entries there are, retried and failed again: no data file read."""
    entries = quarantine.count()
    with engine.connect() as conn:
        counts = states.counts(conn)
    return QuarantineCounts(entries, counts.retried, counts.failed)
