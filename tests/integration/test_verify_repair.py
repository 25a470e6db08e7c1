"""``wal-sink verify --against SOURCE --repair``: a row another writer changed, one
it deleted and one it added are found and written back as the source has them, as
one repair staged beside the WAL and applied once with its ack; a second verify is
clean and a second repair stages nothing. A repair killed before its COMMIT leaves
the target as it was and is applied, once, by the next run. The sink's own batch
ids are untouched: a batch staged after a repair is applied as usual."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.helpers import (
    JOB,
    JobProcess,
    apply_staged,
    cli,
    fresh_table,
    routed_config,
    stage_rows,
    write_config,
)
from wal_sink.config import load_config
from wal_sink.errors import FencedError
from wal_sink.exit_status import FINDINGS, OK
from wal_sink.protocol.sink_instance import SinkInstance

START = datetime(2024, 3, 1, 12, 0)
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("at", pa.timestamp("us")),
    ]
)


def rows(ids) -> list[dict]:
    return [
        {
            "id": i,
            "name": f"name{i}",
            "amount": Decimal(i) + Decimal("0.25"),
            "at": START + timedelta(minutes=i, microseconds=i),
        }
        for i in ids
    ]


@pytest.fixture
def sink(db, tmp_path):
    """vr(id, name, amount, at) filled by the sink from batch 0, a Delta table
    holding the same, and a count of the updates made to vr (a trigger): returns
    the config's path and the source."""
    for t in ("vr", "vr_updates", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE vr (id BIGINT PRIMARY KEY, name VARCHAR(16), "
        "amount DECIMAL(12,2), at DATETIME(6)) ENGINE=InnoDB"
    )
    db.execute("CREATE TABLE vr_updates (n INT NOT NULL) ENGINE=InnoDB")
    db.execute("INSERT INTO vr_updates VALUES (0)")
    db.execute(
        "CREATE TRIGGER vr_updated AFTER UPDATE ON vr FOR EACH ROW "
        "UPDATE vr_updates SET n = n + 1"
    )
    path = write_config(tmp_path / "vr.toml", db, table="vr", sink_id="vr", mysql="")
    path.write_text(path.read_text().replace('key = ["k"]', 'key = ["id"]'))
    apply_staged(load_config(path), SCHEMA, rows(range(20)))
    source = tmp_path / "lake"
    write_deltalake(str(source), pa.Table.from_pylist(rows(range(20)), schema=SCHEMA))
    return path, str(source)


def another_writer(db) -> None:
    """A row changed, one deleted, one added."""
    db.execute("UPDATE vr SET amount = 99, name = 'other' WHERE id = 3")
    db.execute("DELETE FROM vr WHERE id = 11")
    db.execute("INSERT INTO vr (id, name) VALUES (500, 'new')")
    db.execute("UPDATE vr_updates SET n = 0")


def table_rows(db) -> list[tuple]:
    return db.rows("SELECT id, name, amount, at FROM vr ORDER BY id")


def repair_acks(db) -> list[tuple]:
    return db.rows(
        "SELECT batch_id, row_count, deleted_count FROM wal_sink_ack "
        "WHERE sink_id = 'vr:repair' ORDER BY batch_id"
    )


def repaired_once(db, output: str, before: list[tuple]) -> None:
    """Repair 1 wrote the rows back as they were, with one update (the trigger's
    count) and one ack."""
    assert "repair 1 applied (vr: 2 upserted, 1 deleted)" in output
    assert table_rows(db) == before
    assert db.rows("SELECT n FROM vr_updates") == [(1,)]
    assert repair_acks(db) == [(1, 2, 1)]


def test_verify_repair_writes_the_differences_once_then_verify_is_clean(sink, db):
    path, source = sink
    before = table_rows(db)
    another_writer(db)
    r = cli(path, "verify", "--against", source, "--repair", "--yes")
    assert r.returncode == OK, r.stderr
    assert "vr: different: id=3 (name, amount)" in r.stdout
    assert "vr: 2 upsert(s), 1 delete(s)" in r.stderr
    repaired_once(db, r.stdout, before)
    r = cli(path, "verify", "--against", source)
    assert r.returncode == OK, r.stdout + r.stderr
    r = cli(path, "verify", "--against", source, "--repair", "--yes")
    assert r.returncode == OK, r.stderr
    assert "applied" not in r.stdout and repair_acks(db) == [(1, 2, 1)]
    r = cli(path, "verify")  # the repair's ack is not one of the sink's batches
    assert r.returncode == OK, r.stdout
    status = json.loads(cli(path, "status", "--json").stdout)
    assert (status["repairs_applied"], status["repairs_pending"]) == (1, [])
    assert (status["acked_batches"], status["rows_applied"]) == (1, 20)
    shown = " ".join(cli(path, "status").stdout.replace("│", " ").split())
    assert "repairs 1 applied" in shown
    shown = " ".join(cli(path, "inspect", "1", "--repair").stdout.split())
    assert "repair 1: 3 rows in 1 file(s), showing 3" in shown
    assert '│ vr │ delete │ {"id": 500} │' in shown


def test_verify_repair_asks_first_and_no_writes_nothing(sink, db, tmp_path):
    path, source = sink
    another_writer(db)
    changed = table_rows(db)
    r = cli(path, "verify", "--against", source, "--repair", input="n\n")
    assert r.returncode == FINDINGS, r.stderr
    assert "the repair takes the sink's lease" in r.stderr
    assert "repair cancelled; nothing changed" in r.stderr
    assert table_rows(db) == changed and repair_acks(db) == []
    assert not (tmp_path / "wal_repairs").exists()


def test_verify_repair_killed_before_commit_is_applied_once_by_the_next(sink, db):
    path, source = sink
    before = table_rows(db)
    another_writer(db)
    changed = table_rows(db)
    killed = cli(
        path,
        "verify",
        "--against",
        source,
        "--repair",
        "--yes",
        env={"WAL_SINK_FAULT": "repair.before_commit:1"},
        new_session=True,
    )
    assert killed.returncode == -9, killed.stderr
    assert table_rows(db) == changed and repair_acks(db) == []
    status = json.loads(cli(path, "status", "--json").stdout)
    assert status["repairs_pending"] == [1]
    r = cli(path, "verify", "--against", source, "--repair", "--yes")
    assert r.returncode == OK, r.stderr
    assert "repair(s) 1 staged and not applied" in r.stderr
    assert "nothing differs any more: no repair staged" in r.stdout
    repaired_once(db, r.stdout, before)


def test_verify_repair_fences_a_running_sink_and_batches_after_it_apply(sink, db):
    path, source = sink
    config = load_config(path)
    running = SinkInstance(config)
    committer = running.start()
    try:
        another_writer(db)
        r = cli(path, "verify", "--against", source, "--repair", "--yes")
        assert r.returncode == OK, r.stderr
        with pytest.raises(FencedError):
            committer.apply(0, force=True)
    finally:
        running.close()
    apply_staged(config, SCHEMA, rows([3, 700]), first=1)
    assert db.rows("SELECT id FROM vr WHERE id IN (3, 700)") == [(3,), (700,)]
    assert db.rows("SELECT batch_id FROM wal_sink_ack WHERE sink_id = 'vr'") == [
        (0,),
        (1,),
    ]


def test_verify_repair_needs_against(sink):
    path, _ = sink
    r = cli(path, "verify", "--repair")
    assert r.returncode == 2
    assert "--repair goes with --against" in r.stderr


def test_verify_repair_writes_the_source_version_below_the_stored_one(db, tmp_path):
    for t in ("vrv", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE vrv (id BIGINT PRIMARY KEY, name VARCHAR(16), v BIGINT) "
        "ENGINE=InnoDB"
    )
    path = write_config(
        tmp_path / "vrv.toml", db, table="vrv", mysql='version_column = "v"'
    )
    path.write_text(path.read_text().replace('key = ["k"]', 'key = ["id"]'))
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.int64())])
    versioned = [{"id": i, "name": f"name{i}", "v": 5} for i in range(4)]
    apply_staged(load_config(path), schema, versioned)
    write_deltalake(str(tmp_path / "lake"), pa.Table.from_pylist(versioned, schema))
    db.execute("UPDATE vrv SET name = 'ahead', v = 100 WHERE id = 2")
    r = cli(path, "verify", "--against", str(tmp_path / "lake"), "--repair", "--yes")
    assert r.returncode == OK, r.stderr
    assert "repair 1 applied (vrv: 1 upserted, 0 deleted)" in r.stdout
    assert db.rows("SELECT name, v FROM vrv WHERE id = 2") == [("name2", 5)]


def test_verify_repair_routed_sink_repairs_every_table_in_one_repair(db, tmp_path):
    for t in ("rra", "rrb", "wal_sink_ack", "wal_sink_ack_tables", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for t in ("rra", "rrb"):
        db.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, name VARCHAR(8))")
    path = routed_config(tmp_path / "routed.toml", db, "routedr", ["rra", "rrb"])
    schema = pa.schema(
        [("tbl", pa.string()), ("id", pa.int64()), ("name", pa.string())]
    )
    routed = [
        {"tbl": t, "id": i, "name": f"{t}{i}"} for t in ("rra", "rrb") for i in range(3)
    ]
    apply_staged(load_config(path), schema, routed)
    for t in ("rra", "rrb"):
        mine = [{"id": r["id"], "name": r["name"]} for r in routed if r["tbl"] == t]
        write_deltalake(str(tmp_path / "lake" / t), pa.Table.from_pylist(mine))
    db.execute("INSERT INTO rra VALUES (9, 'extra')")
    db.execute("DELETE FROM rrb WHERE id = 1")
    lake = str(tmp_path / "lake")
    r = cli(path, "verify", "--against", lake, "--repair", "--yes", "--json")
    assert r.returncode == OK, r.stderr
    assert [len(t["differences"]) for t in json.loads(r.stdout)] == [1, 1]
    assert (
        "repair 1 applied (rra: 0 upserted, 1 deleted; rrb: 1 upserted, 0 deleted)"
        in r.stderr  # with --json, stdout holds the JSON alone
    )
    assert cli(path, "verify", "--against", lake).returncode == OK
    assert cli(path, "verify").returncode == OK


def test_verify_repair_killed_before_commit_is_completed_by_recover(sink, db):
    path, source = sink
    before = table_rows(db)
    another_writer(db)
    fault = {"WAL_SINK_FAULT": "repair.before_commit:1"}
    args = ("verify", "--against", source, "--repair", "--yes")
    assert cli(path, *args, env=fault, new_session=True).returncode == -9
    r = cli(path, "recover")
    assert r.returncode == OK, r.stderr
    repaired_once(db, r.stdout, before)
    assert "applied" not in cli(path, "recover").stdout


def test_verify_repair_of_a_job_target_then_the_job_goes_on(db, tmp_path):
    """Through the job: its target repaired, then its next batch applied."""
    fresh_table(db, "vrj")
    landing = tmp_path / "landing"
    landing.mkdir()
    state = {"a": "1.00", "b": "2.00", "c": "3.00"}

    def arrives(name: str, rows: dict[str, str]) -> None:
        lines = [json.dumps({"k": k, "amount": v}) for k, v in rows.items()]
        (landing / name).write_text("\n".join(lines) + "\n")

    def lake() -> str:
        where = tmp_path / f"lake{len(state)}"
        amounts = pa.array([Decimal(v) for v in state.values()], pa.decimal128(16, 2))
        write_deltalake(str(where), pa.table({"k": list(state), "amount": amounts}))
        return str(where)

    path = write_config(
        tmp_path / "vrj.toml",
        db,
        table="vrj",
        mysql="",
        job=JOB,
        source=(
            f'[source]\nformat = "json"\npath = "{landing}"\n'
            'schema = "k STRING, amount DECIMAL(12,2)"'
        ),
    )
    arrives("f0.json", state)
    job = JobProcess(path, tmp_path / "job.log", "--available-now")
    assert job.wait() == 0, job.tail()
    db.execute("UPDATE vrj SET amount = 99 WHERE k = 'b'")
    db.execute("DELETE FROM vrj WHERE k = 'c'")
    db.execute("INSERT INTO vrj VALUES ('z', 1)")
    r = cli(path, "verify", "--against", lake(), "--repair", "--yes")
    assert r.returncode == OK, r.stderr
    assert "repair 1 applied (vrj: 2 upserted, 1 deleted)" in r.stdout
    arrives("f1.json", {"d": "4.00"})
    state["d"] = "4.00"
    job = JobProcess(path, tmp_path / "job.log", "--available-now")
    assert job.wait() == 0, job.tail()
    r = cli(path, "verify", "--against", lake())
    assert r.returncode == OK, r.stdout + r.stderr
    assert db.rows("SELECT batch_id FROM wal_sink_ack WHERE sink_id = 'vrj'") == [
        (0,),
        (1,),
    ]


def test_a_repair_applies_the_sinks_staged_batches_before_it_compares(sink, db):
    """A batch staged and not applied yet (the job was stopped, or fenced) sets
    id 3 to an older value than the source's: the repair applies it first (I8: it
    never runs ahead of a staged batch), then writes what still differs, so no
    later recovery can undo the repair."""
    path, source = sink
    stale = {**rows([3])[0], "name": "stale"}
    stage_rows(load_config(path), 1, [stale], SCHEMA)
    before = table_rows(db)
    r = cli(path, "verify", "--against", source, "--repair", "--yes")
    assert r.returncode == OK, r.stderr
    assert "vr: different: id=3 (name)" in r.stdout
    r = cli(path, "recover")
    assert r.returncode == OK, r.stderr
    assert table_rows(db) == before
    assert cli(path, "verify", "--against", source).returncode == OK
