"""`wal-sink quarantine retry`: rows the committer set aside come back once the target
is fixed, exactly once — two retries at once, a lost COMMIT reply, a second retry —
through the sink's own upserts: the version guard keeps an older retried row from
overwriting newer data, and a retried CDC delete leaves its tombstone.

Rows are set aside by the real committer (staged with Spark, applied to MariaDB);
retries run as real `wal-sink` processes."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from tests.helpers import (
    ADD_AMOUNT,
    WAL_SINK,
    cli,
    wait_for_lock_waits,
    write_config,
)
from wal_sink.config import load_config
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage

SINK_TABLES = ("wal_sink_ack", "wal_sink_lease", "wal_sink_outbox", "wal_sink_retry")
SCHEMA = "k STRING, note STRING, amount DECIMAL(12,2), seq BIGINT"


def fresh(db, *ddl: str) -> None:
    for t in ("retry_child", "retry_items_tombstones", "retry_items", *SINK_TABLES):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for statement in ddl:
        db.execute(statement)


def items_table(db) -> None:
    fresh(
        db,
        "CREATE TABLE retry_items (k VARCHAR(8) PRIMARY KEY, note VARCHAR(4), "
        "amount DECIMAL(14,2), seq BIGINT) ENGINE=InnoDB",
    )


def retry_config(tmp_path: Path, db, name: str, extra: str = "") -> Path:
    """Sink ``name`` adding amounts into retry_items, on a WAL of its own; ``extra``
    adds lines to [mysql] (and sections after it)."""
    return write_config(
        tmp_path / f"{name}.toml",
        db,
        table="retry_items",
        wal_path=tmp_path / f"wal_{name}",
        mysql=f"{ADD_AMOUNT}\n{extra}",
    )


def apply_batches(spark, config_path: Path, *batches: list[tuple]) -> None:
    """Stage each list of (k, note, amount, seq) rows as the next batch and apply it
    with the sink's committer."""
    instance = SinkInstance(load_config(config_path))
    committer = instance.start()
    newest = instance.known.newest
    first = 0 if newest is None else newest + 1
    for batch_id, rows in enumerate(batches, start=first):
        schema = "op STRING, " + SCHEMA if len(rows[0]) == 5 else SCHEMA
        stage(
            spark.createDataFrame(rows, schema).coalesce(1), instance.writer, batch_id
        )
        committer.apply(batch_id)
    instance.close()


def items(db) -> dict[str, tuple]:
    return {
        r[0]: r[1:] for r in db.rows("SELECT k, note, amount, seq FROM retry_items")
    }


def listed(config_path: Path, *args: str) -> list[dict]:
    r = cli(config_path, "quarantine", "list", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def retry_rows(db, sink_id: str) -> list[tuple]:
    return db.rows(
        "SELECT entry_id, state, retry_id FROM wal_sink_retry WHERE sink_id = %s",
        (sink_id,),
    )


def test_two_retries_at_once_apply_each_entry_once(spark, db, tmp_path):
    items_table(db)
    config = retry_config(tmp_path, db, "twice")
    long = "x" * 10
    batches = [
        [(f"k{i}", long if i % 3 == 0 else "ok", Decimal(b + 1), b) for i in range(30)]
        for b in range(4)
    ]
    apply_batches(spark, config, *batches)
    assert len(listed(config)) == 40  # 10 per batch: their note is too long
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(16)")
    # Both retries plan while the sink's lease row is locked, so they plan the same
    # entries and then queue on the lock: only the retry rows' locking read can keep
    # the second from applying what the first did.
    with db.connect() as holder, holder.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT epoch FROM wal_sink_lease FOR UPDATE")
        procs = [
            subprocess.Popen(
                [WAL_SINK, "-c", str(config), "quarantine", "retry", "--yes"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        wait_for_lock_waits(db, 2, detail=lambda: [p.poll() for p in procs])
        holder.commit()
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    said = "".join(out for out, _ in outputs)
    assert "retrying 40 open record(s) of 4 batch(es)" in said
    applied = sum(
        int(line.split(": ")[1].split(" applied")[0])
        for out, _ in outputs
        for line in out.splitlines()
        if line.startswith("batch ")
    )
    assert applied == 40, said
    assert "retried meanwhile by another retry" in said
    expected = {
        f"k{i}": ("x" * 10 if i % 3 == 0 else "ok", Decimal(10), 3) for i in range(30)
    }
    assert items(db) == expected
    assert len(retry_rows(db, "twice")) == 40
    assert {s for _, s, _ in retry_rows(db, "twice")} == {"retried"}
    # A third retry finds nothing open.
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 0 and "retrying 0 open record(s)" in r.stdout, r.stdout
    assert "40 selected record(s) were retried before" in r.stdout
    assert items(db) == expected


def test_a_lost_commit_reply_is_read_back_not_applied_again(spark, db, tmp_path):
    items_table(db)
    config = retry_config(tmp_path, db, "lost")
    apply_batches(
        spark, config, [("a", "too long", Decimal(5), 1), ("b", "ok", Decimal(1), 1)]
    )
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(16)")
    r = cli(
        config,
        "quarantine",
        "retry",
        "--yes",
        env={"WAL_SINK_FAULT": "retry.after_commit:0:lost-once"},
    )
    assert r.returncode == 0, r.stderr
    assert "batch 0: 1 applied, 0 failed again" in r.stdout
    assert items(db)["a"] == ("too long", Decimal(5), 1)


def test_a_retried_row_older_than_the_stored_version_changes_nothing(
    spark, db, tmp_path
):
    items_table(db)
    config = retry_config(tmp_path, db, "versions", 'version_column = "seq"')
    apply_batches(
        spark,
        config,
        [("a", "older and too long", Decimal(1), 1), ("b", "bad one", Decimal(2), 1)],
        [("a", "new", Decimal(10), 5)],
    )
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(32)")
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 0, r.stderr + r.stdout
    # a's retried row is older than the stored one: its note and version change
    # nothing; its amount adds (add columns always add, once).
    assert items(db) == {
        "a": ("new", Decimal(11), 5),
        "b": ("bad one", Decimal(2), 1),
    }
    assert {e["state"] for e in listed(config)} == {"retried"}


def test_retried_cdc_deletes_leave_tombstones_and_stale_upserts_stay_out(
    spark, db, tmp_path
):
    items_table(db)
    db.execute(
        "CREATE TABLE retry_child (id INT PRIMARY KEY, parent VARCHAR(8), "
        "FOREIGN KEY (parent) REFERENCES retry_items (k)) ENGINE=InnoDB"
    )
    config = retry_config(
        tmp_path,
        db,
        "cdc",
        'version_column = "seq"\ntombstone_table = "retry_items_tombstones"\n\n'
        '[cdc]\nop_column = "op"\norder_by = "seq"',
    )
    apply_batches(spark, config, [("I", "p", "ok", Decimal(1), 1)])
    db.execute("INSERT INTO retry_child VALUES (1, 'p')")
    apply_batches(
        spark,
        config,
        [("D", "p", None, None, 2), ("I", "q", "far too long", Decimal(3), 1)],
        [("D", "q", None, None, 3)],
    )
    entries = {e["record"]["k"]: e for e in listed(config)}
    # a refused delete is set aside whole, as an upsert is (not its key alone)
    assert entries["p"]["record"] == {
        "op": "D",
        "k": "p",
        "note": None,
        "amount": None,
        "seq": 2,
    }
    assert "1451" in entries["p"]["reason"]
    assert entries["q"]["kind"] == "row" and "1406" in entries["q"]["reason"]
    # The operator removes the child row and widens the column.
    db.execute("DELETE FROM retry_child")
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(16)")
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "batch 1: 2 applied (1 stale: a newer delete), 0 failed again" in r.stdout
    assert items(db) == {}, "p deleted; q's upsert is older than its delete"
    assert db.rows("SELECT k, _wal_version FROM retry_items_tombstones ORDER BY k") == [
        ("p", 2),
        ("q", 3),
    ]
    assert {e["state"] for e in listed(config)} == {"retried"}


def test_records_failing_again_stay_open_with_their_new_reason(spark, db, tmp_path):
    items_table(db)
    config = retry_config(tmp_path, db, "again")
    apply_batches(
        spark,
        config,
        [("a", "too long", Decimal(1), 1), ("b", "also too long", Decimal(2), 1)],
    )
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(9)")  # a fits, b not yet
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 1
    assert "batch 0: 1 applied, 1 failed again" in r.stdout
    assert "1 record(s) were refused again and stay open" in r.stderr
    states = {e["record"]["k"]: (e["state"], e["reason"]) for e in listed(config)}
    assert states["a"][0] == "retried"
    assert states["b"][0] == "failed" and "1406" in states["b"][1]
    assert len(listed(config, "--reason", "DATA TOO LONG")) == 2
    assert listed(config, "--reason", "1452") == []
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(16)")
    r = cli(config, "quarantine", "retry", "--batch", "0", "--yes")
    assert r.returncode == 0 and "batch 0: 1 applied, 0 failed again" in r.stdout
    assert items(db) == {
        "a": ("too long", Decimal(1), 1),
        "b": ("also too long", Decimal(2), 1),
    }
    status = json.loads(cli(config, "status", "--json").stdout)
    assert (
        status["quarantine_entries"],
        status["quarantine_open"],
        status["quarantine_retried"],
        status["quarantine_failed"],
    ) == (2, 0, 2, 0)


def test_purge_removes_retried_entries_with_their_batch_and_open_ones_only_when_asked(
    spark, db, tmp_path
):
    items_table(db)
    config = retry_config(tmp_path, db, "purged")
    apply_batches(
        spark,
        config,
        [("a", "too long", Decimal(1), 1)],
        [("b", "too long", Decimal(2), 1)],
        [("c", "fine", Decimal(3), 1)],
    )
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(16)")
    r = cli(config, "quarantine", "retry", "--batch", "0", "--yes")
    assert r.returncode == 0, r.stderr
    r = cli(config, "purge", "--before", "2")
    assert r.returncode == 0, r.stderr
    assert "removing 1 quarantine entr(ies): 1 retried of the purged batches" in (
        r.stdout
    )
    assert [e["record"]["k"] for e in listed(config)] == ["b"], "b is open: it stays"
    assert retry_rows(db, "purged") == []
    r = cli(config, "purge", "--quarantine-older-than", "1 hour", "--dry-run")
    assert "would remove 0 quarantine entr(ies)" in r.stdout
    r = cli(config, "purge", "--quarantine-older-than", "1 second")
    assert r.returncode == 0, r.stderr
    assert "(1 of them open)" in r.stdout
    assert listed(config) == []
    status = json.loads(cli(config, "status", "--json").stdout)
    assert (status["quarantine_entries"], status["quarantine_open"]) == (0, 0)


def test_an_entry_retried_after_its_batch_was_purged_goes_with_a_later_purge(
    spark, db, tmp_path
):
    items_table(db)
    config = retry_config(tmp_path, db, "late_retry")
    apply_batches(
        spark,
        config,
        [("a", "too long", Decimal(1), 1)],
        [("b", "fine", Decimal(2), 1)],
        [("c", "fine", Decimal(3), 1)],
    )
    assert cli(config, "purge", "--before", "1").returncode == 0
    assert [e["record"]["k"] for e in listed(config)] == ["a"], "open: it stays"
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(16)")
    r = cli(config, "quarantine", "retry", "--batch", "0", "--yes")
    assert r.returncode == 0 and "batch 0: 1 applied, 0 failed again" in r.stdout
    r = cli(config, "purge", "--before", "3")
    assert r.returncode == 0, r.stderr
    assert "1 retried of the purged batches" in r.stdout
    assert listed(config) == []


def test_quarantine_list_and_export_need_the_sinks_own_files(db, tmp_path):
    items_table(db)
    config = retry_config(tmp_path, db, "empty")
    r = cli(config, "quarantine", "list")
    assert r.returncode == 0 and "0 entries, showing 0" in r.stdout, r.stderr
    target = tmp_path / "out.jsonl"
    target.write_text("keep me\n")
    r = cli(config, "quarantine", "export", "--to", str(target))
    assert (r.returncode, r.stderr) == (
        2,
        f"error: {target} exists: give another --to, or remove it\n",
    )
    assert target.read_text() == "keep me\n"
    nowhere = tmp_path / "nowhere" / "x"
    r = cli(config, "quarantine", "export", "--to", str(nowhere))
    assert (r.returncode, r.stderr) == (
        2,
        f"error: cannot write {nowhere}: No such file or directory\n",
    )


def test_entries_written_before_entry_ids_get_stable_ones_and_retry_once(
    spark, db, tmp_path
):
    """A quarantine table of 0.3 (no entry_id): two identical entries are two
    entries, each retried once; the table gains the new columns on its next write."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from wal_sink.wal.quarantine import SCHEMA as NOW

    items_table(db)
    config = retry_config(tmp_path, db, "old")
    apply_batches(spark, config, [("a", "ok", Decimal(1), 1)])  # the sink's tables
    old = pa.schema([f for f in NOW if f.name not in ("entry_id", "entry_seq")])
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    entry = {
        "sink_id": "old",
        "batch_id": 0,
        "reason": "MySQL error 1406: (1406, \"Data too long for column 'note'\")",
        "record": json.dumps({"k": "a", "note": "too long", "amount": "2.5"}),
        "recorded_at": when,
        "apply_id": db.rows(
            "SELECT apply_id FROM wal_sink_ack WHERE sink_id = 'old' AND batch_id = 0"
        )[0][0],
    }
    write_deltalake(
        str(tmp_path / "wal_old_quarantine"),
        pa.Table.from_pylist([entry, entry], schema=old),
    )
    first = listed(config)
    assert [e["entry_id"].split("/")[0] for e in first] == ["legacy", "legacy"]
    assert len({e["entry_id"] for e in first}) == 2
    db.execute("ALTER TABLE retry_items MODIFY note VARCHAR(16)")
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 0 and "batch 0: 2 applied" in r.stdout, r.stderr
    assert items(db) == {"a": ("too long", Decimal("6.00"), 1)}
    # A new entry evolves the table; the old ones keep their ids and state.
    apply_batches(spark, config, [("b", "longer than sixteen", Decimal(1), 1)])
    after = {e["entry_id"]: e["state"] for e in listed(config)}
    assert {i: after[i] for i in (e["entry_id"] for e in first)} == {
        e["entry_id"]: "retried" for e in first
    }
    (new,) = [i for i in after if not i.startswith("legacy/")]
    assert after[new] == "open"
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 1 and "batch 1: 0 applied, 1 failed again" in r.stdout
    assert items(db)["a"] == ("too long", Decimal("6.00"), 1)


def test_a_batch_set_aside_whole_is_applied_once_its_column_exists(spark, db, tmp_path):
    """`quarantine-batch` rows (records as staged: zoned times, decimals) come back
    through a retry once the target has the column the batch needed."""
    items_table(db)
    config = retry_config(tmp_path, db, "whole")
    instance = SinkInstance(load_config(config))
    instance.start()
    at = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)
    stage(
        spark.createDataFrame(
            [("a", "n", Decimal("1.25"), 1, at), ("b", None, Decimal(2), 2, None)],
            SCHEMA + ", at TIMESTAMP",
        ).coalesce(1),
        instance.writer,
        0,
    )
    instance.close()
    r = cli(config, "quarantine-batch", "0", "--yes")
    assert r.returncode == 0, r.stderr
    db.execute("ALTER TABLE retry_items ADD COLUMN at DATETIME(6)")
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 0 and "batch 0: 2 applied" in r.stdout, r.stderr
    assert db.rows("SELECT k, note, amount, seq, at FROM retry_items ORDER BY k") == [
        ("a", "n", Decimal("1.25"), 1, at.replace(tzinfo=None)),
        ("b", None, Decimal("2.00"), 2, None),
    ]


def test_entries_of_a_batch_replayed_since_are_not_retried(spark, db, tmp_path):
    """`replay --force` of a batch set aside whole applies its rows from the WAL:
    its earlier entries are superseded, and a retry leaves them alone."""
    items_table(db)
    config = retry_config(tmp_path, db, "replayed")
    instance = SinkInstance(load_config(config))
    instance.start()
    stage(
        spark.createDataFrame(
            [("a", "n", Decimal(1), 1, None)], SCHEMA + ", at TIMESTAMP"
        ),
        instance.writer,
        0,
    )
    instance.close()
    assert cli(config, "quarantine-batch", "0", "--yes").returncode == 0
    db.execute("ALTER TABLE retry_items ADD COLUMN at DATETIME(6)")
    r = cli(config, "replay", "--from", "0", "--to", "0", "--force", "--yes")
    assert r.returncode == 0, r.stderr
    assert [e["kind"] for e in listed(config)] == ["superseded"]
    r = cli(config, "quarantine", "retry", "--yes")
    assert r.returncode == 0, r.stderr
    assert "not retrying 1 record(s): its batch was applied again since" in r.stdout
    assert items(db) == {"a": ("n", Decimal(1), 1)}
