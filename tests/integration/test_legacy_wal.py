"""A WAL written by wal_sink 0.1 (delta-spark idempotent appends; INT96 timestamps;
an empty batch committed with no file), with the 0.1 ack table, keeps working:
unacked batches are recovered, new batches append to it, purge and status work.
The fixture was made by tests/fixtures/make_legacy_wal.py."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from decimal import Decimal

from tests.helpers import LEGACY_WAL, cli
from wal_sink.config import load_config
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage

ACK_TABLE_0_1 = """CREATE TABLE wal_sink_ack (
    sink_id VARCHAR(128) NOT NULL, batch_id BIGINT NOT NULL,
    row_count BIGINT NOT NULL, deleted_count BIGINT NOT NULL,
    quarantined BIGINT NOT NULL, epoch BIGINT NOT NULL,
    committed_at DATETIME(6) NOT NULL, PRIMARY KEY (sink_id, batch_id)
) ENGINE=InnoDB"""


def test_wal_of_version_0_1_is_recovered_appended_purged(spark, db, tmp_path):
    for t in ("legacy_totals", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE legacy_totals (k VARCHAR(8) PRIMARY KEY, amount DECIMAL(14,2),"
        " seq BIGINT, ts DATETIME(6)) ENGINE=InnoDB"
    )
    # 0.1 applied batches 0 and 1 (their rows and ack rows), then stopped.
    db.execute(ACK_TABLE_0_1)
    db.execute(
        "INSERT INTO legacy_totals VALUES ('a', 11.50, 3, '2026-02-01'), "
        "('b', 2.25, 2, '2026-01-02 03:04:06'), ('c', 0.01, 4, '2026-02-02'), "
        "('d', 7.00, 5, NULL)"
    )
    db.execute(
        "INSERT INTO wal_sink_ack VALUES ('legacy', 0, 2, 0, 0, 1, NOW(6)), "
        "('legacy', 1, 3, 0, 0, 1, NOW(6))"
    )
    wal = tmp_path / "wal"
    shutil.copytree(LEGACY_WAL, wal)
    config_path = tmp_path / "legacy.toml"
    config_path.write_text(f"""
[sink]
id = "legacy"
[wal]
path = "{wal}"
min_vacuum_retention = "0s"  # no job stages: vacuum may take the fresh files
[mysql]
url = "{db.url}"
table = "legacy_totals"
key = ["k"]
merge = {{ amount = "add" }}
""")
    # Recovery: batch 2 (empty, no file) is acked with no rows, batch 3 applied.
    r = cli(config_path, "recover")
    assert r.returncode == 0, r.stderr
    assert db.rows("SELECT batch_id, row_count FROM wal_sink_ack ORDER BY 1") == [
        (0, 2),
        (1, 3),
        (2, 0),
        (3, 1),
    ]
    assert db.rows("SELECT k, amount, seq, ts FROM legacy_totals WHERE k = 'b'") == [
        ("b", Decimal("102.25"), 6, datetime(2026, 3, 3, 3, 3, 3, 3))
    ]
    # New batches append to the old table with the new writer.
    sink = SinkInstance(load_config(config_path))
    committer = sink.start()
    df = spark.createDataFrame(
        [("e", Decimal("5.00"), 7, datetime(2026, 4, 4))],
        "k STRING, amount DECIMAL(12,2), seq BIGINT, ts TIMESTAMP",
    )
    assert stage(df, sink.writer, 4) is not None
    assert committer.apply(4).rows == 1
    sink.close()
    assert db.rows("SELECT amount FROM legacy_totals WHERE k = 'e'") == [
        (Decimal("5.00"),)
    ]
    # Status and purge work on it.
    r = cli(config_path, "status", "--json")
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert (status["staged_batches"], status["pending_batches"]) == (4, 0)
    assert status["last_staged_txn"] == 4
    r = cli(config_path, "purge", "--before", "4", "--vacuum", "--retain", "0s")
    assert r.returncode == 0, r.stderr
    assert "removing 3 acked batch(es)" in r.stdout
    assert not list((wal / "_wal_batch_id=0").glob("*.parquet"))
    r = cli(config_path, "recover")
    assert r.returncode == 0 and "nothing to recover" in r.stdout, r.stderr
