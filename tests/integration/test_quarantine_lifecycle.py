"""A quarantine entry is applied at most once over its whole life: after its batch
is applied again (``replay --force``) it stays superseded even once the ack rows
that told so are purged, and rows set aside reach the quarantine table whatever ids
the outbox hands out (a TRUNCATE, a restore). In process, batches staged by
pyarrow."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.helpers import stage_rows
from wal_sink import faults
from wal_sink.config import config_from_dict
from wal_sink.ops.purge import execute_purge, plan_purge
from wal_sink.ops.quarantine_entries import SUPERSEDED, list_entries
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.ops.replay import plan_replay, run_replay
from wal_sink.protocol.sink_instance import SinkInstance

SCHEMA = pa.schema([("k", pa.int64()), ("parent", pa.int64()), ("label", pa.string())])


@pytest.fixture
def sink_config(db, tmp_path):
    for t in ("items", "parents", "wal_sink_ack", "wal_sink_outbox", "wal_sink_retry"):
        db.execute("SET FOREIGN_KEY_CHECKS = 0")
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("CREATE TABLE parents (id BIGINT PRIMARY KEY) ENGINE=InnoDB")
    db.execute(
        "CREATE TABLE items (k BIGINT PRIMARY KEY, parent BIGINT, label VARCHAR(4), "
        "FOREIGN KEY (parent) REFERENCES parents (id)) ENGINE=InnoDB"
    )
    return config_from_dict(
        {
            "sink": {"id": "q"},
            "wal": {"path": str(tmp_path / "wal")},
            "mysql": {"url": db.url, "table": "items", "key": ["k"]},
        }
    )


def rows(*values: tuple) -> list[dict]:
    return [dict(zip(("k", "parent", "label"), v)) for v in values]


def test_an_entry_of_a_replayed_batch_stays_superseded_after_purge(db, sink_config):
    """Set aside (no parent), parent added, its batch replayed with --force (the
    row lands), newer data for the key, purge, retry: the retry must not apply the
    old row over the newer one."""
    cfg = sink_config
    sink = SinkInstance(cfg)
    committer = sink.start()
    stage_rows(cfg, 0, rows((1, 7, "old")), SCHEMA)
    assert committer.apply(0).quarantined == 1
    db.execute("INSERT INTO parents VALUES (7)")
    run_replay(sink, plan_replay(sink, 0, 0, force=True), force=True)
    assert db.rows("SELECT k, label FROM items") == [(1, "old")], "replay applied it"
    stage_rows(cfg, 1, rows((1, 7, "new")), SCHEMA)
    stage_rows(cfg, 2, rows((2, None, "x")), SCHEMA)
    committer.apply(1)
    committer.apply(2)
    execute_purge(sink, plan_purge(sink, before=2))
    assert db.rows("SELECT batch_id FROM wal_sink_ack") == [(2,)]
    assert [e.kind for e in list_entries(sink)] == [SUPERSEDED]
    assert run_retry(sink, plan_retry(sink)) == []
    sink.close()
    assert db.rows("SELECT k, label FROM items ORDER BY k") == [(1, "new"), (2, "x")]


def test_a_replay_supersedes_only_its_own_batchs_entries(db, sink_config):
    """Batches 0 and 1 applied in one transaction (one apply id), a row of batch 1
    set aside; replaying batch 0 alone must leave that entry open and retryable.
    Found by the model fuzzer: the marker named only the apply, so it hid batch
    1's entry from every retry."""
    cfg = sink_config
    sink = SinkInstance(cfg)
    committer = sink.start()
    stage_rows(cfg, 0, rows((1, None, "a")), SCHEMA)
    stage_rows(cfg, 1, rows((2, 7, "b")), SCHEMA)
    assert sum(r.quarantined for r in committer.apply_group([0, 1])) == 1
    run_replay(sink, plan_replay(sink, 0, 0, force=True), force=True)
    assert [(e.entry.batch_id, e.is_open) for e in list_entries(sink)] == [(1, True)]
    db.execute("INSERT INTO parents VALUES (7)")
    assert [r.applied for r in run_retry(sink, plan_retry(sink))] == [1]
    sink.close()
    assert db.rows("SELECT k, label FROM items ORDER BY k") == [(1, "a"), (2, "b")]


def test_rows_set_aside_by_a_process_that_died_after_commit_are_listed_on_restart(
    db, sink_config, monkeypatch
):
    """The process dies right after the batch's COMMIT, before its outbox drains:
    the restart's recovery moves the row to the quarantine, so it is listed and
    retried without waiting for a new batch. Found by the model fuzzer."""
    cfg = sink_config
    stage_rows(cfg, 0, rows((1, 7, "a")), SCHEMA)
    sink = SinkInstance(cfg)
    monkeypatch.setenv(faults.ENV, "commit.after_commit:0:raise")
    with pytest.raises(faults.InjectedFault):
        sink.start().apply(0)
    monkeypatch.delenv(faults.ENV)
    sink.close()
    assert db.rows("SELECT COUNT(*) FROM wal_sink_outbox") == [(1,)]
    sink = SinkInstance(cfg)
    sink.start()
    assert sink.recover() == []
    assert [e.entry.batch_id for e in list_entries(sink) if e.is_open] == [0]
    db.execute("INSERT INTO parents VALUES (7)")
    assert [r.applied for r in run_retry(sink, plan_retry(sink))] == [1]
    sink.close()
    assert db.rows("SELECT k, label FROM items") == [(1, "a")]


def test_rows_set_aside_after_the_outbox_was_truncated_reach_the_quarantine(
    db, sink_config
):
    """TRUNCATE (or a restore) hands out outbox ids again: ids at or below the one
    the quarantine recorded are new rows, never taken as drained already."""
    cfg = sink_config
    sink = SinkInstance(cfg)
    committer = sink.start()
    stage_rows(cfg, 0, rows((1, 9, "a"), (2, 9, "b"), (3, 9, "c")), SCHEMA)
    committer.apply(0)
    db.execute("TRUNCATE TABLE wal_sink_outbox")
    stage_rows(cfg, 1, rows((4, 9, "d"), (5, 9, "e")), SCHEMA)
    committer.apply(1)
    listed = list_entries(sink)
    sink.close()
    assert sorted(e.entry.batch_id for e in listed) == [0, 0, 0, 1, 1]
    assert len({e.entry.entry_id for e in listed}) == 5
    assert db.rows("SELECT COUNT(*) FROM wal_sink_outbox") == [(0,)]
