"""The committer behind Spark, end to end with real spark-submit runs: batches staged
while MySQL is slow or down, SIGKILL with a backlog, batch order over groups and
crashes (I8), a MySQL outage ridden out, terminal errors and stopping with a
backlog."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pymysql
from deltalake import DeltaTable

from devtools.spark_job import JobProcess
from tests.helpers import (
    LABELLED_KEYS,
    config_for,
    labelled_table,
    landing_files,
    rng,
    started_until_applied,
    totals,
)


@contextmanager
def k0_locked(db, table: str) -> Iterator[None]:
    """Hold the row lock on k0: every batch waits for it in MySQL, so staged
    batches pile up behind the committer."""
    holder = db.connect()
    with holder.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"SELECT * FROM {table} WHERE k = 'k0' FOR UPDATE")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


def staged_and_acked(db, tmp_path: Path, sink_id: str) -> tuple[int, int]:
    wal = tmp_path / "wal"
    staged = (
        DeltaTable(str(wal)).transaction_version(sink_id)
        if (wal / "_delta_log").exists()
        else None
    )
    try:
        ((acked,),) = db.rows("SELECT COALESCE(MAX(batch_id), -1) FROM wal_sink_ack")
    except pymysql.err.ProgrammingError:  # the job has not created it yet
        acked = -1
    return (-1 if staged is None else staged), acked


def wait_for_backlog(db, tmp_path, sink_id, job, backlog: int, timeout=180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        staged, acked = staged_and_acked(db, tmp_path, sink_id)
        if staged - acked >= backlog:
            return
        assert time.monotonic() < deadline and job.proc.poll() is None, job.tail()
        time.sleep(0.3)


def assert_every_batch_applied_once(db, tmp_path, sink_id: str) -> None:
    staged, acked = staged_and_acked(db, tmp_path, sink_id)
    assert acked == staged
    ids = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]
    assert ids == list(range(staged + 1))


def test_killed_with_a_backlog_restarts_exact_and_in_batch_order(db, tmp_path):
    """SIGKILL while several batches are staged and not applied, at random points,
    twice; the restart is exact (``add`` columns) and I8 holds: batch N+1's effects
    never land before batch N's, whatever grouping, backlogs and crashes do — a
    plain overwrite column ends with the last batch's value, for every key, and
    every change MySQL made came in batch order."""
    labelled_table(db, "ordered")
    # Every change a batch makes, in the order MySQL applies it.
    db.execute("DROP TABLE IF EXISTS ordered_audit")
    db.execute(
        "CREATE TABLE ordered_audit (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
        "k VARCHAR(16), label VARCHAR(8)) ENGINE=InnoDB"
    )
    db.execute(
        "CREATE TRIGGER ordered_changes AFTER UPDATE ON ordered FOR EACH ROW "
        "INSERT INTO ordered_audit (k, label) VALUES (NEW.k, NEW.label)"
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    files = 40
    config = config_for(db, tmp_path, "ordered", wal="max_pending = 10")
    config.write_text(
        config.read_text().replace(
            'merge = { amount = "add" }',
            'merge = { amount = "add" }\nmax_transaction_rows = 14',  # ~2 per group
        )
    )
    log = tmp_path / "job.log"
    stop = threading.Event()

    def arrive() -> None:
        for i in range(files):  # every file sets every key's label
            label = f"f{i:04d}"
            lines = [
                json.dumps({"k": k, "amount": "1", "label": label})
                for k in LABELLED_KEYS
            ]
            tmp = landing / f".{label}.tmp"
            tmp.write_text("\n".join(lines) + "\n")
            os.utime(tmp, (1_700_000_000 + i,) * 2)
            tmp.rename(landing / f"{label}.json")
            time.sleep(0.25)

    def stall_now_and_then() -> None:
        while not stop.is_set():
            with k0_locked(db, "ordered"):
                stop.wait(3.5)
            stop.wait(1.0)

    threads = [
        threading.Thread(target=arrive),
        threading.Thread(target=stall_now_and_then),
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in range(2):
            job = started_until_applied(config, log)
            wait_for_backlog(db, tmp_path, "ordered", job, backlog=rng.randint(2, 4))
            time.sleep(rng.uniform(0, 1.5))
            job.kill()
    finally:
        threads[0].join()
        stop.set()
        threads[1].join()
    drain = JobProcess(config, log, "--available-now")
    assert drain.wait() == 0, drain.tail()
    rows = db.rows("SELECT k, amount, label FROM ordered ORDER BY k")
    assert rows == [(k, Decimal(files), f"f{files - 1:04d}") for k in LABELLED_KEYS]
    for k in LABELLED_KEYS:  # each batch once, and in batch order
        seen = [
            r[0]
            for r in db.rows(
                "SELECT label FROM ordered_audit WHERE k = %s ORDER BY id", (k,)
            )
        ]
        assert seen == [f"f{i:04d}" for i in range(files)], (k, seen)
    assert_every_batch_applied_once(db, tmp_path, "ordered")
    grouped = db.rows(
        "SELECT COUNT(*) FROM wal_sink_ack GROUP BY apply_id HAVING COUNT(*) > 1"
    )
    assert grouped, "some batches shared a transaction"


def test_mysql_down_for_half_a_minute_does_not_stop_the_job(db, mariadb, tmp_path):
    labelled_table(db, "outage")
    config = config_for(
        db,
        tmp_path,
        "outage",
        wal="max_pending = 200",
        extra='restart = { strategy = "none" }',
    )
    expected = landing_files(tmp_path / "landing", 2)
    log = tmp_path / "job.log"
    job = started_until_applied(config, log)
    feeding = threading.Event()

    def feed() -> None:
        i = 2
        while not feeding.is_set():
            for k, a in landing_files(tmp_path / "landing", 1, first=i).items():
                expected[k] = expected.get(k, Decimal(0)) + a
            i += 1
            time.sleep(0.5)

    feeder = threading.Thread(target=feed)
    feeder.start()
    before, _ = staged_and_acked(db, tmp_path, "outage")
    mariadb.stop()  # SIGKILL
    try:
        time.sleep(30)
        during = DeltaTable(str(tmp_path / "wal")).transaction_version("outage")
        assert job.proc.poll() is None, job.tail()
    finally:
        mariadb.start()
    assert during >= before + 10, "staging went on while MySQL was down"
    feeding.set()
    feeder.join()
    deadline = time.monotonic() + 180
    while True:
        staged, acked = staged_and_acked(db, tmp_path, "outage")
        files = len(list((tmp_path / "landing").glob("*.json")))
        if acked == staged == files - 1:
            break
        assert time.monotonic() < deadline and job.proc.poll() is None, job.tail()
        time.sleep(0.5)
    os.killpg(job.proc.pid, signal.SIGTERM)
    assert job.wait(timeout=120) == 0, job.tail()
    assert totals(db, "outage") == expected
    assert_every_batch_applied_once(db, tmp_path, "outage")
    assert "outage budget" in job.text()


def test_terminal_commit_error_stops_the_job_with_its_message(db, tmp_path):
    labelled_table(db, "doomed")
    landing_files(tmp_path / "landing", 3)
    config = config_for(db, tmp_path, "doomed")
    log = tmp_path / "job.log"
    job = started_until_applied(config, log)
    while "batch 2 applied" not in log.read_text(errors="replace"):
        assert job.proc.poll() is None, job.tail()
        time.sleep(0.3)
    db.execute("DROP TABLE doomed")
    landing_files(tmp_path / "landing", 2, first=3)
    assert job.wait(timeout=180) == 1, job.tail()
    errors = [line for line in job.text().splitlines() if " ERROR wal_sink" in line]
    assert errors and "MySQL error 1146" in errors[-1], job.tail()
    assert "table 'doomed'" in errors[-1]


def test_sigterm_applies_the_backlog_and_a_second_one_leaves_it_staged(db, tmp_path):
    labelled_table(db, "stopped")
    expected = landing_files(tmp_path / "landing", 16)
    config = config_for(
        db, tmp_path, "stopped", wal="max_pending = 8", extra='stop_timeout = "5m"'
    )
    log = tmp_path / "job.log"
    # Two SIGTERMs with MySQL stuck: the job stops at once, the backlog stays staged.
    job = started_until_applied(config, log)
    with k0_locked(db, "stopped"):
        wait_for_backlog(db, tmp_path, "stopped", job, backlog=3)
        os.killpg(job.proc.pid, signal.SIGTERM)
        time.sleep(2)
        signalled = time.monotonic()
        os.killpg(job.proc.pid, signal.SIGTERM)
        assert job.wait(timeout=60) == 0, job.tail()
        assert time.monotonic() - signalled < 30
        staged, acked = staged_and_acked(db, tmp_path, "stopped")
        assert staged > acked, "the backlog stays staged"
    assert "not yet applied; the next start applies them" in job.text()
    # One SIGTERM: once MySQL moves again the committer applies the backlog, exit 0.
    offset = log.stat().st_size
    job = started_until_applied(config, log)
    with k0_locked(db, "stopped"):
        wait_for_backlog(db, tmp_path, "stopped", job, backlog=3)
        os.killpg(job.proc.pid, signal.SIGTERM)
        time.sleep(2)
    assert job.wait(timeout=180) == 0, job.tail()
    assert "query finished: stopped" in log.read_text()[offset:]
    assert_every_batch_applied_once(db, tmp_path, "stopped")
    drain = JobProcess(config, log, "--available-now")
    assert drain.wait() == 0, drain.tail()
    assert totals(db, "stopped") == expected
    assert_every_batch_applied_once(db, tmp_path, "stopped")
