"""The parts of one sink, assembled in one place from its config: the WAL's reader
and writer, the quarantine table, the sink's MySQL tables and the views of them
(acks, retry rows, the outbox).

A sink instance holds them and hands them to its committer and to recovery, so
every user of a sink's table reaches the same one, named as the config says.
Building them reaches neither MySQL nor storage: ``wal-sink inspect`` needs no
password.
"""

from __future__ import annotations

from dataclasses import dataclass

from wal_sink.config import Config
from wal_sink.mysql.acks import AckTable
from wal_sink.mysql.retry_state import RetryStates
from wal_sink.mysql.tables import SinkTables, sink_tables
from wal_sink.protocol.outbox import Outbox
from wal_sink.wal.quarantine import Quarantine
from wal_sink.wal.reader import WalReader
from wal_sink.wal.writer import WalWriter


@dataclass(frozen=True)
class SinkParts:
    config: Config
    wal: WalReader
    writer: WalWriter
    quarantine: Quarantine
    tables: SinkTables
    acks: AckTable
    retries: RetryStates
    """What ``wal-sink quarantine retry`` did with quarantine entries."""
    outbox: Outbox

    @classmethod
    def of(cls, config: Config) -> SinkParts:
        sink_id = config.sink.id
        tables = sink_tables(config.mysql)
        quarantine = Quarantine(config.quarantine_path, sink_id, config.storage)
        return cls(
            config=config,
            wal=WalReader(config.wal_path, sink_id, config.storage),
            writer=WalWriter(config.wal_path, sink_id, config.storage),
            quarantine=quarantine,
            tables=tables,
            acks=AckTable(tables.ack, sink_id, tables.ack_tables),
            retries=RetryStates(tables.retry, sink_id),
            outbox=Outbox(tables.outbox, sink_id, quarantine),
        )
