"""Crash tests: the writer is killed with SIGKILL (process group: Python driver and
Spark JVM) at each step of the protocol, restarted, and MySQL must be exact (I1, I2).

Each staging mode is one chain: the writer is killed at the first point on batch 1,
restarted and killed at the next point on batch 2, and so on; every kill lands on a
batch no run has tried before, after the earlier crashes were recovered, and a last
run drains the rest. One JVM start per kill instead of two."""

from __future__ import annotations

import signal
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.helpers import run_writer, write_config, write_landing
from wal_sink.storage import Storage
from wal_sink.wal.maintenance import vacuum

pytestmark = pytest.mark.crash

STAGE_POINTS = ("stage.during", "stage.before_commit", "stage.after")
CHAINS = {
    "executors": STAGE_POINTS,
    # a small batch's one file written from the driver (wal.driver_stage_rows)
    "driver": (*STAGE_POINTS, "commit.before_commit", "commit.after_commit"),
}
BATCHES = [
    [(f"k{i % (5 + b)}", f"{i}.25", i) for i in range(50 * b, 50 * b + 20 + 5 * b)]
    for b in range(len(CHAINS["driver"]) + 2)
]
"""Batch 0 is applied before the first kill; the last one after the last."""


def unreferenced_parquet(wal: Path, batch_id: int) -> int:
    """Parquet files of the batch (in attempt directories, Spark's temporary ones
    included) that the WAL does not reference: what a crash left behind."""
    partition = wal / f"_wal_batch_id={batch_id}"
    on_disk = {str(p) for p in partition.rglob("*.parquet")}
    referenced = set()
    if DeltaTable.is_deltatable(str(wal)):
        referenced = set(DeltaTable(str(wal)).file_uris())
    return len(on_disk - referenced)


@pytest.mark.parametrize("staging", CHAINS)
def test_kill_at_each_protocol_step_then_restart_is_exact(staging, db, tmp_path):
    table = f"crash_{staging}"
    for name in (table, "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute(
        f"CREATE TABLE {table} (k VARCHAR(32) PRIMARY KEY, "
        "amount DECIMAL(14,2), seq BIGINT) ENGINE=InnoDB"
    )
    expected = write_landing(tmp_path / "landing", BATCHES)
    driver_rows = 10_000 if staging == "driver" else 0
    config = write_config(
        tmp_path / "sink.toml",
        db,
        table=table,
        sink_id="crashy",
        wal=f"driver_stage_rows = {driver_rows}",
        job="",
    )
    log = tmp_path / "writer.log"
    wal = tmp_path / "wal"

    def acked() -> list[int]:
        return [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]

    for batch, point in enumerate(CHAINS[staging], start=1):
        code = run_writer(config, tmp_path / "landing", f"{point}:{batch}", log)
        assert code == -signal.SIGKILL, f"{point}:{batch}\n{log.read_text()[-3000:]}"
        last = batch if point == "commit.after_commit" else batch - 1
        assert acked() == list(range(last + 1)), f"killed at {point}:{batch}"
        if point in ("stage.during", "stage.before_commit"):
            assert unreferenced_parquet(wal, batch) > 0, f"{point}: after the commit"
            assert DeltaTable(str(wal)).transaction_version("crashy") == batch - 1

    assert run_writer(config, tmp_path / "landing", None, log) == 0, log.read_text()[
        -3000:
    ]
    totals = dict(db.rows(f"SELECT k, amount FROM {table}"))
    assert totals == expected
    acks = db.rows("SELECT batch_id, row_count FROM wal_sink_ack ORDER BY 1")
    assert acks == [(b, len(rows)) for b, rows in enumerate(BATCHES)]
    assert sum(totals.values()) == sum(Decimal(a) for b in BATCHES for _, a, _ in b)
    # What the crashes left never blocked a restart; vacuum removes it.
    vacuum(str(wal), Storage(), 0)
    assert all(unreferenced_parquet(wal, b) == 0 for b in range(len(BATCHES)))
