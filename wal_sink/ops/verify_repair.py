"""``wal-sink verify --against SOURCE --repair``: the differences verify found,
made one corrective batch (a repair) and applied exactly once.

A repair is staged like a batch, into a Delta table of its own beside the WAL
(``<wal.path>_repairs``: not inside the WAL's directory, whose vacuum would remove
files it does not know), owned by the sink (I9), written by the WAL's own writer:
its application transaction (app id = the sink id) records repair id R, so a
repair is staged once and never changes (I4). Repairs have ids of their own:
staged as a WAL batch, a repair would take the id of Spark's next batch and that
batch would then look staged already (I1).

Each row of a repair names its table, ``upsert`` (a key missing in MySQL or
different: the key and every compared column, as the source has them) or
``delete`` (a key extra in MySQL), and its values as JSON (``_encoded``).

Applying repair R is one MySQL transaction under the sink's lease (the caller took
it, fencing a running job, as ``replay`` does): lock the lease row and check the
epoch (I6), insert the ack row of R (sink id ``<sink>:repair``; its primary key
stops a second apply), write the rows — every column as the source has it, the
version column as one more column, no merge mode (a repair never touches ``add``
columns: verify refuses to compare them) — fill in the ack's counts, COMMIT.
Killed before COMMIT, nothing is applied and R stays staged without an ack: the
next repair applies it first. Completed or rolled back, never half applied.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from wal_sink import faults
from wal_sink.errors import ConfigError, TransientError
from wal_sink.mysql.acks import AckTable
from wal_sink.mysql.errors import mysql_error
from wal_sink.mysql.lease import check as check_lease
from wal_sink.mysql.target import reflect_target
from wal_sink.mysql.upsert import build_delete, build_upsert
from wal_sink.ops.verify_against import CHUNK_ROWS, TableReport, verify_against
from wal_sink.ops.verify_read import Source
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.wal.reader import WalReader
from wal_sink.wal.task_files import file_schema, write_task_file
from wal_sink.wal.writer import WalWriter

log = logging.getLogger(__name__)

LOCATION_SUFFIX = "_repairs"
ACK_SUFFIX = ":repair"
"""The repairs' ack rows are the sink's id with this suffix: the books, status and
purge of the sink's batches never see them."""
ACK_ID_LENGTH = 128
"""The ack table's sink_id column."""
UPSERT = "upsert"
DELETE = "delete"
SCHEMA = pa.schema(
    [
        pa.field("table_name", pa.string()),
        pa.field("op", pa.string()),
        pa.field("row", pa.string()),
    ]
)
READ_ROWS = 10_000


@dataclass(frozen=True)
class RepairResult:
    repair_id: int
    applied: bool
    """False when the repair had an ack row already (nothing done)."""
    upserted: dict[str, int]
    """Rows written, per table."""
    deleted: dict[str, int]
    """Rows deleted, per table."""
    seconds: float = 0.0

    def line(self) -> str:
        if not self.applied:
            return f"repair {self.repair_id}: applied already"
        tables = sorted({*self.upserted, *self.deleted})
        done = "; ".join(
            f"{t}: {self.upserted.get(t, 0)} upserted, {self.deleted.get(t, 0)} deleted"
            for t in tables
        )
        return f"repair {self.repair_id} applied ({done}) in {self.seconds:.1f} s"


@dataclass(frozen=True)
class RepairCounts:
    applied: int
    pending: list[int]
    """Staged repairs without an ack: the next repair applies them first."""


class Repairs:
    """The repairs of one sink: staged beside its WAL, acked in its ack table."""

    def __init__(self, sink: SinkInstance, *, writing: bool = True) -> None:
        """``writing``: to stage or apply (refused for a sink id too long for the
        repairs' ack rows); False to read the counts."""
        config = sink.config
        ack_id = sink.sink_id + ACK_SUFFIX
        if writing and len(ack_id) > ACK_ID_LENGTH:
            raise ConfigError(
                f"--repair: the sink id is longer than "
                f"{ACK_ID_LENGTH - len(ACK_SUFFIX)} characters, too long for the "
                f"ack rows of its repairs ({ack_id!r})",
                sink_id=sink.sink_id,
            )
        self.sink = sink
        self.location = config.wal_path.rstrip("/") + LOCATION_SUFFIX
        self.reader = WalReader(self.location, sink.sink_id, config.storage)
        self.writer = WalWriter(self.location, sink.sink_id, config.storage)
        self.acks = AckTable(sink.tables.ack, ack_id)

    def counts(self, conn: Connection) -> RepairCounts:
        """How many repairs are applied, and which wait (a plain read)."""
        self.reader.refresh()
        staged = sorted(self.reader.staged_batches())
        if not staged:
            return RepairCounts(0, [])
        acked = self.acks.acked_between(conn, staged[0], staged[-1])
        return RepairCounts(len(acked), [r for r in staged if r not in acked])

    def stage(self, reports: list[TableReport]) -> int | None:
        """Stage the reports' upserts and deletes as the next repair; its id, or
        None when there is nothing to repair (nothing is staged)."""
        rows = [
            (r.table, op, _encoded(values))
            for r in reports
            for op, found in ((UPSERT, r.upserts), (DELETE, r.deletes))
            for values in found
        ]
        if not rows:
            return None
        repair_id = (self.writer.staged_version() or 0) + 1
        names, ops, values = (list(c) for c in zip(*rows, strict=True))
        batch = pa.record_batch([names, ops, values], schema=SCHEMA)
        written = write_task_file(
            self.location,
            self.sink.config.storage,
            repair_id,
            uuid.uuid4().hex,
            0,
            [batch],
            SCHEMA,
        )
        assert written is not None  # rows were given
        if not self.writer.commit(repair_id, [written.file], file_schema(SCHEMA)):
            raise TransientError(
                f"repair {repair_id} was staged by another process at the same "
                "time; run verify --repair again",
                sink_id=self.sink.sink_id,
            )
        log.info(
            "sink %s: repair %s staged at %s (%s row(s))",
            self.sink.sink_id,
            repair_id,
            self.location,
            len(rows),
        )
        return repair_id

    def apply(self, repair_id: int, epoch: int) -> RepairResult:
        """Apply staged repair ``repair_id`` exactly once, with its ack row, in one
        transaction, as the holder of lease ``epoch``."""
        started = time.monotonic()
        sink = self.sink
        self.reader.refresh()
        batch = self.reader.staged_batch(repair_id)
        if batch is None:
            raise ConfigError(
                f"repair {repair_id} is not staged in {self.location}",
                sink_id=sink.sink_id,
            )
        rows = [
            row
            for chunk in self.reader.read_batch(batch, READ_ROWS)
            for row in chunk.to_pylist()
        ]
        targets = {t.table: t for t in sink.config.mysql.targets}
        unknown = sorted({r["table_name"] for r in rows} - set(targets))
        if unknown:
            raise ConfigError(
                f"repair {repair_id} writes table(s) {', '.join(unknown)} the sink "
                "no longer writes; it is not applied",
                sink_id=sink.sink_id,
            )
        tables = {
            n: reflect_target(sink.engine, n) for n in {r["table_name"] for r in rows}
        }
        upserted: Counter[str] = Counter()
        deleted: Counter[str] = Counter()
        try:
            with sink.engine.connect() as conn, conn.begin():
                check_lease(conn, sink.tables.lease, sink.sink_id, epoch, lock=True)
                if not self.acks.insert(conn, repair_id, epoch, uuid.uuid4().hex):
                    log.info(
                        "sink %s: repair %s applied already", sink.sink_id, repair_id
                    )
                    return RepairResult(repair_id, False, {}, {})
                for name, table in tables.items():
                    # Every column as the source has it: no merge mode, no guard.
                    as_is = replace(
                        targets[name],
                        merge={},
                        version_column=None,
                        ignore_null_updates=False,
                    )
                    mine = [r for r in rows if r["table_name"] == name]
                    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
                    for r in mine:
                        if r["op"] == UPSERT:
                            values = _decoded(r["row"])
                            by_columns.setdefault(tuple(values), []).append(values)
                    for columns, group in by_columns.items():
                        conn.execute(build_upsert(table, columns, as_is), group)
                        upserted[name] += len(group)
                    keys = [_decoded(r["row"]) for r in mine if r["op"] == DELETE]
                    if keys:
                        done = conn.execute(build_delete(table, as_is), keys)
                        deleted[name] += done.rowcount
                self.acks.complete(
                    conn, repair_id, sum(upserted.values()), sum(deleted.values()), 0
                )
                faults.hit("repair.before_commit", repair_id)
        except DBAPIError as e:
            raise mysql_error(e, sink_id=sink.sink_id) from e
        result = RepairResult(
            repair_id, True, dict(upserted), dict(deleted), time.monotonic() - started
        )
        sink.metrics.repairs_applied.inc()
        log.info("sink %s: %s", sink.sink_id, result.line())
        return result


def run_repair(
    sink: SinkInstance,
    source: Source,
    *,
    table: str | None = None,
    columns: tuple[str, ...] = (),
    where: str | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> tuple[list[RepairResult], list[TableReport]]:
    """Take the lease (fencing a running job of the sink), apply the sink's staged
    batches without an ack (a repair never runs ahead of them, I8: one applied
    after it would undo it) and the repairs staged and not applied yet, in order,
    then compare again, under the lease, and stage and apply what still differs
    as the next repair. Returns the repairs applied and the comparison the last
    one was made of."""
    repairs = Repairs(sink)
    sink.recover()
    epoch = sink.start().epoch
    done = complete_pending(sink, repairs)
    reports = verify_against(
        sink,
        source,
        table=table,
        columns=columns,
        where=where,
        chunk_rows=chunk_rows,
        with_rows=True,
    )
    repair_id = repairs.stage(reports)
    if repair_id is not None:
        done.append(repairs.apply(repair_id, epoch))
    return done, reports


def complete_pending(
    sink: SinkInstance, repairs: Repairs | None = None
) -> list[RepairResult]:
    """Apply the repairs staged and not applied (stopped half-way), in order, as
    the holder of the sink's lease (taken if need be): ``recover`` and every
    repair do this first."""
    repairs = repairs or Repairs(sink, writing=False)
    with sink.engine.connect() as conn:
        pending = repairs.counts(conn).pending
    if not pending:
        return []
    epoch = sink.start().epoch
    return [repairs.apply(r, epoch) for r in pending]


def _encoded(values: dict[str, Any]) -> str:
    """A row's values as JSON; what JSON has no type for, tagged."""

    def one(v: Any) -> Any:
        if isinstance(v, Decimal):
            return {"decimal": str(v)}
        if isinstance(v, datetime):
            return {"datetime": v.isoformat(sep=" ")}
        if isinstance(v, date):
            return {"date": v.isoformat()}
        if isinstance(v, clock_time):
            return {"time": v.isoformat()}
        if isinstance(v, timedelta):
            return {"seconds": v.total_seconds()}
        if isinstance(v, (bytes, bytearray)):
            return {"base64": base64.b64encode(v).decode()}
        if isinstance(v, (dict, list)):
            return {"json": json.dumps(v, sort_keys=True)}
        return v

    return json.dumps({k: one(v) for k, v in values.items()})


def _decoded(text: str) -> dict[str, Any]:
    """``_encoded``'s row, as values to bind."""

    def one(v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        ((tag, value),) = v.items()
        if tag == "decimal":
            return Decimal(value)
        if tag == "datetime":
            return datetime.fromisoformat(value)
        if tag == "date":
            return date.fromisoformat(value)
        if tag == "time":
            return clock_time.fromisoformat(value)
        if tag == "seconds":
            return timedelta(seconds=value)
        if tag == "base64":
            return base64.b64decode(value)
        return value  # "json": the text MySQL parses

    return {k: one(v) for k, v in json.loads(text).items()}
