"""Vacuum removes what crashed stages left behind once it is older than the
retention, and nothing a stage may still be writing or the WAL references."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.helpers import crashed_attempt, files_under
from wal_sink.spark.staging import stage
from wal_sink.storage import Storage
from wal_sink.wal.maintenance import vacuum
from wal_sink.wal.reader import WalReader
from wal_sink.wal.writer import WalWriter

HOUR = 3600


def rows(reader: WalReader) -> dict[int, list[dict]]:
    reader.refresh()
    return {
        b: sorted(
            (r for c in reader.read_batch(batch, 100) for r in c.to_pylist()),
            key=lambda r: r["k"],
        )
        for b, batch in reader.staged_batches().items()
    }


def test_vacuum_removes_crashed_attempts_past_retention_and_keeps_younger_ones(
    spark, tmp_path, monkeypatch
):
    wal = tmp_path / "wal"
    writer = WalWriter(str(wal), "vac")
    good = spark.createDataFrame([("a", 1), ("b", 2)], "k STRING, n INT")
    stage(good.repartition(2), writer, 0)
    # A crash staging batch 1, then its successful retry beside the leftovers.
    old = crashed_attempt(spark, writer, 1, monkeypatch, wal)
    stage(good.repartition(2), writer, 1)
    # A crash staging batch 2 a moment ago: it may be a stage still writing.
    young = crashed_attempt(spark, writer, 2, monkeypatch, wal)
    two_hours_ago = time.time() - 2 * HOUR
    old_dirs = {p.parent for p in old}
    for path in old | old_dirs:
        os.utime(path, (two_hours_ago, two_hours_ago))
    reader = WalReader(str(wal))
    staged = rows(reader)
    assert set(staged) == {0, 1} and staged[0] == staged[1]
    committed = {Path(u) for u in reader.table().file_uris()}
    assert not committed & (old | young)

    listed = vacuum(str(wal), Storage(), HOUR, dry_run=True)
    assert listed.files == len(old)
    assert listed.bytes == sum(p.stat().st_size for p in old)
    assert files_under(wal) >= old | young, "a dry run deletes nothing"

    freed = vacuum(str(wal), Storage(), HOUR)
    assert freed.files == len(old)
    assert not any(p.exists() for p in old | old_dirs), "old attempt and its dir"
    assert all(p.exists() for p in young | committed), "young attempt, WAL files"
    assert rows(reader) == staged

    # What `wal-sink purge --before N --vacuum --retain 0s` asks for.
    freed = vacuum(str(wal), Storage(), 0)
    assert freed.files >= len(young)
    assert not any(p.exists() for p in young)
    assert not (wal / "_wal_batch_id=2").exists(), "emptied directories removed"
    assert all(p.exists() for p in committed)
    assert rows(reader) == staged
    assert sorted(WalReader(str(wal)).staged_batches()) == [0, 1]
