"""One running instance of a sink, without Spark: it holds the lease and applies
staged batches. The streaming job (through ``WalSink``) and the CLI's ``recover`` and
``replay`` share it, so both go through the same committer and recovery code.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config
from wal_sink.metrics import SinkMetrics
from wal_sink.mysql import lease
from wal_sink.mysql.acks import AckTable
from wal_sink.mysql.engine import make_engine
from wal_sink.mysql.errors import is_transient, mysql_error
from wal_sink.mysql.preflight import preflight
from wal_sink.mysql.tables import init_db, sink_tables
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.tombstones import Tombstones
from wal_sink.mysql.unique_keys import refuse_unique_conflicts
from wal_sink.protocol.committer import CommitResult, Committer
from wal_sink.protocol.recovery import high_water, recover
from wal_sink.protocol.retry import within_budget
from wal_sink.wal.conditional_put import check_conditional_put
from wal_sink.wal.reader import WalReader
from wal_sink.wal.writer import WalWriter

log = logging.getLogger(__name__)


class SinkInstance:
    """Taking the lease (``start``) fences every earlier instance of the sink (I6).

    MySQL is reached only when needed: reading the WAL alone (``wal-sink inspect``)
    asks for no password.
    """

    def __init__(
        self,
        config: Config,
        engine: Engine | None = None,
        *,
        stop: threading.Event | None = None,
        metrics: SinkMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or SinkMetrics(config.sink.id)
        self._engine = engine
        self.wal = WalReader(config.wal_path, config.storage, config.sink.id)
        self.writer = WalWriter(config.wal_path, config.sink.id, config.storage)
        self.tables = sink_tables(config.mysql)
        self.acks = AckTable(self.tables.ack, config.sink.id)
        self.stop = stop or threading.Event()
        """Set to give up waiting on MySQL at once (a second SIGTERM)."""
        self.committer: Committer | None = None
        self.high_water: int | None = None
        """Highest batch id staged or applied when the lease was taken."""
        self.stream_columns: tuple[str, ...] = ()
        """Columns the stream writes, when known before it runs (``expect_columns``)."""
        self._checked_columns: set[frozenset[str]] = set()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = make_engine(self.config.mysql)
        return self._engine

    @property
    def sink_id(self) -> str:
        return self.config.sink.id

    @property
    def epoch(self) -> int | None:
        return self.committer.epoch if self.committer else None

    def expect_columns(self, columns: Iterable[str]) -> None:
        """Say which columns the stream will write, before ``start``: a unique index
        of the target they reach is then refused before the lease is taken."""
        self.stream_columns = tuple(self._written(columns))

    def check_columns(self, columns: Iterable[str]) -> None:
        """Refuse (ConfigError) a stream whose columns reach another row through a
        unique index besides mysql.key, before anything of it is staged; once per
        set of columns. While MySQL is unreachable the check is left to the
        committer, which makes it again before applying anything."""
        written = self._written(columns)
        if written in self._checked_columns:
            return
        try:
            with self.engine.connect() as conn:
                refuse_unique_conflicts(
                    conn, self.config, self.config.mysql.table, written
                )
        except DBAPIError as e:
            if not is_transient(e):
                raise mysql_error(e, sink_id=self.sink_id) from e
            return
        self._checked_columns.add(written)

    def _written(self, columns: Iterable[str]) -> frozenset[str]:
        cdc = self.config.cdc
        return frozenset(c for c in columns if not cdc or c != cdc.op_column)

    def start(self) -> Committer:
        """Check the target, create the sink tables if needed and take the lease
        (once per instance). While MySQL is unreachable this waits, within the
        outage budget, instead of failing at once."""
        if self.committer is None:
            check_conditional_put(
                self.config.storage, (self.config.wal_path, self.config.quarantine_path)
            )
            self.committer = within_budget(
                self._take_lease,
                self.config.mysql,
                "the start-up",
                self.stop,
                self.metrics.retries.inc,
            )
        return self.committer

    def _take_lease(self) -> Committer:
        try:
            target = reflect_target(self.engine, self.config.mysql.table)
            preflight(self.engine, self.config, target, self.stream_columns)
            self._checked_columns.add(frozenset(self.stream_columns))
            init_db(self.engine, self.config.mysql)
            if self.config.cdc and self.config.mysql.version_column:
                Tombstones(self.config).ensure(self.engine)
            epoch = lease.acquire(self.engine, self.tables.lease, self.sink_id)
            with self.engine.connect() as conn:
                self.high_water = high_water(conn, self.acks, self.wal)
        except DBAPIError as e:
            raise mysql_error(e, sink_id=self.sink_id) from e
        log.info(
            "sink %s took lease epoch %s (known batches up to %s)",
            self.sink_id,
            epoch,
            self.high_water,
        )
        self.metrics.lease_epoch.set(epoch)
        self.metrics.lease_held.set(1)
        return Committer(
            self.config, self.engine, self.wal, epoch, self.stop, self.metrics
        )

    def recover(self) -> list[CommitResult]:
        """Apply every staged batch without an ack, in order."""
        return recover(self.start())

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
