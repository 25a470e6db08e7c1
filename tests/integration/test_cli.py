"""The wal-sink CLI as users run it: a real process, against a real WAL and MariaDB.

Exit codes are checked on every call (and status repeatedly): a pyarrow/delta-rs
abort at interpreter exit must not turn success into 134 (docs/stack.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.helpers import (
    REPO,
    WAL_SINK,
    cli,
    delta_log,
    ops_config,
    ops_sink,
    totals,
    write_config,
)
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

SCHEMA = "k STRING, amount DECIMAL(12,2)"
STATUS_KEYS = {
    "sink_id",
    "pending_batches",
    "commit_lag_seconds",
    "outbox_rows",
    "quarantine_entries",
    "quarantine_open",
    "quarantine_retried",
    "quarantine_failed",
    "repairs_applied",
    "repairs_pending",
    "wal_path",
    "wal_exists",
    "staged_batches",
    "staged_first",
    "staged_last",
    "last_staged_txn",
    "wal_rows",
    "wal_bytes",
    "wal_files",
    "ack_tables_exist",
    "acked_batches",
    "acked_first",
    "acked_last",
    "unacked",
    "rows_applied",
    "rows_deleted",
    "rows_quarantined",
    "quarantined_batches",
    "rows_skipped",
    "tombstones",
    "last_commit_at",
    "lag_seconds",
    "lag_batches",
    "lease_epoch",
    "lease_holder",
    "lease_acquired_at",
    "tables",
}


@pytest.fixture
def wal_state(spark, db, tmp_path):
    """Batches 0, 1, 2 staged; 0 and 2 acked, 1 not. Returns the config path."""
    config_path, instance, committer = ops_sink(db, tmp_path)
    for b in range(3):
        rows = [(f"k{i}", Decimal(b + 1)) for i in range(4)]
        stage(
            spark.createDataFrame(rows, SCHEMA),
            WalWriter(instance.config.wal_path, "ops"),
            b,
        )
    committer.apply(0)
    committer.apply(2)
    instance.close()
    return config_path


def test_status_json_is_stable_and_exits_zero_every_time(wal_state):
    def status() -> dict:
        r = cli(wal_state, "status", "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    asked = time.time()
    st = status()
    answered = time.time()
    others = [status() for _ in range(5)]
    assert set(st) == STATUS_KEYS
    assert (st["staged_batches"], st["acked_batches"], st["unacked"]) == (3, 2, [1])
    # Batch 1, unacked, has waited since its files were staged.
    wal = DeltaTable(str(wal_state.parent / "wal"))
    files = pa.table(wal.get_add_actions(flatten=True)).to_pylist()
    staged_at = max(
        f["modification_time"] / 1000
        for f in files
        if f["partition._wal_batch_id"] == 1
    )
    assert st["pending_batches"] == 1
    assert asked - staged_at - 0.001 <= st["commit_lag_seconds"]
    assert st["commit_lag_seconds"] <= answered - staged_at + 0.001
    assert (st["staged_first"], st["staged_last"], st["last_staged_txn"]) == (0, 2, 2)
    assert (st["rows_applied"], st["wal_rows"], st["lag_batches"]) == (8, 12, 0)
    assert st["lease_epoch"] == 1 and st["wal_files"] == len(files)
    assert st["tables"] == {
        "ops_totals": {
            "rows_applied": 8,
            "rows_deleted": 0,
            "rows_quarantined": 0,
            "rows_skipped": 0,
            "tombstones": None,
            "history_events": None,
        }
    }, "one table: its counts are the ack rows'"
    for other in others:
        clocks = ("lag_seconds", "commit_lag_seconds")
        assert {k: v for k, v in other.items() if k not in clocks} == {
            k: v for k, v in st.items() if k not in clocks
        }


def test_status_for_people_shows_pending_batches(wal_state):
    r = cli(wal_state, "status")
    assert r.returncode == 0, r.stderr
    assert "1 staged, not applied: 1; the oldest waits" in r.stdout


def test_recover_applies_unacked_then_has_nothing_to_do(wal_state, db):
    r = cli(wal_state, "recover")
    assert r.returncode == 0, r.stderr
    assert "batch 1: 4 rows" in r.stdout
    assert totals(db) == {f"k{i}": Decimal(6) for i in range(4)}
    r = cli(wal_state, "recover")
    assert r.returncode == 0 and "nothing to recover" in r.stdout


def test_replay_without_force_skips_acked(wal_state, db):
    r = cli(wal_state, "replay", "--from", "0", "--to", "2")
    assert r.returncode == 0, r.stderr
    assert "skipping acked batch(es) 0, 2" in r.stdout
    assert totals(db) == {f"k{i}": Decimal(6) for i in range(4)}


def test_replay_dry_run_changes_nothing(wal_state, db, tmp_path):
    before = (
        totals(db),
        db.rows("SELECT * FROM wal_sink_ack ORDER BY batch_id"),
        db.rows("SELECT * FROM wal_sink_lease"),
        delta_log(tmp_path),
    )
    r = cli(wal_state, "replay", "--from", "0", "--to", "5", "--force", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "would apply 3 batch(es)" in r.stdout and "not in the WAL" in r.stdout
    assert "AGAIN" in r.stderr
    after = (
        totals(db),
        db.rows("SELECT * FROM wal_sink_ack ORDER BY batch_id"),
        db.rows("SELECT * FROM wal_sink_lease"),
        delta_log(tmp_path),
    )
    assert after == before


def test_forced_replay_of_add_columns_asks_first(wal_state, db):
    r = cli(wal_state, "replay", "--from", "0", "--to", "0", "--force", input="n\n")
    assert r.returncode == 1 and "nothing changed" in r.stderr
    assert totals(db) == {f"k{i}": Decimal(4) for i in range(4)}
    r = cli(wal_state, "replay", "--from", "0", "--to", "0", "--force", "--yes")
    assert r.returncode == 0, r.stderr
    assert totals(db) == {f"k{i}": Decimal(5) for i in range(4)}


def test_purge_keeps_unacked_and_vacuum_frees_crash_leftovers(wal_state, db, tmp_path):
    wal = tmp_path / "wal"
    r = cli(wal_state, "purge", "--before", "3", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert (
        "would remove 2 acked batch(es)" in r.stdout and "keeping unacked" in r.stdout
    )
    # What a crash leaves: an attempt's Parquet never committed, temporary commit
    # files of delta-rs (NNN.json#N) and of Delta (.NNN.json.<id>.tmp).
    orphan = wal / "_wal_batch_id=7" / "0ddba11" / "part-00000-orphan.c000.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"x" * 4096)
    temp_commits = [
        wal / "_delta_log" / ".00000000000000000009.json.0b1c.tmp",
        wal / "_delta_log" / "00000000000000000009.json#1",
    ]
    for temp in temp_commits:
        temp.write_text("{}")
    old = time.time() - 7200
    for p in (orphan, *temp_commits, orphan.parent, orphan.parent.parent):
        os.utime(p, (old, old))
    log_before = delta_log(tmp_path)
    text = wal_state.read_text()  # no job stages: vacuum may take the fresh files
    wal_state.write_text(
        text.replace("[mysql]", 'min_vacuum_retention = "0s"\n\n[mysql]')
    )
    r = cli(wal_state, "purge", "--before", "3", "--vacuum", "--retain", "0s")
    assert r.returncode == 0, r.stderr
    assert "removing 2 acked batch(es)" in r.stdout and "vacuum freed" in r.stdout
    # Ack rows of purged batches go too, but the newest (2) stays (I7, recovery).
    assert "dropped 1 ack row(s)" in r.stdout
    assert db.rows("SELECT batch_id FROM wal_sink_ack") == [(2,)]
    assert not orphan.exists() and not any(t.exists() for t in temp_commits)
    assert not (wal / "_wal_batch_id=7").exists(), "emptied directories removed"
    from deltalake import DeltaTable

    remaining = {
        Path(u).relative_to(wal).parts[0] for u in DeltaTable(str(wal)).file_uris()
    }
    assert remaining == {"_wal_batch_id=1"}
    assert not any((wal / "_wal_batch_id=0").rglob("*.parquet")), "vacuumed"
    assert len(delta_log(tmp_path)) > len(log_before) - 1
    r = cli(wal_state, "recover")
    assert r.returncode == 0 and "batch 1: 4 rows" in r.stdout


def test_inspect_shows_rows_and_refuses_unknown_batch(wal_state):
    r = cli(wal_state, "inspect", "1", "--limit", "2")
    assert r.returncode == 0, r.stderr
    assert "batch 1: 4 rows" in r.stdout and "showing 2" in r.stdout
    assert "k0" in r.stdout and "_wal_seq" not in r.stdout
    r = cli(wal_state, "inspect", "9")
    assert r.returncode == 1
    assert (
        r.stderr.strip() == "error: batch 9 is not in the WAL (never staged, or purged)"
    )


def test_init_db_is_idempotent(wal_state, db):
    """A second init-db (and a third) leaves the sink's tables and their rows as
    they were: the acks that say what is applied survive it."""

    def sink_rows():
        return (
            db.rows("SELECT batch_id, row_count, apply_id, state FROM wal_sink_ack"),
            db.rows("SELECT sink_id, epoch, holder FROM wal_sink_lease"),
        )

    before = sink_rows()
    assert [r[:2] for r in before[0]] == [(0, 4), (2, 4)] and len(before[1]) == 1
    for _ in range(2):
        r = cli(wal_state, "init-db")
        assert r.returncode == 0, r.stderr
        assert sink_rows() == before
    st = json.loads(cli(wal_state, "status", "--json").stdout)
    assert (st["acked_batches"], st["unacked"]) == (2, [1])


def test_init_db_names_every_table_it_creates(db, tmp_path):
    """From nothing: each table init-db makes is named in its output, and it names
    no table it did not make."""
    made = (
        "wal_sink_ack",
        "wal_sink_lease",
        "wal_sink_outbox",
        "wal_sink_retry",
        "cdc_totals_tombstones",
        "cdc_totals_tombstones_truncate",
    )
    for table in ("cdc_totals", *made):
        db.execute(f"DROP TABLE IF EXISTS {table}")
    db.execute(
        "CREATE TABLE cdc_totals (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(14,2), "
        "seq BIGINT) ENGINE=InnoDB"
    )
    before = {t for (t,) in db.rows("SHOW TABLES")}
    config = write_config(
        tmp_path / "cdc.toml",
        db,
        table="cdc_totals",
        mysql='version_column = "seq"',
        sections='[cdc]\nop_column = "op"\norder_by = "seq"\ntruncate_values = ["T"]\n',
    )
    r = cli(config, "init-db")
    assert r.returncode == 0, r.stderr
    created = {t for (t,) in db.rows("SHOW TABLES")} - before
    named = set(re.findall(r"\b(?:wal_sink|cdc_totals)_\w+", r.stdout))
    assert created == named == set(made), r.stdout


def test_config_and_environment_errors_are_one_line(db, tmp_path, mariadb):
    r = cli(tmp_path / "missing.toml", "status")
    assert (
        r.returncode == 2 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr
    )
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "[sink]\nid = 'x'\n[wal]\npath = 'w'\n[mysql]\nurl = 'mysql+pymysql://u@h/d'\n"
        "table = 't'\nkey = ['k']\ncolour = 'red'\n"
    )
    r = cli(bad, "status")
    assert (
        r.returncode == 2 and "mysql.colour" in r.stderr and r.stderr.count("\n") == 1
    )
    good = ops_config(tmp_path / "ok.toml", db)
    env = {k: v for k, v in os.environ.items() if k != "WAL_SINK_MYSQL_PASSWORD"}
    r = subprocess.run(
        [WAL_SINK, "-c", str(good), "status"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert r.returncode == 2 and "export WAL_SINK_MYSQL_PASSWORD" in r.stderr
    unreachable = ops_config(
        tmp_path / "down.toml",
        db,
        url=f"mysql+pymysql://sink@127.0.0.1:{mariadb.port + 1}/x",
    )
    r = cli(unreachable, "status")
    assert r.returncode == 1 and r.stderr.startswith("error: MySQL error 2003")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert os.environ["WAL_SINK_MYSQL_PASSWORD"] not in r.stderr + r.stdout


def test_inspect_quarantine_shows_records_and_reasons(spark, db, tmp_path):
    config_path, instance, committer = ops_sink(db, tmp_path, key_width=4)
    rows = [("ok", Decimal(1)), ("far-too-long", Decimal(2)), (None, Decimal(3))]
    stage(
        spark.createDataFrame(rows, SCHEMA),
        WalWriter(instance.config.wal_path, "ops"),
        0,
    )
    assert committer.apply(0).quarantined == 2
    instance.close()
    r = cli(config_path, "inspect", "--quarantine")
    assert r.returncode == 0, r.stderr
    assert "showing 2" in r.stdout and "far-too-long" in r.stdout
    assert "MySQL error 1406" in r.stdout and "null key column(s): k" in r.stdout
    r = cli(config_path, "status", "--json")
    assert json.loads(r.stdout)["rows_quarantined"] == 2
    assert cli(config_path, "inspect").returncode == 2


def test_replay_refuses_to_run_ahead_of_unapplied_batches(wal_state, db):
    """I8: with batch 1 staged and not applied, replaying 2 would apply it first."""
    before = totals(db)
    r = cli(wal_state, "replay", "--from", "2", "--to", "2", "--force", "--yes")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "batch(es) 1 are staged and not applied yet" in r.stderr
    assert "wal-sink recover" in r.stderr
    assert totals(db) == before
    assert cli(wal_state, "recover").returncode == 0
    r = cli(wal_state, "replay", "--from", "2", "--to", "2", "--force", "--yes")
    assert r.returncode == 0, r.stderr


def test_inspect_needs_no_mysql_password(wal_state):
    env = {k: v for k, v in os.environ.items() if k != "WAL_SINK_MYSQL_PASSWORD"}
    r = subprocess.run(
        [WAL_SINK, "-c", str(wal_state), "inspect", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert r.returncode == 0 and "batch 1: 4 rows" in r.stdout, r.stderr


def test_storage_errors_are_retried_or_one_line(wal_state, tmp_path, db, spark):
    r = cli(wal_state, "recover", env={"WAL_SINK_FAULT": "wal.read:1:eio-once"})
    assert r.returncode == 0 and "batch 1: 4 rows" in r.stdout, r.stderr
    assert "Input/output error" in r.stderr and "retry 1" in r.stderr
    # A file of an unapplied batch lost from the WAL: one line naming it, exit 1.
    from wal_sink.config import load_config
    from wal_sink.wal.reader import WalReader

    for b in range(3, 5):
        rows = [(f"k{i}", Decimal(b)) for i in range(4)]
        writer = WalWriter(str(tmp_path / "wal"), "ops")
        stage(spark.createDataFrame(rows, SCHEMA), writer, b)
    reader = WalReader(load_config(wal_state).wal_path)
    lost = reader.staged_batch(4).files[0].uri.removeprefix("file://")
    Path(lost).unlink()
    r = cli(wal_state, "recover")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(
        f"error: sink 'ops', batch 4: storage error at file://{lost}"
    )
    assert "Traceback" not in r.stderr
    assert (4,) not in db.rows("SELECT batch_id FROM wal_sink_ack")


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_status_watch_refreshes_in_place_on_a_terminal_until_ctrl_c(wal_state):
    """In a pseudo-terminal: the figures are redrawn in place every second, batch 1
    applied between two readings shows as rows/s, and Ctrl-C exits 0."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    proc = subprocess.Popen(
        [WAL_SINK, "-c", str(wal_state), "status", "--watch", "--interval", "1"],
        stdin=child,
        stdout=child,
        stderr=child,
        cwd=REPO,
        env={**env, "TERM": "xterm-256color"},
    )
    os.close(child)
    received = bytearray()

    def drain() -> None:
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:  # EIO: the child side is closed
                return
            if not data:
                return
            received.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def renders() -> list[str]:
        text = ANSI.sub("", received.decode(errors="replace"))
        return text.split("sink ops  at ")[1:]

    def wait_for(condition, what: str) -> None:
        deadline = time.monotonic() + 60
        while not condition():
            assert proc.poll() is None, received.decode(errors="replace")
            assert time.monotonic() < deadline, f"no {what}: {renders()}"
            time.sleep(0.1)

    try:
        wait_for(lambda: len(renders()) >= 2, "refresh")
        assert "1 batch(es) staged, not applied" in renders()[0]
        assert cli(wal_state, "recover").returncode == 0
        seen = len(renders())
        wait_for(lambda: len(renders()) >= seen + 2, "two refreshes after recover")
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0, received.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
        os.close(main)
    shown = renders()
    raw = received.decode(errors="replace")
    assert "\x1b[1A" in raw and "\x1b[2K" in raw, "redrawn in place (cursor up)"
    assert "0 batch(es) staged, not applied" in shown[-1]
    assert re.search(r"rows applied\s+12\b", shown[-1]), shown[-1]
    rates = [re.search(r"rows/s\s+(\S+)", r).group(1) for r in shown]
    assert rates[0] == "-" and any(float(r) > 0 for r in rates[1:]), rates
    assert "Traceback" not in raw and "Aborted" not in raw


def test_status_watch_prints_one_line_per_reading_when_not_a_terminal(wal_state):
    for extra in ((), ("--json",)):
        proc = subprocess.Popen(
            [
                WAL_SINK,
                "-c",
                str(wal_state),
                "status",
                "--watch",
                "--interval",
                "0.5",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        lines = [proc.stdout.readline() for _ in range(3)]
        os.kill(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "\x1b" not in "".join(lines) + rest, "no escape codes in a pipe"
        if extra:
            readings = [json.loads(line) for line in lines]
            assert [r["pending_batches"] for r in readings] == [1, 1, 1]
            assert readings[0]["rows_per_second"] is None
            assert readings[2]["rows_per_second"] == 0.0
            assert readings[2]["rows_applied"] == 8 and readings[2]["acked_last"] == 2
        else:
            pattern = (
                r"\d\d:\d\d:\d\d sink ops: pending=1 commit_lag_s=\d+\.\d "
                r"last_commit=\S+ last_acked=2 rows_applied=8 rows_per_s=(-|0\.0)\n"
            )
            assert all(re.fullmatch(pattern, line) for line in lines), lines
    r = cli(wal_state, "status", "--interval", "1")
    assert r.returncode == 2 and "--interval goes with --watch" in r.stderr
