"""Fencing of the data source's staging (I6), kept in the WAL itself: only the query
run that took the WAL last stages into it.

Each run of a streaming query through ``format("wal_sink")`` has a token of its
own (made once per run on the driver). Its first stage commit takes the WAL: the
WAL's writer epoch goes up by one, recorded as two Delta application transactions,
``<sink>:writer`` (the current epoch) and ``<sink>:run:<token>`` (this run's epoch).
Every later stage commit of the run checks, on a fresh snapshot, that the run's
epoch is still the current one and carries ``<sink>:writer`` again; a concurrent
commit that takes the WAL also writes ``<sink>:writer``, so Delta's conflict check
refuses one of the two and the loser re-checks on a fresh snapshot. A run whose
epoch is no longer current (a zombie: an older query still running elsewhere with
the same config) gets ``FencedError`` and stages nothing. No MySQL is involved: the
Spark side needs no password.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltalake import DeltaTable, Transaction

from wal_sink.errors import FencedError


@dataclass(frozen=True)
class WriterRun:
    sink_id: str
    token: str
    """Unique per query run (``':'`` never appears in a sink id)."""

    @property
    def writer_app(self) -> str:
        return f"{self.sink_id}:writer"

    @property
    def run_app(self) -> str:
        return f"{self.sink_id}:run:{self.token}"

    def epoch(self, table: DeltaTable | None) -> int | None:
        """This run's writer epoch in ``table``'s snapshot; None before it took the
        WAL."""
        return None if table is None else table.transaction_version(self.run_app)

    def transactions(
        self, table: DeltaTable | None, batch_id: int | None = None
    ) -> list[Transaction]:
        """The application transactions a stage commit of this run carries on top
        of the snapshot ``table`` (None: the WAL does not exist yet).

        Raises:
            FencedError: a newer run took the WAL since this run did.
        """
        current = None if table is None else table.transaction_version(self.writer_app)
        mine = self.epoch(table)
        if mine is None:
            taken = (current or 0) + 1
            return [
                Transaction(app_id=self.writer_app, version=taken),
                Transaction(app_id=self.run_app, version=taken),
            ]
        if mine != current:
            raise FencedError(
                f"writer epoch {mine} of this query run is no longer current "
                f"(the WAL's: {current}); a newer run of this sink took over "
                "staging, so this one stops",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )
        return [Transaction(app_id=self.writer_app, version=current)]
