"""I9 one owner: a WAL (and its quarantine table) belongs to the sink id that created
it. A second sink on the same path — a copied config — is refused by the job and by
every CLI command with one line naming both ids, exit 2, before anything is written
(its WAL, its quarantine, its ack and lease rows). A WAL written before owners were
recorded is adopted by the first sink that writes to it."""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from devtools.spark_job import JobProcess
from tests.helpers import JOB, LEGACY_WAL, cli, write_config
from wal_sink import ConfigError, WalSink
from wal_sink.config import load_config
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.ownership import owner

SCHEMA = "k STRING, amount DECIMAL(12,2)"
SOURCE = """
[source]
format = "json"
path = "{landing}"
schema = "k STRING, amount DECIMAL(12,2)"
"""


@pytest.fixture
def tables(db):
    for t in ("owned", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE owned (k VARCHAR(4) PRIMARY KEY, amount DECIMAL(14,2)) "
        "ENGINE=InnoDB"
    )


def sink_config(db, tmp_path: Path, name: str, wal: Path, extra_wal: str = "") -> Path:
    """A job config of sink ``name`` with its own checkpoint, on WAL ``wal``."""
    landing = tmp_path / f"landing_{name}"
    landing.mkdir(exist_ok=True)
    (landing / "f0.json").write_text('{"k": "z", "amount": "9.00"}\n')
    home = tmp_path / name
    home.mkdir(exist_ok=True)
    return write_config(
        home / f"{name}.toml",
        db,
        table="owned",
        wal_path=wal,
        source=SOURCE.format(landing=landing),
        wal=extra_wal,
        job=JOB,
    )


def state(db, *paths: Path) -> tuple:
    """Everything a refused command must leave as it was."""
    files = {str(p): p.stat().st_mtime_ns for root in paths for p in root.rglob("*")}
    return (
        files,
        db.rows("SELECT * FROM wal_sink_ack ORDER BY batch_id"),
        db.rows("SELECT * FROM wal_sink_lease ORDER BY sink_id"),
        db.rows("SELECT COUNT(*) FROM wal_sink_outbox"),
        db.rows("SELECT k, amount FROM owned ORDER BY k"),
    )


def test_second_sink_on_the_same_wal_path_is_refused_everywhere(
    spark, db, tables, tmp_path
):
    wal = tmp_path / "shared_wal"
    alpha_path = sink_config(db, tmp_path, "alpha", wal)
    beta_path = sink_config(db, tmp_path, "beta", wal)
    alpha = SinkInstance(load_config(alpha_path))
    committer = alpha.start()
    rows = [("a", Decimal(1)), ("too-long", Decimal(2))]
    stage(spark.createDataFrame(rows, SCHEMA), alpha.writer, 0)
    assert committer.apply(0).quarantined == 1
    stage(spark.createDataFrame([("b", Decimal(3))], SCHEMA), alpha.writer, 1)
    alpha.close()
    quarantine = Path(f"{wal}_quarantine")
    assert owner(DeltaTable(str(wal))) == "alpha"
    assert owner(DeltaTable(str(quarantine))) == "alpha"
    before = state(db, wal, quarantine)

    line = (
        f"sink 'beta': the WAL at {wal} belongs to sink 'alpha', not to sink 'beta': "
        "two configs share wal.path? Give each sink a wal.path of its own"
    )
    r = cli(beta_path, "inspect", "--quarantine")
    assert (r.returncode, r.stderr) == (
        2,
        f"error: sink 'beta': the quarantine table at {quarantine} belongs to sink "
        "'alpha', not to sink 'beta': two configs share it? Give each sink a "
        "wal.path, or a wal.quarantine_path, of its own\n",
    )
    for command in (
        ["status"],
        ["status", "--json"],
        ["inspect", "1"],
        ["recover"],
        ["replay", "--from", "0", "--to", "1", "--force", "--yes"],
        ["purge", "--before", "2", "--dry-run"],
        ["purge", "--before", "2", "--vacuum"],
        ["quarantine-batch", "1", "--yes"],
        ["init-db"],
    ):
        r = cli(beta_path, *command)
        assert (r.returncode, r.stderr, r.stdout) == (2, f"error: {line}\n", ""), (
            command
        )
    job = JobProcess(beta_path, tmp_path / "job.log", "--available-now")
    assert job.wait() == 2, job.tail()
    errors = [ln for ln in job.text().splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and errors[0].endswith(line), job.tail()
    assert state(db, wal, quarantine) == before
    assert not (tmp_path / "beta" / "checkpoint").exists()
    # The owner goes on as before.
    r = cli(alpha_path, "recover")
    assert r.returncode == 0 and "batch 1: 1 rows" in r.stdout, r.stderr


def test_a_shared_quarantine_table_is_refused(spark, db, tables, tmp_path):
    alpha_path = sink_config(db, tmp_path, "alpha", tmp_path / "wal_a")
    alpha = SinkInstance(load_config(alpha_path))
    committer = alpha.start()
    stage(spark.createDataFrame([("too-long", Decimal(1))], SCHEMA), alpha.writer, 0)
    assert committer.apply(0).quarantined == 1
    alpha.close()
    shared = f"{tmp_path / 'wal_a'}_quarantine"
    gamma_path = sink_config(
        db, tmp_path, "gamma", tmp_path / "wal_g", f'quarantine_path = "{shared}"'
    )
    line = (
        f"error: sink 'gamma': the quarantine table at {shared} belongs to sink "
        "'alpha', not to sink 'gamma': two configs share it? Give each sink a "
        "wal.path, or a wal.quarantine_path, of its own\n"
    )
    for command in (["recover"], ["inspect", "--quarantine"]):
        r = cli(gamma_path, *command)
        assert (r.returncode, r.stderr) == (2, line), command
    assert db.rows("SELECT sink_id FROM wal_sink_lease") == [("alpha",)]


def test_a_sink_staging_into_a_wal_another_sink_created_meanwhile_is_refused(
    spark, db, tables, tmp_path
):
    wal = tmp_path / "new_wal"
    late = WalSink(load_config(sink_config(db, tmp_path, "late", wal)))
    late.start()  # no WAL yet: nothing to refuse
    first = WalSink(load_config(sink_config(db, tmp_path, "first", wal)))
    first.foreach_batch(spark.createDataFrame([("a", Decimal(1))], SCHEMA), 0)
    first.close()
    with pytest.raises(ConfigError, match="belongs to sink 'first', not to sink"):
        late.foreach_batch(spark.createDataFrame([("x", Decimal(1))], SCHEMA), 0)
    late.close()
    table = DeltaTable(str(wal))
    assert table.transaction_version("late") is None
    assert owner(table) == "first"


def test_wal_without_an_owner_is_read_by_any_sink_and_adopted_by_the_first_writer(
    db, tmp_path
):
    for t in ("legacy_totals", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE legacy_totals (k VARCHAR(8) PRIMARY KEY, amount DECIMAL(14,2),"
        " seq BIGINT, ts DATETIME(6)) ENGINE=InnoDB"
    )
    wal = tmp_path / "wal"
    shutil.copytree(LEGACY_WAL, wal)
    configs = {}
    for sink_id in ("legacy", "other"):
        configs[sink_id] = tmp_path / f"{sink_id}.toml"
        configs[sink_id].write_text(f"""
[sink]
id = "{sink_id}"
[wal]
path = "{wal}"
[mysql]
url = "{db.url}"
table = "legacy_totals"
key = ["k"]
""")
    for sink_id in ("other", "legacy"):  # read-only: no adoption
        r = cli(configs[sink_id], "status", "--json")
        assert r.returncode == 0, r.stderr
    assert owner(DeltaTable(str(wal))) is None
    r = cli(configs["legacy"], "recover")
    assert r.returncode == 0, r.stderr
    assert r.stderr == (
        f"WARNING wal_sink.wal.ownership: the table at {wal} had no owner (written "
        "by wal_sink 0.2 or earlier); sink 'legacy' adopts it: other sink ids are "
        "refused from now on\n"
    )
    assert owner(DeltaTable(str(wal))) == "legacy"
    r = cli(configs["other"], "status")
    assert r.returncode == 2 and "belongs to sink 'legacy'" in r.stderr
    r = cli(configs["legacy"], "recover")
    assert (r.returncode, r.stderr) == (0, ""), "adopted once"
