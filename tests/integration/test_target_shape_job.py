"""The cases of docs/merge.md's target table through the real job and CLI
(``spark-submit jobs/stream_to_mysql.py``, ``wal-sink``): each once, the rest of
the ground is the fuzzer's (test_model_fuzz.py) and test_target_shape.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from devtools.spark_job import JobProcess
from tests.helpers import JOB, write_config

WAL_SINK = str(Path(sys.executable).with_name("wal-sink"))


def land(tmp_path: Path, *batches: list[dict]) -> Path:
    """One JSON file per batch, in order; returns the landing directory."""
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    have = len(list(landing.glob("*.json")))
    for i, rows in enumerate(batches, start=have):
        path = landing / f"f{i:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (1_700_000_000 + i,) * 2)
    return landing


def job_config(db, tmp_path: Path, name: str, schema: str, mysql: str) -> Path:
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    path = write_config(
        tmp_path / f"{name}.toml",
        db,
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "{schema}"
options = {{ maxFilesPerTrigger = 1 }}""",
        table="t",
        mysql=mysql,
        job=JOB,
    )
    if "key =" in mysql:  # the config's own key instead of write_config's
        path.write_text(path.read_text().replace('key = ["k"]\n', "", 1))
    return path


def drain(config: Path, tmp_path: Path) -> JobProcess:
    job = JobProcess(config, tmp_path / f"{config.stem}.log", "--available-now")
    job.wait()
    return job


def cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [WAL_SINK, "-c", str(config), *args], capture_output=True, text=True
    )


def fresh(db, *ddl: str) -> None:
    for t in ("t", "parents", "t_tombstones", "wal_sink_ack", "wal_sink_outbox"):
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute("SET FOREIGN_KEY_CHECKS = 0")
            cur.execute(f"DROP TABLE IF EXISTS {t}")
    for statement in ddl:
        db.execute(statement)


@pytest.mark.parametrize(
    "ddl, mysql, said",
    [
        (
            "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, ver BIGINT)",
            'version_column = "ver"',
            "mysql.version_column names column 'ver', which the stream does not",
        ),
        (
            "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, created TIMESTAMP "
            "NULL ON UPDATE CURRENT_TIMESTAMP)",
            'merge = { created = "keep" }',
            "column created of table t is a keep column (mysql.merge) but has ON "
            "UPDATE",
        ),
        (
            "CREATE TABLE t (k BIGINT NOT NULL, created TIMESTAMP NOT NULL DEFAULT "
            "'2001-01-01' ON UPDATE CURRENT_TIMESTAMP, n BIGINT, "
            "UNIQUE KEY uk (k, created))",
            'key = ["k", "created"]',
            "column created of table t is a key column but has ON UPDATE",
        ),
    ],
)
def test_the_job_refuses_a_contradiction_at_start_writing_nothing(
    db, tmp_path, ddl, mysql, said
):
    fresh(db, ddl)
    schema = "k BIGINT, n BIGINT" + (", created TIMESTAMP" if "created" in ddl else "")
    config = job_config(db, tmp_path, "refused", schema, mysql)
    land(tmp_path, [{"k": 1, "n": 1, "created": "2020-01-01T00:00:00Z"}])
    job = drain(config, tmp_path)
    assert job.proc.returncode == 2, job.tail()
    errors = [ln for ln in job.text().splitlines() if "ERROR wal_sink.job:" in ln]
    assert len(errors) == 1 and said in errors[0], job.tail()
    assert "Traceback" not in job.text()
    assert db.rows("SELECT COUNT(*) FROM t") == [(0,)]
    assert db.rows(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
        "DATABASE() AND TABLE_NAME = 'wal_sink_ack'"
    ) == [(0,)]


def test_an_auto_increment_key_of_zero_and_a_null_timestamp_version(db, tmp_path):
    """id 0 twice into an AUTO_INCREMENT key, n added: one row 0. A NULL version
    of a TIMESTAMP NOT NULL column on a server whose explicit_defaults_for_timestamp
    is OFF: set aside, not NOW(), so v3 still lands."""
    fresh(
        db,
        "CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, n BIGINT, "
        "label VARCHAR(8), v TIMESTAMP(6) NOT NULL DEFAULT '2001-01-01')",
    )
    db.execute("SET GLOBAL explicit_defaults_for_timestamp = OFF")
    try:
        config = job_config(
            db,
            tmp_path,
            "shapes",
            "id BIGINT, n BIGINT, label STRING, v TIMESTAMP",
            'key = ["id"]\nmerge = { n = "add" }\nversion_column = "v"',
        )
        land(
            tmp_path,
            [{"id": 0, "n": 2, "label": "v1", "v": "2020-01-01T00:00:00Z"}],
            [{"id": 0, "n": 3, "label": "v2", "v": None}],
            [{"id": 0, "n": 4, "label": "v3", "v": "2020-03-01T00:00:00Z"}],
        )
        job = drain(config, tmp_path)
    finally:
        db.execute("SET GLOBAL explicit_defaults_for_timestamp = ON")
    assert job.proc.returncode == 0, job.tail()
    assert db.rows("SELECT id, n, label, CAST(v AS CHAR) FROM t") == [
        (0, 6, "v3", "2020-03-01 00:00:00.000000")
    ]
    assert db.rows("SELECT SUM(quarantined) FROM wal_sink_ack") == [(1,)]


def test_a_replayed_batchs_entry_is_never_retried_after_purge(db, tmp_path):
    """Set aside for a missing parent; parent added; `replay --force` lands it;
    newer data; `purge`; `quarantine retry` must not write the old row again."""
    fresh(
        db,
        "CREATE TABLE parents (id BIGINT PRIMARY KEY)",
        "CREATE TABLE t (k BIGINT PRIMARY KEY, p BIGINT, label VARCHAR(8), "
        "FOREIGN KEY (p) REFERENCES parents (id))",
    )
    config = job_config(db, tmp_path, "fk", "k BIGINT, p BIGINT, label STRING", "")
    land(tmp_path, [{"k": 1, "p": 7, "label": "old"}])
    assert drain(config, tmp_path).proc.returncode == 0
    assert db.rows("SELECT quarantined FROM wal_sink_ack") == [(1,)]
    assert db.rows("SELECT COUNT(*) FROM t") == [(0,)]
    db.execute("INSERT INTO parents VALUES (7)")
    replay = cli(config, "replay", "--from", "0", "--to", "0", "--force", "--yes")
    assert replay.returncode == 0, replay.stderr
    assert db.rows("SELECT k, label FROM t") == [(1, "old")], "the replay applied it"
    land(tmp_path, [{"k": 1, "p": 7, "label": "new"}], [{"k": 2, "p": 7, "label": "x"}])
    assert drain(config, tmp_path).proc.returncode == 0
    purge = cli(config, "purge", "--before", "2")
    assert purge.returncode == 0, purge.stderr
    assert db.rows("SELECT batch_id FROM wal_sink_ack") == [(2,)], "0's ack purged"
    retry = cli(config, "quarantine", "retry", "--yes")
    assert retry.returncode == 0, retry.stderr
    assert "retrying 0 open record(s)" in retry.stdout, retry.stdout
    assert db.rows("SELECT k, label FROM t ORDER BY k") == [(1, "new"), (2, "x")]


def test_a_backfill_job_honours_the_live_jobs_deletes(db, tmp_path):
    """Two sinks on one table: the live CDC job deletes at v10; a backfill job
    without [cdc] is refused; with [cdc] and the version column its v7 is stale."""
    fresh(db, "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), v BIGINT)")
    cdc = '\n[cdc]\nop_column = "op"\norder_by = "v"\n'
    schema = "op STRING, k BIGINT, label STRING, v BIGINT"
    live_dir, backfill_dir = tmp_path / "live", tmp_path / "backfill"
    live_dir.mkdir()
    backfill_dir.mkdir()
    live = job_config(db, live_dir, "live", schema, 'version_column = "v"' + cdc)
    land(
        live_dir,
        [{"op": "I", "k": 1, "label": "a", "v": 5}, {"op": "D", "k": 1, "v": 10}],
    )
    assert drain(live, live_dir).proc.returncode == 0
    plain_schema = "k BIGINT, label STRING, v BIGINT"  # no op column: no [cdc]
    plain = job_config(db, backfill_dir, "plain", plain_schema, 'version_column = "v"')
    land(backfill_dir, [{"op": "I", "k": 1, "label": "old", "v": 7}])
    refused = drain(plain, backfill_dir)
    assert refused.proc.returncode == 2, refused.tail()
    assert "guarded by tombstones (table t_tombstones)" in refused.text()
    honouring = job_config(
        db, backfill_dir, "backfill", schema, 'version_column = "v"' + cdc
    )
    assert drain(honouring, backfill_dir).proc.returncode == 0
    assert db.rows("SELECT COUNT(*) FROM t") == [(0,)]
    assert db.rows(
        "SELECT skipped_count FROM wal_sink_ack WHERE sink_id = 'backfill'"
    ) == [(1,)]


def test_a_narrow_version_is_refused_and_a_narrow_column_said_once_its_values_kept_out(
    db, tmp_path
):
    """docs/merge.md, "Values MySQL would change", through the job: a version
    column narrower than the stream's type is refused at start (exit 2, nothing
    written); a data column is said once at start, and each value it would change
    is set aside while the rest lands."""
    fresh(
        db,
        "CREATE TABLE t (k BIGINT PRIMARY KEY, price DECIMAL(12,2), at DATETIME, "
        "ver DECIMAL(10,0))",
    )
    schema = "k BIGINT, price DECIMAL(12,4), at TIMESTAMP, ver DECIMAL(10,2)"
    rows = [
        {"k": 1, "price": "1.2300", "at": "2001-01-01T10:00:00Z", "ver": "1"},
        {"k": 2, "price": "1.2345", "at": "2001-01-01T10:00:00Z", "ver": "2"},
        {"k": 3, "price": "9.9900", "at": "2001-01-01T10:00:00.999999Z", "ver": "3"},
    ]
    versioned, plain = tmp_path / "versioned", tmp_path / "plain"
    versioned.mkdir()
    plain.mkdir()
    config = job_config(db, versioned, "versioned", schema, 'version_column = "ver"')
    land(versioned, rows)
    job = drain(config, versioned)
    assert job.proc.returncode == 2, job.tail()
    errors = [ln for ln in job.text().splitlines() if "ERROR wal_sink.job:" in ln]
    assert len(errors) == 1, job.tail()
    assert "column ver of table t is decimal(10,0), which rounds" in errors[0]
    assert "it is the version column" in errors[0]
    assert db.rows("SELECT COUNT(*) FROM t") == [(0,)]

    config = job_config(db, plain, "plain", schema, "")
    land(plain, rows)
    job = drain(config, plain)
    assert job.proc.returncode == 0, job.tail()
    warned = [ln for ln in job.text().splitlines() if "WARNING" in ln]
    for column, kind in (("price", "decimal(12,2)"), ("at", "datetime")):
        said = [ln for ln in warned if f"column {column} of table t is {kind}" in ln]
        assert len(said) == 1, warned
    assert db.rows("SELECT k, price, at FROM t") == [
        (1, Decimal("1.23"), datetime(2001, 1, 1, 10))
    ]
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [(1, 2)]
    listed = cli(config, "quarantine", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    reasons = sorted(e["reason"] for e in json.loads(listed.stdout))
    assert reasons[0].startswith("1.2345 in column price (decimal(12,2)), which")
    assert reasons[1].startswith("2001-01-01 10:00:00.999999+00:00 in column at")
