"""One running instance of a sink, without Spark: it holds the lease and applies
staged batches. The streaming job (through ``WalSink``) and the CLI's ``recover`` and
``replay`` share it, so both go through the same committer and recovery code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config, Target
from wal_sink.config.spelling import (
    not_excepted,
    refuse_twins,
)
from wal_sink.errors import ConfigError, WalSinkError, first_line
from wal_sink.metrics import SinkMetrics
from wal_sink.mysql import lease
from wal_sink.mysql.bulk_load import load_table_refused, say_refused
from wal_sink.mysql.engine import make_engine
from wal_sink.mysql.errors import is_transient, mysql_error
from wal_sink.mysql.preflight import preflight
from wal_sink.mysql.table_ddl import table_columns
from wal_sink.mysql.tables import init_db
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.target_profile import read_profile
from wal_sink.mysql.tombstone_checks import refuse_shared
from wal_sink.mysql.tombstones import ensure_side_tables
from wal_sink.mysql.value_fit import Fit, roles_of, say_warnings, table_fit
from wal_sink.mysql.write_checks import check_writes, refuse_lacking
from wal_sink.protocol.committer import CommitResult, Committer
from wal_sink.protocol.parts import SinkParts
from wal_sink.protocol.pipeline import Applied, Pipeline
from wal_sink.protocol.quarantine_counts import quarantine_counts
from wal_sink.protocol.recovery import KnownBatches, known_batches, recover
from wal_sink.protocol.retry import within_budget
from wal_sink.protocol.routed_rows import BatchRows
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.protocol.table_columns import tables_columns
from wal_sink.protocol.target_ddl import WalSchemaDdl, prepare_targets
from wal_sink.wal.conditional_put import check_conditional_put
from wal_sink.wal.ownership import QUARANTINE, WAL, adopt
from wal_sink.wal.storage_errors import storage_error

if TYPE_CHECKING:
    from deltalake import DeltaTable

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
        stop: StopSignal | None = None,
        metrics: SinkMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or SinkMetrics(config.sink.id)
        self._engine = engine
        self.parts = SinkParts.of(config)
        """Assembled once; the committer and recovery receive them from here."""
        self.wal = self.parts.wal
        self.writer = self.parts.writer
        self.quarantine = self.parts.quarantine
        self.tables = self.parts.tables
        self.acks = self.parts.acks
        self.retries = self.parts.retries
        self.stop = stop or StopSignal()
        """Read by the committer, its thread, the outage budget and the follower."""
        self.committer: Committer | None = None
        self._pipeline: Pipeline | None = None
        self._row_appliers: list[BatchRows] = []
        self.known = KnownBatches(None, None)
        """What the WAL and the ack table knew when the lease was taken."""
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
    def high_water(self) -> int | None:
        """Highest batch id staged or applied when the lease was taken."""
        return self.known.newest

    @property
    def epoch(self) -> int | None:
        return self.committer.epoch if self.committer else None

    def expect_columns(self, columns: Iterable[str]) -> None:
        """Say which columns the stream will have, before ``start``: what the target
        cannot take as configured is then refused before the lease is taken."""
        self.stream_columns = tuple(columns)

    def check_columns(self, columns: Iterable[str]) -> None:
        """Refuse (ConfigError) a stream the target cannot take as configured
        (write_checks.py), before anything of it is staged; once per set of
        columns. While MySQL is unreachable the check is left to the committer,
        which makes it again before applying anything."""
        columns = list(columns)
        written = frozenset(columns)
        if written in self._checked_columns:
            return
        try:
            # A table this user cannot see, or that is gone, is said first.
            received = self._received(columns)
            with self.engine.connect() as conn:
                for target in self.config.mysql.targets:
                    refuse_lacking(conn, self.config, target, received[target.table])
                    check_writes(conn, self.config, target, received[target.table])
        except DBAPIError as e:
            if not is_transient(e):
                raise mysql_error(e, sink_id=self.sink_id) from e
            return
        self._checked_columns.add(written)

    def check_types(self, schema: pa.Schema) -> None:
        """Refuse (ConfigError) a key, version, order or route column narrower than
        the stream's type, and say once which other columns would change some
        values of it (set aside at run time): mysql/value_fit.py. The committer
        checks each staged schema the same way."""
        try:
            fits = self.fits(schema)
        except DBAPIError as e:
            if not is_transient(e):
                raise mysql_error(e, sink_id=self.sink_id) from e
            return
        for fit in fits:
            fit.refuse()
            say_warnings(self.sink_id, fit)

    def fits(self, schema: pa.Schema) -> list[Fit]:
        """What each existing target's columns do to values of ``schema`` (a table
        ``mysql.auto_create`` will make takes every value)."""
        with self.engine.connect() as conn:
            targets = [
                t for t in self.config.mysql.targets if table_columns(conn, t.table)
            ]
        received = self._received(schema.names, targets)
        with self.engine.connect() as conn:
            return [
                table_fit(
                    target.table,
                    pa.schema([schema.field(n) for n in received[target.table]]),
                    read_profile(conn, target.table).columns,
                    roles_of(self.config, target),
                )
                for target in targets
            ]

    def check_lease(self, batch_id: int | None = None) -> str | None:
        """Check that this instance still holds the lease: FencedError once a newer
        one took it. While MySQL cannot be reached to say (a transient error), the
        reason it could not, and the caller goes on unconfirmed: nobody can take
        the lease from a MySQL that is down, and were MySQL only cut off from this
        instance, its COMMIT is still fenced (I6). None once confirmed."""
        try:
            with self.engine.connect() as conn:
                lease.check(
                    conn,
                    self.tables.lease,
                    self.sink_id,
                    self.epoch,
                    lock=False,
                    batch_id=batch_id,
                )
        except DBAPIError as e:
            if not is_transient(e):
                raise mysql_error(e, sink_id=self.sink_id, batch_id=batch_id) from e
            return first_line(e.orig)
        return None

    def check_owners(self) -> list[tuple[DeltaTable, str, str]]:
        """Refuse (ConfigError) a WAL or quarantine table another sink owns (I9);
        return the tables found, with their location and kind.

        A quarantine table that cannot be opened now does not stop the sink: rows
        set aside wait in the outbox, and its owner is checked when they are
        written to it."""
        config = self.config
        found = []
        wal = self.wal.table()
        if wal is not None:
            found.append((wal, config.wal_path, WAL))
        try:
            quarantine = self.quarantine.table()
        except ConfigError:
            raise
        except WalSinkError as e:
            log.warning(
                "sink %s: %s; checked again when rows are set aside",
                self.sink_id,
                first_line(e),
            )
            quarantine = None
        if quarantine is not None:
            found.append((quarantine, config.quarantine_path, QUARANTINE))
        return found

    def claim_tables(self) -> None:
        """Before this sink writes its WAL or quarantine table: refuse tables another
        sink owns, then check the object store of both (conditional puts), then
        adopt tables an earlier version left without an owner."""
        found = self.check_owners()
        config = self.config
        check_conditional_put(config.storage, (config.wal_path, config.quarantine_path))
        for table, location, what in found:
            try:
                adopt(table, self.sink_id, location, what)
            except WalSinkError:
                raise
            except Exception as e:
                raise storage_error(e, location, sink_id=self.sink_id) from e

    def start(self) -> Committer:
        """Claim the WAL and quarantine table (nothing is written for a sink that
        does not own them), check the target, create the sink tables if needed and
        take the lease (once per instance). While MySQL is unreachable this waits,
        within the outage budget, instead of failing at once."""
        if self.committer is None:
            refuse_shared(self.config)
            self.claim_tables()
            self.committer = within_budget(
                self._take_lease,
                self.config.mysql,
                "the start-up",
                self.stop,
                self.metrics.retries.inc,
            )
        return self.committer

    def prepare_tables(self, schema: pa.Schema) -> None:
        """Create and evolve the targets for a stream of ``schema`` as
        ``mysql.auto_create`` / ``auto_evolve`` allow, before anything is checked
        or staged (DDL, outside any batch's transaction)."""
        refuse_shared(self.config)
        try:
            prepare_targets(self.engine, self.config, schema)
        except DBAPIError as e:
            raise mysql_error(e, sink_id=self.sink_id) from e

    def _to_create(self) -> set[str]:
        """Targets that do not exist yet and ``mysql.auto_create`` will make from
        the first batch's columns (a follower, which knows no stream before it):
        their checks wait for that batch."""
        if not self.config.mysql.auto_create or self.stream_columns:
            return set()
        with self.engine.connect() as conn:
            missing = {
                t.table
                for t in self.config.mysql.targets
                if not table_columns(conn, t.table)
            }
        for table in sorted(missing):
            log.info(
                "sink %s: table %s is created from the first staged batch's columns",
                self.sink_id,
                table,
            )
        return missing

    def _received(
        self, columns: list[str], targets: list[Target] | None = None
    ) -> dict[str, list[str]]:
        """The columns each target table (of ``targets``, default all) takes of a
        stream of ``columns`` (none when not known), each table reflected (a
        missing or hidden one refused), two equal but for case refused."""
        tables = {
            t.table: reflect_target(self.engine, t.table)
            for t in (self.config.mysql.targets if targets is None else targets)
        }
        if not self.config.mysql.route_column or not columns:
            for name in tables:
                refuse_twins(columns, name)
            return {
                t.table: not_excepted(t, columns)
                for t in self.config.mysql.targets
                if t.table in tables
            }
        have = {name: table.c.keys() for name, table in tables.items()}
        return tables_columns(self.config, have, columns)

    def _take_lease(self) -> Committer:
        try:
            config = self.config
            staged = self.wal.stream_schema()
            if staged is not None:  # refused before anything is written
                self.check_types(staged)
            WalSchemaDdl(self.engine, config, self.wal).ensure()  # the WAL's, if any
            waiting = self._to_create()
            targets = [t for t in config.mysql.targets if t.table not in waiting]
            received = self._received(list(self.stream_columns), targets)
            for target in targets:
                table = reflect_target(self.engine, target.table)
                preflight(self.engine, config, target, table, received[target.table])
            self._checked_columns.add(frozenset(self.stream_columns))
            self._check_bulk_load()
            init_db(self.engine, config.mysql)
            ensure_side_tables(self.engine, config, targets)
            epoch = lease.acquire(self.engine, self.tables.lease, self.sink_id)
            with self.engine.connect() as conn:
                self.known = known_batches(conn, self.acks, self.wal)
                set_aside = self.acks.set_aside(conn)
        except DBAPIError as e:
            raise mysql_error(e, sink_id=self.sink_id) from e
        log.info(
            "sink %s took lease epoch %s (known batches up to %s)",
            self.sink_id,
            epoch,
            self.high_water,
        )
        self.metrics.lease_epoch.set(epoch)
        self.metrics.batches_quarantined.set(len(set_aside))
        self.metrics.follow_quarantine(self._quarantine_counts)
        self.metrics.lease_held.set(1)
        return self.committer_at(epoch)

    def _check_bulk_load(self) -> None:
        """With ``mysql.local_infile``, whether this user may create the load table:
        if not, one warning naming the grant, and the sink upserts with multi-row
        INSERTs as if the option were off."""
        mysql = self.config.mysql
        if not mysql.local_infile:
            return
        refused = load_table_refused(self.engine)
        if refused is not None:
            say_refused(self.sink_id, refused)
            self.config = replace(self.config, mysql=replace(mysql, local_infile=False))

    def committer_at(self, epoch: int) -> Committer:
        """The committer of this sink as the holder of lease ``epoch``: the one
        place it is put together from the sink's parts. ``start`` takes the lease
        first; a committer whose epoch is not the lease's is fenced at COMMIT."""
        rows = self.batch_rows()
        return Committer(self.parts, self.engine, rows, epoch, self.stop, self.metrics)

    def batch_rows(self) -> BatchRows:
        """The row appliers of the sink's tables on this instance's engine;
        ``close`` ends their threads."""
        rows = BatchRows(self.config, self.engine, self.wal)
        self._row_appliers.append(rows)
        return rows

    def start_pipeline(
        self, max_pending: int, on_applied: Callable[[Applied], None]
    ) -> Pipeline:
        """The committer thread behind Spark or the follower (once per instance),
        after ``start``."""
        if self._pipeline is None:
            self._pipeline = Pipeline(
                self.start(),
                self.stop,
                max_pending=max_pending,
                max_transaction_rows=self.config.mysql.max_transaction_rows,
                on_applied=on_applied,
            )
        return self._pipeline

    def _quarantine_counts(self) -> tuple[int, int]:
        """Open and retried quarantine entries (for the metrics)."""
        counts = quarantine_counts(self.engine, self.quarantine, self.retries)
        return counts.open, counts.retried

    def recover(self) -> list[CommitResult]:
        """Apply every staged batch without an ack, in order."""
        return recover(self.start(), self.parts, self.engine)

    def close(self, timeout: float | None = 0) -> bool:
        """End the committer thread after the group in progress, waiting up to
        ``timeout`` seconds (None: no limit) for that group, then the row appliers'
        threads, then release the connections. Returns False, having released
        nothing, while the committer is still in its transaction: nothing is
        disposed under it; it ends with the process (MySQL rolls the transaction
        back, and its batches stay staged without an ack) or is fenced at COMMIT
        by the next instance."""
        if self._pipeline is not None and not self._pipeline.close(timeout):
            log.warning(
                "sink %s: the committer is still in a transaction; its connections "
                "are left to it (what it does not commit stays staged)",
                self.sink_id,
            )
            return False
        for rows in self._row_appliers:
            rows.close()
        if self._engine is not None:
            self._engine.dispose()
        return True
