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

Each stage commit also names the checkpoint it came from, when the run knows its
query id (spark_checkpoint.py): ``<sink>:checkpoint:<id>`` and ``<sink>:checkpointed``
at the batch id. Spark delivers a staged batch again only from the checkpoint that
planned it; a new checkpoint's batch 0 after exactly one staged batch has the same
id as a re-delivery, and only these tell the two apart (I7).
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
    checkpoint_id: str | None = None
    """The query id of the run's checkpoint; None when it could not be read."""

    @property
    def writer_app(self) -> str:
        return f"{self.sink_id}:writer"

    @property
    def run_app(self) -> str:
        return f"{self.sink_id}:run:{self.token}"

    @property
    def checkpoint_app(self) -> str | None:
        if self.checkpoint_id is None:
            return None
        return f"{self.sink_id}:checkpoint:{self.checkpoint_id}"

    @property
    def checkpointed_app(self) -> str:
        return f"{self.sink_id}:checkpointed"

    def staged_by_this_checkpoint(
        self, table: DeltaTable, batch_id: int
    ) -> bool | None:
        """Whether this run's checkpoint staged ``batch_id``, which ``table`` holds;
        None when that cannot be told: this run's checkpoint id is unknown, or the
        batch was staged without one (before the WAL recorded them)."""
        if self.checkpoint_app is None:
            return None
        if table.transaction_version(self.checkpointed_app) != batch_id:
            return None
        return table.transaction_version(self.checkpoint_app) == batch_id

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
        named = self._checkpoint_transactions(batch_id)
        if mine is None:
            taken = (current or 0) + 1
            return [
                Transaction(app_id=self.writer_app, version=taken),
                Transaction(app_id=self.run_app, version=taken),
                *named,
            ]
        if mine != current:
            raise FencedError(
                f"writer epoch {mine} of this query run is no longer current "
                f"(the WAL's: {current}); a newer run of this sink took over "
                "staging, so this one stops",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )
        return [Transaction(app_id=self.writer_app, version=current), *named]

    def _checkpoint_transactions(self, batch_id: int | None) -> list[Transaction]:
        if self.checkpoint_app is None or batch_id is None:
            return []
        return [
            Transaction(app_id=self.checkpoint_app, version=batch_id),
            Transaction(app_id=self.checkpointed_app, version=batch_id),
        ]
