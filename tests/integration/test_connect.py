"""The sink from Spark Connect: a real local Connect server (pyspark's own), a
client session through ``SparkSession.builder.remote``, a streaming query through
``format("wal_sink")`` on the server, and ``wal-sink follow`` as a separate
process. The follower, the server, and both at once are killed with SIGKILL
mid-stream and restarted; the MySQL totals (an ``add`` column) must be exact.

The server runs without the MySQL password in its environment: the Spark side
never reaches MySQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from devtools.spark_connect import ConnectServer
from tests.helpers import REPO, SEED, arrive, rng, write_config

pytestmark = pytest.mark.crash

WAL_SINK = str(Path(sys.executable).with_name("wal-sink"))
CLIENT = Path(__file__).with_name("connect_client.py")
STARTED: list[subprocess.Popen] = []
"""Clients and followers the test started, killed when it ends."""


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    for process in STARTED:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    STARTED.clear()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAL_SINK_")}
    connect = ConnectServer(tmp_path_factory.mktemp("connect"), env=env)
    connect.start()
    yield connect
    connect.kill()


class FollowProcess:
    """``wal-sink -c CONFIG follow`` in a process group of its own."""

    def __init__(self, config: Path, log: Path) -> None:
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [WAL_SINK, "-c", str(config), "follow"],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        STARTED.append(self.proc)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self, timeout: float = 120) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout)


def applied(db, follower: FollowProcess, batches: int, timeout: float = 180) -> None:
    """Wait until ``batches`` more batches are acked, then a random moment more,
    so the next kill lands mid-stream."""

    def acked() -> int:
        try:
            return db.rows("SELECT COUNT(*) FROM wal_sink_ack")[0][0]
        except Exception:  # no ack table before the first follower's start
            return 0

    first = acked()
    deadline = time.monotonic() + timeout
    while acked() < first + batches:
        assert follower.proc.poll() is None, "the follower exited"
        assert time.monotonic() < deadline, f"not {batches} batches in {timeout}s"
        time.sleep(0.2)
    time.sleep(rng.uniform(0, 1.5))


def start_query(
    server: ConnectServer, config: Path, landing: Path, cp: Path, mode: str
) -> subprocess.Popen:
    """The client (connect_client.py) starting the query on the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAL_SINK_")}
    log = open(cp.parent / "client.log", "ab")
    client = subprocess.Popen(
        [sys.executable, str(CLIENT), server.url, str(config), str(landing), str(cp)]
        + [mode],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    STARTED.append(client)
    return client


def test_connect_query_and_follower_killed_mid_stream_land_exactly_once(
    server, db, tmp_path
):
    print(f"seed {SEED}")
    for t in ("connect_totals", "wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE connect_totals (k VARCHAR(16) PRIMARY KEY, "
        "amount DECIMAL(16,2)) ENGINE=InnoDB"
    )
    config = write_config(
        tmp_path / "connect.toml", db, table="connect_totals", wal="max_pending = 2"
    )
    landing, cp, log = tmp_path / "landing", tmp_path / "cp", tmp_path / "follow.log"
    landing.mkdir()
    expected: dict[str, Decimal] = {}
    killed = threading.Event()  # files arrive until the last kill, however slow
    feeding = threading.Thread(target=arrive, args=(landing, expected, 30, 0.4, killed))
    feeding.start()

    def kill_mid_stream(*processes) -> None:
        assert feeding.is_alive(), "data stopped arriving before the kill"
        for process in processes:
            process.kill()

    try:
        start_query(server, config, landing, cp, "processing")
        follower = FollowProcess(config, log)
        applied(db, follower, 2)
        kill_mid_stream(follower)  # the follower alone
        follower = FollowProcess(config, log)
        applied(db, follower, 2)
        kill_mid_stream(server)  # the server alone: the query (and its client) too
        server.start()
        start_query(server, config, landing, cp, "processing")
        applied(db, follower, 2)
        kill_mid_stream(server, follower)  # both at once
    finally:
        killed.set()
    feeding.join()
    server.start()
    follower = FollowProcess(config, log)

    # What is left: one query run that drains, then SIGTERM applies the rest.
    drain = start_query(server, config, landing, cp, "available-now")
    assert drain.wait(300) == 0, (tmp_path / "client.log").read_text()[-3000:]
    assert follower.terminate() == 0, log.read_text()[-3000:]
    got = dict(db.rows("SELECT k, amount FROM connect_totals"))
    assert got == expected, log.read_text()[-3000:]
    acks = [r[0] for r in db.rows("SELECT batch_id FROM wal_sink_ack ORDER BY 1")]
    assert acks == list(range(len(acks))) and len(acks) >= 10
    text = log.read_text()
    assert "applied: rows=" in text and "stopped; every staged batch is applied" in text
    assert db.rows("SELECT epoch FROM wal_sink_lease")[0][0] == 3, "3 follower starts"
    wal = DeltaTable(str(tmp_path / "wal"))
    assert wal.transaction_version("connect:writer") >= 2, "query runs took the WAL"
