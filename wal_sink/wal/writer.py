"""Committing a staged batch's files to the WAL with delta-rs (Step 1's second half).

Executors have written the batch's Parquet files into a directory of their own
(``_wal_batch_id=N/<attempt>/``); this module turns exactly those files into one
Delta commit that also carries Delta's application transaction (app id = sink id,
version = batch id). That version is what says "batch N is staged": a batch whose
version the WAL already records is never committed again, so what was staged first
stands (I4) and a later attempt's files are left for vacuum.

delta-rs does not stop the same (app id, version) being committed twice in a row, so
the version is checked against a fresh snapshot before each commit; a concurrent
commit with the same app id is refused by delta-rs's conflict checker, and any other
conflict (a purge committing at the same moment) is retried on a fresh snapshot.
A WAL another sink owns is never committed to (I9).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import pyarrow as pa
from deltalake import (
    CommitProperties,
    DeltaTable,
    Schema,
    TableFeatures,
    Transaction,
)
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.transaction import AddAction

from wal_sink.errors import TerminalError, TransientError
from wal_sink.storage import Storage
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN, delta_table, table_exists
from wal_sink.wal.ownership import WAL, check_owner, owned_configuration
from wal_sink.wal.storage_errors import storage_error
from wal_sink.wal.writer_run import WriterRun

log = logging.getLogger(__name__)

# Table properties set when the first stage creates the WAL, besides its owner's
# sink id (ownership.py). Deletion vectors would
# hide deleted rows from readers that only list files; the WAL deletes whole
# partitions anyway. Statistics: ``_wal_seq`` only, whose minimum orders a batch's
# files (reader.py); readers need no other.
WAL_TABLE_PROPERTIES = {
    "delta.enableDeletionVectors": "false",
    "delta.dataSkippingStatsColumns": SEQ_COLUMN,
}
COMMIT_ATTEMPTS = 10


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file an attempt wrote, described as its Delta add action needs."""

    path: str
    """Relative to the table's root, unencoded."""
    size: int
    modified_ms: int
    rows: int
    min_seq: int | None
    max_seq: int | None

    def add_action(self, batch_id: int) -> AddAction:
        stats: dict[str, object] = {"numRecords": self.rows}
        if self.rows and self.min_seq is not None:
            stats.update(
                minValues={SEQ_COLUMN: self.min_seq},
                maxValues={SEQ_COLUMN: self.max_seq},
                nullCount={SEQ_COLUMN: 0},
            )
        return AddAction(
            path=self.path,
            size=self.size,
            partition_values={BATCH_COLUMN: str(batch_id)},
            modification_time=self.modified_ms,
            data_change=True,
            stats=json.dumps(stats),
        )


class WalWriter:
    """The one writer of a sink's WAL table; keeps a delta-rs handle between commits."""

    def __init__(self, location: str, sink_id: str, storage: Storage = Storage()):
        self.location = location
        self.sink_id = sink_id
        self.storage = storage
        self._table: DeltaTable | None = None

    def _fresh(self) -> DeltaTable | None:
        """The newest snapshot (a handle does not advance by its own commits); a WAL
        another sink owns is refused (ConfigError, I9)."""
        try:
            if self._table is None:
                self._table = delta_table(self.location, self.storage)
            else:
                self._table.update_incremental()
        except TableNotFoundError:
            return None
        except Exception as e:
            raise storage_error(e, self.location, sink_id=self.sink_id) from e
        check_owner(self._table, self.sink_id, self.location, WAL)
        return self._table

    def staged_version(self) -> int | None:
        """Highest batch id staged so far (Delta's app transaction for the sink)."""
        table = self._fresh()
        return None if table is None else table.transaction_version(self.sink_id)

    def snapshot(self) -> DeltaTable | None:
        """The newest snapshot, or None while nothing was ever staged."""
        return self._fresh()

    def commit(
        self,
        batch_id: int,
        files: list[WrittenFile],
        schema: pa.Schema,
        run: WriterRun | None = None,
    ) -> bool:
        """Commit exactly ``files`` as batch ``batch_id`` in one Delta commit.

        ``schema`` is the files' Arrow schema (without the partition column). A batch
        may add nullable columns to the WAL's schema, in the same commit; a column
        that is missing or changes type is refused, naming it. With ``run`` (the
        data source) the commit also proves, on the same snapshot, that this query
        run still holds the WAL (writer_run.py), or raises FencedError.

        Returns:
            True when this call staged the batch; False when the WAL already had it
            (this attempt's files are then left for vacuum).
        """
        for path in (f.path for f in files):
            if not path.startswith(f"{BATCH_COLUMN}={batch_id}/"):
                raise ValueError(f"{path} is outside batch {batch_id}'s partition")
        actions = [f.add_action(batch_id) for f in files]
        wanted = table_schema(schema)
        for _ in range(COMMIT_ATTEMPTS):
            table = self._fresh()
            claims = run.transactions(table, batch_id) if run else []
            properties = CommitProperties(
                app_transactions=[
                    Transaction(app_id=self.sink_id, version=batch_id),
                    *claims,
                ],
                custom_metadata={"wal_sink.batch_id": str(batch_id)},
            )
            try:
                if table is None:
                    self._create(wanted)
                    continue  # then commit the batch to it
                staged = table.transaction_version(self.sink_id)
                if staged is not None and staged >= batch_id:
                    return False
                have = table.schema().fields
                merged = evolved_schema(table.schema(), wanted, self.sink_id, batch_id)
                if merged is None:
                    table.create_write_transaction(
                        actions,
                        mode="append",
                        schema=table.schema(),
                        partition_by=[BATCH_COLUMN],
                        commit_properties=properties,
                    )
                else:
                    if _lacks_timestamp_ntz(table, merged):
                        # A commit of its own, before the batch's: delta-rs refuses
                        # a TIMESTAMP_NTZ column in a table without the feature.
                        table.alter.add_feature(
                            TableFeatures.TimestampWithoutTimezone,
                            allow_protocol_versions_increase=True,
                        )
                        continue
                    # An append ignores a new schema; an overwrite of this batch's
                    # own partition (empty: the batch is not staged) carries it.
                    table.create_write_transaction(
                        actions,
                        mode="overwrite",
                        schema=merged,
                        partition_by=[BATCH_COLUMN],
                        partition_filters=[(BATCH_COLUMN, "=", str(batch_id))],
                        commit_properties=properties,
                    )
                    log.info(
                        "sink %s batch %s: the WAL's schema gains column(s) %s",
                        self.sink_id,
                        batch_id,
                        ", ".join(f.name for f in merged.fields[len(have) :]),
                    )
                return True
            except CommitFailedError as e:
                log.info("sink %s batch %s: %s; retrying", self.sink_id, batch_id, e)
            except _CreateRace:
                self._table = None
            except (TerminalError, TransientError):
                raise
            except Exception as e:
                raise storage_error(
                    e, self.location, sink_id=self.sink_id, batch_id=batch_id
                ) from e
        raise TransientError(
            f"could not commit to {self.location} after {COMMIT_ATTEMPTS} conflicts",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    def _create(self, schema: Schema) -> None:
        """Create the WAL, owned by this sink, without a batch: delta-rs takes a
        table property of its own only when creating a table this way."""
        try:
            DeltaTable.create(
                self.location,
                schema,
                mode="error",
                partition_by=[BATCH_COLUMN],
                configuration={
                    **WAL_TABLE_PROPERTIES,
                    **owned_configuration(self.sink_id),
                },
                storage_options=self.storage.delta_options or None,
                raise_if_key_not_exists=False,
            )
        except Exception as e:
            if table_exists(self.location, self.storage):
                raise _CreateRace() from e
            raise


class _CreateRace(Exception):
    """Another process created the table first: commit to it (if it is ours)."""


def table_schema(files: pa.Schema) -> Schema:
    """The WAL's Delta schema for files of this schema: every column nullable (earlier
    and later batches may lack a column), the batch id as partition column last."""
    fields = [f.with_nullable(True) for f in files if f.name != BATCH_COLUMN]
    fields.append(pa.field(BATCH_COLUMN, pa.int64()))
    return Schema.from_arrow(pa.schema(fields))


def evolved_schema(
    current: Schema, wanted: Schema, sink_id: str, batch_id: int
) -> Schema | None:
    """None when ``wanted`` fits the WAL as it is; the WAL's schema with the new
    columns appended when a batch adds columns; TerminalError otherwise."""
    have = {f.name: f for f in current.fields}
    new = {f.name: f for f in wanted.fields}
    for name, field_ in have.items():
        if name not in new:
            raise TerminalError(
                f"stream column {name!r} is missing from this batch but earlier "
                "batches in the WAL have it; keep the column (NULL if need be), or "
                "use a new sink.id",
                sink_id=sink_id,
                batch_id=batch_id,
            )
        if new[name].type != field_.type:
            raise TerminalError(
                f"stream column {name!r} changes type from {_type(field_)} to "
                f"{_type(new[name])}; the WAL keeps one type per column. Cast it in "
                "[transform], or use a new sink.id",
                sink_id=sink_id,
                batch_id=batch_id,
            )
    added = [f for name, f in new.items() if name not in have]
    if not added:
        return None
    return Schema([*current.fields, *added])


def _lacks_timestamp_ntz(table: DeltaTable, schema: Schema) -> bool:
    """True when ``schema`` has a TIMESTAMP_NTZ column (at any depth) but the table's
    protocol does not have the ``timestampNtz`` feature yet."""
    features = table.protocol().reader_features or []
    return '"timestamp_ntz"' in schema.to_json() and "timestampNtz" not in features


def _type(field_) -> str:
    text = str(field_.type)
    return text.split('"')[1] if '"' in text else text
