"""One running instance of a sink, without Spark: it holds the lease and applies
staged batches. The streaming job (through ``WalSink``) and the CLI's ``recover`` and
``replay`` share it, so both go through the same committer and recovery code.
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from wal_sink import lease
from wal_sink.committer import CommitResult, Committer, reflect_target
from wal_sink.config import Config
from wal_sink.db import make_engine
from wal_sink.preflight import preflight
from wal_sink.recovery import high_water, recover
from wal_sink.schema import init_db, sink_tables
from wal_sink.wal import WalReader
from wal_sink.wal_writer import WalWriter

log = logging.getLogger(__name__)


class SinkInstance:
    """Taking the lease (``start``) fences every earlier instance of the sink (I6)."""

    def __init__(self, config: Config, engine: Engine | None = None) -> None:
        self.config = config
        self.engine = engine or make_engine(config.mysql)
        self.wal = WalReader(config.wal_path, config.storage)
        self.writer = WalWriter(config.wal_path, config.sink.id, config.storage)
        self.ack, self.lease = sink_tables(config.mysql)
        self.committer: Committer | None = None
        self.high_water: int | None = None
        """Highest batch id staged or applied when the lease was taken."""

    @property
    def sink_id(self) -> str:
        return self.config.sink.id

    @property
    def epoch(self) -> int | None:
        return self.committer.epoch if self.committer else None

    def start(self) -> Committer:
        """Check the target, create the sink tables if needed and take the lease
        (once per instance)."""
        if self.committer is None:
            preflight(
                self.engine,
                self.config,
                reflect_target(self.engine, self.config.mysql.table),
            )
            init_db(self.engine, self.config.mysql)
            epoch = lease.acquire(self.engine, self.lease, self.sink_id)
            committer = Committer(self.config, self.engine, self.wal, epoch)
            self.high_water = high_water(self.engine, self.ack, self.wal, self.sink_id)
            self.committer = committer
            log.info(
                "sink %s took lease epoch %s (known batches up to %s)",
                self.sink_id,
                epoch,
                self.high_water,
            )
        return self.committer

    def recover(self) -> list[CommitResult]:
        """Apply every staged batch without an ack, in order."""
        return recover(self.start())

    def close(self) -> None:
        self.engine.dispose()
