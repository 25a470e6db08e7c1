"""Spark Declarative Pipelines: examples/declarative_pipeline run the way its user
runs it, ``spark-pipelines run`` (a local Spark Connect server inside, the
``wal_sink`` data source on it, the virtualenv's jars from its
``spark-defaults.conf``), with the follower applying behind it.

Each test runs a copy of the example whose state (checkpoints, WAL, landing
directory) lives under the test's directory and whose MySQL is the module's
database. The pipeline runs without the MySQL password in its environment: the
Spark side never reaches MySQL.
"""

from __future__ import annotations

import shutil
import time
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from tests.helpers import (
    REPO,
    SEED,
    FollowerThread,
    PipelineRun,
    arrive,
    survive_kills_then_drain,
)

pytestmark = pytest.mark.crash

EXAMPLE = REPO / "examples" / "declarative_pipeline"
EXAMPLE_STATE = "/var/tmp/wal_sink_example"
EXAMPLE_URL = "mysql+pymysql://sink@127.0.0.1:3306/shop"
SINK_ID = "org_totals_pipeline"
CHECKPOINTS = "_checkpoints/org_totals/orders"
"""Under the pipeline's storage: the flow's checkpoints, numbered 0, 1, …"""


@pytest.fixture
def pipeline(db, tmp_path) -> Path:
    """The example copied, pointed at ``tmp_path/state`` and the module's database;
    returns its spec. The target table is left for the follower to create."""
    copy = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for path in (copy / "spark-pipeline.yml", *copy.glob("*/*.py")):
        text = path.read_text()
        assert EXAMPLE_STATE in text, path
        path.write_text(text.replace(EXAMPLE_STATE, str(tmp_path / "state")))
    toml = copy / "wal_sink.toml"
    text = toml.read_text()
    assert EXAMPLE_STATE in text and EXAMPLE_URL in text
    toml.write_text(
        text.replace(EXAMPLE_STATE, str(tmp_path / "state")).replace(
            EXAMPLE_URL, db.url
        )
    )
    (tmp_path / "state" / "landing").mkdir(parents=True)
    for t in ("org_totals", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    return copy / "spark-pipeline.yml"


def writer_epoch(wal: Path) -> int:
    """How many query runs took the WAL to stage (0 before the first)."""
    try:
        return DeltaTable(str(wal)).transaction_version(f"{SINK_ID}:writer") or 0
    except TableNotFoundError:
        return 0


def staging(spec: Path, log: Path, wal: Path, timeout: float = 180) -> PipelineRun:
    """A pipeline run, returned once it has staged a batch of its own."""
    before = writer_epoch(wal)
    run = PipelineRun(spec, log)
    deadline = time.monotonic() + timeout
    while writer_epoch(wal) == before:
        assert run.proc.poll() is None and time.monotonic() < deadline, run.tail()
        time.sleep(0.2)
    return run


def refused_refresh_then_run(spec: Path, log: Path, wal: Path) -> PipelineRun:
    """A full refresh gives the flow a new checkpoint at batch 0, which would read
    every file again: the sink refuses it and it stages nothing. With that
    checkpoint removed the first one is the latest again, and a run goes on from it
    (returned)."""
    offset, epoch = log.stat().st_size, writer_epoch(wal)
    # Spark would restart the refused flow twice more, to the same end.
    retries = ("--conf", "spark.sql.pipelines.maxFlowRetryAttempts=0")
    refresh = PipelineRun(spec, log, "--full-refresh-all", submit_args=retries)
    assert refresh.wait() == 1, refresh.tail()
    assert b"the Spark checkpoint was reset or replaced" in log.read_bytes()[offset:]
    assert writer_epoch(wal) == epoch, "the refused run staged nothing"
    shutil.rmtree(wal.with_name("pipeline-storage") / CHECKPOINTS / "1")
    return PipelineRun(spec, log)


def test_pipeline_killed_or_fully_refreshed_adds_each_file_once(db, pipeline, tmp_path):
    """A run SIGKILLed while files arrive, a full refresh, then a run that ends."""
    print(f"seed {SEED}")
    state, log = tmp_path / "state", tmp_path / "pipeline.log"
    expected: dict[str, Decimal] = {}
    follower = FollowerThread(pipeline.with_name("wal_sink.toml"))
    survive_kills_then_drain(
        pipeline,
        log,
        lambda killed: arrive(state / "landing", expected, 5, 1.0, killed, "org"),
        rounds=1,
        start=lambda: staging(pipeline, log, state / "wal"),
        drain=lambda: refused_refresh_then_run(pipeline, log, state / "wal"),
    )
    follower.drain()
    assert dict(db.rows("SELECT org, amount FROM org_totals")) == expected
    acks = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]
    assert acks == list(range(len(acks)))
    assert writer_epoch(state / "wal") == 2, "the killed run and the last one"


def test_a_full_refresh_after_the_first_batch_is_refused(db, pipeline, tmp_path):
    """The reset a batch id alone cannot show: the WAL holds exactly batch 0 when
    the full refresh's new checkpoint delivers its own batch 0, which also covers a
    file that arrived since. Taken as the staged batch 0 again, that file would
    never be staged."""
    state, log = tmp_path / "state", tmp_path / "pipeline.log"
    follower = FollowerThread(pipeline.with_name("wal_sink.toml"))
    (state / "landing" / "first.json").write_text('{"org": "a", "amount": "1.25"}\n')
    first = PipelineRun(pipeline, log)
    assert first.wait() == 0, first.tail()
    (state / "landing" / "second.json").write_text('{"org": "b", "amount": "2.50"}\n')
    last = refused_refresh_then_run(pipeline, log, state / "wal")
    assert last.wait() == 0, last.tail()
    follower.drain()
    assert db.rows("SELECT org, amount FROM org_totals ORDER BY org") == [
        ("a", Decimal("1.25")),
        ("b", Decimal("2.50")),
    ]
    assert writer_epoch(state / "wal") == 2, "the first run and the last one"
