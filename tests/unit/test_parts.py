"""A sink's parts are assembled once, from its config: the instance, its committer
and its row applier work on the same WAL and the configured tables (no MySQL
needed: nothing here connects; batches are staged with delta-rs alone)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.helpers import stage_rows
from wal_sink.config import config_from_dict
from wal_sink.protocol.sink_instance import SinkInstance

SCHEMA = pa.schema([("k", pa.string()), ("amount", pa.int64())])


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("WAL_SINK_MYSQL_PASSWORD", "unused")
    return config_from_dict(
        {
            "sink": {"id": "s"},
            "wal": {"path": str(tmp_path / "wal")},
            "mysql": {
                "url": "mysql+pymysql://u@127.0.0.1:1/d",
                "table": "t",
                "key": ["k"],
                "ack_table": "my_acks",
                "outbox_table": "my_outbox",
            },
        },
        base_dir=tmp_path,
    )


def test_committer_at_epoch_writes_the_configured_tables_as_its_holder(config):
    instance = SinkInstance(config)
    committer = instance.committer_at(7)
    assert committer.epoch == 7
    assert (
        committer.acks.table.name,
        committer.outbox.table.name,
        committer.lease.name,
    ) == ("my_acks", "my_outbox", "wal_sink_lease")
    assert committer.outbox.quarantine.path == config.quarantine_path
    assert committer.wal.path == committer.rows.wal.path == config.wal_path
    instance.close()


def test_refresh_by_instance_shows_new_batches_to_committer_and_row_applier(config):
    instance = SinkInstance(config)
    committer = instance.committer_at(7)
    stage_rows(config, 0, [{"k": "a", "amount": 1}], SCHEMA)
    instance.wal.refresh()
    assert committer.wal.staged_batch(0) is not None
    stage_rows(config, 1, [{"k": "b", "amount": 2}, {"k": "c", "amount": 3}], SCHEMA)
    instance.wal.refresh()  # once, by the instance: its parts see the same snapshot
    batch = committer.wal.staged_batch(1)
    assert batch is not None and batch.rows == 2
    read = [r for c in committer.rows.wal.read_batch(batch, 10) for r in c.to_pylist()]
    assert [(r["k"], r["amount"]) for r in read] == [("b", 2), ("c", 3)]
    instance.close()
