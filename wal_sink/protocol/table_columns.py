"""Which stream columns each target table takes (``tables_columns``), and a
table's rows spelt as it spells its columns: names ignore case, as MySQL's do
(config/spelling.py). Used by the routing of batches (routed_rows.py) and the
start's checks (sink_instance.py)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import pyarrow as pa

from wal_sink.config import Config
from wal_sink.config.spelling import Spelling, not_excepted, refuse_twins
from wal_sink.errors import ConfigError


def renamed(chunk: pa.RecordBatch, spelling: Spelling) -> pa.RecordBatch:
    """``chunk`` with the columns ``spelling`` has named as it spells them."""
    names = [spelling.of(n) for n in chunk.schema.names]
    return chunk if names == chunk.schema.names else chunk.rename_columns(names)


def in_spelling(
    chunks: Iterator[pa.RecordBatch], spelling: Spelling, table: str
) -> Iterator[pa.RecordBatch]:
    """``chunks`` of ``table``'s rows in its spelling; two columns equal but for
    case refused."""
    for chunk in chunks:
        refuse_twins(chunk.schema.names, table)
        yield renamed(chunk, spelling)


def tables_columns(
    config: Config,
    have: dict[str, Collection[str]],
    names: Sequence[str],
    stream: Sequence[str] | None = None,
) -> dict[str, list[str]]:
    """The columns each target table takes of ``names``: its ``columns``, or the
    stream's columns it has but its ``except_columns`` (``have``: each table's
    columns), with the CDC op column; a column some table excepts is no stray.
    ``stream``, when ``names`` are only some of the stream's columns (a quarantine
    retry's records), is what the checks hold to.

    Raises:
        ConfigError: a stream column no table takes (the route and op columns
            excepted), a table's ``columns`` naming one the stream lacks, or a
            stream without the route column or ``cdc.order_by``.
    """
    mysql, cdc = config.mysql, config.cdc
    op = Spelling([cdc.op_column] if cdc else [])
    whole = list(stream or names)
    in_stream, in_names = Spelling(whole), Spelling(names)
    for setting, column in [("mysql.route_column", mysql.route_column)] + (
        [("cdc.order_by", cdc.order_by)] if cdc else []
    ):
        if column and column not in in_stream:
            raise ConfigError(
                f"{setting} names column {column!r}, which the stream does not have "
                f"(its columns: {', '.join(whole)})"
            )
    columns = {}
    for target in mysql.targets:
        wanted = target.columns
        if wanted is None:
            has = Spelling(have[target.table])
            wanted = [c for c in whole if c in has and c not in op]
            wanted = not_excepted(target, wanted)
        missing = [c for c in wanted if c not in in_stream]
        if missing:
            raise ConfigError(
                f"{target.where}.columns names column {missing[0]!r}, which the "
                f"stream does not have (its columns: {', '.join(whole)})"
            )
        refuse_twins([c for c in whole if c in Spelling(wanted)], target.table)
        received = [in_names.get(c) for c in [*wanted, *op]]
        columns[target.table] = list(dict.fromkeys(c for c in received if c))
    taken = Spelling(
        c
        for t in mysql.targets
        for c in (*(t.columns or have[t.table]), *t.except_columns)
    )
    stray = [c for c in whole if c not in taken and c not in op]
    stray = [c for c in stray if c.lower() != (mysql.route_column or "").lower()]
    if stray:
        raise ConfigError(
            f"stream column {stray[0]!r} belongs to no table of mysql.tables: leave "
            "it out of the stream, add it to a table, or name it in a table's columns"
        )
    return columns
