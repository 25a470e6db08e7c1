"""I7 the other way round: Spark's commit log ahead of everything the sink knows.

When the WAL is lost while batches are staged and not applied (MySQL was down, the
stop timeout ran out), Spark has those batches in its commit log and would resume
after them: they would never be applied. The job refuses to start instead, with one
line and exit code 2; a healthy sink whose acked batches were purged still starts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from devtools.spark_job import JobProcess
from tests.helpers import JOB, LANDING_SCHEMA, run_stream, write_config, write_landing
from wal_sink import CheckpointResetError, WalSink
from wal_sink.config import load_config
from wal_sink.ops.purge import execute_purge, plan_purge

BATCHES = [[("a", "1.00", 1)], [("b", "2.00", 2)], [("c", "3.00", 3)]]


def cli_recover(config) -> subprocess.CompletedProcess:
    cli = str(Path(sys.executable).with_name("wal-sink"))
    return subprocess.run(
        [cli, "-c", str(config), "recover"], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def sink_config(db, tmp_path):
    for t in ("ahead", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE ahead (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(16,2), "
        "seq BIGINT) ENGINE=InnoDB"
    )
    landing = tmp_path / "landing"
    write_landing(landing, BATCHES)
    return write_config(
        tmp_path / "ahead.toml",
        db,
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "k STRING, amount DECIMAL(12,2), seq BIGINT"
options = {{ maxFilesPerTrigger = 1 }}""",
        table="ahead",
        job=JOB + '\nrestart = { strategy = "none" }',
    )


def staged_not_applied(spark, config_path, tmp_path, monkeypatch) -> None:
    """Batch 0 staged and in Spark's commit log, never applied: the committer fails
    on it, and the query stops at batch 1."""
    config = load_config(config_path)
    sink = WalSink(config)
    sink.recover(spark)
    monkeypatch.setenv("WAL_SINK_FAULT", "commit.before_commit::raise")
    with pytest.raises(StreamingQueryException, match="injected fault"):
        run_stream(spark, sink, tmp_path / "landing", tmp_path / "checkpoint")
    monkeypatch.delenv("WAL_SINK_FAULT")
    sink.close(timeout=0)
    assert (tmp_path / "checkpoint" / "commits" / "0").exists()
    assert sink.wal.last_staged("ahead") == 0


def test_wal_lost_with_batches_staged_and_unapplied_refuses_to_start(
    spark, db, sink_config, tmp_path, monkeypatch
):
    staged_not_applied(spark, sink_config, tmp_path, monkeypatch)
    shutil.rmtree(tmp_path / "wal")  # the WAL is lost; Spark's checkpoint is not
    with pytest.raises(CheckpointResetError) as refused:
        WalSink(load_config(sink_config)).recover(spark)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        f"sink 'ahead': Spark's commit log at '{tmp_path / 'checkpoint'}' holds "
        "batch 0, but the newest batch the WAL knows is none and the newest acked "
        "is none: batch(es) 0 were staged into a WAL that is gone"
    )
    # `wal-sink recover` reads the commit log without Spark and says the same.
    recovered = cli_recover(sink_config)
    assert recovered.returncode == 2, recovered.stderr
    assert recovered.stderr.strip().splitlines()[-1] == f"error: {message}"
    assert "nothing to recover" not in recovered.stdout
    # The job, as a user runs it: one line, exit 2, nothing applied.
    job = JobProcess(sink_config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 2, job.tail()
    errors = [line for line in job.text().splitlines() if " ERROR " in line]
    assert len(errors) == 1 and errors[0].endswith(message), job.tail()
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(0,)]
    assert db.rows("SELECT COUNT(*) FROM ahead") == [(0,)]


def test_a_first_batch_beyond_what_the_sink_knows_is_refused(
    spark, db, sink_config, tmp_path
):
    """Without a checkpoint to read (a query of the user's own), the first batch
    Spark delivers says the same: batches before it were committed elsewhere."""
    sink = WalSink(load_config(sink_config))
    sink.start()
    df = spark.createDataFrame([("x", Decimal(1), 1)], LANDING_SCHEMA)
    with pytest.raises(CheckpointResetError) as refused:
        sink.foreach_batch(df, 2)
    assert str(refused.value) == (
        "sink 'ahead', batch 2: Spark delivered batch 2 first, but the WAL/ack table "
        "know no batch: Spark committed batch(es) 0..1 into a WAL that is gone "
        "(deleted, moved, or wal.path changed). Restore the WAL; to start over, use a "
        "new checkpoint too"
    )
    assert sink.wal.last_staged("ahead") is None, "nothing staged"
    sink.close()


def test_healthy_sink_whose_batches_were_purged_starts(
    spark, db, sink_config, tmp_path
):
    config = load_config(sink_config)
    sink = WalSink(config)
    sink.recover(spark)
    run_stream(spark, sink, tmp_path / "landing", tmp_path / "checkpoint")
    sink.close()
    purger = WalSink(config)
    execute_purge(purger, plan_purge(purger, before=3))
    purger.close()
    assert db.rows("SELECT batch_id FROM wal_sink_ack") == [(2,)]
    assert WalSink(config).recover(spark) == []
    # Even a WAL lost once everything in it was applied loses nothing.
    shutil.rmtree(tmp_path / "wal")
    assert WalSink(config).recover(spark) == []
    recovered = cli_recover(sink_config)
    assert recovered.returncode == 0, recovered.stderr
    assert "nothing to recover" in recovered.stdout


def test_a_sink_that_cannot_read_the_checkpoint_says_so(db, tmp_path, caplog):
    """WalSink in a user's own query, recovered without the checkpoint (no
    [job] section): the check it cannot make is said, not skipped silently."""
    for t in ("unseen", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("CREATE TABLE unseen (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(16,2))")
    config = load_config(write_config(tmp_path / "unseen.toml", db, table="unseen"))
    with WalSink(config) as sink:
        sink.recover()
    assert "the query's checkpoint is not known to the sink" in caplog.text
