"""`wal-sink quarantine-batch N`: a batch that fails for a reason no row carries (here
a column the target lacks) would stop the sink at every start. The command sets it
aside whole — its rows into the quarantine table, its ack row marked quarantined —
exactly once, and only the lowest unapplied batch, so batches keep their order."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

from tests.helpers import cli, ops_sink, totals
from wal_sink.config import load_config
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.quarantine import Quarantine


def test_a_batch_no_row_can_unblock_is_set_aside_once_and_in_order(spark, db, tmp_path):
    config_path, instance, committer = ops_sink(db, tmp_path)
    batches = [
        spark.createDataFrame([("a", Decimal(1))], "k STRING, amount DECIMAL(12,2)"),
        spark.createDataFrame(  # a column ops_totals does not have
            [("b", Decimal(2), "x"), ("c", Decimal(3), "y")],
            "k STRING, amount DECIMAL(12,2), note STRING",
        ),
        spark.createDataFrame(
            [("a", Decimal(4), None)], "k STRING, amount DECIMAL(12,2), note STRING"
        ),
    ]
    for batch_id, df in enumerate(batches):
        stage(df.coalesce(1), instance.writer, batch_id)
    committer.apply(0)
    instance.close()
    r = cli(config_path, "recover")
    assert r.returncode == 1 and "stream column(s) note do not exist" in r.stderr
    # Only the lowest unapplied batch: setting aside 2 first would ack it before 1.
    r = cli(config_path, "quarantine-batch", "2", "--yes")
    assert (r.returncode, r.stderr) == (
        1,
        "error: sink 'ops': batch(es) 1 are staged and not applied before batch 2; "
        "only the lowest unapplied batch may be set aside, so that batches keep "
        "their order. Run `wal-sink recover`, or set aside batch 1 first\n",
    )
    r = cli(config_path, "quarantine-batch", "1", input="n\n")
    assert r.returncode == 1 and "cancelled; nothing changed" in r.stderr
    assert "its 2 row(s) go to the quarantine table" in r.stdout
    assert db.rows("SELECT batch_id FROM wal_sink_ack") == [(0,)]
    epoch = db.rows("SELECT epoch FROM wal_sink_lease")[0][0]
    # The reply to its COMMIT is lost: the retry finds its own ack, adds nothing.
    r = cli(
        config_path,
        "quarantine-batch",
        "1",
        "--yes",
        env={"WAL_SINK_FAULT": "commit.after_commit:1:lost-once"},
    )
    assert r.returncode == 0, r.stderr
    assert "batch 1: 2 row(s) set aside, acked as quarantined" in r.stdout
    assert db.rows("SELECT epoch FROM wal_sink_lease")[0][0] == epoch + 1, "lease"
    assert db.rows(
        "SELECT batch_id, row_count, quarantined, state FROM wal_sink_ack ORDER BY 1"
    ) == [(0, 1, 0, "applied"), (1, 0, 2, "quarantined")]
    assert totals(db) == {"a": Decimal(1)}
    r = cli(config_path, "quarantine-batch", "1", "--yes")
    assert (r.returncode, r.stderr) == (
        1,
        "error: sink 'ops': batch 1 has an ack already: there is nothing to set "
        "aside\n",
    )
    entries = Quarantine(str(tmp_path / "wal_quarantine"), "ops").read(100)
    assert Counter(json.loads(e["record"])["k"] for e in entries) == {"b": 1, "c": 1}
    assert {e["reason"] for e in entries} == {
        "set aside whole by wal-sink quarantine-batch 1; not applied"
    }
    assert json.loads(entries[0]["record"]) == {
        "k": "b",
        "amount": "2.00",
        "note": "x",
    }
    # The sink flows again; status and the metrics show the batch set aside.
    r = cli(config_path, "recover")
    assert r.returncode == 1 and "column(s) note" in r.stderr, "2 has the column too"
    r = cli(config_path, "quarantine-batch", "2", "--yes")
    assert r.returncode == 0, r.stderr
    status = json.loads(cli(config_path, "status", "--json").stdout)
    assert status["quarantined_batches"] == [1, 2]
    assert (status["pending_batches"], status["rows_quarantined"]) == (0, 3)
    assert "2 batch(es) acked as quarantined, never applied: 1, 2" in (
        cli(config_path, "status").stdout
    )
    restarted = SinkInstance(load_config(config_path))
    restarted.start()
    sample = restarted.metrics.registry.get_sample_value(
        "wal_sink_batches_quarantined", {"sink": "ops"}
    )
    restarted.close()
    assert sample == 2


def test_a_row_too_large_for_a_statement_is_set_aside_cut(spark, db, tmp_path):
    """Its outbox row would be larger than the server takes (or, here, than the sink
    allows a record): the whole set-aside would fail at every attempt. Its record is
    cut and says so, and a retry leaves it to the operator (a partial row)."""
    config_path, instance, _ = ops_sink(db, tmp_path)
    rows = [("b", Decimal(2), "x"), ("huge", Decimal(3), "y" * 3_000_000)]
    df = spark.createDataFrame(rows, "k STRING, amount DECIMAL(12,2), note STRING")
    stage(df.coalesce(1), instance.writer, 0)
    instance.close()
    r = cli(config_path, "quarantine-batch", "0", "--yes")
    assert r.returncode == 0, r.stderr
    entries = Quarantine(str(tmp_path / "wal_quarantine"), "ops").read(100)
    by_key = {json.loads(e["record"])["k"]: e for e in entries}
    assert json.loads(by_key["b"]["record"])["note"] == "x"
    assert json.loads(by_key["huge"]["record"])["note"] == "y" * 1000
    assert by_key["huge"]["reason"].startswith(
        "set aside whole by wal-sink quarantine-batch 0; not applied; the record "
        "would take 3000"
    )
    assert (
        "values are cut to 1000 characters in this record" in (by_key["huge"]["reason"])
    )
    listed = cli(config_path, "quarantine", "list", "--json")
    kinds = {e["record"]["k"]: e["kind"] for e in json.loads(listed.stdout)}
    assert kinds == {"b": "row", "huge": "partial_row"}
