"""The real sink, driven in process as its job and CLI drive it: batches staged into
the WAL the way the driver stages a small batch (one Parquet file, one delta-rs
commit), applied by the committer of a long-running sink instance (the job), and
the operators' commands run through the library functions the CLI calls, each in
a sink instance of its own.

A command that takes the lease (recover, replay, quarantine-batch) fences the job:
the job instance is dropped after it, and the next apply starts a new one (a
restart). A crash is a fault injected at a commit point (``WAL_SINK_FAULT``), the
instance dropped, and a new one taking the lease and recovering; each fault must
fire, or the step fails.

Records are the model's, named as the table names its columns; a sink whose stream
spells some otherwise (``Sink.spelled``) stages them so, and its quarantine records
are read back in the table's names.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from datetime import timezone
from typing import Any

import pyarrow as pa

from tests.reference_model import STREAM_SCALE, Routed, Sink, Target
from wal_sink import faults
from wal_sink.config import Config
from wal_sink.ops.purge import run_purge, select_purge
from wal_sink.ops.quarantine_batch import plan_set_aside, set_aside_batch
from wal_sink.ops.quarantine_entries import ROW, list_entries
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.ops.replay import plan_replay, run_replay
from wal_sink.protocol.committer import CommitResult
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.driver_stage import write_file
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN
from wal_sink.wal.quarantine_records import typed_row, wal_columns
from wal_sink.wal.writer import WalWriter

ARROW = {
    "bigint": pa.int64(),
    "int": pa.int64(),
    "uint": pa.int64(),
    "varchar": pa.string(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "datetime": pa.timestamp("us", tz="UTC"),
    "double": pa.float64(),
    "float": pa.float64(),  # a FLOAT the stream writes DOUBLEs into
    "decimal": pa.decimal128(10, STREAM_SCALE),
}
"""Arrow types as Spark's ``toArrow`` gives them for the stream's columns."""


def stream_schema(target: Target, sink: Sink) -> pa.Schema:
    """The staged files' schema: ``_wal_seq`` first, then the stream's columns (a
    routed sink's route and ``u``'s columns too), spelt as the stream spells
    them."""
    fields = [pa.field(SEQ_COLUMN, pa.int64())]
    spelled = dict(sink.spelled)
    for name in sink.columns:
        if (sink.cdc and name == sink.cdc.op_column) or name == Routed.ROUTE:
            kind = "varchar"
        elif name in Routed.COLUMNS and name not in sink.stream:
            kind = "bigint"
        else:
            kind = target.column(name).kind
        fields.append(pa.field(spelled.get(name, name), ARROW[kind]))
    return pa.schema(fields)


class RealSink:
    """One sink of a scenario on the real code: its WAL, its job and its commands."""

    def __init__(self, config: Config, target: Target, sink: Sink) -> None:
        self.config = config
        self.sink = sink
        self.schema = stream_schema(target, sink)
        self.spelled = dict(sink.spelled)
        self.names = {v: k for k, v in sink.spelled}
        """The stream's spelling of a column -> the table's."""
        self.writer = WalWriter(config.wal_path, sink.sink_id, config.storage)
        self.job: SinkInstance | None = None
        self.started = False
        """A sink instance of it took the lease (its tables exist)."""
        self._reader: SinkInstance | None = None

    # -- the job --------------------------------------------------------------

    def stage(self, batch_id: int, records: list[dict[str, Any]]) -> None:
        """Stage ``records`` as batch ``batch_id``, in their order (``_wal_seq``)."""
        rows = [
            {SEQ_COLUMN: i, **{self.spelled.get(c, c): v for c, v in r.items()}}
            for i, r in enumerate(records)
        ]
        table = pa.Table.from_pylist(rows, schema=self.schema)
        attempt = f"{BATCH_COLUMN}={batch_id}/{uuid.uuid4().hex}"
        written = write_file(self.writer, attempt, table, batch_id)
        if not self.writer.commit(batch_id, [written], table.schema):
            raise AssertionError(f"batch {batch_id} was staged already")

    def start_job(self) -> SinkInstance:
        """The running job's instance; a new one takes the lease and recovers."""
        if self.job is None:
            job = SinkInstance(self.config)
            try:
                job.expect_columns(self.schema.names[1:])
                job.start()
                self.started = True
                job.recover()
            except BaseException:
                job.close()
                raise
            self.job = job
        return self.job

    def apply(self, batch_ids: list[int]) -> list[CommitResult]:
        """The job's committer applies ``batch_ids`` (consecutive) in one group."""
        job = self.start_job()
        try:
            return job.committer.apply_group(batch_ids)
        except BaseException:
            self.stop_job()
            raise

    def crash(self, batch_ids: list[int], point: str, action: str) -> None:
        """Apply ``batch_ids`` with a fault at ``point`` for the last of them, then
        restart: a new instance takes the lease and recovers."""
        job = self.start_job()
        with armed(f"{point}:{batch_ids[-1]}:{action}"):
            try:
                job.committer.apply_group(batch_ids)
            except faults.InjectedFault:
                pass
            finally:
                self.stop_job()
        self.start_job()

    def stop_job(self) -> None:
        if self.job is not None:
            self.job.close()
            self.job = None

    # -- the operator's commands ----------------------------------------------

    def _command(self) -> SinkInstance:
        return SinkInstance(self.config)

    def recover(self) -> None:
        """``wal-sink recover``."""
        self.stop_job()
        cli = self._command()
        try:
            cli.start()
            self.started = True
            cli.recover()
        finally:
            cli.close()

    def replay(self, first: int, last: int) -> None:
        """``wal-sink replay --from first --to last --force --yes``."""
        self.stop_job()
        cli = self._command()
        try:
            plan = plan_replay(cli, first, last, force=True)
            if plan.apply:
                run_replay(cli, plan, force=True)
        finally:
            cli.close()

    def set_aside(self, batch_id: int) -> None:
        """``wal-sink quarantine-batch N --yes``."""
        self.stop_job()
        cli = self._command()
        try:
            set_aside_batch(cli, plan_set_aside(cli, batch_id))
        finally:
            cli.close()

    def purge(self, before: int) -> None:
        """``wal-sink purge --before N``, as the CLI runs it."""
        cli = self._command()
        try:
            run_purge(cli, select_purge(cli, before=before))
        finally:
            cli.close()

    def retry(self, fault: tuple[str, int] | None = None) -> None:
        """``wal-sink quarantine retry --yes``; with ``fault`` (point, batch) it
        fails there first, and is run again."""
        if fault is not None:
            with armed(f"{fault[0]}:{fault[1]}:raise"):
                try:
                    self._retry()
                except faults.InjectedFault:
                    pass
        self._retry()

    def _retry(self) -> None:
        cli = self._command()
        try:
            plan = plan_retry(cli)
            if plan.entries:
                run_retry(cli, plan)
        finally:
            cli.close()

    # -- what it holds --------------------------------------------------------

    def reader(self) -> SinkInstance:
        """An instance that only reads (no lease): acks and the quarantine."""
        if self._reader is None:
            self._reader = SinkInstance(self.config)
        return self._reader

    def open_entries(self) -> list[tuple[int, dict[str, Any], str]]:
        """Open entries a retry would apply: (batch id, record as the model holds
        it, reason), the record's values read back as the retry reads them."""
        reader = self.reader()
        columns = wal_columns(reader.wal)
        found = []
        for e in list_entries(reader):
            if e.kind != ROW or not e.is_open:
                continue
            _, values = typed_row(json.loads(e.entry.record), columns)
            record = {self.names.get(c, c): comparable(v) for c, v in values.items()}
            found.append((e.entry.batch_id, record, e.entry.reason))
        return found

    def close(self) -> None:
        self.stop_job()
        if self._reader is not None:
            self._reader.close()


class armed:
    """``WAL_SINK_FAULT`` set for the block, the fault re-armed (once-actions fire
    once per process); the block must reach the fault point, or it fails."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.point = spec.split(":")[0]

    def __enter__(self) -> None:
        os.environ[faults.ENV] = self.spec
        faults._raised.clear()

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        del os.environ[faults.ENV]
        if kind is None and self.point not in faults._raised:
            raise AssertionError(f"the injected fault {self.spec} never fired")


def utc(value: Any) -> Any:
    """A datetime read back from a TIMESTAMP column as naive UTC."""
    if hasattr(value, "tzinfo") and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def comparable(value: Any) -> Any:
    """A value as the model's is compared: naive UTC, NaN as a string."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return utc(value)
