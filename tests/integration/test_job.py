"""The spark-submit job end to end: real Spark launches, a real Kafka broker, files
arriving, SIGKILL at random moments, restart strategies, SIGTERM, and a Spark
standalone cluster with executors in separate JVMs."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import psutil

from devtools.invoices import InvoiceFeed
from devtools.spark_cluster import standalone_cluster
from devtools.spark_job import JobProcess, job_env
from tests.helpers import (
    JOB,
    REPO,
    SEED,
    arrive,
    fresh_table,
    landing_config,
    quarantined_raw,
    rng,
    survive_kills_then_drain,
    totals,
    write_config,
)


def test_files_arriving_while_job_is_killed_land_exactly_once(db, tmp_path):
    print(f"seed {SEED}")
    fresh_table(db, "file_totals")
    landing = tmp_path / "landing"
    landing.mkdir()
    config = write_config(
        tmp_path / "files.toml",
        db,
        job=JOB,
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "k STRING, amount DECIMAL(12,2)"
options = {{ maxFilesPerTrigger = 2 }}""",
        table="file_totals",
    )
    expected: dict[str, Decimal] = {}
    log = tmp_path / "job.log"
    survive_kills_then_drain(
        config, log, lambda killed: arrive(landing, expected, 60, 0.35, killed)
    )
    assert totals(db, "file_totals") == expected
    from wal_sink.wal.reader import WalReader

    acked = {r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack")}
    assert set(WalReader(str(tmp_path / "wal")).staged_batches()) <= acked
    assert "batch " in log.read_text() and "rows=" in log.read_text()
    # The job's session writes a local checkpoint without checksum files
    # (session.py), and the kills above found every entry whole all the same.
    assert checksum_files(tmp_path / "checkpoint") == []


def test_kafka_messages_produced_while_job_is_killed_land_exactly_once(
    db, kafka, tmp_path
):
    print(f"seed {SEED}")
    fresh_table(db, "kafka_totals")
    kafka.create_topic("payments", partitions=2)
    config = write_config(
        tmp_path / "kafka.toml",
        db,
        job=JOB,
        source=f"""
[source]
format = "kafka"
schema = "k STRING, amount DECIMAL(12,2)"
options = {{ "kafka.bootstrap.servers" = "{kafka.bootstrap}", subscribe = "payments", \
startingOffsets = "earliest", maxOffsetsPerTrigger = 150 }}""",
        table="kafka_totals",
    )
    expected: dict[str, Decimal] = {}
    garbage: list[str] = []

    def produce(killed: threading.Event) -> None:
        producer = kafka.producer()
        i = -1
        while (i := i + 1) < 900 or not killed.is_set():
            if i % 100 == 50:  # unparseable: must reach the quarantine, once
                garbage.append(f"garbage #{i} {{")
                producer.send("payments", garbage[-1].encode())
                continue
            k, amount = f"k{rng.randrange(6)}", Decimal(rng.randrange(1, 10_000)) / 100
            producer.send(
                "payments", json.dumps({"k": k, "amount": str(amount)}).encode()
            )
            expected[k] = expected.get(k, Decimal(0)) + amount
            time.sleep(0.025)
        producer.flush()
        producer.close()

    survive_kills_then_drain(config, tmp_path / "job.log", produce)
    assert totals(db, "kafka_totals") == expected
    assert sorted(quarantined_raw(tmp_path, "kafka")) == sorted(garbage)


def test_unparseable_records_are_quarantined_once_not_applied(db, tmp_path):
    fresh_table(db, "parsed")
    config = landing_config(db, tmp_path, "parsed")
    bad_lines = [
        '{"k": "a", "amount": "lots"}',
        "not json at all",
        '{"k": "b", "amount": ',
    ]
    with open(tmp_path / "landing" / "f1.json", "a") as f:
        f.write("\n".join(bad_lines) + "\n")
    for _ in range(2):  # a second run finds nothing new and records nothing twice
        job = JobProcess(config, tmp_path / "job.log", "--available-now")
        assert job.wait() == 0, job.tail()
    assert totals(db, "parsed") == {"a": Decimal("3.00")}, (
        "no NULLs written over values"
    )
    assert sorted(quarantined_raw(tmp_path, "parsed")) == sorted(bad_lines)
    assert "unparseable record(s) quarantined" in job.log.read_text()


def checksum_files(*roots: Path) -> list[Path]:
    """Hadoop's ``.crc`` files under ``roots``."""
    return [p for root in roots for p in root.rglob("*.crc")]


def test_restart_strategy_gives_up_after_its_attempts(db, tmp_path):
    fresh_table(db, "giveup")
    config = landing_config(
        db,
        tmp_path,
        "giveup",
        'restart = { strategy = "fixed-delay", attempts = 2, delay = "1s" }',
    )
    job = JobProcess(
        config,
        tmp_path / "job.log",
        "--available-now",
        env=job_env(WAL_SINK_FAULT="commit.before_commit:1:raise"),
    )
    assert job.wait() == 1
    log = job.text()
    assert "restart 1/2" in log and "restart 2/2" in log
    assert "restart strategy 'fixed-delay' gives up" in log
    assert totals(db, "giveup") == {"a": Decimal("1.00")}, "batch 0 only, never batch 1"


def test_restart_after_a_failure_recovers_and_drains(db, tmp_path):
    """Also: Hadoop's checksummed local FileContext, set in job.spark_conf, wins
    over the job's default (the raw one) for the checkpoint."""
    fresh_table(db, "retry")
    checksummed = (
        '"spark.hadoop.fs.AbstractFileSystem.file.impl" = '
        '"org.apache.hadoop.fs.local.LocalFs"'
    )
    config = landing_config(
        db,
        tmp_path,
        "retry",
        'restart = { strategy = "failure-rate", max_failures = 2, '
        'interval = "1 minute", delay = "1s" }',
        job=f'trigger = "1 second"\nspark_conf = {{ {checksummed} }}',
    )
    job = JobProcess(
        config,
        tmp_path / "job.log",
        "--available-now",
        env=job_env(WAL_SINK_FAULT="commit.before_commit:1:raise-once"),
    )
    assert job.wait() == 0, job.tail()
    assert "injected fault" in job.text()
    assert totals(db, "retry") == {"a": Decimal("3.00")}
    assert checksum_files(tmp_path / "checkpoint" / "offsets")


def test_bad_config_exits_two_with_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[sink]\nid = 'x'\n")
    job = JobProcess(bad, tmp_path / "job.log")
    assert job.wait() == 2
    assert "ERROR wal_sink.job: config section [mysql] is missing" in job.text()


def test_invoice_pipeline_from_files_is_exact(db, tmp_path):
    for t in ("kpxxb_hzb", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.run_sql_file("demo_kpxxb_hzb.sql")
    landing = tmp_path / "landing"
    landing.mkdir()
    feed = InvoiceFeed(seed=3)
    from datetime import datetime, timedelta, timezone

    start = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
    files: list[list[dict]] = [
        [
            feed.message(start + timedelta(milliseconds=150 * (f * 40 + i)))
            for i in range(40)
        ]
        for f in range(6)
    ]
    # A closing invoice an hour later moves the watermark past every earlier window;
    # --available-now then runs the batch without data that emits them.
    files += [[feed.closing(start)]]
    for i, messages in enumerate(files):
        path = landing / f"inv{i}.json"
        path.write_text("".join(json.dumps(m) + "\n" for m in messages))
        os.utime(path, (1_700_000_000 + i,) * 2)
    conf = (REPO / "conf" / "invoices_files.toml").read_text()
    conf = (
        conf.replace("../var/landing/invoices", str(landing))
        .replace("../var/wal/invoices_files", str(tmp_path / "wal"))
        .replace("../var/checkpoints/invoices_files", str(tmp_path / "cp"))
        .replace("mysql+pymysql://sink@127.0.0.1:33306/shop", db.url)
        .replace("maxFilesPerTrigger = 2", "maxFilesPerTrigger = 1")
    )
    config = tmp_path / "invoices_files.toml"
    config.write_text(conf)
    job = JobProcess(config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 0, job.tail()
    got = {
        (r[0], r[1]): (r[2], r[3])
        for r in db.rows("SELECT swjg_dm, fpzt, hjje, fs FROM kpxxb_hzb")
    }
    assert got == dict(feed.expected)
    assert sum(c for _, c in got.values()) == 228, "every 20th message lacks magic"


def test_datasource_writer_killed_and_stopped_lands_exactly_once(db, tmp_path):
    """job.writer = "datasource": the query stages through format("wal_sink") and
    the job's follower child applies; SIGKILL of the job's process group, then
    SIGTERM (exit 0), then a drain."""
    print(f"seed {SEED}")
    fresh_table(db, "ds_job_totals")
    landing = tmp_path / "landing"
    landing.mkdir()
    config = write_config(
        tmp_path / "dsjob.toml",
        db,
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "k STRING, amount DECIMAL(12,2)"
options = {{ maxFilesPerTrigger = 1 }}""",
        table="ds_job_totals",
        job=JOB + '\nwriter = "datasource"',
    )
    expected: dict[str, Decimal] = {}
    log = tmp_path / "job.log"
    survive_kills_then_drain(
        config,
        log,
        lambda stopped: arrive(landing, expected, 20, 0.5, stopped),
        rounds=1,
        then_stop=True,
    )
    assert totals(db, "ds_job_totals") == expected
    text = log.read_text()
    assert "applied: rows=" in text and "query finished: stopped" in text
    assert "query finished: drained" in text
    # This job's followers only: other suites on the machine run their own.
    running = psutil.process_iter(["cmdline"])
    lines = (" ".join(p.info["cmdline"] or []) for p in running)
    children = [
        line
        for line in lines
        if "wal_sink.cli.follower_process" in line and str(config) in line
    ]
    assert not children, "no follower outlives its job"


def test_datasource_writer_with_a_reset_checkpoint_exits_two_at_once(db, tmp_path):
    """The data source refuses the batch (I7) inside Spark; the job finds its error
    in the query's failure and stops with its line and exit 2 (a configuration
    refusal, as with foreachBatch), without restarting."""
    fresh_table(db, "ds_reset")
    config = landing_config(db, tmp_path, "ds_reset", 'writer = "datasource"')
    first = JobProcess(config, tmp_path / "job.log", "--available-now")
    assert first.wait() == 0, first.tail()
    config.write_text(config.read_text().replace('/checkpoint"', '/new_checkpoint"'))
    again = JobProcess(config, tmp_path / "again.log", "--available-now")
    assert again.wait() == 2, again.tail()
    log = again.text()
    assert "ERROR wal_sink.job: sink 'ds_reset': the WAL/ack table already hold" in log
    assert "reset or replaced" in log and "restart 1/" not in log
    assert totals(db, "ds_reset") == {"a": Decimal("3.00")}


def test_job_runs_unchanged_on_a_standalone_cluster(db, tmp_path):
    """A master and a worker from pyspark's own classes; executors are separate JVMs;
    the WAL is on a filesystem every node (here: process) sees. The executors write
    every batch (``wal.driver_stage_rows = 0``) and cannot start the job's Python
    (``python_on_driver_only``): the default writer sends them no Python function."""
    job = run_on_cluster(db, tmp_path, "cluster")
    assert job.wait() == 0, job.tail()
    executors = list((tmp_path / "work").glob("app-*/*"))
    assert executors, "no executor JVM ran on the worker"
    spark_files = list((tmp_path / "wal").rglob("part-*-c000.snappy.parquet"))
    assert len(spark_files) == 3, "a batch was not Spark's Parquet write"
    assert totals(db, "cluster") == {"a": Decimal("3.00")}


def test_datasource_writer_on_a_cluster_whose_executors_lack_python_fails(db, tmp_path):
    """The control of the test above: the same cluster and Python set-up with
    ``job.writer = "datasource"``, whose writer is Python run on the executors."""
    job = run_on_cluster(
        db,
        tmp_path,
        "cluster_ds",
        'writer = "datasource"\nrestart = { strategy = "none" }',
    )
    assert job.wait() == 1, job.tail()
    assert 'Cannot run program "driver-python"' in job.text()
    assert totals(db, "cluster_ds") == {}


def run_on_cluster(db, tmp_path: Path, name: str, extra: str = "") -> JobProcess:
    """Drain the three landing files through the job on a standalone cluster whose
    executors write every batch and cannot start the job's Python; return the
    finished job."""
    fresh_table(db, name)
    config = landing_config(db, tmp_path, name, extra, wal="driver_stage_rows = 0")
    env = job_env()
    with standalone_cluster(tmp_path, env) as master:
        job = JobProcess(
            config,
            tmp_path / "job.log",
            "--available-now",
            env=python_on_driver_only(tmp_path, env),
            submit_args=("--master", master, "--conf", "spark.executor.memory=512m"),
        )
        job.wait()
    return job


def python_on_driver_only(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the job's Python named ``driver-python``, a command only this
    environment's PATH finds. Every Python function Spark sends to an executor names
    the Python to start for it: a UDF's or an RDD's the driver Python's
    PYSPARK_PYTHON, a ``pyspark_*`` data source's the driver JVM's
    PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON (``spark.pyspark.python`` reaches the
    former only). Executors started by a worker without this PATH cannot start it,
    as on a node without Python."""
    bin_dir = tmp_path / "driver-bin"
    bin_dir.mkdir()
    python = bin_dir / "driver-python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return {
        **env,
        "PYSPARK_PYTHON": python.name,
        "PYSPARK_DRIVER_PYTHON": python.name,
        "PATH": f"{bin_dir}:{env['PATH']}",
    }
