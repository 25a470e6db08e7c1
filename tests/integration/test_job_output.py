"""What the job prints: its own lines and Spark's warnings, not Spark's INFO — and
Spark's INFO back when asked for. Real spark-submit runs over a landing directory."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from devtools.spark_job import JobProcess, job_env
from tests.helpers import fresh_table, landing_config

# Spark's console pattern: "26/11/22 16:43:14 INFO SparkContext: ...".
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", re.MULTILINE)
PROGRESS_JSON = '"numInputRows"'  # the per-trigger progress report of each query
STAGED_PARTS = (
    r"rows=1 stage_ms=\d+ pending=\d+ plan_ms=\d+ fold_ms=\d+ lease_ms=\d+ wait_ms=\d+ "
    r"check_ms=\d+ collect_ms=\d+ write_ms=\d+ list_ms=\d+ delta_ms=\d+ "
    r"handoff_ms=\d+ errors_ms=\d+"
)


def run_drain(config: Path, log: Path, *args: str, **env: str) -> str:
    job = JobProcess(config, log, "--available-now", *args, env=job_env(**env))
    assert job.wait() == 0, job.tail()
    return job.text()


def test_default_output_is_the_sinks_lines_without_sparks_info(db, tmp_path):
    fresh_table(db, "quiet")
    config = landing_config(db, tmp_path, "quiet")  # 3 files, one per batch
    out = run_drain(config, tmp_path / "job.log")
    lines = out.splitlines()
    for expected in (
        "INFO wal_sink.job: sink quiet starting from",
        "Spark logs at WARN",
        "took lease epoch 1",
        "query finished: drained",
    ):
        assert expected in out, out
    for batch in range(3):
        assert f"INFO wal_sink.job: batch {batch} staged: rows=1 " in out, out
        staged = re.search(rf"batch {batch} staged: (.*)", out).group(1)
        assert re.fullmatch(STAGED_PARTS, staged), staged  # one line, every part
        assert f"INFO wal_sink.job: batch {batch} applied: rows=1 " in out, out
    assert not SPARK_INFO.search(out), SPARK_INFO.search(out).group(0)
    assert "org.apache.spark" not in out and PROGRESS_JSON not in out
    # The JVM's start-up notice, a few of Spark's WARN lines (hostname, native
    # Hadoop, adaptive execution in streaming, a busy UI port), the sink's 10.
    assert len(lines) < 40, out


def test_spark_log_level_flag_brings_sparks_info_back(db, tmp_path):
    fresh_table(db, "chatty")
    config = landing_config(
        db, tmp_path, "chatty", extra='spark_log_level = "ERROR"'
    )  # the flag overrides the config key
    out = run_drain(config, tmp_path / "job.log", "--spark-log-level", "info")
    assert "Spark logs at INFO" in out
    assert "INFO SparkContext: Running Spark version" in out, "start-up lines too"
    assert PROGRESS_JSON in out
    assert len(SPARK_INFO.findall(out)) > 100
    assert "INFO wal_sink.job: batch 2 applied: rows=1 " in out


def test_without_the_profile_spark_is_quiet_once_the_session_runs(db, tmp_path):
    """A Spark install without wal_sink's log4j2.properties (an empty conf dir here):
    Spark's start-up INFO shows, then setLogLevel silences the batches."""
    fresh_table(db, "own_spark")
    config = landing_config(db, tmp_path, "own_spark")
    (tmp_path / "spark_conf").mkdir()
    out = run_drain(
        config, tmp_path / "job.log", SPARK_CONF_DIR=str(tmp_path / "spark_conf")
    )
    assert "Using Spark's default log4j profile" in out
    assert SPARK_INFO.search(out), "the start-up lines, before the session exists"
    after_start = out.split("took lease epoch", 1)[1]
    assert not SPARK_INFO.search(after_start) and PROGRESS_JSON not in after_start
    assert "INFO wal_sink.job: batch 2 applied: rows=1 " in out


def test_bad_spark_log_level_flag_exits_two_with_one_line(db, tmp_path):
    config = landing_config(db, tmp_path, "loud")
    job = JobProcess(
        config, tmp_path / "job.log", "--spark-log-level", "LOUD", env=job_env()
    )
    assert job.wait() == 2
    assert (
        "ERROR wal_sink.job: --spark-log-level 'LOUD' must be one of OFF, FATAL"
        in job.text()
    )


@pytest.mark.parametrize("flag", ["--print-ddl", "--available-now"])
def test_a_source_directory_not_there_yet_exits_two_with_one_line(db, tmp_path, flag):
    """Before, Spark's PATH_NOT_FOUND was a traceback, and the job ran its restart
    strategy before giving up (exit 1)."""
    config = landing_config(db, tmp_path, "early")
    landing = tmp_path / "landing"
    shutil.rmtree(landing)
    job = JobProcess(config, tmp_path / "job.log", flag, env=job_env())
    assert job.wait() == 2, job.tail()
    out = job.text()
    assert (
        f"ERROR wal_sink.job: source.path '{landing}' does not exist: create it (the "
        "job reads the json files that land there), or set source.path to where they "
        "land"
    ) in out
    assert "Traceback" not in out and "query failed" not in out, out
