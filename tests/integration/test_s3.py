"""The WAL on S3: a real S3-compatible server (s3proxy, on loopback, enforcing
``If-None-Match``), Spark writing through Hadoop's S3A, delta-rs committing, real
MariaDB and spark-submit. The secret key is made up per server and must never show
in a job log, CLI output or error message."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from decimal import Decimal
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from devtools.s3proxy import NoConditionalPut, S3Proxy
from devtools.spark_cluster import standalone_cluster
from devtools.spark_job import JobProcess, job_env
from tests.helpers import (
    CRASH_BATCHES,
    arrive,
    cli,
    fresh_table,
    run_writer,
    s3_config,
    s3_storage,
    survive_kills_then_drain,
    totals,
    wait_for_lock_waits,
    write_landing,
)
from wal_sink.config import load_config
from wal_sink.wal.reader import WalReader

pytestmark = pytest.mark.s3
SCHEMA = "k STRING, amount DECIMAL(12,2)"


def landing_source(landing: Path, files_per_trigger: int = 2) -> str:
    return f"""
[source]
format = "json"
path = "{landing}"
schema = "{SCHEMA}"
options = {{ maxFilesPerTrigger = {files_per_trigger} }}"""


def acked_ids(db) -> list[int]:
    return [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]


def assert_no_secret(s3, *texts: str) -> None:
    for text in texts:
        assert s3.secret_key not in text, "the S3 secret key leaked"


def test_job_killed_while_staging_to_s3_lands_exactly_once(db, s3, bucket, tmp_path):
    fresh_table(db, "s3_totals")
    landing = tmp_path / "landing"
    landing.mkdir()
    wal = f"{bucket}/pipelines/wal"
    config = s3_config(
        tmp_path / "s3kill.toml",
        db,
        s3,
        wal,
        table="s3_totals",
        source=landing_source(landing),
    )
    expected: dict[str, Decimal] = {}
    log = tmp_path / "job.log"
    survive_kills_then_drain(
        config, log, lambda killed: arrive(landing, expected, 50, 0.35, killed)
    )
    assert totals(db, "s3_totals") == expected
    staged = WalReader(wal, storage=s3_storage(s3)).staged_batches()
    assert staged and set(staged) <= set(acked_ids(db))
    assert acked_ids(db) == list(range(len(acked_ids(db)))), "each batch once, in order"
    text = log.read_text()
    assert "batch 0 applied" in text and "refuses a second conditional put" in text
    assert_no_secret(s3, text)


def unreferenced_parquet(s3, wal: str, batch_id: int) -> int:
    fs, root = s3_storage(s3).filesystem(wal)
    listed = fs.get_file_info(
        pafs.FileSelector(
            f"{root}/_wal_batch_id={batch_id}", recursive=True, allow_not_found=True
        )
    )
    on_store = {i.path for i in listed if i.is_file and i.path.endswith(".parquet")}
    table = DeltaTable(wal, storage_options=s3_storage(s3).delta_options)
    referenced = {u.split("://", 1)[1] for u in table.file_uris()}
    return len(on_store - referenced)


def test_kill_between_files_written_and_commit_on_s3_is_exact(db, s3, bucket, tmp_path):
    for t in ("s3_crash", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE s3_crash (k VARCHAR(32) PRIMARY KEY, amount DECIMAL(14,2), "
        "seq BIGINT) ENGINE=InnoDB"
    )
    wal = f"{bucket}/wal"
    expected = write_landing(tmp_path / "landing", CRASH_BATCHES)
    config = s3_config(tmp_path / "crashy.toml", db, s3, wal, table="s3_crash")
    log = tmp_path / "writer.log"

    code = run_writer(config, tmp_path / "landing", "stage.before_commit:1", log)
    assert code == -signal.SIGKILL, log.read_text()[-3000:]
    assert acked_ids(db) == [0]
    assert unreferenced_parquet(s3, wal, 1) > 0, "the attempt's files are on S3"
    opts = s3_storage(s3).delta_options
    assert DeltaTable(wal, storage_options=opts).transaction_version("crashy") == 0

    assert run_writer(config, tmp_path / "landing", None, log) == 0, log.read_text()[
        -3000:
    ]
    assert totals(db, "s3_crash") == expected
    acked = db.rows("SELECT batch_id, row_count FROM wal_sink_ack ORDER BY 1")
    assert acked == [(0, 40), (1, 50), (2, 30)]
    r = cli(config, "purge", "--before", "0", "--vacuum", "--retain", "0s")
    assert r.returncode == 0, r.stderr
    assert unreferenced_parquet(s3, wal, 1) == 0, "vacuum removed the leftovers"
    assert_no_secret(s3, log.read_text(), r.stdout, r.stderr)


def purge_while_the_committer_waits(
    db, config: Path, table: str, reader: WalReader
) -> list[int]:
    """Hold every row of ``table`` while the job runs, so its committer waits inside
    a batch's transaction (the ack row not committed); meanwhile purge every batch.
    Returns the batches the purge kept as unacked, checked to be still staged."""
    holder = db.connect()
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT k FROM {table} FOR UPDATE")
        wait_for_lock_waits(db)
        r = cli(config, "purge", "--before", str(2**31), "--vacuum", "--retain", "1h")
        assert r.returncode == 0, r.stderr
        kept = re.search(r"keeping unacked batch\(es\) ([\d, ]+):", r.stdout)
        assert kept, f"the purge met no unacked batch: {r.stdout}"
        ids = [int(i) for i in kept.group(1).split(", ")]
        reader.refresh()
        assert set(ids) <= set(reader.staged_batches()), "an unacked batch was purged"
        return ids
    finally:
        holder.rollback()
        holder.close()


def test_purge_while_the_job_stages_on_s3_keeps_every_unacked_batch(
    db, s3, bucket, tmp_path
):
    fresh_table(db, "s3_purged")
    landing = tmp_path / "landing"
    landing.mkdir()
    wal = f"{bucket}/wal"
    config = s3_config(
        tmp_path / "s3purge.toml",
        db,
        s3,
        wal,
        table="s3_purged",
        source=landing_source(landing, files_per_trigger=1),
    )
    reader = WalReader(wal, storage=s3_storage(s3))
    expected: dict[str, Decimal] = {}
    feeding = threading.Thread(target=arrive, args=(landing, expected, 30, 0.5))
    feeding.start()
    log = tmp_path / "job.log"
    job = JobProcess(config, log)
    purges: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while "batch 1 applied" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline and job.proc.poll() is None, job.tail()
            time.sleep(0.5)
        purge_while_the_committer_waits(db, config, "s3_purged", reader)
        while feeding.is_alive() or len(purges) < 4:
            r = cli(config, "purge", "--older-than", "0s", "--vacuum", "--retain", "1h")
            assert r.returncode == 0, r.stderr
            assert job.proc.poll() is None, "the job still runs beside the purge"
            purges.append(r.stdout)
            time.sleep(1)
    finally:
        feeding.join()
        assert job.terminate() == 0, job.tail()
    drain = JobProcess(config, log, "--available-now")
    assert drain.wait() == 0, drain.tail()
    assert totals(db, "s3_purged") == expected
    removed = sum(int(p.split("removing ")[1].split()[0]) for p in purges)
    assert removed > 0, purges
    # Purge drops the ack rows of purged batches, all but the newest.
    acked = acked_ids(db)
    reader.refresh()
    staged = reader.staged_batches()
    assert set(staged) <= set(acked), "whatever is still staged is applied"
    assert acked[-1] == reader.last_staged("s3purge"), "up to the last staged batch"
    assert_no_secret(s3, log.read_text(), *purges)


def test_job_on_a_standalone_cluster_writes_the_wal_to_s3(db, s3, bucket, tmp_path):
    """Executors in JVMs of their own reach S3 with the settings the job hands to
    Spark, and credentials from their environment."""
    fresh_table(db, "s3_cluster")
    landing = tmp_path / "landing"
    landing.mkdir()
    expected = write_landing(
        landing,
        [[(f"k{i % 3}", f"{i}.50", i) for i in range(b, b + 20)] for b in (0, 20)],
    )
    config = s3_config(
        tmp_path / "s3cluster.toml",
        db,
        s3,
        f"{bucket}/wal",
        table="s3_cluster",
        source=landing_source(landing, files_per_trigger=1),
    )
    env = job_env()
    with standalone_cluster(tmp_path, env) as master:
        job = JobProcess(
            config,
            tmp_path / "job.log",
            "--available-now",
            env=env,
            submit_args=("--master", master, "--conf", "spark.executor.memory=512m"),
        )
        assert job.wait() == 0, job.tail()
    assert list((tmp_path / "work").glob("app-*/*")), "no executor JVM ran"
    assert totals(db, "s3_cluster") == expected
    assert acked_ids(db) == [0, 1]
    assert_no_secret(s3, job.text())


@pytest.fixture
def spark_with_s3_credentials(spark, s3):
    """The tests' shared SparkSession, whose JVM started before the server's
    credentials were in the environment: they are handed to S3A as Hadoop settings
    of this session instead (its simple provider; local mode, tasks in this JVM)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("fs.s3a.access.key", s3.access_key)
    hadoop.set("fs.s3a.secret.key", s3.secret_key)
    yield spark
    hadoop.unset("fs.s3a.access.key")
    hadoop.unset("fs.s3a.secret.key")


@pytest.fixture
def s3_wal_state(spark_with_s3_credentials, db, s3, bucket, tmp_path):
    """Batches 0, 1, 2 staged on S3; 0 and 2 acked, 1 not; batch 0 had two rows
    quarantined. Returns the config path."""
    from wal_sink.protocol.sink_instance import SinkInstance
    from wal_sink.spark.staging import stage

    spark = spark_with_s3_credentials

    for t in ("ops_totals", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE ops_totals (k VARCHAR(4) PRIMARY KEY, amount DECIMAL(14,2)) "
        "ENGINE=InnoDB"
    )
    config_path = s3_config(
        tmp_path / "ops.toml", db, s3, f"{bucket}/wal", table="ops_totals"
    )
    instance = SinkInstance(load_config(config_path))
    committer = instance.start()
    for b in range(3):
        rows = [(f"k{i}", Decimal(b + 1)) for i in range(4)]
        if b == 0:
            rows += [("far-too-long", Decimal(1)), (None, Decimal(1))]
        stage(spark.createDataFrame(rows, SCHEMA), instance.writer, b)
    assert committer.apply(0).quarantined == 2
    committer.apply(2)
    instance.close()
    return config_path


def test_every_cli_command_works_against_an_s3_wal(s3_wal_state, db, s3, bucket):
    config = s3_wal_state
    outputs: list[str] = []

    def run(*args: str, code: int = 0, **kwargs) -> str:
        r = cli(config, *args, **kwargs)
        outputs.extend([r.stdout, r.stderr])
        assert r.returncode == code, r.stderr
        return r.stdout

    st = json.loads(run("status", "--json"))
    assert st["wal_path"] == f"{bucket}/wal"
    assert (st["staged_batches"], st["unacked"], st["wal_rows"]) == (3, [1], 14)
    assert "1 staged, not applied: 1" in run("status")
    shown = run("inspect", "1", "--limit", "2")
    assert "batch 1: 4 rows" in shown and "showing 2" in shown
    quarantined = run("inspect", "--quarantine")
    assert "showing 2" in quarantined and "far-too-long" in quarantined
    assert "batch 1: 4 rows" in run("recover")
    assert totals(db) == {f"k{i}": Decimal(6) for i in range(4)}
    run("replay", "--from", "0", "--to", "0", "--force", "--yes")
    assert totals(db) == {f"k{i}": Decimal(7) for i in range(4)}
    purged = run("purge", "--before", "2", "--vacuum", "--retain", "0s")
    assert "removing 2 acked batch(es)" in purged and "vacuum freed" in purged
    st = json.loads(run("status", "--json"))
    assert (st["staged_first"], st["staged_last"], st["unacked"]) == (2, 2, [])
    fs, root = s3_storage(s3).filesystem(f"{bucket}/wal")
    left = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    assert not [i.path for i in left if "_wal_batch_id=0" in i.path and i.is_file]
    assert not [i.path for i in left if "_wal_sink_probe" in i.path and i.is_file]
    wrong = run("status", code=1, env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    assert wrong.count("\n") == 0 and "not-the-secret" not in outputs[-1]
    assert outputs[-1].startswith("error: ") and outputs[-1].count("\n") == 1
    assert_no_secret(s3, *outputs)


def test_store_ignoring_conditional_puts_is_refused_with_one_line(
    db, s3, bucket, tmp_path
):
    """The same buckets through a server that does not check signatures, behind a
    proxy that drops If-None-Match: the start-up probe's second put succeeds, so
    neither the CLI nor the job changes anything."""
    import pyarrow as pa
    from deltalake import write_deltalake

    fresh_table(db, "s3_unsafe")
    wal = f"{bucket}/wal"
    opts = s3_storage(s3).delta_options
    write_deltalake(  # a WAL with one batch staged, written through the real server
        wal,
        pa.table({"k": ["a"], "amount": [1], "_wal_seq": [0], "_wal_batch_id": [0]}),
        partition_by=["_wal_batch_id"],
        storage_options=opts,
    )
    lax = S3Proxy(tmp_path / "lax", data_dir=s3.data_dir, authorization=False)
    lax.start()
    proxy = NoConditionalPut(lax.port)
    proxy.start()
    try:
        landing = tmp_path / "landing"
        write_landing(landing, CRASH_BATCHES[:1])
        config = s3_config(
            tmp_path / "unsafe.toml",
            db,
            s3,
            wal,
            table="s3_unsafe",
            source=landing_source(landing),
        )
        config.write_text(config.read_text().replace(s3.endpoint, proxy.endpoint))
        outputs = []
        for command in (["purge", "--before", "1"], ["recover"]):
            r = cli(config, *command)
            outputs += [r.stdout, r.stderr]
            assert r.returncode == 2, r.stderr
            assert r.stderr.count("\n") == 1 and "ignores conditional puts" in r.stderr
        job = JobProcess(config, tmp_path / "job.log", "--available-now")
        assert job.wait() == 2, job.tail()
        errors = [ln for ln in job.text().splitlines() if " ERROR wal_sink" in ln]
        assert len(errors) == 1 and "ignores conditional puts" in errors[0], errors
        assert proxy.stripped >= 6, "each check put twice through the proxy"
    finally:
        proxy.stop()
        lax.stop()
    assert DeltaTable(wal, storage_options=opts).version() == 0, "nothing committed"
    assert db.rows("SELECT COUNT(*) FROM s3_unsafe") == [(0,)]
    assert_no_secret(s3, job.text(), *outputs)
