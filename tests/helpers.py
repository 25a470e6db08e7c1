"""Helpers shared by test modules (a test module never imports another one; the
fixtures are conftest.py's): sink configs, the CLI, targets and their totals,
landing files and streams, staging without a job, the spark-submit job, pipeline
runs and their kills, S3, the follower in a thread, and what the unit tests build
without MySQL."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy.dialects.mysql import pymysql

from devtools.s3proxy import REGION
from devtools.spark_job import JobProcess, job_env
from wal_sink.config import Config, load_config
from wal_sink.faults import ENV, InjectedFault
from wal_sink.ops.quarantine_entries import list_entries
from wal_sink.protocol.follower import Follower
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.driver_stage import write_file
from wal_sink.spark.sink import WalSink
from wal_sink.spark.staging import stage
from wal_sink.storage import Storage
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN
from wal_sink.wal.writer import WalWriter

# Sink configs.
REPO = Path(__file__).resolve().parent.parent
ADD_AMOUNT = 'merge = { amount = "add" }'
JOB = 'trigger = "1 second"\nspark_conf = { "spark.sql.shuffle.partitions" = 2 }'
"""The [job] lines of a test job: a quick trigger, two shuffle partitions."""


def write_config(
    path: Path,
    db,
    *,
    table: str,
    sink_id: str | None = None,
    wal_path: Path | str | None = None,
    url: str | None = None,
    source: str = "",
    wal: str = "",
    mysql: str = ADD_AMOUNT,
    job: str | None = None,
    sections: str = "",
) -> Path:
    """Factory: write a sink's TOML config to ``path`` (for the CLI and the jobs,
    which read a file) and return ``path``.

    The sink is ``sink_id`` (the file's stem by default), its WAL ``wal_path``
    (``wal`` beside the file), its target ``table`` in ``db`` keyed on ``k``.
    ``wal``, ``mysql`` and ``job`` are more lines of those sections; ``job=None``
    writes no [job] section, otherwise its checkpoint is ``checkpoint`` beside the
    file. ``source`` and ``sections`` are whole sections, before and after.
    """
    home = path.parent
    job_section = (
        "" if job is None else f'[job]\ncheckpoint = "{home / "checkpoint"}"\n{job}'
    )
    path.write_text(f"""
[sink]
id = "{sink_id or path.stem}"

{source}

[wal]
path = "{wal_path or home / "wal"}"
{wal}

[mysql]
url = "{url or db.url}"
table = "{table}"
key = ["k"]
{mysql}

{job_section}

{sections}
""")
    return path


def settle(sink) -> None:
    """Wait until the sink's committer applied what is staged; raise its failure."""
    sink.drain(300)
    sink.check()


# The CLI.
WAL_SINK = str(Path(sys.executable).with_name("wal-sink"))


def cli(
    config: Path,
    *args: str,
    input: str | None = None,
    env: dict | None = None,
    new_session: bool = False,
):
    """``wal-sink -c config args``; ``new_session``: in a process group of its
    own, so that a kill fault (faults.py) takes it and not the test."""
    return subprocess.run(
        [WAL_SINK, "-c", str(config), *args],
        capture_output=True,
        text=True,
        input=input,
        cwd=REPO,
        timeout=300,
        env={**os.environ, **(env or {})},
        start_new_session=new_session,
    )


def ops_config(path: Path, db, url: str | None = None) -> Path:
    """Sink ``ops`` adding amounts into ops_totals, its WAL beside ``path``."""
    return write_config(path, db, table="ops_totals", sink_id="ops", url=url)


def ops_sink(db, tmp_path: Path, key_width: int = 16):
    """A fresh ops_totals table and a started sink instance on it."""
    for t in ("ops_totals", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        f"CREATE TABLE ops_totals (k VARCHAR({key_width}) PRIMARY KEY, "
        "amount DECIMAL(14,2)) ENGINE=InnoDB"
    )
    config_path = ops_config(tmp_path / "ops.toml", db)
    instance = SinkInstance(load_config(config_path))
    return config_path, instance, instance.start()


def delta_log(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "wal" / "_delta_log").iterdir())


# Targets, and the random amounts that go into them.
SEED = int(os.environ.get("WAL_SINK_TEST_SEED", time.time()))
rng = random.Random(SEED)


def fresh_table(db, name: str) -> None:
    for t in (name, "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        f"CREATE TABLE {name} (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(16,2)) "
        "ENGINE=InnoDB"
    )


def documented_user(db, name: str, *grants: str, documented: bool = True) -> str:
    """A user ``name`` (dropped and made again) holding what sql/grants.sql grants
    in ``db`` (unless not ``documented``), and ``grants`` besides, written as the
    file writes them (``shop.``, ``'sink'@'%'``); returns its URL. The tables
    granted on must exist first (``demo_kpxxb_hzb.sql``, ``wal_sink_tables.sql``):
    MariaDB refuses a grant on a missing table unless it holds CREATE."""
    from devtools.mariadb import SINK_PASSWORD

    account = f"'{name}'@'127.0.0.1'"
    as_written = {"shop.": f"{db.name}.", "'sink'@'%'": account}
    db.execute(f"DROP USER IF EXISTS {account}")
    if documented:
        db.run_sql_file("grants.sql", {**as_written, "change-me": SINK_PASSWORD})
    else:
        db.execute(f"CREATE USER {account} IDENTIFIED BY '{SINK_PASSWORD}'")
    for grant in grants:
        for old, new in as_written.items():
            grant = grant.replace(old, new)
        db.execute(grant)
    return db.url.replace("sink@", f"{name}@")


def totals(db, table: str = "ops_totals") -> dict[str, Decimal]:
    """The target's amounts by key (ops_totals: the CLI tests' sink)."""
    return dict(db.rows(f"SELECT k, amount FROM {table}"))


LABELLED_KEYS = [f"k{i}" for i in range(6)]


def labelled_table(db, name: str) -> None:
    fresh_table(db, name)
    db.execute(f"ALTER TABLE {name} ADD COLUMN label VARCHAR(8)")
    db.execute(
        f"INSERT INTO {name} (k, amount) VALUES "
        + ",".join(f"('{k}', 0)" for k in LABELLED_KEYS)
    )


def wait_for_lock_waits(
    db,
    count: int = 1,
    timeout: float = 120,
    detail: Callable[[], Any] = lambda: "too few transactions came to wait for a lock",
) -> None:
    """Until ``count`` transactions wait for a lock (InnoDB's LOCK WAIT): a
    committer or a command is blocked behind a lock the test holds, instead of a
    sleep that guesses when it will be. ``detail()`` goes into the failure."""
    deadline = time.monotonic() + timeout
    while (
        db.rows(
            "SELECT COUNT(*) FROM information_schema.innodb_trx "
            "WHERE trx_state = 'LOCK WAIT'"
        )[0][0]
        < count
    ):
        assert time.monotonic() < deadline, detail()
        time.sleep(0.1)


@contextlib.contextmanager
def short_lock_waits(db, seconds: int = 3) -> Iterator[None]:
    """Sessions opened meanwhile wait ``seconds`` for a metadata lock (DDL behind
    an open transaction) instead of the server's day: a test of something that
    must not wait fails instead of hanging the suite."""
    db.execute(f"SET GLOBAL lock_wait_timeout = {seconds}")
    try:
        yield
    finally:
        db.execute("SET GLOBAL lock_wait_timeout = DEFAULT")


@contextlib.contextmanager
def server_default(db, variable: str, value: Any) -> Iterator[None]:
    """The server's GLOBAL ``variable`` (every new session's default) set to
    ``value`` meanwhile."""
    [(saved,)] = db.rows(f"SELECT @@GLOBAL.{variable}")
    db.execute(f"SET GLOBAL {variable} = %s", (value,))
    try:
        yield
    finally:
        db.execute(f"SET GLOBAL {variable} = %s", (saved,))


# Landing files, and the streams and jobs that read them.
LANDING_SCHEMA = "k STRING, amount DECIMAL(12,2), seq BIGINT"


def write_landing(
    landing: Path, batches: list[list[tuple[str, str, int]]]
) -> dict[str, Decimal]:
    """One JSON file per batch; returns the expected totals."""
    landing.mkdir(parents=True, exist_ok=True)
    expected: dict[str, Decimal] = {}
    for i, rows in enumerate(batches):
        lines = [json.dumps({"k": k, "amount": a, "seq": s}) for k, a, s in rows]
        path = landing / f"part-{i:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # Spark orders by mtime
        for k, a, _ in rows:
            expected[k] = expected.get(k, Decimal(0)) + Decimal(a)
    return expected


def run_stream(spark, sink: WalSink, landing: Path, checkpoint: Path) -> None:
    query = (
        spark.readStream.schema(LANDING_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .writeStream.foreachBatch(sink.foreach_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    settle(sink)


def landing_config(
    db, tmp_path: Path, name: str, extra: str = "", job: str = JOB, wal: str = ""
) -> Path:
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    for i in range(3):
        (landing / f"f{i}.json").write_text(
            json.dumps({"k": "a", "amount": "1.00"}) + "\n"
        )
        os.utime(landing / f"f{i}.json", (1_700_000_000 + i,) * 2)
    return write_config(
        tmp_path / f"{name}.toml",
        db,
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "k STRING, amount DECIMAL(12,2)"
options = {{ maxFilesPerTrigger = 1 }}""",
        table=name,
        wal=wal,
        job=f"{job}\n{extra}",
    )


def arrive(
    landing: Path,
    expected: dict[str, Decimal],
    files: int,
    pause: float,
    until: threading.Event | None = None,
    key: str = "k",
) -> None:
    """Write JSON files of random amounts into ``landing``, each appearing whole (as
    sources should), ``files`` of them (and on until ``until`` is set, if given); add
    them up in ``expected``. Each row is ``{key: ..., "amount": ...}``."""
    i = 0
    while i < files or (until is not None and not until.is_set()):
        rows = [
            (f"k{rng.randrange(8)}", Decimal(rng.randrange(1, 10_000)) / 100)
            for _ in range(rng.randrange(1, 30))
        ]
        tmp = landing / f".f{i:03d}.tmp"
        tmp.write_text(
            "".join(json.dumps({key: k, "amount": str(a)}) + "\n" for k, a in rows)
        )
        tmp.rename(landing / f"f{i:03d}.json")
        for k, a in rows:
            expected[k] = expected.get(k, Decimal(0)) + a
        time.sleep(pause)
        i += 1


def landing_files(landing: Path, count: int, first: int = 0) -> dict[str, Decimal]:
    """``count`` JSON files, one micro-batch each, every one touching k0; returns the
    totals they add up to."""
    landing.mkdir(exist_ok=True)
    # the table starts with every key at 0
    expected = {k: Decimal(0) for k in LABELLED_KEYS}
    for i in range(first, first + count):
        rows = [("k0", Decimal(rng.randrange(1, 999)) / 100)] + [
            (rng.choice(LABELLED_KEYS), Decimal(rng.randrange(1, 999)) / 100)
            for _ in range(4)
        ]
        lines = [
            json.dumps({"k": k, "amount": str(a), "label": f"f{i:04d}"})
            for k, a in rows
        ]
        tmp = landing / f".f{i:04d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.utime(tmp, (1_700_000_000 + i,) * 2)  # Spark takes files in mtime order
        tmp.rename(landing / f"f{i:04d}.json")
        for k, a in rows:
            expected[k] = expected.get(k, Decimal(0)) + a
    return expected


def config_for(db, tmp_path: Path, table: str, *, wal: str = "", extra: str = ""):
    """A JSON-files job with a half-second trigger."""
    return write_config(
        tmp_path / f"{table}.toml",
        db,
        source=f"""
[source]
format = "json"
path = "{tmp_path / "landing"}"
schema = "k STRING, amount DECIMAL(12,2), label STRING"
options = {{ maxFilesPerTrigger = 1 }}""",
        table=table,
        wal=wal,
        job=JOB.replace('"1 second"', '"0.5 seconds"') + "\n" + extra,
    )


# Staging without a job.
AMOUNT_NOTE_SCHEMA = "k STRING, amount DECIMAL(12,2), note STRING"


def staged(spark, config, rows, batch_id=0, partitions=1):
    instance = SinkInstance(config)
    committer = instance.start()
    stage(
        spark.createDataFrame(rows, AMOUNT_NOTE_SCHEMA).coalesce(partitions),
        WalWriter(config.wal_path, config.sink.id),
        batch_id,
    )
    return instance, committer


def amounts(n, start=0):
    return [(f"k{i}", Decimal(i + 1), "ok") for i in range(start, start + n)]


def stage_rows(
    config: Config, batch_id: int, rows: list[dict[str, Any]], schema: pa.Schema
) -> bool:
    """Stage ``rows`` (of ``schema``, in this order) as batch ``batch_id`` of the
    sink's WAL the way a small batch is staged from the driver: one Parquet file
    written by pyarrow, committed with delta-rs. No Spark, no JVM. Returns whether
    this call staged it (False: the WAL had the batch already)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    table = table.add_column(0, SEQ_COLUMN, pa.array(range(table.num_rows), pa.int64()))
    writer = WalWriter(config.wal_path, config.sink.id, config.storage)
    attempt = f"{BATCH_COLUMN}={batch_id}/{uuid.uuid4().hex}"
    written = write_file(writer, attempt, table, batch_id)
    return writer.commit(batch_id, [written], table.schema)


def files_under(path: Path) -> set[Path]:
    return {p for p in path.rglob("*") if p.is_file()}


def crashed_attempt(spark, writer, batch_id, monkeypatch, wal: Path) -> set[Path]:
    """Stage ``batch_id`` until its files are written, then fail before the Delta
    commit, as a crash there would; returns the files the attempt left."""
    before = files_under(wal)
    monkeypatch.setenv(ENV, f"stage.before_commit:{batch_id}:raise")
    df = spark.createDataFrame([(f"lost{i}", i) for i in range(6)], "k STRING, n INT")
    with pytest.raises(InjectedFault):
        stage(df.repartition(2), writer, batch_id)
    monkeypatch.delenv(ENV)
    left = files_under(wal) - before
    assert any(p.name.startswith("part-") for p in left)
    return left


# The spark-submit job, pipeline runs, and the writer the crash tests kill.
def started_until_applied(config: Path, log: Path, timeout: float = 180) -> JobProcess:
    """A streaming job run, returned once it has applied a batch of its own: its
    recovery is done and it is past its start (a "batch N applied: rows=" line in
    the log after the point the run began)."""
    offset = log.stat().st_size if log.exists() else 0
    job = JobProcess(config, log)
    deadline = time.monotonic() + timeout
    while b"applied: rows=" not in log.read_bytes()[offset:]:
        assert job.proc.poll() is None and time.monotonic() < deadline, job.tail()
        time.sleep(0.2)
    return job


def survive_kills_then_drain(
    config: Path,
    log: Path,
    feed: Callable[[threading.Event], None],
    rounds: int = 2,
    then_stop: bool = False,
    *,
    start: Callable[[], JobProcess] | None = None,
    drain: Callable[[], JobProcess] | None = None,
) -> None:
    """While ``feed`` sends data, run the streaming job and SIGKILL it at a random
    moment after it applied its first batch, ``rounds`` times (and with
    ``then_stop`` run it once more and stop it with SIGTERM, which must exit 0);
    then drain with --available-now. ``feed`` sends its own minimum and goes on until
    the event it is given is set, after the last kill or stop: every one lands while
    data arrives, however slow the starts. (Waiting for the batch, not a fixed time,
    spends no test time on a start that is quick.)

    ``start`` and ``drain`` run something else than the job: a run returned once it
    is past its start, and the run that drains, which must exit 0."""
    start = start or (lambda: started_until_applied(config, log))
    drain = drain or (lambda: JobProcess(config, log, "--available-now"))
    killed = threading.Event()
    feeding = threading.Thread(target=feed, args=(killed,))
    feeding.start()
    try:
        for stop in ["kill"] * rounds + ["terminate"] * then_stop:
            job = start()
            time.sleep(rng.uniform(0, 3))
            assert job.proc.poll() is None, job.tail()
            assert feeding.is_alive(), f"data stopped arriving before the {stop}"
            if stop == "kill":
                job.kill()
            else:
                assert job.terminate() == 0, job.tail()
    finally:
        killed.set()
    feeding.join()
    last = drain()
    assert last.wait() == 0, last.tail()


SPARK_PIPELINES = str(Path(sys.executable).with_name("spark-pipelines"))


class PipelineRun(JobProcess):
    """``spark-pipelines SUBMIT_ARGS run --spec SPEC ARGS`` from the spec's
    directory, as a job is run: one process group (the CLI's JVM, its Python, the
    local Spark Connect server's JVM; the Python workers follow the JVM out), killed
    like a job. The MySQL password stays out of its environment: the Spark side
    never reaches MySQL."""

    def __init__(
        self, spec: Path, log: Path, *args: str, submit_args: tuple[str, ...] = ()
    ) -> None:
        env = {k: v for k, v in job_env().items() if not k.startswith("WAL_SINK_")}
        self._start(
            [SPARK_PIPELINES, *submit_args, "run", "--spec", str(spec), *args],
            log,
            env,
            spec.parent,
        )


def quarantined_raw(tmp_path: Path, sink_id: str) -> list[str]:
    from wal_sink.wal.quarantine import Quarantine

    entries = Quarantine(str(tmp_path / "wal_quarantine"), sink_id).read(10_000)
    return [json.loads(e["record"])["raw"] for e in entries]


CRASH_BATCHES = [
    [(f"k{i % 7}", f"{i}.25", i) for i in range(0, 40)],
    [(f"k{i % 5}", f"{i}.50", i) for i in range(40, 90)],
    [(f"k{i % 9}", "1.00", i) for i in range(90, 120)],
]


WRITER = REPO / "tests" / "integration" / "writer_app.py"


def run_writer(config: Path, landing: Path, fault: str | None, log: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("WAL_SINK_FAULT", None)
    if fault:
        env["WAL_SINK_FAULT"] = fault
    with open(log, "ab") as out:
        proc = subprocess.run(
            [sys.executable, str(WRITER), str(config), str(landing)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            timeout=600,
        )
    return proc.returncode


# S3 (the server is the s3 fixture, tests/integration/conftest.py).
def s3_storage(s3) -> Storage:
    """What the configs' [storage] section says, for checks made from the test."""
    return Storage(endpoint=s3.endpoint, region=REGION, path_style=True)


def s3_config(path: Path, db, s3, wal: str, *, table: str, source: str = "") -> Path:
    """A sink config whose WAL (and so its quarantine) is ``wal`` on the server."""
    return write_config(
        path,
        db,
        table=table,
        wal_path=wal,
        source=source,
        wal='min_vacuum_retention = "0s"  # the tests vacuum files a moment old',
        job=JOB,
        sections=s3.storage_toml(),
    )


# The follower, and a WAL written by wal_sink 0.1.
class FollowerThread:
    """``wal-sink follow``'s loop in a thread of the test."""

    def __init__(self, config_path: Path) -> None:
        self.follower = Follower(SinkInstance(load_config(config_path)))
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.follower.run()
        except BaseException as e:
            self.failure = e

    def drain(self) -> None:
        self.follower.stop(drain=True)
        self.thread.join(120)
        assert not self.thread.is_alive()
        if self.failure:
            raise self.failure
        self.follower.instance.close()


LEGACY_WAL = REPO / "tests" / "fixtures" / "legacy_wal"


# What the unit tests build without MySQL.
def dialect_connection(server_version=(10, 11, 0)):
    """What the statement needs of a connection: its dialect, as the engine's."""
    dialect = pymysql.dialect(paramstyle="pyformat")
    dialect.server_version_info = server_version
    dialect.is_mariadb = server_version[0] == 10
    dialect._requires_alias_for_on_duplicate_key = (
        not dialect.is_mariadb and server_version >= (8, 0, 20)
    )
    return SimpleNamespace(dialect=dialect)


def config_dict(**overrides):
    raw = {
        "sink": {"id": "invoices"},
        "wal": {"path": "var/wal"},
        "mysql": {
            "url": "mysql+pymysql://sink@127.0.0.1:3306/shop",
            "table": "t",
            "key": ["org"],
            "merge": {"amount": "add"},
            "version_column": "seq",
        },
    }
    for dotted, value in overrides.items():
        section, _, key = dotted.partition("__")
        if key:
            raw.setdefault(section, {})[key] = value
        else:
            raw[section] = value
    return raw


def apply_staged(
    config, schema: pa.Schema, *batches: list[dict], first: int = 0
) -> list:
    """Stage ``batches`` from batch ``first`` on and apply them as a start does."""
    for i, rows in enumerate(batches):
        stage_rows(config, first + i, rows, schema)
    sink = SinkInstance(config)
    try:
        return sink.recover()
    finally:
        sink.close()


def open_reasons(config) -> list[str]:
    """The reasons of the sink's open quarantine entries, in staged order."""
    sink = SinkInstance(config)
    try:
        return [e.reason for e in list_entries(sink) if e.is_open]
    finally:
        sink.close()


def routed_config(path: Path, db, sink_id: str, tables: list[str]) -> Path:
    """A sink routing column ``tbl`` to ``tables`` (each keyed on ``id``), its WAL
    beside ``path``; returns ``path``."""
    sections = "".join(f'[mysql.tables.{t}]\nkey = ["id"]\n' for t in tables)
    path.write_text(
        f'[sink]\nid = "{sink_id}"\n[wal]\npath = "{path.parent / "wal"}"\n'
        f'[mysql]\nurl = "{db.url}"\nroute_column = "tbl"\n{sections}'
    )
    return path
