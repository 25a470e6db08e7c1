"""Tables the sink creates and evolves (``mysql.auto_create``, ``mysql.auto_evolve``;
docs/merge.md, "Tables the sink creates"): which stream columns each target gets,
and the DDL run for them before any batch's transaction (mysql/table_ddl.py).

The job runs it at start from its query's schema, before anything is checked or
staged; the committer runs it again whenever the WAL's schema has changed, before
the transaction of the next batches (so the follower of ``format("wal_sink")``,
which has no query, creates and evolves too, and a batch that added a column
finds it). Without either key nothing is run: a table the stream needs and lacks
is refused at start, naming what is missing, as before.
"""

from __future__ import annotations

import logging

import pyarrow as pa
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from wal_sink.config import Config, Target
from wal_sink.config.spelling import Spelling, not_excepted, spelled_target
from wal_sink.config.table_section import END_AT, START_AT
from wal_sink.errors import ConfigError
from wal_sink.mysql.errors import mysql_error
from wal_sink.mysql.table_ddl import TablePlan, plan_table, run_plan, table_columns
from wal_sink.mysql.tombstones import ensure_side_tables
from wal_sink.wal.reader import WalReader

log = logging.getLogger(__name__)


def target_fields(
    config: Config, target: Target, schema: pa.Schema, have: set[str] | None
) -> pa.Schema:
    """The stream columns ``target`` gets, of the stream's ``schema`` (``have``:
    the table's columns, None while it does not exist): its ``columns``, or with
    one table every stream column but the CDC op column, or with several the
    columns the table has (every one but the route column, to create it by its
    ``except_columns``); never its ``except_columns``.

    Raises:
        ConfigError: a missing table of several without ``columns`` to make it of.
    """
    op = config.cdc.op_column.lower() if config.cdc else None
    route = (config.mysql.route_column or "").lower()
    names = [f.name for f in schema if f.name.lower() not in (op, route)]
    if target.columns is not None:
        in_stream = Spelling(schema.names)
        names = [in_stream.of(n) for n in target.columns if n in in_stream]
    elif route and have is not None:
        names = [n for n in names if n.lower() in have]
    elif route and not target.except_columns:
        raise ConfigError(
            f"{target.where}.columns (or except_columns) is needed to create table "
            f"{target.table}: with several tables, say which stream columns it takes"
        )
    fields = [schema.field(n) for n in not_excepted(target, names)]
    version = Spelling(schema.names).of(target.version_column or "")
    if target.scd_type == 2 and version in schema.names:
        # a history: each record's span, of the version's type (merge.md)
        kind = schema.field(version).type
        fields += [pa.field(START_AT, kind), pa.field(END_AT, kind)]
    return pa.schema(fields)


def prepare_targets(
    engine: Engine, config: Config, schema: pa.Schema, *, run: bool = True
) -> list[TablePlan]:
    """Create and evolve each target for a stream of ``schema`` as the config
    allows (``run``), or only plan it (``--print-ddl``); returns the plans, each
    with what is left undone."""
    mysql = config.mysql
    if run and not (mysql.auto_create or mysql.auto_evolve):
        return []
    plans = []
    for target in mysql.targets:
        with engine.connect() as conn:
            have = set(table_columns(conn, target.table)) or None
            fields = target_fields(config, target, schema, have)
            key = spelled_target(target, Spelling(fields.names)).key
            if target.scd_type == 2:
                key = (*key, START_AT)
            plan = plan_table(conn, target.table, key, fields)
        if run and (mysql.auto_create or mysql.auto_evolve) and plan.statements:
            plan = run_plan(
                engine,
                target.table,
                key,
                fields,
                create=mysql.auto_create,
                evolve=mysql.auto_evolve,
            )
            done = _done(plan, mysql.auto_create, mysql.auto_evolve)
            for statement in done:
                log.info("sink %s: %s", config.sink.id, statement)
            if done:  # its tombstone table with it, not in a batch's transaction
                ensure_side_tables(engine, config, [target])
        plans.append(plan)
    return plans


class WalSchemaDdl:
    """Runs ``prepare_targets`` for the WAL's schema whenever it has changed (the
    committer's, before a transaction)."""

    def __init__(self, engine: Engine, config: Config, wal: WalReader) -> None:
        self.engine = engine
        self.config = config
        self.wal = wal
        self._done: pa.Schema | None = None

    def ensure(self) -> bool:
        """Create or evolve the targets for the WAL's schema, when it is new to
        this committer; returns whether DDL was run (the tables must be reflected
        again).

        Raises:
            TransientError, TerminalError: MySQL's failure, as the sink's error.
        """
        mysql = self.config.mysql
        histories = [t for t in mysql.targets if t.scd_type == 2]
        if not (mysql.auto_create or mysql.auto_evolve or histories):
            return False
        schema = self.wal.stream_schema()
        if schema is None:
            return False
        if self._done is not None and self._done.equals(schema):
            return False
        changed, ran = self._done is not None, False
        try:
            plans = prepare_targets(self.engine, self.config, schema)
            ran = any(p.statements for p in plans)
            if changed and histories:
                # a new stream schema: a column a history gained since the start
                # reaches its events table before a batch sends it
                ensure_side_tables(self.engine, self.config, histories)
                ran = True
        except DBAPIError as e:
            raise mysql_error(e, sink_id=self.config.sink.id) from e
        self._done = schema
        return ran


def _done(plan: TablePlan, create: bool, evolve: bool) -> list[str]:
    if plan.create:
        return [plan.create] if create else []
    return list(plan.add) if evolve else []
