"""``wal-sink verify``: the sink's books balance, and each way they stop balancing
is one line and exit 4 — an ack whose counts disagree with the WAL, a staged batch
below the newest ack without an ack, an undrained outbox, a marker that contradicts
an ack, a row back past its tombstone, tombstones past their retention, per-table
counts that do not add up. Batches staged by pyarrow, applied in process; the CLI
through click's runner (and once as a real process)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.helpers import apply_staged, cli, routed_config, write_config
from wal_sink.cli.commands import main
from wal_sink.config import load_config
from wal_sink.exit_status import FINDINGS, OK, USAGE
from wal_sink.wal.format import SEQ_COLUMN
from wal_sink.wal.writer import WalWriter

SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("op", pa.string()),
        ("seq", pa.int64()),
    ]
)
CDC = '[cdc]\nop_column = "op"\ndelete_values = ["D"]\norder_by = "seq"\n'


def rows(*spec: tuple[str, str, str, int]) -> list[dict]:
    return [{"k": k, "amount": Decimal(a), "op": op, "seq": s} for k, a, op, s in spec]


@pytest.fixture
def books(db, tmp_path):
    """A CDC sink with a version column on vb(k, amount, seq): three batches
    applied, one row of batch 1 set aside (too long a key) and drained; returns a
    function running ``verify`` with more arguments, and the config's path."""
    for t in ("vb", "vb_tombstones", "wal_sink_ack", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("DROP TABLE IF EXISTS wal_sink_retry")
    db.execute(
        "CREATE TABLE vb (k VARCHAR(4) PRIMARY KEY, amount DECIMAL(12,2), "
        "seq BIGINT) ENGINE=InnoDB"
    )
    path = write_config(
        tmp_path / "vb.toml",
        db,
        table="vb",
        sink_id="vb",
        mysql='version_column = "seq"',
        sections=CDC,
    )
    config = load_config(path)
    staged = [
        rows(("a", "1.50", "U", 1), ("b", "2", "U", 1)),
        rows(("c", "3", "U", 2), ("toolong", "4", "U", 2), ("a", "1", "D", 3)),
        rows(("d", "5", "U", 4), ("b", "9", "U", 0)),
    ]
    apply_staged(config, SCHEMA, *staged)

    def verify(*args: str):
        return CliRunner().invoke(main, ["-c", str(path), "verify", *args])

    return verify, path


def test_verify_applied_batches_books_balance(books):
    verify, _ = books
    r = verify()
    assert r.exit_code == OK, r.output
    assert "the books balance" in r.output


def test_verify_as_a_process_exits_with_its_status_every_time(books):
    _, path = books
    for _ in range(3):
        r = cli(path, "verify", "--json")
        assert r.returncode == OK, r.stderr
        assert r.stdout.strip() == "[]"


def test_verify_ack_counts_disagreeing_with_wal_found(books, db):
    verify, _ = books
    db.execute("UPDATE wal_sink_ack SET row_count = row_count + 1 WHERE batch_id = 2")
    r = verify()
    assert r.exit_code == FINDINGS, r.output
    assert "ack-counts: batch 2: the WAL holds 2 row(s) but its ack counts 3" in (
        r.output
    )
    assert "1 finding(s)" in r.output


def test_verify_with_an_acked_batch_without_files_between_staged_ones_balances(
    books,
):
    """A batch committed with no file (an empty one, as wal_sink 0.1 staged it)
    is acked with no rows; the batches around it keep it inside the range of
    acks verify reads, where it has no files to count."""
    verify, path = books
    config = load_config(path)
    writer = WalWriter(config.wal_path, config.sink.id, config.storage)
    assert writer.commit(3, [], SCHEMA.insert(0, pa.field(SEQ_COLUMN, pa.int64())))
    apply_staged(config, SCHEMA, rows(("e", "1", "U", 5)), first=4)
    r = verify()
    assert r.exit_code == OK, r.output


def test_verify_staged_batch_below_newest_ack_without_ack_found(books, db):
    verify, _ = books
    db.execute("DELETE FROM wal_sink_ack WHERE batch_id = 0")
    r = verify()
    assert r.exit_code == FINDINGS, r.output
    assert "unacked: batch 0: staged and not acked, below the newest ack" in r.output


def test_verify_undrained_outbox_found(books, db):
    verify, _ = books
    db.execute(
        "INSERT INTO wal_sink_outbox (sink_id, apply_id, batch_id, reason, record, "
        "recorded_at) VALUES ('vb', REPEAT('0', 32), 1, 'x', '{}', NOW(6))"
    )
    r = verify()
    assert r.exit_code == FINDINGS, r.output
    assert "outbox: 1 set-aside row(s) of batch(es) 1 wait in the outbox" in r.output


def test_verify_marker_naming_the_acked_apply_found(books, db):
    verify, _ = books
    (apply_id,) = db.rows("SELECT apply_id FROM wal_sink_ack WHERE batch_id = 1")[0]
    db.execute(
        "INSERT INTO wal_sink_retry (sink_id, entry_id, batch_id, state, retry_id, "
        "retried_at) VALUES ('vb', %s, 1, 'superseded', REPEAT('1', 32), NOW(6))",
        (f"{apply_id}/1/*",),
    )
    r = verify("--json")
    assert r.exit_code == FINDINGS, r.output
    assert '"check": "quarantine"' in r.output
    assert "a marker says apply" in r.output


def test_verify_entries_of_a_replaced_apply_without_marker_found(books, db):
    verify, _ = books
    (old,) = db.rows("SELECT apply_id FROM wal_sink_ack WHERE batch_id = 1")[0]
    db.execute("UPDATE wal_sink_ack SET apply_id = REPEAT('2', 32) WHERE batch_id = 1")
    r = verify()
    assert r.exit_code == FINDINGS, r.output
    assert "but the ack names apply 22222222222222222222222222222222 and no marker" in (
        r.output
    )
    db.execute(  # what a forced replay writes: the old apply's entries superseded
        "INSERT INTO wal_sink_retry (sink_id, entry_id, batch_id, state, retry_id, "
        "retried_at) VALUES ('vb', %s, 1, 'superseded', REPEAT('2', 32), NOW(6))",
        (f"{old}/1/*",),
    )
    assert "no marker" not in verify().output


def test_verify_set_aside_count_without_its_entries_found(books, db):
    verify, _ = books
    db.execute(
        "UPDATE wal_sink_ack SET quarantined = 2, row_count = row_count - 1 "
        "WHERE batch_id = 1"
    )
    r = verify()
    assert r.exit_code == FINDINGS, r.output
    assert (
        "quarantine: batch 1: its ack counts 2 row(s) set aside, the quarantine "
        "holds 1 of its apply" in r.output
    )


def test_verify_row_written_back_past_its_tombstone_found(books, db):
    verify, _ = books
    db.execute("INSERT INTO vb VALUES ('a', 7, 2)")
    r = verify()
    assert r.exit_code == FINDINGS, r.output
    assert "tombstones: table vb: 1 row(s) are present at or below" in r.output


def test_verify_tombstones_past_retention_found(books, db):
    verify, _ = books
    db.execute("UPDATE vb_tombstones SET _wal_deleted_at = NOW(6) - INTERVAL 8 DAY")
    r = verify()
    assert r.exit_code == FINDINGS, r.output
    assert "tombstones: 1 tombstone(s) older than cdc.tombstone_retention" in (r.output)


ROUTED = pa.schema([("tbl", pa.string()), ("id", pa.int64()), ("name", pa.string())])


def test_verify_routed_sink_per_table_counts_checked(db, tmp_path):
    for t in ("ra", "rb", "wal_sink_ack", "wal_sink_ack_tables"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for t in ("ra", "rb"):
        db.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, name VARCHAR(8))")
    path = routed_config(tmp_path / "routed.toml", db, "routed", ["ra", "rb"])
    batch = [
        {"tbl": "ra", "id": 1, "name": "x"},
        {"tbl": "rb", "id": 1, "name": "y"},
        {"tbl": "nowhere", "id": 2, "name": "z"},
    ]
    apply_staged(load_config(path), ROUTED, batch, batch[:2])
    runner = CliRunner()
    r = runner.invoke(main, ["-c", str(path), "verify"])
    assert r.exit_code == OK, r.output
    db.execute(
        "UPDATE wal_sink_ack_tables SET row_count = row_count + 1 "
        "WHERE table_name = 'rb' AND batch_id = 1"
    )
    r = runner.invoke(main, ["-c", str(path), "verify"])
    assert r.exit_code == FINDINGS, r.output
    assert "ack-counts: the per-table counts (5 upserted" in r.output
    assert "ack rows' (4 upserted" in r.output


def test_verify_before_init_db_is_one_line_usage_error(db, tmp_path):
    db.execute("DROP TABLE IF EXISTS wal_sink_ack")
    path = write_config(tmp_path / "vfresh.toml", db, table="vfresh")
    r = cli(path, "verify")
    assert r.returncode == USAGE, r.stderr
    assert r.stderr.count("\n") == 1
    assert "wal_sink_ack' doesn't exist: the sink's tables are missing" in r.stderr
