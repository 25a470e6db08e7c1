"""A sink's parts are assembled once: the instance, its committer and its row
applier share them (no MySQL needed: nothing here connects)."""

from __future__ import annotations

from wal_sink.config import config_from_dict
from wal_sink.protocol.sink_instance import SinkInstance


def test_the_committer_receives_the_instances_parts(tmp_path, monkeypatch):
    monkeypatch.setenv("WAL_SINK_MYSQL_PASSWORD", "unused")
    config = config_from_dict(
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
    instance = SinkInstance(config)
    committer = instance.committer_at(7)
    parts = instance.parts
    assert (instance.wal, instance.acks, instance.quarantine) == (
        parts.wal,
        parts.acks,
        parts.quarantine,
    )
    assert committer.wal is parts.wal and committer.rows.wal is parts.wal
    assert committer.acks is parts.acks and committer.outbox is parts.outbox
    assert committer.outbox.quarantine is parts.quarantine
    assert (
        committer.engine is instance.engine and committer.rows.engine is instance.engine
    )
    assert (committer.acks.table.name, committer.outbox.table.name) == (
        "my_acks",
        "my_outbox",
    )
    assert committer.lease is parts.tables.lease and committer.epoch == 7
    instance.close()
