"""``except_columns`` (docs/merge.md, "The target and its columns"): stream
columns a table never takes, in the single-table form and per table of several —
left out of the upsert, of the start's checks and of the tables the sink
creates."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.helpers import apply_staged as apply
from tests.helpers import config_dict
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError, TerminalError
from wal_sink.protocol.sink_instance import SinkInstance

I64 = pa.int64()
SCHEMA = pa.schema([("k", I64), ("label", pa.string()), ("note", pa.string())])


def test_an_excepted_column_is_never_written_nor_needed(db, fresh, config):
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8))")
    db.execute("INSERT INTO t VALUES (1, 'theirs')")
    rows = [{"k": 1, "label": "ours", "note": "n"}, {"k": 2, "label": "b", "note": "m"}]
    with pytest.raises(TerminalError, match="note do not exist in the target"):
        apply(config("t", ["k"], sink="without"), SCHEMA, rows)
    apply(config("t", ["k"], except_columns=["NOTE", "label"]), SCHEMA, rows)
    assert db.rows("SELECT k, label FROM t ORDER BY k") == [(1, "theirs"), (2, None)]


def test_a_created_table_leaves_the_excepted_columns_out(db, fresh, config):
    fresh()
    cfg = config("t", ["k"], except_columns=["note"], auto_create=True)
    sink = SinkInstance(cfg)
    try:
        sink.prepare_tables(SCHEMA)
    finally:
        sink.close()
    apply(cfg, SCHEMA, [{"k": 1, "label": "a", "note": "n"}])
    assert db.rows("SELECT * FROM t") == [(1, "a")]


@pytest.mark.parametrize(
    "mysql, says",
    [
        ({"except_columns": ["org"]}, "'org' is a key, version or merge column"),
        ({"except_columns": ["amount"]}, "'amount' is a key, version or merge column"),
        (
            {
                "table": None,
                "key": None,
                "merge": {},
                "version_column": None,
                "route_column": "r",
                "tables": {
                    "t": {"key": ["k"], "columns": ["k"], "except_columns": ["x"]}
                },
            },
            "give columns or except_columns, not both",
        ),
    ],
)
def test_an_exception_the_table_needs_is_refused_in_one_line(mysql, says):
    raw = config_dict()
    raw["mysql"] = {k: v for k, v in {**raw["mysql"], **mysql}.items() if v is not None}
    with pytest.raises(ConfigError, match=says) as info:
        config_from_dict(raw)
    assert "\n" not in str(info.value)
