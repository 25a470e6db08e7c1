"""The data source's commit on the driver, against real Delta tables (delta-rs on a
local disk; no Spark, no MySQL): commit messages become exactly the batch's add
actions, only the query run that took the WAL last stages (I6), the batch id
agrees with the WAL and the follower (I7), a repeated commit stages nothing (I4),
and at most ``wal.max_pending`` batches wait for MySQL."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from wal_sink.config import config_from_dict
from wal_sink.errors import (
    CheckpointResetError,
    FencedError,
    TerminalError,
    TransientError,
)
from wal_sink.protocol import stage_commit
from wal_sink.protocol.stage_commit import StageCommitter
from wal_sink.storage import Storage
from wal_sink.wal.applied_position import AppliedPosition
from wal_sink.wal.log_tail import LogTail
from wal_sink.wal.maintenance import vacuum
from wal_sink.wal.quarantine import Quarantine
from wal_sink.wal.reader import WalReader
from wal_sink.wal.task_files import TaskFile, wal_schema, write_task_file
from wal_sink.wal.writer import WalWriter
from wal_sink.wal.writer_run import WriterRun

SCHEMA = wal_schema(pa.schema([("k", pa.int64()), ("amount", pa.int64())]))


def make_config(tmp_path, mysql: dict | None = None, **wal):
    return config_from_dict(
        {
            "sink": {"id": "ds"},
            "wal": {"path": str(tmp_path / "wal"), **wal},
            "mysql": {
                "url": "mysql+pymysql://u@h/db",
                "table": "t",
                "key": ["k"],
                **(mysql or {}),
            },
        },
        base_dir=tmp_path,
    )


@pytest.fixture(autouse=True)
def fresh_writers():
    """Each test opens its WALs anew (commit workers keep one writer per WAL)."""
    stage_commit._writers.clear()
    stage_commit._checkpoint_ids.clear()


def task_files(
    config, batch_id: int, partitions: int = 2, rows: int = 3, amount: int | None = None
):
    """The tasks' files of one attempt: keys 0, 1, … and ``amount`` (the batch id
    by default) in every row."""
    files = []
    for p in range(partitions):
        ks = list(range(p * rows, (p + 1) * rows))
        amounts = [batch_id if amount is None else amount] * rows
        batch = pa.record_batch([pa.array(ks), pa.array(amounts)], SCHEMA)
        files.append(
            write_task_file(
                config.wal_path, Storage(), batch_id, "att", p, [batch], SCHEMA
            )
        )
    return files


def stage(config, run: WriterRun, batch_id: int, **kwargs):
    return StageCommitter(config, run, "/cp").commit(
        batch_id, task_files(config, batch_id, **kwargs), SCHEMA
    )


def staged_rows(config, batch_id: int) -> list[dict]:
    """The batch's rows as the WAL gives them back, in staged order."""
    reader = WalReader(config.wal_path)
    chunks = reader.read_batch(reader.staged_batch(batch_id), 100)
    return [r for chunk in chunks for r in chunk.to_pylist()]


def test_commit_messages_become_exactly_the_batchs_add_actions(tmp_path):
    config = make_config(tmp_path, max_pending=10)
    tasks = task_files(config, 0, partitions=3)
    outcome = StageCommitter(config, WriterRun("ds", "r1"), "/cp").commit(
        0, list(reversed(tasks)), SCHEMA
    )
    assert (outcome.staged, outcome.rows, outcome.files) == (True, 9, 3)
    table = DeltaTable(config.wal_path)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    by_path = {a["path"]: a for a in actions}
    for t in tasks:
        a = by_path[t.file.path]
        assert (a["size_bytes"], a["num_records"]) == (t.file.size, t.file.rows)
        assert (a["min._wal_seq"], a["max._wal_seq"]) == (
            t.file.min_seq,
            t.file.max_seq,
        )
        assert a["partition._wal_batch_id"] == 0
    assert table.transaction_version("ds") == 0
    assert "_wal_seq" in [f.name for f in table.schema().fields]
    rows = staged_rows(config, 0)
    assert [r["k"] for r in rows] == list(range(9)), "files replayed in stage order"


def test_a_repeated_commit_stages_nothing(tmp_path):
    """Spark commits batch 0 again after a crash, from an attempt whose rows differ
    (another partitioning, other values): what the first commit staged stands."""
    config = make_config(tmp_path, max_pending=10)
    run = WriterRun("ds", "r1")
    assert stage(config, run, 0, amount=1).staged
    again = stage(config, run, 0, partitions=3, amount=2)
    assert not again.staged
    assert len(WalReader(config.wal_path).staged_batch(0).files) == 2
    assert staged_rows(config, 0) == [{"k": k, "amount": 1} for k in range(6)]


def test_a_newer_run_fences_the_older_one(tmp_path):
    config = make_config(tmp_path, max_pending=10)
    old, new = WriterRun("ds", "old"), WriterRun("ds", "new")
    stage(config, old, 0)
    stage(config, old, 1)
    stage(config, new, 2)  # takes the WAL
    with pytest.raises(FencedError, match="writer epoch 1 of this query run"):
        stage(config, old, 3)
    with pytest.raises(FencedError):
        stage(config, old, 2)  # even a batch the WAL holds: fenced first
    table = DeltaTable(config.wal_path)
    assert table.transaction_version("ds") == 2
    assert table.transaction_version("ds:writer") == 2
    stage(config, new, 3)
    assert DeltaTable(config.wal_path).transaction_version("ds:run:new") == 2


def test_a_run_taking_the_wal_during_a_commit_fences_it(tmp_path):
    """The zombie read a snapshot where it still held the WAL; a newer run commits
    before it does. Delta's conflict check on ``<sink>:writer`` refuses the
    zombie's commit, and its re-check on a fresh snapshot fences it."""
    config = make_config(tmp_path, max_pending=10)
    old = WriterRun("ds", "old")
    stage(config, old, 0)
    files = task_files(config, 1)
    new_files = task_files(config, 1)

    class Raced(WriterRun):
        raced = False

        def transactions(self, table, batch_id=None):
            claims = super().transactions(table, batch_id)
            if not Raced.raced:  # after the zombie's check, before its commit
                Raced.raced = True
                WalWriter(config.wal_path, "ds").commit(
                    1,
                    [f.file for f in new_files],
                    _file_schema(),
                    WriterRun("ds", "new"),
                )
            return claims

    zombie = WalWriter(config.wal_path, "ds")
    with pytest.raises(FencedError):
        zombie.commit(1, [f.file for f in files], _file_schema(), Raced("ds", "old"))
    staged = WalReader(config.wal_path).staged_batch(1)
    assert {f.uri.rsplit("/", 1)[1] for f in staged.files} == {
        f.file.path.rsplit("/", 1)[1] for f in new_files
    }


def test_a_writer_that_loses_the_creation_of_the_wal_commits_to_the_winners(
    tmp_path,
):
    """Two first stages at once: the one whose creation of the WAL fails because
    the other's exists commits its batch to that table."""
    config = make_config(tmp_path, max_pending=10)
    files, first_files = task_files(config, 1), task_files(config, 0)

    class Raced(WriterRun):
        raced = False

        def transactions(self, table, batch_id=None):
            if table is None and not Raced.raced:  # it saw no WAL; then one appears
                Raced.raced = True
                WalWriter(config.wal_path, "ds").commit(
                    0, [f.file for f in first_files], _file_schema()
                )
            return super().transactions(table, batch_id)

    late = WalWriter(config.wal_path, "ds")
    assert late.commit(1, [f.file for f in files], _file_schema(), Raced("ds", "r"))
    assert Raced.raced
    assert sorted(WalReader(config.wal_path).staged_batches()) == [0, 1]


def test_a_quarantine_created_meanwhile_is_written_to(tmp_path):
    """Two sinks' processes set rows aside at once: the one that finds the table
    created by the other since it looked appends to it."""
    path = str(tmp_path / "quarantine")
    row = {"record": "{}", "reason": "r", "batch_id": 0, "entry_seq": 0}

    class Late(Quarantine):
        looked = False

        def table(self):
            if not Late.looked:  # it sees no table; then another creates it
                Late.looked = True
                Quarantine(path, "ds").append([row_of("first", row)], "ds:a", 0)
                return None
            return super().table()

    assert Late(path, "ds").append([row_of("second", row)], "ds:b", 0)
    assert sorted(e["entry_id"] for e in Quarantine(path, "ds").read(10)) == [
        "first",
        "second",
    ]


def row_of(entry_id: str, fields: dict) -> dict:
    return {
        **fields,
        "sink_id": "ds",
        "entry_id": entry_id,
        "apply_id": None,
        "recorded_at": datetime.now(timezone.utc),
    }


def _file_schema():
    from wal_sink.wal.task_files import file_schema

    return file_schema(SCHEMA)


def test_a_reset_checkpoint_is_refused(tmp_path):
    config = make_config(tmp_path, max_pending=10)
    run = WriterRun("ds", "r1")
    for b in range(3):
        stage(config, run, b)
    with pytest.raises(CheckpointResetError, match="reset or replaced"):
        stage(config, WriterRun("ds", "r2"), 0)  # a new checkpoint starts at 0
    assert DeltaTable(config.wal_path).transaction_version("ds") == 2


def spark_checkpoint(tmp_path, name: str, query: str) -> str:
    """A checkpoint directory as Spark starts one: its metadata file names the
    query, for every later run from it."""
    path = tmp_path / name
    path.mkdir()
    (path / "metadata").write_text(json.dumps({"id": query}) + "\n")
    return str(path)


def stage_from(config, run: WriterRun, checkpoint: str, batch_id: int):
    return StageCommitter(config, run, checkpoint).commit(
        batch_id, task_files(config, batch_id), SCHEMA
    )


def test_a_checkpoint_replaced_after_one_staged_batch_is_refused(tmp_path):
    """A pipeline's full refresh right after the first batch: the new checkpoint's
    batch 0 has the id of the staged one, and its batch 1 would read the source
    again from the start. Only the checkpoint that staged batch 0 may deliver it
    again (after a crash before Spark's commit log), and then go on."""
    config = make_config(tmp_path, max_pending=10)
    first = spark_checkpoint(tmp_path, "cp0", "query-0")
    assert stage_from(config, WriterRun("ds", "r1"), first, 0).staged
    second = spark_checkpoint(tmp_path, "cp1", "query-1")
    with pytest.raises(CheckpointResetError, match="reset or replaced"):
        stage_from(config, WriterRun("ds", "r2"), second, 0)
    assert DeltaTable(config.wal_path).transaction_version("ds") == 0
    again = WriterRun("ds", "r3")
    assert not stage_from(config, again, first, 0).staged
    assert stage_from(config, again, f"file:{first}", 1).staged  # as Hadoop says it


def test_a_re_delivery_is_taken_when_the_checkpoint_cannot_be_named(tmp_path):
    """No readable checkpoint (no checkpointLocation option, or a batch staged
    before the WAL named checkpoints): a repeated batch id stays a re-delivery."""
    config = make_config(tmp_path, max_pending=10)
    assert stage_from(config, WriterRun("ds", "r1"), "/nowhere", 0).staged
    named = spark_checkpoint(tmp_path, "cp", "query-0")
    assert not stage_from(config, WriterRun("ds", "r2"), named, 0).staged
    assert not stage_from(config, WriterRun("ds", "r3"), "/nowhere", 0).staged


def test_batches_beyond_what_the_wal_and_follower_know_are_refused(tmp_path):
    """The WAL was lost or pointed elsewhere while Spark's checkpoint went on:
    batches between would never be applied (I7, the other way)."""
    config = make_config(tmp_path, max_pending=10)
    with pytest.raises(CheckpointResetError, match=r"batches 0\.\.4 would never"):
        stage(config, WriterRun("ds", "r1"), 5)
    assert not (tmp_path / "wal" / "_delta_log").exists()
    AppliedPosition(config.wal_path).publish(4, 1)  # the follower knows 0..4 applied
    assert stage(config, WriterRun("ds", "r1"), 5).staged


def test_commit_waits_while_max_pending_batches_wait_for_mysql(tmp_path):
    config = make_config(tmp_path, max_pending=2)
    run = WriterRun("ds", "r1")
    stage(config, run, 0)
    stage(config, run, 1)
    position = AppliedPosition(config.wal_path)
    threading.Timer(0.6, position.publish, (0, 1)).start()
    started = time.monotonic()
    outcome = stage(config, run, 2)
    assert outcome.staged and time.monotonic() - started >= 0.5
    assert outcome.pending == 1 and outcome.waited_s >= 0.5


def test_commit_fails_when_nothing_is_applied_for_the_outage_budget(tmp_path):
    config = make_config(tmp_path, {"outage_budget": 0.3}, max_pending=1)
    run = WriterRun("ds", "r1")
    stage(config, run, 0)
    with pytest.raises(TransientError, match="is `wal-sink follow` running"):
        stage(config, run, 1)
    assert DeltaTable(config.wal_path).transaction_version("ds") == 0


def test_cdc_files_whose_order_ranges_overlap_are_refused(tmp_path):
    config = make_config(tmp_path, max_pending=10)
    schema = wal_schema(pa.schema([("k", pa.int64()), ("seq", pa.int64())]))

    def task(p: int, seqs: list[int]) -> TaskFile:
        b = pa.record_batch([pa.array(range(len(seqs))), pa.array(seqs)], schema)
        return write_task_file(
            config.wal_path, Storage(), 0, "a", p, [b], schema, "seq"
        )

    committer = StageCommitter(config, WriterRun("ds", "r"), "/cp")
    with pytest.raises(TerminalError, match="repartitionByRange"):
        committer.commit(0, [task(0, [1, 5]), task(1, [3, 9])], schema)
    assert committer.commit(0, [task(0, [1, 5]), task(1, [5, 9])], schema).staged


def test_log_tail_reads_stage_commits_as_the_reader_lists_them(tmp_path):
    config = make_config(tmp_path, max_pending=10)
    tail = LogTail(config.wal_path, Storage(), "ds", -1)
    assert tail.poll() == []
    run = WriterRun("ds", "r1")
    for b in range(3):
        stage(config, run, b)
    from wal_sink.wal.maintenance import delete_batches

    delete_batches(config.wal_path, Storage(), [0])
    versions = tail.poll()
    # version 0 creates the table with its owner, 4 purges batch 0
    assert [v.version for v in versions] == [0, 1, 2, 3, 4]
    assert [v.staged.batch_id if v.staged else None for v in versions] == [
        None,
        0,
        1,
        2,
        None,
    ]
    reader = WalReader(config.wal_path)
    for v in versions[2:4]:  # batches 1 and 2 (0 is purged)
        listed = reader.staged_batch(v.staged.batch_id)
        assert [(f.rows, f.size_bytes, f.min_seq) for f in v.staged.files] == [
            (f.rows, f.size_bytes, f.min_seq) for f in listed.files
        ]
        assert all(
            f.uri.endswith(g.uri.rsplit("/", 1)[1])
            for f, g in zip(v.staged.files, listed.files)
        )
    assert tail.poll() == [] and tail.version == 4


def test_vacuum_removes_a_failed_attempts_files_and_keeps_the_position(tmp_path):
    """Files a task wrote for an attempt that never committed (an aborted batch, a
    query that died) are never read, and ``purge --vacuum`` removes them."""
    config = make_config(tmp_path, max_pending=10)
    failed = task_files(config, 0)  # written, never committed
    stage(config, WriterRun("ds", "r1"), 0)
    AppliedPosition(config.wal_path).publish(0, 1)
    staged = [
        f.uri.split("/wal/", 1)[1]
        for f in WalReader(config.wal_path).staged_batch(0).files
    ]
    assert not {f.file.path for f in failed} & set(staged)
    result = vacuum(config.wal_path, Storage(), 0)
    assert result.files == len(failed)
    assert not any((tmp_path / "wal" / f.file.path).exists() for f in failed)
    assert all((tmp_path / "wal" / path).exists() for path in staged)
    assert AppliedPosition(config.wal_path).read() == 0
