"""Bad input as a user meets it, through the real ``wal-sink`` and the real job: one
line, exit code 2, no traceback, no secret — a config file that is not UTF-8, a URL
for another driver or holding a password, durations that mean nothing, a secret in
job.spark_conf, a target the sink's user cannot see."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devtools.spark_job import JobProcess, job_env
from tests.helpers import JOB, cli, config_dict, fresh_table, write_config

SECRET = "s3cr3t-value-4b1e"
SOURCE = '[source]\nformat = "rate"'


def good(db, tmp_path: Path, name: str = "bad") -> Path:
    return write_config(
        tmp_path / f"{name}.toml", db, table="t", source=SOURCE, job=JOB
    )


def edited(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


def with_mysql_key(path: Path, line: str) -> Path:
    return edited(path, "[mysql]\n", f"[mysql]\n{line}\n")


def with_job_key(path: Path, line: str) -> Path:
    return edited(path, "[job]\n", f"[job]\n{line}\n")


def not_utf8(path: Path) -> Path:
    path.write_bytes(path.read_bytes() + "# café\n".encode("latin-1"))
    return path


CASES = {
    "not_utf8": (not_utf8, "is not UTF-8 text"),
    "mysql_scheme": (
        lambda p: edited(p, "mysql+pymysql://", "mysql://"),
        "mysql.url: must start with mysql+pymysql:// or mariadb+pymysql://",
    ),
    "url_password": (
        lambda p: edited(p, '/test_bad_input"', f'/test_bad_input?password={SECRET}"'),
        "mysql.url: query key 'password': a password never goes in the URL",
    ),
    "url_passwd": (
        lambda p: edited(p, '/test_bad_input"', f'/test_bad_input?passwd={SECRET}"'),
        "mysql.url: query key 'passwd'",
    ),
    "url_query_type": (
        lambda p: edited(p, '/test_bad_input"', '/test_bad_input?connect_timeout=abc"'),
        "mysql.url: a query value is not of its option's type",
    ),
    "read_timeout_zero": (
        lambda p: with_mysql_key(p, "read_timeout = 0"),
        "mysql.read_timeout: must be more than 0 seconds",
    ),
    "retry_backoff_negative": (
        lambda p: with_mysql_key(p, 'retry_backoff = "-2 seconds"'),
        "mysql.retry_backoff: '-2 seconds' is not a duration",
    ),
    "outage_budget_zero": (
        lambda p: with_mysql_key(p, 'outage_budget = "0 minutes"'),
        "mysql.outage_budget: must be more than 0 seconds",
    ),
    "read_timeout_endless": (
        lambda p: with_mysql_key(p, "read_timeout = inf"),
        "mysql.read_timeout: inf is not a duration from 0 to 365 days",
    ),
    "trigger_zero": (
        lambda p: edited(p, 'trigger = "1 second"', 'trigger = "0 seconds"'),
        "job.trigger: must be more than 0 seconds",
    ),
    "tls_file_missing": (
        lambda p: with_mysql_key(p, 'tls = { ssl_ca = "/nonexistent/ca.pem" }'),
        "mysql.tls: PyMySQL cannot load the TLS files (ssl_ca = '/nonexistent/ca.pem')",
    ),
    "spark_conf_secret": (
        lambda p: edited(
            p,
            '"spark.sql.shuffle.partitions" = 2',
            f'"spark.hadoop.fs.s3a.secret.key" = "{SECRET}"',
        ),
        "job.spark_conf: 'spark.hadoop.fs.s3a.secret.key' may hold a secret",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_the_cli_says_what_is_wrong_in_one_line(db, tmp_path, case):
    make, says = CASES[case]
    config = make(good(db, tmp_path))
    r = cli(config, "status")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert says in r.stderr
    assert "Traceback" not in r.stderr and SECRET not in r.stdout + r.stderr


def test_the_job_says_what_is_wrong_in_one_line(db, tmp_path):
    for case in ("not_utf8", "url_password", "spark_conf_secret", "tls_file_missing"):
        make, says = CASES[case]
        log = tmp_path / f"{case}.log"
        job = JobProcess(make(good(db, tmp_path, case)), log)
        assert job.wait(timeout=300) == 2, job.tail()
        errors = [line for line in job.text().splitlines() if " ERROR " in line]
        assert len(errors) == 1 and says in errors[0], job.tail()
        assert "Traceback" not in job.text() and SECRET not in job.text()


@pytest.fixture
def blind_user(db, mariadb):
    """A user with the sink's own tables granted, but no privilege on the target."""
    fresh_table(db, "t")
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("DROP USER IF EXISTS 'blind'@'127.0.0.1'")
        cur.execute("CREATE USER 'blind'@'127.0.0.1' IDENTIFIED BY 'blind-pw'")
        for table in ("wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS `{db.name}`.{table} (x INT) ENGINE=InnoDB"
            )
            cur.execute(f"GRANT ALL ON `{db.name}`.{table} TO 'blind'@'127.0.0.1'")
    yield {"BLIND_PW": "blind-pw"}
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("DROP USER IF EXISTS 'blind'@'127.0.0.1'")


def blind(db, tmp_path: Path, name: str = "blind") -> Path:
    path = edited(good(db, tmp_path, name), "sink@", "blind@")
    return with_mysql_key(path, 'password_env = "BLIND_PW"')


def test_a_target_hidden_from_the_user_is_named_with_the_grant_it_needs(
    db, tmp_path, blind_user
):
    expected = (
        "table 't': target table cannot be seen by user 'blind'@'127.0.0.1': it "
        "holds no privilege on it (or the table does not exist); the sink needs "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {db.name}.t TO "
        "'blind'@'127.0.0.1'"
    )
    r = cli(blind(db, tmp_path), "recover", env=blind_user)
    assert (r.returncode, r.stderr) == (2, f"error: {expected}\n")
    job = JobProcess(
        blind(db, tmp_path, "blind_job"),
        tmp_path / "job.log",
        env=job_env(**blind_user),
    )
    assert job.wait(timeout=300) == 2, job.tail()
    assert f"ERROR wal_sink.job: {expected}" in job.text()
    assert "Traceback" not in job.text()


@pytest.mark.parametrize(
    "ddl, says",
    [
        (None, "table 't': target table does not exist; create it first"),
        (
            "CREATE TABLE t (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(16,2)) "
            "ENGINE=MyISAM",
            "table 't': target table uses MyISAM; it must be InnoDB",
        ),
    ],
)
def test_a_missing_or_non_transactional_target_is_refused_with_exit_2(
    db, tmp_path, ddl, says
):
    """A wrong target is a configuration error: one line, exit 2, nothing made."""
    fresh_table(db, "t")
    db.execute("DROP TABLE t")
    if ddl:
        db.execute(ddl)
    r = cli(good(db, tmp_path), "recover")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {says}"), r.stderr
    assert os.environ["WAL_SINK_MYSQL_PASSWORD"] not in r.stderr
    assert not db.rows("SHOW TABLES LIKE 'wal_sink_ack'")


def test_source_options_env_reaches_the_spark_reader(spark, monkeypatch):
    """A secret's option is read from its variable when the query's reader is made:
    an unset variable is one line; a set one reaches Spark (which checks it)."""
    from pyspark.errors import PySparkException

    from wal_sink.config import config_from_dict
    from wal_sink.errors import ConfigError
    from wal_sink.spark.source import read_source

    source = {"format": "rate", "options_env": {"rowsPerSecond": "TEST_RATE"}}
    config = config_from_dict(config_dict(source=source))
    monkeypatch.delenv("TEST_RATE", raising=False)
    with pytest.raises(ConfigError, match="'TEST_RATE', which is not set"):
        read_source(spark, config)
    monkeypatch.setenv("TEST_RATE", "-7")
    with pytest.raises((PySparkException, ValueError), match="-7"):
        read_source(spark, config)
    monkeypatch.setenv("TEST_RATE", "7")
    assert read_source(spark, config).isStreaming


NO_SCHEMA = "source.schema is required for format 'parquet'"


def test_a_parquet_source_without_a_schema_is_refused_at_start(db, tmp_path):
    """Spark cannot start a streaming Parquet source without its schema: the job
    failed at each attempt, then gave up with exit 1, as for an outage."""
    (tmp_path / "landing").mkdir()
    parquet = '[source]\nformat = "parquet"\npath = "landing"'
    job = JobProcess(edited(good(db, tmp_path), SOURCE, parquet), tmp_path / "job.log")
    assert job.wait(timeout=300) == 2, job.tail()
    errors = [line for line in job.text().splitlines() if " ERROR " in line]
    assert len(errors) == 1 and NO_SCHEMA in errors[0], job.tail()
    assert "Traceback" not in job.text()


def test_spark_infers_a_parquet_sources_schema_when_told_to(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wal_sink.config import config_from_dict
    from wal_sink.errors import ConfigError
    from wal_sink.spark.source import SCHEMA_INFERENCE, read_source

    pq.write_table(pa.table({"k": ["a"], "n": [1]}), tmp_path / "part-0.parquet")
    source = {"format": "parquet", "path": str(tmp_path)}
    config = config_from_dict(config_dict(source=source))
    with pytest.raises(ConfigError, match=NO_SCHEMA):
        read_source(spark, config)
    spark.conf.set(SCHEMA_INFERENCE, "true")
    try:
        assert read_source(spark, config).columns == ["k", "n"]
    finally:
        spark.conf.unset(SCHEMA_INFERENCE)
