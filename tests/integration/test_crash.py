"""Crash tests: the writer is killed with SIGKILL (process group: Python driver and
Spark JVM) at each step of the protocol, restarted, and MySQL must be exact (I1, I2)."""

from __future__ import annotations

import signal
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.helpers import CRASH_BATCHES, run_writer, write_config, write_landing
from wal_sink.storage import Storage
from wal_sink.wal.maintenance import vacuum

pytestmark = pytest.mark.crash


def unreferenced_parquet(wal: Path, batch_id: int) -> int:
    """Parquet files of the batch (in attempt directories, Spark's temporary ones
    included) that the WAL does not reference: what a crash left behind."""
    partition = wal / f"_wal_batch_id={batch_id}"
    on_disk = {str(p) for p in partition.rglob("*.parquet")}
    referenced = set()
    if DeltaTable.is_deltatable(str(wal)):
        referenced = set(DeltaTable(str(wal)).file_uris())
    return len(on_disk - referenced)


@pytest.mark.parametrize(
    ("point", "staging"),
    [
        ("stage.during", "executors"),
        ("stage.before_commit", "executors"),
        ("stage.after", "executors"),
        # a small batch's one file written from the driver (wal.driver_stage_rows)
        ("stage.during", "driver"),
        ("stage.before_commit", "driver"),
        ("stage.after", "driver"),
        ("commit.before_commit", "driver"),
        ("commit.after_commit", "driver"),
    ],
)
def test_kill_at_protocol_step_then_restart_is_exact(
    point, staging, db, mariadb, tmp_path
):
    db.execute("DROP TABLE IF EXISTS crash_totals")
    db.execute("DROP TABLE IF EXISTS wal_sink_ack")
    db.execute("DROP TABLE IF EXISTS wal_sink_lease")
    db.execute(
        "CREATE TABLE crash_totals (k VARCHAR(32) PRIMARY KEY, "
        "amount DECIMAL(14,2), seq BIGINT) ENGINE=InnoDB"
    )
    expected = write_landing(tmp_path / "landing", CRASH_BATCHES)
    driver_rows = 10_000 if staging == "driver" else 0
    config = write_config(
        tmp_path / "sink.toml",
        db,
        table="crash_totals",
        sink_id="crashy",
        wal=f"driver_stage_rows = {driver_rows}",
        job="",
    )
    log = tmp_path / "writer.log"

    code = run_writer(config, tmp_path / "landing", f"{point}:1", log)
    assert code == -signal.SIGKILL, log.read_text()[-3000:]
    acked = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]
    assert acked == ([0, 1] if point == "commit.after_commit" else [0])
    if point in ("stage.during", "stage.before_commit"):
        assert unreferenced_parquet(tmp_path / "wal", 1) > 0, "killed after the commit"
        assert DeltaTable(str(tmp_path / "wal")).transaction_version("crashy") == 0

    assert run_writer(config, tmp_path / "landing", None, log) == 0, log.read_text()[
        -3000:
    ]
    totals = dict(db.rows("SELECT k, amount FROM crash_totals"))
    assert totals == expected
    acked = db.rows("SELECT batch_id, row_count FROM wal_sink_ack ORDER BY 1")
    assert acked == [(0, 40), (1, 50), (2, 30)]
    assert sum(totals.values()) == sum(
        Decimal(a) for b in CRASH_BATCHES for _, a, _ in b
    )
    # What the crash left never blocked the restart; vacuum removes it.
    vacuum(str(tmp_path / "wal"), Storage(), 0)
    assert unreferenced_parquet(tmp_path / "wal", 1) == 0
