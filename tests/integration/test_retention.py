"""`purge --vacuum --retain D` under the retention floor (wal.min_vacuum_retention,
one hour by default) is refused before any purge work: the files of a stage in
progress are younger than the stage, and a shorter retention could delete them
before their commit points at them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.helpers import cli, crashed_attempt, delta_log, files_under, ops_sink
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

SCHEMA = "k STRING, amount DECIMAL(12,2)"


@pytest.fixture
def fresh_stage(spark, db, tmp_path, monkeypatch):
    """Batches 0 and 1 staged and acked; batch 2's files written a moment ago and
    not committed yet, as a stage in progress leaves them. Returns the config path
    and batch 2's files."""
    config_path, instance, committer = ops_sink(db, tmp_path)
    writer = WalWriter(instance.config.wal_path, "ops")
    for b in range(2):
        stage(spark.createDataFrame([("a", Decimal(b + 1))], SCHEMA), writer, b)
        committer.apply(b)
    instance.close()
    in_progress = crashed_attempt(spark, writer, 2, monkeypatch, tmp_path / "wal")
    return config_path, in_progress


def test_retention_under_the_floor_is_refused_and_nothing_is_deleted(
    fresh_stage, db, tmp_path
):
    config_path, in_progress = fresh_stage
    files, log = files_under(tmp_path / "wal"), delta_log(tmp_path)
    acks = db.rows("SELECT * FROM wal_sink_ack ORDER BY batch_id")
    r = cli(config_path, "purge", "--before", "2", "--vacuum", "--retain", "0 hours")
    assert r.returncode == 2, r.stderr
    assert r.stderr == (
        "error: --retain '0 hours' is under the retention floor of 3600 s "
        "(wal.min_vacuum_retention): a stage still writing has files younger than "
        "itself, which vacuum would delete before its commit points at them; keep "
        "--retain above your slowest stage\n"
    )
    assert r.stdout == ""
    assert files_under(tmp_path / "wal") == files and delta_log(tmp_path) == log
    assert db.rows("SELECT * FROM wal_sink_ack ORDER BY batch_id") == acks
    # At the floor, the purge runs and the stage's fresh files stay.
    r = cli(config_path, "purge", "--before", "2", "--vacuum", "--retain", "1 hour")
    assert r.returncode == 0, r.stderr
    assert "removing 2 acked batch(es)" in r.stdout
    assert all(p.exists() for p in in_progress)


def test_a_lower_floor_set_in_the_config_allows_a_shorter_retention(
    fresh_stage, tmp_path
):
    config_path, in_progress = fresh_stage
    text = config_path.read_text()
    config_path.write_text(
        text.replace("[mysql]", 'min_vacuum_retention = "0s"\n\n[mysql]')
    )
    r = cli(config_path, "purge", "--before", "2", "--vacuum", "--retain", "0 hours")
    assert r.returncode == 0, r.stderr
    assert not any(p.exists() for p in in_progress)
