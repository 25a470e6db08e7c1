"""The job's Prometheus metrics, scraped over HTTP from a real running job and held
against the ack and lease tables; the shipped Grafana dashboard uses only them."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from devtools.mariadb import free_port
from tests.helpers import (
    config_for,
    labelled_table,
    landing_files,
    wait_for_lock_waits,
)
from wal_sink.wal.reader import WalReader

DASHBOARD = Path(__file__).resolve().parents[2] / "conf" / "grafana_dashboard.json"


def scrape(port: int) -> dict[str, float]:
    """Every sample of the sink's metrics, by name (the sink label is checked)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("wal_sink_"):
                assert sample.labels.get("sink") == "watched", sample
                samples[sample.name] = sample.value
    return samples


def test_metrics_of_a_running_job_match_the_ack_table(db, tmp_path):
    """The committer is held back until four batches are staged, so the rest go
    to MySQL as a group: fewer transactions than batches."""
    labelled_table(db, "watched")
    landing_files(tmp_path / "landing", 6)
    port = free_port()
    config = config_for(
        db,
        tmp_path,
        "watched",
        wal="max_pending = 4",
        extra=f'metrics_port = {port}\nmetrics_host = "127.0.0.1"',
    )
    log = tmp_path / "job.log"
    from devtools.spark_job import JobProcess

    holder = db.connect()
    with holder.cursor() as cur:  # every row: the committer waits in batch 0
        cur.execute("BEGIN")
        cur.execute("SELECT k FROM watched FOR UPDATE")
    job = JobProcess(config, log)
    try:
        wait_for_lock_waits(db, detail=job.tail)
        wal = WalReader(str(tmp_path / "wal"))
        deadline = time.monotonic() + 180
        while len(wal.staged_batches()) < 4:
            assert time.monotonic() < deadline and job.proc.poll() is None, job.tail()
            time.sleep(0.3)
            wal.refresh()
        holder.rollback()
        deadline = time.monotonic() + 180
        while "batch 5 applied" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline and job.proc.poll() is None, job.tail()
            time.sleep(0.3)
        m = scrape(port)
        ((batches, rows, last, transactions),) = db.rows(
            "SELECT COUNT(*), SUM(row_count), MAX(batch_id), COUNT(DISTINCT apply_id) "
            "FROM wal_sink_ack"
        )
        ((epoch,),) = db.rows("SELECT epoch FROM wal_sink_lease")
        assert m["wal_sink_batches_applied_total"] == batches == 6
        assert m["wal_sink_batches_staged_total"] == 6
        # one observation per batch in each part of the batch's time
        assert m["wal_sink_batch_part_duration_seconds_count"] == 6
        assert m["wal_sink_rows_applied_total"] == rows == 30
        assert m["wal_sink_rows_quarantined_total"] == 0
        assert m["wal_sink_last_applied_batch_id"] == last == 5
        assert m["wal_sink_last_staged_batch_id"] == 5
        assert m["wal_sink_batches_pending"] == 0
        assert m["wal_sink_lease_epoch"] == epoch and m["wal_sink_lease_held"] == 1
        assert m["wal_sink_stage_duration_seconds_count"] == 6
        # one per transaction: a group of batches shares one, and its apply id
        assert m["wal_sink_commit_duration_seconds_count"] == transactions < 6
        assert m["wal_sink_lag_seconds_count"] == 6
        assert m["wal_sink_transient_retries_total"] == 0
        assert m["wal_sink_query_restarts_total"] == 0
    finally:
        holder.close()
        os.killpg(job.proc.pid, signal.SIGTERM)
        assert job.wait(timeout=120) == 0, job.tail()
    # The shipped dashboard asks only for metrics the job serves.
    exprs = [
        target["expr"]
        for panel in json.loads(DASHBOARD.read_text())["panels"]
        for target in panel.get("targets", [])
    ]
    used = {name for e in exprs for name in re.findall(r"wal_sink_\w+", e)}
    assert len(used) >= 10 and used <= set(m), used - set(m)
